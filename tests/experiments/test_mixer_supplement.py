"""mixer-weights and mixer-ablations (the MLP-Mixer supplement): the weight statistics on weights
with known answers, both analyses on made-up runs (HELD, DID NOT HOLD and
UNDECIDED each reached), the plans at every scale, and mixer-weights end to end at smoke scale."""
import math
from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments import estimate_cost, expand, plan_experiment
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.specs.mixer_supplement import (EQUIVALENCE_MARGIN, VARIANTS, _analyse_ablations,
                                                       _analyse_weights, inverse_partners, mean_frequency,
                                                       paired_units)


# ------------------------------------------------------------------ weight statistics


def test_mean_frequency_of_known_images():
    h = w = 8
    const = np.ones((h, w))
    checker = (-1.0) ** np.add.outer(np.arange(h), np.arange(w))
    cos3 = np.cos(2 * np.pi * 3 * np.arange(w) / w)[None, :].repeat(h, 0)  # 3 cycles along x
    f = mean_frequency(np.stack([const, checker, cos3]))
    assert f[0] == 0.0
    assert f[1] == pytest.approx(math.sqrt(2) / 2, abs=1e-12)
    assert f[2] == pytest.approx(3 / 8, abs=1e-12)
    rgb = mean_frequency(np.stack([cos3, cos3, cos3], -1)[None])  # channels' power summed: same frequency
    assert rgb[0] == pytest.approx(3 / 8, abs=1e-12)
    assert math.isnan(mean_frequency(np.zeros((1, 4, 4)))[0])
    with pytest.raises(ValueError, match="images must be"):
        mean_frequency(np.zeros((4, 4)))


def test_inverse_partners_finds_the_inverse():
    a, b, c = np.eye(4)[0], np.eye(4)[1], np.eye(4)[2] + 0.5 * np.eye(4)[1]
    W = np.stack([a, -a, b, c, np.zeros(4)])  # the zero row is left out
    ip = inverse_partners(W, tau=0.5)
    assert ip["units"] == 4 and list(ip["kept"]) == [0, 1, 2, 3]
    assert ip["partner"][0] == 1 and ip["partner"][1] == 0
    assert ip["min_cos"][0] == pytest.approx(-1.0)
    assert ip["frac_inverse"] == 0.5  # units 0 and 1 have an inverse; 2 and 3 only a positive twin
    assert ip["frac_closest_is_inverse"] == 0.5
    with pytest.raises(ValueError, match="two nonzero units"):
        inverse_partners(np.stack([a, np.zeros(4)]))


def test_random_units_have_no_inverse_and_a_fair_coin_for_the_closest():
    W = np.random.default_rng(0).standard_normal((400, 64))
    ip = inverse_partners(W, tau=0.5)
    assert ip["frac_inverse"] < 0.05
    assert 0.4 < ip["frac_closest_is_inverse"] < 0.6


def test_paired_units_sorts_low_frequency_first_with_partners():
    const = np.ones((4, 4))
    checker = (-1.0) ** np.add.outer(np.arange(4), np.arange(4))
    imgs = np.stack([2 * checker, const, -checker, -3 * const])
    ip = inverse_partners(imgs.reshape(4, -1))
    out = paired_units(imgs, ip["partner"], 2)
    assert out.shape == (4, 4, 4)
    np.testing.assert_array_equal(out[:2], np.stack([const, -const]))  # the constant, then its inverse
    np.testing.assert_array_equal(out[2:], np.stack([checker, -checker]))  # scaled to max |w| = 1


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
    assert words == ["HELD", "HELD", "HELD", "UNDECIDED"]  # the last: pictures only
    assert "pictures only" in an.claims[-1].rule
    an = _analyse_weights(_weights_runs(-0.1, -0.2, {4: 0.6, 7: 0.9}), {})
    assert [c.verdict for c in an.claims] == ["DID NOT HOLD", "DID NOT HOLD", "DID NOT HOLD", "UNDECIDED"]
    assert {r["P"] for r in an.table} == {4, 7}


def test_weights_analysis_with_one_seed_is_undecided():
    an = _analyse_weights(_weights_runs(0.3, 0.2, {4: 0.9, 7: 0.6}, seeds=(0,)), {})
    assert all(c.held is None for c in an.claims)
    assert all("fewer than 3" in c.stats.detail for c in an.claims if c.stats)


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
    an = _analyse_ablations(_ablation_runs({"shared": 0.0, "untied": 0.1, "grouped": 1.5, "views": 0.0}), {})
    by = {c.claim.split(" ")[0]: c for c in an.claims}
    assert by["untying"].verdict == "HELD" and f"±{EQUIVALENCE_MARGIN:g}" in by["untying"].rule
    assert by["grouping"].verdict == "HELD"
    assert by["G"].verdict == "UNDECIDED" and "not testable" in by["G"].rule
    pub = {p["variant"]: p for p in an.published}
    assert pub["grouped"]["ours: 5-shot − shared (points)"] == pytest.approx(1.5, abs=0.1)
    assert pub["untied"]["params / shared"] == 2.0 and pub["grouped"]["FLOPs / shared"] == 2.0
    an = _analyse_ablations(_ablation_runs({"shared": 0.0, "untied": 3.0, "grouped": -1.5, "views": 0.0}), {})
    by = {c.claim.split(" ")[0]: c for c in an.claims}
    assert by["untying"].verdict == "DID NOT HOLD" and by["grouping"].verdict == "DID NOT HOLD"
    an = _analyse_ablations(_ablation_runs({"shared": 0.0, "untied": 0.1, "grouped": 1.5, "views": 0.0},
                                           seeds=(0, 1)), {})
    assert all(c.held is None for c in an.claims)


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
        assert estimate_cost(plan)["est_s"] <= 30 * 60


def test_mixer_weights_smoke_end_to_end(tmp_path):
    from mlplab.experiments import reproduce

    res = reproduce("mixer-weights", "smoke", out_dir=tmp_path, verbose=False)
    assert res["failed"] == []
    import json

    v = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"]
    assert [c["verdict"] for c in v] == ["UNDECIDED"] * 4  # one seed at smoke scale
    assert all("fewer than 3 paired seeds" in c["stats"]["detail"] for c in v[:3])
    assert (tmp_path / "mixer-weights.png").exists()
    w = np.load(next((tmp_path / "weights").glob("P=4*")) / "weights.npz")
    assert w["token_units_block0"].shape[0] <= 2 * 16 and np.nanmax(np.abs(w["token_units_block0"])) == 1.0


def test_mixer_ablations_smoke_end_to_end(tmp_path):
    from mlplab.experiments import reproduce

    res = reproduce("mixer-ablations", "smoke", out_dir=tmp_path, verbose=False)
    assert res["failed"] == []
    import json

    v = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"]
    assert [c["verdict"] for c in v] == ["UNDECIDED"] * 3  # one seed at smoke scale; views not testable
    assert all("fewer than 3 paired seeds" in c["stats"]["detail"] for c in v[:2])
    assert "not testable" in v[2]["rule"]
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + len(VARIANTS) and "1shot" not in rows[0]  # the table is the 5-shot metric's
    assert (tmp_path / "mixer-ablations.png").exists()


def test_cost_counts_the_share_of_the_classes_a_run_keeps():
    from mlplab.experiments.cost import _train_examples

    o = {"data.dataset": "fashion_mnist"}
    assert _train_examples(o) == 60000
    assert _train_examples({**o, "data.classes": [0, 1, 2, 3, 4]}) == 30000
    assert _train_examples({**o, "data.classes": [0, 1], "data.train_subset": 1000}) == 1000  # a subset is a count
