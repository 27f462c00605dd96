"""Kronecker linear layer (docs/science.md §2): weight V ⊗ W applied as vec(W X Vᵀ), never forming V ⊗ W.

The input vector is read as x = vec(X) with X ∈ R^{a×b} (column-major vec, docs/science.md §1), W ∈ R^{c×a},
V ∈ R^{d×b}; y = vec(W X Vᵀ) = (V ⊗ W) vec(X) ∈ R^{c·d}. In row-major storage the vector x is
Xᵀ (b rows of a), so the layer computes Yᵀ = V Xᵀ Wᵀ and flattens it: that is vec(Y).
Cost: 2·(d·b·a + d·a·c) FLOPs per example instead of 2·(c·d)·(a·b).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .monarch import closest_factor

__all__ = ["KroneckerLinear"]


def _shape(n: int, shape: tuple[int, int] | None, what: str) -> tuple[int, int]:
    if shape is None:
        a = closest_factor(n)
        return a, n // a
    if len(shape) != 2 or shape[0] < 1 or shape[1] < 1 or shape[0] * shape[1] != n:
        raise ValueError(f"{what} shape {shape} must be two positive factors of {n}")
    return int(shape[0]), int(shape[1])


class KroneckerLinear(nn.Module):
    """y = (V ⊗ W) x + b computed as vec(W X Vᵀ).

    Args:
        in_features: a·b; ``in_shape`` = (a, b) (default: a = divisor of n closest to √n).
        out_features: c·d; ``out_shape`` = (c, d) likewise.
    """

    def __init__(self, in_features: int, out_features: int, in_shape: tuple[int, int] | None = None,
                 out_shape: tuple[int, int] | None = None, bias: bool = True):
        super().__init__()
        a, b = _shape(in_features, in_shape, "in")
        c, d = _shape(out_features, out_shape, "out")
        self.in_features, self.out_features = in_features, out_features
        self.in_shape, self.out_shape = (a, b), (c, d)
        self.W = nn.Parameter(torch.empty(c, a))
        self.V = nn.Parameter(torch.empty(d, b))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # entries of V ⊗ W are products: each factor U(±(1/fan)^{1/2}) on its own fan-in
        a, b = self.in_shape
        nn.init.uniform_(self.W, -math.sqrt(3.0 / a), math.sqrt(3.0 / a))
        nn.init.uniform_(self.V, -1 / math.sqrt(b), 1 / math.sqrt(b))
        if self.bias is not None:
            nn.init.uniform_(self.bias, -1 / math.sqrt(self.in_features), 1 / math.sqrt(self.in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.in_shape
        lead = x.shape[:-1]
        xt = x.reshape(-1, b, a)  # (B, b, a) = Xᵀ
        yt = torch.matmul(torch.matmul(self.V, xt), self.W.T)  # (B, d, c) = V Xᵀ Wᵀ = Yᵀ
        y = yt.reshape(-1, self.out_features)  # flatten(Yᵀ) = vec(Y)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def dense(self) -> torch.Tensor:
        """V ⊗ W (tests and small sizes only)."""
        return torch.kron(self.V, self.W)

    def flops_per_example(self) -> int:
        (a, b), (c, d) = self.in_shape, self.out_shape
        return 2 * (d * b * a + d * a * c)

    def extra_repr(self) -> str:
        return f"in={self.in_features} as {self.in_shape}, out={self.out_features} as {self.out_shape}"
