"""scaling: the Scaling-MLPs study in miniature (Bachmann et al. 2023, docs/science.md §7): inverted-bottleneck
MLPs of several sizes × training-set sizes × epoch counts; error against compute
C = FLOP(f)·3·N·T, the fit E(C) = a(b + C)^(−α) + E∞, and the compute-optimal frontier's
exponents P*(C) ∝ C^β_P, N*(C) ∝ C^β_N beside the published 0.35 / 0.65."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...analysis.scaling import (
    PUBLISHED_EXPONENTS,
    bootstrap_scaling,
    compute_budget,
    compute_optimal_frontier,
    fit_frontier_exponents,
    fit_power,
    fit_scaling_law,
)
from ..aggregate import RunRecord, select, test_error
from ..claims import Analysis, ClaimSpec, Need
from ..derived import derive
from ..measures import log_grid, mean
from ..plan import Plan, experiment
from ..plots import Panel, Series, draw
from ..recipes import Scale
from ..sweep import Sweep, product
from ..verdicts import Verdict, exponent_vs_foil

# The foil of the frontier claim: an equal split of compute growth between parameters and examples
# (β_P = β_N = 0.5, the law the paper argues against). The published split is 0.35 / 0.65.
FOIL = 0.5
ALPHA_FLOOR = 0.01  # α below this: no usable decrease of the error with compute
ALPHA_MAX = 10.0  # fit_scaling_law's upper bound on α
# A frontier exponent is a measurement only when the frontier spans at least this many distinct
# values of the resource (model sizes for β_P, examples seen for β_N); through fewer, the line's
# slope is set by the sweep's grid, and a bootstrap over runs (one seed each) cannot show that:
# resampling never moves a run's error, so it never changes which run wins a near-tie.
MIN_FRONTIER_LEVELS = 3


def _run_rows(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """One row per finished run: its size, data, epochs, measured FLOPs and C = FLOP·3·N·T."""
    rows = []
    for r in runs:
        res = r.results or {}
        fpe, n, t = res.get("flops_per_example"), res.get("train_examples"), res.get("epochs")
        if not (fpe and n and t):
            continue
        rows.append({"width": r.get("model.kwargs.width"), "depth": r.get("model.kwargs.depth"),
                     "params": float(res.get("params", math.nan)), "N": int(n), "epochs": int(t),
                     "flops_per_example": float(fpe), "compute": float(compute_budget(fpe, n, t)),
                     "examples_seen": float(n) * float(t), "test_error": test_error(r)})
    return sorted(rows, key=lambda r: r["compute"])


POWER_LAW = ClaimSpec("power-law", "test error falls as a power law in compute, E(C) = a(b + C)^(−α) + E∞ with α > 0",
                      "trained", f"the bootstrap 95% interval of α (over runs) lies above {ALPHA_FLOOR} → HELD; below "
                      f"it → DID NOT HOLD; straddling it, or reaching the fit's bound α = {ALPHA_MAX:g} (α not "
                      "identified) → UNDECIDED")
PARAMS_SLOWER = ClaimSpec(
    "beta-p", f"compute-optimal parameters P* grow slower than an equal split of compute: P*(C) ∝ C^β_P with β_P < "
    f"{FOIL:g} (published {PUBLISHED_EXPONENTS['beta_P']:g})", "trained",
    f"bootstrap 95% interval of the frontier's exponent (log-log least squares on the Pareto frontier) wholly below "
    f"the foil {FOIL:g} → HELD; wholly above → DID NOT HOLD; holding it → UNDECIDED (``verdicts.exponent_vs_foil``). "
    "β_N = 1 − β_P by construction (C = FLOP·3·N·T with FLOP ≈ 2P), so it is reported, not decided again",
    needs=(Need("frontier_levels", ">=", MIN_FRONTIER_LEVELS, f"the frontier spans ≥ {MIN_FRONTIER_LEVELS} model "
                "sizes and values of N·T: through fewer, its slope is set by the sweep's grid"),))


def _alpha_verdict(fit, boot, runs: int) -> Verdict:
    lo, hi = boot.alpha
    at_bound = hi >= 0.99 * ALPHA_MAX  # the fit's own bound: α not identified by the data
    held = None if not math.isfinite(lo) or at_bound else \
        (True if lo > ALPHA_FLOOR else (False if hi < ALPHA_FLOOR else None))
    return Verdict(held=held, statistic="bootstrap over runs", effect=fit.alpha, effect_name="α", interval=(lo, hi),
                   n=runs, kind="interval", n_of="run", extra={"bound": ALPHA_FLOOR, "side": "above"},
                   detail=f"from {boot.alpha_draws}/{boot.resamples} resamples, E∞ = {fit.e_inf:.3g}%, rms "
                          f"log-residual {fit.rmse_log:.3f}"
                          + ("; the interval reaches the fit's bound" if at_bound else ""))


def _frontier(C: list[float], E: list[float], P: list[float], NT: list[float]) -> dict[str, Any]:
    """The compute-optimal frontier and its exponents; NaN exponents when the frontier holds one
    compute value (no run beats the cheapest: the error does not fall with compute), through which
    no power law is fitted — the claims are still decided (α's interval, the frontier's levels)."""
    try:
        return fit_frontier_exponents(C, E, P, NT)
    except ValueError:
        idx = compute_optimal_frontier(C, E)
        return {"frontier": idx.tolist(), "num_frontier": int(idx.size), "beta_P": math.nan, "beta_N": math.nan}


def _analyse_scaling(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    rows = _run_rows(select(runs, "runs"))
    if len(rows) < 4:
        return Analysis(rows, None, {}, [c.decide(None, detail=f"needs ≥ 4 finished runs, {len(rows)} finished")
                                         for c in (POWER_LAW, PARAMS_SLOWER)])
    C = [r["compute"] for r in rows]
    E = [r["test_error"] for r in rows]
    P = [r["params"] for r in rows]
    NT = [r["examples_seen"] for r in rows]
    fit = fit_scaling_law(C, E)
    front = _frontier(C, E, P, NT)
    on = set(front["frontier"])
    for i, r in enumerate(rows):
        r["frontier"] = i in on
        r["fit_error"] = float(fit.predict(r["compute"]))
    resamples = int(manifest.get("settings", {}).get("bootstrap", 500))
    boot = bootstrap_scaling(C, E, P, NT, resamples=resamples, seed=0)
    claims = [POWER_LAW.decide(_alpha_verdict(fit, boot, len(rows)))]
    published = []
    levels = {col: len({rows[i][col] for i in front["frontier"]}) for col in ("params", "examples_seen")}
    v = exponent_vs_foil(front["beta_P"], boot.beta_P, PUBLISHED_EXPONENTS["beta_P"], FOIL, what="β_P", runs=len(rows))
    claims.append(PARAMS_SLOWER.decide(v, measured={"frontier_levels": min(levels.values())},
                                       detail=f"frontier: {front['num_frontier']} of {len(rows)} runs, "
                                              f"{levels['params']} model sizes, "
                                              f"{levels['examples_seen']} values of N·T"))
    for key, ci, resource in (("beta_P", boot.beta_P, "parameters P*"), ("beta_N", boot.beta_N, "examples seen N*")):
        published.append({"quantity": f"{key.replace('beta_', 'β_')} ({resource}(C) ∝ C^β)",
                          "published": PUBLISHED_EXPONENTS[key], "ours": round(front[key], 3),
                          "95% CI": f"[{ci[0]:.3g}, {ci[1]:.3g}]"})
    published.append({"quantity": "α (E(C) = a(b + C)^(−α) + E∞)", "published": "–", "ours": round(fit.alpha, 3),
                      "95% CI": f"[{boot.alpha[0]:.3g}, {boot.alpha[1]:.3g}]"})
    notes = [f"fit: a = {fit.a:.4g}, b = {fit.b:.4g}, α = {fit.alpha:.4g}, E∞ = {fit.e_inf:.4g}% "
             f"(rms log-residual {fit.rmse_log:.3f}); frontier (Pareto): {front['num_frontier']} of {len(rows)} runs; "
             f"bootstrap: {boot.resamples} resamples of the runs, α refitted in {boot.alpha_draws}, "
             f"frontier exponents in {boot.frontier_draws}",
             f"β_P + β_N = {front['beta_P'] + front['beta_N']:.3f}: C = FLOP·3·N·T with FLOP ≈ 2P for these MLPs, so "
             "log C = log P + log(N·T) + const and the two exponents sum to ≈ 1 by construction — one measurement, "
             "one verdict (β_P's)"]
    fig = _figure(rows, fit, front, manifest)
    cols = ["width", "depth", "params", "N", "epochs", "flops_per_example", "compute", "test_error", "fit_error",
            "frontier"]
    return Analysis(rows, cols, {"scaling": fig}, claims, published, notes=notes)


def _figure(rows: list[dict[str, Any]], fit, front: dict[str, Any], manifest: dict[str, Any]):
    """Fig. 1 of Scaling MLPs in miniature: error vs compute (every run a point, by width), the
    frontier and the fit; then P* and N* along the frontier with their power laws."""
    widths = sorted({r["width"] for r in rows})
    series = [Series(f"width {w}", [r["compute"] for r in rows if r["width"] == w],
                     [r["test_error"] for r in rows if r["width"] == w], style="o") for w in widths]
    fr = [r for r in rows if r["frontier"]]
    series.append(Series("compute-optimal frontier", [r["compute"] for r in fr], [r["test_error"] for r in fr],
                         style="ks--"))
    grid = log_grid(min(r["compute"] for r in rows), max(r["compute"] for r in rows))
    series.append(Series(f"fit a(b+C)^-α + E∞, α = {fit.alpha:.2f}", grid, fit.predict(grid), style="r-"))
    panels = [Panel(f"{manifest['scale']['dataset']}: bottleneck MLPs", "compute C = FLOP·3·N·T",
                    "test error (%)", series, xscale="log", yscale="log", xticks=None)]
    cf = [r["compute"] for r in fr]
    for key, col, label in (("beta_P", "params", "parameters P*"), ("beta_N", "examples_seen", "examples seen N·T")):
        if key in front and len(fr) >= 2:
            beta, k = fit_power(cf, [r[col] for r in fr])
            panels.append(Panel(f"frontier: {label} ∝ C^{beta:.2f} (published {PUBLISHED_EXPONENTS[key]})",
                                "compute C", label, [Series("frontier runs", cf, [r[col] for r in fr], style="ks"),
                                                     Series(f"C^{beta:.2f}", grid, k * grid ** beta, style="r-")],
                                xscale="log", yscale="log"))
    return draw(panels, "Scaling MLPs Fig. 1 in miniature: error vs compute")


@dataclass(frozen=True)
class Scaling:
    widths: list[int]  # bottleneck MLP widths
    depths: list[int]  # blocks
    subsets: list[int]  # training-set sizes N
    epochs: list[int]  # epoch counts T
    recipe: dict[str, Any]  # Scale.recipe keywords
    bootstrap: int  # resamples of the runs for the intervals
    note: str  # how the setting departs from Scaling MLPs'


SETTINGS = {
    "smoke": Scaling(widths=[4, 8], depths=[1], subsets=[32, 64], epochs=[1, 2], bootstrap=20,
                     recipe=dict(epochs=1, cpu_epochs=1, extra={"augment.hflip": True}),
                     note="no mixup or label smoothing below paper scale (Scaling MLPs' scaling runs use mixup 0.8): "
                          "with 1–4 epochs they only slow the fit; the lr (AdamW 3e-3, the cpu default) was not tuned"),
    "cpu": Scaling(widths=[16, 32, 64, 128, 256], depths=[2], subsets=[3750, 15000, 60000], epochs=[1, 2, 4],
                   bootstrap=1000, recipe=dict(epochs=1, cpu_epochs=1, extra={"augment.hflip": True}),
                   note="no mixup or label smoothing below paper scale (Scaling MLPs' scaling runs use mixup 0.8): "
                        "with 1–4 epochs they only slow the fit; the lr (AdamW 3e-3, the cpu default) was not tuned"),
    "paper": Scaling(widths=[256, 512, 1024], depths=[6, 12], subsets=[12500, 25000, 50000], epochs=[25, 50, 100],
                     bootstrap=1000,
                     recipe=dict(epochs=100, optim="lion", lr=5e-5, batch_size=1024, weight_decay=1e-3,
                                 augment="crop_flip",
                                 extra={"data.image_size": 64, "augment.mixup": 0.8, "augment.label_smoothing": 0.3}),
                     note="from scratch on the requested dataset, not ImageNet-21k pre-training; batch 1024 instead "
                          "of 16384 (a subset of 12,500 images is smaller than one such batch)"),
}


@experiment("scaling", "Scaling MLPs in miniature: error vs compute, fit and compute-optimal frontier",
            analyse=_analyse_scaling, default_dataset="cifar100", aliases=("scaling-mlps",),
            needs_plateau=False,  # short runs on purpose: error against compute, not converged models
            claims=(POWER_LAW, PARAMS_SLOWER))
def scaling(sc: Scale) -> Plan:
    """Scaling MLPs (Bachmann et al. 2023), Fig. 1 in miniature: test error against compute.

    Command: ``mlplab reproduce scaling --scale cpu``.
    Tests: inverted-bottleneck MLPs (z ↦ z + W_c GELU(W_e LN(z)), k = 4) of 5 widths × 3 training-set
    sizes × 3 epoch counts, one run each, with augmentation (random crop + horizontal flip); compute
    C = FLOP(f)·3·N·T from each run's measured forward FLOPs (``analysis.scaling.compute_budget``);
    the fit E(C) = a(b + C)^(−α) + E∞ with a bootstrap (over runs) 95% interval of α; the Pareto
    frontier (lowest error for its compute) and its exponents P*(C) ∝ C^β_P, N*(C) ∝ C^β_N (N the
    examples seen, N·T) with bootstrap intervals.
    Published: error falls as a power law in compute; compute-optimal P* ∝ C^0.35, N* ∝ C^0.65
    (ImageNet-21k pre-training, batch 16384, LION).
    Time: paper 6 models × 3 × 3 runs on CIFAR-100 at 64×64 (GPU days); cpu 45 runs (widths
    16–256, N ≤ 60 000 Fashion-MNIST images, T ≤ 4 epochs), ~10 min (``reproduce --list``).
    """
    s = sc.settings(SETTINGS)
    models = [{"model.kwargs.depth": d, "model.kwargs.width": w} for w in s.widths for d in s.depths]
    base = sc.recipe(**s.recipe)
    base.update({"model.name": "bottleneck_mlp", "data.subset": "random", "run.checkpoint_every": 0})
    sweep = Sweep("runs", base, [product(("meta.model", list(range(len(models)))), ("data.train_subset", s.subsets),
                                         ("schedule.epochs", s.epochs))],
                  seeds=sc.one_seed(), derived=[derive("lookup", key="meta.model", table=models)],
                  name_keys=["model.kwargs.width", "model.kwargs.depth", "data.train_subset", "schedule.epochs"],
                  epochs=mean(s.epochs),
                  description=f"{len(models)} bottleneck MLPs × N ∈ {s.subsets} × T ∈ {s.epochs}")
    return Plan([[sweep]], settings={"models": [f"B-{m['model.kwargs.depth']}/Wi-{m['model.kwargs.width']}"
                                                for m in models],
                                     "N": s.subsets, "T": s.epochs, "bootstrap": s.bootstrap},
                notes=["one seed per run: the intervals come from a bootstrap over runs, not over seeds", s.note])
