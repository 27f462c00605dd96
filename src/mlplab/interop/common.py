"""What every checkpoint format converts to: an mlplab model name, its config overrides and a
state dict in mlplab's names (:class:`Imported`), plus the small checks the importers share."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Imported", "block_indices", "take", "perfect_square", "describe_names"]


@dataclass
class Imported:
    """A checkpoint read into mlplab's terms."""

    model_name: str  # a registered model
    kwargs: dict[str, Any]  # create_model overrides inferred from the tensors
    state: dict[str, torch.Tensor]  # mlplab parameter names -> tensors
    source_format: str
    notes: list[str] = field(default_factory=list)
    pretrained_cfg: dict[str, Any] = field(default_factory=dict)  # input settings the file records


def block_indices(names: set[str] | list[str], pattern: str) -> list[int]:
    """The sorted block numbers ``i`` of names matching ``pattern`` (a regex with one group),
    checked to be 0..L-1 without gaps."""
    rx = re.compile(pattern)
    idx = sorted({int(m.group(1)) for n in names if (m := rx.match(n))})
    if idx != list(range(len(idx))):
        raise ValueError(f"block numbers {idx} are not 0..{len(idx) - 1}: the checkpoint is incomplete")
    return idx


def take(tensors: dict[str, torch.Tensor], name: str, ndim: int, fmt: str) -> torch.Tensor:
    """``tensors.pop(name)``, or a clear error when it is missing or has the wrong rank."""
    if name not in tensors:
        raise ValueError(f"{fmt} checkpoint lacks tensor {name!r}")
    t = tensors.pop(name)
    if t.ndim != ndim:
        raise ValueError(f"{fmt} tensor {name!r} has shape {tuple(t.shape)}, expected {ndim} dimensions")
    return t


def perfect_square(n: int) -> int | None:
    r = math.isqrt(n)
    return r if r * r == n else None


def describe_names(names: list[str] | set[str], k: int = 4) -> str:
    """``"312 tensors named like 'a', 'b', ..."`` for error messages."""
    names = sorted(names)
    shown = ", ".join(repr(n) for n in names[:k])
    return f"{len(names)} tensor(s) named like {shown}{', ...' if len(names) > k else ''}"
