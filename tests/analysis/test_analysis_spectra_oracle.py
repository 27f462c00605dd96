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
    assert rows[0]["c_gamma"] == pytest.approx(1 + math.sqrt(2))
    assert rows[1]["c_gamma"] == pytest.approx(1 + math.sqrt(3))
    assert model_weight_spectra(net, include_other=True)[2]["c_gamma"] == 2.0
    assert model_weight_spectra(net, include_other=True)[2]["kind"] == "linear"
    leg = Legacy()
    (row,) = model_weight_spectra(leg)
    assert row["lambda_max"] == pytest.approx(_top((leg.weight * leg.mask).detach()), rel=1e-6)
    odd = Legacy()
    odd.mask = torch.ones(2, 2, dtype=torch.bool)  # a mask of another shape than the weight: not a layer
    assert model_weight_spectra(odd) == []


# ------------------------------------------------------------------ the samplers, written out


def _chunk_draw(m, p, gamma, g):
    """The documented exact sampler: rows in chunks of 2^22 // m, each a float32 uniform mask
    (kept below p) then the chunk's float64 normal values, scaled by 1/√(p m)."""
    rows = max(1, int(round(gamma * m)))
    r_all, c_all, v_all = [], [], []
    chunk = max(1, (1 << 22) // m)
    for r0 in range(0, rows, chunk):
        keep = torch.rand(min(rows, r0 + chunk) - r0, m, generator=g, dtype=torch.float32) < p
        nz = keep.nonzero()
        r_all.append(nz[:, 0] + r0)
        c_all.append(nz[:, 1])
        v_all.append(torch.randn(nz.shape[0], generator=g, dtype=torch.float64) * (1.0 / math.sqrt(p * m)))
    return _dense(rows, m, torch.cat(r_all), torch.cat(c_all), torch.cat(v_all))


def _very_sparse_draw(m, p, gamma, g):
    """The documented very sparse sampler: N ~ Binomial(rows·m, p) from numpy seeded by g, N
    distinct positions drawn with replacement 16 spare at a time, shuffled, the first N sorted."""
    rows = max(1, int(round(gamma * m)))
    total = rows * m
    n = int(np.random.default_rng(int(torch.randint(2 ** 62, (1,), generator=g))).binomial(total, p))
    pos = torch.empty(0, dtype=torch.long)
    while pos.numel() < n:
        pos = torch.unique(torch.cat([pos, torch.randint(total, (n - pos.numel() + 16,), generator=g)]))
    pos = pos[torch.randperm(pos.numel(), generator=g)[:n]].sort().values
    vals = torch.randn(n, generator=g, dtype=torch.float64) * (1.0 / math.sqrt(p * m))
    return _dense(rows, m, pos // m, pos % m, vals)


class _Coo:
    """(shape, rows, cols, values) of a draw, row-major, without a dense matrix."""

    def __init__(self, shape, r, c, v):
        self.shape = shape
        order = np.lexsort((c, r))
        self.r, self.c, self.v = r[order], c[order], v[order]

    def __eq__(self, other):
        return (self.shape == other.shape and np.array_equal(self.r, other.r) and np.array_equal(self.c, other.c)
                and np.array_equal(self.v, other.v))


def _dense(rows, m, r, c, v):
    return _Coo((rows, m), r.numpy(), c.numpy(), v.numpy())


def _coo(S):
    S = S.tocoo()
    return _Coo(S.shape, S.row.astype(np.int64), S.col.astype(np.int64), S.data)


@pytest.mark.parametrize("m,p,gamma,very", [
    (300, 9.99e-4, 1.0, True),  # total 90 000 > 2^16 and p < 10⁻³: the very sparse sampler
    (256, 9.99e-4, 1.0, False),  # total exactly 2^16: exact
    (300, 1e-3, 1.0, False),  # p exactly 10⁻³: exact
    (100, 5e-4, 1.0, False),  # few entries: exact
    (300, 0.2, 0.5, False),
    (2048, 1e-3, 2.0, False),  # 2^23 entries: two chunks of 2048 rows
])
def test_sw_weight_is_the_documented_draw(m, p, gamma, very):
    want = (_very_sparse_draw if very else _chunk_draw)(m, p, gamma, torch.Generator().manual_seed(7))
    got = sample_sw_weight(m, p, gamma, seed=7, sparse=True)
    assert sp.issparse(got) and _coo(got) == want
    if m * m * gamma < 1e6:  # the dense storage holds the same draw
        dense = sample_sw_weight(m, p, gamma, seed=7, sparse=False).numpy()
        assert _coo(sp.coo_matrix(dense)) == want


def test_sw_weight_at_a_drawn_uniform_and_under_a_float64_default():
    u = torch.rand(3, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float32)
    p = float(u[1, 2])  # an entry whose uniform equals p is not kept
    got = sample_sw_weight(5, p, 0.6, seed=2, sparse=False).numpy()
    assert _coo(sp.coo_matrix(got)) == _chunk_draw(5, p, 0.6, torch.Generator().manual_seed(2))
    assert got[1, 2] == 0.0
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:  # the mask's uniforms are float32 whatever the default dtype
        got = sample_sw_weight(40, 0.3, 1.0, seed=3, sparse=True)
    finally:
        torch.set_default_dtype(before)
    assert _coo(got) == _chunk_draw(40, 0.3, 1.0, torch.Generator().manual_seed(3))
    assert sample_sw_weight(4, 0.5, 0.01).shape == (1, 4)  # at least one row


def test_defaults_are_the_documented_ones():
    assert mp_edge() == 2.0
    assert torch.equal(sample_mixer_weight(5), sample_mixer_weight(5, 1.0, 0))
    assert torch.equal(sample_sw_weight(6, 0.5), sample_sw_weight(6, 0.5, 1.0, 0))
    a = normalised_spectrum(0.0)  # Ω = 10³: m = 32, dense; 50 trials from seed 0
    b = normalised_spectrum(0.0, 1000.0, 50, 0)
    assert a.m == 32 and a.singular_values.shape == (50, 32) and np.array_equal(a.singular_values, b.singular_values)
    rows = spectrum_vs_width(2.0 ** 10, widths=[60], method="dense")
    assert rows == spectrum_vs_width(2.0 ** 10, 1.0, widths=[60], seeds=range(10), method="dense")
    A = np.diag([1.0, 0.9999])  # converging slowly: the power method uses all its iterations
    assert largest_singular_value(A, "power", tol=0.0) == largest_singular_value(A, "power", tol=0.0, max_iter=5000,
                                                                                 seed=0)
    assert largest_singular_value(A, "power", tol=0.0) != largest_singular_value(A, "power", tol=0.0, max_iter=5001)


def _power_by_hand(A, tol, max_iter, seed):
    v = np.random.default_rng(seed).standard_normal(A.shape[1])
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(max_iter):
        w = A.T @ (A @ v)
        new = float(np.linalg.norm(w))
        if new == 0.0:
            return 0.0
        v = w / new
        if abs(new - lam) <= tol * new:
            return math.sqrt(new)
        lam = new
    return math.sqrt(lam)


def test_power_iteration_is_the_loop_written_out():
    A = np.array([[0.9, 0.2], [0.1, 0.6]])
    for tol, iters in ((0.5, 10), (0.05, 10), (0.0, 1), (0.0, 3), (1e-3, 2)):
        assert largest_singular_value(A, "power", tol=tol, max_iter=iters, seed=3) == _power_by_hand(A, tol, iters, 3)
    assert largest_singular_value(np.eye(2), "power") == 1.0
    # a tolerance met with equality stops the loop: |new − lam| = tol·new at the second step
    v = np.random.default_rng(1).standard_normal(2)
    v /= np.linalg.norm(v)
    w1 = A.T @ (A @ v)
    n1 = np.linalg.norm(w1)
    n2 = float(np.linalg.norm(A.T @ (A @ (w1 / n1))))
    tol = abs(n2 - n1) / n2
    for _ in range(100):
        if abs(n2 - n1) == tol * n2:
            break
        tol = np.nextafter(tol, 1.0 if abs(n2 - n1) > tol * n2 else 0.0)
    assert abs(n2 - n1) == tol * n2
    assert largest_singular_value(A, "power", tol=tol, seed=1) == math.sqrt(n2)


def test_lanczos_is_arpack_from_the_seeded_start(monkeypatch):
    import mlplab.analysis.spectra as spectra

    seen = []
    svds = spectra.spla.svds
    monkeypatch.setattr(spectra.spla, "svds", lambda A, **kw: seen.append(kw) or svds(A, **kw))
    A = np.random.default_rng(0).normal(size=(7, 5))
    largest_singular_value(A, "lanczos", seed=4)
    largest_singular_value(A, "lanczos", tol=1e-6, max_iter=77)
    v4, v0 = np.random.default_rng(4).standard_normal(5), np.random.default_rng(0).standard_normal(5)
    for kw, v, tol, it in zip(seen, (v4, v0), (1e-10, 1e-6), (5000, 77)):
        np.testing.assert_array_equal(kw.pop("v0"), v)
        assert kw == {"k": 1, "which": "LM", "return_singular_vectors": False, "tol": tol, "maxiter": it}
    assert largest_singular_value(np.ones((3, 22000))) == pytest.approx(math.sqrt(66000))  # min side 3: Lanczos
    assert len(seen) == 3
    assert largest_singular_value(A.astype(np.float32), "dense") == \
        largest_singular_value(A.astype(np.float32).astype(np.float64), "dense")  # read in float64


def test_spectrum_vs_width_passes_its_method_and_sparse_weights(monkeypatch):
    import mlplab.analysis.spectra as spectra

    seen = []
    lsv = spectra.largest_singular_value
    monkeypatch.setattr(spectra, "largest_singular_value",
                        lambda W, method="auto": seen.append((method, sp.issparse(W))) or lsv(W, "dense"))
    spectrum_vs_width(2.0 ** 10, 1.0, widths=[60], seeds=[0], method="power")
    assert seen == [("power", False), ("power", False), ("power", True)]
    seen.clear()
    net = nn.Sequential(nn.Linear(3, 3))
    model_weight_spectra(net, method="lanczos", include_other=True)
    assert seen == [("lanczos", False)]
    # a budget whose only width rounds down to m = 1: p = Ω/(γ m²) = 1.4 is capped at 1
    assert spectrum_vs_width(1.4, 1.0, widths=[1.248], seeds=[0])[0]["p"] == 1.0
    with pytest.raises(ValueError, match="^give exactly one of s_list or widths$"):
        spectrum_vs_width(2.0 ** 12)


def test_budget_pairs_at_their_ends():
    from mlplab.analysis.spectra import mixer_pair_for_tokens

    assert mixer_pair_for_tokens(10.0, 1.0, 4) == (4, 1)  # Ω = γ(C S² + C² S)/2 with C = 1
    omega, gamma = 300.0, 2.0
    from mlplab.theory.budget import width_bounds

    lo, hi = width_bounds(omega, gamma)
    assert lo == pytest.approx((math.sqrt(1 + 8 * omega / gamma) - 1) / 2)
    assert hi == pytest.approx((omega / gamma) ** (2 / 3))
    assert mixer_pair_for_width(omega, gamma, lo)[0] == 1  # the narrowest Mixer has one token
    assert mixer_pair_for_width(omega, gamma, lo * (1 - 1e-9)) and mixer_pair_for_width(omega, gamma, hi * (1 + 1e-9))
    with pytest.raises(ValueError, match="has widths"):
        mixer_pair_for_width(omega, gamma, hi * 1.01)  # γ = 2's bounds, not γ = 1's
    assert mixer_pair_for_width(1.0, 1.0, 1.0) == (1, 1)
    W = torch.ones(2, 2, dtype=torch.float64)
    with torch.device("meta"):  # the identity is made beside W
        K = kron_identity(W, 2)
    assert K.device.type == "cpu"
    assert kron_identity(torch.ones(2, 2, dtype=torch.float16), 3).dtype == torch.float16


def test_masked_weights_of_modules_with_partial_attributes():
    class Values(nn.Module):  # indices and values, no scale: scale 1
        def __init__(self):
            super().__init__()
            self.register_buffer("indices", torch.tensor([[0, 1], [1, 0]]))
            self.values = nn.Parameter(torch.tensor([3.0, -2.0]))
            self.in_features, self.out_features = 2, 2

    class IndicesOnly(nn.Module):  # an index buffer alone is not a sparse weight
        def __init__(self):
            super().__init__()
            self.register_buffer("indices", torch.tensor([[0], [0]]))

    class MaskOnly(nn.Module):  # a mask without a weight: nothing to read
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.ones(2, 2, dtype=torch.bool))

    net = nn.Module()
    net.a, net.b, net.c = Values(), IndicesOnly(), MaskOnly()
    rows = model_weight_spectra(net)
    assert [r["name"] for r in rows] == ["a"] and rows[0]["lambda_max"] == pytest.approx(3.0)


def test_normalised_spectrum_at_the_smallest_budget_and_a_dense_cap():
    one = normalised_spectrum(0.5, omega=1.0, trials=1)  # m = 1: a single entry
    assert one.m == 1 and one.singular_values.shape == (1, 1) and one.singular_values[0, 0] == pytest.approx(1.0)
    assert normalised_spectrum(-0.5, omega=4.0, trials=1).p == 1.0  # Ω^(−a) > 1: capped at a dense weight


def test_sparse_singular_values_one_per_row_or_column_of_each_block():
    Z = np.zeros((3, 4))
    Z[0, 0] = 1.0  # a 1×1 block, then a 2×3 block: min(1, 1) + min(2, 3) singular values
    Z[1:3, 1:4] = [[1.0, 2.0, 0.0], [0.0, 3.0, 4.0]]
    sv = _sparse_singular_values(sp.csr_matrix(Z))
    assert sv.size == 3
    np.testing.assert_allclose(np.sort(sv), np.sort(np.r_[1.0, np.linalg.svd(Z[1:, 1:], compute_uv=False)]), atol=1e-12)
    sv = _sparse_singular_values(sp.csr_matrix(Z.T))  # and a 3×2 block: min(3, 2)
    assert sv.size == 3


def test_a_torch_sparse_weight_keeps_its_shape(monkeypatch):
    import mlplab.analysis.spectra as spectra

    shapes = []
    svds = spectra.spla.svds
    monkeypatch.setattr(spectra.spla, "svds", lambda A, **kw: shapes.append(A.shape) or svds(A, **kw))
    t = torch.zeros(5, 6, dtype=torch.float64)
    t[0, 1], t[1, 0] = 2.0, -3.0  # nonzeros in two rows only: the shape is (5, 6), not (2, 2)
    assert largest_singular_value(t.to_sparse_coo()) == pytest.approx(3.0)
    assert shapes == [(5, 6)]


def test_sw_weight_draws_of_many_collisions_huge_rows_and_none():
    # 64 000 draws among 6.4·10⁷ entries collide ~32 times: the sampler draws again, n − |pos| + 16 more
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert _coo(sample_sw_weight(8000, 9.99e-4, 1.0, g1, sparse=True)) == _very_sparse_draw(8000, 9.99e-4, 1.0, g2)
    m = (1 << 22) + 1  # wider than a chunk of 2^22 uniforms: one row per chunk
    g1, g2 = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    assert _coo(sample_sw_weight(m, 1e-3, 2 / m, g1, sparse=True)) == _chunk_draw(m, 1e-3, 2 / m, g2)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    none = sample_sw_weight(300, 1e-9, 1.0, g1, sparse=True)  # no nonzero: no position is drawn
    assert none.nnz == 0 and _coo(none) == _very_sparse_draw(300, 1e-9, 1.0, g2)
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))  # the generator used alike
    assert normalised_spectrum(0.5, trials=1).p == 1000.0 ** -0.5  # Ω = 10³ by default
