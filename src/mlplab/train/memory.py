"""What a training run needs in its device's memory, estimated before anything is allocated.

One estimate (:func:`estimate_memory`), asked by every memory check (``runplan.check_memory``):

* **state**: 16 bytes per parameter (fp32 weights, gradients and AdamW's two moments);
* **activations**: the tensors one micro-batch's forward keeps for the backward, counted exactly
  by saved-tensor hooks during a forward on the ``meta`` device (shapes, no memory) at the run's
  precision (bf16: a bf16 model's; autocast keeps a few of them, LayerNorm's inputs, in fp32).
  Mixer-B/16 at 224×224 keeps 55 MiB per image in bf16;
* **augmentation**: the peak of the temporaries the batched augmentation of one micro-batch
  allocates (int64 gather indices, float copies of the batch: from ~12 bytes per uint8 pixel for
  RandomResizedCrop to ~40 for the ImageNet recipe with RandAugment and mixup), counted on the
  ``meta`` device by a dispatch mode that follows each tensor until it is freed; plus the step's
  whole uint8 batch, which the micro-batches are cut from (``data.loader.MicroBatches``).

A micro-batch is ``run.batch_size / (processes × run.accumulate_steps)`` examples: raising
``run.accumulate_steps`` lowers the last two, not the first. The memory available on a GPU counts
PyTorch's cache (memory it holds but no tensor uses) as free (:func:`available_memory`).
"""
from __future__ import annotations

import json
import math
import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["STATE_BYTES_PER_PARAM", "estimate_memory", "activation_bytes", "augment_bytes", "available_memory",
           "DataChecksPass"]

#: Bytes of training state per fp32 parameter: weights, gradients and two AdamW moments.
STATE_BYTES_PER_PARAM = 16

#: examples of the meta-device forwards and augmentations (the counts are per example: linear in it)
_PROBE = 4

_AUGMENT: dict[str, int] = {}


def estimate_memory(n_params: int, *, model: torch.nn.Module | None = None, image_shape: tuple[int, ...] | None = None,
                    augment: Any = None, precision: str = "fp32", batch_per_rank: int = 1,
                    micro_batches: int = 1) -> dict[str, int | None]:
    """Bytes of ``state``, ``activations`` and ``augment`` (see the module docstring) and their
    ``total``, for a run of ``n_params`` parameters; ``model`` (built on the meta device) and
    ``image_shape`` (ch, H, W) add the parts that grow with the micro-batch of
    ``batch_per_rank / micro_batches`` examples. ``activations`` is None where the model cannot
    run on the meta device (the sparse SW-MLP's CSR product)."""
    micro = max(1, batch_per_rank // max(1, micro_batches))
    out: dict[str, int | None] = {"state": STATE_BYTES_PER_PARAM * n_params, "activations": 0, "augment": 0,
                                  "micro_batch": micro}
    if model is not None and image_shape is not None:
        per = activation_bytes(model, image_shape, precision)
        out["activations"] = None if per is None else per * micro
    if image_shape is not None:
        batch_uint8 = batch_per_rank * math.prod(image_shape)
        out["augment"] = batch_uint8 + (augment_bytes(augment, image_shape) * micro if augment is not None else 0)
    out["total"] = sum(v for k, v in out.items() if k != "micro_batch" and v)
    return out


def activation_bytes(model: torch.nn.Module, image_shape: tuple[int, ...], precision: str = "fp32") -> int | None:
    """Bytes the forward of ``model`` (on the meta device) saves for the backward, per example:
    every saved tensor once (views counted by their base), parameters left out (they are state)."""
    known = model.__dict__.setdefault("_saved_bytes_per_example", {})  # kept with the (meta) model it counts
    key = (tuple(image_shape), precision)
    if key not in known:
        known[key] = _saved_per_example(model, image_shape, precision)
    return known[key]


def _saved_per_example(model: torch.nn.Module, image_shape: tuple[int, ...], precision: str) -> int | None:
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    params = {id(p) for p in model.parameters()}
    saved: dict[int, tuple[torch.Tensor, int]] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t
        if id(base) not in params:
            saved[id(base)] = (base, base.numel() * base.element_size())  # the tensor is held: ids stay unique
        return t

    was = model.training
    model.train()
    try:
        with torch.device("meta"):
            probe = model.to(dtype)
            x = torch.empty(_PROBE, *image_shape, dtype=dtype)
        with DataChecksPass(), torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            probe(x)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None  # an op without a meta kernel (a sparse product): not counted
    finally:
        model.train(was)
    return -(-sum(n for _, n in saved.values()) // _PROBE)


class DataChecksPass(TorchFunctionMode):
    """On the meta device a tensor has no values, so the checks a constructor makes on values
    have no kernel there: ``torch.equal`` (PK layers compare index arrays with ``arange`` to
    choose how they compute, and check permutations) answers True, and the truth value of a
    tensor (sparse layers' "index out of range", "duplicate position") answers False: the
    checks pass. The real build, before any file is written, checks the values."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if any(getattr(a, "is_meta", False) for a in args):
            if func in (torch.equal, torch.Tensor.equal):
                return True
            if func is torch.Tensor.__bool__:
                return False
        return func(*args, **(kwargs or {}))


class _LiveBytes(TorchDispatchMode):
    """The peak of the bytes held by the tensors ops return (views and in-place results left out),
    each counted until it is freed."""

    def __init__(self):
        super().__init__()
        self.now = self.peak = 0

    def _freed(self, n: int) -> None:
        self.now -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {id(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and id(t) not in given and t._base is None:
                n = t.numel() * t.element_size()
                self.now += n
                self.peak = max(self.peak, self.now)
                weakref.finalize(t, self._freed, n)
        return out


def augment_bytes(augment: Any, image_shape: tuple[int, ...]) -> int:
    """Peak bytes of the temporaries ``augment`` (a ``data.Augment``) allocates per example of a
    uint8 batch of ``image_shape`` (ch, H, W), its float output included."""
    key = json.dumps([repr(augment), list(image_shape)])
    if key not in _AUGMENT:
        x = torch.empty(_PROBE, *image_shape, dtype=torch.uint8, device="meta")
        y = torch.zeros(_PROBE, dtype=torch.long, device="meta")
        with _LiveBytes() as live:
            out = augment(x, y, torch.Generator().manual_seed(0))
        del out
        _AUGMENT[key] = -(-live.peak // _PROBE)
    return _AUGMENT[key]


def available_memory(device: torch.device) -> int | None:
    """Bytes a run may still allocate on ``device``: on a GPU the driver's free memory plus what
    PyTorch's caching allocator holds without a tensor in it (a sweep's earlier runs leave it
    there); on the CPU ``MemAvailable``; None where unknown."""
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    try:
        with open("/proc/meminfo") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None
