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
    assert len(specs) == 45 and all(s["model.name"] == "bottleneck_mlp" and s["augment.hflip"] and s["augment.crop_padding"] > 0 for s in specs)
    assert estimate_cost(plan)["est_s"] <= 30 * 60
