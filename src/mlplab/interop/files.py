"""Reading and writing tensor files: safetensors, NumPy ``.npz`` and PyTorch pickles.

PyTorch files are opened with ``torch.load(weights_only=True)`` only (no arbitrary code runs).
Whatever the container, the result is a flat ``{name: tensor}`` dict: a checkpoint that wraps its
weights (``{"state_dict": ...}``, ``{"model": ...}``) is unwrapped, and the prefixes that
``DistributedDataParallel`` (``module.``) and ``torch.compile`` (``_orig_mod.``) add are dropped.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from ..utils.io import atomic_save, torch_load, torch_load_error

__all__ = ["read_tensors", "write_tensors", "resolve_weights_path", "CHECKPOINT_DIRS"]

#: a run folder's checkpoint folders, the latest first (``mlplab.train.checkpoint`` writes both)
CHECKPOINT_DIRS = ("checkpoint", "checkpoint.prev")

_WRAPPERS = ("state_dict", "model", "model_state_dict", "params", "state_dict_ema")
_PREFIXES = ("module.", "_orig_mod.")


def resolve_weights_path(path: str | os.PathLike) -> Path:
    """``path`` itself, or for a folder its weights file: an mlplab run or checkpoint folder
    (``checkpoint/model.safetensors``, ``model.safetensors``) or a folder with one weights file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist; give the path of a checkpoint file or an mlplab run folder")
    if p.is_file():
        return p
    for cand in (p / "model.safetensors", *(p / d / "model.safetensors" for d in CHECKPOINT_DIRS)):
        if cand.is_file():
            return cand
    files = [f for f in sorted(p.iterdir()) if f.suffix in (".safetensors", ".npz", ".pth", ".pt", ".bin")]
    if len(files) == 1:
        return files[0]
    raise FileNotFoundError(f"{p} is a folder without model.safetensors or checkpoint/model.safetensors "
                            f"and with {len(files)} weight files; give the file itself")


def _strip(names: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in names.items():
        while pre := next((q for q in _PREFIXES if k.startswith(q)), None):  # in any order and nesting
            k = k[len(pre):]
        out[k] = v
    return out


def read_tensors(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``({name: tensor}, metadata)`` of a weights file (metadata: safetensors' header, else {}).

    The container is chosen by the suffix (``.npz``, ``.safetensors``), else sniffed: a
    safetensors header, else a PyTorch file."""
    p = resolve_weights_path(path)
    if p.suffix == ".npz":
        return _read_npz(p), {}
    if p.suffix == ".safetensors" or _looks_like_safetensors(p):
        return _read_safetensors(p)
    return _read_torch(p), {}


def _read_npz(p: Path) -> dict[str, torch.Tensor]:
    try:
        with np.load(p, allow_pickle=False) as z:
            return _strip({k: torch.from_numpy(np.array(z[k])) for k in z.files})
    except (ValueError, OSError) as e:
        raise ValueError(f"{p} is not a readable .npz archive ({e})") from None


def _read_safetensors(p: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    try:
        with safe_open(str(p), framework="pt") as f:
            meta = dict(f.metadata() or {})
            return _strip({k: f.get_tensor(k) for k in f.keys()}), meta
    except Exception as e:  # safetensors raises its own error types
        raise ValueError(f"{p} is not a readable safetensors file ({e})") from None


def _read_torch(p: Path) -> dict[str, torch.Tensor]:
    try:
        obj = torch_load(p)
    except Exception as e:
        raise ValueError(f"{p} is neither safetensors, .npz nor a PyTorch file loadable with weights_only=True "
                         f"({torch_load_error(e)})") from None
    for _ in range(2):  # {"state_dict": {...}}, {"model": {...}, "epoch": ...} or {"model": {"state_dict": ...}}
        if isinstance(obj, dict) and not all(isinstance(v, torch.Tensor) for v in obj.values()):
            obj = next((obj[k] for k in _WRAPPERS if isinstance(obj.get(k), dict)), obj)
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        what = (f"a dict with keys {sorted(map(str, obj))[:5]} and no state dict under "
                f"{', '.join(repr(w) for w in _WRAPPERS)}" if isinstance(obj, dict) and obj
                else f"a {type(obj).__name__}")
        raise ValueError(f"{p} holds {what}, not a dict of tensors (a state dict); "
                         "save model.state_dict() rather than the model object")
    return _strip(dict(obj))


def _looks_like_safetensors(p: Path) -> bool:
    """A safetensors file starts with a little-endian u64 header length followed by '{'."""
    with open(p, "rb") as f:
        head = f.read(8)
    if len(head) < 8:
        return False
    n = int.from_bytes(head, "little")
    if not 2 <= n <= 100_000_000 or n > p.stat().st_size:
        return False
    with open(p, "rb") as f:
        f.seek(8)
        return f.read(1) == b"{"


def write_tensors(path: str | os.PathLike, tensors: dict[str, torch.Tensor],
                  metadata: dict[str, str] | None = None) -> Path:
    """Write ``tensors`` atomically: safetensors for ``.safetensors`` (with ``metadata``), else a
    PyTorch state-dict pickle (``.pth``/``.pt``/``.bin``) loadable with ``weights_only=True``."""
    p = Path(path)
    clean = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    if p.suffix == ".safetensors":
        from safetensors.torch import save_file

        return atomic_save(p, lambda tmp: save_file(clean, tmp, metadata=metadata))
    if p.suffix in (".pth", ".pt", ".bin"):
        return atomic_save(p, lambda tmp: torch.save(clean, tmp))
    raise ValueError(f"cannot write {p}: give a .safetensors, .pth, .pt or .bin file name")
