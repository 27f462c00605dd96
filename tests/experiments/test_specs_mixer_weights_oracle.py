"""``specs/mixer_weights.py`` field by field on made-up runs: the table's seed means (numpy in the
test), each claim on its own statistic at the smaller patch (the frequency claim on the ratio
trained/init, larger patch against smaller) with the effect written out here, the published
sentences, the pictures of the lowest seed's run at each patch (the drawing replaced by a recorder)
and the notes (test_mixer_supplement.py drives the verdicts and the plans)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlplab.analysis.pictures import image_grid
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.specs import mixer_weights as mw

KEYS = ("frac_inverse", "frac_closest_is_inverse", "mean_min_cos", "embedding_frequency")
SEEDS = (0, 1, 2, 3)
J = (0.0, 0.013, -0.007, 0.02)  # per-seed jitter


def stats(P: int, s: int, where: str) -> dict[str, float]:
    """At the smaller patch (4) the trained units are more often inverse-paired than at init (HELD),
    their closest partner less often inverse (DID NOT HOLD); at the larger patch (8) the opposite of
    both, so a claim read at the wrong patch or on the wrong statistic changes its verdict. The
    frequency ratio trained/init: 0.9 at P = 4, 0.6 at P = 8 (the larger patch lower: HELD)."""
    i = SEEDS.index(s)
    if where == "init":
        return {"frac_inverse": 0.02 + J[i] / 4, "frac_closest_is_inverse": 0.5 + J[i] / 4, "mean_min_cos": -0.3,
                "embedding_frequency": 0.4 + J[i]}
    inv, closest = (0.2, -0.1) if P == 4 else (-0.15, 0.2)
    ratio = 0.9 if P == 4 else 0.6
    return {"frac_inverse": 0.02 + inv + J[i], "frac_closest_is_inverse": 0.5 + closest + J[i] * 2,
            "mean_min_cos": -0.5 - J[i], "embedding_frequency": (0.4 + J[i]) * (ratio + J[i])}


def _runs(tmp: Path | None = None, patches=(8, 4)):
    runs = []
    for P in patches:
        for s in (1, 0, 3, 2):  # the lowest seed neither first nor last
            folder = Path("/nonexistent") if tmp is None else tmp / f"P{P}s{s}"
            runs.append(RunRecord("weights", f"P={P},seed={s}", folder, {"meta.P": P, "seed": s},
                                  results={"patch": P, "trained": stats(P, s, "trained"), "init": stats(P, s, "init")}))
            hist = [{"train_loss": 1.0}, {"train_loss": 0.9}, {"train_loss": 0.81 * (1 + 0.01 * s)}]
            runs.append(RunRecord("train", f"P={P},seed={s}", Path("/nonexistent"),
                                  {"model.kwargs.patch_size": P, "run.seed": s},
                                  results={"test_acc": 0.8, "history": hist}))
    runs.append(RunRecord("weights", "unfinished", Path("/nonexistent"), {"seed": 9}, results=None))
    return runs


@pytest.fixture
def drawn(monkeypatch):
    out = []
    monkeypatch.setattr(mw, "draw", lambda panels, title, ncols: out.append((panels, title, ncols)) or "figure")
    return out


def test_table_seed_means_by_patch(drawn):
    an = mw._analyse_weights(_runs(), {})
    assert [r["P"] for r in an.table] == [8, 4]  # first seen
    for row in an.table:
        assert row["n"] == 4
        for w in ("trained", "init"):
            for k in KEYS:
                x = [stats(row["P"], s, w)[k] for s in SEEDS]
                assert row[f"{w}_{k}"] == pytest.approx(np.mean(x), abs=1e-12)
                assert row[f"{w}_{k}_std"] == pytest.approx(np.std(x, ddof=1), abs=1e-12)
    assert an.columns is None and an.figures == {"mixer-weights": "figure"}


def _effect(P: int, key: str) -> float:
    return float(np.mean([stats(P, s, "init")[key] - stats(P, s, "trained")[key] for s in SEEDS]))


def test_each_claim_on_its_statistic_at_the_smaller_patch(drawn):
    runs = _runs()
    an = mw._analyse_weights(runs, {})
    inv, closest, freq = an.claims
    train = [r for r in runs if r.sweep == "train"]
    assert (inv.key, inv.verdict, inv.claim.split(":")[0]) == ("inverse-pairs", "HELD", "P = 4")
    assert inv.stats.effect == pytest.approx(_effect(4, "frac_inverse"), abs=1e-12)
    assert (inv.stats.effect_name, inv.stats.unit, inv.stats.n) == ("mean init − trained frac_inverse", "fraction", 4)
    assert inv.runs == [r for r in train if r.get("model.kwargs.patch_size") == 4]
    assert (closest.key, closest.verdict, closest.claim.split(":")[0]) == ("closest-is-inverse", "DID NOT HOLD",
                                                                          "P = 4")
    assert closest.stats.effect == pytest.approx(_effect(4, "frac_closest_is_inverse"), abs=1e-12)
    assert closest.stats.effect_name == "mean init − trained frac_closest_is_inverse"
    assert closest.runs == inv.runs
    ratio = {P: np.array([stats(P, s, "trained")["embedding_frequency"] / stats(P, s, "init")["embedding_frequency"]
                          for s in SEEDS]) for P in (4, 8)}
    assert (freq.key, freq.verdict, freq.claim.split(":")[0]) == ("embedding-frequency", "HELD", "P = 8 vs 4")
    assert freq.stats.effect == pytest.approx(float(np.mean(ratio[8] - ratio[4])), abs=1e-12)
    assert (freq.stats.effect_name, freq.stats.unit) == ("mean P = 8 − P = 4 frequency ratio", "trained/init")
    assert freq.runs == train


def test_three_patches_compare_the_largest_with_the_smallest(drawn):
    """A middle patch (6) whose ratio lies above both: read in place of either end, the verdict flips."""
    runs = _runs(patches=(8, 4))
    for s in SEEDS:
        tr = {**stats(4, s, "trained"), "embedding_frequency": stats(4, s, "init")["embedding_frequency"] * 2.0}
        runs.append(RunRecord("weights", f"P=6,seed={s}", Path("/nonexistent"), {"seed": s},
                              results={"patch": 6, "trained": tr, "init": stats(4, s, "init")}))
    inv, _, freq = mw._analyse_weights(runs, {}).claims
    assert inv.claim.startswith("P = 4:") and freq.claim.startswith("P = 8 vs 4:") and freq.verdict == "HELD"


def test_one_patch_decides_no_frequency_claim_and_no_runs_no_claim(drawn):
    an = mw._analyse_weights(_runs(patches=(4,)), {})
    assert [c.key for c in an.claims] == ["inverse-pairs", "closest-is-inverse"]
    an = mw._analyse_weights([r for r in _runs() if r.sweep == "train"], {})
    assert an.claims == [] and an.table == []
    assert an.published[0]["ours (trained vs init, seed means)"] == "no runs"


def test_seed_defaults_to_zero(drawn):
    runs = [RunRecord("weights", f"P={P}", Path("/nonexistent"), {},
                      results={"patch": P, "trained": stats(P, 0, "trained"), "init": stats(P, 0, "init")})
            for P in (4, 8)]
    an = mw._analyse_weights(runs, {})
    assert [c.stats.n for c in an.claims] == [1, 1, 1]
    assert an.claims[0].stats.effect == pytest.approx(_effect_seed0(4, "frac_inverse"), abs=1e-12)


def _effect_seed0(P, key):
    return stats(P, 0, "init")[key] - stats(P, 0, "trained")[key]


def test_published_sentences(drawn):
    an = mw._analyse_weights(_runs(), {})
    rows = {r["P"]: r for r in an.table}

    def both(P, k):
        return f"{rows[P]['trained_' + k]:.3f} vs {rows[P]['init_' + k]:.3f}"

    token, emb = an.published
    assert token["figure"] == "Supplement Fig. 1" and token["published"] == mw.WEIGHTS_PUBLISHED["token"][1]
    assert token["ours (trained vs init, seed means)"] == "; ".join(
        f"P = {P}: inverse at cos ≤ −0.5 {both(P, 'frac_inverse')}, closest is inverse "
        f"{both(P, 'frac_closest_is_inverse')}" for P in (8, 4))
    assert emb["figure"] == "Supplement Fig. 2" and emb["published"] == mw.WEIGHTS_PUBLISHED["embedding"][1]
    assert emb["ours (trained vs init, seed means)"] == "; ".join(
        f"P = {P}: mean frequency {both(P, 'embedding_frequency')} cycles/pixel" for P in (8, 4))
    assert set(token) == set(emb) == {"figure", "published", "ours (trained vs init, seed means)"}
    row = {"P": 4}  # a row without a statistic reads NaN
    assert mw._weights_published([row])[1]["ours (trained vs init, seed means)"] == \
        "P = 4: mean frequency nan vs nan cycles/pixel"


def test_pictures_of_the_lowest_seed_at_each_patch_and_notes(tmp_path, drawn):
    rng = np.random.default_rng(0)
    arrays = {}
    for P in (4, 8):
        for s in SEEDS:
            a = {"token_units_block0": rng.standard_normal((4, 2, 2)),
                 "token_units_block1": rng.standard_normal((4, 2, 2)),
                 "embedding_units": rng.standard_normal((6, P, P)),
                 "init_embedding_units": rng.standard_normal((6, P, P)),
                 "other": np.zeros(1)}
            (tmp_path / f"P{P}s{s}").mkdir()
            np.savez(tmp_path / f"P{P}s{s}" / "weights.npz", **a)
            arrays[P, s] = a
    runs = _runs(tmp_path)
    an = mw._analyse_weights(runs, {})
    ((panels, title, ncols),) = drawn
    assert (title, ncols) == ("Mixer supplement Figs. 1–2: first token-mixing and embedding units", 2)
    want = []
    for P in (4, 8):
        a = arrays[P, 0]
        want += [(f"P = {P}, block 0: token units, each beside its inverse", image_grid(a["token_units_block0"], 8)),
                 (f"P = {P}, block 1: token units, each beside its inverse", image_grid(a["token_units_block1"], 8)),
                 (f"P = {P}: embedding units (low frequency first)", image_grid(a["embedding_units"], 8)),
                 (f"P = {P}: embedding units at initialisation", image_grid(a["init_embedding_units"], 8))]
    assert [p.title for p in panels] == [t for t, _ in want]
    for p, (_, img) in zip(panels, want):
        np.testing.assert_array_equal(p.image, img)
    losses = [100 * ((0.81 * (1 + 0.01 * s) / 1.0) ** 0.5 - 1) for s in SEEDS]
    assert an.notes[:2] == [
        "'token-mixing units are local and global filters; embedding units at the larger patch are Gabor-like' is "
        "shown in the figure, not decided: no statistic here says what looks Gabor-like or local",
        "units of the first token-mixing MLPs are rows of fc1 (D_S × S), pictured on the √S×√S patch grid; the "
        "initialisation baseline is the same architecture drawn with the run's seed; τ = 0.5"]
    assert an.notes[2] == f"training loss change over the last 2 epochs: median {np.median(losses):+.2f}% per epoch"
    assert len(an.notes) == 3


def test_a_run_without_arrays_is_not_pictured(tmp_path, drawn):
    (tmp_path / "P8s0").mkdir()
    np.savez(tmp_path / "P8s0" / "weights.npz", token_units_block0=np.ones((2, 2, 2)),
             embedding_units=np.ones((2, 8, 8)),
             init_embedding_units=np.ones((2, 8, 8)))
    runs = [r for r in _runs(tmp_path) if r.sweep == "weights"]  # P = 4 has no weights.npz; no training runs
    an = mw._analyse_weights(runs, {})
    panels = drawn[0][0]
    assert [p.title for p in panels] == ["P = 8, block 0: token units, each beside its inverse",
                                         "P = 8: embedding units (low frequency first)",
                                         "P = 8: embedding units at initialisation"]
    assert len(an.notes) == 2


def test_notes_leave_out_runs_without_a_loss_history(drawn):
    runs = _runs()
    for r in runs:
        if r.sweep == "train" and r.get("run.seed") != 2:
            r.results = {"test_acc": 0.8, "history": [{"train_loss": 1.0}]}
    an = mw._analyse_weights(runs, {})
    assert an.notes[2] == f"training loss change over the last 2 epochs: median {100 * (0.8262 ** 0.5 - 1):+.2f}% " \
                          "per epoch"


def test_paper_plan_is_mixer_b16_and_b32():
    """Paper scale: Mixer-B/16 and B/32 (C = 768, D_S = 384, D_C = 4C = 3072, L = 12) on 224×224
    images, 3 seeds each, then the first two token-mixing MLPs of each trained run at τ = 0.5."""
    from mlplab.experiments import expand, plan_experiment

    _, _, plan = plan_experiment("mixer-weights", "paper", check_available=False)
    (train,), (weights,) = plan.stages
    runs = [s.overrides for s in expand(train)]
    assert sorted((o["model.kwargs.patch_size"], o["run.seed"]) for o in runs) == \
        [(P, s) for P in (16, 32) for s in (0, 1, 2)]
    fixed = {"model.name": "mlp_mixer", "model.kwargs.hidden_dim": 768, "model.kwargs.token_hidden": 384,
             "model.kwargs.expansion": 4.0, "model.kwargs.depth": 12, "data.image_size": 224, "schedule.epochs": 300}
    assert all(o[k] == v for o in runs for k, v in fixed.items())
    folders = {f"train/{s.name}": s.overrides for s in expand(train)}
    later = [s.overrides for s in expand(weights)]
    assert sorted(o["run"] for o in later) == sorted(folders)
    for o in later:
        assert (o["meta.P"], o["seed"]) == (folders[o["run"]]["model.kwargs.patch_size"], folders[o["run"]]["run.seed"])
        assert (o["blocks"], o["tau"]) == (2, 0.5)


def test_a_run_without_a_seed_is_seed_0(tmp_path, drawn):
    """Runs at seeds 1 and 2 and one without a seed (0): three pairs, and the one without a seed is
    pictured (the lowest seed)."""
    runs = []
    for P in (4, 8):
        for s in (None, 1, 2):
            folder = tmp_path / f"P{P}s{s}"
            folder.mkdir()
            np.savez(folder / "weights.npz", embedding_units=np.full((2, P, P), float(s or 0)),
                     init_embedding_units=np.zeros((2, P, P)))
            runs.append(RunRecord("weights", f"P={P},seed={s}", folder, {} if s is None else {"seed": s},
                                  results={"patch": P, "trained": stats(P, s or 0, "trained"),
                                           "init": stats(P, s or 0, "init")}))
    an = mw._analyse_weights(runs, {})
    assert [c.stats.n for c in an.claims] == [3, 3, 3]
    assert an.claims[0].stats.effect == pytest.approx(np.mean([_effect_seed(4, s, "frac_inverse") for s in (0, 1, 2)]),
                                                      abs=1e-12)
    panels = drawn[0][0]
    assert [p.title for p in panels] == ["P = 4: embedding units (low frequency first)",
                                         "P = 4: embedding units at initialisation",
                                         "P = 8: embedding units (low frequency first)",
                                         "P = 8: embedding units at initialisation"]
    assert np.nanmax(panels[0].image) == 0.0 and np.nanmax(panels[2].image) == 0.0  # the run of seed 0


def _effect_seed(P, s, key):
    return stats(P, s, "init")[key] - stats(P, s, "trained")[key]
