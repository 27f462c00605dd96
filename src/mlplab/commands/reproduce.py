"""``mlplab reproduce``: run a published experiment by id, then write its report.

    mlplab reproduce --list
    mlplab reproduce fig6 --scale cpu --jobs 2
    mlplab reproduce table1 --scale paper --dataset cifar100 --executor slurm --jobs 18
"""
from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import sys
from pathlib import Path
from typing import Iterator

from ..experiments.recipes import SCALES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", help="experiment id (fig2a-c, fig2d, fig4, ..., tableS3)")
    parser.add_argument("--list", action="store_true", help="list the experiments with their runs and estimated cost")
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
                        help="run-config override for every training run, e.g. schedule.epochs=10 (repeatable)")
    parser.add_argument("--no-report", action="store_true", help="run only; `mlplab report` later")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                        help="submitit parameter for --executor slurm (repeatable)")


@contextlib.contextmanager
def _out_lock(id: str, scale: str, out: str | None) -> Iterator[None]:
    """Hold the experiment folder's lock; a folder made here and refused before any run is removed."""
    from ..experiments.executors import SWEEP_BUSY
    from ..experiments.registry import default_out_dir
    from ..utils.io import LOCK_FILE, folder_lock

    folder = Path(out) if out else default_out_dir(id, scale)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with folder_lock(folder, SWEEP_BUSY):
            yield
    except BaseException:
        if created and [p.name for p in folder.iterdir()] == [LOCK_FILE]:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def run(args: argparse.Namespace) -> int:
    from ..experiments.registry import format_list, get_experiment, reproduce
    from ..train.config import parse_overrides

    if args.list:
        print(format_list())
        return 0
    if not args.id:
        print("mlplab reproduce: give an experiment id or --list", file=sys.stderr)
        return 2
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
    cmd = "mlplab reproduce " + " ".join(shlex.quote(a) for a in parts)
    slurm = parse_overrides(args.slurm, what="--slurm", example="slurm_partition=gpu")
    overrides = parse_overrides(args.overrides, what="--set")
    with _out_lock(exp.id, args.scale, args.out):  # a second reproduce of the same --out is refused before it writes
        res = reproduce(exp.id, args.scale, dataset=args.dataset, out_dir=args.out, jobs=args.jobs, executor=executor,
                        slurm=slurm, report=not args.no_report, command=cmd, overrides=overrides,
                        lockstep=args.lockstep)
    print(f"{res['out_dir']}: {len(res['status'])} runs, {len(res['failed'])} failed")
    if res["report"]:
        print(f"report: {res['report']}")
    return 1 if res["failed"] else 0
