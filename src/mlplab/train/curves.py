"""A run's training curves as a figure: ``<run>/train_curves.png``, written when training ends.

Four panels from ``metrics.jsonl``: loss and accuracy (rows) against the optimiser step and against
the run's wall time in seconds (columns; ``time_s``, over resumes). The training split's loss and accuracy are the epoch
means, and with ``run.log_every_steps=N`` also the mean of every N steps (a thinner line); the
periodic evaluation (``val_`` with a held-out split, else ``test_``) is drawn at the end of each
evaluated epoch. Records written before ``time_s`` existed are placed at the sum of the epoch
times. matplotlib is imported here only when a figure is drawn, so ``import
mlplab.train`` stays light.
"""
from __future__ import annotations

import json
import sys
from itertools import accumulate
from pathlib import Path
from typing import Any

from ..utils.figures import save_figure
from .loggers import STEP_KIND

__all__ = ["CURVES_FILE", "read_metrics", "save_curves"]

CURVES_FILE = "train_curves.png"


def read_metrics(run_dir: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(epoch records, step records) of ``<run_dir>/metrics.jsonl``, in file order; lines that do
    not read as JSON objects (cut by a kill) are left out."""
    epochs, steps = [], []
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return epochs, steps
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "step" in rec:
            (steps if rec.get("kind") == STEP_KIND else epochs).append(rec)
    return epochs, steps


def _series(records: list[dict[str, Any]], key: str, times: list[float]) -> tuple[list, list, list]:
    """(steps, times, values) of the records that hold ``key``."""
    kept = [(r["step"], t, r[key]) for r, t in zip(records, times) if isinstance(r.get(key), (int, float))]
    return [k[0] for k in kept], [k[1] for k in kept], [k[2] for k in kept]


def save_curves(run_dir: str | Path) -> Path | None:
    """Draw ``<run_dir>/train_curves.png`` from its ``metrics.jsonl``; None when it holds no record."""
    epochs, steps = read_metrics(run_dir)
    if not epochs and not steps:
        return None
    from matplotlib.figure import Figure

    summed = accumulate(float(r.get("epoch_time_s", r.get("train_time_s", 0.0))) for r in epochs)
    epoch_times = [float(r.get("time_s", t)) for r, t in zip(epochs, summed)]
    step_times = [float(r.get("time_s", 0.0)) for r in steps]
    split = "val" if any("val_loss" in r for r in epochs) else "test"
    fig = Figure(figsize=(10, 6.5))
    axes = fig.subplots(2, 2, sharex="col")
    for row, (metric, label) in enumerate((("loss", "loss"), ("acc", "accuracy"))):
        for col, xlabel in enumerate(("step", "wall time (s)")):
            ax = axes[row][col]
            s, t, v = _series(steps, f"train_{metric}", step_times)
            if v:
                ax.plot(s if col == 0 else t, v, lw=0.8, alpha=0.7, label=f"train, every {_every(steps)} steps")
            s, t, v = _series(epochs, f"train_{metric}", epoch_times)
            ax.plot(s if col == 0 else t, v, "o-", ms=3, label="train, epoch mean")
            s, t, v = _series(epochs, f"{split}_{metric}", epoch_times)
            if v:
                ax.plot(s if col == 0 else t, v, "s-", ms=3, label=split)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel(xlabel)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(Path(run_dir).resolve().name)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.08, top=0.93, hspace=0.08, wspace=0.2)
    try:
        return save_figure(fig, Path(run_dir) / CURVES_FILE, formats=("png",), dpi=100, tight=False)[0]
    except OSError as e:  # a full disk after results.json was written: the run stands, say so
        print(f"mlplab train: warning: cannot write {Path(run_dir) / CURVES_FILE} ({e.strerror or e}); the run's "
              "results are written", file=sys.stderr)
        return None


def _every(steps: list[dict[str, Any]]) -> int:
    """The step interval of the step records (the first difference; the first record's step)."""
    return steps[1]["step"] - steps[0]["step"] if len(steps) > 1 else steps[0]["step"]
