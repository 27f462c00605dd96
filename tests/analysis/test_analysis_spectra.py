"""Spectra of Mixer and SW-MLP weights (docs/science.md §4)."""
import math

import numpy as np
import pytest
import torch

import mlplab
from mlplab.analysis.spectra import (
    kron_identity,
    largest_singular_value,
    mixer_pair_for_tokens,
    mixer_pair_for_width,
    model_weight_spectra,
    mp_edge,
    normalised_spectrum,
    sample_mixer_weight,
    sample_sw_weight,
    spectrum_vs_width,
    sw_lambda_max_theory,
    sw_lplus,
)
from mlplab.layers.pk import PKLayer
from mlplab.layers.vec import perm_matrix


def test_theory_values():
    assert mp_edge(1.0) == 2.0 and mp_edge(4.0) == 3.0
    assert sw_lplus(1.0, 1.0, 100) == pytest.approx(4.0)  # dense: the MP edge squared
    # L+ = c² + 3c²√γ(1−p)/q², q² = p m
    assert sw_lplus(2.0, 0.1, 500) == pytest.approx(mp_edge(2) ** 2 * (1 + 3 * math.sqrt(2) * 0.9 / 50))
    # at fixed Ω = pγm², (1−p)/q² = γm/Ω − 1/m (docs/science.md §4)
    omega, gamma, m = 2.0 ** 16, 2.0, 300
    p = omega / (gamma * m * m)
    c2 = mp_edge(gamma) ** 2
    assert sw_lplus(gamma, p, m) == pytest.approx(c2 + 3 * c2 * math.sqrt(gamma) * (gamma * m / omega - 1 / m))


@pytest.mark.parametrize("gamma", [1.0, 2.0])
def test_dense_lambda_max_near_mp_edge(gamma):
    lam = np.mean([largest_singular_value(sample_mixer_weight(400, gamma, seed=s)) for s in range(2)])
    assert lam == pytest.approx(mp_edge(gamma), rel=0.04)


def test_methods_agree_and_accept_sparse():
    W = sample_mixer_weight(100, 2.0, seed=3)
    dense = largest_singular_value(W, "dense")
    assert dense == pytest.approx(float(torch.linalg.svdvals(W)[0]), rel=1e-12)
    assert largest_singular_value(W, "lanczos") == pytest.approx(dense, rel=1e-10)
    spiked = W + 3.0 * torch.outer(torch.ones(200, dtype=torch.float64), torch.ones(100, dtype=torch.float64)) / 100
    assert largest_singular_value(spiked, "power", tol=1e-14) == pytest.approx(largest_singular_value(spiked, "dense"),
                                                                               rel=1e-6)
    S = sample_sw_weight(200, 0.05, 1.0, seed=1, sparse=True)
    ref = largest_singular_value(S.toarray(), "dense")
    assert largest_singular_value(S) == pytest.approx(ref, rel=1e-10)
    coo = S.tocoo()
    t = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, coo.shape, check_invariants=True)
    assert largest_singular_value(t) == pytest.approx(ref, rel=1e-10)


def test_kron_and_permutations_keep_singular_values_exactly():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(6, 4, generator=g, dtype=torch.float64)
    n = 5
    p1, p2 = torch.randperm(4 * n, generator=g), torch.randperm(6 * n, generator=g)
    eff = kron_identity(W, n, perm_in=p1, perm_out=p2)
    ref = perm_matrix(p2) @ torch.kron(torch.eye(n, dtype=torch.float64), W) @ perm_matrix(p1)
    assert torch.equal(eff, ref)
    sv_w = torch.linalg.svdvals(W)
    expected = torch.sort(sv_w.repeat(n), descending=True).values
    assert torch.allclose(torch.linalg.svdvals(eff)[: expected.numel()], expected, rtol=0, atol=1e-12)
    assert largest_singular_value(eff) == pytest.approx(float(sv_w[0]), abs=1e-12)
    # the library's PK layer (Def. 5.1) has the same spectrum
    layer = PKLayer(n, 4, 6, perm_in=p1, perm_out=p2).double()
    with torch.no_grad():
        layer.inner.weight.copy_(W)
    assert torch.allclose(torch.linalg.svdvals(layer.effective_weight())[: expected.numel()], expected, atol=1e-12)


def test_sw_weight_statistics():
    m, p = 400, 0.1
    W = sample_sw_weight(m, p, 2.0, seed=0)
    assert W.shape == (800, 400)
    nz = W[W != 0]
    assert nz.numel() / W.numel() == pytest.approx(p, rel=0.05)
    assert float((W ** 2).mean()) == pytest.approx(1.0 / m, rel=0.05)  # entry variance 1/m
    assert float(nz.abs().mul(math.sqrt(p * m)).pow(2).mean()) == pytest.approx(1.0, rel=0.05)
    dense, sparse = sample_sw_weight(50, 0.2, seed=4, sparse=False), sample_sw_weight(50, 0.2, seed=4, sparse=True)
    assert np.array_equal(dense.numpy(), sparse.toarray())
    tiny = sample_sw_weight(2000, 2e-4, seed=5, sparse=True)  # the very sparse sampler
    assert tiny.nnz == pytest.approx(2e-4 * 2000 ** 2, rel=0.25)
    assert float((tiny.data ** 2).mean()) == pytest.approx(1.0 / (2e-4 * 2000), rel=0.3)  # 1/(p m)


def test_sw_lambda_max_matches_lplus():
    m, p = 768, 0.03
    lam = np.mean([largest_singular_value(sample_sw_weight(m, p, 1.0, seed=s, sparse=True)) for s in range(2)])
    assert lam == pytest.approx(sw_lambda_max_theory(1.0, p, m), rel=0.04)
    assert lam > mp_edge(1.0) * 1.03  # clearly above the dense edge


def test_budget_pairs():
    assert mixer_pair_for_tokens(2 ** 19, 2.0, 4) == (4, 360)
    assert mixer_pair_for_tokens(2 ** 19, 2.0, 64) == (64, 64)
    assert mixer_pair_for_width(2 ** 18, 1.0, 16 * 173) == (16, 173)
    with pytest.raises(ValueError, match="widths"):
        mixer_pair_for_width(2 ** 12, 1.0, 64)


def test_sw_lambda_grows_with_width_mixer_stays():
    rows = spectrum_vs_width(2 ** 14, 1.0, widths=[181, 360, 640], seeds=range(3))
    assert [r["m"] for r in rows] == [181, 360, 640]
    assert rows[0]["p"] == pytest.approx(2 ** 14 / 181 ** 2)
    sw = [r["lambda_sw"] for r in rows]
    assert sw[2] > sw[0] + 0.05 and sw[2] > sw[1]
    assert [r["sw_theory"] for r in rows] == sorted(r["sw_theory"] for r in rows)
    for r in rows:
        assert r["lambda_mixer"] == pytest.approx(mp_edge(1.0), rel=0.1)
        assert r["lambda_sw"] == pytest.approx(r["sw_theory"], rel=0.05)
    by_s = spectrum_vs_width(2 ** 12, 2.0, s_list=[8, 16], seeds=[0])
    assert [(r["S"], r["C"]) for r in by_s] == [mixer_pair_for_tokens(2 ** 12, 2.0, 8),
                                                mixer_pair_for_tokens(2 ** 12, 2.0, 16)]


def test_normalised_spectrum_grows_with_a():
    res = {a: normalised_spectrum(a, omega=100, trials=4) for a in (0.0, 0.5, 1.0)}
    assert res[0.0].m == 10 and res[0.0].p == 1.0 and res[1.0].m == 100 and res[1.0].p == pytest.approx(0.01)
    means = [res[a].largest.mean() for a in (0.0, 0.5, 1.0)]
    assert means[0] < means[1] < means[2]
    assert means[0] == pytest.approx(2.0, rel=0.15)  # dense square: MP edge 2
    sv = res[1.0].singular_values
    assert sv.shape == (4, 100) and np.all(np.diff(sv, axis=1) <= 1e-12)
    # scaled by the mean diagonal: the mean squared singular value is 1
    assert np.allclose((sv ** 2).mean(axis=1), 1.0)


def test_model_weight_spectra_mixer_and_sw():
    torch.manual_seed(0)
    mixer = mlplab.create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=8, depth=1, num_classes=3)
    rows = model_weight_spectra(mixer)
    assert [r["kind"] for r in rows] == ["token", "token", "channel", "channel"]
    w = mixer.blocks[0].channel_mixing.inner.fc1.weight.detach().double()
    assert rows[2]["lambda_max"] == pytest.approx(float(torch.linalg.matrix_norm(w, ord=2)), rel=1e-10)
    assert len(model_weight_spectra(mixer, include_other=True)) > len(rows)
    kw = dict(image_size=8, patch_size=2, width=64, density=0.25, depth=2, num_classes=3, seed=1)
    masked = mlplab.create_model("sw_mlp", storage="masked", **kw)
    sparse = mlplab.create_model("sw_mlp", storage="sparse", **kw)
    a, b = model_weight_spectra(masked), model_weight_spectra(sparse)
    assert [r["kind"] for r in a] == ["masked", "masked"] and len(b) == 2
    for ra, rb, blk in zip(a, b, masked.blocks):
        ref = float(torch.linalg.matrix_norm(blk.fc1.effective_weight().detach().double(), ord=2))
        assert ra["lambda_max"] == pytest.approx(ref, rel=1e-10)
        assert rb["lambda_max"] == pytest.approx(ref, rel=1e-5)
