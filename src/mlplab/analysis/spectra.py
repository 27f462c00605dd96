"""Largest singular values of Mixer and sparse-weight (SW) MLP weights (docs/science.md §4).

Why this matters (Hayase & Karakida 2024, Fig. 4 right and Fig. S.1): at a fixed connection budget Ω
a wider SW-MLP has a sparser weight M ⊙ A, and sparse random matrices have a larger top
singular value than dense ones with the same entry variance; the Mixer reaches the same width
through Kronecker products with identities and permutations, which leave the spectrum of its
small dense weights unchanged. So the SW-MLP's λ_max grows with width while the Mixer's stays
at the Marchenko–Pastur edge.

* Dense γn×n weight, i.i.d. N(0, 1/n): λ_max → c_γ = 1 + √γ (MP edge; docs/science.md §4).
* I_n ⊗ W and J2 (I_n ⊗ W) J1 (permutations J1, J2) have exactly the singular values of W.
* SW weight M ⊙ A (γm×m), M_ij ~ Bernoulli(p) with ones scaled by 1/√p, A_ij ~ N(0, 1/m): with
  q = sqrt(p m),  λ_max² ≈ L+ = c_γ² + 3 c_γ² √γ (1 − p)/q² + O(1/q⁴)   (docs/science.md §4, the L+
  equation). At fixed Ω = p γ m², (1 − p)/q² = γm/Ω − 1/m grows linearly in m.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
import torch.nn as nn
from scipy.sparse import csgraph

from ..theory.budget import channels_for, round_half_up, width_bounds
from ..utils.seeds import derive_generator

__all__ = [
    "mp_edge",
    "sw_lplus",
    "sw_lambda_max_theory",
    "sample_mixer_weight",
    "sample_sw_weight",
    "kron_identity",
    "largest_singular_value",
    "mixer_pair_for_tokens",
    "mixer_pair_for_width",
    "spectrum_vs_width",
    "NormalisedSpectrum",
    "normalised_spectrum",
    "model_weight_spectra",
]


# --------------------------------------------------------------------------- theory
def mp_edge(gamma: float = 1.0) -> float:
    """c_γ = 1 + √γ: the limit of the largest singular value of a γn×n matrix with i.i.d.
    N(0, 1/n) entries (Marchenko–Pastur upper edge, docs/science.md §4)."""
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    return 1.0 + math.sqrt(gamma)


def sw_lplus(gamma: float, p: float, m: float) -> float:
    """L+ = c_γ² + 3 c_γ² √γ (1 − p)/q², q = sqrt(p m): the predicted λ_max² of the SW-MLP
    weight M ⊙ A (docs/science.md §4, the L+ equation; the O(1/q⁴) term dropped).

    Measured (3 seeds, Lanczos): γ=1, m=2048, p=0.01: λ_max = 2.179 vs sqrt(L+) = 2.140;
    γ=2, m=2048, p=0.01: 2.562 vs 2.650 — within ~2–4 % at these sizes."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"density p must be in (0, 1], got {p}")
    c2 = mp_edge(gamma) ** 2
    q2 = p * m
    return c2 + 3.0 * c2 * math.sqrt(gamma) * (1.0 - p) / q2


def sw_lambda_max_theory(gamma: float, p: float, m: float) -> float:
    """sqrt(L+): the predicted largest singular value of the SW-MLP weight."""
    return math.sqrt(sw_lplus(gamma, p, m))


# --------------------------------------------------------------------------- sampling
def _generator(seed: int | torch.Generator | None) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    return torch.Generator().manual_seed(0 if seed is None else int(seed))


def sample_mixer_weight(n: int, gamma: float = 1.0, seed: int | torch.Generator | None = 0,
                        dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A Mixer mixing weight of shape (round(γn), n) with i.i.d. N(0, 1/n) entries (docs/science.md §4)."""
    rows = max(1, int(round(gamma * n)))
    g = _generator(seed)
    return torch.randn(rows, n, generator=g, dtype=dtype) / math.sqrt(n)


def sample_sw_weight(m: int, p: float, gamma: float = 1.0, seed: int | torch.Generator | None = 0,
                     sparse: bool | None = None, dtype: torch.dtype = torch.float64):
    """The SW-MLP weight M ⊙ A of shape (round(γm), m) for the spectral analysis (docs/science.md §2, §4).

    M_ij ~ Bernoulli(p) with its ones scaled by 1/√p, A_ij ~ N(0, 1/m), so every entry has
    variance 1/m as in the dense case. ``sparse=True`` returns a ``scipy.sparse.csr_matrix``
    (memory ∝ nonzeros, what large widths need); ``False`` a dense torch tensor; ``None`` picks
    sparse when the dense matrix would exceed 2^22 entries. The mask is drawn exactly
    (Bernoulli per entry) in row chunks, so memory stays bounded; below p = 10⁻³ the nonzero
    count is drawn from Binomial(rows·m, p) and their positions uniformly (the same law).
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"density p must be in (0, 1], got {p}")
    rows = max(1, int(round(gamma * m)))
    if sparse is None:
        sparse = rows * m > (1 << 22)
    g = _generator(seed)
    scale = 1.0 / math.sqrt(p * m)
    total = rows * m
    r_idx, c_idx, vals = [], [], []
    if p < 1e-3 and total > (1 << 16):
        # very sparse: N ~ Binomial(rows·m, p) nonzeros at a uniformly random set of positions,
        # the same law as an entry-wise Bernoulli(p) mask, without touching all rows·m entries
        np_rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=g)))  # seeded from g
        n = int(np_rng.binomial(total, p))
        pos = torch.empty(0, dtype=torch.long)
        while pos.numel() < n:  # draw with replacement, drop repeats (n ≪ rows·m)
            extra = torch.randint(total, (n - pos.numel() + 16,), generator=g)
            pos = torch.unique(torch.cat([pos, extra]))
        pos = pos[torch.randperm(pos.numel(), generator=g)[:n]].sort().values
        r_idx.append(pos // m)
        c_idx.append(pos % m)
        vals.append(torch.randn(n, generator=g, dtype=torch.float64) * scale)
    else:
        chunk = max(1, (1 << 22) // m)  # rows per chunk: at most 2^22 uniforms in memory
        for r0 in range(0, rows, chunk):
            r1 = min(rows, r0 + chunk)
            keep = torch.rand(r1 - r0, m, generator=g, dtype=torch.float32) < p  # the mask M
            nz = keep.nonzero()
            r_idx.append(nz[:, 0] + r0)
            c_idx.append(nz[:, 1])
            vals.append(torch.randn(nz.shape[0], generator=g, dtype=torch.float64) * scale)
    r_all, c_all, v_all = torch.cat(r_idx), torch.cat(c_idx), torch.cat(vals)
    if sparse:
        return sp.csr_matrix((v_all.numpy(), (r_all.numpy(), c_all.numpy())), shape=(rows, m))
    W = torch.zeros(rows, m, dtype=torch.float64)
    W[r_all, c_all] = v_all
    return W.to(dtype)


def kron_identity(W: torch.Tensor, n: int, perm_in: torch.Tensor | None = None,
                  perm_out: torch.Tensor | None = None) -> torch.Tensor:
    """The effective weight J2 (I_n ⊗ W) J1 (Def. 5.1), dense; permutations as index arrays
    with (J v)[k] = v[p[k]] (DESIGN.md). Small sizes only."""
    K = torch.kron(torch.eye(n, dtype=W.dtype, device=W.device), W)
    if perm_out is not None:
        K = K[perm_out.long()]  # J2 K: row k of J2 K is row p[k] of K
    if perm_in is not None:
        K = K[:, torch.argsort(perm_in.long())]  # K J1: column p[k] of K J1 is column k of K
    return K


# --------------------------------------------------------------------------- λ_max
def _to_operator(W):
    """(shape, matvec, rmatvec, dtype) for a dense/sparse torch tensor, numpy array or scipy matrix."""
    if sp.issparse(W):
        return W.tocsr()
    if isinstance(W, torch.Tensor):
        if W.is_sparse or W.layout in (torch.sparse_csr, torch.sparse_csc):
            W = W.to_sparse_coo().coalesce().cpu()
            idx = W.indices().numpy()
            return sp.csr_matrix((W.values().double().numpy(), (idx[0], idx[1])), shape=tuple(W.shape))
        return W.detach().cpu().double().numpy()
    return np.asarray(W, dtype=np.float64)


def largest_singular_value(W, method: str = "auto", tol: float = 1e-10, seed: int = 0,
                           max_iter: int = 5000) -> float:
    """‖W‖₂, the largest singular value of a dense or sparse matrix.

    ``method``: ``"dense"`` — ``torch.linalg.matrix_norm(ord=2)`` in float64 (exact, O(n³));
    ``"lanczos"`` — ARPACK Lanczos (``scipy.sparse.linalg.svds``, k=1) with a seeded start
    vector, for large or sparse matrices; ``"power"`` — power iteration on WᵀW (slow when the
    top of the spectrum is crowded, as at the MP edge, so only a fallback); ``"auto"`` — dense
    up to 2^16 entries, Lanczos above or for sparse input (agrees with dense to ~1e-14).
    """
    A = _to_operator(W)
    shape = A.shape
    if min(shape) == 0:
        return 0.0
    if method == "auto":
        method = "lanczos" if (sp.issparse(A) or shape[0] * shape[1] > 65_536) and min(shape) > 2 else "dense"
    if method == "dense":
        dense = A.toarray() if sp.issparse(A) else A
        return float(torch.linalg.matrix_norm(torch.from_numpy(np.ascontiguousarray(dense)), ord=2))
    rng = np.random.default_rng(seed)
    if method == "lanczos":
        v0 = rng.standard_normal(min(shape))
        s = spla.svds(A, k=1, which="LM", return_singular_vectors=False, tol=tol, v0=v0, maxiter=max_iter)
        return float(s[0])
    if method == "power":
        v = rng.standard_normal(shape[1])
        v /= np.linalg.norm(v)
        lam = 0.0
        for _ in range(max_iter):
            w = A.T @ (A @ v)
            new = float(np.linalg.norm(w))
            if new == 0.0:
                return 0.0
            v = w / new
            if abs(new - lam) <= tol * new:
                lam = new
                break
            lam = new
        return math.sqrt(lam)
    raise ValueError(f"unknown method {method!r}; choose auto, dense, lanczos or power")


# --------------------------------------------------------------------------- fixed-Ω sweep
def mixer_pair_for_tokens(omega: float, gamma: float, S: int) -> tuple[int, int]:
    """(S, C) of an MLP-Mixer with Ω = γ(C S² + C² S)/2 (docs/science.md §3): C = (sqrt(S² + 8Ω/(γS)) − S)/2
    (``mlplab.theory.budget.channels_for``), rounded to the nearest integer."""
    return int(S), max(1, round_half_up(channels_for(omega, S, gamma)))


def mixer_pair_for_width(omega: float, gamma: float, m: float) -> tuple[int, int]:
    """(S, C) with S·C ≈ m and Ω = γ m (S + C)/2, S ≤ C: the roots of t² − (2Ω/(γm)) t + m = 0
    (docs/science.md §3). A Mixer at budget Ω reaches only (sqrt(1 + 8Ω/γ) − 1)/2 ≤ m ≤ (Ω/γ)^{2/3}
    (``mlplab.theory.budget.width_bounds``)."""
    lo, hi = width_bounds(omega, gamma)
    if not lo * (1 - 1e-9) <= m <= hi * (1 + 1e-9):
        raise ValueError(f"a Mixer with Ω={omega}, γ={gamma} has widths {lo:.1f} <= m <= {hi:.1f}; got m={m}")
    s = 2.0 * omega / (gamma * m)
    r = math.sqrt(max(s * s - 4.0 * m, 0.0))
    return max(1, round_half_up((s - r) / 2.0)), max(1, round_half_up((s + r) / 2.0))


def spectrum_vs_width(omega: float, gamma: float = 1.0, s_list: Sequence[int] | None = None,
                      widths: Sequence[float] | None = None, seeds: Sequence[int] = range(10),
                      method: str = "auto") -> list[dict]:
    """λ_max of Mixer and SW-MLP weights against width at a fixed budget Ω (paper Fig. 4 right).

    Give ``s_list`` (token counts; C follows from Ω, docs/science.md §3, and m = S·C) or ``widths`` (m;
    the Mixer's (S, C) with S·C ≈ m from Ω, reported as ``m_mixer``). For each width m:

    * Mixer: the first-layer token weight (γS×S) and channel weight (γC×C), N(0, 1/n); their
      effective forms I ⊗ W, J2(I ⊗ W)J1 have the same λ_max. ``lambda_mixer`` is the larger.
    * SW-MLP at the same Ω and m: p = Ω/(γ m²), weight M ⊙ A (γm×m) as in :func:`sample_sw_weight`.

    Returns one dict per width: S, C, m, p, c_gamma, sw_theory (sqrt L+), and mean/std over
    ``seeds`` of lambda_token, lambda_channel, lambda_mixer, lambda_sw.
    """
    if (s_list is None) == (widths is None):
        raise ValueError("give exactly one of s_list or widths")
    if s_list is not None:
        pairs = [mixer_pair_for_tokens(omega, gamma, int(S)) for S in s_list]
        ms = [S * C for S, C in pairs]
    else:
        pairs = [mixer_pair_for_width(omega, gamma, m) for m in widths]
        ms = [int(round(m)) for m in widths]
    seeds = list(seeds)
    out = []
    for (S, C), m in zip(pairs, ms):
        p = min(1.0, omega / (gamma * m * m))
        tok, ch, sw = [], [], []
        for s in seeds:
            g = derive_generator(s, "spectra", m)
            tok.append(largest_singular_value(sample_mixer_weight(S, gamma, g), method))
            ch.append(largest_singular_value(sample_mixer_weight(C, gamma, g), method))
            sw.append(largest_singular_value(sample_sw_weight(m, p, gamma, g, sparse=True), method))
        mix = np.maximum(tok, ch)
        out.append({
            "S": S, "C": C, "m": m, "m_mixer": S * C, "p": p, "omega": omega, "gamma": gamma,
            "c_gamma": mp_edge(gamma), "sw_theory": sw_lambda_max_theory(gamma, p, m),
            "lambda_token": float(np.mean(tok)), "lambda_token_std": float(np.std(tok)),
            "lambda_channel": float(np.mean(ch)), "lambda_channel_std": float(np.std(ch)),
            "lambda_mixer": float(np.mean(mix)), "lambda_mixer_std": float(np.std(mix)),
            "lambda_sw": float(np.mean(sw)), "lambda_sw_std": float(np.std(sw)),
            "seeds": len(seeds),
        })
    return out


# --------------------------------------------------------------------------- Fig. S.1 spectrum
def _sparse_singular_values(Z: sp.spmatrix) -> np.ndarray:
    """All nonzero-block singular values of a sparse matrix, one connected component of its
    bipartite row–column graph at a time (a very sparse Z is block diagonal after permuting
    rows and columns, and its spectrum is the union of the blocks')."""
    Z = sp.csr_matrix(Z)
    rows, cols = Z.shape
    adj = sp.bmat([[None, Z], [Z.T, None]], format="csr")
    ncomp, label = csgraph.connected_components(adj, directed=False)
    row_lab, col_lab = label[:rows], label[rows:]
    coo = Z.tocoo()
    ent_lab = row_lab[coo.row]
    # position of each row / column inside its component
    r_order, c_order = np.argsort(row_lab, kind="stable"), np.argsort(col_lab, kind="stable")
    r_start = np.searchsorted(row_lab[r_order], np.arange(ncomp + 1))
    c_start = np.searchsorted(col_lab[c_order], np.arange(ncomp + 1))
    r_local, c_local = np.empty(rows, dtype=np.int64), np.empty(cols, dtype=np.int64)
    r_local[r_order] = np.arange(rows) - r_start[row_lab[r_order]]
    c_local[c_order] = np.arange(cols) - c_start[col_lab[c_order]]
    e_order = np.argsort(ent_lab, kind="stable")
    e_start = np.searchsorted(ent_lab[e_order], np.arange(ncomp + 1))
    vals = []
    for k in range(ncomp):
        ents = e_order[e_start[k]:e_start[k + 1]]
        if ents.size == 0:
            continue  # an isolated row or column: only zero singular values
        block = np.zeros((r_start[k + 1] - r_start[k], c_start[k + 1] - c_start[k]))
        block[r_local[coo.row[ents]], c_local[coo.col[ents]]] = coo.data[ents]
        vals.append(np.linalg.svd(block, compute_uv=False))
    return np.concatenate(vals) if vals else np.zeros(0)


@dataclass
class NormalisedSpectrum:
    """Singular values of Z = M ⊙ W after scaling ZZᵀ by its mean diagonal (docs/science.md §4, Fig. S.1).

    ``singular_values``: (trials, m), each row sorted in decreasing order (zeros included).
    """

    a: float
    omega: float
    m: int
    p: float
    singular_values: np.ndarray

    @property
    def largest(self) -> np.ndarray:
        return self.singular_values[:, 0]


def normalised_spectrum(a: float, omega: float = 1e3, trials: int = 50, seed: int = 0) -> NormalisedSpectrum:
    """Spectrum experiment of docs/science.md §4 (paper Fig. S.1, there a = 1.5, Ω = 10³, 50 trials).

    Width m = Ω^{(1+a)/2}, density p = Ω^{−a} (so p m² = Ω connections), Z = M ⊙ W with
    W_ij ~ N(0, 1) and M_ij ~ Bernoulli(p); ZZᵀ is divided by its mean diagonal ‖Z‖_F²/m and its
    eigenvalues' square roots are returned. The largest grows with a (sparser, wider).
    The SVD is taken per connected block of Z (rows and columns without a nonzero contribute
    zero singular values), so very sparse cases stay cheap.
    """
    m = max(1, int(round(omega ** ((1.0 + a) / 2.0))))
    p = min(1.0, omega ** (-a))
    out = np.zeros((trials, m))
    for t in range(trials):
        g = derive_generator(seed, "sw_spectrum", t)
        Z = sample_sw_weight(m, p, 1.0, g, sparse=True) * math.sqrt(p * m)  # back to N(0, 1) entries
        if Z.nnz == 0:
            continue
        mean_diag = float(Z.multiply(Z).sum()) / m  # mean of diag(ZZᵀ) over all m rows
        s = _sparse_singular_values(Z) / math.sqrt(mean_diag)
        out[t, : s.size] = np.sort(s)[::-1][:m]
    return NormalisedSpectrum(a, omega, m, p, out)


# --------------------------------------------------------------------------- trained models
def _masked_effective_weight(mod: nn.Module):
    """The weight a masked / sparse linear layer applies (scale · M ⊙ A), or None for other
    modules. Sparse storages (``indices`` + ``values``) become a scipy CSR matrix, so memory
    stays ∝ nonzeros; dense masked ones use ``effective_weight()`` or ``weight * mask``."""
    indices, values = getattr(mod, "indices", None), getattr(mod, "values", None)
    if isinstance(indices, torch.Tensor) and isinstance(values, torch.Tensor) and indices.ndim == 2:
        scale = float(getattr(mod, "scale", 1.0))
        r, c = indices.detach().cpu().numpy()
        v = values.detach().cpu().double().numpy() * scale
        shape = (int(getattr(mod, "out_features")), int(getattr(mod, "in_features")))
        return sp.csr_matrix((v, (r, c)), shape=shape)
    mask = getattr(mod, "mask", None)
    if not isinstance(mask, torch.Tensor):
        return None
    f = getattr(mod, "effective_weight", None)
    if callable(f):
        return f().detach()
    w = getattr(mod, "weight", None)
    if isinstance(w, torch.Tensor) and w.shape == mask.shape:
        return (w * mask.to(w.dtype)).detach()
    return None


def model_weight_spectra(model: nn.Module, method: str = "auto", include_other: bool = False) -> list[dict]:
    """Per-layer λ_max of a (trained) model's mixing weights (docs/science.md §4; paper Fig. 4 right).

    * Mixer family: every ``nn.Linear`` inside ``blocks[i].token_mixing.inner`` /
      ``.channel_mixing.inner``; λ_max of W equals λ_max of its effective weight J2(I ⊗ W)J1.
    * Masked / sparse layers (SW-MLP, ``mlplab.layers.masked``): the effective weight
      scale · M ⊙ A (sparse storage stays sparse).
    * ``include_other=True`` adds every other ``nn.Linear`` (stem, head, skip layer, plain MLPs).

    Returns dicts with name, kind (token / channel / masked / linear), shape, lambda_max and the
    reference c_γ = 1 + √γ for the layer's aspect ratio γ = max/min of its shape.
    """
    out: list[dict] = []
    for name, mod in model.named_modules():
        if ".token_mixing.inner" in name + ".":
            kind = "token"
        elif ".channel_mixing.inner" in name + ".":
            kind = "channel"
        else:
            kind = None
        W = _masked_effective_weight(mod)
        if W is not None:
            kind = kind or "masked"
        elif type(mod) is nn.Linear and (kind is not None or include_other):
            W = mod.weight.detach()
            kind = kind or "linear"
        else:
            continue
        rows, cols = W.shape
        gamma = max(rows, cols) / min(rows, cols)
        if isinstance(W, torch.Tensor):
            W = W.cpu()
        out.append({"name": name, "kind": kind, "shape": (int(rows), int(cols)),
                    "lambda_max": largest_singular_value(W, method), "c_gamma": mp_edge(gamma)})
    return out
