"""The ``mlplab`` command. Thin: every subcommand is a module of ``mlplab.commands`` with
``add_arguments(parser)`` and ``run(args) -> int`` that calls library functions."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from .errors import RunFailure

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
    "eval": ("mlplab.commands.eval", "evaluate a run or checkpoint on a dataset split (accuracy, loss, img/s)"),
    "convert": ("mlplab.commands.convert", "convert timm / Flax / Scaling-MLPs checkpoints to mlplab or timm"),
}


_DEBUG_HINT = " (MLPLAB_DEBUG=1 shows the traceback)"


def explain(e: BaseException) -> tuple[int | None, str]:
    """The exit status and one-line message for an expected error (``mlplab.errors``): 2 for bad
    input, 1 for a runtime failure; ``(None, "")`` for anything else, which is a bug."""
    if isinstance(e, (ValueError, FileNotFoundError)):  # BadInput, BadType and the library's plain ValueErrors
        return 2, str(e)
    if isinstance(e, RunFailure):
        return 1, str(e)
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return 1, ("out of memory; lower run.batch_size or the model size, or use a machine with more "
                   "memory" + _DEBUG_HINT)
    if isinstance(e, OSError) and e.errno is not None:
        where = f" {e.filename}" if e.filename else ""
        return 1, f"cannot use{where}: {e.strerror or e}; free space, fix permissions or choose another run.out_dir" \
            + _DEBUG_HINT
    if isinstance(e, (OverflowError, RecursionError)):
        return 2, f"a value is too large to handle ({e}); use a smaller one"
    return None, ""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: the list of commands (each command's arguments: ``command_parser``)."""
    parser = argparse.ArgumentParser(prog="mlplab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser


def command_parser(name: str) -> argparse.ArgumentParser:
    module, help_ = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"mlplab {name}", description=help_)
    importlib.import_module(module).add_arguments(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as a namespace with ``command``. A command's arguments are parsed
    intermixed, so positional overrides may follow a flag (``train CONFIG --overwrite k=v``), which
    plain ``parse_args`` refuses."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:  # help, no command, or an unknown one (argparse says so)
        return build_parser().parse_args(argv)
    args = command_parser(argv[0]).parse_intermixed_args(argv[1:])
    args.command = argv[0]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except Exception as e:
        status, message = explain(e)
        if status is None or os.environ.get("MLPLAB_DEBUG"):
            raise  # a bug (or MLPLAB_DEBUG=1): the traceback is what helps
        print(f"mlplab {args.command}: error: {message}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
