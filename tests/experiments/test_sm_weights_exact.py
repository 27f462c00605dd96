"""sm-weights (Scaling MLPs Figs. 10–11) field by field: its analysis on r½ values chosen here
(the first-layer measure itself, ``measures.first_layer_units`` and ``analysis.units``, is
replaced by a stand-in that returns them: its own tests are tests/analysis/), so that each
claim's groups, the premise's even-spread reference, the pictures, the bars and the notes are
checked against numbers written here; and its plans against the paper's three conditions."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments import expand, plan_experiment
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.plots import Bars, Images
from mlplab.experiments.specs import sm_weights as spec
from mlplab.experiments.verdicts import compare

CONDS = ("no DA", "DA", "DA, fewer images")
SEEDS = (0, 1, 2, 3)
TILT = (0.3, -0.3, 0.1, -0.1)
R = {"no DA": 6.0, "DA": 4.0, "DA, fewer images": 5.0}  # median r½ (px) before the seed terms
WEIGHT = {"no DA": 0, "DA": 1, "DA, fewer images": 3}
REF = 8.0  # the even spread's r½ (px), the stand-in's


def r_half(c: str, s: int) -> float:
    return R[c] + 0.2 * s + TILT[s] * WEIGHT[c]


def runs_of() -> list[RunRecord]:
    runs = [RunRecord("units", f"{c}-{s}", Path(f"/x/{c}/{s}"), {"meta.condition": c, "run.seed": s},
                      results={"test_acc": 0.9}) for s in SEEDS for c in CONDS]
    return runs + [RunRecord("units", "unfinished", Path("/x/u"), {"meta.condition": "DA", "run.seed": 7}),
                   RunRecord("other", "o", Path("/x/o"), {"meta.condition": "DA", "run.seed": 0}, results={})]


def stand_in(monkeypatch, values=None, side=12, pictures=("no DA", "DA")):
    """Replace the measure: r½ per condition and seed from ``values``, pictures of ``pictures``;
    returns the calls it saw."""
    values = values if values is not None else {c: {s: r_half(c, s) for s in SEEDS} for c in CONDS}
    calls = []

    def first_layer_units(runs, units):
        calls.append((list(runs), units))
        rows = [{"condition": c, "seed": s, "r_half_median": v} for c in reversed(CONDS) for s, v in
                reversed(list(values.get(c, {}).items()))] + [{"condition": None, "seed": None}]
        return values, {c: f"units of {c}" for c in pictures}, side, rows

    monkeypatch.setattr(spec, "first_layer_units", first_layer_units)
    monkeypatch.setattr(spec, "uniform_half_energy_radius", lambda n: REF * n / 12)
    monkeypatch.setattr(spec, "unit_picture", lambda units: (f"image of {units}", units.endswith("DA")))
    return calls


def test_weights_analysis_claims_pictures_bars_and_notes(monkeypatch):
    calls = stand_in(monkeypatch)
    drawn = []
    monkeypatch.setattr(spec, "draw", lambda panels, title, ncols: drawn.append((panels, title, ncols)) or "fig")
    runs = runs_of()
    an = spec._analyse_weights(runs, {"settings": {"units drawn": 5}})
    units = [r for r in runs if r.sweep == "units" and r.results is not None]
    assert calls == [(units, 5)]
    per = {c: {s: r_half(c, s) for s in SEEDS} for c in CONDS}
    mean = {c: float(np.mean(list(per[c].values()))) for c in CONDS}
    sd = {c: float(np.std(list(per[c].values()), ddof=1)) for c in CONDS}
    da, data = an.claims
    want_da = compare(per["DA"], per["no DA"], what="r½ with DA − without", unit="px")
    want_data = compare(per["DA"], per["DA, fewer images"], what="r½ more images − fewer", unit="px")
    for c, w, spec_, conds in ((da, want_da, spec.CLAIM_W_DA, ("DA", "no DA")),
                               (data, want_data, spec.CLAIM_W_DATA, ("DA", "DA, fewer images"))):
        assert (c.key, c.verdict, c.stats.effect_name, c.stats.unit, c.stats.statistic) == (
            spec_.key, "HELD", w.effect_name, "px", w.statistic)
        assert c.stats.effect == pytest.approx(w.effect)
        assert c.runs == [r for r in units if r.get("meta.condition") in conds]
        # the premise: the most localised condition's mean r½ over the even spread's
        assert [ch.value for ch in c.checks] == pytest.approx([mean["DA"] / REF])
    assert da.stats.effect == pytest.approx(-2.0) and data.stats.effect == pytest.approx(-1.0 + 0.0)
    # the pictures of the conditions that have them, then the bars of every condition
    assert an.figures == {"sm-weights": "fig"}
    (panels, title, ncols), = drawn
    assert (title, ncols) == ("Scaling MLPs Figs. 10–11: first-layer units", 2)
    assert panels[:2] == [Images(f"{c}: ΔW^(1) units (lowest seed, most localised first)", f"image of units of {c}",
                                 symmetric=c.endswith("DA")) for c in ("no DA", "DA")]
    assert panels[2:] == [Bars("r½ (median over units; uniform = 8.00 px)", "r½ (pixels)", list(CONDS),
                               pytest.approx([mean[c] for c in CONDS]), pytest.approx([sd[c] for c in CONDS]))]
    # by condition's name ("None" between "DA, …" and "no DA"), then seed
    assert [(r["condition"], r["seed"]) for r in an.table] == [("DA", s) for s in SEEDS] + [
        ("DA, fewer images", s) for s in SEEDS] + [(None, None)] + [("no DA", s) for s in SEEDS]
    assert an.published == [{"figure": "Figs. 10–11", "published": "pictures: with DA and with more pre-training "
                             "data the first layer's units look more localised (no number)",
                             "ours": "; ".join(f"{c}: r½ {mean[c]:.2f} px" for c in CONDS)}]
    assert len(an.notes) == 3
    assert an.notes[0].endswith("energy spread evenly over the 12×12 image gives 8.00 px (no localisation)")
    assert an.notes[1] == ("W^(1) is the embedding of the flattened image (ch·H·W → m); r½ and the pictures are of "
                           "ΔW^(1) = W^(1) − its initial value (rebuilt from run.seed, initial_model): what training "
                           "added, without the random initial weights, which a short training leaves a large part of "
                           "(r_half_W_median: r½ of W^(1) itself); units drawn as H×W images, each on its own "
                           "symmetric colour scale")
    assert an.notes[2] == ("median r½ relative to the even spread: " + ", ".join(f"{c} {mean[c] / REF:.3f}"
                                                                                for c in CONDS)
                           + " (1 = no localisation; a unit confined to a disc of a quarter of the image's area is "
                             "about 0.5)")
    assert an.columns == ["condition", "seed", "train_images", "epochs", "r_half_median", "r_half_q10", "r_half_q90",
                          "r_half_W_median", "test_error"]


def test_weights_premise_reads_the_most_localised_condition(monkeypatch):
    """Only 'DA' is localised (r½ 0.5 of the even spread; the others 0.95): testable. Every
    condition at 0.95: NOT TESTABLE, whichever the pairs' order."""
    monkeypatch.setattr(spec, "draw", lambda panels, title, ncols: "fig")
    vals = {c: {s: (4.0 if c == "DA" else 7.6) + 0.1 * s for s in SEEDS} for c in CONDS}
    stand_in(monkeypatch, vals)
    an = spec._analyse_weights(runs_of(), {})
    assert an.claims[0].checks[0].value == pytest.approx(4.15 / REF) and an.claims[0].verdict == "HELD"
    vals = {c: {s: 7.6 + 0.1 * s - (0.2 if c == "DA" else 0.0) for s in SEEDS} for c in CONDS}
    stand_in(monkeypatch, vals)
    an = spec._analyse_weights(runs_of(), {})
    assert [c.verdict for c in an.claims] == ["NOT TESTABLE"] * 2
    assert an.claims[0].checks[0].value == pytest.approx(7.55 / REF)


def test_weights_without_measures_decides_nothing(monkeypatch):
    """No unit measured (side 0): no even spread to compare with, no relative note; a condition
    with one seed has no sd; the default units drawn is 16."""
    monkeypatch.setattr(spec, "draw", lambda panels, title, ncols: drawn.append(panels) or "fig")
    drawn = []
    calls = stand_in(monkeypatch, {"DA": {0: 3.0}, "no DA": {}}, side=0, pictures=())
    an = spec._analyse_weights(runs_of(), {})
    assert calls[0][1] == 16
    assert [c.verdict for c in an.claims] == ["UNDECIDED"] * 2 and an.claims[0].checks[0].value is None
    (bars,) = drawn[0]
    assert bars.title == "r½ (median over units; uniform = nan px)"
    assert bars.values[0] != bars.values[0] and bars.values[1] == 3.0 and math.isnan(bars.values[2])
    assert all(math.isnan(v) for v in bars.errors)
    assert len(an.notes) == 2 and an.published[0]["ours"] == "DA: r½ 3.00 px"
    calls = stand_in(monkeypatch, {}, side=12, pictures=())
    assert spec._analyse_weights(runs_of(), {}).claims[0].checks[0].value is None


def test_weights_a_condition_not_run_two_seeds_one_seed_and_a_colour_picture(monkeypatch):
    """'no DA' never run (no key at all): its claim decides nothing, without an error; 'DA' with
    two seeds has an error bar (np.std, ddof 1, written here), 'DA, fewer images' with one seed
    none (NaN) and no numpy warning about it (ddof 1 of one value is 0/0); a picture shown on its
    own min–max scale (colour units) keeps symmetric=False."""
    import warnings

    drawn = []
    monkeypatch.setattr(spec, "draw", lambda panels, title, ncols: drawn.append(panels) or "fig")
    stand_in(monkeypatch, {"DA": {0: 3.0, 1: 4.0}, "DA, fewer images": {0: 5.0}}, pictures=("DA, fewer images",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        an = spec._analyse_weights(runs_of(), {})
    assert [c.verdict for c in an.claims] == ["UNDECIDED"] * 2
    assert an.claims[0].stats.n == 0 and an.claims[1].stats.n == 1
    image, bars = drawn[0]
    assert image == Images("DA, fewer images: ΔW^(1) units (lowest seed, most localised first)",
                           "image of units of DA, fewer images", symmetric=False)
    assert math.isnan(bars.values[0]) and bars.values[1:] == [3.5, 5.0]
    assert math.isnan(bars.errors[0]) and math.isnan(bars.errors[2])
    assert bars.errors[1] == pytest.approx(float(np.std([3.0, 4.0], ddof=1)))


# ------------------------------------------------------------------------------------ the plans


def test_weights_plans_notes_and_the_papers_conditions():
    """Paper: MLP-Inv B-6/Wi-1024 on CIFAR-100 with and without crop + flip + mixup 0.8 on all
    50 000 images for 100 epochs, and with DA on 12 500 images for 4× the epochs; 3 seeds."""
    notes = {}
    for scale in ("smoke", "cpu", "paper"):
        _, _, plan = plan_experiment("sm-weights", scale, dataset="fashion_mnist" if scale == "cpu" else None,
                                     check_available=False)
        notes[scale] = plan.notes
        if scale == "paper":
            (sweep,) = plan.sweeps
            runs = expand(sweep)
    assert notes["smoke"] == []
    assert notes["paper"] == ["the smaller set trains for as many steps as the larger one (epochs × size ratio)"]
    assert notes["cpu"][0] == notes["paper"][0] and notes["cpu"][1] == (
        "proxy: Fashion-MNIST 28×28×1 (units are 28×28 grey images, not 64×64×3), m = 128, 12 000 vs 3 000 images, "
        "AdamW at the held-out lr instead of LION 5e-5; DA = random crop (padding 1) + flip without mixup; the "
        "smaller set's runs have the config of sm-table1's cpu MLP-Inv + DA runs")
    assert len(notes["cpu"]) == 2
    want = {"no DA": (None, 100, 0, False, 0.0), "DA": (None, 100, 4, True, 0.8),
            "DA, fewer images": (12500, 400, 4, True, 0.8)}
    assert [(r.overrides["meta.condition"], r.overrides["run.seed"]) for r in runs] == [
        (c, s) for c in CONDS for s in (0, 1, 2)]
    for r in runs:
        o = r.overrides
        assert (o["data.train_subset"], o["schedule.epochs"], o["augment.crop_padding"], o["augment.hflip"],
                o["augment.mixup"]) == want[o["meta.condition"]]
        assert (o["model.name"], o["model.kwargs.width"], o["model.kwargs.depth"], o["optim.name"]) == (
            "bottleneck_mlp", 1024, 6, "lion")
