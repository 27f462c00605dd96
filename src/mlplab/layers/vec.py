"""The vectorisation convention of docs/science.md §1, pinned in one place.

vec(X) stacks the **columns** of X ∈ R^{S×C}: vec(X)[j·S + i] = X[i, j]. PyTorch stores X
row-major, so vec(X) is ``X.transpose(-1, -2).flatten(-2)``. Models in mlplab keep token
features as (B, S, C) row-major tensors; these helpers translate between that storage and the
column-major vec order in which the paper writes its matrices.
"""
from __future__ import annotations

import torch

__all__ = [
    "vec",
    "unvec",
    "commutation_perm",
    "commutation_matrix",
    "vec_index_of_rowmajor",
    "rowmajor_index_of_vec",
    "perm_matrix",
    "invert_perm",
]


def vec(x: torch.Tensor) -> torch.Tensor:
    """vec(X) for X of shape (..., S, C): column stacking, result (..., S·C)."""
    return x.transpose(-1, -2).flatten(-2)


def unvec(v: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of :func:`vec`: (..., rows·cols) -> (..., rows, cols)."""
    return v.unflatten(-1, (cols, rows)).transpose(-1, -2)


def rowmajor_index_of_vec(rows: int, cols: int, device=None) -> torch.Tensor:
    """``idx[t]`` = row-major flat position of vec entry t (t = j·rows + i -> i·cols + j)."""
    t = torch.arange(rows * cols, device=device)
    return (t % rows) * cols + t // rows


def vec_index_of_rowmajor(rows: int, cols: int, device=None) -> torch.Tensor:
    """``idx[k]`` = vec position of row-major flat entry k (k = i·cols + j -> j·rows + i)."""
    k = torch.arange(rows * cols, device=device)
    return (k % cols) * rows + k // cols


def commutation_perm(rows: int, cols: int, device=None) -> torch.Tensor:
    """Index form of the commutation matrix J_c for X ∈ R^{rows×cols}.

    A permutation is stored as an index array p with (J v)[k] = v[p[k]]. J_c vec(X) = vec(Xᵀ);
    vec(Xᵀ)[i·cols + j] = X[i, j] = vec(X)[j·rows + i], so p = vec_index_of_rowmajor.
    """
    return vec_index_of_rowmajor(rows, cols, device)


def perm_matrix(p: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """Dense permutation matrix J with (J v)[k] = v[p[k]], i.e. J[k, p[k]] = 1."""
    m = p.numel()
    J = torch.zeros(m, m, dtype=dtype, device=p.device)
    J[torch.arange(m, device=p.device), p] = 1
    return J


def commutation_matrix(rows: int, cols: int, dtype=torch.float64) -> torch.Tensor:
    """Dense J_c (m×m, m = rows·cols) with J_c vec(X) = vec(Xᵀ)."""
    return perm_matrix(commutation_perm(rows, cols), dtype)


def invert_perm(p: torch.Tensor) -> torch.Tensor:
    """q with q[p[k]] = k, so the matrix of q is the transpose of the matrix of p."""
    q = torch.empty_like(p)
    q[p] = torch.arange(p.numel(), device=p.device)
    return q
