"""Optimisers (SGD, AdamW, LION) and the learning-rate schedule.

Weight decay is applied to matrices only (parameters with ndim >= 2): biases, LayerNorm scales
and shifts are never decayed (nanoGPT's ``configure_optimizers`` habit).

The schedule is a pure function of the step, so its whole state is the step count: linear
warmup from ``warmup_start_lr`` to the peak ``lr``, then cosine down to ``min_lr`` (or constant).
"""
from __future__ import annotations

import math
from typing import Iterable

import torch
import torch.nn as nn

from ..errors import BadInput
from .config import OptimSection, ScheduleSection

__all__ = ["Lion", "param_groups", "freeze_body", "fused_update", "build_optimizer", "lr_at", "set_lr"]


class Lion(torch.optim.Optimizer):
    """LION (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
    update = sign(β1·m + (1−β1)·g); m ← β2·m + (1−β2)·g; decoupled weight decay lr·λ·θ.
    Every operation is a device op (no host syncs)."""

    def __init__(self, params: Iterable, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0):
        if lr <= 0:
            raise ValueError(f"Lion: lr must be > 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Lion: betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m = state["exp_avg"]
                if wd:
                    p.mul_(1.0 - lr * wd)
                update = m.mul(b1).add_(p.grad, alpha=1.0 - b1).sign_()
                p.add_(update, alpha=-lr)
                m.mul_(b2).add_(p.grad, alpha=1.0 - b2)
        return loss


def param_groups(model: nn.Module, weight_decay: float, head_lr_scale: float = 1.0) -> list[dict]:
    """Matrices (decayed) and everything else (not decayed); with ``head_lr_scale != 1`` each is
    split again into body and classifier head (``model.head``), the head's lr scaled by it
    (Scaling-MLPs' fine-tuning: 0.01 head, 0.001 body). Frozen parameters are left out. Every
    group carries ``lr_scale``, which :func:`set_lr` applies."""
    head = getattr(model, "head", None)
    head_ids = {id(p) for p in head.parameters()} if isinstance(head, nn.Module) and head_lr_scale != 1.0 else set()
    buckets: dict[tuple[bool, bool], list] = {}
    for p in model.parameters():
        if p.requires_grad:
            buckets.setdefault((id(p) in head_ids, p.ndim >= 2), []).append(p)
    order = [(False, True), (False, False), (True, True), (True, False)]  # body first: group 0 logs the base lr
    return [{"params": buckets[key], "weight_decay": weight_decay if key[1] else 0.0,
             "lr_scale": head_lr_scale if key[0] else 1.0} for key in order if key in buckets]


def freeze_body(model: nn.Module) -> None:
    """Linear probe: only the classifier head (``model.head``) keeps receiving gradients."""
    head = getattr(model, "head", None)
    if not isinstance(head, nn.Module) or not any(True for _ in head.parameters()):
        raise BadInput(f"optim.freeze=body needs a model with a classifier head (model.head); "
                         f"{type(model).__name__} has none")
    keep = {id(p) for p in head.parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)


def fused_update(groups: list[dict]) -> dict:
    """``{"fused": True}`` where torch has a fused SGD/AdamW kernel for every parameter (floating
    point, on the CPU or a CUDA device): one kernel per parameter instead of a Python loop of
    element-wise ops: on the CPU 1.03x the S-Mixer S = C = 64 train step and 1.40x fmnist_fast's
    2.3M-parameter MLP step (AdamW, 1 thread; benchmarks/bench_optimizer.py); the same update up
    to float rounding."""
    params = [p for g in groups for p in g["params"]]
    ok = params and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return {"fused": True} if ok else {}


def build_optimizer(model: nn.Module, cfg: OptimSection,
                    stacked: dict[str, torch.Tensor] | None = None) -> torch.optim.Optimizer:
    """The optimiser of ``cfg`` over ``model``'s parameter groups. ``stacked``: several seeds'
    copies of ``model``, each parameter stacked along a new first dimension, by name
    (:mod:`mlplab.train.lockstep`): the groups are ``model``'s, each parameter replaced by its stack."""
    if cfg.freeze == "body":
        freeze_body(model)
    groups = param_groups(model, cfg.weight_decay, (cfg.head_lr / cfg.lr) if cfg.head_lr is not None else 1.0)
    if stacked is not None:
        name = {id(p): n for n, p in model.named_parameters()}
        groups = [{**g, "params": [stacked[name[id(p)]] for p in g["params"]]} for g in groups]
    for g in groups:  # each group starts at its own peak lr (the head's is optim.head_lr), schedule or not
        g["lr"] = cfg.lr * g["lr_scale"]
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum,
                               nesterov=cfg.nesterov and cfg.momentum > 0, **fused_update(groups))
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, **fused_update(groups))
    if cfg.name == "lion":
        return Lion(groups, lr=cfg.lr, betas=tuple(cfg.betas))
    raise ValueError(f"unknown optimiser {cfg.name!r}; valid: sgd, adamw, lion")


def lr_at(step: int, total_steps: int, warmup_steps: int, peak: float, sched: ScheduleSection) -> float:
    """The lr used for optimiser step ``step`` (0-based) of ``total_steps``.

    Warmup: linear from ``warmup_start_lr`` at step 0 to ``peak`` at step ``warmup_steps``.
    Cosine: ``min_lr + (peak − min_lr)·½(1 + cos(π t))`` with t the fraction of the post-warmup
    steps done, reaching ``min_lr`` at the last step."""
    if warmup_steps > 0 and step < warmup_steps:
        return sched.warmup_start_lr + (peak - sched.warmup_start_lr) * step / warmup_steps
    if sched.schedule == "constant":
        return peak
    decay_steps = max(1, total_steps - warmup_steps - 1)
    t = min(1.0, (step - warmup_steps) / decay_steps)
    return sched.min_lr + (peak - sched.min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The scheduled lr on every group, times the group's ``lr_scale`` (the head's, see
    :func:`param_groups`)."""
    for g in optimizer.param_groups:
        g["lr"] = lr * g.get("lr_scale", 1.0)
