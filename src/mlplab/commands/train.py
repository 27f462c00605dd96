"""``mlplab train CONFIG [section.key=value ...] [--resume] [--overwrite] [--print-config]``

CONFIG is a named config (``mlplab train --list``) or a JSON file. Overrides use dotted keys
(``optim.lr=0.1 model.kwargs.depth=4 schedule.epochs=null schedule.steps=500``); values are read
as JSON, then Python literals, else strings. Under ``torchrun --nproc_per_node=N`` the same
command trains with DistributedDataParallel.
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="a named config (--list shows them) or a JSON file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. optim.lr=0.1 run.name=try1 (--list-keys shows every key)")
    parser.add_argument("--resume", action="store_true", help="continue the run in its folder from the last checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    parser.add_argument("--list", action="store_true", help="list the named configs and exit")
    parser.add_argument("--list-keys", action="store_true",
                        help="list every config key with its type, default and meaning, and exit")


def run(args: argparse.Namespace) -> int:
    from ..train import CONFIGS, make_config, train
    from ..train.config import to_dict
    from ..train.runplan import plan_run
    from ..train.presets import DESCRIPTIONS

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
            print(f"{r['key']:{widths[0]}}  {r['type']:{widths[1]}}  {r['default']:{widths[2]}}  {r['meaning']}".rstrip())
        return 0
    if not args.config:
        print("mlplab train: error: give a CONFIG (named config or JSON file); --list shows the named ones",
              file=sys.stderr)
        return 2
    if args.resume and args.overwrite:
        print("mlplab train: error: --resume and --overwrite exclude each other", file=sys.stderr)
        return 2
    plan = plan_run(make_config(args.config, args.overrides))  # before anything is written or printed
    if args.print_config:
        print(json.dumps(to_dict(plan.cfg), indent=2))
        return 0
    results = train(plan, resume=args.resume, overwrite=args.overwrite)
    return 0 if results else 1
