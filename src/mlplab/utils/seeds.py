"""Derived random streams: every generator in mlplab is seeded by hashing a key such as
``(seed, "rp", block, sub)`` — the run's seed, a name saying what the stream is for, and the
integers that tell one stream of that kind from another. Hashing, not arithmetic, keeps streams
independent: ``seed * K + i`` collides across seeds and purposes.
"""
from __future__ import annotations

import hashlib
import json

import torch

__all__ = ["derive_seed", "derive_generator"]


def derive_seed(*key: int | str) -> int:
    """A 63-bit seed hashed from ``key`` (integers of any size or sign, and purpose names)."""
    text = json.dumps([k if isinstance(k, str) else int(k) for k in key])  # unambiguous, unlike concatenation
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def derive_generator(*key: int | str, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator on ``device`` seeded with ``derive_seed(*key)``."""
    return torch.Generator(device=device).manual_seed(derive_seed(*key))
