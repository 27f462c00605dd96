"""Small shared building blocks: activations by name, the two-layer MLP, stochastic depth."""
from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["ACTIVATIONS", "GELUTanh", "make_act", "Mlp", "LinearAct", "left_linear", "left_gemm_pays", "DropPath",
           "drop_path_rates"]

class GELUTanh(nn.GELU):
    """GELU with the tanh approximation, φ(x) = ½x(1 + tanh(√(2/π)(x + 0.044715x³))): what Flax's
    ``nn.gelu`` computes by default, so the official Mixer checkpoints need it (exact GELU
    differs by up to ~1e-3 per unit and ~1e-4 in the logits)."""

    def __init__(self):
        super().__init__(approximate="tanh")


ACTIVATIONS: dict[str, type[nn.Module]] = {
    "gelu": nn.GELU,
    "gelu_tanh": GELUTanh,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
    "identity": nn.Identity,
}


def make_act(name: str) -> nn.Module:
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}") from None


class Mlp(nn.Module):
    """fc2(drop(φ(fc1(x)))) on the last dimension: in -> hidden -> out."""

    def __init__(self, in_features: int, hidden: int, out_features: int, act: str = "gelu", drop: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act = make_act(act)
        self.drop1 = nn.Dropout(drop) if drop > 0 else nn.Identity()
        self.fc2 = nn.Linear(hidden, out_features)
        self.drop2 = nn.Dropout(drop) if drop > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))

    def forward_columns(self, x: torch.Tensor) -> torch.Tensor:
        """The same map applied to every column of x (B, in, cols) -> (B, out, cols), as left GEMMs."""
        return self.drop2(left_linear(self.fc2, self.drop1(self.act(left_linear(self.fc1, x)))))


class LinearAct(nn.Sequential):
    """φ(W x + b): the single-layer group map of the S-Mixer (a Sequential, so its parameters
    are named ``0.weight``/``0.bias``)."""

    def __init__(self, in_features: int, out_features: int, act: str = "gelu"):
        super().__init__(nn.Linear(in_features, out_features), make_act(act))

    def forward_columns(self, x: torch.Tensor) -> torch.Tensor:
        """φ(W X + b) on every column of x (B, in, cols) -> (B, out, cols), as a left GEMM."""
        return self[1](left_linear(self[0], x))


# A left GEMM with W broadcast over the batch is B GEMMs of n' × n × cols: with few columns each
# one is too thin for the kernel's tiles (``benchmarks/bench_left_gemm.py``: 3–6× slower than the
# transposed input at 8 columns, on par from 32).
LEFT_GEMM_MIN_COLS = 32


def left_gemm_pays(x: torch.Tensor) -> bool:
    """Whether to apply column maps to ``x`` (B, n, cols) as left GEMMs rather than on its transpose.

    In fp32 one ``baddbmm`` with W broadcast over the batch multiplies from the left without
    copying x into (B, cols, n) order (1.04-1.18× faster S-Mixer steps, AVX2 and AVX512 CPUs),
    when x has at least ``LEFT_GEMM_MIN_COLS`` columns. Under autocast, reduced-precision batched
    GEMMs with a broadcast operand were slower than one large GEMM on the transposed input, on
    both CPUs measured, and only on CPUs: elsewhere column maps take one large GEMM on the transposed
    input. (A left GEMM uses the Linear's weight without calling it: callers take the transposed
    path where a model's ``impl`` is "module" or a hook watches the Linear.)"""
    return (x.device.type == "cpu" and x.shape[-1] >= LEFT_GEMM_MIN_COLS
            and not torch.is_autocast_enabled(x.device.type))


def left_linear(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``linear`` applied to every column of x as one left GEMM: W X (+ b), (B, n, cols) -> (B, n', cols),
    or (n, cols) -> (n', cols) for a matrix."""
    if x.ndim == 2:
        if linear.bias is None:
            return torch.mm(linear.weight, x)
        return torch.addmm(linear.bias.view(-1, 1), linear.weight, x)
    W = linear.weight.unsqueeze(0).expand(x.shape[0], -1, -1)  # (B, n', n), no copy
    if linear.bias is None:
        return torch.bmm(W, x)
    return torch.baddbmm(linear.bias.view(1, -1, 1), W, x)


class DropPath(nn.Module):
    """Stochastic depth: zero a residual branch per sample with probability ``p`` (rescaled)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"drop_path rate must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.p}"


def drop_path_rates(max_rate: float, depth: int) -> list[float]:
    """Stochastic-depth rates rising linearly from 0 (first block) to ``max_rate`` (last)."""
    if depth == 1:
        return [0.0]
    return [max_rate * i / (depth - 1) for i in range(depth)]
