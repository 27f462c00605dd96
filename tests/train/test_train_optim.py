"""Optimisers and the lr schedule: decay only on matrices, warmup/cosine/floor, LION's update."""
import math

import pytest
import torch
import torch.nn as nn

from mlplab.train.config import OptimSection, ScheduleSection
from mlplab.train.optim import Lion, build_optimizer, fused_update, lr_at, param_groups


def _model():
    return nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))


def test_weight_decay_only_on_matrices():
    m = _model()
    groups = param_groups(m, 0.1)
    decayed = {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    for name, p in m.named_parameters():
        assert (id(p) in decayed) == (p.ndim >= 2), name


@pytest.mark.parametrize("name", ["sgd", "adamw", "lion"])
def test_optimisers_step_and_keep_vectors_undecayed(name):
    torch.manual_seed(0)
    m = _model()
    opt = build_optimizer(m, OptimSection(name=name, lr=0.1, weight_decay=0.5))
    ln_before = m[1].weight.detach().clone()
    for p in m.parameters():
        p.grad = torch.zeros_like(p)  # zero gradient: only weight decay can move a parameter
    opt.step()
    assert torch.equal(m[1].weight, ln_before)  # LayerNorm scale: no decay
    if name == "sgd":
        assert isinstance(opt, torch.optim.SGD) and opt.defaults["nesterov"]
    if name == "adamw":
        assert isinstance(opt, torch.optim.AdamW)


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_fused_updates_equal_the_loop(name):
    """build_optimizer takes torch's fused kernels on the CPU; 20 steps of them match torch's
    per-parameter loop to float32 rounding."""
    models = []
    for fused in (True, False):
        torch.manual_seed(0)
        m = _model()
        opt = build_optimizer(m, OptimSection(name=name, lr=0.05, weight_decay=0.1))
        assert all(g["fused"] for g in opt.param_groups)
        if not fused:  # torch's default on the CPU
            for group in opt.param_groups:
                group["fused"], group["foreach"] = None, False
        g = torch.Generator().manual_seed(1)
        for _ in range(20):
            opt.zero_grad()
            m(torch.randn(16, 4, generator=g)).pow(2).mean().backward()
            opt.step()
        models.append(m)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_update_only_where_torch_has_the_kernel():
    assert fused_update([{"params": [nn.Parameter(torch.zeros(2))]}]) == {"fused": True}
    assert fused_update([{"params": [nn.Parameter(torch.zeros(2, device="meta"))]}]) == {}
    assert fused_update([{"params": []}]) == {}


def test_lion_matches_its_definition():
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(3, 3))
    g1, g2 = torch.randn(3, 3), torch.randn(3, 3)
    opt = Lion([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.01)
    ref, m = p.detach().clone(), torch.zeros(3, 3)
    for g in (g1, g2):
        p.grad = g.clone()
        opt.step()
        ref = ref * (1 - 0.1 * 0.01) - 0.1 * torch.sign(0.9 * m + 0.1 * g)
        m = 0.99 * m + 0.01 * g
    torch.testing.assert_close(p.detach(), ref, rtol=0, atol=1e-6)


def test_lion_one_step_by_hand():
    # θ = (1, -2, 0.5), g = (0.3, -0.1, 0), m0 = 0, lr 0.1, wd 0.5, β = (0.9, 0.99):
    # θ ← θ(1 − 0.1·0.5) − 0.1·sign(0.1·g) = (0.95 − 0.1, −1.9 + 0.1, 0.475 − 0) ; m ← 0.01·g
    p = nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    p.grad = torch.tensor([0.3, -0.1, 0.0])
    opt = Lion([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.5)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([0.85, -1.8, 0.475]), rtol=0, atol=1e-7)
    torch.testing.assert_close(opt.state[p]["exp_avg"], torch.tensor([0.003, -0.001, 0.0]), rtol=0, atol=1e-9)


def test_schedule_warmup_cosine_floor():
    s = ScheduleSection(steps=110, warmup_steps=10, warmup_start_lr=1e-4, min_lr=1e-3)
    peak = 0.1
    assert lr_at(0, 110, 10, peak, s) == pytest.approx(1e-4)
    assert lr_at(5, 110, 10, peak, s) == pytest.approx(1e-4 + (peak - 1e-4) / 2)
    assert lr_at(10, 110, 10, peak, s) == pytest.approx(peak)
    assert lr_at(109, 110, 10, peak, s) == pytest.approx(1e-3)  # the floor at the last step
    mid = lr_at(10 + 99 // 2, 110, 10, peak, s)
    assert 1e-3 < mid < peak
    lrs = [lr_at(i, 110, 10, peak, s) for i in range(10, 110)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))  # monotone decay after warmup
    c = ScheduleSection(steps=50, schedule="constant")
    assert lr_at(49, 50, 0, peak, c) == peak
    assert math.isclose(lr_at(0, 1, 0, peak, ScheduleSection(steps=1)), peak)


@pytest.mark.parametrize("name", ["sgd", "adamw", "lion"])
def test_seeds_in_lockstep_get_the_models_groups_over_their_stacks(name):
    """``stacked`` (train.lockstep): every group of the model's, each parameter replaced by the stack
    of the same name, with the group's decay and lr; the step moves the stacks, not the model."""
    m = _model()
    stacked = {n: torch.stack([p.detach() + k for k in range(3)]).requires_grad_() for n, p in m.named_parameters()}
    cfg = OptimSection(name=name, lr=0.1, weight_decay=0.5)
    plain, opt = build_optimizer(m, cfg), build_optimizer(m, cfg, stacked=stacked)
    by_id = {id(p): n for n, p in m.named_parameters()}
    assert len(opt.param_groups) == len(plain.param_groups) == 2
    for g, h in zip(opt.param_groups, plain.param_groups):
        pairs = zip(g["params"], h["params"], strict=True)
        assert [p is stacked[by_id[id(q)]] for p, q in pairs] == [True] * len(h["params"])
        assert (g["weight_decay"], g["lr"]) == (h["weight_decay"], h["lr"])
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    for s in stacked.values():
        s.grad = torch.ones_like(s)
    opt.step()
    assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())
    assert all(not torch.equal(s[0], before[n]) for n, s in stacked.items())
