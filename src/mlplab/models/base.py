"""The model API every registered model shares (docs/DESIGN.md).

A family implements ``forward_features(x, feats=None)`` (recording named intermediate features
into ``feats`` when given) and ``forward_head(h, pre_logits=False)``; this base class builds
``forward`` and ``forward_intermediates`` from them, so CKA and spectra see every model alike.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn as nn

__all__ = ["VisionMLP"]


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
