"""The statistics of ``experiments.aggregate`` against the standard library, numpy and scipy.

Mean and sample standard deviation over seeds (``statistics.fmean`` / ``statistics.stdev``,
finite values only), the per-epoch relative change of the training loss (the geometric mean of
the last epochs' loss ratios, multiplied out here), the grouping of runs into rows, test error
from a fraction or a percentage, and Spearman's ρ (``scipy.stats.spearmanr`` on the finite pairs).
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from mlplab.experiments import aggregate
from mlplab.experiments.aggregate import RunRecord, group_runs, loss_change, mean_std, select, spearman

error_pct = aggregate.test_error  # (a name pytest would collect as a test)

finite = st.floats(-1e6, 1e6, allow_nan=False)
noisy = st.one_of(finite, st.sampled_from([float("nan"), float("inf"), float("-inf"), None]))


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(st.lists(noisy, max_size=12))
def test_mean_std_is_statistics_on_the_finite_values(values):
    kept = [v for v in values if v is not None and math.isfinite(v)]
    m, s, n = mean_std(values)
    assert n == len(kept)
    if not kept:
        assert math.isnan(m) and math.isnan(s)
        return
    assert m == pytest.approx(statistics.fmean(kept), rel=1e-9, abs=1e-6)
    assert s == (pytest.approx(statistics.stdev(kept), rel=1e-7, abs=1e-6) if n > 1 else 0.0)


def _run(history=None, name="r", results=None, **overrides):
    res = {"history": [{"train_loss": v} for v in history]} if history is not None else {}
    return RunRecord("sweep", name, Path(name), overrides, {}, {**res, **(results or {})})


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(st.lists(st.floats(0.01, 10.0), max_size=8), st.integers(1, 6))
def test_loss_change_is_the_mean_relative_change_per_epoch(losses, last):
    got = loss_change(_run(losses), last)
    if len(losses) < 2:
        assert math.isnan(got)
        return
    k = min(last, len(losses) - 1)
    ratios = [losses[i + 1] / losses[i] for i in range(len(losses) - 1 - k, len(losses) - 1)]
    assert len(ratios) == k
    assert got == pytest.approx(100.0 * (math.prod(ratios) ** (1.0 / k) - 1.0), rel=1e-9, abs=1e-9)


def test_loss_change_worked_examples():
    assert loss_change(_run([4.0, 2.0, 1.0])) == pytest.approx(-50.0)  # halved every epoch
    assert loss_change(_run([1.0, 9.0, 1.0, 2.0, 4.0])) == pytest.approx(100.0)  # by default the last two epochs
    assert loss_change(_run([9.0, 1.0, 2.0, 4.0]), last=2) == pytest.approx(100.0)  # the last two only
    assert loss_change(_run([8.0, 4.0, 1.0]), last=1) == pytest.approx(-75.0)
    assert loss_change(_run([1.0, 0.5, 2.0]), last=5) == pytest.approx(100 * (2.0 ** 0.5 - 1))
    history = [{"train_loss": 2.0}, {"val_acc": 0.5}, {"train_loss": None}, {"train_loss": 1.0}]
    assert loss_change(RunRecord("s", "r", Path("r"), {}, {}, {"history": history}), last=3) == pytest.approx(-50.0)
    assert math.isnan(loss_change(_run([0.0, 1.0], ), last=1)) and math.isnan(loss_change(_run([1.0])))


def test_group_runs_rows_are_numpy_over_each_groups_seeds():
    rng = np.random.default_rng(0)
    runs, want = [], {}
    for width in (64, 16, 32):  # first-seen order, not sorted
        for depth in (2, 4):
            accs = rng.uniform(0.5, 0.9, size=3 if depth == 2 else 4)
            want[(width, depth)] = accs
            runs += [_run(None, f"w{width}d{depth}s{i}", {"test_acc": float(a), "flops": None},
                          **{"model.kwargs.width": width, "model.kwargs.depth": depth, "run.seed": i})
                     for i, a in enumerate(accs)]
    order = rng.permutation(len(runs))  # interleaved seeds of all groups
    rows = group_runs([runs[i] for i in order], ["model.kwargs.width", "model.kwargs.depth"],
                      {"test_error": error_pct, "flops": lambda r: r.results["flops"]})
    seen = list(dict.fromkeys((runs[i].overrides["model.kwargs.width"], runs[i].overrides["model.kwargs.depth"])
                              for i in order))
    assert [(r["width"], r["depth"]) for r in rows] == seen
    for row in rows:
        err = 100 * (1 - want[(row["width"], row["depth"])])
        assert row["test_error"] == pytest.approx(err.mean(), rel=1e-12)
        assert row["test_error_std"] == pytest.approx(err.std(ddof=1), rel=1e-12)
        assert row["n"] == len(err)  # the seeds of the first metric, not the all-None flops column
        assert math.isnan(row["flops"])


def test_test_error_reads_a_fraction_or_a_percentage():
    assert error_pct(_run(results={"test_acc": 0.875})) == pytest.approx(12.5)
    assert error_pct(_run(results={"test_acc": 87.5})) == pytest.approx(12.5)
    assert error_pct(_run(results={"test_acc": 1.0})) == 0.0
    assert math.isnan(error_pct(_run(results={})))


def test_select_keeps_finished_runs_that_match():
    a, b = _run(None, "a", {"test_acc": 0.5}, **{"model.name": "mlp"}), _run(None, "b", {}, **{"model.name": "s"})
    c = RunRecord("other", "c", Path("c"), {"model.name": "mlp"}, {}, None)
    assert select([a, b, c], model__name="mlp") == [a]
    assert select([a, b, c], done=False, model__name="mlp") == [a, c]
    assert select([a, b, c], sweep="other", done=False) == [c]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(noisy, noisy), max_size=10))
def test_spearman_is_scipy_on_the_finite_pairs(pairs):
    kept = [(a, b) for a, b in pairs if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    got = spearman([a for a, _ in pairs], [b for _, b in pairs])
    if len(kept) < 3 or len({a for a, _ in kept}) < 2 or len({b for _, b in kept}) < 2:
        assert math.isnan(got)
        return
    want = stats.spearmanr([a for a, _ in kept], [b for _, b in kept]).statistic
    assert got == pytest.approx(want, abs=1e-12)


def test_spearman_worked_example():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, float("nan")], [1, 3, 2, 4, 0]) == pytest.approx(0.8)  # 1 - 6*2/(4*15)


def test_group_runs_groups_equal_values_whatever_their_key_order_or_type():
    runs = [_run(None, "a", {"test_acc": 0.5}, **{"model.kwargs": {"depth": 2, "width": 8}, "data.root": Path("d")}),
            _run(None, "b", {"test_acc": 0.7}, **{"model.kwargs": {"width": 8, "depth": 2}, "data.root": Path("d")}),
            _run(None, "c", {"test_acc": 0.9}, **{"model.kwargs": {"width": 8, "depth": 2}, "data.root": "e"})]
    rows = group_runs(runs, {"kwargs": lambda r: r.get("model.kwargs"), "root": lambda r: r.get("data.root")},
                      {"acc": lambda r: r.results["test_acc"]})
    assert [(r["kwargs"], r["root"], r["n"]) for r in rows] == [({"depth": 2, "width": 8}, "d", 2),
                                                                ({"depth": 2, "width": 8}, "e", 1)]
    assert rows[0]["acc"] == pytest.approx(0.6, abs=1e-12)
    assert rows[0]["acc_std"] == pytest.approx(statistics.stdev([0.5, 0.7]), abs=1e-12) and rows[1]["acc_std"] == 0


def test_spearman_with_two_distinct_values_is_scipys_and_without_variation_nan_without_a_warning():
    import warnings

    a, b = [0.0, 0.0, 1.0, 1.0], [1.0, 2.0, 3.0, 5.0]
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert spearman(b, a) == pytest.approx(stats.spearmanr(b, a).statistic, abs=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # decided here, not left to scipy's constant-input warning
        assert math.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
        assert math.isnan(spearman([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]))


def test_mean_std_is_float64_whatever_the_values_type():
    values = [np.float32(1e8), np.float32(1.0), np.float32(-1e8)]  # float32 sums 1e8 + 1 to 1e8
    m, s, n = mean_std(values)
    assert n == 3 and m == pytest.approx(1 / 3, rel=1e-12)
    assert s == pytest.approx(statistics.stdev([1e8, 1.0, -1e8]), rel=1e-12)


def test_group_runs_by_a_key_without_a_dot_and_select_past_unfinished_runs():
    runs = [_run(None, "a", {"test_acc": 0.5}, arch="mlp"), _run(None, "b", {"test_acc": 0.7}, arch="mlp")]
    rows = group_runs(runs, ["arch"], {"acc": lambda r: r.results["test_acc"]})
    assert [(r["arch"], r["n"]) for r in rows] == [("mlp", 2)]
    unfinished = RunRecord("sweep", "u", Path("u"), {"arch": "mlp"}, {}, None)
    other = _run(None, "o", {"test_acc": 0.1}, arch="mlp")
    other.sweep = "other"
    assert select([unfinished, other, *runs], sweep="sweep", arch="mlp") == runs


def test_a_percentage_below_two_is_a_percentage():
    assert error_pct(_run(results={"test_acc": 1.5})) == pytest.approx(98.5)  # 1.5 % accuracy, not 150 %
    r = RunRecord("s", "n", Path("n"), {}, {}, {"test_acc": 1.5, "test_examples": 100})
    assert aggregate.test_error_sd(r) == pytest.approx(100 * math.sqrt(0.985 * 0.015 / 100), rel=1e-12)


def test_loss_change_without_a_history_and_past_a_zero_loss():
    assert math.isnan(loss_change(_run(None, results={"test_acc": 0.5})))
    assert math.isnan(loss_change(RunRecord("s", "r", Path("r"), {}, {}, None)))
    assert math.isnan(loss_change(_run([1.0, 0.0, 2.0]), last=1))  # the loss it is relative to is 0
