"""sm-table1 (Scaling MLPs Table 1) field by field: its analysis on a made-up table whose numbers
are chosen here (the rows and their order, the bars and the longer-training curve, the published
rows beside ours, each claim's groups, labels, runs and premise), and its plan against the
paper's grid written out here (2 models × DA off/on × 3 seeds at 100 epochs, MLP-Inv + DA at
1000 and 5000 epochs; §7's recipe). The verdicts' own rules are tested in test_verdict_*.py; the
expected verdicts here are ``verdicts.compare``/``all_of`` of the groups the paper names."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments import expand, plan_experiment
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.plots import Bars, Panel, Series
from mlplab.experiments.specs import sm_table1 as spec
from mlplab.experiments.specs.sm_table1 import INV, MLP
from mlplab.experiments.verdicts import all_of, compare

SEEDS = (0, 1, 2, 3)
TILT = (0.3, -0.3, 0.1, -0.1)  # per-seed offsets whose mean is 0
PLATEAUED = [{"train_loss": 1.0}, {"train_loss": 0.99}, {"train_loss": 0.985}]
# (model, DA, epochs) → (mean test error at seed 0 before the seed terms, training error, tilt weight)
CELLS = {(MLP, False, 8): (30.0, 2.0, 0), (MLP, True, 8): (27.0, 10.0, 1), (INV, False, 8): (25.0, 5.0, 3),
         (INV, True, 8): (21.0, 12.0, 5), (INV, True, 32): (18.0, 9.0, 2), (INV, True, 128): (15.0, 8.0, 6)}
MANIFEST = {"scale": {"dataset": "made-up"}}


def err(cell, s: int) -> float:
    return CELLS[cell][0] + 0.5 * s + TILT[s] * CELLS[cell][2]


def record(cell, s: int, sweep: str | None = None, e: float | None = None, train: float | None = None) -> RunRecord:
    m, da, ep = cell
    sweep = sweep or ("table" if ep == 8 else f"longer-{ep}")
    e = err(cell, s) if e is None else e
    train = CELLS[cell][1] if train is None else train
    return RunRecord(sweep, f"{m}-{da}-{ep}-{s}", Path("/nonexistent"),
                     {"meta.model": m, "meta.da": da, "schedule.epochs": ep, "run.seed": s},
                     results={"test_acc": 1 - e / 100, "train_acc": 1 - train / 100, "params": 1000,
                              "history": PLATEAUED})


def table_runs(cells=CELLS) -> list[RunRecord]:
    """Every cell's runs in reversed order (the analysis sorts), an unfinished run and another
    sweep's run (both ignored)."""
    runs = [record(c, s) for c in reversed(list(cells)) for s in SEEDS]
    unfinished = record((MLP, False, 8), 0, e=50.0)
    unfinished.results = None
    return runs + [unfinished, record((MLP, False, 8), 0, sweep="scratch", e=99.0)]


def per_seed(cell) -> dict[int, float]:
    return {s: err(cell, s) for s in SEEDS}


def same(v, w) -> None:
    """Two verdicts agree in every field a report shows."""
    assert (v.held, v.statistic, v.effect_name, v.unit, v.detail, v.n, v.extra) == \
        (w.held, w.statistic, w.effect_name, w.unit, w.detail, w.n, w.extra)
    assert v.effect == pytest.approx(w.effect, abs=1e-12)


def test_table1_analysis_rows_panels_published_and_claims(monkeypatch):
    drawn = []
    monkeypatch.setattr(spec, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = table_runs()
    an = spec._analyse_table1(runs, MANIFEST)
    order = list(CELLS)  # (epochs, MLP first, no DA first) is the order written above
    mean = {c: float(np.mean([err(c, s) for s in SEEDS])) for c in CELLS}
    std = {c: float(np.std([err(c, s) for s in SEEDS], ddof=1)) for c in CELLS}
    assert [(r["model"], r["DA"], r["epochs"]) for r in an.table] == order
    assert [r["test_error"] for r in an.table] == pytest.approx([mean[c] for c in order])
    assert [r["test_acc"] for r in an.table] == pytest.approx([100.0 - mean[c] for c in order])
    assert [r["test_error_std"] for r in an.table] == pytest.approx([std[c] for c in order])
    assert [r["train_error"] for r in an.table] == pytest.approx([CELLS[c][1] for c in order])
    assert [r["n"] for r in an.table] == [4] * 6
    assert an.columns == ["model", "DA", "epochs", "test_acc", "test_error", "test_error_std", "train_error",
                          "loss_change", "params", "connections", "n"]
    # the bars of every cell, and MLP-Inv + DA over its three budgets
    labels = ["MLP @8E", "MLP + DA @8E", "MLP-Inv @8E", "MLP-Inv + DA @8E", "MLP-Inv + DA @32E", "MLP-Inv + DA @128E"]
    inv_da = [c for c in order if c[0] == INV and c[1]]
    assert an.figures == {"sm-table1": "fig"}
    assert drawn == [([Bars("made-up: test error (mean ± sd over seeds)", "test error (%)", labels,
                            pytest.approx([mean[c] for c in order]), pytest.approx([std[c] for c in order]),
                            groups=[c[0] for c in order]),
                       Panel("MLP-Inv + DA: longer training", "epochs", "test error (%)",
                             [Series("MLP-Inv + DA", [8, 32, 128], pytest.approx([mean[c] for c in inv_da]),
                                     pytest.approx([std[c] for c in inv_da]))], xscale="log")],
                      "Scaling MLPs Table 1: MLP vs MLP-Inv, with and without DA")]
    # published: ours beside each row, the longer budgets in order (1000E ↔ 32, 5000E ↔ 128)
    ours = {c: f"{100 - mean[c]:.2f} ± {std[c]:.2f} @{c[2]}E (n=4)" for c in CELLS}
    mine = [ours[MLP, False, 8], ours[MLP, True, 8], ours[INV, False, 8], ours[INV, True, 32], ours[INV, True, 128],
            "–"]
    assert an.published == [{k: row[k] for k in ("row", "cifar10", "cifar100", "tinyimagenet", "imagenet")}
                            | {"ours (made-up, epochs)": o} for row, o in zip(spec.TABLE1_PUBLISHED, mine)]
    assert an.notes == ["published numbers are CIFAR-10 / CIFAR-100 / Tiny ImageNet / ImageNet-1k at 64×64; ours "
                        "are made-up (see the settings): compare directions, not levels"]
    # the claims: DA < no DA per model, Inv < MLP with and without DA, each budget < the one before
    da, inv, ep = an.claims
    finished = [r for r in runs if r.results is not None and r.sweep != "scratch"]
    want = {
        "da-helps": all_of({f"{m} @8E": compare(per_seed((m, True, 8)), per_seed((m, False, 8)),
                                                what=f"{m} + DA − {m} test error", unit="points")
                            for m in (MLP, INV)}, unit="points"),
        "inv-helps": all_of({f"{w} DA": compare(per_seed((INV, d, 8)), per_seed((MLP, d, 8)),
                                                what="MLP-Inv − MLP test error", unit="points")
                             for w, d in (("without", False), ("with", True))}, unit="points"),
        "epochs-help": all_of({f"@{hi}E vs @{lo}E": compare(per_seed((INV, True, hi)), per_seed((INV, True, lo)),
                                                            what="longer − shorter test error", unit="points")
                               for lo, hi in ((8, 32), (32, 128))}, unit="points")}
    for c, spec_ in zip((da, inv, ep), (spec.CLAIM_DA, spec.CLAIM_INV, spec.CLAIM_EPOCHS)):
        assert (c.key, c.claim, c.verdict, c.detail) == (spec_.key, spec_.text, "HELD", "")
        same(c.stats, want[c.key])
        assert c.stats.extra["parts"] == 2
    assert da.runs == finished and inv.runs == finished
    assert ep.runs == [r for r in finished if r.get("meta.model") == INV and r.get("meta.da")]
    # the deciding part's effect from the numbers above: the MLP's DA effect is −3, MLP-Inv's −4
    assert {da.stats.extra["deciding"]: da.stats.effect} in ({"MLP @8E": pytest.approx(-3.0)},
                                                              {"MLP-Inv @8E": pytest.approx(-4.0)})
    # the premise: the smaller of the two no-DA gaps (test − training error), MLP-Inv's here
    gaps = [mean[MLP, False, 8] - CELLS[MLP, False, 8][1], mean[INV, False, 8] - CELLS[INV, False, 8][1]]
    assert [ch.value for ch in da.checks] == pytest.approx([min(gaps)]) and min(gaps) == pytest.approx(20.75)


@pytest.mark.parametrize("small", [MLP, INV])
def test_table1_da_premise_is_the_smaller_gap_of_both_models(monkeypatch, small):
    """One model without DA overfits (gap 28 points), the other does not (1 point): DA has
    nothing to fix for that one, so the claim is NOT TESTABLE whichever it is."""
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    runs = table_runs()
    for r in runs:
        if r.results and not r.get("meta.da") and r.get("meta.model") == small:
            r.results["train_acc"] = r.results["test_acc"] + 0.01  # training error 1 point below the test error
    da = spec._analyse_table1(runs, MANIFEST).claims[0]
    assert da.checks[0].value == pytest.approx(1.0) and da.verdict == "NOT TESTABLE"


def test_table1_without_one_model_without_da_leaves_the_premise_unmeasured(monkeypatch):
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    runs = [r for r in table_runs() if (r.get("meta.model"), r.get("meta.da")) != (INV, False)]
    da = spec._analyse_table1(runs, MANIFEST).claims[0]
    assert (da.checks[0].value, da.checks[0].met, da.verdict) == (None, None, "UNDECIDED")


def test_table1_one_budget_of_mlp_inv_with_da_has_no_epochs_test(monkeypatch):
    """Without the longer sweeps: no epochs claim to test, no curve, and no ours beside the
    1000- and 5000-epoch rows; the 2×2 table still decides the other two claims."""
    drawn = []
    monkeypatch.setattr(spec, "draw", lambda panels, title: drawn.append(panels) or "fig")
    an = spec._analyse_table1(table_runs({c: v for c, v in CELLS.items() if c[2] == 8}), MANIFEST)
    da, inv, ep = an.claims
    assert (da.verdict, inv.verdict) == ("HELD", "HELD")
    assert (ep.key, ep.held, ep.stats, ep.detail) == ("epochs-help", None, None, "needs MLP-Inv + DA at two budgets")
    assert ep.verdict == "UNDECIDED" and len(ep.runs) == 4
    assert [type(p) for p in drawn[0]] == [Bars]
    assert [p["ours (made-up, epochs)"] for p in an.published][3:] == ["–", "–", "–"]
    assert an.published[0]["ours (made-up, epochs)"].endswith("@8E (n=4)")


def test_table1_without_runs_decides_nothing(monkeypatch):
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    an = spec._analyse_table1([], {})
    assert an.table == [] and [c.verdict for c in an.claims] == ["UNDECIDED"] * 3
    assert [p["ours (, epochs)"] for p in an.published] == ["–"] * 6
    # the table's budget is 0 when there is none: the parts are named, and none has a test
    assert an.claims[0].stats.detail.startswith("no test at MLP @0E, MLP-Inv @0E; ")
    assert an.claims[2].stats is None and an.claims[0].stats.unit == "points"


# ------------------------------------------------------------------------------------ the plans

#: Scaling MLPs §7 / Table 1 written out: LION at 5e-5, batch 1024, no weight decay, a constant lr,
#: label smoothing 0.3, 64×64 images; DA = random crop (padding 4) + flip + mixup 0.8; MLP B-6/Wi-1024
#: z ↦ W σ(LN z) with GELU; MLP-Inv k = 4
PAPER_RECIPE = {"optim.name": "lion", "optim.lr": 5e-5, "run.batch_size": 1024, "optim.weight_decay": 0.0,
                "schedule.schedule": "constant", "augment.label_smoothing": 0.3, "data.image_size": 64}
PAPER_DA = {"augment.crop_padding": 4, "augment.hflip": True, "augment.mixup": 0.8}
NO_DA = {"augment.crop_padding": 0, "augment.hflip": False, "augment.mixup": 0.0}
MODEL = {MLP: {"model.name": "mlp", "model.kwargs.width": 1024, "model.kwargs.depth": 6,
               "model.kwargs.norm_position": "pre", "model.kwargs.act": "gelu", "meta.lr_key": "sm-table1 mlp"},
         INV: {"model.name": "bottleneck_mlp", "model.kwargs.width": 1024, "model.kwargs.depth": 6,
               "model.kwargs.expansion": 4.0, "meta.lr_key": "sm-table1 inv"}}
KEYS = ("model.", "augment.", "optim.", "meta.", "run.batch_size", "run.seed", "schedule.epochs", "schedule.schedule",
        "data.image_size", "data.train_subset", "data.subset")


def _runs(scale: str, dataset: str | None = None):
    _, _, plan = plan_experiment("sm-table1", scale, dataset=dataset, check_available=False)
    return plan, {sw.name: sw for sw in plan.sweeps}


def _grid(sweep) -> list[tuple[str, dict]]:
    return [(s.name, {k: v for k, v in s.overrides.items() if k.startswith(KEYS)}) for s in expand(sweep)]


def _cell(model: str, da: bool, epochs: int, seed: int, extra=None) -> tuple[str, dict]:
    name = f"model={model},da={str(da).lower()},epochs={epochs},seed={seed}"
    return name, {**PAPER_RECIPE, **MODEL[model], **(PAPER_DA if da else NO_DA), "meta.model": model, "meta.da": da,
                  "schedule.epochs": epochs, "run.seed": seed, **(extra or {})}


def test_table1_paper_plan_is_the_published_grid():
    plan, sweeps = _runs("paper")
    assert list(sweeps) == ["table", "longer-1000", "longer-5000"]
    assert _grid(sweeps["table"]) == [_cell(m, da, 100, s) for m in (MLP, INV) for da in (False, True)
                                      for s in (0, 1, 2)]
    for e in (1000, 5000):
        assert _grid(sweeps[f"longer-{e}"]) == [_cell(INV, True, e, s) for s in (0, 1, 2)]
        assert (sweeps[f"longer-{e}"].epochs, sweeps[f"longer-{e}"].description) == (e, f"MLP-Inv + DA, {e} epochs")
    t = sweeps["table"]
    assert (t.epochs, t.description) == (100, "MLP and MLP-Inv (B-6/Wi-1024) × DA off/on, 100 epochs")
    assert all(o["data.dataset"] == "cifar10" for sw in plan.sweeps for o in (s.overrides for s in expand(sw)))
    assert plan.settings == {"models": "MLP and MLP-Inv, L = 6, m = 1024, k = 4", "epochs": 100,
                             "MLP-Inv + DA also at": [1000, 5000], "training images": "all", "DA": PAPER_DA}
    (note,) = plan.notes
    assert note.startswith("batch 1024: §7 does not state Table 1's batch") and note.endswith("defaults")


def test_table1_cpu_plan_draws_a_random_3000_image_subset_and_notes_the_proxy():
    plan, sweeps = _runs("cpu", "fashion_mnist")
    for name in ("table", "longer-128"):
        assert all((s.overrides["data.train_subset"], s.overrides["data.subset"]) == (3000, "random")
                   for s in expand(sweeps[name]))
    assert sweeps["table"].description == "MLP and MLP-Inv (B-6/Wi-128) × DA off/on, 32 epochs"
    assert plan.settings["training images"] == 3000 and plan.settings["models"].endswith("m = 128, k = 4")
    assert plan.notes == [
        "proxy: Fashion-MNIST at 28×28×1 (not CIFAR/ImageNet at 64×64×3), m = 128 instead of 1024, 3 000 training "
        "images, 32 and 128 epochs instead of 100/1000/5000; AdamW at each model's lr chosen on a held-out 10% of the "
        "training set (recipes.cpu_lr) instead of LION 5e-5; DA = random crop (padding 1) + flip without mixup; label "
        "smoothing 0.3 as published"]


def test_table1_smoke_plan_has_no_notes_and_the_whole_tiny_set():
    plan, sweeps = _runs("smoke")
    assert plan.notes == [] and plan.settings["training images"] == "all"
    assert [s.name for s in expand(sweeps["longer-3"])] == ["model=MLP-Inv,da=true,epochs=3,seed=0"]
    assert spec.table1_models(16, 1, 2.0) == {MLP: spec._model(MLP, 16, 1, 2.0), INV: spec._model(INV, 16, 1, 2.0)}
    assert spec._model(INV, 16, 1, 2.0)["model.kwargs.expansion"] == 2.0


def test_table1_epoch_budgets_are_those_of_mlp_inv_with_da(monkeypatch):
    """A budget that only the MLP with DA or MLP-Inv without DA has (64 epochs) is no budget of
    the epochs claim: it compares MLP-Inv + DA at 8 and 32 epochs only."""
    drawn = []
    monkeypatch.setattr(spec, "draw", lambda panels, title: drawn.append(panels) or "fig")
    cells = {c: v for c, v in CELLS.items() if c[2] <= 32}
    extra = [record(c, s, sweep="longer-64", e=10.0 + s, train=5.0) for c in ((MLP, True, 64), (INV, False, 64))
             for s in SEEDS]
    ep = spec._analyse_table1(table_runs(cells) + extra, MANIFEST).claims[2]
    assert ep.stats.extra["parts"] == 1 and ep.stats.detail.startswith("@32E vs @8E: ")
    assert [p.series[0].x for p in drawn[0][1:]] == [[8, 32]]  # two budgets make a curve


def test_table1_plan_builds_mlp_inv_at_the_scales_expansion(monkeypatch):
    from dataclasses import replace

    monkeypatch.setitem(spec.TABLE1, "smoke", replace(spec.TABLE1["smoke"], expansion=2.0))
    _, sweeps = _runs("smoke")
    assert {s.overrides.get("model.kwargs.expansion") for s in expand(sweeps["table"])} == {None, 2.0}
