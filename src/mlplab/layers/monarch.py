"""Monarch linear layer (Dao et al. 2022; docs/science.md §2 "Monarch and Kronecker layers").

Square case (n = k², k = √n):  M = J_cᵀ L J_c R, with R = diag(R_1..R_k), L = diag(L_1..L_k),
blocks k×k, and J_c the commutation matrix of a k×k matrix (J_c vec(X) = vec(Xᵀ); here
J_c = J_cᵀ).

Rectangular generalisation used here (n_in = k·b, n_out = q·l):
    R = diag(R_1..R_k),  R_j ∈ R^{q×b}      (k blocks: n_in -> k·q)
    L = diag(L_1..L_q),  L_i ∈ R^{l×k}      (q blocks: q·k -> q·l = n_out)
    M = J_c(l, q) · L · J_c(q, k) · R
where J_c(r, c) is the commutation matrix of an r×c matrix (``vec.commutation_matrix(r, c)``).
The middle vector R x, viewed as vec of a q×k matrix U (column j = output of block j), is
transposed so that L_i acts on row i of U, i.e. on the i-th output of every R block. With
k = q = l = b this is exactly J_cᵀ L J_c R. Cost: 2·(k·q·b + q·l·k) FLOPs per example, never
the n_out·n_in of the dense matrix, which is never formed in ``forward`` (``dense()`` builds
it for tests).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

__all__ = ["MonarchLinear", "closest_factor"]


def closest_factor(n: int) -> int:
    """The divisor of n closest to √n (not above it): 784 -> 28, 3072 -> 48, a prime -> 1."""
    if n < 1:
        raise ValueError(f"cannot factor n={n}; it must be >= 1")
    for k in range(math.isqrt(n), 0, -1):
        if n % k == 0:
            return k
    return 1


class MonarchLinear(nn.Module):
    """y = M x + b with M = J_c(l,q) L J_c(q,k) R (see module docstring).

    Args:
        in_features: n_in = nblocks · block_in.
        out_features: n_out = mid_block · out_block (l = n_out / q).
        nblocks: k, the number of blocks of R (default: the divisor of n_in closest to √n_in).
        mid_block: q, the output size of each R block = the number of blocks of L
            (default: n_in / k, which gives square √n blocks when n_in = n_out = k²).
    """

    def __init__(self, in_features: int, out_features: int, nblocks: int | None = None,
                 mid_block: int | None = None, bias: bool = True):
        super().__init__()
        k = nblocks if nblocks is not None else closest_factor(in_features)
        if k < 1 or in_features % k:
            raise ValueError(f"nblocks={k} must be >= 1 and divide in_features={in_features}")
        b = in_features // k
        q = mid_block if mid_block is not None else b
        if q < 1 or out_features % q:
            raise ValueError(
                f"out_features={out_features} must be a multiple of mid_block q={q} "
                f"(q blocks of L); choose out_features divisible by {q} or set mid_block"
            )
        l_ = out_features // q
        self.in_features, self.out_features = in_features, out_features
        self.nblocks, self.block_in, self.mid_block, self.block_out = k, b, q, l_
        self.R = nn.Parameter(torch.empty(k, q, b))  # R_j: (q, b)
        self.L = nn.Parameter(torch.empty(q, l_, k))  # L_i: (l, k)
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # like nn.Linear: U(±1/√fan_in) per block (fan_in b for R, k for L)
        nn.init.uniform_(self.R, -1 / math.sqrt(self.block_in), 1 / math.sqrt(self.block_in))
        nn.init.uniform_(self.L, -1 / math.sqrt(self.nblocks), 1 / math.sqrt(self.nblocks))
        if self.bias is not None:
            nn.init.uniform_(self.bias, -1 / math.sqrt(self.in_features), 1 / math.sqrt(self.in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = self._matmul(x.reshape(-1, self.in_features))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:  # (B, n_in) -> (B, n_out), no bias
        B = x.shape[0]
        xb = x.reshape(B, self.nblocks, self.block_in).transpose(0, 1)  # (k, B, b)
        u = torch.bmm(xb, self.R.transpose(1, 2))  # (k, B, q): u[j] = R_j x_j
        ut = u.permute(2, 1, 0)  # (q, B, k): J_c(q, k) -> row i of U for L_i
        v = torch.bmm(ut, self.L.transpose(1, 2))  # (q, B, l): v[i] = L_i U[i, :]
        return v.permute(1, 2, 0).reshape(B, self.out_features)  # J_c(l, q): out[r·q + i] = v[i][r]

    def block_matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(L, R) as dense block-diagonal matrices."""
        return torch.block_diag(*self.L), torch.block_diag(*self.R)

    def dense(self) -> torch.Tensor:
        """The n_out × n_in matrix M (tests and small sizes only)."""
        return self._matmul(torch.eye(self.in_features, dtype=self.R.dtype, device=self.R.device)).T

    def flops_per_example(self) -> int:
        return 2 * (self.nblocks * self.mid_block * self.block_in + self.mid_block * self.block_out * self.nblocks)

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, "
                f"R: {self.nblocks}x({self.mid_block}x{self.block_in}), "
                f"L: {self.mid_block}x({self.block_out}x{self.nblocks})")
