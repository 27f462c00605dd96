"""Linear few-shot evaluation: the closed form against plain numpy least squares, its behaviour
on separable and on label-free data, and the pre-logit features it reads."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mlplab
from mlplab.analysis.fewshot import extract_features, linear_few_shot, ridge_fit, ridge_predict


def _numpy_ridge(x, labels, k, lam):
    """The same problem as an augmented least-squares system, solved by np.linalg.lstsq:
    minimise ||[X, 1] [W; b] − T||² + λ||W||² over W and an unpenalised bias b."""
    n, d = x.shape
    t = -np.ones((n, k))
    t[np.arange(n), labels] = 1
    a = np.zeros((n + d, d + 1))
    a[:n, :d], a[:n, d] = x, 1.0
    a[n:, :d] = np.sqrt(lam) * np.eye(d)
    rhs = np.vstack([t, np.zeros((d, k))])
    sol = np.linalg.lstsq(a, rhs, rcond=None)[0]
    return sol[:d], sol[d]


@pytest.mark.parametrize("n,d", [(12, 40), (60, 8)])  # dual (n < d) and primal (n >= d) forms
def test_ridge_fit_equals_numpy_least_squares(n, d):
    rng = np.random.default_rng(0)
    x, labels, k, lam = rng.normal(size=(n, d)) + 3.0, rng.integers(0, 4, n), 4, 0.37
    mu, w, b = ridge_fit(x, labels, k, lam)
    w_ref, b_ref = _numpy_ridge(x, labels, k, lam)
    np.testing.assert_allclose(w, w_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(b - mu @ w, b_ref, rtol=1e-8, atol=1e-10)  # the same affine map
    xt = rng.normal(size=(30, d)) + 3.0
    np.testing.assert_array_equal(ridge_predict((mu, w, b), xt), np.argmax(xt @ w_ref + b_ref, 1))


def _clusters(n_per_class, k=5, d=16, spread=0.3, seed=0):
    """k Gaussian classes around fixed centres; ``seed`` draws the noise (train and test differ)."""
    centres = np.random.default_rng(123).normal(size=(k, d)) * 3
    labels = np.repeat(np.arange(k), n_per_class)
    return centres[labels] + spread * np.random.default_rng(seed).normal(size=(len(labels), d)), labels


def test_separable_classes_are_found_from_one_shot():
    xtr, ytr = _clusters(40)
    xte, yte = _clusters(20, seed=1)
    res = linear_few_shot(xtr, ytr, xte, yte, shots=(1, 5), draws=3, seed=0)
    assert res[1].mean == 1.0 and res[5].mean == 1.0 and res[5].sd == 0.0
    assert len(res[1].accuracies) == 3 and res[1].holdout == 5 * 10


def test_features_without_information_give_chance():
    rng = np.random.default_rng(3)
    xtr, ytr = rng.normal(size=(500, 20)), np.repeat(np.arange(5), 100)
    xte, yte = rng.normal(size=(2000, 20)), rng.integers(0, 5, 2000)
    res = linear_few_shot(xtr, ytr, xte, yte, shots=(10,), draws=4, seed=1)
    assert abs(res[10].mean - 0.2) < 0.05


def test_draws_are_reproducible_and_differ_by_seed():
    xtr, ytr = _clusters(40, spread=2.5)
    xte, yte = _clusters(30, spread=2.5, seed=5)
    a = linear_few_shot(xtr, ytr, xte, yte, shots=(1,), draws=4, seed=7)[1]
    b = linear_few_shot(xtr, ytr, xte, yte, shots=(1,), draws=4, seed=7)[1]
    c = linear_few_shot(xtr, ytr, xte, yte, shots=(1,), draws=4, seed=8)[1]
    assert a == b and a.accuracies != c.accuracies
    assert a.sd == pytest.approx(np.std(a.accuracies, ddof=1))


def test_too_few_examples_and_bad_grids_are_refused():
    xtr, ytr = _clusters(12)
    with pytest.raises(ValueError, match="need 35 training examples of every class; the smallest class has 12"):
        linear_few_shot(xtr, ytr, xtr, ytr, shots=(25,))
    with pytest.raises(ValueError, match="l2_grid must hold positive values"):
        linear_few_shot(xtr, ytr, xtr, ytr, shots=(1,), l2_grid=[0.0])


def test_extract_features_reads_the_pre_logits():
    torch.manual_seed(0)
    model = mlplab.create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=8, depth=2, num_classes=3)
    x = torch.randn(10, 3, 8, 8)
    y = torch.arange(10) % 3
    feats, labels = extract_features(model, [(x[:6], y[:6]), (x[6:], y[6:])])
    _, inter = model.forward_intermediates(x)
    np.testing.assert_allclose(feats, inter["pre_logits"].detach().double().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(labels, y.numpy())


def test_linear_probe_is_the_numpy_ridge_at_the_lambda_the_holdout_chose():
    """The probe refits on every training example at the λ that won on the held-out part; its
    test accuracy is that of the numpy least-squares solution at that λ."""
    from mlplab.analysis.fewshot import linear_probe

    rng = np.random.default_rng(5)
    xtr, ytr = _clusters(60, spread=2.5)
    xte, yte = _clusters(40, spread=2.5, seed=2)
    res = linear_probe(xtr, ytr, xte, yte, l2_grid=(0.01, 10.0, 1000.0), holdout_fraction=0.2, seed=3)
    assert res.l2 in (0.01, 10.0, 1000.0) and res.holdout == 60 and res.train == 300
    w, b = _numpy_ridge(xtr, ytr, 5, res.l2)
    assert res.acc == float(np.mean(np.argmax(xte @ w + b, 1) == yte))
    # λ is chosen on the held-out rows only: relabelling the test set cannot change it
    assert linear_probe(xtr, ytr, xte, rng.permutation(yte), l2_grid=(0.01, 10.0, 1000.0),
                        holdout_fraction=0.2, seed=3).l2 == res.l2


def test_linear_probe_separates_clusters_and_refuses_bad_settings():
    from mlplab.analysis.fewshot import linear_probe

    xtr, ytr = _clusters(30)
    xte, yte = _clusters(30, seed=4)
    assert linear_probe(xtr, ytr, xte, yte).acc == 1.0
    for bad in (dict(l2_grid=()), dict(l2_grid=(0.0,)), dict(holdout_fraction=0.0), dict(holdout_fraction=1.0)):
        with pytest.raises(ValueError):
            linear_probe(xtr, ytr, xte, yte, **bad)
