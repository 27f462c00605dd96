"""``mlplab reproduce``: run a published experiment by id, then write its report.

    mlplab reproduce --list
    mlplab reproduce fig6 --scale cpu --jobs 2
    mlplab reproduce fig6 --scale cpu --protocol          # print the protocol's hash and content
    mlplab reproduce fig6 --scale cpu --confirm --jobs 2  # the frozen protocol on fresh seeds
    mlplab reproduce --all --scale cpu --confirm --jobs 2 # the confirmation campaign (docs/experiments.md)
    mlplab reproduce table1 --scale paper --dataset cifar100 --executor slurm --jobs 18
"""
from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path
from typing import Iterator

from ..experiments.recipes import SCALES

#: how this command takes overrides (``mlplab.cli.dotted_options``): --optim.lr=0.1 is --set optim.lr=0.1
OVERRIDES = "--set"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", help="experiment id (fig2a-c, fig2d, fig4, ..., tableS3)")
    parser.add_argument("--list", action="store_true", help="list the experiments with their runs and estimated cost")
    parser.add_argument("--all", action="store_true",
                        help="with --confirm: every id with this scale, in campaign order, committing runs to "
                             "--results")
    parser.add_argument("--ids", default=None, metavar="ID,ID",
                        help="with --all: only these ids (comma-separated), still in campaign order")
    parser.add_argument("--results", default="docs/results",
                        help="with --all: the folder of committed results (default docs/results)")
    parser.add_argument("--scale", choices=SCALES, default="cpu",
                        help="smoke: seconds; cpu: ~15-25 min on 2 cores; paper: the published setting")
    parser.add_argument("--dataset", default=None,
                        help="dataset (default: the published one; at cpu scale Fashion-MNIST when it is absent)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--executor", choices=("inline", "local", "slurm"), default=None,
                        help="default: local when --jobs > 1, else inline")
    parser.add_argument("--out", default=None, help="output folder (default: runs/experiments/ID-SCALE)")
    parser.add_argument("--lockstep", choices=("auto", "on", "off"), default="auto",
                        help="train a sweep point's seeds together as one stacked model: where measured to pay "
                             "(auto), wherever supported (on), or never (off); inline and local executors")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="run-config override for every training run, e.g. schedule.epochs=10 (repeatable; "
                             "--schedule.epochs=10 is the same)")
    parser.add_argument("--no-report", action="store_true", help="run only; `mlplab report` later")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                        help="submitit parameter for --executor slurm (repeatable)")
    parser.add_argument("--confirm", action="store_true",
                        help="a confirmatory run: the frozen protocol on fresh seeds (refused when it is not frozen)")
    parser.add_argument("--protocol", action="store_true",
                        help="print the protocol (runs, seeds, claims, rules) and its hash, then stop")
    parser.add_argument("--freeze", action="store_true",
                        help="freeze the confirmatory protocol into experiments/data/protocols/ID.json (with --reason)")
    parser.add_argument("--reason", default="", help="why this protocol is frozen (with --freeze)")


@contextlib.contextmanager
def _out_lock(id: str, scale: str, out: str | None, role: str = "exploratory") -> Iterator[None]:
    """Hold the experiment folder's lock; a folder made here and refused before any run is removed."""
    from ..experiments.executors import SWEEP_BUSY
    from ..experiments.registry import default_out_dir
    from ..utils.io import claimed_folder

    with claimed_folder(Path(out) if out else default_out_dir(id, scale, role), SWEEP_BUSY):
        yield


def _protocol(args: argparse.Namespace) -> int:
    """``--protocol`` (print) and ``--freeze`` (write) the protocol of one id."""
    import json

    from ..experiments.protocol import canonical
    from ..experiments.registry import experiment_protocol, freeze_protocol

    role = "confirmatory" if (args.confirm or args.freeze) else "exploratory"
    if args.freeze:
        h = freeze_protocol(args.id, args.scale, args.dataset, args.reason)
        print(f"froze the {args.scale} protocol of {args.id}: {h} (commit src/mlplab/experiments/data/protocols/"
              f"{args.id}.json before the confirmatory run)")
        return 0
    content, h = experiment_protocol(args.id, args.scale, args.dataset, role=role)
    print(f"protocol {h} ({role}, {len(content['runs'])} runs, seeds {content['seeds']}, "
          f"{len(content['claims'])} claims)")
    print(json.dumps(json.loads(canonical(content)), indent=1, ensure_ascii=False))
    return 0


def _campaign(args: argparse.Namespace) -> int:
    """``--all --confirm``: the confirmation campaign (mlplab.experiments.campaign)."""
    from ..errors import BadInput
    from ..experiments.campaign import run_campaign

    if not args.confirm or args.id:
        raise BadInput("--all runs the confirmation campaign: give --all --confirm (and no id)")
    ids = None
    if args.ids:
        from ..experiments.registry import get_experiment

        ids = [get_experiment(i.strip()).id for i in args.ids.split(",") if i.strip()]  # an unknown id: one sentence
    records = run_campaign(args.scale, ids=ids, jobs=args.jobs,
                           executor=args.executor or ("local" if args.jobs > 1 else "inline"),
                           results_root=Path(args.results))
    failed = [r["id"] for r in records if r["status"] == "failed runs"]
    print(f"campaign: {len(records)} ids, {len(failed)} with failed runs"
          + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    from ..experiments.registry import format_list, get_experiment, reproduce
    from ..train.config import parse_overrides

    if args.list:
        print(format_list())
        return 0
    if args.all:
        return _campaign(args)
    if not args.id:
        print("mlplab reproduce: give an experiment id, --list or --all --confirm", file=sys.stderr)
        return 2
    if args.protocol or args.freeze:
        return _protocol(args)
    exp = get_experiment(args.id)
    executor = args.executor or ("local" if args.jobs > 1 else "inline")
    parts = [exp.id, "--scale", args.scale]
    for flag, v in (("--dataset", args.dataset), ("--jobs", args.jobs if args.jobs != 1 else None),
                    ("--executor", args.executor), ("--out", args.out),
                    ("--lockstep", args.lockstep if args.lockstep != "auto" else None)):
        if v is not None:
            parts += [flag, str(v)]
    for o in args.overrides:
        parts += ["--set", o]
    if args.confirm:
        parts.append("--confirm")
    cmd = "mlplab reproduce " + " ".join(shlex.quote(a) for a in parts)
    slurm = parse_overrides(args.slurm, what="--slurm", example="slurm_partition=gpu")
    overrides = parse_overrides(args.overrides, what="--set")
    role = "confirmatory" if args.confirm else "exploratory"
    # a second reproduce of the same --out is refused before it writes
    with _out_lock(exp.id, args.scale, args.out, role):
        res = reproduce(exp.id, args.scale, dataset=args.dataset, out_dir=args.out, jobs=args.jobs, executor=executor,
                        slurm=slurm, report=not args.no_report, command=cmd, overrides=overrides, role=role,
                        lockstep=args.lockstep)
    print(f"{res['out_dir']}: {len(res['status'])} runs, {len(res['failed'])} failed")
    if res["report"]:
        print(f"report: {res['report']}")
    return 1 if res["failed"] else 0
