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
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models.registry import create_model, get_model_entry
from ..utils.io import atomic_write_json
from . import checkpoint as ckpt
from .backend import compile_model, resolve_compile
from .config import RunConfig, config_diff, from_dict, to_dict, validate
from .data import RunData, eval_loader, load_run_data, train_loader
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
    t_start = time.perf_counter()
    r, s = cfg.run, cfg.schedule
    device = resolve_device(r.device, dist)
    precision = resolve_precision(r.precision, device)
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16() and dist.is_main:
        print("mlplab train: warning: this CPU has no native bf16 (AVX512-BF16/AMX); bf16 matmuls are "
              "emulated and several times slower than fp32", file=sys.stderr)
    run_dir = Path(r.out_dir) / r.name
    continuing = _check_run_dir(cfg, run_dir, resume, overwrite)
    barrier(dist)  # every rank has looked before rank 0 writes
    if continuing and (run_dir / "results.json").is_file():
        with open(run_dir / "results.json") as f:
            return json.load(f)  # finished already: nothing to do
    if not continuing and dist.is_main:
        _init_run_dir(cfg, run_dir)
    barrier(dist)

    torch.manual_seed(r.seed)
    data = load_run_data(cfg, device)
    model_kwargs = resolve_model_kwargs(cfg, data.info)
    model = create_model(cfg.model.name, **model_kwargs).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    in_shape = tuple(data.train.images.shape[1:])
    fpe = flops_per_example(model, in_shape)

    if r.batch_size % dist.world_size:
        raise ValueError(f"run.batch_size={r.batch_size} must be divisible by the {dist.world_size} processes")
    bs = r.batch_size // dist.world_size  # per rank
    eval_bs = r.eval_batch_size or min(1024, 4 * r.batch_size)
    eval_bs = max(1, eval_bs // dist.world_size)
    steps_per_epoch = (len(data.train) // dist.world_size) // bs
    if steps_per_epoch < 1:
        raise ValueError(f"the training split has {len(data.train)} examples, fewer than one batch of "
                         f"{r.batch_size}; lower run.batch_size")
    if s.epochs is not None:
        total_steps = max(1, math.ceil(s.epochs * steps_per_epoch))
    elif s.steps is not None:
        total_steps = s.steps
    else:
        total_steps = max(1, math.ceil(s.examples / r.batch_size))
    total_epochs = math.ceil(total_steps / steps_per_epoch)
    warmup = round(s.warmup_epochs * steps_per_epoch) if s.warmup_epochs is not None else (s.warmup_steps or 0)
    warmup = min(warmup, total_steps)

    optimizer = build_optimizer(model, cfg.optim)
    start_epoch, step, history, wall_before = 0, 0, [], 0.0
    if continuing:
        found = ckpt.find_checkpoint(run_dir)
        if found is not None:
            state = ckpt.load_checkpoint(found, model)
            if len(state["rng"]) != dist.world_size:
                raise ValueError(f"the checkpoint in {found} was written by {len(state['rng'])} process(es); "
                                 f"resume it with the same number, not {dist.world_size}")
            optimizer.load_state_dict(state["optimizer"])
            start_epoch, step = int(state["epoch"]), int(state["step"])
            history = list(state["history"])
            wall_before = float(state["wall_s"])
            _set_rng_state(state["rng"][dist.rank], device)
        if dist.is_main:
            _truncate_metrics(run_dir, start_epoch)
    barrier(dist)

    train_model: nn.Module = model
    if dist.enabled:
        train_model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    if resolve_compile(r.compile, device, precision, total_steps):
        train_model = compile_model(train_model, device)
    compiled = train_model is not model and not isinstance(train_model, nn.parallel.DistributedDataParallel)

    use_bf16 = precision == "bf16"

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()

    peak = matmul_flops_per_s(device, torch.bfloat16 if use_bf16 else torch.float32)
    progress = Progress(r.log if dist.is_main else "none")
    writer = MetricsWriter(run_dir, r.tensorboard) if dist.is_main else None
    periodic_split, periodic_name = (data.val, "val") if data.val is not None else (data.test, "test")
    params = [p for p in model.parameters() if p.requires_grad]
    if dist.is_main:
        progress.line(f"run {run_dir}: {cfg.model.name} {format_count(n_params)} params, "
                      f"{format_count(fpe) if fpe else '?'}FLOP/example, {len(data.train)} train examples, "
                      f"{total_steps} steps ({steps_per_epoch}/epoch), {device.type} {precision}"
                      f"{' compiled' if compiled else ' eager'}, "
                      f"{dist.world_size} process(es)" + (f", resumed at epoch {start_epoch}" if continuing else ""))

    bad = torch.zeros((), dtype=torch.bool, device=device)
    first_bad = torch.full((), -1, dtype=torch.long, device=device)
    step_t = torch.full((), step, dtype=torch.long, device=device)

    def check_finite() -> None:
        flag = torch.stack([bad.long(), torch.where(first_bad < 0, torch.full_like(first_bad, 2**62), first_bad)])
        if dist.enabled:
            torch.distributed.all_reduce(flag[:1], op=torch.distributed.ReduceOp.MAX)
            torch.distributed.all_reduce(flag[1:], op=torch.distributed.ReduceOp.MIN)
        b, at = flag.tolist()
        if b:
            where = f"step {at}" if at < 2**62 else "a step on another process"
            raise NonFiniteError(f"non-finite loss or gradient at {where} (epoch {at // steps_per_epoch}) of "
                                 f"run {run_dir}; lower optim.lr, add optim.grad_clip, or use run.precision=fp32. "
                                 f"The last checkpoint (if any) is from before this step.")

    try:
        for epoch in range(start_epoch, total_epochs):
            t_epoch = time.perf_counter()
            train_model.train()
            loader = train_loader(data, epoch, bs, r.seed, dist)
            sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss·n, correct
            seen = 0  # examples this epoch on this rank (host int: no sync)
            steps_this_epoch = min(steps_per_epoch, total_steps - step)
            for i, (x, y) in enumerate(loader):
                if i >= steps_this_epoch:
                    break
                if x.device != device:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                set_lr(optimizer, lr_at(step, total_steps, warmup, cfg.optim.lr, s))
                with autocast():
                    logits = train_model(x)
                loss = F.cross_entropy(logits.float(), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                ok = torch.isfinite(loss)
                if cfg.optim.grad_clip is not None:
                    gnorm = nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
                    ok = ok & torch.isfinite(gnorm)
                optimizer.step()
                first_bad = torch.where(~ok & ~bad, step_t, first_bad)
                bad = bad | ~ok
                labels = y.argmax(-1) if y.ndim == 2 else y
                n = len(labels)
                sums += torch.stack([loss.detach().double() * n, (logits.argmax(-1) == labels).sum().double()])
                seen += n
                step += 1
                step_t += 1
                if step % r.nan_check_every == 0:
                    check_finite()
                if progress.due():  # a TTY only: one sync per 0.5 s to show the running loss
                    l_, a_ = sums.tolist()
                    progress.update(epoch + 1, total_epochs, i + 1, steps_this_epoch,
                                    f"loss {l_ / seen:.4f} acc {a_ / seen:.3f}")
            check_finite()
            all_reduce_sum(sums, dist)
            loss_sum, correct = sums.tolist()
            seen *= dist.world_size  # every rank runs the same number of equal batches
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            train_time = time.perf_counter() - t_epoch
            rec: dict[str, Any] = {
                "epoch": epoch + 1, "step": step, "lr": optimizer.param_groups[0]["lr"],
                "train_loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
                "train_time_s": train_time, "images_per_s": seen / max(train_time, 1e-9),
            }
            last = epoch + 1 == total_epochs
            if (r.eval_every and (epoch + 1) % r.eval_every == 0) or last:
                ev = evaluate(model, eval_loader(periodic_split, data, eval_bs, dist), dist, autocast)
                rec.update({f"{periodic_name}_{k}": v for k, v in ev.items()})
            rec["epoch_time_s"] = time.perf_counter() - t_epoch
            if fpe:
                rec["flops_per_s"] = 3.0 * fpe * rec["images_per_s"]
                rec["mfu"] = rec["flops_per_s"] / peak
            history.append(rec)
            if writer is not None:
                writer.write(rec, step)
            if dist.is_main:
                shown = {k: v for k, v in rec.items() if k.endswith(("loss", "acc"))}
                progress.line(f"epoch {epoch + 1}/{total_epochs} step {step} " +
                              " ".join(f"{k} {v:.4f}" for k, v in shown.items()) +
                              f" {rec['images_per_s']:.0f} img/s {rec['epoch_time_s']:.1f}s" +
                              (f" mfu {rec['mfu']:.1%}" if "mfu" in rec else ""))
            if (r.checkpoint_every and (epoch + 1) % r.checkpoint_every == 0) or last:
                rng = _gather_rng(device, dist)
                if dist.is_main:
                    ckpt.save_checkpoint(run_dir, model, {
                        "epoch": epoch + 1, "step": step, "optimizer": optimizer.state_dict(), "rng": rng,
                        # the loader's order and augmentation are functions of (seed, epoch, rank)
                        "loader": {"epoch": epoch + 1, "seed": r.seed, "world_size": dist.world_size},
                        "history": history, "wall_s": wall_before + time.perf_counter() - t_start,
                    })
                barrier(dist)
            if on_epoch_end is not None:
                on_epoch_end(rec)

        if periodic_name == "test" and history and "test_acc" in history[-1]:
            final = {k: history[-1][f"test_{k}"] for k in ("acc", "top5", "loss")}  # just evaluated
        else:
            final = evaluate(model, eval_loader(data.test, data, eval_bs, dist), dist, autocast)
    finally:
        if writer is not None:
            writer.close()

    digest = weights_digest(model)
    if dist.enabled:  # DDP keeps replicas identical; check it once, cheaply
        digests: list[Any] = [None] * dist.world_size
        torch.distributed.all_gather_object(digests, digest)
        if len(set(digests)) != 1:
            raise RuntimeError(f"model replicas differ across ranks at the end of training: {digests}")
    timed = history[1:] if len(history) > 1 else history
    t_train = sum(h["train_time_s"] for h in timed)
    ips = sum(h["images_per_s"] * h["train_time_s"] for h in timed) / max(t_train, 1e-9)
    results: dict[str, Any] = {
        "test_acc": final["acc"], "test_top5": final["top5"], "test_loss": final["loss"],
        "train_loss": history[-1]["train_loss"] if history else float("nan"),
        "train_acc": history[-1]["train_acc"] if history else float("nan"),
        "epochs": len(history), "steps": step, "steps_per_epoch": steps_per_epoch,
        "train_examples": len(data.train),
        "wall_s": wall_before + time.perf_counter() - t_start,
        "epoch_time_s": sum(h["epoch_time_s"] for h in timed) / max(len(timed), 1),
        "images_per_s": ips, "params": n_params, "flops_per_example": fpe,
        "flops_per_s": 3.0 * fpe * ips if fpe else None,
        "matmul_flops_per_s": peak, "mfu": 3.0 * fpe * ips / peak if fpe else None,
        "precision": precision, "compiled": compiled, "device": str(device), "world_size": dist.world_size,
        "threads": torch.get_num_threads(), "loadavg": list(os.getloadavg()),
        "weights_sha256": digest, "run_dir": str(run_dir), "history": history,
    }
    if data.val is not None and "val_acc" in history[-1]:
        results.update({k: history[-1][k] for k in ("val_acc", "val_top5", "val_loss")})
    if dist.is_main:
        atomic_write_json(run_dir / "results.json", results)
        progress.line(f"test acc {final['acc']:.4f} top5 {final['top5']:.4f} loss {final['loss']:.4f} "
                      f"({results['wall_s']:.1f}s) -> {run_dir}")
    barrier(dist)
    return results
