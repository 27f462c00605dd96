"""Checkpoints that survive being killed at any instant.

A checkpoint is a folder ``<run>/checkpoint/`` with

* ``model.safetensors`` — the model's full state dict (parameters *and* persistent buffers such as
  RP permutations and SW-MLP masks), tensors only, loadable without pickle;
* ``ema.safetensors`` — with ``run.ema_decay``, the average of the weights (``mlplab.train.ema``),
  a model file like ``model.safetensors``;
* ``state.pt`` — optimiser state, epoch/step counters, RNG states and history, in plain types
  (dicts, lists, numbers, tensors), loaded with ``torch.load(weights_only=True)``.

The files must agree, so a checkpoint is written whole into ``checkpoint.new/`` (each file via
``atomic_save``: temp file in the same folder, fsync, rename), then swapped in:
``checkpoint -> checkpoint.prev`` (replacing the one before), ``checkpoint.new -> checkpoint``.
The previous checkpoint is kept apart from the latest: the training loop writes a checkpoint only
from finite, non-diverged weights (``mlplab.train.loop``), and ``checkpoint.prev`` is one more step
back. A kill between the two renames leaves only ``checkpoint.prev``, which
:func:`find_checkpoint` then uses; a kill before them leaves the previous ``checkpoint`` untouched.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..errors import BadInput, RunFailure
from ..interop.files import CHECKPOINT_DIRS
from ..interop.native import model_metadata
from ..models.registry import get_model_entry
from ..utils.io import atomic_save, torch_load, torch_load_error

__all__ = ["save_checkpoint", "load_checkpoint", "find_checkpoint", "save_weights", "load_weights",
           "MODEL_FILE", "EMA_FILE", "STATE_FILE", "CheckpointError"]

MODEL_FILE = "model.safetensors"
EMA_FILE = "ema.safetensors"
STATE_FILE = "state.pt"


#: model config fields that do not change what the weights mean (a checkpoint loads across them);
#: "impl": how a Mixer computed, a model field in the checkpoints of mlplab 0.1.0 (models.impl)
_LOADABLE_ACROSS = frozenset({"seed", "drop_rate", "drop_path_rate", "impl"})


class CheckpointError(RunFailure):
    """A checkpoint file cannot be read (truncated, corrupt, not a checkpoint)."""


def save_weights(model: nn.Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> Path:
    """The model's state dict as safetensors (copied to CPU, contiguous, no shared storage), with
    the model's name, family and config in the metadata."""
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    meta = {**model_metadata(model), **(metadata or {})}
    return atomic_save(path, lambda tmp: save_file(tensors, tmp, metadata=meta))


def _check_compatible(model: nn.Module, path: Path, meta: dict[str, str], shapes: dict[str, tuple]) -> None:
    """Refuse, before touching the model, a checkpoint of another family or configuration, or
    whose tensor names or shapes differ from the model's."""
    mine = model_metadata(model)
    if mine and "mlplab_model" in meta:
        theirs_cfg, my_cfg = json.loads(meta["mlplab_config"]), json.loads(mine["mlplab_config"])
        theirs_family, my_family = (get_model_entry(meta["mlplab_model"]).family,
                                    get_model_entry(mine["mlplab_model"]).family)
        differ = sorted(k for k in set(theirs_cfg) | set(my_cfg)
                        if k not in _LOADABLE_ACROSS and theirs_cfg.get(k) != my_cfg.get(k))
        if theirs_family != my_family or differ:
            detail = ", ".join(f"{k}: checkpoint {theirs_cfg.get(k)!r}, model {my_cfg.get(k)!r}" for k in differ[:4])
            raise BadInput(f"checkpoint {path} holds a {meta['mlplab_model']!r} ({theirs_family}) model, not "
                           f"this {mine['mlplab_model']!r} ({my_family}){': ' + detail if detail else ''}; "
                           "build the model the checkpoint was saved from")
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing, unexpected = sorted(set(expected) - set(shapes)), sorted(set(shapes) - set(expected))
    wrong = [f"{k} {shapes[k]} vs {expected[k]}"
             for k in sorted(set(shapes) & set(expected)) if shapes[k] != expected[k]]
    if missing or unexpected or wrong:
        parts = [f"missing {missing[:5]}" if missing else "", f"unexpected {unexpected[:5]}" if unexpected else "",
                 f"shapes differ (checkpoint vs model): {', '.join(wrong[:5])}" if wrong else ""]
        raise BadInput(f"checkpoint {path} does not match the model: " + "; ".join(p for p in parts if p) +
                       "; build the model with the config the checkpoint was saved from")


def load_weights(model: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Load ``save_weights`` output strictly: names, shapes and the model's family/config are
    checked before the model is touched, so a refused load leaves it unchanged."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = f.metadata() or {}
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except FileNotFoundError:
        raise
    except Exception as e:  # safetensors' own error types: header/size problems of a damaged file
        raise CheckpointError(f"checkpoint file {path} is unreadable ({e}); it is truncated or not a "
                              "safetensors file") from None
    _check_compatible(model, path, meta, shapes)
    device = next(iter(model.state_dict().values())).device
    model.load_state_dict(load_file(str(path), device=str(device)), strict=True)
    return model


def save_checkpoint(run_dir: str | os.PathLike, model: nn.Module, state: dict[str, Any],
                    ema: nn.Module | None = None) -> Path:
    """Write ``<run_dir>/checkpoint/`` as described in the module docstring (``ema``: the averaged
    model, written as ``ema.safetensors``)."""
    run_dir = Path(run_dir)
    new, cur, prev = run_dir / "checkpoint.new", run_dir / "checkpoint", run_dir / "checkpoint.prev"
    if new.exists():
        shutil.rmtree(new)  # leftover of a killed write
    new.mkdir(parents=True)
    meta = {"epoch": str(state.get("epoch")), "step": str(state.get("step"))}
    try:
        save_weights(model, new / MODEL_FILE, metadata=meta)
        if ema is not None:
            save_weights(ema, new / EMA_FILE, metadata=meta)
        atomic_save(new / STATE_FILE, lambda tmp: torch.save(state, tmp))
    except BaseException:  # e.g. a full disk: leave nothing half-written, keep the checkpoints there are
        shutil.rmtree(new, ignore_errors=True)
        raise
    if cur.exists():
        if prev.exists():
            shutil.rmtree(prev)
        os.replace(cur, prev)
    os.replace(new, cur)
    _fsync_dir(run_dir)
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
    for name in CHECKPOINT_DIRS:
        d = Path(run_dir) / name
        if (d / MODEL_FILE).is_file() and (d / STATE_FILE).is_file():
            return d
    return None


def load_checkpoint(ckpt_dir: str | os.PathLike, model: nn.Module, ema: nn.Module | None = None) -> dict[str, Any]:
    """Load the weights into ``model`` (and the average into ``ema``) and return the state dict
    (plain types). A damaged checkpoint is refused naming the file, and where the run keeps an
    earlier complete one in ``checkpoint.prev/`` the message says so (it is not used behind the
    user's back)."""
    ckpt_dir = Path(ckpt_dir)
    if ema is not None and not (ckpt_dir / EMA_FILE).is_file():
        raise CheckpointError(f"checkpoint {ckpt_dir} has no {EMA_FILE} although the run keeps an EMA of its "
                              "weights (run.ema_decay); it was not written by this run's config")
    try:
        return _load_checkpoint(ckpt_dir, model, ema)
    except CheckpointError as e:
        prev = ckpt_dir.parent / CHECKPOINT_DIRS[1]
        if ckpt_dir.name == CHECKPOINT_DIRS[0] and (prev / MODEL_FILE).is_file() and (prev / STATE_FILE).is_file():
            raise CheckpointError(f"{e}. The previous checkpoint is intact: to continue from it, replace "
                                  f"{ckpt_dir} by {prev}") from None
        raise


def _load_checkpoint(ckpt_dir: Path, model: nn.Module, ema: nn.Module | None) -> dict[str, Any]:
    try:
        state = torch_load(ckpt_dir / STATE_FILE)
    except FileNotFoundError:
        raise
    except Exception as e:  # a cut file is a RuntimeError, an EOFError or an OSError (EINVAL) by where it ends
        raise CheckpointError(f"checkpoint file {ckpt_dir / STATE_FILE} is unreadable ({torch_load_error(e)}); "
                              "it is truncated or was not written by mlplab") from None
    load_weights(model, ckpt_dir / MODEL_FILE)
    if ema is not None:
        load_weights(ema, ckpt_dir / EMA_FILE)
    return state
