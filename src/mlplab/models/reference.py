"""Reference models the inference measurements compare the MLPs against: a ResNet with bottleneck
blocks (He et al. 2016, torchvision's layout) and a Vision Transformer (Dosovitskiy et al. 2021,
timm's layout). Written here, so the experiments run without timm; not in the model registry
(they are yardsticks, not models of this toolkit): :func:`create_reference_model` builds one by
name from :data:`REFERENCE_MODELS`.

Each layer knows how many positions it is applied to, so the one counter
(:func:`mlplab.models.counting.count_flops`) reads their matmul FLOPs from
``flops_per_example()``:

* a convolution with k×k kernels, C_in → C_out channels and an H_out × W_out output costs
  2 · C_out · (C_in / groups) · k² · H_out · W_out (multiply-add = 2), what ``FlopCounterMode``
  counts for ``aten.convolution``;
* a transformer block on N tokens of width D with MLP width D_h costs
  2 · N · (3D² + D² + 2·D·D_h) for its four Linears plus 4 · N² · D for the two attention
  products QKᵀ and AV. ``FlopCounterMode`` does not count the fused
  ``scaled_dot_product_attention`` on a CPU; :meth:`VisionTransformer.attention_flops` is that
  part, so the tests check measured = analytic − attention.

Parameter counts at 1000 classes: ResNet-152 60,192,808 (torchvision's), ViT-B/16 at 224
86,567,656 (timm's ``vit_base_patch16_224``); Scaling MLPs Table 4 gives 60.19M and, at 64×64
with patch 4, 86.06M.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..layers.stem import PatchEmbed

__all__ = ["ResNetConfig", "ViTConfig", "ResNet", "VisionTransformer", "REFERENCE_MODELS",
           "create_reference_model", "is_reference_model"]


# ----------------------------------------------------------------------------------- ResNet


@dataclass(frozen=True)
class ResNetConfig:
    """A bottleneck ResNet: ``layers`` blocks per stage (ResNet-152: 3, 8, 36, 3), stage widths
    ``width``·2^i (outputs ×4), a k×k stem of stride ``stem_stride`` followed by a 3×3 max-pool of
    stride 2 when ``maxpool`` (ImageNet's; Scaling MLPs Table 4 uses stride 1 and no max-pool at 64×64)."""

    image_size: int = 224
    in_chans: int = 3
    num_classes: int = 1000
    layers: tuple[int, ...] = (3, 8, 36, 3)
    width: int = 64
    stem_kernel: int = 7
    stem_stride: int = 2
    maxpool: bool = True


def _out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class SpatialConv2d(nn.Conv2d):
    """A bias-free k×k convolution with padding k//2 that knows its output side for an input of
    side ``in_size`` (``out_size``), hence its FLOPs per example."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, in_size: int):
        super().__init__(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
        self.out_size = _out(in_size, kernel, stride, kernel // 2)

    def flops_per_example(self) -> int:
        k = self.kernel_size[0] * self.kernel_size[1]
        return 2 * self.out_channels * (self.in_channels // self.groups) * k * self.out_size ** 2


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3 (carrying the stride), 1×1 expand ×4, each with batch norm; ReLU after the
    sum with the shortcut (a 1×1 strided projection when the shape changes)."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, in_size: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = SpatialConv2d(cin, width, 1, 1, in_size), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = SpatialConv2d(width, width, 3, stride, in_size), nn.BatchNorm2d(width)
        out_size = self.conv2.out_size
        self.conv3, self.bn3 = SpatialConv2d(width, cout, 1, 1, out_size), nn.BatchNorm2d(cout)
        self.downsample = (nn.Sequential(SpatialConv2d(cin, cout, 1, stride, in_size), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)
        self.out_size = out_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, cfg: ResNetConfig):
        super().__init__()
        self.config = cfg
        self.stem = SpatialConv2d(cfg.in_chans, cfg.width, cfg.stem_kernel, cfg.stem_stride, cfg.image_size)
        self.bn = nn.BatchNorm2d(cfg.width)
        size = self.stem.out_size
        self.pool = nn.MaxPool2d(3, 2, 1) if cfg.maxpool else nn.Identity()
        size = _out(size, 3, 2, 1) if cfg.maxpool else size
        blocks, cin = [], cfg.width
        for i, n in enumerate(cfg.layers):
            for j in range(n):
                b = Bottleneck(cin, cfg.width * 2 ** i, 2 if (j == 0 and i > 0) else 1, size)
                blocks.append(b)
                cin, size = cfg.width * 2 ** i * Bottleneck.expansion, b.out_size
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, cfg.num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-logit features (N, 2048·width/64): the pooled last stage."""
        x = self.pool(F.relu(self.bn(self.stem(x))))
        return self.blocks(x).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))


# ----------------------------------------------------------------------------------- ViT


@dataclass(frozen=True)
class ViTConfig:
    """A pre-norm ViT with a class token and learned position embeddings: patch ``patch_size``,
    width ``dim``, ``depth`` blocks of ``heads`` heads, MLP width ``mlp_ratio``·dim, layer norms
    with ε = 1e-6 (the ViT paper's and timm's); the head reads the class token after a final
    layer norm."""

    image_size: int = 224
    in_chans: int = 3
    num_classes: int = 1000
    patch_size: int = 16
    dim: int = 768
    depth: int = 12
    heads: int = 12
    mlp_ratio: float = 4.0


class TransformerBlock(nn.Module):
    """x + Attn(LN x), then x + MLP(LN x) on ``tokens`` tokens (Eq. 2–3 of the ViT paper)."""

    def __init__(self, dim: int, heads: int, hidden: int, tokens: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"width {dim} is not divisible by {heads} heads")
        self.heads, self.tokens = heads, tokens
        self.norm1, self.qkv, self.proj = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.norm2, self.fc1, self.fc2 = nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def attention_flops(self) -> int:
        """4 · N² · D: the products QKᵀ and AV of all heads."""
        return 4 * self.tokens ** 2 * self.qkv.in_features

    def flops_per_example(self) -> int:
        linears = (self.qkv, self.proj, self.fc1, self.fc2)
        return 2 * self.tokens * sum(m.in_features * m.out_features for m in linears) + self.attention_flops()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, D)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class VisionTransformer(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.config = cfg
        self.patch_embed = PatchEmbed(cfg.image_size, cfg.patch_size, cfg.in_chans, cfg.dim)
        tokens = self.patch_embed.num_patches + 1
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, cfg.dim))
        hidden = int(round(cfg.mlp_ratio * cfg.dim))
        self.blocks = nn.Sequential(*[TransformerBlock(cfg.dim, cfg.heads, hidden, tokens) for _ in range(cfg.depth)])
        self.norm = nn.LayerNorm(cfg.dim, eps=1e-6)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def attention_flops(self) -> int:
        """FLOPs per example of the attention products (not seen by ``FlopCounterMode`` on a CPU)."""
        return sum(b.attention_flops() for b in self.blocks)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-logit features (N, dim): the class token after the final layer norm."""
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.norm(self.blocks(x))[:, 0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))


# ----------------------------------------------------------------------------------- names

#: name -> its config at ImageNet defaults (override any field by keyword)
REFERENCE_MODELS: dict[str, Any] = {
    "resnet152": ResNetConfig(),
    "vit_base": ViTConfig(),
    "vit_large": ViTConfig(dim=1024, depth=24, heads=16),
}


def is_reference_model(name: str) -> bool:
    return name in REFERENCE_MODELS


def create_reference_model(name: str, **overrides: Any) -> nn.Module:
    """The reference model ``name`` of :data:`REFERENCE_MODELS` with config fields ``overrides``,
    e.g. ``create_reference_model("resnet152", image_size=64, stem_stride=1, maxpool=False)``."""
    if name not in REFERENCE_MODELS:
        raise ValueError(f"unknown reference model {name!r}; known: {', '.join(REFERENCE_MODELS)}")
    cfg = REFERENCE_MODELS[name]
    known = set(cfg.__dataclass_fields__)
    bad = sorted(set(overrides) - known)
    if bad:
        raise ValueError(f"{name} has no setting {', '.join(bad)}; settings: {', '.join(sorted(known))}")
    if "layers" in overrides:
        overrides["layers"] = tuple(overrides["layers"])
    cfg = replace(cfg, **overrides)
    return ResNet(cfg) if isinstance(cfg, ResNetConfig) else VisionTransformer(cfg)
