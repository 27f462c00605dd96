"""The model API every registered model shares (docs/DESIGN.md).

A family implements ``forward_features(x, feats=None)`` (recording named intermediate features
into ``feats`` when given) and ``forward_head(h, pre_logits=False)``; this base class builds
``forward``, ``forward_intermediates`` and timm's ``reset_classifier`` from them, so CKA and
spectra see every model alike.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable, Sequence

import torch
import torch.nn as nn

from .impl import Implementations

__all__ = ["VisionMLP", "VectorMLP", "take_indices"]


def take_indices(indices: int | Sequence[int], num_blocks: int) -> list[int]:
    """timm's block selection: an int n is the last n blocks, a list names blocks (negative
    counts from the end); sorted, each in 0..num_blocks-1, or an error saying what is valid."""
    if isinstance(indices, bool) or not isinstance(indices, (int, list, tuple)):
        raise TypeError(f"indices is an int (the last n blocks) or a list of block indices, not {indices!r}")
    if isinstance(indices, int):
        if not 1 <= indices <= num_blocks:
            raise ValueError(f"indices={indices} asks for the last {indices} blocks of a model with {num_blocks}; "
                             f"use 1..{num_blocks}")
        return list(range(num_blocks - indices, num_blocks))
    bad = [i for i in indices if isinstance(i, bool) or not isinstance(i, int) or not -num_blocks <= i < num_blocks]
    if bad:
        raise ValueError(f"block indices {bad} are out of range for a model with {num_blocks} blocks; use "
                         f"{-num_blocks}..{num_blocks - 1}")
    return sorted({i % num_blocks for i in indices})


class VisionMLP(Implementations, nn.Module):
    """Base of all mlplab models: images (N, ch, H, W) -> logits (N, num_classes); ``model.impl``
    chooses how it computes (:class:`~mlplab.models.impl.Implementations`)."""

    head: nn.Module
    def forward_features(self, x: torch.Tensor, feats: dict | None = None) -> torch.Tensor:
        raise NotImplementedError

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pooled features -> logits (``pre_logits``: the features themselves). Families that
        pool (the Mixer averages over tokens) override this and call it after pooling."""
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor, indices: int | Sequence[int] | None = None
                              ) -> tuple[torch.Tensor, "OrderedDict[str, torch.Tensor]"]:
        """Logits and the named features: ``stem``, every residual branch just before its skip
        connection (``blocks.{i}[.token|.channel]``; layer outputs for models without skips), in
        order, and ``pre_logits``. ``indices`` (as timm's): only the features of the last n
        blocks (an int) or of the listed blocks."""
        feats: OrderedDict[str, torch.Tensor] = OrderedDict()
        h = self.forward_features(x, feats)
        feats["pre_logits"] = self.forward_head(h, pre_logits=True)
        logits = self.head(feats["pre_logits"])
        if indices is None:
            return logits, feats
        block_of = {k: int(k.split(".")[1]) for k in feats if k.startswith("blocks.")}
        chosen = set(take_indices(indices, len(set(block_of.values()))))
        return logits, OrderedDict((k, v) for k, v in feats.items() if block_of.get(k, -1) in chosen)

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new head for ``num_classes`` classes (timm's API; 0: no head, the model returns its
        pooled features). Zero-initialised where the family's config asks for it (``zero_head``)."""
        if global_pool not in (None, "avg"):
            raise ValueError(f"global_pool={global_pool!r}: mlplab's models pool by averaging only ('avg')")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
            raise ValueError(f"num_classes must be an int >= 0, got {num_classes!r}")
        old = self.head
        features = old.in_features if isinstance(old, nn.Linear) else self.num_features
        self.num_features = features
        self.head = nn.Linear(features, num_classes) if num_classes > 0 else nn.Identity()
        if num_classes > 0:
            self.head.to(device=next(self.parameters()).device, dtype=next(self.parameters()).dtype)
        cfg = getattr(self, "config", None) or getattr(self, "cfg", None)
        if num_classes > 0 and getattr(cfg, "zero_head", False):
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
        configs = (getattr(self, "config", None), getattr(self, "cfg", None))
        for c in {id(c): c for c in configs if c is not None}.values():
            if hasattr(c, "num_classes"):
                c.num_classes = num_classes
        if isinstance(getattr(self, "pretrained_cfg", None), dict):
            self.pretrained_cfg["num_classes"] = num_classes


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
