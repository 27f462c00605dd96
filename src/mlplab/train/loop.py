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
import json
import os
import shutil
import sys
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models.registry import get_model_entry
from ..utils.io import atomic_write_json
from . import checkpoint as ckpt
from .backend import compile_model, resolve_compile
from .config import Durations, RunConfig, config_diff, durations, from_dict, to_dict, validate
from .data import RunData, eval_loader, load_run_data, train_loader
from .init import build_model, with_model_resolution
from .distributed import DistInfo, all_reduce_sum, barrier, cleanup, init_distributed
from .metrics import MetricsWriter, Progress, cpu_has_native_bf16, flops_per_example, format_count, matmul_flops_per_s
from .optim import build_optimizer, lr_at, set_lr

__all__ = ["train", "evaluate", "weights_digest", "resolve_device", "resolve_precision", "resolve_model_kwargs",
           "NonFiniteError", "RunExistsError"]


class NonFiniteError(RuntimeError):
    """The loss or the gradients became NaN/inf."""


class RunExistsError(ValueError):
    """The run folder holds a run that this call must not overwrite."""


# ----------------------------------------------------------------------------- resolution

def resolve_device(choice: str, dist: DistInfo | None = None) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ValueError("run.device=cuda but CUDA is not available; use run.device=cpu or auto")
        return torch.device("cuda", dist.local_rank if dist is not None else torch.cuda.current_device())
    return torch.device("cpu")


def resolve_precision(choice: str, device: torch.device) -> str:
    """'fp32' or 'bf16'. auto -> bf16 autocast on CUDA with bf16 support and on CPUs with native
    bf16 matmuls (AVX512-BF16/AMX); fp32 elsewhere, where emulated bf16 is slower than fp32."""
    if choice != "auto":
        return choice
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
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


def weights_digest(model: nn.Module) -> str:
    """sha256 of the state dict's names and raw bytes: a fingerprint of the exact weights."""
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model: nn.Module, loader, dist: DistInfo, autocast: Callable) -> dict[str, float]:
    """Top-1, top-5 accuracy and mean cross-entropy over every example (all ranks)."""
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
            logits = model(x)
        logits = logits.float()
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


# ----------------------------------------------------------------------------- run folder

def _check_run_dir(cfg: RunConfig, run_dir: Path, resume: bool, overwrite: bool) -> bool:
    """Every rank: may this call use ``run_dir``? Returns whether an existing run is continued."""
    cfg_file = run_dir / "config.json"
    exists = cfg_file.is_file()
    if exists and resume:
        with open(cfg_file) as f:
            saved = from_dict(json.load(f))
        diff = config_diff(saved, cfg)
        if diff:
            lines = "; ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise RunExistsError(f"cannot resume {run_dir}: its config differs ({lines}). Nothing was "
                                 "changed; use the saved config, or a new run.name")
        return True
    if exists and not overwrite:
        state = "a finished run" if (run_dir / "results.json").is_file() else "an unfinished run"
        raise RunExistsError(f"{run_dir} already holds {state}; pass --resume (resume=True) to continue it, "
                             "--overwrite to replace it, or choose another run.name")
    return False


def _init_run_dir(cfg: RunConfig, run_dir: Path) -> None:
    """Rank 0, new runs only: clear what an overwritten run left and write ``config.json``."""
    for name in ("checkpoint", "checkpoint.old", "checkpoint.new", "tb"):
        shutil.rmtree(run_dir / name, ignore_errors=True)
    for name in ("metrics.jsonl", "results.json"):
        (run_dir / name).unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "config.json", to_dict(cfg))


def _truncate_metrics(run_dir: Path, epoch: int) -> None:
    """Drop records of epochs after the checkpoint (a killed run may have logged them)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return
    keep = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the kill
            if rec.get("epoch", 0) <= epoch:
                keep.append(line if line.endswith("\n") else line + "\n")
    from ..utils.io import atomic_write_text

    atomic_write_text(path, "".join(keep))


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
    cfg = validate(cfg)
    assert cfg.run.name is not None, "make_config fills run.name"
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    dist = init_distributed("cuda" if cfg.run.device != "cpu" and torch.cuda.is_available() else "cpu")
    try:
        return _train(cfg, dist, resume, overwrite, on_epoch_end)
    finally:
        cleanup(dist)


def _train(cfg: RunConfig, dist: DistInfo, resume: bool, overwrite: bool,
           on_epoch_end: Callable | None) -> dict[str, Any]:
    """The run, top to bottom: folder, setup, epochs, final test, results."""
    t_start = time.perf_counter()
    device = resolve_device(cfg.run.device, dist)
    run_dir = Path(cfg.run.out_dir) / cfg.run.name
    continuing = _open_run_folder(cfg, run_dir, resume, overwrite, dist)
    if continuing and (run_dir / "results.json").is_file():
        with open(run_dir / "results.json") as f:
            return json.load(f)  # finished already: nothing to do
    run = _setup(cfg, dist, device, run_dir)
    state = _restore(run) if continuing else TrainState()
    if dist.is_main:  # after the restore, which may rewrite metrics.jsonl
        run.writer = MetricsWriter(run_dir, cfg.run.tensorboard)
    run.announce(state.epoch if continuing else None)
    guard = FiniteGuard(run, state.step)
    try:
        for epoch in range(state.epoch, run.dur.total_epochs):
            rec = _train_epoch(run, state, epoch, guard)
            _end_epoch(run, state, epoch, rec, t_start)
            if on_epoch_end is not None:
                on_epoch_end(rec)
        final = _final_test(run, state)
    finally:
        if run.writer is not None:
            run.writer.close()
    return _write_results(run, state, final, t_start)


# ----------------------------------------------------------------------------- setup

@dataclass
class TrainState:
    """Where a run is; what a checkpoint restores (with the weights, optimiser and RNG)."""

    epoch: int = 0  # epochs completed
    step: int = 0  # optimiser steps completed
    history: list = dataclasses.field(default_factory=list)  # one record per completed epoch
    wall_before: float = 0.0  # wall seconds spent before this process (resumed runs)


@dataclass
class _Run:
    """What the epochs of one run share, built once by :func:`_setup`."""

    cfg: RunConfig
    dist: DistInfo
    device: torch.device
    precision: str
    run_dir: Path
    data: RunData
    model: nn.Module  # the bare model (evaluated, checkpointed)
    train_model: nn.Module  # the model the steps run through (maybe DDP / compiled)
    compiled: bool
    optimizer: torch.optim.Optimizer
    dur: Durations
    n_params: int
    fpe: float  # forward FLOPs per example
    peak: float  # measured matmul FLOP/s at the run's precision
    progress: Progress
    writer: MetricsWriter | None = None  # rank 0, opened once the folder is restored

    def autocast(self):
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @property
    def periodic(self) -> tuple[Any, str]:
        """The split evaluated after epochs: val when held out, else test."""
        return (self.data.val, "val") if self.data.val is not None else (self.data.test, "test")

    def announce(self, resumed_at: int | None) -> None:
        if not self.dist.is_main:
            return
        d = self.dur
        self.progress.line(
            f"run {self.run_dir}: {self.cfg.model.name} {format_count(self.n_params)} params, "
            f"{format_count(self.fpe) if self.fpe else '?'}FLOP/example, {len(self.data.train)} train examples, "
            f"{d.total_steps} steps ({d.steps_per_epoch}/epoch), {self.device.type} {self.precision}"
            f"{' compiled' if self.compiled else ' eager'}, {self.dist.world_size} process(es)"
            + (f", resumed at epoch {resumed_at}" if resumed_at is not None else ""))


def _open_run_folder(cfg: RunConfig, run_dir: Path, resume: bool, overwrite: bool, dist: DistInfo) -> bool:
    """Check (every rank) and, for a new run, initialise (rank 0) the run folder; returns whether
    an existing run is continued."""
    continuing = _check_run_dir(cfg, run_dir, resume, overwrite)
    barrier(dist)  # every rank has looked before rank 0 writes
    if not continuing and dist.is_main:
        _init_run_dir(cfg, run_dir)
    barrier(dist)
    return continuing


def _setup(cfg: RunConfig, dist: DistInfo, device: torch.device, run_dir: Path) -> _Run:
    """Data on the device, the model, its optimiser, the durations and the loggers."""
    r = cfg.run
    precision = resolve_precision(r.precision, device)
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16() and dist.is_main:
        print("mlplab train: warning: this CPU has no native bf16 (AVX512-BF16/AMX); bf16 matmuls are "
              "emulated and several times slower than fp32", file=sys.stderr)
    torch.manual_seed(r.seed)
    data = load_run_data(with_model_resolution(cfg), device)  # a pretrained model's resolution (train.init)
    model = build_model(cfg, data.info).to(device)
    dur = durations(cfg, len(data.train), dist.world_size)
    train_model: nn.Module = model
    if dist.enabled:
        train_model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    if resolve_compile(r.compile, device, precision, dur.total_steps):
        train_model = compile_model(train_model, device)
    compiled = train_model is not model and not isinstance(train_model, nn.parallel.DistributedDataParallel)
    return _Run(
        cfg=cfg, dist=dist, device=device, precision=precision, run_dir=run_dir, data=data, model=model,
        train_model=train_model, compiled=compiled, optimizer=build_optimizer(model, cfg.optim), dur=dur,
        n_params=sum(p.numel() for p in model.parameters()),
        fpe=flops_per_example(model, tuple(data.train.images.shape[1:])),
        peak=matmul_flops_per_s(device, torch.bfloat16 if precision == "bf16" else torch.float32),
        progress=Progress(r.log if dist.is_main else "none"))


def _restore(run: _Run) -> TrainState:
    """Continue from the run folder's checkpoint (if one was written) and drop metrics logged
    after it."""
    state = TrainState()
    found = ckpt.find_checkpoint(run.run_dir)
    if found is not None:
        saved = ckpt.load_checkpoint(found, run.model)
        if len(saved["rng"]) != run.dist.world_size:
            raise ValueError(f"the checkpoint in {found} was written by {len(saved['rng'])} process(es); "
                             f"resume it with the same number, not {run.dist.world_size}")
        run.optimizer.load_state_dict(saved["optimizer"])
        state = TrainState(epoch=int(saved["epoch"]), step=int(saved["step"]), history=list(saved["history"]),
                           wall_before=float(saved["wall_s"]))
        _set_rng_state(saved["rng"][run.dist.rank], run.device)
    if run.dist.is_main:
        _truncate_metrics(run.run_dir, state.epoch)
    barrier(run.dist)
    return state


# ----------------------------------------------------------------------------- one epoch

class FiniteGuard:
    """The NaN guard (see the module docstring): steps fold their finiteness into device flags;
    :meth:`check` reads them (one host sync) and raises naming the first bad step."""

    def __init__(self, run: _Run, step: int):
        self.run = run
        self.bad = torch.zeros((), dtype=torch.bool, device=run.device)
        self.first_bad = torch.full((), -1, dtype=torch.long, device=run.device)
        self.step_t = torch.full((), step, dtype=torch.long, device=run.device)

    def observe(self, ok: torch.Tensor) -> None:
        """Record one step's finiteness (no sync) and advance the step counter."""
        self.first_bad = torch.where(~ok & ~self.bad, self.step_t, self.first_bad)
        self.bad = self.bad | ~ok
        self.step_t += 1

    def check(self) -> None:
        never = torch.full_like(self.first_bad, 2**62)
        flag = torch.stack([self.bad.long(), torch.where(self.first_bad < 0, never, self.first_bad)])
        if self.run.dist.enabled:
            torch.distributed.all_reduce(flag[:1], op=torch.distributed.ReduceOp.MAX)
            torch.distributed.all_reduce(flag[1:], op=torch.distributed.ReduceOp.MIN)
        b, at = flag.tolist()
        if b:
            where = f"step {at}" if at < 2**62 else "a step on another process"
            raise NonFiniteError(f"non-finite loss or gradient at {where} (epoch {at // self.run.dur.steps_per_epoch}) "
                                 f"of run {self.run.run_dir}; lower optim.lr, add optim.grad_clip, or use "
                                 "run.precision=fp32. The last checkpoint (if any) is from before this step.")


def _train_epoch(run: _Run, state: TrainState, epoch: int, guard: FiniteGuard) -> dict[str, Any]:
    """One pass of optimiser steps (a partial one at the end of a step-counted run); returns the
    epoch's training record. Reads device values only every ``run.nan_check_every`` steps."""
    cfg, dist, dur = run.cfg, run.dist, run.dur
    t_epoch = time.perf_counter()
    run.train_model.train()
    loader = train_loader(run.data, epoch, dur.batch_per_rank, cfg.run.seed, dist)
    params = [p for p in run.model.parameters() if p.requires_grad]
    sums = torch.zeros(2, dtype=torch.float64, device=run.device)  # loss·n, correct
    seen = 0  # examples this epoch on this rank (host int: no sync)
    steps_this_epoch = min(dur.steps_per_epoch, dur.total_steps - state.step)
    for i, (x, y) in enumerate(loader):
        if i >= steps_this_epoch:
            break
        if x.device != run.device:
            x, y = x.to(run.device, non_blocking=True), y.to(run.device, non_blocking=True)
        set_lr(run.optimizer, lr_at(state.step, dur.total_steps, dur.warmup_steps, cfg.optim.lr, cfg.schedule))
        with run.autocast():
            logits = run.train_model(x)
        loss = F.cross_entropy(logits.float(), y)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        ok = torch.isfinite(loss)
        if cfg.optim.grad_clip is not None:
            ok = ok & torch.isfinite(nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip))
        run.optimizer.step()
        guard.observe(ok)
        labels = y.argmax(-1) if y.ndim == 2 else y
        n = len(labels)
        sums += torch.stack([loss.detach().double() * n, (logits.argmax(-1) == labels).sum().double()])
        seen += n
        state.step += 1
        if state.step % cfg.run.nan_check_every == 0:
            guard.check()
        if run.progress.due():  # a TTY only: one sync per 0.5 s to show the running loss
            l_, a_ = sums.tolist()
            run.progress.update(epoch + 1, dur.total_epochs, i + 1, steps_this_epoch,
                                f"loss {l_ / seen:.4f} acc {a_ / seen:.3f}")
    guard.check()
    all_reduce_sum(sums, dist)
    loss_sum, correct = sums.tolist()
    seen *= dist.world_size  # every rank runs the same number of equal batches
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    train_time = time.perf_counter() - t_epoch
    return {"epoch": epoch + 1, "step": state.step, "lr": run.optimizer.param_groups[0]["lr"],
            "train_loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
            "train_time_s": train_time, "images_per_s": seen / max(train_time, 1e-9),
            "_t_epoch": t_epoch}


def _end_epoch(run: _Run, state: TrainState, epoch: int, rec: dict[str, Any], t_start: float) -> None:
    """After an epoch's steps: evaluate (when due), log, checkpoint (when due)."""
    r = run.cfg.run
    t_epoch = rec.pop("_t_epoch")
    last = epoch + 1 == run.dur.total_epochs
    if (r.eval_every and (epoch + 1) % r.eval_every == 0) or last:
        split, name = run.periodic
        ev = evaluate(run.model, eval_loader(split, run.data, run.dur.eval_batch_per_rank, run.dist), run.dist,
                      run.autocast)
        rec.update({f"{name}_{k}": v for k, v in ev.items()})
    rec["epoch_time_s"] = time.perf_counter() - t_epoch
    if run.fpe:
        rec["flops_per_s"] = 3.0 * run.fpe * rec["images_per_s"]
        rec["mfu"] = rec["flops_per_s"] / run.peak
    state.history.append(rec)
    state.epoch = epoch + 1
    if run.writer is not None:
        run.writer.write(rec, state.step)
    if run.dist.is_main:
        shown = {k: v for k, v in rec.items() if k.endswith(("loss", "acc"))}
        run.progress.line(f"epoch {epoch + 1}/{run.dur.total_epochs} step {state.step} "
                          + " ".join(f"{k} {v:.4f}" for k, v in shown.items())
                          + f" {rec['images_per_s']:.0f} img/s {rec['epoch_time_s']:.1f}s"
                          + (f" mfu {rec['mfu']:.1%}" if "mfu" in rec else ""))
    if (r.checkpoint_every and (epoch + 1) % r.checkpoint_every == 0) or last:
        _save(run, state, t_start)


def _save(run: _Run, state: TrainState, t_start: float) -> None:
    rng = _gather_rng(run.device, run.dist)
    if run.dist.is_main:
        ckpt.save_checkpoint(run.run_dir, run.model, {
            "epoch": state.epoch, "step": state.step, "optimizer": run.optimizer.state_dict(), "rng": rng,
            # the loader's order and augmentation are functions of (seed, epoch, rank)
            "loader": {"epoch": state.epoch, "seed": run.cfg.run.seed, "world_size": run.dist.world_size},
            "history": state.history, "wall_s": state.wall_before + time.perf_counter() - t_start,
        })
    barrier(run.dist)


# ----------------------------------------------------------------------------- the end

def _final_test(run: _Run, state: TrainState) -> dict[str, float]:
    """The test metrics: those of the last epoch when it evaluated the test split, else a test now."""
    _, name = run.periodic
    if name == "test" and state.history and "test_acc" in state.history[-1]:
        return {k: state.history[-1][f"test_{k}"] for k in ("acc", "top5", "loss")}  # just evaluated
    return evaluate(run.model, eval_loader(run.data.test, run.data, run.dur.eval_batch_per_rank, run.dist),
                    run.dist, run.autocast)


def _write_results(run: _Run, state: TrainState, final: dict[str, float], t_start: float) -> dict[str, Any]:
    """Check the replicas agree, summarise the run and write ``results.json`` (rank 0)."""
    dist, history = run.dist, state.history
    digest = weights_digest(run.model)
    if dist.enabled:  # DDP keeps replicas identical; check it once, cheaply
        digests: list[Any] = [None] * dist.world_size
        torch.distributed.all_gather_object(digests, digest)
        if len(set(digests)) != 1:
            raise RuntimeError(f"model replicas differ across ranks at the end of training: {digests}")
    timed = history[1:] if len(history) > 1 else history
    t_train = sum(h["train_time_s"] for h in timed)
    ips = sum(h["images_per_s"] * h["train_time_s"] for h in timed) / max(t_train, 1e-9)
    fpe, peak = run.fpe, run.peak
    results: dict[str, Any] = {
        "test_acc": final["acc"], "test_top5": final["top5"], "test_loss": final["loss"],
        "train_loss": history[-1]["train_loss"] if history else float("nan"),
        "train_acc": history[-1]["train_acc"] if history else float("nan"),
        "epochs": len(history), "steps": state.step, "steps_per_epoch": run.dur.steps_per_epoch,
        "train_examples": len(run.data.train),
        "wall_s": state.wall_before + time.perf_counter() - t_start,
        "epoch_time_s": sum(h["epoch_time_s"] for h in timed) / max(len(timed), 1),
        "images_per_s": ips, "params": run.n_params, "flops_per_example": fpe,
        "flops_per_s": 3.0 * fpe * ips if fpe else None,
        "matmul_flops_per_s": peak, "mfu": 3.0 * fpe * ips / peak if fpe else None,
        "precision": run.precision, "compiled": run.compiled, "device": str(run.device),
        "world_size": dist.world_size, "threads": torch.get_num_threads(), "loadavg": list(os.getloadavg()),
        "weights_sha256": digest, "run_dir": str(run.run_dir), "history": history,
    }
    if run.data.val is not None and "val_acc" in history[-1]:
        results.update({k: history[-1][k] for k in ("val_acc", "val_top5", "val_loss")})
    if dist.is_main:
        atomic_write_json(run.run_dir / "results.json", results)
        run.progress.line(f"test acc {final['acc']:.4f} top5 {final['top5']:.4f} loss {final['loss']:.4f} "
                          f"({results['wall_s']:.1f}s) -> {run.run_dir}")
    barrier(dist)
    return results
