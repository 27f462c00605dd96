"""Mini-batch linear CKA (docs/science.md §6): identities, invariances, and agreement with references."""
from itertools import permutations

import numpy as np
import pytest
import torch

import mlplab
from mlplab.analysis.cka import MinibatchCKA, cka_matrix, hsic0, hsic1, linear_cka, u_centre


def _feats(n, d, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64)


def _hsic1_quadruples(K, L):
    """Brute-force U-statistic: mean over ordered distinct (t, u, v, w) of
    K_tu L_tu + K_tu L_vw − 2 K_tu L_tv (the U-statistic that HSIC₁ equals)."""
    K, L = K.numpy(), L.numpy()
    n = K.shape[0]
    total, count = 0.0, 0
    for t, u, v, w in permutations(range(n), 4):
        total += K[t, u] * L[t, u] + K[t, u] * L[v, w] - 2 * K[t, u] * L[t, v]
        count += 1
    return total / count


def _hsic1_loops(K, L):
    """The closed form of Song et al. (2012) written with explicit loops over entries."""
    K, L = K.numpy().copy(), L.numpy().copy()
    n = K.shape[0]
    np.fill_diagonal(K, 0)
    np.fill_diagonal(L, 0)
    tr = sum(K[i, j] * L[j, i] for i in range(n) for j in range(n))
    sK = sum(K[i, j] for i in range(n) for j in range(n))
    sL = sum(L[i, j] for i in range(n) for j in range(n))
    kl = sum(K[i, j] * L[j, k] for i in range(n) for j in range(n) for k in range(n))
    return (tr + sK * sL / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * kl) / (n * (n - 3))


def test_hsic1_matches_ustatistic_and_loops():
    X, Y = _feats(6, 3, 0), _feats(6, 5, 1) ** 2
    K, L = X @ X.T, Y @ Y.T
    ref = _hsic1_quadruples(K, L)
    assert float(hsic1(K, L)) == pytest.approx(ref, rel=1e-10, abs=1e-12)
    assert float(hsic1(K, L)) == pytest.approx(_hsic1_loops(K, L), rel=1e-10, abs=1e-12)
    # U-centring inner product form used by the accumulator
    assert float((u_centre(K) * u_centre(L)).sum() / (6 * 3)) == pytest.approx(ref, rel=1e-10, abs=1e-12)


def test_hsic1_needs_four_examples():
    K = torch.eye(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="at least 4"):
        hsic1(K, K)


@pytest.mark.parametrize("unbiased", [False, True])
def test_self_similarity_and_invariances(unbiased):
    X, Z = _feats(40, 12, 2), _feats(40, 7, 3)
    assert linear_cka(X, X, unbiased) == pytest.approx(1.0, abs=1e-12)
    Q, _ = torch.linalg.qr(_feats(12, 12, 4))
    base = linear_cka(X, Z, unbiased)
    assert linear_cka(X @ Q, Z, unbiased) == pytest.approx(base, abs=1e-12)  # orthogonal
    assert linear_cka(3.7 * X, Z, unbiased) == pytest.approx(base, abs=1e-12)  # isotropic scale
    assert linear_cka(X @ Q * 0.2, X, unbiased) == pytest.approx(1.0, abs=1e-12)
    assert linear_cka(Z, X, unbiased) == pytest.approx(base, abs=1e-14)  # symmetric


def test_biased_cka_matches_hsic0_and_feature_space_formula():
    X, Y = _feats(30, 6, 5), _feats(30, 9, 6)
    K, L = X @ X.T, Y @ Y.T
    via_hsic = float(hsic0(K, L) / torch.sqrt(hsic0(K, K) * hsic0(L, L)))
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    feature = float(torch.linalg.norm(Yc.T @ Xc) ** 2 / (torch.linalg.norm(Xc.T @ Xc) * torch.linalg.norm(Yc.T @ Yc)))
    assert linear_cka(X, Y) == pytest.approx(via_hsic, rel=1e-12)
    assert linear_cka(X, Y) == pytest.approx(feature, rel=1e-12)


def test_minibatch_one_batch_equals_full_batch_unbiased():
    X, Y = _feats(25, 8, 7), _feats(25, 4, 8)
    acc = MinibatchCKA(1, 1)
    acc.update([X], [Y])
    assert acc.compute()[0, 0] == pytest.approx(linear_cka(X, Y, unbiased=True), abs=1e-12)


def test_minibatch_matches_bruteforce_reference():
    """Σ_k HSIC₁ sums over batches of unequal sizes, every layer pair, features (n, ...) flattened."""
    sizes = [6, 7, 5]
    layers_a = [[_feats(n, 4, 10 + k).reshape(n, 2, 2) for k, n in enumerate(sizes)],
                [_feats(n, 3, 20 + k) for k, n in enumerate(sizes)]]
    layers_b = [[_feats(n, 5, 30 + k).tanh() for k, n in enumerate(sizes)]]
    acc = MinibatchCKA(2, 1)
    for k in range(len(sizes)):
        acc.update([layers_a[0][k], layers_a[1][k]], [layers_b[0][k]])
    got = acc.compute()
    for i, la in enumerate(layers_a):
        xy = xx = yy = 0.0
        for k in range(len(sizes)):
            Xk, Yk = la[k].reshape(sizes[k], -1), layers_b[0][k]
            K, L = Xk @ Xk.T, Yk @ Yk.T
            xy += _hsic1_loops(K, L)
            xx += _hsic1_loops(K, K)
            yy += _hsic1_loops(L, L)
        assert got[i, 0] == pytest.approx(xy / np.sqrt(xx * yy), rel=1e-10)


def test_minibatch_symmetric_and_bounded():
    rng = torch.Generator().manual_seed(0)
    feats = []
    for _ in range(4):  # 4 batches of 4 layers, including a rank-1 and a near-duplicate layer
        base = torch.randn(16, 10, generator=rng, dtype=torch.float64)
        feats.append([base, base + 0.1 * torch.randn(16, 10, generator=rng, dtype=torch.float64),
                      torch.randn(16, 1, generator=rng, dtype=torch.float64) @ torch.ones(1, 6, dtype=torch.float64),
                      torch.randn(16, 30, generator=rng, dtype=torch.float64)])
    acc = MinibatchCKA(4)
    for f in feats:
        acc.update(f)
    M = acc.compute()
    assert np.allclose(M, M.T, atol=1e-12)
    assert np.allclose(np.diag(M), 1.0, atol=1e-12)
    assert np.all(np.abs(M) <= 1 + 1e-12)
    assert M[0, 1] > 0.9 and abs(M[0, 3]) < 0.3
    # A against B is the transpose of B against A
    ab, ba = MinibatchCKA(2, 2), MinibatchCKA(2, 2)
    for f in feats:
        ab.update(f[:2], f[2:])
        ba.update(f[2:], f[:2])
    assert np.allclose(ab.compute(), ba.compute().T, atol=1e-14)


def _tiny(name, **kw):
    torch.manual_seed(0)
    return mlplab.create_model(name, image_size=8, patch_size=2, num_classes=3, **kw)


def test_cka_matrix_on_models():
    mixer = _tiny("mlp_mixer", hidden_dim=8, depth=2)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(12, 3, 8, 8, generator=g), torch.zeros(12, dtype=torch.long)) for _ in range(3)]
    res = cka_matrix(mixer, None, batches)
    assert res.layers_a == ["blocks.0.token", "blocks.0.channel", "blocks.1.token", "blocks.1.channel"]
    assert res.matrix.shape == (4, 4) and res.num_batches == 3 and res.num_examples == 36
    assert np.allclose(np.diag(res.matrix), 1.0, atol=1e-10)
    assert np.allclose(res.matrix, res.matrix.T, atol=1e-10)
    assert res.diagonal_mean() == pytest.approx(1.0, abs=1e-10)
    # against a second model, chosen layers, max_batches
    other = _tiny("s_mixer", hidden_dim=8, depth=3)
    res2 = cka_matrix(mixer, other, (b[0] for b in batches), layers_b=["stem", "blocks.2.channel"], max_batches=2)
    assert res2.matrix.shape == (4, 2) and res2.num_batches == 2 and res2.layers_b == ["stem", "blocks.2.channel"]
    assert np.all(np.abs(res2.matrix) <= 1 + 1e-10)
    assert mixer.training and other.training  # modes restored
    with pytest.raises(KeyError, match="no intermediate"):
        cka_matrix(mixer, other, batches, layers_b=["nope"])


def test_public_api_is_exported():
    import mlplab.analysis as analysis

    for name in ("hsic1", "linear_cka", "MinibatchCKA", "cka_matrix", "mp_edge", "sw_lplus", "sample_mixer_weight",
                 "sample_sw_weight", "largest_singular_value", "spectrum_vs_width", "normalised_spectrum",
                 "model_weight_spectra", "effective_weight_arrays", "plot_effective_weights",
                 "token_mixing_unit_images", "stem_filter_images", "check_implicit_regularisation",
                 "compute_budget", "fit_scaling_law", "compute_optimal_frontier", "fit_frontier_exponents"):
        assert callable(getattr(analysis, name)), name
