"""Few-shot splits and choices (mlplab.analysis.fewshot) watched from outside: for every seed, draw
and shot count the shots are k distinct examples of every class, the λ-selection holdout is
holdout_per_class others of every class and never a shot, λ is the best on the holdout (ties: the
larger), and the reported accuracy is numpy's ridge solution at that λ on the test set."""
from __future__ import annotations

import numpy as np
import pytest

import mlplab.analysis.fewshot as fewshot
from mlplab.analysis.fewshot import FewShotResult, ProbeResult, linear_few_shot, linear_probe


def _data(n_per_class=30, k=3, d=6, spread=1.5, seed=0):
    """Features whose first column is the example's id (train: 0..N−1, test: −1, −2, ...)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(11).normal(size=(k, d)) * 2
    labels = np.repeat(np.arange(k), n_per_class)
    x = centres[labels] + spread * rng.normal(size=(len(labels), d))
    return x, labels


def _numpy_ridge_accuracy(x, labels, k, lam, xt, yt):
    """Accuracy of argmax([X, 1][W; b]) for min ‖[X, 1][W; b] − T‖² + λ‖W‖² (±1 targets), by lstsq."""
    n, d = x.shape
    t = -np.ones((n, k))
    t[np.arange(n), labels] = 1
    a = np.zeros((n + d, d + 1))
    a[:n, :d], a[:n, d] = x, 1.0
    a[n:, :d] = np.sqrt(lam) * np.eye(d)
    sol = np.linalg.lstsq(a, np.vstack([t, np.zeros((d, k))]), rcond=None)[0]
    return float(np.mean(np.argmax(xt @ sol[:d] + sol[d], 1) == yt))


class _Spy:
    """Records the ids of the rows each ridge_fit / ridge_predict call sees (column 0 of the features)."""

    def __init__(self, monkeypatch):
        self.fits, self.predicts = [], []
        fit, predict = fewshot.ridge_fit, fewshot.ridge_predict

        def ridge_fit(x, labels, k, lam):
            self.fits.append((x[:, 0].astype(int).tolist(), lam))
            return fit(x[:, 1:], labels, k, lam)

        def ridge_predict(f, x):
            self.predicts.append(x[:, 0].astype(int).tolist())
            return predict(f, x[:, 1:])

        monkeypatch.setattr(fewshot, "ridge_fit", ridge_fit)
        monkeypatch.setattr(fewshot, "ridge_predict", ridge_predict)


@pytest.mark.parametrize("seed", [0, 1, 2, 7])
def test_shots_and_holdout_are_disjoint_per_class_for_every_seed_and_draw(monkeypatch, seed):
    x, y = _data()
    xt, yt = _data(10, seed=9)
    ids = np.arange(len(x))[:, None].astype(float)
    tids = -1 - np.arange(len(xt))[:, None].astype(float)
    spy = _Spy(monkeypatch)
    grid = (0.25, 4.0, 64.0)
    shots, draws, hold_k = (1, 4), 3, 5
    res = linear_few_shot(np.hstack([ids, x]), y, np.hstack([tids, xt]), yt, shots=shots, draws=draws,
                          l2_grid=grid, holdout_per_class=hold_k, seed=seed)
    calls = iter(range(len(spy.fits)))
    seen_shots = []
    for k in shots:
        for d in range(draws):
            fits = [spy.fits[next(calls)] for _ in grid]
            shot_ids = fits[0][0]
            assert all(f[0] == shot_ids for f in fits) and [f[1] for f in fits] == list(grid)
            assert len(set(shot_ids)) == len(shot_ids) == 3 * k
            assert np.bincount(y[shot_ids], minlength=3).tolist() == [k] * 3
            hold_ids = spy.predicts[(len(grid) + 1) * (shots.index(k) * draws + d)]
            assert all(i >= 0 for i in hold_ids)  # held-out TRAINING examples
            assert np.bincount(y[hold_ids], minlength=3).tolist() == [hold_k] * 3
            assert len(set(hold_ids)) == len(hold_ids) and not set(hold_ids) & set(shot_ids)
            test_ids = spy.predicts[(len(grid) + 1) * (shots.index(k) * draws + d) + len(grid)]
            assert test_ids == (-1 - np.arange(len(xt))).tolist()  # the test set, once, whole
            # λ: the best holdout accuracy, ties to the larger λ; the accuracy: numpy's ridge at that λ
            hold_acc = {lam: _numpy_ridge_accuracy(x[shot_ids], y[shot_ids], 3, lam, x[hold_ids], y[hold_ids])
                        for lam in grid}
            best = max(hold_acc.values())
            assert res[k].l2[d] == max(lam for lam in grid if hold_acc[lam] == best)
            assert res[k].accuracies[d] == _numpy_ridge_accuracy(x[shot_ids], y[shot_ids], 3, res[k].l2[d], xt, yt)
            seen_shots.append(tuple(shot_ids))
        assert res[k].holdout == 3 * hold_k and res[k].shots == k
        assert res[k].mean == pytest.approx(np.mean(res[k].accuracies), abs=1e-15)
        assert res[k].sd == pytest.approx(np.std(res[k].accuracies, ddof=1), abs=1e-15)
    assert len(set(seen_shots)) == len(seen_shots)  # every draw draws anew


def test_one_draw_has_sd_zero_and_the_result_prints():
    x, y = _data()
    r = linear_few_shot(x, y, x, y, shots=(2,), draws=1, holdout_per_class=3)[2]
    assert r.sd == 0.0 and len(r.accuracies) == 1
    s = FewShotResult(5, 0.8125, 0.0312, (0.8, 0.825), (1.0, 2.0), 30)
    assert str(s) == "5-shot 81.25 ± 3.12% (2 draws)"


def test_few_shot_refusals_name_the_bad_setting():
    x, y = _data(12)
    with pytest.raises(ValueError, match=r"draws and every shot count must be >= 1, got draws=0, shots=\[1\]"):
        linear_few_shot(x, y, x, y, shots=(1,), draws=0)
    with pytest.raises(ValueError, match=r"got draws=2, shots=\[1, 0\]"):
        linear_few_shot(x, y, x, y, shots=(1, 0), draws=2)
    with pytest.raises(ValueError, match=r"l2_grid must hold positive values, got \(\)"):
        linear_few_shot(x, y, x, y, shots=(1,), l2_grid=())
    with pytest.raises(ValueError, match=r"l2_grid must hold positive values, got \(1.0, -1.0\)"):
        linear_few_shot(x, y, x, y, shots=(1,), l2_grid=(1.0, -1.0))
    with pytest.raises(ValueError, match="3 shots plus 10 held-out examples need 13 training examples of every class; "
                                         "the smallest class has 12"):
        linear_few_shot(x, y, x, y, shots=(1, 3))
    linear_few_shot(x, y, x, y, shots=(2,), holdout_per_class=10, draws=1)  # exactly enough: allowed


def test_a_class_missing_from_training_still_has_an_output_column():
    x, y = _data()
    xt, yt = _data(5, k=4, seed=3)  # the test set has a fourth class the shots never show
    xt = xt[:, :6]
    res = linear_few_shot(x, y, xt, yt, shots=(2,), draws=2, holdout_per_class=3)
    assert all(a <= 0.75 + 1e-12 for a in res[2].accuracies)


def test_linear_probe_holds_out_a_seeded_fraction_and_refits_on_all(monkeypatch):
    x, y = _data(20)
    ids = np.arange(len(x))[:, None].astype(float)
    spy = _Spy(monkeypatch)
    grid = (0.5, 8.0)
    res = linear_probe(np.hstack([ids, x]), y, np.hstack([-1 - ids, x]), y, l2_grid=grid, holdout_fraction=0.25,
                       seed=4)
    order = np.random.default_rng([4, 1]).permutation(60)
    hold, rest = sorted(order[:15].tolist()), sorted(order[15:].tolist())
    assert [sorted(f[0]) for f in spy.fits[:2]] == [rest, rest] and [f[1] for f in spy.fits] == [0.5, 8.0, res.l2]
    assert [sorted(p) for p in spy.predicts[:2]] == [hold, hold]
    assert sorted(spy.fits[2][0]) == list(range(60))  # the final fit: every training example
    hold_acc = {lam: _numpy_ridge_accuracy(x[rest], y[rest], 3, lam, x[hold], y[hold]) for lam in grid}
    best = max(hold_acc.values())
    assert res.l2 == max(lam for lam in grid if hold_acc[lam] == best)
    assert res == ProbeResult(_numpy_ridge_accuracy(x, y, 3, res.l2, x, y), res.l2, 15, 60)
    assert linear_probe(x[:3], y[:3], x, y, holdout_fraction=0.01).holdout == 1  # at least one held out


def test_the_holdout_picks_a_small_lambda_when_a_large_one_is_worse():
    x, y = _data(40, spread=1.0)
    xt, yt = _data(20, spread=1.0, seed=4)
    probe = linear_probe(x, y, xt, yt, l2_grid=(0.01, 1e6), holdout_fraction=0.25)  # λ = 10⁶: W ≈ 0, one class
    assert probe.l2 == 0.01 and probe.acc > 0.6
    xh, yh = _data(40, spread=3.0)
    few = linear_few_shot(xh, yh, xt, yt, shots=(1,), draws=2, l2_grid=(0.01, 1e6), holdout_per_class=10)[1]
    assert few.accuracies[0] != few.accuracies[1]
    assert few.sd == pytest.approx(np.std(few.accuracies, ddof=1), abs=1e-15)  # two draws: their sd, not 0


def test_defaults_are_the_documented_ones():
    x, y = _data(40)
    xt, yt = _data(5, seed=2)
    assert linear_few_shot(x, y, xt, yt) == linear_few_shot(x, y, xt, yt, shots=(1, 5, 10, 25), draws=5,
                                                            l2_grid=fewshot.DEFAULT_L2_GRID, holdout_per_class=10,
                                                            seed=0)
    assert fewshot.DEFAULT_L2_GRID == tuple(2.0 ** e for e in (-10, -8, -6, -4, -2, 0, 2, 4, 6, 8, 10))
    assert linear_probe(x, y, xt, yt) == linear_probe(x, y, xt, yt, l2_grid=fewshot.DEFAULT_L2_GRID,
                                                      holdout_fraction=0.1, seed=0)
    for bad, msg in ((dict(l2_grid=()), r"^l2_grid must hold positive values, got \(\)$"),
                     (dict(holdout_fraction=1.0), r"^holdout_fraction must be in \(0, 1\), got 1.0$")):
        with pytest.raises(ValueError, match=msg):
            linear_probe(x, y, xt, yt, **bad)


@pytest.mark.parametrize("n,d", [(6, 9), (9, 9), (12, 9)])  # the dual form below d examples, the primal from d on
def test_ridge_fit_is_the_closed_form_written_out(n, d):
    rng = np.random.default_rng(n)
    x, labels, lam = rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, 3, n), 0.7
    xd = x.astype(np.float64)  # float32 features are fitted in float64
    mu = xd.mean(0)
    xc = xd - mu
    t = -np.ones((n, 3))
    t[np.arange(n), labels] = 1.0
    tc = t - t.mean(0)
    if n < d:
        w = xc.T @ np.linalg.solve(xc @ xc.T + lam * np.eye(n), tc)
    else:
        w = np.linalg.solve(xc.T @ xc + lam * np.eye(d), xc.T @ tc)
    got = fewshot.ridge_fit(x, labels, 3, lam)
    for a, b in zip(got, (mu, w, t.mean(0))):
        np.testing.assert_array_equal(a, b)
