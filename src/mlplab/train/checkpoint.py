"""Checkpoints that survive being killed at any instant.

A checkpoint is a folder ``<run>/checkpoint/`` with

* ``model.safetensors`` — the model's full state dict (parameters *and* persistent buffers such as
  RP permutations and SW-MLP masks), tensors only, loadable without pickle;
* ``state.pt`` — optimiser state, epoch/step counters, RNG states and history, in plain types
  (dicts, lists, numbers, tensors), loaded with ``torch.load(weights_only=True)``.

The two files must agree, so a checkpoint is written whole into ``checkpoint.new/`` (each file via
``atomic_save``: temp file in the same folder, fsync, rename), then swapped in:
``checkpoint -> checkpoint.old``, ``checkpoint.new -> checkpoint``, delete ``checkpoint.old``.
A kill between the two renames leaves only ``checkpoint.old``, which :func:`find_checkpoint` then
uses; a kill before them leaves the previous ``checkpoint`` untouched.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file

from ..interop.native import model_metadata
from ..utils.io import atomic_save

__all__ = ["save_checkpoint", "load_checkpoint", "find_checkpoint", "save_weights", "load_weights",
           "MODEL_FILE", "STATE_FILE"]

MODEL_FILE = "model.safetensors"
STATE_FILE = "state.pt"


def save_weights(model: nn.Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> Path:
    """The model's state dict as safetensors (copied to CPU, contiguous, no shared storage). The
    metadata names the model and its config, so ``mlplab.load_pretrained`` rebuilds it from the
    file alone."""
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    meta = {**model_metadata(model), **(metadata or {})}
    return atomic_save(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def load_weights(model: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Load ``save_weights`` output strictly (every key must match)."""
    device = next(iter(model.state_dict().values())).device
    state = load_file(str(path), device=str(device))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match the model: missing keys {missing}, "
                         f"unexpected keys {unexpected}")
    return model


def save_checkpoint(run_dir: str | os.PathLike, model: nn.Module, state: dict[str, Any]) -> Path:
    """Write ``<run_dir>/checkpoint/`` as described in the module docstring."""
    run_dir = Path(run_dir)
    new, cur, old = run_dir / "checkpoint.new", run_dir / "checkpoint", run_dir / "checkpoint.old"
    if new.exists():
        shutil.rmtree(new)  # leftover of a killed write
    new.mkdir(parents=True)
    meta = {"epoch": str(state.get("epoch")), "step": str(state.get("step"))}
    save_weights(model, new / MODEL_FILE, metadata=meta)
    atomic_save(new / STATE_FILE, lambda tmp: torch.save(state, tmp))
    if cur.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(cur, old)
    os.replace(new, cur)
    _fsync_dir(run_dir)
    if old.exists():
        shutil.rmtree(old)
    return cur


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def find_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The complete checkpoint folder of a run, or None."""
    for name in ("checkpoint", "checkpoint.old"):
        d = Path(run_dir) / name
        if (d / MODEL_FILE).is_file() and (d / STATE_FILE).is_file():
            return d
    return None


def load_checkpoint(ckpt_dir: str | os.PathLike, model: nn.Module) -> dict[str, Any]:
    """Load the weights into ``model`` and return the state dict (plain types)."""
    ckpt_dir = Path(ckpt_dir)
    state = torch.load(ckpt_dir / STATE_FILE, map_location="cpu", weights_only=True)
    load_weights(model, ckpt_dir / MODEL_FILE)
    return state
