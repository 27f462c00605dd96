"""CKA (mlplab.analysis.cka) against numpy formulas written here, each on its own scale (HSIC₀ =
tr(KHLH)/(n−1)², U-centring entry by entry), the accumulator's bookkeeping, the result's
accessors, and every refusal."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mlplab
from mlplab.analysis.cka import (
    CKAResult,
    MinibatchCKA,
    cka_matrix,
    default_cka_layers,
    gram_linear,
    hsic0,
    hsic1,
    linear_cka,
    u_centre,
)


def _x(n, d, seed):
    return np.random.default_rng(seed).normal(size=(n, d))


def test_hsic0_is_trace_khlh_over_n_minus_1_squared():
    X, Y = _x(7, 3, 0), _x(7, 4, 1)
    K, L = X @ X.T, Y @ Y.T
    n = 7
    H = np.eye(n) - np.ones((n, n)) / n
    assert float(hsic0(K, L)) == pytest.approx(np.trace(K @ H @ L @ H) / (n - 1) ** 2, rel=1e-12)


def test_u_centre_entry_by_entry():
    X = _x(6, 2, 2)
    K = X @ X.T + 5.0  # a nonzero diagonal and offset: both must be removed
    n = 6
    Kt = K.copy()
    np.fill_diagonal(Kt, 0)
    r, s = Kt.sum(1), Kt.sum()
    want = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j:
                want[i, j] = Kt[i, j] - r[i] / (n - 2) - r[j] / (n - 2) + s / ((n - 1) * (n - 2))
    np.testing.assert_allclose(u_centre(torch.from_numpy(K)).numpy(), want, rtol=0, atol=1e-12)
    assert torch.equal(torch.from_numpy(K), torch.from_numpy(X @ X.T + 5.0))  # the input is not changed
    with pytest.raises(ValueError, match="the unbiased HSIC estimator needs at least 4 examples, got 3"):
        u_centre(torch.eye(3))
    u_centre(torch.eye(4))  # four are enough
    with pytest.raises(ValueError, match=r"^kernels must be square and of equal size, got \(3, 4\)"):
        u_centre(torch.zeros(3, 4))


def test_gram_and_cka_of_features_of_any_shape():
    X = _x(5, 6, 3).reshape(5, 2, 3)
    np.testing.assert_allclose(gram_linear(X).numpy(), X.reshape(5, -1) @ X.reshape(5, -1).T, rtol=0, atol=1e-12)
    assert gram_linear(torch.from_numpy(X).float()).dtype == torch.float64
    Y = _x(5, 4, 4)
    Xc, Yc = X.reshape(5, -1) - X.reshape(5, -1).mean(0), Y - Y.mean(0)
    want = np.linalg.norm(Yc.T @ Xc) ** 2 / (np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc))
    assert linear_cka(X, Y) == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="X and Y must hold the same examples, got 5 and 4 rows"):
        linear_cka(X, Y[:4, :3])


def test_hsic_refuses_kernels_of_other_shapes():
    K = torch.eye(5)
    for a, b in ((torch.zeros(5, 4), K), (K, torch.eye(6)), (K, torch.zeros(5, 4)), (torch.zeros(4, 5), torch.eye(4))):
        for hsic in (hsic0, hsic1):
            with pytest.raises(ValueError, match=r"^kernels must be square and of equal size, got \("):
                hsic(a, b)


def test_hsic_of_four_examples_and_under_another_default_device():
    X, Y = _x(4, 3, 11), _x(4, 2, 12)
    K, L = torch.from_numpy(X @ X.T), torch.from_numpy(Y @ Y.T)
    Kt, Lt = K.numpy().copy(), L.numpy().copy()
    np.fill_diagonal(Kt, 0)
    np.fill_diagonal(Lt, 0)
    one = np.ones(4)  # Song et al.'s closed form at n = 4, the fewest it allows
    want = (np.trace(Kt @ Lt) + one @ Kt @ one * (one @ Lt @ one) / 6 - 2 / 2 * one @ Kt @ Lt @ one) / 4
    assert float(hsic1(K, L)) == pytest.approx(want, rel=1e-12)


def test_the_estimators_helpers_are_made_on_the_kernels_device(monkeypatch):
    """HSIC₀'s centring matrix and HSIC₁'s ones vector live where the kernels do (on a GPU, a CPU
    helper would fail); the meta device stands in for an accelerator."""
    K = torch.ones(4, 4, dtype=torch.float64, device="meta")
    seen = []
    for name in ("ones", "eye"):
        made = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _made=made, **kw: seen.append(str(kw.get("device"))) or
                            _made(*a, **kw))
    assert hsic0(K, K).device.type == "meta" and hsic1(K, K).device.type == "meta"
    assert seen == ["meta", "meta"]


def test_minibatch_accumulator_bookkeeping_and_refusals():
    a = [_x(6, 3, 5), _x(6, 2, 6)]
    acc = MinibatchCKA(2)  # self-similarity: B mirrors A
    assert acc.num_b == 2 and acc.self_similarity
    with pytest.raises(RuntimeError, match=r"^MinibatchCKA.compute\(\) called before any update\(\)$"):
        acc.compute()
    acc.update(a)
    acc.update([_x(5, 3, 7), _x(5, 2, 8)])
    assert (acc.num_batches, acc.num_examples) == (2, 11)
    same = MinibatchCKA(2, 2)  # two sides of equal size: feats_b may be left out
    same.update(a)
    one = MinibatchCKA(2)
    one.update(a)
    np.testing.assert_array_equal(same.compute(), one.compute())
    with pytest.raises(ValueError, match="^feats_b is required when the two sides have different layers$"):
        MinibatchCKA(2, 1).update(a)
    with pytest.raises(ValueError, match="expected 2 feature tensors for side A, got 1"):
        MinibatchCKA(2, 1).update(a[:1], a[:1])
    with pytest.raises(ValueError, match="expected 1 feature tensors for side B, got 2"):
        MinibatchCKA(2, 1).update(a, a)
    with pytest.raises(ValueError, match="^all features of one update must hold the same examples$"):
        MinibatchCKA(2).update([a[0], a[1][:5]])
    with pytest.raises(ValueError, match="all features of one update must hold the same examples"):
        MinibatchCKA(1, 1).update([a[0]], [a[1][:5]])
    acc.reset()
    assert acc.num_batches == 0 and acc.num_examples == 0 and not acc.xy.any()
    meta = MinibatchCKA(1, 1, device="meta")  # features are moved to the accumulator's device
    with pytest.raises((NotImplementedError, RuntimeError)):
        meta.update([a[0]], [a[1]])


def test_minibatch_value_is_the_ratio_of_summed_hsic1():
    batches = [(0.01 * _x(n, 3, 10 + n), 0.02 * _x(n, 4, 20 + n)) for n in (5, 8)]  # HSIC values ≪ 1
    acc = MinibatchCKA(1, 1)
    for x, y in batches:
        acc.update([x], [y])
    xy = sum(float(hsic1(x @ x.T, y @ y.T)) for x, y in batches)
    xx = sum(float(hsic1(x @ x.T, x @ x.T)) for x, _ in batches)
    yy = sum(float(hsic1(y @ y.T, y @ y.T)) for _, y in batches)
    assert acc.compute()[0, 0] == pytest.approx(xy / np.sqrt(xx * yy), rel=1e-12)
    assert acc.xx[0] == pytest.approx(xx, rel=1e-12) and acc.yy[0] == pytest.approx(yy, rel=1e-12)


def test_result_accessors():
    r = CKAResult(np.array([[0.9, 0.1, 0.3], [0.2, 0.5, 0.7]]), ["a0", "a1"], ["b0", "b1", "b2"], 40, 5)
    assert r.diagonal_mean() == pytest.approx(0.7)
    assert r.get("a1", "b2") == 0.7 and r.get("a0", "b1") == 0.1
    assert r.to_dict() == {"matrix": [[0.9, 0.1, 0.3], [0.2, 0.5, 0.7]], "layers_a": ["a0", "a1"],
                           "layers_b": ["b0", "b1", "b2"], "num_examples": 40, "num_batches": 5,
                           "diagonal_mean": pytest.approx(0.7)}
    r.meta = {"model_a": "x"}
    assert r.to_dict()["meta"] == {"model_a": "x"}
    assert default_cka_layers(["stem", "blocks.0", "blocks.1", "norm"]) == ["blocks.0", "blocks.1"]
    assert default_cka_layers(iter(["stem", "norm"])) == ["stem", "norm"]


def test_cka_matrix_batches_modes_names_and_refusals():
    torch.manual_seed(0)
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=8, depth=2, num_classes=3,
                                drop_rate=0.5)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(6, 3, 8, 8, generator=g) for _ in range(3)]
    plain = cka_matrix(model, model, xs, layers_a=["blocks.0.token"], layers_b=["blocks.1.channel"], max_batches=2)
    as_pairs = cka_matrix(model, None, [(x, torch.zeros(6)) for x in xs], layers_a=["blocks.0.token"],
                          layers_b=["blocks.1.channel"], max_batches=2)
    assert plain.num_batches == as_pairs.num_batches == 2 and plain.num_examples == 12
    np.testing.assert_array_equal(plain.matrix, as_pairs.matrix)
    want = MinibatchCKA(1, 1)
    model.eval()
    with torch.no_grad():
        for x in xs[:2]:
            f = model.forward_intermediates(x)[1]
            want.update([f["blocks.0.token"]], [f["blocks.1.channel"]])
    model.train()
    np.testing.assert_allclose(plain.matrix, want.compute(), rtol=1e-12)
    assert plain.meta == {"model_a": "mlp_mixer", "model_b": "mlp_mixer"}
    other = mlplab.create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=8, depth=1, num_classes=3).eval()
    res = cka_matrix(model, other, xs[:1])
    assert res.meta == {"model_a": "mlp_mixer", "model_b": "s_mixer"} and model.training and not other.training
    assert res.layers_b == ["blocks.0.token", "blocks.0.channel"]
    with pytest.raises(ValueError, match="cka_matrix got no batches"):
        cka_matrix(model, None, [])
    with pytest.raises(KeyError, match=r"model A has no intermediate feature\(s\) \['x'\]; it has \["):
        cka_matrix(model, None, xs, layers_a=["x"])
    with pytest.raises(RuntimeError):  # the batches are moved to ``device``
        cka_matrix(model, None, xs, device="meta")
    assert model.training
