"""Plain MLPs and inverted-bottleneck MLPs (Bachmann et al. 2023, "Scaling MLPs"; docs/science.md §2).

Input: the image flattened row-major (N, ch·H·W) (images larger than 64×64 are downscaled by
the data pipeline, not here), a linear embedding to width m, then L blocks, then a linear head.

    standard block    z ↦ LN(σ(W z)),               σ = ReLU, LN after the activation
    bottleneck block  z ↦ z + W_c σ(W_e LN(z)),     W_e ∈ R^{km×m}, W_c ∈ R^{m×km}, k = 4, σ = GELU

The bottleneck model is named B-L/Wi-m. As in the paper's description there is no LayerNorm
between the last block and the head (``final_norm=True`` adds one).

``norm_position="pre"`` gives the standard block of Scaling-MLPs' code (``StandardMLP`` in their
``models/networks.py``), z ↦ W σ(LN(z)), so that its checkpoints load (:mod:`mlplab.interop`);
the bottleneck block is always pre-norm, as there.

Published parameter counts for 64×64×3 inputs and "11k" classes (B-6/Wi-256 9M ... B-12/Wi-1024
124M) are the exact counts **truncated** to whole millions with num_classes = 11,230, the
ImageNet-21k class count of the official code (scaling_mlps ``data_utils/data_stats.py``) —
see ``tests/models/test_published_sizes.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn

from ..layers.common import make_act
from .base import VectorMLP
from .registry import register_model

__all__ = ["MLPConfig", "PlainMLP", "StandardBlock", "BottleneckBlock", "build_mlp", "SCALING_MLP_PRESETS",
           "SCALING_MLP_CLASSES"]

SCALING_MLP_CLASSES = 11230  # ImageNet-21k classes of scaling_mlps' data_utils/data_stats.py


@dataclass
class MLPConfig:
    image_size: int = 32
    in_chans: int = 3
    num_classes: int = 10
    width: int = 512  # m
    depth: int = 4  # L
    block: Literal["standard", "bottleneck"] = "standard"
    expansion: float = 4.0  # k of the bottleneck block (hidden width round(k·m))
    act: str | None = None  # None -> relu (standard) / gelu (bottleneck)
    drop_rate: float = 0.0  # dropout after the activation (and after W_c in bottleneck blocks)
    final_norm: bool = False  # LayerNorm before the head
    norm_eps: float = 1e-5
    # standard block: "post" z -> LN(σ(W z)) (docs/science.md §2) or "pre" z -> W σ(LN(z)) (Scaling-MLPs' code);
    # None -> post for standard blocks; bottleneck blocks are always pre-norm
    norm_position: Literal["pre", "post"] | None = None


class StandardBlock(nn.Module):
    """z ↦ LN(σ(W z)) (``pre_norm=False``, docs/science.md §2) or z ↦ W σ(LN(z)) (``pre_norm=True``); no skip."""

    def __init__(self, m: int, act: str, drop: float, eps: float, pre_norm: bool = False):
        super().__init__()
        self.pre_norm = pre_norm
        self.fc = nn.Linear(m, m)
        self.act = make_act(act)
        self.drop = nn.Dropout(drop) if drop > 0 else nn.Identity()
        self.norm = nn.LayerNorm(m, eps=eps)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pre_norm:
            out = self.fc(self.drop(self.act(self.norm(z))))
        else:
            out = self.norm(self.drop(self.act(self.fc(z))))
        return out, out  # (branch, output): no skip, the branch is the output


class BottleneckBlock(nn.Module):
    """z ↦ z + W_c σ(W_e LN(z))."""

    def __init__(self, m: int, hidden: int, act: str, drop: float, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(m, eps=eps)
        self.fc1 = nn.Linear(m, hidden)  # W_e
        self.act = make_act(act)
        self.drop1 = nn.Dropout(drop) if drop > 0 else nn.Identity()
        self.fc2 = nn.Linear(hidden, m)  # W_c
        self.drop2 = nn.Dropout(drop) if drop > 0 else nn.Identity()

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.drop2(self.fc2(self.drop1(self.act(self.fc1(self.norm(z))))))
        return b, z + b


class PlainMLP(VectorMLP):
    """Flatten, linear embedding to width m, L standard or bottleneck blocks, linear head.

    Intermediate features: ``stem``, ``blocks.{i}`` (bottleneck: the branch before the skip;
    standard: the block output), ``pre_logits``.
    """

    def __init__(self, cfg: MLPConfig):
        super().__init__()
        for what, v in (("width (m)", cfg.width), ("depth (L)", cfg.depth), ("num_classes", cfg.num_classes),
                        ("in_chans", cfg.in_chans), ("image_size", cfg.image_size)):
            if v < 1:
                raise ValueError(f"{what} must be >= 1, got {v}")
        if not 0.0 <= cfg.drop_rate < 1.0:
            raise ValueError(f"drop_rate must be in [0, 1), got {cfg.drop_rate}")
        m = cfg.width
        self.cfg = cfg
        self.width = self.effective_width = m
        self.in_features = cfg.in_chans * cfg.image_size ** 2
        self.stem = nn.Linear(self.in_features, m)
        if cfg.block == "bottleneck" and cfg.norm_position == "post":
            raise ValueError("norm_position='post' exists for standard blocks only; bottleneck blocks are pre-norm "
                             "(drop norm_position or use block='standard')")
        if cfg.block == "standard":
            act = cfg.act or "relu"
            pre = cfg.norm_position == "pre"
            self.blocks = nn.ModuleList(StandardBlock(m, act, cfg.drop_rate, cfg.norm_eps, pre)
                                        for _ in range(cfg.depth))
        else:
            hidden = int(round(cfg.expansion * m))
            if hidden < 1:
                raise ValueError(f"bottleneck hidden width round(expansion*m) = {hidden}; raise expansion")
            act = cfg.act or "gelu"
            self.blocks = nn.ModuleList(
                BottleneckBlock(m, hidden, act, cfg.drop_rate, cfg.norm_eps) for _ in range(cfg.depth)
            )
        self.norm = nn.LayerNorm(m, eps=cfg.norm_eps) if cfg.final_norm else nn.Identity()
        self.head = nn.Linear(m, cfg.num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        self.check_images(x)
        return self.stem(x.flatten(1))  # (N, ch·H·W) -> (N, m)


def build_mlp(cfg: MLPConfig) -> PlainMLP:
    return PlainMLP(cfg)


register_model(
    "mlp", family="mlp", config_cls=MLPConfig, builder=build_mlp,
    description="plain MLP: flatten, embed, blocks z->LN(ReLU(Wz)), linear head; 32x32x3",
    block="standard", width=512, depth=4,
)
register_model(
    "bottleneck_mlp", family="mlp", config_cls=MLPConfig, builder=build_mlp,
    description="inverted-bottleneck MLP: blocks z->z+W_c GELU(W_e LN(z)), k=4; 32x32x3",
    block="bottleneck", width=512, depth=4, expansion=4.0,
)

# Scaling-MLPs sizes B-L/Wi-m (Bachmann et al. 2023): name -> (L, m, published params in millions)
SCALING_MLP_PRESETS: dict[str, tuple[int, int, int]] = {
    "bottleneck_mlp_b6_wi256": (6, 256, 9),
    "bottleneck_mlp_b12_wi256": (12, 256, 12),
    "bottleneck_mlp_b6_wi512": (6, 512, 24),
    "bottleneck_mlp_b12_wi512": (12, 512, 37),
    "bottleneck_mlp_b6_wi1024": (6, 1024, 74),
    "bottleneck_mlp_b12_wi1024": (12, 1024, 124),
}

for _name, (_l, _m, _pub) in SCALING_MLP_PRESETS.items():
    register_model(
        _name, family="mlp", config_cls=MLPConfig, builder=build_mlp,
        description=f"Scaling-MLPs B-{_l}/Wi-{_m} ({_pub}M published): 64x64x3, {SCALING_MLP_CLASSES} classes",
        block="bottleneck", width=_m, depth=_l, expansion=4.0, image_size=64, in_chans=3,
        num_classes=SCALING_MLP_CLASSES,
    )
