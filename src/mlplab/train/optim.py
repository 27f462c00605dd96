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

from .config import OptimSection, ScheduleSection

__all__ = ["Lion", "param_groups", "build_optimizer", "lr_at", "set_lr"]


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


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: matrices (decayed) and everything else (not decayed)."""
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(model: nn.Module, cfg: OptimSection) -> torch.optim.Optimizer:
    groups = param_groups(model, cfg.weight_decay)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum,
                               nesterov=cfg.nesterov and cfg.momentum > 0)
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
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
    for g in optimizer.param_groups:
        g["lr"] = lr
