"""``mlplab train CONFIG [section.key=value ...] [--resume] [--overwrite] [--print-config [--format yaml]]``

CONFIG is a named config (``mlplab train --list``) or a config file: JSON, YAML (``my.yaml``) or
TOML (``my.toml``). Overrides use dotted keys (``optim.lr=0.1 model.kwargs.depth=4
schedule.epochs=null schedule.steps=500``), also written ``--optim.lr=0.1`` or ``--optim.lr 0.1``;
values are read as JSON, then Python literals, else strings. Under ``torchrun --nproc_per_node=N``
the same command trains with DistributedDataParallel.
"""
from __future__ import annotations

import argparse
import sys

#: how this command takes overrides (``mlplab.cli.dotted_options``): KEY=VALUE positionals
OVERRIDES = "positional"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="a named config (--list shows them) or a JSON, YAML or TOML file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. optim.lr=0.1 run.name=try1, or --optim.lr=0.1, --optim.lr 0.1 "
                             "(--list-keys shows every key)")
    parser.add_argument("--resume", action="store_true", help="continue the run in its folder from the last checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    add_format_argument(parser)
    parser.add_argument("--list", action="store_true", help="list the named configs and exit")
    parser.add_argument("--list-keys", action="store_true",
                        help="list every config key with its type, default and meaning, and exit")


def run(args: argparse.Namespace) -> int:
    from ..train import CONFIGS, make_config, train
    from ..train.config import to_dict
    from ..train.presets import DESCRIPTIONS
    from ..train.runplan import plan_run
    from ..utils.configfile import format_config

    if args.list:
        for name in sorted(CONFIGS):
            print(f"{name}\n    " + DESCRIPTIONS[name].strip().replace("\n    ", "\n    "))
        return 0
    if args.list_keys:
        from ..train.config import RunConfig
        from ..utils.typed import describe_fields

        rows = describe_fields(RunConfig)
        widths = [max(len(r[k]) for r in rows) for k in ("key", "type", "default")]
        for r in rows:
            print(f"{r['key']:{widths[0]}}  {r['type']:{widths[1]}}  {r['default']:{widths[2]}}  "
                  f"{r['meaning']}".rstrip())
        return 0
    if not args.config:
        print("mlplab train: error: give a CONFIG (named config or JSON/YAML/TOML file); --list shows the named ones",
              file=sys.stderr)
        return 2
    if args.resume and args.overwrite:
        print("mlplab train: error: --resume and --overwrite exclude each other", file=sys.stderr)
        return 2
    check_format(args)
    plan = plan_run(make_config(args.config, args.overrides))  # before anything is written or printed
    if args.print_config:
        print(format_config(to_dict(plan.cfg), args.format))
        return 0
    results = train(plan, resume=args.resume, overwrite=args.overwrite)
    return 0 if results else 1


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--format json|yaml`` of ``--print-config`` (train and finetune)."""
    from ..utils.configfile import FORMATS

    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="how --print-config prints the config: json (default) or yaml; either reads back "
                             "as CONFIG")


def check_format(args: argparse.Namespace) -> None:
    """``--format`` only with ``--print-config``; json when not given."""
    from ..errors import BadInput

    if args.format is not None and not args.print_config:
        raise BadInput(f"--format {args.format} says how --print-config prints the config; add --print-config")
    args.format = args.format or "json"
