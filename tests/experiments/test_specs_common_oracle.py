"""``specs/common.py`` piece by piece against expectations written out here: the model overrides
of each family as whole dicts, the budget's (C, S) pairs and SW-MLP widths from their closed
forms (docs/science.md §3), connections per mixing layer by hand, and the seed tables, the rows
and the run folders the specs' verdicts read, on result tables chosen in the test."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.derived import Derive
from mlplab.experiments.recipes import Scale
from mlplab.experiments.specs.common import (
    connections,
    err_rows,
    fair_width,
    log2,
    mixer,
    pairs_for,
    per_seed,
    run_folders,
    seed_table,
    sw_mlp,
    sw_widths,
    train_error,
    trained,
)
from mlplab.experiments.sweep import Sweep


def rec(overrides: dict, results: dict | None, sweep: str = "train") -> RunRecord:
    return RunRecord(sweep, "run", Path("/nonexistent"), dict(overrides), results=results)


# ------------------------------------------------------------------------------ model overrides


def test_mixer_overrides_of_each_family():
    assert mixer(16, 32, 4, 8) == {"model.name": "s_mixer", "model.kwargs.hidden_dim": 32, "model.kwargs.depth": 4,
                                   "model.kwargs.patch_size": 8, "model.kwargs.num_tokens": 16}
    # S None: the stem's S0 tokens, no num_tokens key; γ is an MLP-Mixer's only
    assert mixer(None, 32, 4, 8, gamma=2.0) == {"model.name": "s_mixer", "model.kwargs.hidden_dim": 32,
                                                "model.kwargs.depth": 4, "model.kwargs.patch_size": 8}
    o = mixer(16.0, 32.0, 4.0, 8.0, block="mlp", gamma=2, rp=True, rp_blocks=[0, 2])
    assert o == {"model.name": "rp_mlp_mixer", "model.kwargs.hidden_dim": 32, "model.kwargs.depth": 4,
                 "model.kwargs.patch_size": 8, "model.kwargs.num_tokens": 16, "model.kwargs.expansion": 2.0,
                 "model.kwargs.rp_blocks": [0, 2]}
    assert [type(o[k]) for k in ("model.kwargs.hidden_dim", "model.kwargs.depth", "model.kwargs.patch_size",
                                 "model.kwargs.num_tokens", "model.kwargs.expansion")] == [int, int, int, int, float]
    assert mixer(8, 8, 1, 4, rp=True)["model.name"] == "rp_s_mixer"
    assert mixer(8, 8, 1, 4, block="mlp")["model.name"] == "mlp_mixer"
    assert "model.kwargs.expansion" not in mixer(8, 8, 1, 4, block="mlp")
    assert mixer(8, 8, 1, 4, rp_blocks=0)["model.kwargs.rp_blocks"] == 0
    with pytest.raises(KeyError):
        mixer(8, 8, 1, 4, block="conv")


def test_sw_mlp_overrides_single_layer_and_mlp_blocks():
    assert sw_mlp(96.0, 1, 6.0, 4.0) == {"model.name": "sw_mlp", "model.kwargs.width": 96,
                                         "model.kwargs.density": 1.0, "model.kwargs.depth": 6,
                                         "model.kwargs.patch_size": 4}
    o = sw_mlp(96, 0.25, 6, 4)
    assert [type(o[k]) for k in ("model.kwargs.width", "model.kwargs.density", "model.kwargs.depth",
                                 "model.kwargs.patch_size")] == [int, float, int, int]
    assert sw_mlp(96, 0.25, 6, 4, gamma=4) == {**o, "model.kwargs.block": "mlp", "model.kwargs.expansion": 4.0}
    assert isinstance(sw_mlp(96, 0.25, 6, 4, gamma=4)["model.kwargs.expansion"], float)


def test_trained_ends_with_the_model_seed_then_the_familys_lr_at_the_scale():
    d = trained(Scale("cpu", "cifar10"))
    assert [(x.name, dict(x.params)) for x in d] == [("model_seed", {}), ("family_lr", {"scale": "cpu"})]
    assert all(isinstance(x, Derive) for x in d)
    assert trained(Scale("smoke", "synthetic"))[1].params == {"scale": "smoke"}


# ------------------------------------------------------------------------------ budgets


def _tokens_for(omega: float, C: int, gamma: float) -> int:
    """S with γ(C·S² + C²·S)/2 = Ω (the positive root), rounded."""
    return int(round((math.sqrt(C * C + 8 * omega / (gamma * C)) - C) / 2))


def test_pairs_for_solves_the_budget_for_each_channel_count():
    om = 2**14
    s16, s32 = _tokens_for(om, 16, 1.0), _tokens_for(om, 32, 1.0)
    assert (s16, s32) == (38, 20)
    assert pairs_for(om, channels=[16, 32], symmetric=False) == [(16, s16), (32, s32)]
    # symmetric by default: the swapped pairs too, sorted by C
    assert pairs_for(om, channels=[16, 32]) == [(16, s16), (s32, 32), (32, s32), (s16, 16)]
    # tokens enumerated: C solved for S (the formula is symmetric in S and C), sorted by S
    assert pairs_for(om, tokens=[16, 32], symmetric=False) == [(s16, 16), (s32, 32)]
    # γ ≠ 1: the MLP-Mixer's budget γ(C·S² + C²·S)/2
    assert pairs_for(om, 2.0, channels=[16], symmetric=False) == [(16, _tokens_for(om, 16, 2.0))] == [(16, 25)]
    assert pairs_for(om, 1.0, channels=[16], symmetric=False, family="mlp_mixer") == [(16, s16)]
    with pytest.raises(ValueError):
        pairs_for(om, 2.0, channels=[16], family="s_mixer")


def test_pairs_for_without_channels_runs_over_powers_of_two():
    pairs = pairs_for(2**14)
    assert {(C, _tokens_for(2**14, C, 1.0)) for C in (4, 8, 16, 32, 64)} <= set(pairs)
    assert pairs == sorted(pairs) and {(S, C) for C, S in pairs} == set(pairs)


def test_sw_widths_round_half_up():
    # m = sqrt(Ω/(γp)): 128 at p = 1, sqrt(2^15) = 181.02 at p = 1/2, 12.5 → 13 (not Python's 12)
    assert sw_widths(2**14, [1, 0.5]) == [(128, 1.0), (181, 0.5)]
    assert sw_widths(2**14, [0.25], gamma=2.0) == [(181, 0.25)]
    assert sw_widths(12.5**2, [1.0]) == [(13, 1.0)]
    assert [type(x) for x in sw_widths(2**14, [1])[0]] == [int, float]


# ------------------------------------------------------------------------------ statistics of runs


def test_err_rows_mean_and_sample_std_over_seeds_of_one_sweep():
    errs = {(64, 0): 10.0, (64, 1): 12.0, (64, 2): 17.0, (128, 0): 8.0, (128, 1): 9.0}
    runs = [rec({"meta.m": m, "run.seed": s}, {"test_acc": 1 - e / 100, "train_acc": 0.5})
            for (m, s), e in errs.items()]
    runs += [rec({"meta.m": 64, "run.seed": 3}, None),  # unfinished: left out
             rec({"meta.m": 64, "run.seed": 4}, {"test_acc": 0.0}, sweep="other")]  # another sweep
    rows = err_rows(runs, "train", {"m": lambda r: r.get("meta.m")})
    assert [r["m"] for r in rows] == [64, 128]
    for row, m in zip(rows, (64, 128)):
        e = np.array([v for (mm, _), v in errs.items() if mm == m])
        assert set(row) == {"m", "test_error", "test_error_std", "n"}
        assert row["test_error"] == pytest.approx(e.mean(), abs=1e-9)
        assert row["test_error_std"] == pytest.approx(e.std(ddof=1), abs=1e-9)
        assert row["n"] == e.size
    every = err_rows(runs, None, {"m": lambda r: r.get("meta.m")})
    assert every[0]["n"] == 4 and every[0]["test_error"] == pytest.approx((10 + 12 + 17 + 100) / 4)
    rows = err_rows(runs, "train", {"m": lambda r: r.get("meta.m")}, {"tr": train_error})
    assert set(rows[0]) == {"m", "tr", "tr_std", "n"} and rows[0]["tr"] == pytest.approx(50.0)


def test_train_error_from_the_training_accuracy():
    assert train_error(rec({}, {"train_acc": 0.875})) == pytest.approx(12.5)
    assert train_error(rec({}, {"train_acc": 0})) == pytest.approx(100.0)
    assert math.isnan(train_error(rec({}, {"test_acc": 0.9})))
    assert math.isnan(train_error(rec({}, None)))


@pytest.mark.parametrize("x, text", [(1, "2^0"), (2, "2^1"), (1024.0, "2^10"), (2**20, "2^20"), (3, "3"),
                                     (6, "6"), (0.5, "0.5"), (2.5, "2.5"), (0, "0"), (-4, "-4"), (1e6, "1e+06")])
def test_log2_writes_powers_of_two_as_exponents(x, text):
    assert log2(x) == text


@pytest.mark.parametrize("m, s0, width", [(100, 16, 96), (5, 16, 16), (0, 16, 16), (24, 16, 32), (40, 16, 32),
                                          (56, 16, 64), (96.0, 16.0, 96), (130, 64, 128), (161, 64, 192)])
def test_fair_width_nearest_multiple_of_the_patches(m, s0, width):
    # round half to even, as Python's round: 24/16 = 1.5 → 2, 40/16 = 2.5 → 2, 56/16 = 3.5 → 4
    assert fair_width(m, s0) == width and isinstance(fair_width(m, s0), int)


def test_connections_of_a_mixer_by_hand():
    # (C·S·D_S + S·C·D_C)/2 with D_S = round(γS), D_C = round(γC)
    r = rec({"model.name": "mlp_mixer", "meta.S": 6, "meta.C": 4, "model.kwargs.expansion": 2.0}, {})
    assert connections(r) == (4 * 6 * 12 + 6 * 4 * 8) / 2
    r = rec({"model.name": "mlp_mixer", "model.kwargs.num_tokens": 5, "model.kwargs.hidden_dim": 3,
             "model.kwargs.expansion": 1.5}, {})
    assert connections(r) == (3 * 5 * 8 + 5 * 3 * 4) / 2  # D_S = round(7.5) = 8, D_C = round(4.5) = 4
    r = rec({"model.name": "s_mixer", "meta.S": 6, "meta.C": 4}, {})  # no expansion: γ = 1
    assert connections(r) == (4 * 6 * 6 + 6 * 4 * 4) / 2
    r = rec({"model.name": "mlp_mixer", "meta.S": 6, "meta.C": 4, "model.kwargs.expansion": 2.0,
             "model.kwargs.token_hidden": 7, "model.kwargs.channel_hidden": 9}, {})
    assert connections(r) == (4 * 6 * 7 + 6 * 4 * 9) / 2
    r = rec({"model.name": "mlp_mixer", "meta.S": 6, "meta.C": 4, "model.kwargs.num_tokens": 99,
             "model.kwargs.hidden_dim": 99}, {})  # meta first
    assert connections(r) == (4 * 6 * 6 + 6 * 4 * 4) / 2
    assert math.isnan(connections(rec({"model.name": "s_mixer", "meta.S": 6}, {})))
    assert math.isnan(connections(rec({"model.name": "s_mixer", "meta.C": 6}, {})))


def test_connections_of_an_sw_mlp_by_hand():
    # p·γ·m²
    assert connections(rec({"model.name": "sw_mlp", "meta.m": 10, "meta.p": 0.5}, {})) == pytest.approx(50.0)
    r = rec({"model.name": "sw_mlp", "model.kwargs.width": 10, "model.kwargs.density": 0.25,
             "model.kwargs.expansion": 4.0}, {})
    assert connections(r) == pytest.approx(100.0)
    r = rec({"model.name": "sw_mlp", "meta.m": 20, "meta.p": 0.5, "model.kwargs.width": 10,
             "model.kwargs.density": 0.25}, {})
    assert connections(r) == pytest.approx(200.0)
    assert math.isnan(connections(rec({"model.name": "sw_mlp", "meta.m": 10}, {})))
    assert math.isnan(connections(rec({"model.name": "sw_mlp", "meta.p": 0.5}, {})))


def test_seed_table_and_per_seed():
    runs = [rec({"meta.m": 64, "run.seed": 0}, {"test_acc": 0.9}),
            rec({"meta.m": 128, "run.seed": 1}, None),  # unfinished: skipped, the runs after it read
            rec({"meta.m": 64, "run.seed": 2}, {"test_acc": 0.8}),
            rec({"meta.m": 128}, {"test_acc": 0.75})]  # no seed: 0
    table = seed_table(runs, lambda r: r.get("meta.m"))
    assert table.keys() == {64, 128}
    assert table[64] == pytest.approx({0: 10.0, 2: 20.0}) and table[128] == pytest.approx({0: 25.0})
    assert seed_table(runs, lambda r: r.get("meta.m"), metric=lambda r: 1.0) == {64: {0: 1.0, 2: 1.0}, 128: {0: 1.0}}
    ps = per_seed(table, [128, 64, 256])
    assert list(ps) == [0, 2]
    assert ps[0] == pytest.approx([25.0, 10.0, math.nan], nan_ok=True)
    assert ps[2] == pytest.approx([math.nan, 20.0, math.nan], nan_ok=True)
    assert list(per_seed({1: {5: 1.0}, 2: {3: 2.0}, 9: {0: 0.0}}, [2, 1])) == [3, 5]


def test_run_folders_map_each_key_and_seed_to_its_folder():
    s = Sweep("train", {"x": 1}, [("meta.key", ["a", "b"])], seeds=[0, 3], name_keys=["meta.key", "run.seed"])
    assert run_folders(s) == {("a", 0): "train/key=a,seed=0", ("a", 3): "train/key=a,seed=3",
                              ("b", 0): "train/key=b,seed=0", ("b", 3): "train/key=b,seed=3"}
