"""``mlplab report``: aggregate an experiment's runs into results.csv, figures and report.md.

    mlplab report fig6                        # runs/experiments/fig6-SCALE: the one that exists
    mlplab report fig6 --scale quick          # runs/experiments/fig6-quick
    mlplab report fig6 --out runs/my_fig6     # any folder made by `mlplab reproduce --out`
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..experiments.recipes import SCALES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="experiment id")
    parser.add_argument("--scale", choices=SCALES, default=None,
                        help="which default folder (runs/experiments/ID-SCALE) when --out is not given; "
                             "default: the one that holds runs")
    parser.add_argument("--out", default=None, help="the experiment folder")


def experiment_folder(id: str, scale: str | None = None, out: str | None = None) -> Path:
    """The folder ``mlplab report`` reads: ``out``, else ``runs/experiments/ID-SCALE``; without a
    scale, the one whose folder holds runs (``experiment.json``), or a refusal listing them when
    several do. A folder without runs is refused with the command that makes them."""
    from ..errors import BadInput
    from ..experiments.registry import default_out_dir

    if out is not None:
        folder = Path(out)
    elif scale is not None:
        folder = default_out_dir(id, scale)
    else:
        found = [s for s in SCALES if (default_out_dir(id, s) / "experiment.json").is_file()]
        if len(found) > 1:
            raise BadInput(f"runs of {id} are in {', '.join(str(default_out_dir(id, s)) for s in found)}; choose one "
                           f"with --scale {' or --scale '.join(found)} (or give a folder with --out)")
        if not found:
            raise BadInput(f"no runs of {id} in runs/experiments/{id}-{{{','.join(SCALES)}}}; make them with "
                           f"`mlplab reproduce {id} --scale quick` (or give their folder with --out)")
        folder = default_out_dir(id, found[0])
    if not (folder / "experiment.json").is_file():
        make = f"mlplab reproduce {id} --out {out}" if out is not None else f"mlplab reproduce {id} --scale {scale}"
        raise BadInput(f"{folder} holds no runs of {id} (no experiment.json); make them with `{make}`")
    return folder


def run(args: argparse.Namespace) -> int:
    from ..experiments.registry import get_experiment, report_experiment

    exp = get_experiment(args.id)
    res = report_experiment(exp.id, experiment_folder(exp.id, args.scale, args.out), verbose=True)
    if res["error"]:
        print("analysis failed; see the end of report.md")
        return 1
    return 0
