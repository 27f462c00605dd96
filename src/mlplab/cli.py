"""The ``mlplab`` command. Thin: every subcommand is a module of ``mlplab.commands`` with
``add_arguments(parser)`` and ``run(args) -> int`` that calls library functions."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("mlplab.commands.models", "list registered models with parameters and FLOPs"),
    "plan": ("mlplab.commands.plan", "plan (S, C) pairs / SW-MLP widths for a connection budget"),
    "demo": ("mlplab.commands.demo", "build models, check the effective wide MLP, print a table"),
    "train": ("mlplab.commands.train", "train a model from a config"),
    "sweep": ("mlplab.commands.sweep", "run a sweep of training runs"),
    "reproduce": ("mlplab.commands.reproduce", "run a published experiment by id"),
    "report": ("mlplab.commands.report", "aggregate runs of an experiment into figures and a report"),
    "finetune": ("mlplab.commands.finetune", "fine-tune or linear-probe a pretrained checkpoint"),
    "convert": ("mlplab.commands.convert", "convert timm / Flax / Scaling-MLPs checkpoints to mlplab or timm"),
}


def _available() -> dict[str, tuple[str, str]]:
    out = {}
    for name, (mod, help_) in COMMANDS.items():
        if importlib.util.find_spec(mod) is not None:
            out[name] = (mod, help_)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlplab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (mod, help_) in _available().items():
        p = sub.add_parser(name, help=help_, description=help_)
        importlib.import_module(mod).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(_available()[args.command][0])
    try:
        return int(module.run(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as e:
        if os.environ.get("MLPLAB_DEBUG"):
            raise
        print(f"mlplab {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
