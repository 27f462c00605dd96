"""The model API every registered model shares (docs/DESIGN.md).

A family implements ``forward_features(x, feats=None)`` (recording named intermediate features
into ``feats`` when given) and ``forward_head(h, pre_logits=False)``; this base class builds
``forward`` and ``forward_intermediates`` from them, so CKA and spectra see every model alike.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable

import torch
import torch.nn as nn

__all__ = ["VisionMLP", "VectorMLP"]


class VisionMLP(nn.Module):
    """Base of all mlplab models: images (N, ch, H, W) -> logits (N, num_classes)."""

    head: nn.Module

    def forward_features(self, x: torch.Tensor, feats: dict | None = None) -> torch.Tensor:
        raise NotImplementedError

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pooled features -> logits (``pre_logits``: the features themselves). Families that
        pool (the Mixer averages over tokens) override this and call it after pooling."""
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor) -> tuple[torch.Tensor, "OrderedDict[str, torch.Tensor]"]:
        """Logits and the named features: ``stem``, every residual branch just before its skip
        connection (``blocks.{i}[.token|.channel]``; layer outputs for models without skips), in
        order, and ``pre_logits``."""
        feats: OrderedDict[str, torch.Tensor] = OrderedDict()
        h = self.forward_features(x, feats)
        feats["pre_logits"] = self.forward_head(h, pre_logits=True)
        return self.head(feats["pre_logits"]), feats


class VectorMLP(VisionMLP):
    """The MLPs that act on one vector per image (plain, SW and shallow MLPs): ``embed`` turns
    the images into (N, m), each of :meth:`feature_blocks` maps z to (branch, output) — the
    branch before the skip connection, or the output itself for a block without one — and
    ``norm`` ends the features.

    A family sets ``cfg`` (its config: ``in_chans``, ``image_size``), ``blocks`` and ``norm``,
    and defines ``embed``."""

    cfg: object
    blocks: nn.ModuleList
    norm: nn.Module

    def check_images(self, x: torch.Tensor) -> None:
        """Refuse anything but images (N, in_chans, image_size, image_size) of this model."""
        c = self.cfg
        if x.ndim != 4 or x.shape[1:] != (c.in_chans, c.image_size, c.image_size):
            raise ValueError(f"expected images of shape (N, {c.in_chans}, {c.image_size}, {c.image_size}), "
                             f"got {tuple(x.shape)}; set image_size/in_chans to match the data")

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, ch, H, W), checked, -> (N, m)."""
        raise NotImplementedError

    def feature_blocks(self) -> Iterable[Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]]:
        """z -> (branch, output), in order; ``blocks.{i}`` of the intermediate features."""
        return self.blocks

    def forward_features(self, x: torch.Tensor, feats: dict | None = None) -> torch.Tensor:
        z = self.embed(x)
        if feats is not None:
            feats["stem"] = z
        for i, blk in enumerate(self.feature_blocks()):
            b, z = blk(z)
            if feats is not None:
                feats[f"blocks.{i}"] = b
        return self.norm(z)
