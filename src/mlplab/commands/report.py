"""``mlplab report``: aggregate an experiment's runs into results.csv, figures and report.md.

    mlplab report fig6                        # runs/experiments/fig6-cpu
    mlplab report fig6 --out runs/my_fig6     # any folder made by `mlplab reproduce --out`
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..experiments.recipes import SCALES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="experiment id")
    parser.add_argument("--scale", choices=SCALES, default="cpu",
                        help="which default folder (runs/experiments/ID-SCALE) when --out is not given")
    parser.add_argument("--out", default=None, help="the experiment folder")


def run(args: argparse.Namespace) -> int:
    from ..experiments.registry import default_out_dir, get_experiment, report_experiment

    exp = get_experiment(args.id)
    out = Path(args.out) if args.out else default_out_dir(exp.id, args.scale)
    res = report_experiment(exp.id, out, verbose=True)
    if res["error"]:
        print("analysis failed; see the end of report.md")
        return 1
    return 0
