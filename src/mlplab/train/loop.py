"""The training loop: ``train(cfg) -> results``.

One function runs a whole experiment (airbench's ``train94`` habit): it resolves the device and
precision, loads the data onto the device, builds the model and optimiser, trains with periodic
evaluation and checkpoints, tests, and writes ``<run_dir>/{config.json, metrics.jsonl,
results.json, checkpoint/}``. The same call works single-process and under ``torchrun``.

Host syncs. The training step never reads a device value: the loss, accuracy and a non-finite
flag are accumulated as device tensors and read once per epoch (and, for the progress bar, at
most every 0.5 s on a TTY).

NaN guard (big_vision habit). Each step folds ``isfinite(loss)`` — and, when gradients are
clipped, ``isfinite(grad_norm)``, which the clipping computes anyway — into a device flag, along
with the first bad step number. The flag is read every ``run.nan_check_every`` steps and at the
end of each epoch, and a non-finite value stops the run with the exact step. The trade-off: up to
``nan_check_every − 1`` steps may run after the bad one (their updates are garbage, but the run
stops before the next checkpoint, so no checkpoint is ever written from non-finite weights).
Without clipping a non-finite gradient with a finite loss is caught one step later, when the
poisoned weights make the loss non-finite.

Precision. ``run.precision=auto`` autocasts to bf16 on CUDA (when supported) and on CPUs with
native bf16 (AVX512-BF16 or AMX); elsewhere fp32, because emulated bf16 is slower than fp32 (on
this project's AVX2 EPYC, oneDNN's bf16 linear reaches ~4 GFLOP/s against ~40 at fp32). The loss
is always computed in fp32. MFU is measured against the machine's rate *at the run's precision*.

Threads. On a shared, loaded CPU, ``run.threads=1`` can be several times faster than 2 (OpenMP
threads spin-wait for each other when the other core is busy); measure before choosing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import BadInput, RunFailure
from ..data.table import get_info
from ..models.counting import count_flops, count_params
from ..models.registry import create_model, get_model_entry
from ..utils.cpu import cpu_has_native_bf16
from ..utils.io import atomic_write_json
from ..utils.units import format_count
from . import checkpoint as ckpt
from .accelerator import native_bf16_cuda, set_fp32_matmul_policy
from .backend import compile_model, keep_freed_memory, resolve_compile
from .config import Durations, RunConfig, durations, validate
from .data import RunData, eval_loader, load_run_data, train_loader
from .init import check_pretrained, pretrained_model, with_model_resolution
from .distributed import DistInfo, all_reduce_sum, barrier, cleanup, init_distributed
from .loggers import open_loggers
from .metrics import Progress, matmul_flops_per_s, mfu
from .optim import build_optimizer, lr_at, set_lr
from .rundir import RunExistsError, RunFolder, RunLockedError, open_run_folder, truncate_metrics

__all__ = ["train", "check_run", "evaluate", "weights_digest", "resolve_device", "resolve_precision", "resolve_model_kwargs",
           "NonFiniteError", "RunExistsError", "RunLockedError"]


class NonFiniteError(RunFailure):
    """The loss, the gradients, the weights or the evaluation became NaN/inf, or the loss diverged."""


# ----------------------------------------------------------------------------- resolution

def resolve_device(choice: str, dist: DistInfo | None = None) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("run.device=cuda but CUDA is not available; use run.device=cpu or auto")
        return torch.device("cuda", dist.local_rank if dist is not None else torch.cuda.current_device())
    return torch.device("cpu")


def resolve_precision(choice: str, device: torch.device) -> str:
    """'fp32' or 'bf16'. auto -> bf16 autocast on GPUs with bf16 tensor cores and on CPUs with native
    bf16 matmuls (AVX512-BF16/AMX); fp32 elsewhere, where emulated bf16 is slower than fp32."""
    if choice != "auto":
        return choice
    if device.type == "cuda":  # not V100/T4, where bf16 is emulated (train.accelerator)
        return "bf16" if native_bf16_cuda(device) else "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def resolve_model_kwargs(cfg: RunConfig, info: Any) -> dict[str, Any]:
    """The model overrides with image_size / in_chans / num_classes filled from the dataset,
    or a clear error when given values contradict the data."""
    fields = {f.name for f in dataclasses.fields(get_model_entry(cfg.model.name).config_cls)}
    h, w = info.image_size
    data_vals = {"image_size": h, "in_chans": info.in_chans, "num_classes": info.num_classes}
    kwargs = dict(cfg.model.kwargs)
    if h != w and "image_size" in fields:
        raise ValueError(f"{cfg.data.dataset} images are {h}x{w}; square models need data.image_size=N to resize")
    for k, v in data_vals.items():
        if k not in fields:
            continue
        if k in kwargs and kwargs[k] != v:
            hint = {"image_size": f"set data.image_size={kwargs[k]} to resize the data, or drop model.kwargs.image_size",
                    "in_chans": "drop model.kwargs.in_chans",
                    "num_classes": "drop model.kwargs.num_classes"}[k]
            raise ValueError(f"model.kwargs.{k}={kwargs[k]} does not match dataset {cfg.data.dataset!r} "
                             f"({k}={v}); {hint}")
        kwargs[k] = v
    return kwargs


def _dataset_info(cfg: RunConfig) -> Any:
    """The table's record for ``data.dataset``, with the size ``data.image_size`` resizes to."""
    info = get_info(cfg.data.dataset)  # unknown -> BadInput naming the known ones
    if cfg.data.image_size is not None:
        info = dataclasses.replace(info, image_size=(cfg.data.image_size, cfg.data.image_size))
    return info


def _check_memory(n_params: int, device: torch.device) -> None:
    """Refuse a model whose weights, gradients and optimiser state (16 bytes per fp32 parameter
    with AdamW) cannot fit in the memory available now."""
    need = 16 * n_params
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        try:
            with open("/proc/meminfo") as f:
                free = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))
        except (OSError, StopIteration, ValueError):
            return
    if need > free:
        raise BadInput(f"the model has {format_count(n_params)} parameters, needing about {need / 2**30:.1f} GiB "
                       f"for weights, gradients and optimiser state; {device.type} has {free / 2**30:.1f} GiB "
                       "available. Choose a smaller model (model.kwargs)")


def check_run(cfg: RunConfig, memory: bool = True, dist: DistInfo | None = None) -> RunConfig:
    """Everything about ``cfg`` that can be checked without loading data or writing a file: the
    config's own rules, the dataset's name, the model against the dataset's image size and
    channels, the model's constructor (built on the ``meta`` device: no memory) and whether its
    training state fits in memory (``memory=False`` skips that: another machine will run it); with
    ``model.init_from``, the checkpoint (``train.init.check_pretrained``). Returns the validated
    config; raises ``BadInput`` otherwise.
    ``train`` calls it first; ``mlplab train --print-config`` and ``reproduce --set`` too."""
    cfg = validate(cfg)
    if cfg.model.init_from is not None:  # the checkpoint decides the model (train.init)
        check_pretrained(cfg, get_info(cfg.data.dataset).in_chans)
        return cfg
    info = _dataset_info(cfg)
    if info.image_size == (0, 0):
        return cfg  # image folders: the size is known only once the images are read
    kwargs = resolve_model_kwargs(cfg, info)
    try:
        with torch.device("meta"):
            model = create_model(cfg.model.name, **kwargs)
    except NotImplementedError:
        return cfg  # an op without a meta kernel: the real build (before any write) checks the rest
    if memory:
        _check_memory(sum(p.numel() for p in model.parameters()), resolve_device(cfg.run.device, dist))
    return cfg


def weights_digest(model: nn.Module) -> str:
    """sha256 of the state dict's names and raw bytes: a fingerprint of the exact weights."""
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model: nn.Module, loader, dist: DistInfo, autocast: Callable, hflip: bool = False) -> dict[str, float]:
    """Top-1, top-5 accuracy and mean cross-entropy over every example (all ranks). ``hflip``
    (``augment.test_hflip``): the logits are the mean of the image's and its mirror image's
    (test-time augmentation, for models trained with ``augment.hflip``)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss, top1, top5
    count = 0  # on the host: shapes are known without a sync
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if y.ndim == 2:
            y = y.argmax(-1)
        with autocast():
            logits = model(x).float()
            if hflip:
                logits = (logits + model(x.flip(-1)).float()) / 2
        k = min(5, logits.shape[-1])
        topk = logits.topk(k, dim=-1).indices
        hit = topk == y[:, None]
        sums += torch.stack([F.cross_entropy(logits, y, reduction="sum").double(),
                             hit[:, 0].sum().double(), hit.any(-1).sum().double()])
        count += len(y)
    model.train(was)
    sums = torch.cat([sums, torch.tensor([float(count)], dtype=torch.float64).to(device)])
    all_reduce_sum(sums, dist)
    loss, top1, top5, n = sums.tolist()
    n = max(n, 1.0)
    return {"acc": top1 / n, "top5": top5 / n, "loss": loss / n}


# ----------------------------------------------------------------------------- the loop

def _rng_state(device: torch.device) -> dict[str, Any]:
    st = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        st["cuda"] = torch.cuda.get_rng_state(device)
    return st


def _set_rng_state(st: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(st["torch"])
    if device.type == "cuda" and "cuda" in st:
        torch.cuda.set_rng_state(st["cuda"], device)


def _gather_rng(device: torch.device, dist: DistInfo) -> list[dict[str, Any]]:
    st = _rng_state(device)
    if not dist.enabled:
        return [st]
    out: list[Any] = [None] * dist.world_size
    torch.distributed.all_gather_object(out, st)
    return out


def train(cfg: RunConfig, *, resume: bool = False, overwrite: bool = False,
          on_epoch_end: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Train and test one run; returns the results (also written to ``<run_dir>/results.json``).

    ``resume``: continue the run in ``<out_dir>/<name>`` from its last checkpoint (its config
    must be the same). ``overwrite``: replace an existing run folder. ``on_epoch_end(record)`` is
    called after each epoch's metrics and checkpoint are written (tests use it)."""
    keep_freed_memory()  # no page faults for each step's activations (backend.py)
    # joined first: each rank's GPU is current before the memory check reads one (no context on GPU 0)
    dist = init_distributed("cuda" if cfg.run.device != "cpu" and torch.cuda.is_available() else "cpu")
    try:
        cfg = check_run(cfg, dist=dist)
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        return _train(cfg, dist, resume, overwrite, on_epoch_end)
    finally:
        cleanup(dist)



# ----------------------------------------------------------------------------- the parts of a run

@dataclass
class _Run:
    """Everything the epochs read, built before anything is written to the run folder."""
    cfg: RunConfig
    dist: DistInfo
    device: torch.device
    precision: str
    data: RunData
    model: nn.Module
    optimizer: torch.optim.Optimizer
    dur: Durations
    n_params: int
    fpe: float  # forward FLOPs per example (0 when unknown)
    train_fpe: float = 0.0  # training FLOPs per example, 3 × fpe (nanoGPT's rule); 0 when unknown
    train_model: nn.Module | None = None  # model, wrapped in DDP / torch.compile (after resume)
    compiled: bool = False

    def autocast(self):
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def _prepare(cfg: RunConfig, dist: DistInfo) -> _Run:
    """Device, data, model, durations and optimiser: every check that needs no write happens
    here, so a refused run leaves no folder behind."""
    r = cfg.run
    device = resolve_device(r.device, dist)
    precision = resolve_precision(r.precision, device)
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16() and dist.is_main:
        print("mlplab train: warning: this CPU has no native bf16 (AVX512-BF16/AMX); bf16 matmuls are "
              "emulated and several times slower than fp32", file=sys.stderr)
    if device.type == "cuda":
        set_fp32_matmul_policy()  # fp32 means IEEE fp32 (train.accelerator)
    torch.manual_seed(r.seed)
    data = load_run_data(with_model_resolution(cfg), device)  # a pretrained model's resolution (train.init)
    dur = durations(cfg, len(data.train), dist.world_size)
    model = (create_model(cfg.model.name, **resolve_model_kwargs(cfg, data.info)) if cfg.model.init_from is None
             else pretrained_model(cfg, data.info)).to(device)
    fpe = float(count_flops(model, tuple(data.train.images.shape[1:])))
    optimizer = build_optimizer(model, cfg.optim)  # may freeze the body (linear probe)
    # 3 × forward holds only when the backward runs through every layer: unknown with frozen ones
    every_layer_trains = all(p.requires_grad for p in model.parameters())
    return _Run(cfg, dist, device, precision, data, model, optimizer, dur,
                n_params=count_params(model), fpe=fpe,
                train_fpe=3.0 * fpe if every_layer_trains else 0.0)


@dataclass
class _Progress:
    """Where a run stands; restored from the checkpoint when resuming."""
    epoch: int = 0  # epochs completed
    step: int = 0  # optimiser steps completed
    history: list = field(default_factory=list)
    wall_before: float = 0.0  # seconds spent before this process started
    checkpoint_epoch: int | None = None  # epoch of the last (good) checkpoint written


def _resume(run: _Run, folder: RunFolder) -> _Progress:
    """The run's position: from its checkpoint when continuing, else the start."""
    dist = run.dist
    state = _Progress()
    found = ckpt.find_checkpoint(folder.path) if folder.continuing else None
    if found is not None:
        saved = ckpt.load_checkpoint(found, run.model)
        if len(saved["rng"]) != dist.world_size:
            raise BadInput(f"the checkpoint in {found} was written by {len(saved['rng'])} process(es); "
                           f"resume it with the same number, not {dist.world_size}")
        run.optimizer.load_state_dict(saved["optimizer"])
        state = _Progress(int(saved["epoch"]), int(saved["step"]), list(saved["history"]),
                          float(saved["wall_s"]), int(saved["epoch"]))
        _set_rng_state(saved["rng"][dist.rank], run.device)
    if folder.continuing and dist.is_main:
        truncate_metrics(folder.path, state.epoch)
    barrier(dist)
    return state


def _wrap(run: _Run) -> None:
    """DDP (after resuming: it broadcasts rank 0's weights) and torch.compile when chosen."""
    m: nn.Module = run.model
    if run.dist.enabled:
        # buffers (RP permutations, SW-MLP masks, the layer scale) never change after the start,
        # when DDP's constructor broadcasts them once: no re-broadcast before every forward,
        # unless a BatchNorm's running statistics need it
        running_stats = any(isinstance(mod, nn.modules.batchnorm._BatchNorm) for mod in m.modules())
        m = nn.parallel.DistributedDataParallel(
            m, device_ids=[run.device.index] if run.device.type == "cuda" else None,
            broadcast_buffers=running_stats)
    if resolve_compile(run.cfg.run.compile, run.device, run.precision, run.dur.total_steps):
        m = compile_model(m, run.device)
    run.train_model = m
    run.compiled = m is not run.model and not isinstance(m, nn.parallel.DistributedDataParallel)


class _Guard:
    """NaN and divergence guard (big_vision habit), kept on the device.

    Each step folds two facts into device flags, with the first bad step: the loss (and, when
    gradients are clipped, the gradient norm, which the clipping computes anyway) is finite, and
    the loss is at most ``run.divergence_factor × ln K`` — ln K being the cross-entropy of a
    uniform guess over K classes, where every run starts. The flags are read every
    ``run.nan_check_every`` steps and before every checkpoint; a bad step stops the run naming
    its 1-based step and epoch. Up to ``nan_check_every − 1`` steps may run after the bad one,
    but never past a checkpoint, so no checkpoint is written from a diverged run."""

    NONFINITE, DIVERGED = 2, 1

    def __init__(self, run: _Run, step: int, run_dir: Path):
        self.run, self.run_dir = run, run_dir
        device = run.device
        factor = run.cfg.run.divergence_factor
        self.limit = math.inf if factor is None else factor * math.log(max(run.data.info.num_classes, 2))
        self.code = torch.zeros((), dtype=torch.long, device=device)  # worst problem seen
        self.first = torch.full((), -1, dtype=torch.long, device=device)  # its first step (0-based)
        self.step_t = torch.full((), step, dtype=torch.long, device=device)

    def fold(self, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> None:
        finite = torch.isfinite(loss) if grad_norm is None else torch.isfinite(loss) & torch.isfinite(grad_norm)
        code = torch.where(finite, (loss > self.limit).long() * self.DIVERGED,
                           torch.full_like(self.code, self.NONFINITE))
        self.first = torch.where((code > 0) & (self.code == 0), self.step_t, self.first)
        self.code = torch.maximum(self.code, code)
        self.step_t += 1

    def check(self, checkpoint_epoch: int | None) -> None:
        """Read the flags (one host sync); raise :class:`NonFiniteError` on a bad step."""
        flag = torch.stack([self.code, torch.where(self.first < 0, torch.full_like(self.first, 2**62),
                                                   self.first)])
        if self.run.dist.enabled:
            torch.distributed.all_reduce(flag[:1], op=torch.distributed.ReduceOp.MAX)
            torch.distributed.all_reduce(flag[1:], op=torch.distributed.ReduceOp.MIN)
        code, at = flag.tolist()
        if code:
            what = ("non-finite loss or gradient" if code == self.NONFINITE else
                    f"diverged (training loss above run.divergence_factor x ln K = {self.limit:.4g})")
            where = f"step {at + 1} (epoch {at // self.run.dur.steps_per_epoch + 1})" if at < 2**62 \
                else "a step on another process"
            self.stop(f"{what} at {where}", checkpoint_epoch)

    def stop(self, what: str, checkpoint_epoch: int | None) -> None:
        kept = (f"the last good checkpoint (epoch {checkpoint_epoch}) is {self.run_dir / 'checkpoint'}"
                if checkpoint_epoch is not None else "no checkpoint was written")
        raise NonFiniteError(f"{what} of run {self.run_dir}; {kept}. Lower optim.lr, add optim.grad_clip, "
                             f"or use run.precision=fp32, then start a new run.name")


def _train_epoch(run: _Run, epoch: int, state: _Progress, guard: _Guard, progress: Progress) -> dict[str, Any]:
    """One pass over this rank's shard; returns the epoch's training record (all ranks reduced)."""
    cfg, dur, dist, device = run.cfg, run.dur, run.dist, run.device
    t_epoch = time.perf_counter()
    run.train_model.train()
    params = [p for p in run.model.parameters() if p.requires_grad]
    loader = train_loader(run.data, epoch, dur.batch_per_rank, cfg.run.seed, dist)
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss·n, correct
    seen = 0  # examples this epoch on this rank (host int: no sync)
    steps_this_epoch = min(dur.steps_per_epoch, dur.total_steps - state.step)
    for i, (x, y) in enumerate(loader):
        if i >= steps_this_epoch:
            break
        if x.device != device:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        set_lr(run.optimizer, lr_at(state.step, dur.total_steps, dur.warmup_steps, dur.peak_lr, cfg.schedule))
        with run.autocast():
            logits = run.train_model(x)
        loss = F.cross_entropy(logits.float(), y)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip) if cfg.optim.grad_clip is not None else None
        run.optimizer.step()
        guard.fold(loss.detach(), gnorm)
        labels = y.argmax(-1) if y.ndim == 2 else y
        sums += torch.stack([loss.detach().double() * len(labels), (logits.argmax(-1) == labels).sum().double()])
        seen += len(labels)
        state.step += 1
        if state.step % cfg.run.nan_check_every == 0:
            guard.check(state.checkpoint_epoch)
        if progress.due():  # a TTY only: one sync per 0.5 s to show the running loss
            l_, a_ = sums.tolist()
            progress.update(epoch + 1, dur.total_epochs, i + 1, steps_this_epoch,
                            f"loss {l_ / seen:.4f} acc {a_ / seen:.3f}")
    guard.check(state.checkpoint_epoch)
    all_reduce_sum(sums, dist)
    loss_sum, correct = sums.tolist()
    seen *= dist.world_size  # every rank runs the same number of equal batches
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    train_time = time.perf_counter() - t_epoch
    return {"epoch": epoch + 1, "step": state.step, "lr": run.optimizer.param_groups[0]["lr"],
            "train_loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
            "train_time_s": train_time, "images_per_s": seen / max(train_time, 1e-9)}


def _weights_finite(model: nn.Module) -> bool:
    """Every floating parameter and buffer is finite (one host sync)."""
    flags = [torch.isfinite(t).all() for t in model.state_dict().values() if t.is_floating_point()]
    return bool(torch.stack(flags).all()) if flags else True


def _save_checkpoint(run: _Run, state: _Progress, run_dir: Path, guard: _Guard, t_start: float) -> None:
    """Write the checkpoint of ``state.epoch`` after checking the weights are finite (the guard
    was read at the end of the epoch, and the evaluation's loss checked by the caller)."""
    if not _weights_finite(run.model):
        guard.stop(f"non-finite weights after step {state.step} (epoch {state.epoch})", state.checkpoint_epoch)
    rng = _gather_rng(run.device, run.dist)
    if run.dist.is_main:
        try:
            ckpt.save_checkpoint(run_dir, run.model, {
                "epoch": state.epoch, "step": state.step, "optimizer": run.optimizer.state_dict(), "rng": rng,
                # the loader's order and augmentation are functions of (seed, epoch, rank)
                "loader": {"epoch": state.epoch, "seed": run.cfg.run.seed, "world_size": run.dist.world_size},
                "history": state.history, "wall_s": state.wall_before + time.perf_counter() - t_start,
            })
        except OSError as e:  # a full disk, a quota, a folder gone read-only: the previous checkpoint stands
            kept = (f"the last good checkpoint (epoch {state.checkpoint_epoch}) is kept"
                    if state.checkpoint_epoch is not None else "no earlier checkpoint exists")
            raise RunFailure(f"cannot write the checkpoint of epoch {state.epoch} in {run_dir} "
                             f"({e.strerror or e}); {kept}. Free space, then continue with --resume") from e
    state.checkpoint_epoch = state.epoch
    barrier(run.dist)


def _results(run: _Run, state: _Progress, final: dict[str, float], run_dir: Path, peak: float,
             t_start: float) -> dict[str, Any]:
    """The results dict (``results.json``): final test metrics, speed, cost, provenance."""
    digest = weights_digest(run.model)
    if run.dist.enabled:  # DDP keeps replicas identical; check it once, cheaply
        digests: list[Any] = [None] * run.dist.world_size
        torch.distributed.all_gather_object(digests, digest)
        if len(set(digests)) != 1:
            raise RuntimeError(f"model replicas differ across ranks at the end of training: {digests}")
    history, fpe = state.history, run.fpe
    timed = history[1:] if len(history) > 1 else history
    t_train = sum(h["train_time_s"] for h in timed)
    ips = sum(h["images_per_s"] * h["train_time_s"] for h in timed) / max(t_train, 1e-9)
    results: dict[str, Any] = {
        "test_acc": final["acc"], "test_top5": final["top5"], "test_loss": final["loss"],
        "train_loss": history[-1]["train_loss"] if history else float("nan"),
        "train_acc": history[-1]["train_acc"] if history else float("nan"),
        "epochs": len(history), "steps": state.step, "steps_per_epoch": run.dur.steps_per_epoch,
        "train_examples": len(run.data.train),
        "wall_s": state.wall_before + time.perf_counter() - t_start,
        "epoch_time_s": sum(h["epoch_time_s"] for h in timed) / max(len(timed), 1),
        "images_per_s": ips, "params": run.n_params, "flops_per_example": fpe,
        # masked (SW-MLP) weights counted by their nonzeros: what the comparison tables show
        "effective_params": count_params(run.model, effective=True),
        "flops_per_s": run.train_fpe * ips if run.train_fpe else None,
        "matmul_flops_per_s": peak,
        "mfu": mfu(run.train_fpe * ips, peak, run.dist.world_size) if run.train_fpe else None,
        "precision": run.precision, "compiled": run.compiled, "device": str(run.device),
        "world_size": run.dist.world_size, "threads": torch.get_num_threads(), "loadavg": list(os.getloadavg()),
        "weights_sha256": digest, "run_dir": str(run_dir), "history": history,
    }
    if run.data.val is not None and "val_acc" in history[-1]:
        results.update({k: history[-1][k] for k in ("val_acc", "val_top5", "val_loss")})
    return results


# ----------------------------------------------------------------------------- the loop

def _train(cfg: RunConfig, dist: DistInfo, resume: bool, overwrite: bool,
           on_epoch_end: Callable | None) -> dict[str, Any]:
    t_start = time.perf_counter()
    r = cfg.run
    run = _prepare(cfg, dist)
    dur, data = run.dur, run.data
    with open_run_folder(cfg, dist, resume, overwrite) as folder:
        if folder.finished is not None:
            return folder.finished  # finished already: nothing to do
        run_dir = folder.path
        state = _resume(run, folder)
        _wrap(run)
        peak = matmul_flops_per_s(run.device, torch.bfloat16 if run.precision == "bf16" else torch.float32)
        progress = Progress(r.log if dist.is_main else "none")
        periodic_split, periodic_name = (data.val, "val") if data.val is not None else (data.test, "test")
        if dist.is_main:
            progress.line(f"run {run_dir}: {cfg.model.name} {format_count(run.n_params)} params, "
                          f"{format_count(run.fpe) if run.fpe else '?'}FLOP/example, {len(data.train)} train "
                          f"examples, {dur.total_steps} steps ({dur.steps_per_epoch}/epoch), peak lr {dur.peak_lr:.3g}, {run.device.type} "
                          f"{run.precision}{' compiled' if run.compiled else ' eager'}, {dist.world_size} "
                          f"process(es)" + (f", resumed at epoch {state.epoch}" if folder.continuing else ""))
        guard = _Guard(run, state.step, run_dir)
        with open_loggers(run_dir, cfg, enabled=dist.is_main) as loggers:
            for epoch in range(state.epoch, dur.total_epochs):
                t_epoch = time.perf_counter()
                rec = _train_epoch(run, epoch, state, guard, progress)
                last = epoch + 1 == dur.total_epochs
                if (r.eval_every and (epoch + 1) % r.eval_every == 0) or last:
                    ev = evaluate(run.model, eval_loader(periodic_split, data, dur.eval_batch_per_rank, dist),
                                  dist, run.autocast, cfg.augment.test_hflip)
                    rec.update({f"{periodic_name}_{k}": v for k, v in ev.items()})
                    if not ev["loss"] <= guard.limit:  # NaN, inf or diverged: no checkpoint from these weights
                        guard.stop(f"{periodic_name} loss {ev['loss']:.4g} (non-finite or above run.divergence_factor "
                                   f"x ln K = {guard.limit:.4g}) after step {state.step} (epoch {epoch + 1})",
                                   state.checkpoint_epoch)
                rec["epoch_time_s"] = time.perf_counter() - t_epoch
                if run.train_fpe:
                    rec["flops_per_s"] = run.train_fpe * rec["images_per_s"]
                    rec["mfu"] = mfu(rec["flops_per_s"], peak, dist.world_size)
                state.history.append(rec)
                state.epoch = epoch + 1
                loggers.log(rec, state.step)
                if dist.is_main:
                    shown = {k: v for k, v in rec.items() if k.endswith(("loss", "acc"))}
                    progress.line(f"epoch {epoch + 1}/{dur.total_epochs} step {state.step} " +
                                  " ".join(f"{k} {v:.4f}" for k, v in shown.items()) +
                                  f" {rec['images_per_s']:.0f} img/s {rec['epoch_time_s']:.1f}s" +
                                  (f" mfu {rec['mfu']:.1%}" if "mfu" in rec else ""))
                if (r.checkpoint_every and (epoch + 1) % r.checkpoint_every == 0) or last:
                    _save_checkpoint(run, state, run_dir, guard, t_start)
                if on_epoch_end is not None:
                    on_epoch_end(rec)

            if periodic_name == "test" and state.history and "test_acc" in state.history[-1]:
                final = {k: state.history[-1][f"test_{k}"] for k in ("acc", "top5", "loss")}  # just evaluated
            else:
                final = evaluate(run.model, eval_loader(data.test, data, dur.eval_batch_per_rank, dist), dist,
                                 run.autocast, cfg.augment.test_hflip)
            results = _results(run, state, final, run_dir, peak, t_start)
            if dist.is_main:
                atomic_write_json(run_dir / "results.json", results)
                loggers.finish(results)
                progress.line(f"test acc {final['acc']:.4f} top5 {final['top5']:.4f} loss {final['loss']:.4f} "
                              f"({results['wall_s']:.1f}s) -> {run_dir}")
        barrier(dist)
    return results
