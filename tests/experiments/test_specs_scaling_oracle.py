"""``specs/scaling.py`` piece by piece: each run's compute C = FLOP·3·N·T by hand, α's verdict at
every boundary of its rule, the frontier and its exponents against numpy fits written here, and
the analysis whole with the law's fit and the bootstrap replaced by recorders (what the spec
passes them and how it reads them back; ``analysis/scaling.py`` is tested on its own), the
drawing by a recorder of its panels (test_experiments_scaling.py drives the verdicts end to end)."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.specs import scaling as sp

MANIFEST = {"settings": {"bootstrap": 7}, "scale": {"dataset": "made-up"}}


def run(width, n, t, fpe, acc, params=100.0, depth=2, sweep="runs") -> RunRecord:
    res = None if acc is None else {"flops_per_example": fpe, "train_examples": n, "epochs": t, "params": params,
                                     "test_acc": acc}
    return RunRecord(sweep, f"{width}-{n}-{t}", Path("."), {"model.kwargs.width": width, "model.kwargs.depth": depth},
                     results=res)


def test_run_rows_compute_and_order():
    runs = [run(4, 0, 1, 20.0, 0.5), run(8, 100, 2, 50.0, 0.75, params=400), run(4, 10, 0, 20.0, 0.5),
            run(4, 10, 1, 0, 0.5), run(4, 10, 1, 20.0, None), run(4, 10, 1, 20.0, 0.5, params=100, depth=1)]
    rows = sp._run_rows(runs)
    assert rows == [
        {"width": 4, "depth": 1, "params": 100.0, "N": 10, "epochs": 1, "flops_per_example": 20.0,
         "compute": 20.0 * 3 * 10 * 1, "examples_seen": 10.0, "test_error": 50.0},
        {"width": 8, "depth": 2, "params": 400.0, "N": 100, "epochs": 2, "flops_per_example": 50.0,
         "compute": 50.0 * 3 * 100 * 2, "examples_seen": 200.0, "test_error": 25.0}]
    assert [type(rows[0][k]) for k in ("params", "N", "epochs", "flops_per_example", "compute", "examples_seen")] \
        == [float, int, int, float, float, float]
    r = RunRecord("runs", "x", Path("."), {}, results={"flops_per_example": 2, "train_examples": 3, "epochs": 1,
                                                          "test_acc": 0.9})
    assert math.isnan(sp._run_rows([r])[0]["params"])


FIT = SimpleNamespace(alpha=0.3, e_inf=5.0, rmse_log=0.0123, a=2.0, b=3.0)


@pytest.mark.parametrize("interval, held, bound", [
    ((0.02, 0.5), True, False), ((0.0101, 9.89), True, False), ((0.001, 0.005), False, False),
    ((0.005, 0.5), None, False), ((0.01, 0.5), None, False), ((0.001, 0.01), None, False),
    ((0.5, 9.9), None, True), ((0.001, 9.95), None, True), ((math.nan, 0.5), None, False),
    ((-math.inf, 0.005), None, False)])
def test_alpha_verdict_at_every_boundary(interval, held, bound):
    boot = SimpleNamespace(alpha=interval, alpha_draws=45, resamples=50)
    v = sp._alpha_verdict(FIT, boot, 12)
    assert v.held is held
    assert (v.statistic, v.effect, v.effect_name, v.interval, v.n, v.kind, v.n_of, v.extra) == \
        ("bootstrap over runs", 0.3, "α", interval, 12, "interval", "run", {"bound": 0.01, "side": "above"})
    detail = "from 45/50 resamples, E∞ = 5%, rms log-residual 0.012"
    assert v.detail == detail + ("; the interval reaches the fit's bound" if bound else "")


def test_frontier_exponents_against_numpy_fits():
    C = [1.0, 2.0, 3.0, 4.0, 8.0, 16.0]
    E = [10.0, 8.0, 9.0, 6.0, 7.0, 4.0]  # the Pareto frontier: 0, 1, 3, 5
    P, NT = [c ** 0.4 * (1.1 if i % 2 else 1) for i, c in enumerate(C)], [c ** 0.6 for c in C]
    f = sp._frontier(C, E, P, NT)
    on = [0, 1, 3, 5]
    assert f["frontier"] == on and f["num_frontier"] == 4
    lc = np.log([C[i] for i in on])
    assert f["beta_P"] == pytest.approx(np.polyfit(lc, np.log([P[i] for i in on]), 1)[0], abs=1e-12)
    assert f["beta_N"] == pytest.approx(0.6, abs=1e-12)


def test_a_frontier_of_one_run_has_no_exponents():
    f = sp._frontier([1.0, 2.0, 4.0], [5.0, 6.0, 7.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert f["frontier"] == [0] and f["num_frontier"] == 1 and isinstance(f["frontier"], list)
    assert math.isnan(f["beta_P"]) and math.isnan(f["beta_N"])


def test_fewer_than_four_runs_decide_nothing():
    runs = [run(4, 10, t, 20.0, 0.5) for t in (1, 2, 3)] + [run(4, 10, 4, 20.0, None),
                                                             run(4, 10, 4, 20.0, 0.5, sweep="other")]
    an = sp._analyse_scaling(runs, MANIFEST)
    assert len(an.table) == 3 and an.columns is None and an.figures == {}
    assert [(c.key, c.verdict, c.detail) for c in an.claims] == [
        ("power-law", "UNDECIDED", "needs ≥ 4 finished runs, 3 finished"),
        ("beta-p", "UNDECIDED", "needs ≥ 4 finished runs, 3 finished")]
    assert all(c.stats is None for c in an.claims)


class Fit:
    """A stand-in of the law's fit: E(C) = 2C, its parameters chosen here."""

    alpha, a, b, e_inf, rmse_log = 0.25437, 3.5, 0.5, 1.25, 0.0321

    def predict(self, c):
        return 2.0 * np.asarray(c, dtype=float)


# 6 runs of 3 widths (compute = fpe·3·N·T: 60, 240, 240, 1200, 960, 9600; examples seen N·T); the
# frontier (lower error than every run of less or equal compute): all but the first run at C = 240
RUNS = [(4, 10, 1, 2.0, 40.0, 10.0), (4, 20, 2, 2.0, 45.0, 10.0), (8, 10, 2, 4.0, 30.0, 20.0),
        (8, 50, 2, 4.0, 20.0, 20.0), (16, 20, 2, 8.0, 25.0, 40.0), (16, 100, 2, 16.0, 10.0, 40.0)]


def _runs():
    return [run(w, n, t, fpe, 1 - e / 100, params=p) for w, n, t, fpe, e, p in RUNS]


def _patched(monkeypatch, boot):
    calls, drawn = {}, []
    monkeypatch.setattr(sp, "fit_scaling_law", lambda C, E: calls.setdefault("fit", (list(C), list(E))) and Fit())
    def bootstrap(C, E, P, NT, *, resamples, seed):
        calls["boot"] = (list(C), list(E), list(P), list(NT), resamples, seed)
        return boot
    monkeypatch.setattr(sp, "bootstrap_scaling", bootstrap)
    monkeypatch.setattr(sp, "draw", lambda panels, title: drawn.append((panels, title)) or "figure")
    return calls, drawn


def test_analysis_table_claims_published_and_notes(monkeypatch):
    boot = SimpleNamespace(alpha=(0.05, 0.4), beta_P=(0.1, 0.45), beta_N=(0.55, 0.9), alpha_draws=6, frontier_draws=5,
                           resamples=7)
    calls, drawn = _patched(monkeypatch, boot)
    an = sp._analyse_scaling(_runs(), MANIFEST)
    C = [fpe * 3 * n * t for _, n, t, fpe, _, _ in RUNS]  # 60, 240, 240, 1200, 960, 9600
    order = sorted(range(len(RUNS)), key=lambda i: C[i])
    E = [RUNS[i][4] for i in order]
    assert calls["fit"][0] == [C[i] for i in order] and calls["fit"][1] == pytest.approx(E, abs=1e-12)
    c, e, p, nt, resamples, seed = calls["boot"]
    assert (c, p, nt, resamples, seed) == ([C[i] for i in order], [RUNS[i][5] for i in order],
                                           [float(RUNS[i][1] * RUNS[i][2]) for i in order], 7, 0)
    assert e == pytest.approx(E, abs=1e-12)
    assert [r["compute"] for r in an.table] == sorted(C)
    assert [r["frontier"] for r in an.table] == [True, False, True, True, True, True]
    assert [r["fit_error"] for r in an.table] == [2.0 * c for c in sorted(C)]
    assert an.columns == ["width", "depth", "params", "N", "epochs", "flops_per_example", "compute", "test_error",
                          "fit_error", "frontier"]
    assert an.figures == {"scaling": "figure"}
    fr = [0, 2, 3, 4, 5]  # the frontier's runs in compute order: params 10, 20, 40, 20, 40; N·T 10, 20, 40, 100, 200
    cf = [sorted(C)[i] for i in fr]
    beta_p = np.polyfit(np.log(cf), np.log([10.0, 20.0, 40.0, 20.0, 40.0]), 1)[0]
    beta_n = np.polyfit(np.log(cf), np.log([10.0, 20.0, 40.0, 100.0, 200.0]), 1)[0]
    power, beta = an.claims
    assert (power.key, power.verdict, power.stats.interval, power.stats.effect, power.stats.n) == \
        ("power-law", "HELD", (0.05, 0.4), 0.25437, 6)
    assert (beta.key, beta.verdict, beta.stats.interval, beta.stats.n) == ("beta-p", "HELD", (0.1, 0.45), 6)
    assert beta.stats.effect == pytest.approx(beta_p, abs=1e-12) and beta.stats.effect_name == "β_P"
    assert [(c.need.quantity, c.value, c.met) for c in beta.checks] == [("frontier_levels", 3, True)]
    assert beta.detail == "frontier: 5 of 6 runs, 3 model sizes, 5 values of N·T"
    assert an.published == [
        {"quantity": "β_P (parameters P*(C) ∝ C^β)", "published": 0.35, "ours": round(beta_p, 3),
         "95% CI": "[0.1, 0.45]"},
        {"quantity": "β_N (examples seen N*(C) ∝ C^β)", "published": 0.65, "ours": round(beta_n, 3),
         "95% CI": "[0.55, 0.9]"},
        {"quantity": "α (E(C) = a(b + C)^(−α) + E∞)", "published": "–", "ours": 0.254, "95% CI": "[0.05, 0.4]"}]
    assert an.notes[0] == ("fit: a = 3.5, b = 0.5, α = 0.2544, E∞ = 1.25% (rms log-residual 0.032); frontier (Pareto): "
                           "5 of 6 runs; bootstrap: 7 resamples of the runs, α refitted in 6, frontier exponents in 5")
    assert an.notes[1] == (f"β_P + β_N = {beta_p + beta_n:.3f}: C = FLOP·3·N·T with FLOP ≈ 2P for these MLPs, so "
                           "log C = log P + log(N·T) + const and the two exponents sum to ≈ 1 by construction — one "
                           "measurement, one verdict (β_P's)")
    assert len(an.notes) == 2


def test_analysis_levels_the_frontier_by_its_fewer_resource_and_reads_500_resamples_by_default(monkeypatch):
    """A frontier of 5 runs over 2 model sizes: NOT TESTABLE (2 < 3) though it spans 5 values of N·T."""
    boot = SimpleNamespace(alpha=(0.001, 0.005), beta_P=(0.6, 0.7), beta_N=(0.3, 0.4), alpha_draws=3,
                           frontier_draws=2, resamples=500)
    calls, _ = _patched(monkeypatch, boot)
    runs = [run(w, n, t, fpe, 1 - e / 100, params=10.0 if w == 4 else 40.0) for w, n, t, fpe, e, _ in RUNS]
    an = sp._analyse_scaling(runs, {"scale": {"dataset": "made-up"}})
    assert calls["boot"][4:] == (500, 0)
    power, beta = an.claims
    assert power.verdict == "DID NOT HOLD"
    assert beta.verdict == "NOT TESTABLE" and [c.value for c in beta.checks] == [2]
    assert beta.detail == "frontier: 5 of 6 runs, 2 model sizes, 5 values of N·T"


def test_figure_panels(monkeypatch):
    boot = SimpleNamespace(alpha=(0.05, 0.4), beta_P=(0.1, 0.45), beta_N=(0.55, 0.9), alpha_draws=6, frontier_draws=5,
                           resamples=7)
    _, drawn = _patched(monkeypatch, boot)
    an = sp._analyse_scaling(_runs(), MANIFEST)
    ((panels, title),) = drawn
    assert title == "Scaling MLPs Fig. 1 in miniature: error vs compute"
    assert len(panels) == 3
    main = panels[0]
    assert (main.title, main.xlabel, main.ylabel, main.xscale, main.yscale, main.xticks) == \
        ("made-up: bottleneck MLPs", "compute C = FLOP·3·N·T", "test error (%)", "log", "log", None)
    rows = an.table
    by_width = [(s.label, list(s.x), list(s.y), s.style) for s in main.series[:3]]
    assert by_width == [(f"width {w}", [r["compute"] for r in rows if r["width"] == w],
                         [r["test_error"] for r in rows if r["width"] == w], "o") for w in (4, 8, 16)]
    fr = [r for r in rows if r["frontier"]]
    front, fit = main.series[3:]
    assert (front.label, list(front.x), list(front.y), front.style) == \
        ("compute-optimal frontier", [r["compute"] for r in fr], [r["test_error"] for r in fr], "ks--")
    grid = np.exp(np.linspace(np.log(60.0), np.log(9600.0), 100))
    assert (fit.label, fit.style) == ("fit a(b+C)^-α + E∞, α = 0.25", "r-")  # α = 0.25437 to 2 decimals
    np.testing.assert_allclose(fit.x, grid, rtol=1e-12)
    np.testing.assert_allclose(fit.y, 2 * grid, rtol=1e-12)
    cf = [r["compute"] for r in fr]
    for panel, col, label, pub in ((panels[1], "params", "parameters P*", 0.35),
                                   (panels[2], "examples_seen", "examples seen N·T", 0.65)):
        y = [r[col] for r in fr]
        beta, logk = np.polyfit(np.log(cf), np.log(y), 1)
        assert (panel.title, panel.xlabel, panel.ylabel, panel.xscale, panel.yscale) == \
            (f"frontier: {label} ∝ C^{beta:.2f} (published {pub})", "compute C", label, "log", "log")
        pts, line = panel.series
        assert (pts.label, list(pts.x), list(pts.y), pts.style) == ("frontier runs", cf, y, "ks")
        assert (line.label, line.style) == (f"C^{beta:.2f}", "r-")
        np.testing.assert_allclose(line.x, grid, rtol=1e-12)
        np.testing.assert_allclose(line.y, np.exp(logk) * grid ** beta, rtol=1e-9)


def test_figure_without_a_frontier_line_when_one_run_is_on_it(monkeypatch):
    boot = SimpleNamespace(alpha=(0.001, 0.005), beta_P=(math.nan, math.nan), beta_N=(math.nan, math.nan),
                           alpha_draws=3, frontier_draws=0, resamples=7)
    _, drawn = _patched(monkeypatch, boot)
    runs = [run(4, 10, t, 2.0, 1 - (10 + t) / 100) for t in (1, 2, 3, 4)]
    an = sp._analyse_scaling(runs, MANIFEST)
    ((panels, _),) = drawn
    assert len(panels) == 1 and sum(r["frontier"] for r in an.table) == 1
    assert an.claims[1].verdict == "NOT TESTABLE"


def test_paper_plan_is_scaling_mlps_grid():
    """Paper scale: bottleneck MLPs B-6 and B-12 of widths 256, 512, 1024 × N ∈ {12 500, 25 000, 50 000}
    × T ∈ {25, 50, 100} epochs, one run each, LION at 5e-5, batch 1024, 64×64, mixup 0.8, smoothing 0.3."""
    from mlplab.experiments import expand, plan_experiment

    _, _, plan = plan_experiment("scaling", "paper", check_available=False)
    (sweep,) = plan.sweeps
    runs = [s.overrides for s in expand(sweep)]
    grid = {(w, d, n, t) for w in (256, 512, 1024) for d in (6, 12) for n in (12500, 25000, 50000)
            for t in (25, 50, 100)}
    got = [(o["model.kwargs.width"], o["model.kwargs.depth"], o["data.train_subset"], o["schedule.epochs"])
           for o in runs]
    assert len(got) == 54 and set(got) == grid
    fixed = {"model.name": "bottleneck_mlp", "optim.name": "lion", "optim.lr": 5e-5, "run.batch_size": 1024,
             "optim.weight_decay": 1e-3, "data.image_size": 64, "augment.mixup": 0.8, "augment.label_smoothing": 0.3,
             "data.subset": "random", "run.seed": 0}
    assert all(o[k] == v for o in runs for k, v in fixed.items())


def test_a_frontier_of_two_runs_draws_its_power_laws(monkeypatch):
    boot = SimpleNamespace(alpha=(0.05, 0.4), beta_P=(0.1, 0.45), beta_N=(0.55, 0.9), alpha_draws=6, frontier_draws=5,
                           resamples=7)
    _, drawn = _patched(monkeypatch, boot)
    runs = [run(4, 10, 1, 2.0, 0.6, params=10.0), run(4, 10, 2, 2.0, 0.5, params=10.0),
            run(8, 10, 3, 4.0, 0.9, params=20.0), run(8, 10, 4, 4.0, 0.5, params=20.0)]
    an = sp._analyse_scaling(runs, MANIFEST)
    assert [r["frontier"] for r in an.table] == [True, False, True, False]  # compute 60, 120, 360, 480
    ((panels, _),) = drawn
    assert len(panels) == 3
    beta, _ = np.polyfit(np.log([60.0, 360.0]), np.log([10.0, 20.0]), 1)
    assert panels[1].title == f"frontier: parameters P* ∝ C^{beta:.2f} (published 0.35)"
