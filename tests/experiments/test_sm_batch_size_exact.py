"""sm-batch-size (Scaling MLPs Fig. 4) field by field: its analysis on a made-up table whose
numbers are chosen here (the probe rows, the pre-training table, one curve per epoch budget, the
per-doubling slopes from numpy fits written here, the claim over every budget) and its paper plan
against Fig. 4's grid written out here (B-12/Wi-1024 on ImageNet-21k at batch 1024 … 16384, each
probed on CIFAR-100)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments import expand, plan_experiment
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.plots import Panel, Series
from mlplab.experiments.specs import sm_batch_size as spec
from mlplab.experiments.verdicts import all_of, trend

SEEDS = (0, 1, 2, 3)
TILT = (0.3, -0.3, 0.1, -0.1)
BATCHES = (64, 256, 1024)
SLOPE = {2: -1.0, 8: -2.0}  # points per doubling of B, per epoch budget
MISSING = (3, 8, 256)  # (seed, epochs, batch) of a probe not yet run
UNIT = "points per doubling of B"


def err(e: int, b: int, s: int) -> float:
    return 30.0 - e + SLOPE[e] * math.log2(b) + 0.5 * s + TILT[s] * math.log2(b) * (1 if e == 2 else 2)


def runs_of() -> list[RunRecord]:
    runs = []
    for s in SEEDS:
        for e in (8, 2):  # the analysis sorts budgets and batches
            for b in reversed(BATCHES):
                lab = {"schedule.epochs": e, "run.batch_size": b, "run.seed": s}
                last = 0.8 * (0.9 - 0.01 * s - 0.0001 * b - 0.01 * e)
                hist = [{"train_loss": 1.0}, {"train_loss": 0.8}, {"train_loss": last}]
                runs.append(RunRecord("pretrain", f"p{e}-{b}-{s}", Path("."), lab,
                                      results={"test_acc": 0.5 - 0.01 * s, "history": hist}))
                if (s, e, b) != MISSING:
                    runs.append(RunRecord("probe", f"{e}-{b}-{s}", Path("."), lab,
                                          results={"probe": {"acc": 1 - err(e, b, s) / 100}}))
    runs.append(RunRecord("pretrain", "one-epoch", Path("."), {"schedule.epochs": 2, "run.batch_size": 64,
                                                               "run.seed": 9},
                          results={"test_acc": 0.5, "history": [{"train_loss": 1.0}]}))  # no change to show
    return runs


def test_batch_size_analysis_rows_curves_slopes_and_the_claim(monkeypatch):
    drawn = []
    monkeypatch.setattr(spec, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = runs_of()
    an = spec._analyse_batch_size(runs, {})
    have = {e: {b: [err(e, b, s) for s in SEEDS if (s, e, b) != MISSING] for b in BATCHES} for e in (2, 8)}
    assert [(r["epochs"], r["batch"]) for r in an.table] == [(e, b) for e in (2, 8) for b in BATCHES]
    assert [r["downstream_error"] for r in an.table] == pytest.approx([np.mean(have[e][b]) for e in (2, 8)
                                                                        for b in BATCHES])
    assert [r["n"] for r in an.table] == [4, 4, 4, 4, 3, 4]
    assert an.columns == ["epochs", "batch", "downstream_error", "downstream_error_std", "n"]
    pre = an.tables["pretrain"]
    assert [(r["epochs"], r["batch"]) for r in pre] == [(e, b) for e in (2, 8) for b in BATCHES]
    # 50 + s points at seed s; the one-epoch run (50 points) is a fifth seed at 2 epochs, B = 64
    assert [r["pretrain_test_error"] for r in pre] == pytest.approx([51.2] + [51.5] * 5)
    assert [r["n"] for r in pre] == [5, 4, 4, 4, 4, 4]
    # one curve per budget over the batch sizes, mean ± sd over seeds
    series = [Series(f"{e} epochs", list(BATCHES), pytest.approx([np.mean(have[e][b]) for b in BATCHES]),
                     pytest.approx([np.std(have[e][b], ddof=1) for b in BATCHES])) for e in (2, 8)]
    assert an.figures == {"sm-batch-size": "fig"}
    assert drawn == [([Panel("linear probe on held-out classes (Fig. 4)", "pre-training batch size B",
                             "downstream test error (%)", series, xscale="log")],
                      "Scaling MLPs Fig. 4 in miniature: downstream error vs pre-training batch size")]
    # per seed the least-squares slope against log2 B (the missing point left out), per budget
    x = np.log2(BATCHES)

    def slope(e, s):
        pts = [(xi, err(e, b, s)) for xi, b in zip(x, BATCHES) if (s, e, b) != MISSING]
        return np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)[0]

    mean_slope = {e: np.mean([slope(e, s) for s in SEEDS if (s, e) != MISSING[:2]]) for e in (2, 8)}
    assert mean_slope[2] == pytest.approx(-1.0) and mean_slope[8] == pytest.approx(-2.0 + 2 * np.mean(TILT[:3]))
    (c,) = an.claims
    nan = float("nan")
    y = {e: {s: [nan if (s, e, b) == MISSING else err(e, b, s) for b in BATCHES] for s in SEEDS} for e in (2, 8)}
    want = all_of({f"{e} epochs": trend(list(BATCHES), y[e], sign=-1, what="downstream error", unit=UNIT)
                   for e in (2, 8)}, what="every epoch budget", unit=UNIT)
    assert (c.key, c.verdict, c.stats.statistic, c.stats.detail, c.stats.unit) == (
        "batch-helps", "HELD", want.statistic, want.detail, UNIT)
    assert c.stats.effect == pytest.approx(want.effect)
    assert c.runs == [r for r in runs if r.sweep == "pretrain"]
    assert an.published == [{"quantity": "downstream error vs pre-training batch size",
                              "published": "falls monotonically (log-log) at every epoch budget (Fig. 4)",
                              "ours": f"2 epochs: {mean_slope[2]:+.3g} points per doubling; "
                                      f"8 epochs: {mean_slope[8]:+.3g} points per doubling"}]
    # median |loss change| per budget (the 1-entry history has none): 100·|√(h3/h1) − 1| per run
    ch = {e: [abs(100 * (math.sqrt(0.8 * (0.9 - 0.01 * s - 0.0001 * b - 0.01 * e)) - 1)) for s in SEEDS
              for b in BATCHES] for e in (2, 8)}
    assert an.notes == ["the plateau rule is not applied: the epoch budget is the variable, and Fig. 4 compares "
                        "models at fixed budgets, converged or not; median |training-loss change| over the last 2 "
                        f"epochs of pre-training: 2 epochs {np.median(ch[2]):.1f}% per epoch, "
                        f"8 epochs {np.median(ch[8]):.1f}% per epoch"]


def test_batch_size_without_training_histories_has_no_notes(monkeypatch):
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    runs = [r for r in runs_of() if r.sweep == "probe"]
    an = spec._analyse_batch_size(runs, {})
    assert an.notes == [] and an.tables == {"pretrain": []} and an.claims[0].runs == []


def test_batch_size_paper_plan_is_fig4s_grid():
    _, _, plan = plan_experiment("sm-batch-size", "paper", check_available=False)
    pre, probe = (expand(sw) for sw in plan.sweeps)
    grid = [(e, b, s) for e in (50, 100, 200) for b in (1024, 2048, 4096, 8192, 16384) for s in (0, 1, 2)]
    assert [(r.overrides["schedule.epochs"], r.overrides["run.batch_size"], r.overrides["run.seed"])
            for r in pre] == grid
    assert all(r.overrides["model.name"] == "bottleneck_mlp_b12_wi1024" and r.overrides["data.dataset"] == "packed"
               and r.overrides["optim.lr"] == 1e-5 for r in pre)
    assert [r.overrides["run"] for r in probe] == [f"pretrain/{r.name}" for r in pre]
    assert all(r.overrides["data.dataset"] == "cifar100" and r.overrides["probe"] is True for r in probe)


def test_batch_size_pretraining_table_and_an_untested_claim_keep_their_names_and_unit(monkeypatch):
    """The pre-training table's loss change per (epochs, B) (the mean over seeds of each run's
    per-epoch rate over its last two epochs); two seeds: no test, the claim still in its unit."""
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    runs = [r for r in runs_of() if r.name != "one-epoch"]
    pre = spec._analyse_batch_size(runs, {}).tables["pretrain"]
    want = [np.mean([100 * (math.sqrt(0.8 * (0.9 - 0.01 * s - 0.0001 * b - 0.01 * e)) - 1) for s in SEEDS])
            for e in (2, 8) for b in BATCHES]
    assert [r["loss_change"] for r in pre] == pytest.approx(want)
    # another sweep's run with a training history does not enter the pre-training notes
    other = RunRecord("other", "o", Path("."), {"schedule.epochs": 2, "run.batch_size": 64, "run.seed": 0},
                      results={"history": [{"train_loss": 1.0}, {"train_loss": 0.1}]})
    assert spec._analyse_batch_size(runs + [other], {}).notes == spec._analyse_batch_size(runs, {}).notes
    (c,) = spec._analyse_batch_size([r for r in runs if r.get("run.seed") < 2], {}).claims
    assert (c.verdict, c.stats.unit) == ("UNDECIDED", UNIT)
    assert c.stats.detail.startswith("no test at 2 epochs, 8 epochs")
