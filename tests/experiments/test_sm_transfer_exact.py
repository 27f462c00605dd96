"""sm-transfer (Scaling MLPs Tables 2–3) field by field: its analysis on a made-up table whose
numbers are chosen here (the rows of every stage, both bar panels, Tables 2–3 beside ours, each
claim's groups, labels and premises), and its plans against the paper's grid written out here
(B-6/Wi-1024 pre-trained on ImageNet-21k with and without DA at two sizes for as many examples,
fine-tuned with SGD 0.01 head / 0.001 body for 50 epochs, probed with LION 1e-5 on a frozen body,
from scratch with §7's recipe). The verdicts' rules are tested in test_verdict_*.py; the expected
verdicts here are ``verdicts.compare``/``all_of`` of the groups the paper names."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_sm_table1_exact import same  # two verdicts agree in every field a report shows

from mlplab.experiments import expand, plan_experiment
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.plots import Bars
from mlplab.experiments.specs import sm_transfer as spec
from mlplab.experiments.verdicts import all_of, compare

SEEDS = (0, 1, 2, 3)
TILT = (0.3, -0.3, 0.1, -0.1)  # per-seed offsets whose mean is 0
U = "points of downstream test error"
SMALL, BIG = 1000, 5000
# (N, DA) → (fine-tuned error, probed error, tilt weight); from scratch 15 (weight 7)
FT = {(SMALL, False): (20.0, 30.0, 0), (SMALL, True): (12.0, 22.0, 1), (BIG, False): (17.0, 27.0, 3),
      (BIG, True): (8.0, 19.0, 5)}
SCRATCH = (15.0, 7)


def ft_err(n: int, da: bool, s: int, probe: bool = False) -> float:
    e, p, w = FT[n, da]
    return (p if probe else e) + 0.5 * s + TILT[s] * w


def scratch_err(s: int, base: float = SCRATCH[0]) -> float:
    return base + 0.5 * s + TILT[s] * SCRATCH[1]


def rec(sweep: str, s: int, results: dict | None, **meta) -> RunRecord:
    labels = {"run.seed": s, **{f"meta.{k}": v for k, v in meta.items()}}
    return RunRecord(sweep, f"{sweep}-{s}-{meta}", Path("/nonexistent"), labels, results=results)


def acc(err: float, **more) -> dict:
    return {"test_acc": 1 - err / 100, **more}


def runs_of(ft=FT, scratch: float = SCRATCH[0], pre_n=lambda n: 8 * n, down_n=(3000, 4000)) -> list[RunRecord]:
    """Every stage's runs, pre-training sets 8·N images (the largest 40 000) and downstream sets
    3 000 and 4 000 images (the largest 4 000): a ratio of exactly 10; plus an unfinished
    fine-tuning run (ignored)."""
    runs = []
    for s in SEEDS:
        for (n, da) in ft:  # a probe before the runs with the same labels (a stage read from all runs would differ)
            hist = [{"train_loss": 1.0}, {"train_loss": 0.9}, {"train_loss": 0.81 + 0.01 * s}]
            runs.append(rec("probe", s, {"probe": {"acc": 1 - ft_err(n, da, s, probe=True) / 100}}, n=n, da=da))
            runs.append(rec("pretrain", s, acc(50.0, train_examples=pre_n(n), history=hist), n=n, da=da))
            runs.append(rec("finetune", s, acc(ft_err(n, da, s)), n=n, da=da))
        runs.append(rec("scratch", s, acc(scratch_err(s, scratch), train_examples=down_n[s % 2])))
    return runs + [rec("finetune", 9, None, n=BIG, da=True)]


def errs(n, da, probe=False) -> dict[int, float]:
    return {s: ft_err(n, da, s, probe) for s in SEEDS}


def scratch_errs(base: float = SCRATCH[0]) -> dict[int, float]:
    return {s: scratch_err(s, base) for s in SEEDS}


def test_transfer_analysis_rows_panels_published_and_claims(monkeypatch):
    drawn = []
    monkeypatch.setattr(spec, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = runs_of()
    an = spec._analyse_transfer(runs, {})
    cells = list(FT)
    mean = {c: float(np.mean(list(errs(*c).values()))) for c in cells}
    sd = {c: float(np.std(list(errs(*c).values()), ddof=1)) for c in cells}
    pmean = {c: float(np.mean(list(errs(*c, True).values()))) for c in cells}
    psd = {c: float(np.std(list(errs(*c, True).values()), ddof=1)) for c in cells}
    smean, ssd = float(np.mean(list(scratch_errs().values()))), float(np.std(list(scratch_errs().values()), ddof=1))
    # the rows: fine-tuned, probed, from scratch, pre-trained; each in the order first seen
    want = ([("finetune", n, da, mean[n, da]) for n, da in cells] + [("probe", n, da, pmean[n, da]) for n, da in cells]
            + [("scratch", None, None, smean)] + [("pretrain", n, da, 50.0) for n, da in cells])
    assert [(r["stage"], r["N"], r["DA"]) for r in an.table] == [w[:3] for w in want]
    assert [r["test_error"] for r in an.table] == pytest.approx([w[3] for w in want])
    assert [r["n"] for r in an.table] == [4] * 13
    lc = [100 * ((0.81 + 0.01 * s) / 1.0) ** 0.5 - 100 for s in SEEDS]  # 2 epochs: per-epoch rate of the last two
    assert an.table[-1]["loss_change"] == pytest.approx(np.mean(lc))
    assert an.table[-1]["loss_change_std"] == pytest.approx(np.std(lc, ddof=1))
    assert an.columns == ["stage", "N", "DA", "test_error", "test_error_std", "loss_change", "n"]
    # the figure: fine-tuned (and from scratch) and probed, mean ± sd over seeds
    labels = ["N=1000", "N=1000 +DA", "N=5000", "N=5000 +DA"]
    assert an.figures == {"sm-transfer": "fig"}
    assert drawn == [([Bars("fine-tuned (Table 2 proxy)", "downstream test error (%)", labels + ["scratch +DA"],
                            pytest.approx([mean[c] for c in cells] + [smean]), pytest.approx([sd[c] for c in cells]
                                                                                             + [ssd])),
                       Bars("linear probe (Table 3 proxy)", "downstream test error (%)", labels,
                            pytest.approx([pmean[c] for c in cells]), pytest.approx([psd[c] for c in cells]))],
                      "Scaling MLPs Tables 2–3 in miniature: transfer with and without DA in pre-training")]
    # Tables 2–3 with ours at the largest N: B-6/Wi-1024 ↔ no DA, + DA ↔ DA, none for B-12
    ours = {("fine", False): mean[BIG, False], ("fine", True): mean[BIG, True], ("line", False): pmean[BIG, False],
            ("line", True): pmean[BIG, True]}
    pub = []
    for what, table in (("fine-tune (Table 2)", spec.TABLE2), ("linear probe (Table 3)", spec.TABLE3)):
        for model, accs in table.items():
            da = {"B-6/Wi-1024": False, "B-6/Wi-1024 + DA": True}.get(model)
            o = "–" if da is None else round(100.0 - ours[what[:4], da], 2)
            pub.append({"what": what, "model": model, **dict(zip(["C-10", "C-100", "STL-10", "TinyIN", "IN-1k"], accs)),
                        "ours": o})
    assert an.published == pub
    assert an.notes == ["pre-training set 40000 images, downstream training set 4000 (10×)"]
    # the claims, each on the groups the paper names
    expect = {
        "transfer": compare(errs(BIG, True), scratch_errs(), what="fine-tuned − from scratch", unit=U),
        "da-finetune": all_of({f"N = {n}": compare(errs(n, True), errs(n, False), what="+DA − no DA", unit=U)
                               for n in (SMALL, BIG)}, what="every pre-training size", unit=U),
        "da-probe": all_of({f"N = {n}": compare(errs(n, True, True), errs(n, False, True), what="+DA − no DA", unit=U)
                            for n in (SMALL, BIG)}, what="every pre-training size", unit=U),
        "da-over-size": compare(errs(SMALL, True), errs(BIG, False), what="N = 1000 + DA − N = 5000 no DA", unit=U),
        "no-da-vs-scratch": compare(scratch_errs(), errs(BIG, False),
                                    what="from scratch + DA − N = 5000 no DA fine-tuned", unit=U)}
    specs = (spec.TRANSFER_CLAIM, spec.DA_FT, spec.DA_PROBE, spec.DA_OVER_SIZE, spec.DA_OVER_SCRATCH)
    assert [c.key for c in an.claims] == [s.key for s in specs] == list(expect)
    pre = [r for r in runs if r.sweep == "pretrain"]
    for c, s in zip(an.claims, specs):
        same(c.stats, expect[c.key])
        assert c.verdict == "HELD" and c.runs == pre and c.detail == ""
        assert [(ch.need.quantity, ch.value) for ch in c.checks] == [(n.quantity, {"pretrain_ratio": 10.0,
                                                                                    "transfers": 1.0}[n.quantity])
                                                                      for n in s.needs]
    assert an.claims[0].claim == f"N = 5000: {spec.TRANSFER_CLAIM.text}"
    assert [c.claim for c in an.claims[1:]] == [s.text for s in specs[1:]]
    assert an.claims[0].stats.effect == pytest.approx(mean[BIG, True] - smean)


def test_transfer_premise_follows_the_first_claim(monkeypatch):
    """Fine-tuning loses to from scratch: transfers = 0 (the DA claims NOT TESTABLE); undecided:
    transfers unknown (UNDECIDED); no downstream set size: the ratio unknown."""
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    lost = spec._analyse_transfer(runs_of(scratch=2.0), {})
    assert [ch.value for ch in lost.claims[1].checks] == [10.0, 0.0]
    assert [c.verdict for c in lost.claims] == ["DID NOT HOLD"] + ["NOT TESTABLE"] * 4
    flat = spec._analyse_transfer(runs_of(scratch=FT[BIG, True][0]), {})
    tie = flat.claims[1].checks[1]
    assert tie.need.quantity == "transfers" and tie.value is None and flat.claims[0].verdict == "UNDECIDED"
    none = spec._analyse_transfer(runs_of(down_n=(0, 0)), {})
    assert none.claims[0].checks[0].value is None and none.notes[0].startswith("pre-training set 40000 images, "
                                                                              "downstream training set 0 (nan×)")
    runs = runs_of()
    for r in runs:  # records without their training-set sizes: both 0, the ratio unknown
        if r.results:
            r.results.pop("train_examples", None)
    unknown = spec._analyse_transfer(runs, {})
    assert unknown.notes == ["pre-training set 0 images, downstream training set 0 (nan×)"]
    assert [c.verdict for c in unknown.claims] == ["UNDECIDED"] * 5
    half = runs_of(pre_n=lambda n: 4 * n)  # 20 000 over 4 000: 5×, out of the regime
    assert [c.verdict for c in spec._analyse_transfer(half, {}).claims] == ["NOT TESTABLE"] * 5


def test_transfer_with_one_size_has_no_size_claim_and_without_runs_nothing(monkeypatch):
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    one = spec._analyse_transfer(runs_of({c: v for c, v in FT.items() if c[0] == BIG}), {})
    assert [c.key for c in one.claims] == ["transfer", "da-finetune", "da-probe", "no-da-vs-scratch"]
    assert one.claims[1].stats.extra["parts"] == 1 and one.claims[1].stats.detail.startswith("N = 5000: ")
    empty = spec._analyse_transfer([], {})
    assert (empty.table, empty.columns, empty.figures, empty.claims) == ([], None, {}, [])
    # pre-training runs only (nothing downstream yet): the sizes come from them, nothing is decided
    pre = [r for r in runs_of() if r.sweep == "pretrain"]
    an = spec._analyse_transfer(pre, {})
    assert [c.verdict for c in an.claims] == ["UNDECIDED"] * 5 and math.isnan(an.claims[0].stats.effect)
    # no size tested: every claim still says its unit, the DA claims' (all_of over sizes) included
    assert [c.stats.unit for c in an.claims] == [U] * 5


def test_transfer_set_sizes_without_a_stage_and_ours_to_a_hundredth(monkeypatch):
    """No pre-training runs read (only the downstream stages): a pre-training set of 0 images, a
    ratio of 0 (out of the regime); no from-scratch runs: a downstream set of 0 images, the ratio
    unknown. Ours in Tables 2–3 is the accuracy rounded to 0.01: 100 − (8 1/3 + 0.75) = 90.92,
    100 − (19 1/7 + 0.75) = 80.11 (0.75: the seed terms' mean)."""
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    no_pre = spec._analyse_transfer([r for r in runs_of() if r.sweep != "pretrain"], {})
    assert no_pre.notes == ["pre-training set 0 images, downstream training set 4000 (0×)"]
    assert no_pre.claims[0].checks[0].value == 0.0 and no_pre.claims[0].verdict == "NOT TESTABLE"
    no_scratch = spec._analyse_transfer([r for r in runs_of() if r.sweep != "scratch"], {})
    assert no_scratch.notes == ["pre-training set 40000 images, downstream training set 0 (nan×)"]
    assert no_scratch.claims[0].checks[0].value is None
    monkeypatch.setitem(FT, (BIG, True), (8.0 + 1 / 3, 19.0 + 1 / 7, 5))
    thirds = spec._analyse_transfer(runs_of(), {})
    ours = {(r["what"], r["model"]): r["ours"] for r in thirds.published}
    assert ours["fine-tune (Table 2)", "B-6/Wi-1024 + DA"] == 90.92
    assert ours["linear probe (Table 3)", "B-6/Wi-1024 + DA"] == 80.11


# ------------------------------------------------------------------------------------ the plans

PAPER_DA = {"augment.random_resized_crop": True, "augment.hflip": True, "augment.mixup": 0.8}


def _plan(scale: str, dataset: str | None = None):
    _, _, plan = plan_experiment("sm-transfer", scale, dataset=dataset, check_available=False)
    return plan, {sw.name: expand(sw) for sw in plan.sweeps}


def _aug(o: dict) -> dict:
    return {k: v for k, v in o.items() if k.startswith("augment.")}


def test_transfer_paper_plan_is_the_published_grid():
    """Pre-training: B-6/Wi-1024 on ImageNet-21k at 64×64, N = 12M (all) and a random 1.2M for 10×
    the epochs (800 at 12M), with and without random-resized crop + flip + mixup 0.8; each
    fine-tuned on CIFAR-10 with a new head (SGD momentum 0.9, 0.001 body / 0.01 head, 50
    epochs, batch 2048) and probed (LION 1e-5, body frozen, 50 epochs); from scratch: §7's LION
    5e-5, batch 1024, 64×64, label smoothing 0.3, 50 epochs."""
    plan, runs = _plan("paper")
    grid = [(n, da, s) for n in (1_200_000, 12_000_000) for da in (False, True) for s in (0, 1, 2)]
    names = [f"n={n},da={str(da).lower()},seed={s}" for n, da, s in grid]
    assert [r.name for r in runs["pretrain"]] == names
    for r, (n, da, s) in zip(runs["pretrain"], grid):
        o = r.overrides
        assert (o["model.name"], o["data.dataset"], o["data.image_size"]) == ("bottleneck_mlp_b6_wi1024", "packed", 64)
        assert (o["meta.n"], o["meta.da"], o["run.seed"], o["schedule.epochs"]) == (n, da, s, 800 * 12_000_000 / n)
        assert (o["optim.name"], o["optim.lr"]) == ("lion", 1e-5)
        assert _aug(o) == {"augment.label_smoothing": 0.3, **(PAPER_DA if da else {})}
        assert (o.get("data.train_subset"), o.get("data.subset")) == ((n, "random") if n < 12_000_000 else (None, None))
    for stage in ("finetune", "probe"):
        assert [r.name for r in runs[stage]] == names
        for r, (n, da, s) in zip(runs[stage], grid):
            o = r.overrides
            assert o["pretrained"] == f"pretrain/n={n},da={str(da).lower()},seed={s}"
            assert (o["data.dataset"], o["model.name"], o["model.new_head"]) == ("cifar10", "bottleneck_mlp_b6_wi1024",
                                                                              True)
            assert (o["schedule.epochs"], o["run.batch_size"], o["optim.momentum"]) == (50, 2048, 0.9)
            assert "data.train_subset" not in o
            if stage == "finetune":
                assert (o["optim.name"], o["optim.lr"], o["optim.head_lr"]) == ("sgd", 1e-3, 1e-2)
                assert "optim.freeze" not in o
            else:
                assert (o["optim.name"], o["optim.lr"], o["optim.head_lr"], o["optim.freeze"]) == ("lion", 1e-5, None,
                                                                                                   "body")
    assert [r.name for r in runs["scratch"]] == ["seed=0", "seed=1", "seed=2"]
    for r in runs["scratch"]:
        o = r.overrides
        assert (o["optim.name"], o["optim.lr"], o["run.batch_size"], o["data.image_size"]) == ("lion", 5e-5, 1024, 64)
        assert (o["augment.label_smoothing"], o["schedule.epochs"], o["data.dataset"]) == (0.3, 50, "cifar10")
        assert (o["model.name"], o["model.kwargs.width"], o["model.kwargs.depth"]) == ("bottleneck_mlp", 1024, 6)
    assert plan.settings == {"model": "bottleneck_mlp_b6_wi1024", "pre-training N": [1_200_000, 12_000_000],
                             "pre-training epochs at max N": 800, "downstream epochs": 50, "+ DA": PAPER_DA,
                             "probe": "lion"}
    sweeps = {sw.name: sw for sw in plan.sweeps}
    assert (sweeps["pretrain"].description, sweeps["pretrain"].epochs) == (
        "pre-training with and without DA at two data sizes", 800)
    assert sweeps["pretrain"].name_keys == ["meta.n", "meta.da", "run.seed"]


def test_transfer_cpu_plan_fine_tunes_with_the_published_optimiser_on_the_cpu_batch():
    plan, runs = _plan("cpu", "fashion_mnist")
    for r in runs["pretrain"]:
        o = r.overrides
        assert o["schedule.epochs"] == 6 * 30000 / o["meta.n"] and o["run.checkpoint_every"] == 1
        assert (o["model.name"], o["model.kwargs.width"], o["model.kwargs.depth"]) == ("bottleneck_mlp", 128, 4)
        assert o["data.classes"] == [0, 1, 2, 3, 4] and "data.train_subset" in o if o["meta.n"] == 7500 else True
        assert _aug(o) == ({"augment.crop_padding": 2, "augment.hflip": True} if o["meta.da"] else {})
        assert o.get("data.train_subset") == (7500 if o["meta.n"] == 7500 else None)
    for r in runs["finetune"]:
        o = r.overrides
        assert (o["optim.name"], o["optim.lr"], o["optim.head_lr"], o["optim.momentum"]) == ("sgd", 1e-3, 1e-2, 0.9)
        assert (o["optim.nesterov"], o["optim.weight_decay"], o["optim.grad_clip"]) == (False, 1e-4, 1.0)
        assert (o["run.batch_size"], o["schedule.epochs"], o["model.new_head"]) == (32, 13, True)
        assert (o["data.classes"], o["data.train_subset"], o["data.subset"]) == ([5, 6, 7, 8, 9], 3000, "random")
        assert (o["model.name"], o["model.kwargs.width"], o["model.kwargs.depth"]) == ("bottleneck_mlp", 128, 4)
    for r in runs["scratch"] + runs["probe"]:
        o = r.overrides
        assert (o["data.classes"], o["data.train_subset"], o["data.subset"]) == ([5, 6, 7, 8, 9], 3000, "random")
    assert plan.settings["model"] == "B-4/Wi-128" and plan.notes[0] == spec.TRANSFER["cpu"].note


def test_transfer_smoke_plan_trains_the_largest_size_on_the_whole_tiny_set():
    _, runs = _plan("smoke")
    assert [(r.overrides["meta.n"], r.overrides["data.train_subset"]) for r in runs["pretrain"]] == [
        (32, 32), (32, 32), (64, 64), (64, 64)]
    assert [r.overrides["schedule.epochs"] for r in runs["pretrain"]] == [2.0, 2.0, 1.0, 1.0]


def test_transfer_plans_follow_the_scales_settings(monkeypatch):
    """Settings other than today's: at smoke scale the largest size trains on its own N images
    (not the recipe's 64), and the paper's fine-tuning epochs are the setting's, not the preset's."""
    from dataclasses import replace

    monkeypatch.setitem(spec.TRANSFER, "smoke", replace(spec.TRANSFER["smoke"], sizes=[16, 32]))
    monkeypatch.setitem(spec.TRANSFER, "paper", replace(spec.TRANSFER["paper"], finetune_epochs=20))
    _, runs = _plan("smoke")
    assert [(r.overrides["meta.n"], r.overrides["data.train_subset"]) for r in runs["pretrain"]] == [
        (16, 16), (16, 16), (32, 32), (32, 32)]
    _, runs = _plan("paper")
    assert {r.overrides["schedule.epochs"] for r in runs["finetune"]} == {20}
