"""mixer-weights and mixer-ablations (the MLP-Mixer supplement): both analyses on made-up runs
(HELD, DID NOT HOLD and UNDECIDED each reached), the plans at every scale, and both ids end to end
at smoke scale (the weight statistics: tests/analysis/test_analysis_units.py)."""
from pathlib import Path

import numpy as np
import pytest
from test_spec_claims import TILT  # a per-seed tilt over the points, mean 0 over the seeds

from mlplab.experiments import estimate_cost, expand, plan_experiment
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.specs.mixer_ablations import EQUIVALENCE_MARGIN, GROUPED_MARGIN, VARIANTS, _analyse_ablations
from mlplab.experiments.specs.mixer_weights import _analyse_weights

# ------------------------------------------------------------------ mixer-weights analysis


def _weights_runs(inverse_gain: float, closest_gain: float, freq_ratio: dict[int, float], seeds=(0, 1, 2)):
    runs = []
    for s in seeds:
        jitter = 0.01 * s
        for P in (4, 7):
            init = {"frac_inverse": 0.02, "frac_closest_is_inverse": 0.5, "mean_min_cos": -0.35,
                    "embedding_frequency": 0.4}
            tr = {"frac_inverse": 0.02 + inverse_gain + jitter, "frac_closest_is_inverse": 0.5 + closest_gain + jitter,
                  "mean_min_cos": -0.5, "embedding_frequency": 0.4 * (freq_ratio[P] + jitter)}
            runs.append(RunRecord("weights", f"P={P},seed={s}", Path("/nonexistent"), {"meta.P": P, "seed": s},
                                  results={"patch": P, "trained": tr, "init": init}))
    return runs


def test_weights_analysis_held_and_did_not_hold():
    an = _analyse_weights(_weights_runs(0.3, 0.2, {4: 0.9, 7: 0.6}), {})
    words = [c.verdict for c in an.claims]
    assert words == ["HELD", "HELD", "HELD"]  # the pictures are shown, not decided: a note, not a claim
    assert any("shown in the figure, not decided" in n for n in an.notes)
    an = _analyse_weights(_weights_runs(-0.1, -0.2, {4: 0.6, 7: 0.9}), {})
    assert [c.verdict for c in an.claims] == ["DID NOT HOLD", "DID NOT HOLD", "DID NOT HOLD"]
    assert {r["P"] for r in an.table} == {4, 7}


def test_weights_analysis_with_one_seed_is_undecided():
    an = _analyse_weights(_weights_runs(0.3, 0.2, {4: 0.9, 7: 0.6}, seeds=(0,)), {})
    assert all(c.held is None for c in an.claims)
    assert all("fewer than 3" in c.stats.detail for c in an.claims if c.stats)


def test_weights_analysis_flat_is_undecided():
    """Trained as often inverse-paired as at init (on average over the seeds), the same frequency
    ratio at both patch sizes: nothing to decide."""
    an = _analyse_weights(_weights_runs(-0.01, -0.01, {4: 0.8, 7: 0.8}), {})  # trained − init = 0.01·(s − 1)
    assert {c.key: c.verdict for c in an.claims} == {"inverse-pairs": "UNDECIDED", "closest-is-inverse": "UNDECIDED",
                                                     "embedding-frequency": "UNDECIDED"}


# ------------------------------------------------------------------ mixer-ablations analysis


def _ablation_runs(shot_gain: dict[str, float], seeds=(0, 1, 2, 3)):
    runs = []
    for s in seeds:
        for v in VARIANTS:
            runs.append(RunRecord("train", f"{v},seed={s}", Path("."), {"meta.variant": v, "run.seed": s},
                                  results={"test_acc": 0.9, "params": 1000 * (2 if v == "untied" else 1),
                                           "flops_per_example": 5000 * (2 if v == "grouped" else 1)}))
            acc = (60.0 + 0.7 * s + shot_gain[v] + 0.05 * ((s * 7 + len(v)) % 3 - 1)) / 100
            runs.append(RunRecord("eval", f"{v},seed={s}", Path("."), {"meta.variant": v, "seed": s},
                                  results={"few_shot": {"5": {"mean": acc, "sd": 0.01}}, "probe": {"acc": 0.8}}))
    return runs


def test_ablations_analysis_reaches_each_verdict():
    """"Did not help" claims are non-superiority tests: a gain well below the margin HELD, well
    above it DID NOT HOLD; the views claim is NOT TESTABLE outside Mixer-S/32 at 224."""
    an = _analyse_ablations(_ablation_runs({"shared": 0.0, "untied": 0.1, "grouped": 0.5, "views": 0.0}), {})
    by = {c.key: c for c in an.claims}
    assert by["untied"].verdict == "HELD" and f"margin of {EQUIVALENCE_MARGIN:g} point" in by["untied"].rule
    assert by["grouped"].verdict == "HELD" and f"{GROUPED_MARGIN:g} points" in by["grouped"].rule
    assert by["views"].verdict == "NOT TESTABLE" and "views_regime" in by["views"].reason()
    pub = {p["variant"]: p for p in an.published}
    assert pub["grouped"]["ours: 5-shot − shared (points)"] == pytest.approx(0.5, abs=0.1)
    assert pub["untied"]["params / shared"] == 2.0 and pub["grouped"]["FLOPs / shared"] == 2.0
    an = _analyse_ablations(_ablation_runs({"shared": 0.0, "untied": 3.0, "grouped": 4.5, "views": 0.0}), {})
    by = {c.key: c for c in an.claims}
    assert by["untied"].verdict == "DID NOT HOLD" and by["grouped"].verdict == "DID NOT HOLD"
    an = _analyse_ablations(_ablation_runs({"shared": 0.0, "untied": 0.1, "grouped": 1.5, "views": 0.0},
                                           seeds=(0, 1)), {})
    assert all(c.held is None for c in an.claims)


def _tilted_runs(shot_gain: dict[str, float], top5_gain: float):
    """Every variant's 5-shot accuracy 60 + gain and top-5 accuracy 90 (+ gain for views), with a
    per-seed tilt (mean 0 over the seeds) and the views Mixer at S/32, 224×224: in its regime."""
    runs = []
    for s, tilt in enumerate(TILT):
        for i, v in enumerate(VARIANTS):
            regime = {"model.kwargs.patch_size": 32, "data.image_size": 224} if v == "views" else {}
            top5 = 90.0 + 0.3 * s + (top5_gain if v == "views" else 0.0) + tilt * i
            runs.append(RunRecord("train", f"{v},seed={s}", Path("."), {"meta.variant": v, "run.seed": s, **regime},
                                  results={"test_acc": 0.7, "test_top5": top5 / 100, "params": 1000,
                                           "flops_per_example": 5000}))
            acc = (60.0 + 0.7 * s + shot_gain[v] + tilt * i) / 100
            runs.append(RunRecord("eval", f"{v},seed={s}", Path("."), {"meta.variant": v, "seed": s},
                                  results={"few_shot": {"5": {"mean": acc, "sd": 0.01}}, "probe": {"acc": 0.8}}))
    return runs


@pytest.mark.parametrize("top5_gain, want", [(3.5, "HELD"), (-3.0, "DID NOT HOLD"), (0.0, "UNDECIDED")])
def test_ablations_views_in_its_regime_and_gains_on_the_margins(top5_gain, want):
    """Views at S/32, 224×224: decided on top-5 (views > shared). Untied and grouped gain exactly
    their margins on average: the data cannot tell a gain below the margin from one above it."""
    gains = {"shared": 0.0, "untied": EQUIVALENCE_MARGIN, "grouped": GROUPED_MARGIN, "views": 0.0}
    an = _analyse_ablations(_tilted_runs(gains, top5_gain), {})
    assert {c.key: c.verdict for c in an.claims} == {"untied": "UNDECIDED", "grouped": "UNDECIDED", "views": want}
    (views,) = [c for c in an.claims if c.key == "views"]
    assert views.stats.effect == pytest.approx(-top5_gain, abs=1e-9)  # shared − views top-5


# ------------------------------------------------------------------ plans


@pytest.mark.parametrize("scale", ["smoke", "cpu", "paper"])
@pytest.mark.parametrize("id", ["mixer-weights", "mixer-ablations"])
def test_plan_at_every_scale(id, scale):
    # cpu scale runs on Fashion-MNIST here (the image folder is not on this machine)
    _, sc, plan = plan_experiment(id, scale, "fashion_mnist" if scale == "cpu" else None, check_available=False)
    train, analysis = plan.stages[0][0], plan.stages[1][0]
    runs = {f"{s.sweep}/{s.name}" for s in expand(train)}
    later = expand(analysis)
    assert len(later) == len(runs) and {s.overrides["run"] for s in later} == runs  # one analysis per trained run
    seeds = {s.overrides["run.seed"] for s in expand(train)}
    assert len(seeds) == (1 if scale == "smoke" else 3)
    if id == "mixer-ablations":
        want = set(VARIANTS) - ({"views"} if scale == "cpu" else set())  # views decide nothing at cpu scale
        assert {s.overrides["model.kwargs.token_mixing"] for s in expand(train)} == want
        assert {s.overrides["model.name"] for s in expand(train)} == {"mlp_mixer"}  # one recipe, one searched lr
        assert all(s.overrides["shots"] and s.overrides["probe"] for s in later)
        if scale != "paper":
            assert all(s.overrides["data.classes"] == [0, 1, 2, 3, 4] for s in expand(train))
            assert all(s.overrides["data.classes"] == [5, 6, 7, 8, 9] for s in later)
    else:
        assert {s.overrides["model.kwargs.patch_size"] for s in expand(train)} == \
            {"smoke": {4, 8}, "cpu": {4, 7}, "paper": {16, 32}}[scale]
    if scale == "cpu":
        assert estimate_cost(plan)["est_s"] <= 40 * 60  # 24 epochs each: a share of the overnight campaign


def test_mixer_weights_smoke_end_to_end(tmp_path):
    from mlplab.experiments import reproduce

    res = reproduce("mixer-weights", "smoke", out_dir=tmp_path, verbose=False)
    assert res["failed"] == []
    import json

    v = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"]
    assert [c["verdict"] for c in v] == ["UNDECIDED"] * 3  # one seed at smoke scale
    assert all("fewer than 3 paired seeds" in c["stats"]["detail"] for c in v)
    assert (tmp_path / "mixer-weights.png").exists()
    w = np.load(next((tmp_path / "weights").glob("P=4*")) / "weights.npz")
    assert w["token_units_block0"].shape[0] <= 2 * 16 and np.nanmax(np.abs(w["token_units_block0"])) == 1.0


def test_mixer_ablations_smoke_end_to_end(tmp_path):
    from mlplab.experiments import reproduce

    res = reproduce("mixer-ablations", "smoke", out_dir=tmp_path, verbose=False)
    assert res["failed"] == []
    import json

    v = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"]
    assert [c["verdict"] for c in v] == ["UNDECIDED", "UNDECIDED", "NOT TESTABLE"]  # one seed; views out of regime
    assert all("fewer than 3 paired seeds" in c["stats"]["detail"] for c in v[:2])
    assert "views_regime >= 1" in v[2]["reason"]
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + len(VARIANTS) and "1shot" not in rows[0]  # the table is the 5-shot metric's
    assert (tmp_path / "mixer-ablations.png").exists()


def test_cost_counts_the_share_of_the_classes_a_run_keeps():
    from mlplab.experiments.cost import _train_examples

    o = {"data.dataset": "fashion_mnist"}
    assert _train_examples(o) == 60000
    assert _train_examples({**o, "data.classes": [0, 1, 2, 3, 4]}) == 30000
    assert _train_examples({**o, "data.classes": [0, 1], "data.train_subset": 1000}) == 1000  # a subset is a count
