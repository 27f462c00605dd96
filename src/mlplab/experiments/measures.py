"""The numbers an analysis computes from finished runs, so that the spec modules hold settings,
claims and wiring only (tests/test_layering.py): means, spreads and medians over seeds or
values, a seed-mean curve, a figure's grids, a run's saved arrays, and the first-layer units of
sm-weights' trained runs (:func:`first_layer_units`)."""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .aggregate import RunRecord, test_error

__all__ = ["mean", "sd", "nanmean", "nanmedian", "median", "seed_mean", "seed_sd", "mean_departure",
           "mean_curve", "bin_centres", "log_grid", "run_arrays", "first_layer_units"]


def mean(xs: Sequence[float]) -> float:
    """The mean of ``xs`` (NaN when one is NaN)."""
    return float(np.mean(xs))


def sd(xs: Sequence[float], ddof: int = 0) -> float:
    """The standard deviation of ``xs`` with ``ddof`` degrees of freedom taken off (0: population)."""
    return float(np.std(xs, ddof=ddof))


def nanmean(xs: Sequence[float]) -> float:
    """The mean of the values of ``xs`` that are not NaN."""
    return float(np.nanmean(xs))


def nanmedian(xs: Sequence[float]) -> float:
    """The median of the values of ``xs`` that are not NaN."""
    return float(np.nanmedian(xs))


def median(xs: Sequence[float]) -> float:
    """The median of ``xs``; NaN when there are none."""
    return float(statistics.median(xs)) if xs else float("nan")


def seed_mean(d: Mapping[int, float]) -> float:
    """The mean over seeds of the finite values of ``d`` (seed → value); NaN when none is finite."""
    vals = [x for x in d.values() if math.isfinite(x)]
    return float(np.mean(vals)) if vals else float("nan")


def seed_sd(d: Mapping[int, float]) -> float:
    """The sample standard deviation over seeds of the finite values of ``d``; 0 for fewer than two."""
    vals = [x for x in d.values() if math.isfinite(x)]
    return float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0


def mean_departure(values: Sequence[float], centre: float) -> float | None:
    """The mean of |value − ``centre``| over the finite ``values``; None when none is finite."""
    if not np.isfinite(values).any():
        return None
    return float(np.nanmean(np.abs(np.asarray(values, dtype=float) - centre)))


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """The mean over ``curves`` at each step, NaN left out, over the steps every curve has."""
    n = min(len(c) for c in curves)
    if not n:
        return []
    return np.nanmean(np.array([c[:n] for c in curves], dtype=float), axis=0).tolist()


def bin_centres(edges: Sequence[float]) -> np.ndarray:
    """The centre of each bin of a histogram with ``edges`` (empty for no edges)."""
    e = np.array(edges)
    return (e[:-1] + e[1:]) / 2


def log_grid(lo: float, hi: float, n: int = 100) -> np.ndarray:
    """``n`` points from ``lo`` to ``hi`` evenly spaced in log (a fitted curve's x values)."""
    return np.geomspace(lo, hi, n)


def run_arrays(run_dir: str | Path, name: str = "weights.npz") -> Any:
    """The arrays a task saved in its run folder (``weights.npz``), by key; OSError when missing."""
    return np.load(Path(run_dir) / name)


def first_layer_units(runs: Sequence[RunRecord], units: int) -> tuple[dict[str, dict[int, float]],
                                                                       dict[str, np.ndarray], int | None,
                                                                       list[dict[str, Any]]]:
    """sm-weights' measurement of each trained run (``meta.condition``, ``run.seed``): ΔW^(1), the
    first layer minus its initial value (:func:`~mlplab.analysis.units.initial_model`), as unit
    images, and per unit r½ (:func:`~mlplab.analysis.units.half_energy_radius`).

    Returns condition → {seed → median r½}, condition → the ``units`` most localised units of its
    lowest-seed run (the first listed of runs with equal seeds), the units' side in pixels (None
    without a readable run),
    and one table row per run (a run whose model cannot be read gets a ``problem``)."""
    from ..analysis.units import half_energy_radius, initial_model, stem_unit_images
    from .tasks import load_trained_model

    r_half: dict[str, dict[int, float]] = {}
    pictures: dict[str, np.ndarray] = {}
    picture_seed: dict[str, int] = {}
    side = None
    rows = []
    for r in runs:
        try:
            model, cfg = load_trained_model(r.run_dir)
        except (OSError, ValueError) as e:
            rows.append({"condition": r.get("meta.condition"), "seed": r.get("run.seed"), "problem": str(e)})
            continue
        trained_units = stem_unit_images(model)
        imgs = trained_units - stem_unit_images(initial_model(model, cfg.run.seed))  # ΔW^(1): what training added
        side = imgs.shape[1]
        rh = half_energy_radius(imgs)
        cond, seed = str(r.get("meta.condition")), int(r.get("run.seed", 0))
        r_half.setdefault(cond, {})[seed] = float(np.nanmedian(rh))
        rows.append({"condition": cond, "seed": seed, "train_images": r.get("data.train_subset"),
                     "epochs": r.get("schedule.epochs"), "r_half_median": float(np.nanmedian(rh)),
                     "r_half_q10": float(np.nanpercentile(rh, 10)), "r_half_q90": float(np.nanpercentile(rh, 90)),
                     "r_half_W_median": float(np.nanmedian(half_energy_radius(trained_units))),
                     "test_error": test_error(r)})
        if cond not in picture_seed or seed < picture_seed[cond]:
            order = np.argsort(rh)[:units]  # the most localised units first, as the paper's figures pick clear ones
            pictures[cond], picture_seed[cond] = imgs[order], seed
    return r_half, pictures, side, rows
