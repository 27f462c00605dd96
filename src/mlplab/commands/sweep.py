"""``mlplab sweep``: run a sweep — an experiment id (at a scale) or a JSON / Python sweep file.

    mlplab sweep fig6 --scale cpu --jobs 2              # the runs of an experiment, no report
    mlplab sweep my_sweep.json --out runs/lr --jobs 2   # a sweep file
    mlplab sweep fig5 --scale paper --executor slurm --dry-run
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..experiments.recipes import SCALES

#: how this command takes overrides (``mlplab.cli.dotted_options``): --optim.lr=0.1 is --set optim.lr=0.1
OVERRIDES = "--set"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", help="an experiment id (see `mlplab reproduce --list`) or a .json/.py sweep file")
    parser.add_argument("--scale", choices=SCALES, default="cpu",
                        help="scale of an experiment id (default: cpu)")
    parser.add_argument("--dataset", default=None, help="dataset of an experiment id (default: the published one)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at a time (local: processes; slurm: array parallelism)")
    parser.add_argument("--executor", choices=("inline", "local", "slurm"), default=None,
                        help="inline (this process), local (worker processes) or slurm (submitit); "
                             "default: local when --jobs > 1, else inline")
    parser.add_argument("--out", default=None,
                        help="output folder (default: runs/experiments/ID-SCALE or runs/sweeps/NAME)")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and their folders; run nothing")
    parser.add_argument("--lockstep", choices=("auto", "on", "off"), default="auto",
                        help="train a sweep point's seeds together as one stacked model: where measured to pay "
                             "(auto), wherever supported (on), or never (off); inline and local executors")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="run-config override for every training run of an experiment id (repeatable; "
                             "--optim.lr=0.1 is the same as --set optim.lr=0.1)")
    parser.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                        help="submitit parameter for --executor slurm, e.g. slurm_partition=gpu (repeatable)")


def run(args: argparse.Namespace) -> int:
    from ..experiments.executors import finished, run_sweep
    from ..experiments.registry import default_out_dir, get_experiment, plan_experiment, reproduce
    from ..experiments.sweep import expand, load_sweep_file
    from ..train.config import parse_overrides

    executor = args.executor or ("local" if args.jobs > 1 else "inline")
    is_file = Path(args.sweep).suffix in (".json", ".py")
    if is_file:
        sweeps = load_sweep_file(args.sweep)
        out = Path(args.out) if args.out else Path("runs") / "sweeps" / sweeps[0].name
        stages = [sweeps]
    else:
        ov = parse_overrides(args.overrides, what="--set")
        exp, sc, plan = plan_experiment(args.sweep, args.scale, args.dataset, check_available=not args.dry_run,
                                        overrides=ov)
        out = Path(args.out) if args.out else default_out_dir(exp.id, args.scale)
        stages = plan.stages
    if args.dry_run:
        n = 0
        for i, stage in enumerate(stages):
            for sw in stage:
                specs = expand(sw)
                print(f"stage {i + 1} sweep {sw.name}: {len(specs)} runs ({sw.task})")
                for s in specs:
                    done = finished(out / sw.name / s.name)
                    print(f"  {'[done] ' if done else ''}{out / sw.name / s.name}")
                n += len(specs)
        print(f"{n} runs in {out}")
        return 0
    slurm = parse_overrides(args.slurm, what="--slurm", example="slurm_partition=gpu")
    if is_file:
        res = run_sweep(stages[0], out, jobs=args.jobs, executor=executor, slurm=slurm, lockstep=args.lockstep)
        print(f"{out}: " + ", ".join(f"{v} {k}" for k, v in sorted(res.counts().items())))
        return 1 if res.failed else 0
    res = reproduce(get_experiment(args.sweep).id, args.scale, dataset=args.dataset, out_dir=out, jobs=args.jobs,
                    executor=executor, slurm=slurm, report=False, overrides=ov, lockstep=args.lockstep)
    print(f"{out}: {len(res['status'])} runs, {len(res['failed'])} failed; `mlplab report {args.sweep} --out {out}` "
          "aggregates them")
    return 1 if res["failed"] else 0
