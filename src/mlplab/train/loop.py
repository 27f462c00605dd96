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

Gradient accumulation (``run.accumulate_steps=K``). Each step's batch (``run.batch_size``, the
global batch that the lr and its scaling name) is drawn as one and split into K equal
micro-batches, each augmented when it is reached (``mlplab.data.loader.MicroBatches``: the
augmentation's memory is a micro-batch's; mixup pairs within it), whose mean losses, each
divided by K, are back-propagated in turn (:func:`accumulated_backward`). The summed
gradient is the full batch's mean-loss gradient (the models have no BatchNorm, so a micro-batch's
forward does not depend on the others), and the optimiser steps once. Under DDP the first K − 1
backward passes skip the gradient all-reduce (``no_sync``); the last one reduces the sum.

EMA (``run.ema_decay``): :mod:`mlplab.train.ema`, updated after every optimiser step, saved in the
checkpoint; the final test reports the raw and the averaged model (``test_acc``, ``test_acc_ema``).

Random streams under DDP. The model is built with ``torch.manual_seed(run.seed)`` on every rank, so
initial weights are identical (RP permutations and SW-MLP masks come from their own streams,
derived from the model's ``seed``); then each rank reseeds the global generators with
``derive_seed(run.seed, "rank", rank)`` (:mod:`mlplab.utils.seeds`) for dropout and stochastic
depth, and the loader draws augmentation from ``(run.seed, "augment", epoch, rank)``. Each
rank's generator state is saved in the checkpoint, so a resumed run continues every stream.

Per-step records (``run.log_every_steps``, :class:`~mlplab.train.loggers.StepLog`), the stop on a
cluster's signal with a mid-epoch checkpoint (:mod:`mlplab.train.preemption`) and the figure of the
run's curves (``train_curves.png``, :mod:`mlplab.train.curves`) live in their own modules; the loop
calls them once per step, once per stop and once at the end.

Threads. On a shared, loaded CPU, ``run.threads=1`` can be several times faster than 2 (OpenMP
threads spin-wait for each other when the other core is busy); measure before choosing.
"""
from __future__ import annotations

import contextlib
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
from ..models.counting import count_flops, count_params
from ..utils.cpu import cpu_has_native_bf16, machine_tag
from ..utils.interrupts import library_stop_signals, raise_if_interrupted
from ..utils.io import atomic_write_json
from ..utils.machine import device_sync, run_cpu_seconds
from ..utils.seeds import derive_seed
from ..utils.units import format_count
from . import checkpoint as ckpt
from .accelerator import set_fp32_matmul_policy
from .backend import (
    compile_model,
    describe_implementation,
    dynamo_counts,
    implementation_line,
    keep_freed_memory,
    resolve_compile,
)
from .config import Durations, RunConfig, durations
from .curves import save_curves
from .data import RunData, eval_loader, load_run_data, train_loader
from .distributed import DistInfo, all_reduce_sum, barrier, cleanup, init_distributed
from .ema import WeightEMA
from .loggers import StepLog, open_loggers
from .metrics import MatmulPeak, Progress
from .optim import build_optimizer, lr_at, set_lr
from .preemption import StopSignals, warn_if_cpu_node
from .rundir import RunExistsError, RunFolder, RunLockedError, open_run_folder, truncate_metrics
from .runplan import RunPlan, as_plan, resolve_device, resolve_model_kwargs, resolve_precision

__all__ = ["train", "evaluate", "accumulated_backward", "weights_digest", "RunState", "resolve_device",
           "resolve_precision", "resolve_model_kwargs", "NonFiniteError", "RunExistsError", "RunLockedError"]


class NonFiniteError(RunFailure):
    """The loss, the gradients, the weights or the evaluation became NaN/inf, or the loss diverged."""


def weights_digest(model: nn.Module) -> str:
    """sha256 of the state dict's names and raw bytes: a fingerprint of the exact weights."""
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- evaluation

def evaluate(model: nn.Module, loader, dist: DistInfo, autocast: Callable, hflip: bool = False) -> dict[str, float]:
    """Top-1, top-5 accuracy and mean cross-entropy over every example (all ranks), in eval mode
    and without gradients. ``hflip`` (``augment.test_hflip``): the logits are the mean of the
    image's and its mirror image's (test-time augmentation, for models trained with ``augment.hflip``)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss, top1, top5
    count = 0  # on the host: shapes are known without a sync
    with torch.no_grad():  # not a decorator: mutation testing (mutmut) leaves decorated functions alone
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
    sums = torch.cat([sums, sums.new_tensor([float(count)])])
    all_reduce_sum(sums, dist)
    loss, top1, top5, n = sums.tolist()
    n = max(n, 1.0)
    return {"acc": top1 / n, "top5": top5 / n, "loss": loss / n}


def accumulated_backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor, k: int,
                         autocast: Callable = contextlib.nullcontext,
                         no_sync: Callable | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward of one optimiser step's batch ``(x, y)`` (``y`` class indices or soft
    targets) in ``k`` equal micro-batches; gradients accumulate in ``.grad``. Returns the batch's
    mean loss and its logits, both detached (device tensors: no host sync). ``x`` may be the
    loader's ``MicroBatches`` (``y`` None): its k parts, each augmented when reached.

    With micro-batches of size m = B/k the gradient is Σ_j ∇(1/k)·(1/m)Σ_{i∈j} ℓ_i = ∇(1/B)Σ_i ℓ_i,
    the unsplit batch's, up to float rounding. ``no_sync``: DDP's context manager, entered for the
    first k − 1 backward passes so that only the last one all-reduces the accumulated sum."""
    losses, logits_all = [], []
    parts = zip(x.chunk(k), y.chunk(k)) if y is not None else x
    for j, (xj, yj) in enumerate(parts):
        ctx = no_sync() if no_sync is not None and j < k - 1 else contextlib.nullcontext()
        with ctx:
            with autocast():
                logits = model(xj)
            loss = F.cross_entropy(logits.float(), yj)
            (loss / k if k > 1 else loss).backward()
        losses.append(loss.detach())
        logits_all.append(logits.detach())
    if k == 1:
        return losses[0], logits_all[0]
    return torch.stack(losses).mean(), torch.cat(logits_all)


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


def _gather(obj: Any, dist: DistInfo) -> list[Any]:
    """``obj`` of every rank, in rank order (``[obj]`` single-process)."""
    if not dist.enabled:
        return [obj]
    out: list[Any] = [None] * dist.world_size
    torch.distributed.all_gather_object(out, obj)
    return out


def _gather_rng(device: torch.device, dist: DistInfo) -> list[dict[str, Any]]:
    return _gather(_rng_state(device), dist)


def train(cfg: RunConfig | RunPlan | str, *, resume: bool = False, overwrite: bool = False,
          on_epoch_end: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Train and test one run; returns the results (also written to ``<run_dir>/results.json``).

    ``cfg``: a config, a named config or JSON file (planned here: ``train.runplan``), or the plan
    ``mlplab train`` made. ``resume``: continue the run in ``<out_dir>/<name>`` from its last
    checkpoint (its config must be the same). ``overwrite``: replace an existing run folder. ``on_epoch_end(record)`` is
    called after each epoch's metrics and checkpoint are written (tests use it). Ctrl-C stops the
    run within a step even where Python swallowed it (:mod:`mlplab.utils.interrupts`), unless the
    caller handles SIGINT itself."""
    plan = as_plan(cfg)
    cfg = plan.cfg
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    keep_freed_memory()  # no page faults for each step's activations (backend.py)
    dist = init_distributed("cuda" if cfg.run.device != "cpu" and torch.cuda.is_available() else "cpu")
    try:
        with library_stop_signals():
            results = _train(plan, dist, resume, overwrite, on_epoch_end)
    except BaseException as e:
        cleanup(dist, failed=e)  # frees the DDP wrapper the failed frames hold, then the group
        raise
    cleanup(dist)
    return results



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
    ddp: nn.parallel.DistributedDataParallel | None = None  # the DDP wrapper (its no_sync), when distributed
    compiled: bool = False
    ema: WeightEMA | None = None  # run.ema_decay: the average of the weights
    step_log: StepLog | None = None  # run.log_every_steps (set when the loggers open)
    stop: StopSignals | None = None  # a cluster's stop signal (set when training starts)

    def autocast(self):
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def _load_data(cfg: RunConfig, device: torch.device, dist: DistInfo) -> RunData:
    """The run's data; with ``data.download`` under torchrun rank 0 downloads and extracts first
    while the other ranks wait, then they read what it wrote (no two ranks extract into one folder)."""
    if not (dist.enabled and cfg.data.download):
        return load_run_data(cfg, device)
    if not dist.is_main:
        barrier(dist)
    data = load_run_data(cfg, device)
    if dist.is_main:
        barrier(dist)
    return data


def _prepare(plan: RunPlan, dist: DistInfo, data: RunData | None = None) -> _Run:
    """Data, model, durations and optimiser for the plan: every check that needs no write
    happens here, so a refused run leaves no folder behind. ``data``: the run's data when the
    caller has loaded it already (seeds in lockstep share one copy: train.lockstep)."""
    cfg, r, device, precision = plan.cfg, plan.cfg.run, plan.device, plan.precision
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16() and dist.is_main:
        print("mlplab train: warning: this CPU has no native bf16 (AVX512-BF16/AMX); bf16 matmuls are "
              "emulated and several times slower than fp32", file=sys.stderr)
    warn_if_cpu_node(device, r.device, dist)
    if device.type == "cuda":
        set_fp32_matmul_policy()  # fp32 means IEEE fp32 (train.accelerator)
    torch.manual_seed(r.seed)
    if data is None:
        data = _load_data(plan.data_cfg, device, dist)  # a pretrained model's resolution (train.init)
    plan.check_memory_with(data.info)  # image folders, packs: their sizes are known now
    dur = durations(cfg, len(data.train), dist.world_size)
    model = plan.build_model(data.info).to(device)  # computing as model.impl says (plan.impl)
    fpe = float(count_flops(model, (data.info.in_chans, *data.info.image_size)))  # streamed splits hold no tensor
    optimizer = build_optimizer(model, cfg.optim)  # may freeze the body (linear probe)
    ema = WeightEMA(model, r.ema_decay) if r.ema_decay is not None else None
    # identical weights on every rank above; from here each rank has its own dropout / drop-path stream
    torch.manual_seed(derive_seed(r.seed, "rank", dist.rank))
    # 3 × forward holds only when the backward runs through every layer: unknown with frozen ones
    every_layer_trains = all(p.requires_grad for p in model.parameters())
    return _Run(cfg, dist, device, precision, data, model, optimizer, dur,
                n_params=count_params(model), fpe=fpe,
                train_fpe=3.0 * fpe if every_layer_trains else 0.0, ema=ema)


@dataclass
class RunState:
    """Where a run stands; restored from the checkpoint when resuming."""
    epoch: int = 0  # epochs completed
    step: int = 0  # optimiser steps completed
    history: list = field(default_factory=list)
    wall_before: float = 0.0  # seconds spent before this process started
    checkpoint_epoch: int | None = None  # epoch of the last (good) checkpoint written
    position: int = 0  # steps done of epoch ``epoch`` (> 0: stopped mid-epoch by a signal)
    partial: dict | None = None  # that epoch's running sums so far (this rank's)
    step_log: dict | None = None  # the StepLog's state at the checkpoint (this rank's)


def _resume(run: _Run, folder: RunFolder) -> RunState:
    """The run's position: from its checkpoint when continuing, else the start."""
    dist = run.dist
    state = RunState()
    found = ckpt.find_checkpoint(folder.path) if folder.continuing else None
    if found is not None:
        saved = ckpt.load_checkpoint(found, run.model, run.ema.model if run.ema is not None else None)
        if len(saved["rng"]) != dist.world_size:
            raise BadInput(f"the checkpoint in {found} was written by {len(saved['rng'])} process(es); "
                           f"resume it with the same number, not {dist.world_size}")
        run.optimizer.load_state_dict(saved["optimizer"])
        per_rank = lambda key: saved[key][dist.rank] if key in saved else None  # noqa: E731 (older checkpoints: none)
        state = RunState(int(saved["epoch"]), int(saved["step"]), list(saved["history"]),
                         float(saved["wall_s"]), int(saved["epoch"]), int(saved.get("position", 0)),
                         per_rank("partial"), per_rank("step_log"))
        _set_rng_state(saved["rng"][dist.rank], run.device)
    if folder.continuing and dist.is_main:
        truncate_metrics(folder.path, state.epoch, state.step)
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
        m = run.ddp = nn.parallel.DistributedDataParallel(
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


def _train_epoch(run: _Run, epoch: int, state: RunState, guard: _Guard, progress: Progress) -> dict[str, Any] | None:
    """One pass over this rank's shard, from step ``state.position`` of it (a run stopped
    mid-epoch goes on there); returns the epoch's training record (all ranks reduced), or None
    when a stop signal ended it at a step boundary (``state.position``/``partial`` say where)."""
    cfg, dur, dist, device = run.cfg, run.dur, run.dist, run.device
    t_epoch = time.perf_counter()
    run.train_model.train()
    params = [p for p in run.model.parameters() if p.requires_grad]
    start, partial = state.position, state.partial or {}
    t_before = partial.get("train_time_s", 0.0)  # of this epoch, before a stop signal (resumed mid-epoch)
    loader = train_loader(run.data, epoch, dur.batch_per_rank, cfg.run.seed, dist, start=start,
                          micro_batches=cfg.run.accumulate_steps)
    # the epoch's running sums: loss·n, correct
    sums = partial["sums"].to(device) if partial else torch.zeros(2, dtype=torch.float64, device=device)
    no_sync = run.ddp.no_sync if run.ddp is not None else None
    seen = partial.get("seen", 0)  # examples this epoch on this rank (host int: no sync)
    steps_this_epoch = min(dur.steps_per_epoch, dur.total_steps - (state.step - start))
    for i, (x, y) in enumerate(loader if start < steps_this_epoch else (), start):
        if i >= steps_this_epoch:
            break
        if x.device != device:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        set_lr(run.optimizer, lr_at(state.step, dur.total_steps, dur.warmup_steps, dur.peak_lr, cfg.schedule))
        run.optimizer.zero_grad(set_to_none=True)
        loss, logits = accumulated_backward(run.train_model, x, y, cfg.run.accumulate_steps, run.autocast, no_sync)
        y = x.targets if y is None else y  # augmented one micro-batch at a time (data.loader.MicroBatches)
        gnorm = nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip) if cfg.optim.grad_clip is not None else None
        run.optimizer.step()
        if run.ema is not None:
            run.ema.update()
        guard.fold(loss, gnorm)
        labels = y.argmax(-1) if y.ndim == 2 else y
        batch = torch.stack([loss.double() * len(labels), (logits.argmax(-1) == labels).sum().double()])
        sums += batch
        seen += len(labels)
        state.step += 1
        if state.step % cfg.run.nan_check_every == 0:
            guard.check(state.checkpoint_epoch)
        run.step_log.after_step(state.step, epoch + 1, batch, len(labels))
        if run.stop.requested(state.step):  # preemption: checkpoint here, mid-epoch (train.preemption)
            state.position = i + 1
            state.partial = {"sums": sums.cpu(), "seen": seen, "train_time_s": t_before + time.perf_counter() - t_epoch}
            return None
        raise_if_interrupted()  # Ctrl-C that Python swallowed where it landed (utils.interrupts)
        if progress.due():  # a TTY only: one sync per 0.5 s to show the running loss
            l_, a_ = sums.tolist()
            progress.update(epoch + 1, dur.total_epochs, i + 1, steps_this_epoch,
                            f"loss {l_ / seen:.4f} acc {a_ / seen:.3f}")
    guard.check(state.checkpoint_epoch)
    all_reduce_sum(sums, dist)
    loss_sum, correct = sums.tolist()
    seen *= dist.world_size  # every rank runs the same number of equal batches
    device_sync(device)()  # the epoch's kernels have finished before its time is read
    train_time = t_before + time.perf_counter() - t_epoch
    state.position, state.partial = 0, None
    return {"epoch": epoch + 1, "step": state.step, "lr": run.optimizer.param_groups[0]["lr"],
            "train_loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
            "train_time_s": train_time, "images_per_s": seen / max(train_time, 1e-9)}


def _weights_finite(model: nn.Module) -> bool:
    """Every floating parameter and buffer is finite (one host sync)."""
    flags = [torch.isfinite(t).all() for t in model.state_dict().values() if t.is_floating_point()]
    return bool(torch.stack(flags).all()) if flags else True


def _save_checkpoint(run: _Run, state: RunState, run_dir: Path, guard: _Guard, t_start: float) -> None:
    """Write the checkpoint of ``state.epoch`` after checking the weights are finite (the guard
    was read at the end of the epoch, and the evaluation's loss checked by the caller)."""
    if not _weights_finite(run.model):
        guard.stop(f"non-finite weights after step {state.step} (epoch {state.epoch})", state.checkpoint_epoch)
    rng = _gather_rng(run.device, run.dist)
    # mid-epoch (a stop signal) and with per-step records, each rank's running sums too
    mine = {"partial": state.partial, "step_log": run.step_log.state_dict() if run.step_log is not None else None}
    ranks = _gather(mine, run.dist) if any(v is not None for v in mine.values()) else [mine] * run.dist.world_size
    if run.dist.is_main:
        try:
            ckpt.save_checkpoint(run_dir, run.model, {
                "epoch": state.epoch, "step": state.step, "optimizer": run.optimizer.state_dict(), "rng": rng,
                **{k: [r[k] for r in ranks] for k in mine},
                # the loader's order and augmentation are functions of (seed, epoch, rank); a stop
                # mid-epoch is ``position`` steps into epoch ``epoch`` (0-based)
                "loader": {"epoch": state.epoch, "seed": run.cfg.run.seed, "world_size": run.dist.world_size},
                "position": state.position,
                "history": state.history, "wall_s": state.wall_before + time.perf_counter() - t_start,
            }, ema=run.ema.model if run.ema is not None else None)
        except OSError as e:  # a full disk, a quota, a folder gone read-only: the previous checkpoint stands
            kept = (f"the last good checkpoint (epoch {state.checkpoint_epoch}) is kept"
                    if state.checkpoint_epoch is not None else "no earlier checkpoint exists")
            raise RunFailure(f"cannot write the checkpoint of epoch {state.epoch} in {run_dir} "
                             f"({e.strerror or e}); {kept}. Free space, then continue with --resume") from e
    state.checkpoint_epoch = state.epoch
    barrier(run.dist)


def _results(run: _Run, state: RunState, final: dict[str, float], run_dir: Path, peak: MatmulPeak,
             t_start: float, data: dict[str, Any] | None = None) -> dict[str, Any]:
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
        "train_examples": len(run.data.train), "test_examples": len(run.data.test),
        # the machine, its load and the run's CPU seconds (with one thread: what it costs a quiet core,
        # whatever the neighbours did): the cost model is calibrated from them
        "machine_tag": machine_tag(), "loadavg": list(os.getloadavg()), "cpu_s": run_cpu_seconds(),
        "wall_s": state.wall_before + time.perf_counter() - t_start,
        "epoch_time_s": sum(h["epoch_time_s"] for h in timed) / max(len(timed), 1),
        "images_per_s": ips, "params": run.n_params, "flops_per_example": fpe,
        # masked (SW-MLP) weights counted by their nonzeros: what the comparison tables show
        "effective_params": count_params(run.model, effective=True),
        "flops_per_s": run.train_fpe * ips if run.train_fpe else None,
        "mfu": peak.mfu(run.train_fpe * ips, run.dist.world_size) if run.train_fpe else None,
        "matmul_flops_per_s": peak.rate, "data": data,
        "precision": run.precision, "compiled": run.compiled, "device": str(run.device),
        "dynamo": dynamo_counts() if run.compiled else None,  # graphs, graph breaks, skipped frames
        "implementation": describe_implementation(run.model, run.device, run.precision, run.compiled),
        "world_size": run.dist.world_size, "threads": torch.get_num_threads(),
        "weights_sha256": digest, "run_dir": str(run_dir), "history": history,
    }
    if run.data.val is not None and "val_acc" in history[-1]:
        results.update({k: history[-1][k] for k in ("val_acc", "val_top5", "val_loss")})
    return results


# ----------------------------------------------------------------------------- the loop

def _train(plan: RunPlan, dist: DistInfo, resume: bool, overwrite: bool,
           on_epoch_end: Callable | None) -> dict[str, Any]:
    t_start = time.perf_counter()
    cfg = plan.cfg
    r = cfg.run
    run = _prepare(plan, dist)
    dur, data = run.dur, run.data
    with open_run_folder(cfg, dist, resume, overwrite, dur.total_epochs) as folder:
        if folder.finished is not None:  # finished already: nothing to do (open_run_folder says so)
            return folder.finished
        run_dir = folder.path
        state = _resume(run, folder)
        _wrap(run)
        peak = MatmulPeak(run.device, torch.bfloat16 if run.precision == "bf16" else torch.float32)
        progress = Progress(r.log if dist.is_main else "none")
        tests_periodically = data.val is None  # no validation split: the periodic evaluations are on the test split
        periodic_split, periodic_name = (data.test, "test") if tests_periodically else (data.val, "val")
        if dist.is_main:
            impl_line = implementation_line(describe_implementation(run.model, run.device, run.precision, run.compiled))
            progress.line(f"run {run_dir}: {cfg.model.name} {format_count(run.n_params)} params, "
                          f"{format_count(run.fpe) if run.fpe else '?'}FLOP/example, {len(data.train)} train "
                          f"examples, {dur.total_steps} steps ({dur.steps_per_epoch}/epoch) of batch {r.batch_size}" +
                          (f" ({r.accumulate_steps} accumulated micro-batches per process)"
                           if r.accumulate_steps > 1 else "") +
                          (f", EMA decay {r.ema_decay}" if r.ema_decay is not None else "") +
                          f", peak lr {dur.peak_lr:.3g}, {run.device.type} "
                          f"{impl_line}, {dist.world_size} "
                          f"process(es)" + (f", resumed at epoch {state.epoch}" if folder.continuing else "") +
                          (f" step {state.step}" if state.position else ""))
        guard = _Guard(run, state.step, run_dir)
        run.stop = StopSignals(dist, r.nan_check_every, run.device)
        with open_loggers(run_dir, cfg, enabled=dist.is_main) as loggers, run.stop:
            clock = lambda: state.wall_before + time.perf_counter() - t_start  # noqa: E731 (the run's wall time)
            run.step_log = StepLog(r.log_every_steps, loggers, dist, run.device, run.optimizer, run.train_fpe, peak,
                                   clock)
            run.step_log.load_state_dict(state.step_log)
            for epoch in range(state.epoch, dur.total_epochs):
                t_epoch = time.perf_counter()
                rec = _train_epoch(run, epoch, state, guard, progress)
                if rec is None:  # a stop signal: checkpoint at this step, requeue, stop (train.preemption)
                    guard.check(state.checkpoint_epoch)
                    _save_checkpoint(run, state, run_dir, guard, t_start)
                    run.stop.stop(run_dir, state.step, epoch + 1)
                last = epoch + 1 == dur.total_epochs
                if (r.eval_every and (epoch + 1) % r.eval_every == 0) or last:
                    ev = evaluate(run.model, progress.iterate(eval_loader(periodic_split, data, dur.eval_batch_per_rank,
                                                                          dist), periodic_name),
                                  dist, run.autocast, cfg.augment.test_hflip)
                    rec.update({f"{periodic_name}_{k}": v for k, v in ev.items()})
                    if not ev["loss"] <= guard.limit:  # NaN, inf or diverged: no checkpoint from these weights
                        guard.stop(f"{periodic_name} loss {ev['loss']:.4g} (non-finite or above run.divergence_factor "
                                   f"x ln K = {guard.limit:.4g}) after step {state.step} (epoch {epoch + 1})",
                                   state.checkpoint_epoch)
                rec["epoch_time_s"], rec["time_s"] = time.perf_counter() - t_epoch, clock()
                if run.train_fpe:
                    rec["flops_per_s"] = run.train_fpe * rec["images_per_s"]
                    rec["mfu"] = peak.mfu(rec["flops_per_s"], dist.world_size)
                state.history.append(rec)
                state.epoch = epoch + 1
                loggers.log(rec, state.step)
                if dist.is_main:
                    shown = {k: v for k, v in rec.items() if k.endswith(("loss", "acc"))}
                    progress.line(f"epoch {epoch + 1}/{dur.total_epochs} step {state.step} " +
                                  " ".join(f"{k} {v:.4f}" for k, v in shown.items()) +
                                  f" {rec['images_per_s']:.0f} img/s {rec['epoch_time_s']:.1f}s" +
                                  (f" mfu {rec['mfu']:.1%}" if rec.get("mfu") is not None else ""))
                if (r.checkpoint_every and (epoch + 1) % r.checkpoint_every == 0) or last:
                    _save_checkpoint(run, state, run_dir, guard, t_start)
                if on_epoch_end is not None:
                    on_epoch_end(rec)

            if tests_periodically and state.history and "test_acc" in state.history[-1]:
                final = {k: state.history[-1][f"test_{k}"] for k in ("acc", "top5", "loss")}  # just evaluated
            else:
                final = evaluate(run.model,
                                 progress.iterate(eval_loader(data.test, data, dur.eval_batch_per_rank, dist), "test"),
                                 dist, run.autocast, cfg.augment.test_hflip)
            results = _results(run, state, final, run_dir, peak, t_start, folder.data)
            if run.ema is not None:
                ema = evaluate(run.ema.model, eval_loader(data.test, data, dur.eval_batch_per_rank, dist), dist,
                               run.autocast, cfg.augment.test_hflip)
                results.update({f"test_{k}_ema": v for k, v in ema.items()})
            if dist.is_main:
                atomic_write_json(run_dir / "results.json", results)
                loggers.finish(results)
                save_curves(run_dir)
                progress.line(f"test acc {final['acc']:.4f} top5 {final['top5']:.4f} loss {final['loss']:.4f} " +
                              (f"(EMA: acc {results['test_acc_ema']:.4f} loss {results['test_loss_ema']:.4f}) "
                               if run.ema is not None else "") +
                              f"({results['wall_s']:.1f}s) -> {run_dir}")
        barrier(dist)
    return results
