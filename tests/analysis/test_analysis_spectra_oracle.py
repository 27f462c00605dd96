"""Spectra (mlplab.analysis.spectra) against numpy in float64: every singular value of Fig. S.1's
normalised spectrum from numpy's SVD of the same draw, λ_max of every storage and method, the
samplers' laws and seeds, the budget pairs from their defining equations, and every refusal."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn as nn

from mlplab.analysis.spectra import (
    _sparse_singular_values,
    kron_identity,
    largest_singular_value,
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
from mlplab.layers.masked import MaskedLinear, SparseLinear
from mlplab.utils.seeds import derive_generator


def _top(a) -> float:
    return float(np.linalg.svd(np.asarray(a, dtype=np.float64), compute_uv=False)[0])


def test_theory_refusals_and_the_root():
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=f"gamma must be > 0, got {bad}"):
            mp_edge(bad)
    assert mp_edge(1e-12) == pytest.approx(1.0 + 1e-6)
    for bad in (0.0, -0.1, 1.0 + 1e-9):
        with pytest.raises(ValueError, match=r"density p must be in \(0, 1\], got"):
            sw_lplus(1.0, bad, 100)
        with pytest.raises(ValueError, match=r"density p must be in \(0, 1\], got"):
            sample_sw_weight(10, bad)
    assert sw_lambda_max_theory(2.0, 0.1, 500) == pytest.approx(math.sqrt(sw_lplus(2.0, 0.1, 500)), rel=1e-15)
    # L+ by hand at γ = 4, p = 0.5, m = 8: c = 3, q² = 4: 9 + 3·9·2·0.5/4 = 15.75
    assert sw_lplus(4.0, 0.5, 8) == pytest.approx(15.75, rel=1e-15)


def test_mixer_weight_shape_law_and_seeds():
    W = sample_mixer_weight(300, 1.5, seed=2)
    assert W.shape == (450, 300) and W.dtype == torch.float64
    n = W.numel()
    assert abs(float((W ** 2).mean()) - 1 / 300) < 5 * math.sqrt(2 / n) / 300  # N(0, 1/n)
    assert torch.equal(sample_mixer_weight(5, seed=None), sample_mixer_weight(5, seed=0))
    assert not torch.equal(sample_mixer_weight(5, seed=1), sample_mixer_weight(5, seed=0))
    g = torch.Generator().manual_seed(4)
    assert torch.equal(sample_mixer_weight(5, 1.0, g), torch.randn(5, 5, generator=torch.Generator().manual_seed(4),
                                                                   dtype=torch.float64) / math.sqrt(5))
    assert sample_mixer_weight(4, 0.01).shape == (1, 4)  # at least one row
    assert sample_mixer_weight(4, 1.0, dtype=torch.float32).dtype == torch.float32


def test_sw_weight_storage_choice_law_and_dtype():
    assert isinstance(sample_sw_weight(2048, 0.5, sparse=None), torch.Tensor)  # 2^22 entries: still dense
    big = sample_sw_weight(2049, 0.001, sparse=None)  # above 2^22: sparse
    assert sp.issparse(big)
    assert abs(big.nnz - 2049 ** 2 * 0.001) < 5 * math.sqrt(2049 ** 2 * 0.001)
    W = sample_sw_weight(40, 0.3, 0.5, seed=1, dtype=torch.float32)
    assert W.shape == (20, 40) and W.dtype == torch.float32
    S = sample_sw_weight(300, 0.2, 1.0, seed=3, sparse=True)
    N = 300 * 300
    assert abs(S.nnz - N * 0.2) < 5 * math.sqrt(N * 0.2 * 0.8)  # Binomial(N, p) nonzeros
    v = S.data
    assert abs(float((v ** 2).mean()) - 1 / (0.2 * 300)) < 5 * math.sqrt(2 / v.size) / (0.2 * 300)  # 1/(p m)
    very = sample_sw_weight(1000, 5e-4, 1.0, seed=6, sparse=True)  # the very sparse sampler
    assert abs(very.nnz - 500) < 5 * math.sqrt(500) and very.shape == (1000, 1000)
    assert np.unique(very.indices + 1000 * np.repeat(np.arange(1000), np.diff(very.indptr))).size == very.nnz
    assert abs(float((very.data ** 2).mean()) - 2.0) < 5 * 2.0 * math.sqrt(2 / very.nnz)
    rows = np.repeat(np.arange(1000), np.diff(very.indptr))
    assert rows.max() > 900 and very.indices.max() > 900  # positions cover the whole matrix


def test_kron_identity_with_and_without_permutations():
    W = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(2, 3)
    K = torch.zeros(4, 6, dtype=torch.float64)
    K[:2, :3], K[2:, 3:] = W, W
    assert torch.equal(kron_identity(W, 2), K)
    p_out = torch.tensor([3, 0, 2, 1])
    assert torch.equal(kron_identity(W, 2, perm_out=p_out), K[p_out])
    p_in = torch.tensor([5, 1, 0, 4, 2, 3])
    J1 = torch.zeros(6, 6, dtype=torch.float64)
    J1[torch.arange(6), p_in] = 1  # (J v)[k] = v[p[k]]
    assert torch.equal(kron_identity(W, 2, perm_in=p_in), K @ J1)


def test_largest_singular_value_of_every_storage_and_method():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(30, 20))
    top = _top(A)
    for method in ("dense", "lanczos", "auto"):
        assert largest_singular_value(A, method) == pytest.approx(top, rel=1e-9)
    assert largest_singular_value(A, "power", tol=1e-15, max_iter=20000) == pytest.approx(top, rel=1e-5)
    assert largest_singular_value(torch.from_numpy(A).float()) == pytest.approx(_top(A.astype(np.float32)), rel=1e-6)
    S = sp.random(40, 30, density=0.2, random_state=1, format="coo")
    ref = _top(S.toarray())
    t = torch.from_numpy(S.toarray())
    for W in (S, S.tocsc(), t.to_sparse_csr(), t.to_sparse_coo()):
        assert largest_singular_value(W) == pytest.approx(ref, rel=1e-9)
    assert largest_singular_value(np.zeros((0, 5))) == 0.0 and largest_singular_value(np.zeros((4, 0))) == 0.0
    assert largest_singular_value(np.zeros((3, 3)), "power") == 0.0
    assert largest_singular_value(np.array([[3.0, 0.0], [0.0, -4.0]])) == 4.0  # tiny: dense
    with pytest.raises(ValueError, match="unknown method 'qr'; choose auto, dense, lanczos or power"):
        largest_singular_value(A, "qr")


def test_auto_picks_lanczos_above_2_16_entries_or_for_sparse_input(monkeypatch):
    import mlplab.analysis.spectra as spectra

    calls = []
    svds = spectra.spla.svds
    monkeypatch.setattr(spectra.spla, "svds", lambda *a, **k: calls.append(a[0].shape) or svds(*a, **k))
    largest_singular_value(np.ones((256, 256)))  # 2^16 entries: dense
    largest_singular_value(np.ones((2, 40000)))  # min side 2: dense
    assert calls == []
    largest_singular_value(np.ones((257, 256)))
    largest_singular_value(sp.identity(5, format="csr"))
    assert calls == [(257, 256), (5, 5)]
    largest_singular_value(sp.identity(2, format="csr"))  # sparse but min side 2: dense
    assert len(calls) == 2


def test_power_iteration_stops_at_its_tolerance_or_its_iterations():
    A = np.diag([1.0, 0.999])  # a crowded top: slow convergence
    few = largest_singular_value(A, "power", tol=0.0, max_iter=3)
    assert 0.999 < few < 1.0
    assert largest_singular_value(np.diag([2.0, 1.0]), "power", tol=1e-14) == pytest.approx(2.0, rel=1e-6)


def test_mixer_pair_for_width_solves_its_quadratic():
    """S, C are the roots of t² − (2Ω/(γm)) t + m = 0, rounded half up; at the ends of the range."""
    omega, gamma = 2.0 ** 18, 1.0
    for m in (16 * 173, 64 * 64, 1000):
        s = 2 * omega / (gamma * m)
        roots = sorted(np.roots([1.0, -s, m]).real)
        assert mixer_pair_for_width(omega, gamma, m) == tuple(max(1, math.floor(r + 0.5)) for r in roots)
    lo = (math.sqrt(1 + 8 * omega / gamma) - 1) / 2
    hi = (omega / gamma) ** (2 / 3)
    mixer_pair_for_width(omega, gamma, lo)
    mixer_pair_for_width(omega, gamma, hi)
    for bad in (lo * (1 - 1e-6), hi * (1 + 1e-6)):
        with pytest.raises(ValueError, match=r"a Mixer with Ω=262144.0, γ=1.0 has widths .* got m="):
            mixer_pair_for_width(omega, gamma, bad)


def test_spectrum_vs_width_rows_are_their_seeds_largest_singular_values():
    omega, gamma, widths, seeds = 2.0 ** 12, 1.0, [100, 150], [0, 3]
    rows = spectrum_vs_width(omega, gamma, widths=widths, seeds=seeds, method="dense")
    for r, m in zip(rows, widths):
        S, C = mixer_pair_for_width(omega, gamma, m)
        p = min(1.0, omega / (gamma * m * m))
        tok, ch, sw = [], [], []
        for s in seeds:
            g = derive_generator(s, "spectra", m)
            tok.append(_top(sample_mixer_weight(S, gamma, g).numpy()))
            ch.append(_top(sample_mixer_weight(C, gamma, g).numpy()))
            sw.append(_top(sample_sw_weight(m, p, gamma, g, sparse=True).toarray()))
        mix = np.maximum(tok, ch)
        assert (r["S"], r["C"], r["m"], r["m_mixer"], r["seeds"]) == (S, C, m, S * C, 2)
        assert (r["p"], r["omega"], r["gamma"], r["c_gamma"]) == (p, omega, gamma, 2.0)
        assert r["sw_theory"] == sw_lambda_max_theory(gamma, p, m)
        for key, vals in (("token", tok), ("channel", ch), ("mixer", mix), ("sw", sw)):
            assert r[f"lambda_{key}"] == pytest.approx(np.mean(vals), rel=1e-10)
            assert r[f"lambda_{key}_std"] == pytest.approx(np.std(vals), rel=1e-8, abs=1e-12)
    for bad in (dict(), dict(s_list=[4], widths=[16])):
        with pytest.raises(ValueError, match="give exactly one of s_list or widths"):
            spectrum_vs_width(2.0 ** 12, **bad)


def test_sparse_singular_values_are_numpys_of_the_whole_matrix():
    rng = np.random.default_rng(2)
    Z = sp.random(30, 30, density=0.04, random_state=3, format="csr")  # several blocks, empty rows
    sv = np.sort(_sparse_singular_values(Z))[::-1]
    full = np.linalg.svd(Z.toarray(), compute_uv=False)
    np.testing.assert_allclose(sv, full[: sv.size], rtol=0, atol=1e-12)
    assert np.all(full[sv.size:] < 1e-12)
    R = sp.csr_matrix(rng.normal(size=(3, 5)) * (rng.random((3, 5)) < 0.5))  # rectangular
    sv = np.sort(_sparse_singular_values(R))[::-1]
    np.testing.assert_allclose(sv, np.linalg.svd(R.toarray(), compute_uv=False)[: sv.size], atol=1e-12)
    assert _sparse_singular_values(sp.csr_matrix((4, 4))).size == 0


@pytest.mark.parametrize("a,omega,trials", [(0.5, 100.0, 3), (1.0, 100.0, 2), (3.0, 2.0, 12)])
def test_normalised_spectrum_is_numpys_svd_of_the_same_draw(a, omega, trials):
    res = normalised_spectrum(a, omega=omega, trials=trials, seed=1)
    m = round(omega ** ((1 + a) / 2))
    p = omega ** (-a)
    assert (res.m, res.p, res.a, res.omega) == (m, p, a, omega) and res.singular_values.shape == (trials, m)
    empty = 0
    for t in range(trials):
        Z = sample_sw_weight(m, p, 1.0, derive_generator(1, "sw_spectrum", t), sparse=True).toarray() * math.sqrt(p * m)
        if not Z.any():  # no nonzero drawn (a = 3, Ω = 2: 2 expected in 16 entries): all zeros
            empty += 1
            assert not res.singular_values[t].any()
            continue
        sv = np.linalg.svd(Z / math.sqrt((Z ** 2).sum() / m), compute_uv=False)  # ZZᵀ / mean diag
        np.testing.assert_allclose(res.singular_values[t], sv, rtol=0, atol=1e-10)
    assert empty > 0 or a < 3
    np.testing.assert_array_equal(res.largest, res.singular_values[:, 0])


def test_model_weight_spectra_read_masked_and_sparse_layers():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.masked = MaskedLinear.random(12, 6, 0.5, seed=1, mask_scale=True)
            self.sparse = SparseLinear.random(6, 18, 0.5, seed=2, mask_scale=True)
            self.plain = nn.Linear(4, 4)

    class Legacy(nn.Module):  # a masked layer without effective_weight(): weight * mask
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(5, 3))
            self.register_buffer("mask", torch.rand(5, 3) < 0.5)

    net = Net()
    rows = model_weight_spectra(net)
    assert [(r["name"], r["kind"], r["shape"]) for r in rows] == [("masked", "masked", (6, 12)),
                                                                  ("sparse", "masked", (18, 6))]
    assert rows[0]["lambda_max"] == pytest.approx(_top(net.masked.effective_weight().detach()), rel=1e-6)
    assert rows[1]["lambda_max"] == pytest.approx(_top(net.sparse.effective_weight().detach()), rel=1e-6)
    assert rows[0]["c_gamma"] == pytest.approx(1 + math.sqrt(2)) and rows[1]["c_gamma"] == pytest.approx(1 + math.sqrt(3))
    assert model_weight_spectra(net, include_other=True)[2]["c_gamma"] == 2.0
    assert model_weight_spectra(net, include_other=True)[2]["kind"] == "linear"
    leg = Legacy()
    (row,) = model_weight_spectra(leg)
    assert row["lambda_max"] == pytest.approx(_top((leg.weight * leg.mask).detach()), rel=1e-6)
    odd = Legacy()
    odd.mask = torch.ones(2, 2, dtype=torch.bool)  # a mask of another shape than the weight: not a layer
    assert model_weight_spectra(odd) == []
