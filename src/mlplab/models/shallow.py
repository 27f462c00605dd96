"""Shallow structured MLPs for the Monarch vs Kronecker comparison (docs/science.md §2, fig2d).

    x ↦ B_c B2 ReLU(B1 x)

x is the image flattened row-major (N, ch·H·W); B1: n -> width, B2: width -> width, both
:class:`~mlplab.layers.monarch.MonarchLinear` or both
:class:`~mlplab.layers.kronecker.KroneckerLinear`; B_c a dense linear head.

**Factorisations instead of padding.** Monarch needs n = k·b and Kronecker n = a·b. We never pad:
each size is factored as (divisor closest to √n) × (n / divisor). MNIST's 784 = 28·28 gives the
square √n-block Monarch and the 28×28 Kronecker factors exactly. The flattening is row-major,
x[i·W + j] = img[i, j], so x = vec(imgᵀ) and the Kronecker layer's X is the image transposed:
W mixes along each image row, V along each image column. CIFAR's 3072 = 48·64. A prime size would degrade to
one dense block; choose ``width`` (and ``nblocks``) for such inputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn

from ..layers.common import make_act
from ..layers.kronecker import KroneckerLinear
from ..layers.monarch import MonarchLinear, closest_factor
from .base import VectorMLP
from .registry import register_model

__all__ = ["ShallowConfig", "ShallowMLP", "build_shallow"]


@dataclass
class ShallowConfig:
    image_size: int = 28
    in_chans: int = 1
    num_classes: int = 10
    width: int | None = None  # hidden width of B1/B2; None -> the input size ch·H·W
    layer: Literal["monarch", "kronecker"] = "monarch"
    nblocks: int | None = None  # Monarch blocks of B1 (None -> divisor of n closest to √n)
    act: str = "relu"
    bias: bool = True


def _structured(kind: str, n_in: int, n_out: int, nblocks: int | None, bias: bool) -> nn.Module:
    if kind == "monarch":
        k = nblocks if nblocks is not None else closest_factor(n_in)
        if k < 1 or n_in % k:
            raise ValueError(f"nblocks={k} must be >= 1 and divide the layer input size {n_in}")
        b = n_in // k
        # L has q blocks; q must divide n_out. Prefer q = b (square √n blocks); else the
        # divisor of n_out closest to √n_out.
        q = b if n_out % b == 0 else closest_factor(n_out)
        return MonarchLinear(n_in, n_out, nblocks=k, mid_block=q, bias=bias)
    return KroneckerLinear(n_in, n_out, bias=bias)


class ShallowMLP(VectorMLP):
    """x ↦ B_c B2 φ(B1 x) with structured B1, B2.

    Intermediate features (no skips: layer outputs): ``stem`` (the flattened input),
    ``blocks.0`` = φ(B1 x), ``blocks.1`` = B2 φ(B1 x), ``pre_logits``.
    """

    def __init__(self, cfg: ShallowConfig):
        super().__init__()
        for what, v in (("num_classes", cfg.num_classes), ("in_chans", cfg.in_chans), ("image_size", cfg.image_size)):
            if v < 1:
                raise ValueError(f"{what} must be >= 1, got {v}")
        n = cfg.in_chans * cfg.image_size ** 2
        m = cfg.width if cfg.width is not None else n
        if m < 1:
            raise ValueError(f"width must be >= 1, got {m}")
        self.cfg = cfg
        self.in_features, self.width, self.effective_width = n, m, m
        self.fc1 = _structured(cfg.layer, n, m, cfg.nblocks, cfg.bias)  # B1
        self.act = make_act(cfg.act)
        self.fc2 = _structured(cfg.layer, m, m, None, cfg.bias)  # B2
        self.head = nn.Linear(m, cfg.num_classes)  # B_c
        self.norm = nn.Identity()

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        self.check_images(x)
        return x.flatten(1)  # (N, ch·H·W)

    def feature_blocks(self):
        return (self._hidden, self._mix)  # no skips: each layer's output is its branch

    def _hidden(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h1 = self.act(self.fc1(x))  # φ(B1 x)
        return h1, h1

    def _mix(self, h1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h2 = self.fc2(h1)  # B2 φ(B1 x)
        return h2, h2


def build_shallow(cfg: ShallowConfig) -> ShallowMLP:
    return ShallowMLP(cfg)


register_model(
    "monarch_mlp", family="shallow", config_cls=ShallowConfig, builder=build_shallow,
    description="shallow Monarch MLP x->B_c B2 ReLU(B1 x); MNIST 28x28 (784 = 28 blocks of 28)",
    layer="monarch",
)
register_model(
    "kronecker_mlp", family="shallow", config_cls=ShallowConfig, builder=build_shallow,
    description="shallow Kronecker MLP x->B_c B2 ReLU(B1 x), B = V⊗W as vec(W X Vᵀ); MNIST 28x28",
    layer="kronecker",
)
