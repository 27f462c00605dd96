"""Static sparse-weight MLP (SW-MLP), docs/science.md §2 and §3.

    stem:    per-patch FC X = X0 Eᵀ ∈ R^{S0×C}, then x = vec(X) ∈ R^m (m = S0·C)
             — or a dense embedding x = E flatten(image) when m is not a multiple of S0
    block:   "fc":  x ↦ x + φ((M ⊙ A) LN(x))
             "mlp": x ↦ x + (M2 ⊙ A2) φ((M1 ⊙ A1) LN(x)),  hidden width round(γ·m)
    head:    LN, linear classifier.

Each mask M is Bernoulli(p), drawn once from ``seed`` (one stream per layer), frozen and kept
in the state dict. ``mask_scale=True`` scales the mask's ones by 1/√p (the spectral analysis'
convention, docs/science.md §4); the nonzero values are N(0, 1/(in·p·scale²)), i.e. A ~ N(0, 1/m) then.

**Width.** ``width`` = m directly, or from the connection budget (docs/science.md §3) Ω = p·γ·m²:
m = round(sqrt(Ω / (γ p))) (γ = 1 for ``block="fc"``). Ω = 2^18 with 1−p = 0.1, 0.3, 0.5, 0.7,
0.9 gives m = 540, 612, 724, 935, 1619. Give one of ``width``/``omega``; with neither, m = 1024.

**Vectorisation.** The stem's (B, S0, C) row-major tokens are vectorised with the paper's
column-major vec (``mlplab.layers.vec.vec``: x[j·S0 + i] = X[i, j]), the same order in which
the Mixer's effective wide MLP is written (Prop. 3.2), so the two can be compared entry by entry.

**Stem choice** (``stem="auto"|"patch"|"dense"``). The per-patch FC can only produce
m = S0·C with an integer C, but widths from the budget (540, 724, 1619, ...) are generally not
multiples of S0. Rounding m to a multiple of S0 would change the width (and Ω) the experiment
prescribes, so ``"auto"`` uses the per-patch FC when S0 divides m and otherwise a dense linear
embedding of the flattened image (ch·H·W -> m; parameter count ch·H·W·m). ``"patch"`` refuses
widths that S0 does not divide.

**Storage.** ``"masked"``: dense A and boolean M (memory ∝ m²); ``"sparse"``: only the nonzeros
(values + indices, memory ∝ nnz = p·m²). Given the same seed both draw the same masks and values
and compute the same function (tests check it in float64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn

from ..layers.common import make_act
from ..layers.masked import MaskedLinear, SparseLinear
from ..layers.stem import PatchEmbed, check_patch_size
from ..layers.vec import vec
from ..utils.seeds import derive_seed
from .base import VectorMLP
from .registry import register_model

__all__ = ["SWMLPConfig", "SWMLP", "SWBlock", "sw_width", "build_sw_mlp", "DEFAULT_SW_WIDTH"]

DEFAULT_SW_WIDTH = 1024


@dataclass
class SWMLPConfig:
    image_size: int = 32
    in_chans: int = 3
    patch_size: int = 4
    num_classes: int = 10
    width: int | None = None  # m; give this or omega (neither -> 1024)
    omega: float | None = None  # Ω, connections per layer: m = round(sqrt(Ω / (γ p)))
    density: float = 0.0625  # p, fraction of nonzero weights
    expansion: float = 1.0  # γ (block="mlp" only): hidden width round(γ m)
    depth: int = 3  # L
    block: Literal["fc", "mlp"] = "fc"
    stem: Literal["auto", "patch", "dense"] = "auto"
    storage: Literal["masked", "sparse"] = "masked"
    mask_scale: bool = False  # mask ones = 1/√p (spectral analysis convention)
    seed: int = 0  # seed of the masks and of the masked weights' values
    act: str = "gelu"
    bias: bool = True
    norm: bool = True  # LN before every block and before the head
    drop_rate: float = 0.0  # dropout inside the mlp block and on the fc block's output
    zero_head: bool = False
    norm_eps: float = 1e-5


def sw_width(omega: float, density: float, expansion: float = 1.0) -> int:
    """m = round(sqrt(Ω / (γ p))) (docs/science.md §3; halves rounded up, like ``theory.budget.round_half_up``):
    Ω = 2^18, p = 0.9 -> 540, p = 0.1 -> 1619."""
    if omega <= 0:
        raise ValueError(f"omega (connection budget) must be > 0, got {omega}")
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density p must be in (0, 1], got {density}; pass e.g. density=0.1")
    if expansion <= 0:
        raise ValueError(f"expansion (gamma) must be > 0, got {expansion}")
    return int(math.floor(math.sqrt(omega / (expansion * density)) + 0.5))


def _layer_seed(seed: int, block: int, sub: int) -> int:
    return derive_seed(seed, "sw_mlp", block, sub)


def _sparse_layer(storage: str, n_in: int, n_out: int, cfg: SWMLPConfig, seed: int) -> nn.Module:
    if torch.get_default_device().type == "meta":
        # sized, not drawn (the masks are drawn on the CPU, one block of rows at a time): a meta
        # build counts parameters (train.runplan), with the expected nonzeros p·in·out when sparse
        if storage == "masked":
            return MaskedLinear(n_in, n_out, torch.ones(n_out, n_in, dtype=torch.bool), bias=cfg.bias)
        nnz = round(cfg.density * n_in * n_out)
        return SparseLinear(n_in, n_out, torch.zeros(2, nnz, dtype=torch.long), bias=cfg.bias)
    cls = MaskedLinear if storage == "masked" else SparseLinear
    return cls.random(n_in, n_out, cfg.density, seed, bias=cfg.bias, mask_scale=cfg.mask_scale)


class SWBlock(nn.Module):
    """One SW-MLP block; ``forward`` returns the branch (before the skip) and the output."""

    def __init__(self, m: int, cfg: SWMLPConfig, index: int):
        super().__init__()
        self.index = index
        self.norm = nn.LayerNorm(m, eps=cfg.norm_eps) if cfg.norm else nn.Identity()
        self.act = make_act(cfg.act)
        self.drop = nn.Dropout(cfg.drop_rate) if cfg.drop_rate > 0 else nn.Identity()
        self.fc2: nn.Module | None = None
        if cfg.block == "fc":
            self.fc1 = _sparse_layer(cfg.storage, m, m, cfg, _layer_seed(cfg.seed, index, 0))
        else:
            h = int(round(cfg.expansion * m))
            if h < 1:
                raise ValueError(f"hidden width round(expansion*m) = {h}; raise expansion")
            self.fc1 = _sparse_layer(cfg.storage, m, h, cfg, _layer_seed(cfg.seed, index, 0))
            self.fc2 = _sparse_layer(cfg.storage, h, m, cfg, _layer_seed(cfg.seed, index, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.drop(self.act(self.fc1(self.norm(x))))  # fc: φ((M⊙A) LN(x))
        if self.fc2 is not None:
            b = self.drop(self.fc2(b))  # mlp: (M2⊙A2) φ((M1⊙A1) LN(x))
        return b, x + b


class SWMLP(VectorMLP):
    """SW-MLP: stem, vectorise, L sparse blocks with skips, LN, linear head.

    Intermediate features: ``stem``, each block's branch ``blocks.{i}`` (before its skip),
    ``pre_logits``.
    """

    def __init__(self, cfg: SWMLPConfig):
        super().__init__()
        s0 = check_patch_size(cfg.image_size, cfg.patch_size)
        for what, v in (("depth (L)", cfg.depth), ("num_classes", cfg.num_classes), ("in_chans", cfg.in_chans)):
            if v < 1:
                raise ValueError(f"{what} must be >= 1, got {v}")
        if not 0.0 < cfg.density <= 1.0:
            raise ValueError(f"density p must be in (0, 1], got {cfg.density}; pass e.g. density=0.1")
        if cfg.block == "fc" and cfg.expansion != 1.0:
            raise ValueError(f"expansion={cfg.expansion} only applies to block='mlp'; use block='mlp' or expansion=1")
        if cfg.expansion <= 0:
            raise ValueError(f"expansion (gamma) must be > 0, got {cfg.expansion}")
        if not 0.0 <= cfg.drop_rate < 1.0:
            raise ValueError(f"drop_rate must be in [0, 1), got {cfg.drop_rate}")
        if cfg.width is not None and cfg.omega is not None:
            raise ValueError(f"give width (m={cfg.width}) or omega (Ω={cfg.omega}), not both; set the other to None")
        if cfg.width is not None:
            m = cfg.width
        elif cfg.omega is not None:
            m = sw_width(cfg.omega, cfg.density, cfg.expansion)
        else:
            m = DEFAULT_SW_WIDTH
        if m < 1:
            raise ValueError(f"width m must be >= 1, got {m}; raise width (or omega)")
        self.cfg = cfg
        self.num_patches, self.width, self.effective_width = s0, m, m
        self.omega = cfg.density * cfg.expansion * m * m  # Ω = p γ m²
        stem = cfg.stem
        if stem == "auto":
            stem = "patch" if m % s0 == 0 else "dense"
        if stem == "patch" and m % s0:
            raise ValueError(
                f"stem='patch' needs width m={m} to be a multiple of the S0={s0} patches "
                f"(C = m/S0); use stem='dense' or 'auto', or a width such as {max(s0, m // s0 * s0)}"
            )
        self.stem_kind = stem
        if stem == "patch":
            self.stem = PatchEmbed(cfg.image_size, cfg.patch_size, cfg.in_chans, m // s0)  # (B, S0, C)
        else:
            self.stem = nn.Linear(cfg.in_chans * cfg.image_size ** 2, m)
        self.blocks = nn.ModuleList(SWBlock(m, cfg, i) for i in range(cfg.depth))
        self.norm = nn.LayerNorm(m, eps=cfg.norm_eps) if cfg.norm else nn.Identity()
        self.head = nn.Linear(m, cfg.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stem = self.stem.proj if isinstance(self.stem, PatchEmbed) else self.stem
        nn.init.trunc_normal_(stem.weight, std=(1.0 / stem.in_features) ** 0.5)  # lecun normal
        nn.init.zeros_(stem.bias)
        if self.cfg.zero_head:
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, ch, H, W) -> (N, m)."""
        self.check_images(x)
        if self.stem_kind == "patch":
            return vec(self.stem(x))  # (N, S0, C) -> column-major vec (N, S0·C)
        return self.stem(x.flatten(1))  # (N, ch·H·W) -> (N, m)


def build_sw_mlp(cfg: SWMLPConfig) -> SWMLP:
    return SWMLP(cfg)


register_model(
    "sw_mlp", family="sw_mlp", config_cls=SWMLPConfig, builder=build_sw_mlp,
    description="static sparse-weight MLP x+φ((M⊙A)LN(x)); width or omega (m=sqrt(Ω/γp)); 32x32x3, patch 4",
    block="fc", depth=3, density=0.0625,
)
register_model(
    "sw_mlp_block", family="sw_mlp", config_cls=SWMLPConfig, builder=build_sw_mlp,
    description="SW-MLP with MLP blocks x+(M2⊙A2)φ((M1⊙A1)LN(x)), γ=2 (the Mixer comparison of fig4)",
    block="mlp", expansion=2.0, depth=3, density=0.0625,
)
