"""reproduce scaling's analysis: the bootstrap over runs, and verdicts that refuse a frontier
whose slope only the sweep's grid sets (made-up runs, no training)."""
from pathlib import Path

import numpy as np
import pytest

from mlplab.analysis.scaling import bootstrap_scaling, scaling_law
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.specs.scaling import MIN_FRONTIER_LEVELS, _analyse_scaling

MANIFEST = {"settings": {"bootstrap": 20}, "scale": {"dataset": "made-up"}}


def _runs(widths, subsets=(3750, 15000, 60000), epochs=(1, 2, 4), noise=0.0, seed=0):
    """Runs whose error follows E = A P^-0.65 + B (N·T)^-0.35 + E0, so P* ∝ C^0.35, N* ∝ C^0.65."""
    rng = np.random.default_rng(seed)
    runs = []
    for w in widths:
        P = 800.0 * w
        for n in subsets:
            for t in epochs:
                err = 2e3 * P ** -0.65 + 2e3 * (n * t) ** -0.35 + 5.0 + noise * rng.standard_normal()
                runs.append(RunRecord("runs", f"{w}-{n}-{t}", Path("."), {"model.kwargs.width": w,
                                                                         "model.kwargs.depth": 2},
                                      results={"flops_per_example": 2 * P, "train_examples": n, "epochs": t,
                                               "params": P, "test_acc": 1 - err / 100}))
    return runs


def test_a_frontier_over_two_model_sizes_is_not_testable():
    an = _analyse_scaling(_runs([16, 32]), MANIFEST)
    frontier = [c for c in an.claims if c.key == "beta-p"]
    assert len(frontier) == 1 and frontier[0].verdict == "NOT TESTABLE"
    assert "frontier_levels >= 3" in frontier[0].reason() and "ours 2" in frontier[0].reason()
    assert any("one measurement, one verdict" in n for n in an.notes)


def test_a_frontier_over_many_model_sizes_is_decided_against_the_foil():
    """The made-up runs follow P* ∝ C^0.35: the interval of β_P lies below the equal split 0.5."""
    an = _analyse_scaling(_runs([8, 16, 32, 64, 128, 256, 512], subsets=(1000, 3750, 15000, 60000),
                                epochs=(1, 2, 4, 8)), MANIFEST)
    fr = [r for r in an.table if r["frontier"]]
    assert len({r["params"] for r in fr}) >= MIN_FRONTIER_LEVELS
    (beta,) = [c for c in an.claims if c.key == "beta-p"]
    assert beta.verdict != "NOT TESTABLE" and beta.stats.extra["foil"] == 0.5
    lo, hi = beta.stats.interval
    assert beta.held is (True if hi < 0.5 else (False if lo > 0.5 else None))


def _frontier_runs(beta_p, error_of, jitter=0.0, k=7):
    """k runs, each compute 4× the last, each the best so far (all on the frontier): parameters
    P = 10⁴·4^(β_P·i) (× 1 ± ``jitter``, alternating), N·T = C / 6P, error ``error_of(i)``."""
    runs = []
    for i in range(k):
        C, P = 1e9 * 4 ** i, 1e4 * 4 ** (beta_p * i) * (1 + jitter * (-1) ** i)
        runs.append(RunRecord("runs", f"r{i}", Path("."), {"model.kwargs.width": i, "model.kwargs.depth": 2},
                              results={"flops_per_example": 2 * P, "train_examples": round(C / (6 * P)), "epochs": 1,
                                       "params": P, "test_acc": 1 - error_of(i) / 100}))
    return runs


def _claims(runs):
    return {c.key: c for c in _analyse_scaling(runs, MANIFEST).claims}


def test_power_law_and_frontier_reach_each_verdict():
    """Error 30·(C/C0)^−0.3 + 5 along a frontier with P* ∝ C^β_P: β_P = 0.35 below the foil 0.5
    (HELD), 0.65 above it (DID NOT HOLD), 0.5 with scatter across it (UNDECIDED); the error rising
    with compute: α DID NOT HOLD; falling, then rising: no exponent identified (UNDECIDED)."""
    falls = lambda i: 30 * 4 ** (-0.3 * i) + 5  # noqa: E731
    c = _claims(_frontier_runs(0.35, falls))
    assert (c["power-law"].verdict, c["beta-p"].verdict) == ("HELD", "HELD")
    assert c["power-law"].stats.effect == pytest.approx(0.3, abs=1e-3)
    assert c["beta-p"].stats.effect == pytest.approx(0.35, abs=1e-4)
    c = _claims(_frontier_runs(0.65, falls))
    assert c["beta-p"].verdict == "DID NOT HOLD" and c["beta-p"].stats.effect == pytest.approx(0.65, abs=1e-4)
    c = _claims(_frontier_runs(0.5, falls, jitter=0.3))
    assert c["beta-p"].verdict == "UNDECIDED" and c["beta-p"].stats.interval[0] < 0.5 < c["beta-p"].stats.interval[1]
    c = _claims(_frontier_runs(0.35, lambda i: 10 + abs(i - 3)))
    assert c["power-law"].verdict == "UNDECIDED"


def test_error_rising_with_compute_did_not_hold_without_a_frontier():
    """No run beats the cheapest: α's interval lies below the floor (DID NOT HOLD), and a frontier
    of one run has no exponent (NOT TESTABLE) — the analysis decides, it does not fail."""
    an = _analyse_scaling(_frontier_runs(0.35, lambda i: 5 + 2 * i), MANIFEST)
    c = {c.key: c for c in an.claims}
    assert c["power-law"].verdict == "DID NOT HOLD" and c["power-law"].stats.interval[1] < 0.01
    assert c["beta-p"].verdict == "NOT TESTABLE" and "ours 1" in c["beta-p"].reason()
    assert sum(r["frontier"] for r in an.table) == 1


def test_bootstrap_interval_of_alpha_holds_the_truth():
    rng = np.random.default_rng(1)
    C = np.geomspace(1e9, 1e14, 30)
    E = scaling_law(C, 3e3, 1e8, 0.3, 4.0) * np.exp(0.03 * rng.standard_normal(C.size))
    boot = bootstrap_scaling(C, E, C ** 0.4, C ** 0.6, resamples=40, seed=0)
    lo, hi = boot.alpha
    assert lo < 0.3 < hi and hi - lo > 0.01 and boot.alpha_draws >= 35
    assert boot.beta_P[0] <= boot.beta_P[1]
    with pytest.raises(ValueError, match="one length >= 4"):
        bootstrap_scaling(C[:3], E[:3], C[:3], C[:3])


def test_cpu_plan_is_5_sizes_by_3_n_by_3_t_with_augmentation_within_30_minutes():
    from mlplab.experiments import estimate_cost, expand, plan_experiment

    _, _, plan = plan_experiment("scaling", "cpu", check_available=False)
    (sw,) = plan.sweeps
    specs = [s.overrides for s in expand(sw)]
    assert len({s["model.kwargs.width"] for s in specs}) >= 5
    assert len({s["data.train_subset"] for s in specs}) >= 3 and len({s["schedule.epochs"] for s in specs}) >= 3
    assert len(specs) == 45 and all(s["model.name"] == "bottleneck_mlp" and s["augment.hflip"]
                                    and s["augment.crop_padding"] > 0 for s in specs)
    assert estimate_cost(plan)["est_s"] <= 30 * 60
