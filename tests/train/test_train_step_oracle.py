"""The training loop outside resume against a loop written here, in float64.

A run with every part of the step switched on — linear warmup from ``warmup_start_lr`` then a
cosine to ``min_lr``, a head with its own lr, weight decay on matrices only, gradient clipping,
micro-batches, an EMA — ends with the weights this file computes by hand from the same initial
weights and the same batches: for each step t the full batch's mean cross-entropy (one batch, not
the micro-batches), its gradient clipped to the global norm, plain SGD with weight decay
w ← w − lr_t·s·(g + λ·w) (λ only for matrices, s = head_lr / lr for the head), and
θ_ema ← D·θ_ema + (1 − D)·w. The lr of every step is checked against the closed form of the
schedule through torch's global optimiser hook.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch.optim.optimizer import register_optimizer_step_pre_hook

from mlplab.train import train
from mlplab.train.config import durations
from mlplab.train.data import load_run_data, train_loader
from mlplab.train.distributed import DistInfo

LR, HEAD_LR, START, MIN, WARM, STEPS, WD, CLIP, EMA = 0.3, 0.6, 0.05, 0.01, 3, 10, 0.05, 1.0, 0.7


def schedule(t: int) -> float:
    """Linear warmup over WARM steps from START, then cosine from LR to MIN at the last step."""
    if t < WARM:
        return START + (LR - START) * t / WARM
    return MIN + (LR - MIN) * (1 + math.cos(math.pi * (t - WARM) / (STEPS - WARM - 1))) / 2


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    """The run, its initial model (captured at its first forward) and every step's group lrs."""
    from train_helpers import tiny_overrides

    from mlplab.train import make_config

    cfg = make_config(None, tiny_overrides(tmp_path_factory.mktemp("step") / "runs", "step", **{
        "model.name": "mlp_mixer", "model.kwargs.zero_head": False,
        "optim.name": "sgd", "optim.momentum": 0.0, "optim.nesterov": False, "optim.lr": LR,
        "optim.head_lr": HEAD_LR, "optim.weight_decay": WD, "optim.grad_clip": CLIP,
        "schedule.epochs": None, "schedule.steps": STEPS, "schedule.warmup_steps": WARM,
        "schedule.warmup_start_lr": START, "schedule.min_lr": MIN, "run.accumulate_steps": 2,
        "run.ema_decay": EMA}))
    initial, lrs = [], []

    def capture(module, args):
        if not initial and hasattr(module, "forward_head") and module.training and \
                next(module.parameters()).device.type != "meta":  # not the memory check's meta build
            initial.append(copy.deepcopy(module))

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(capture),
             register_optimizer_step_pre_hook(
                 lambda opt, args, kwargs: lrs.append([g["lr"] for g in opt.param_groups]))]
    try:
        res = train(cfg)
    finally:
        for h in hooks:
            h.remove()
    return cfg, res, initial[0], lrs


def test_every_step_uses_the_scheduled_lr(recorded_run):
    _, res, _, lrs = recorded_run
    assert res["steps"] == len(lrs) == STEPS
    for t, groups in enumerate(lrs):  # body matrices, body vectors, head matrix, head bias
        assert groups == pytest.approx([schedule(t)] * 2 + [schedule(t) * HEAD_LR / LR] * 2, rel=1e-12)
    assert [h["lr"] for h in res["history"]] == pytest.approx([schedule(7), schedule(9)], rel=1e-12)


def _hand_training(cfg, model):
    """The run's steps in float64: batches from the run's loader, everything else written here."""
    model = copy.deepcopy(model).double().train()
    ema = {k: v.clone() for k, v in model.state_dict().items()}
    data = load_run_data(cfg, torch.device("cpu"))
    dur = durations(cfg, len(data.train))
    head = {id(p) for p in model.head.parameters()}
    t = 0
    for epoch in range(dur.total_epochs):
        for x, y in train_loader(data, epoch, cfg.run.batch_size, cfg.run.seed, DistInfo()):
            if t == STEPS:
                break
            model.zero_grad()
            F.cross_entropy(model(x.double()), y).backward()
            norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters()))
            scale = min(1.0, CLIP / (norm + 1e-6))
            with torch.no_grad():
                for p in model.parameters():
                    lr = schedule(t) * (HEAD_LR / LR if id(p) in head else 1.0)
                    p -= lr * (scale * p.grad + (WD * p if p.ndim >= 2 else 0.0))
                for k, v in model.state_dict().items():
                    ema[k] = EMA * ema[k] + (1 - EMA) * v
            t += 1
    return model.state_dict(), ema


def test_the_runs_weights_and_ema_are_the_hand_written_sgd(recorded_run):
    cfg, res, initial, _ = recorded_run
    want, want_ema = _hand_training(cfg, initial)
    folder = Path(res["run_dir"]) / "checkpoint"
    got, got_ema = load_file(str(folder / "model.safetensors")), load_file(str(folder / "ema.safetensors"))
    moved = max(float((want[k] - initial.state_dict()[k]).abs().max()) for k in want)
    assert moved > 0.05  # the steps changed the weights far beyond the tolerance below
    for k in want:
        torch.testing.assert_close(got[k].double(), want[k], rtol=0, atol=2e-5, msg=k)
        torch.testing.assert_close(got_ema[k].double(), want_ema[k], rtol=0, atol=2e-5, msg=k)
