"""Optimisers and schedule against an independent oracle: the update rules re-implemented in
float64 numpy from their papers (SGD with Nesterov momentum and coupled L2 decay as torch defines
it, AdamW of Loshchilov & Hutter, LION of Chen et al.), and the schedule's closed forms at its
edges. The torch optimisers run on float64 parameters, so the comparison is to ~1e-12."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from mlplab.errors import BadInput
from mlplab.train.config import OptimSection, ScheduleSection
from mlplab.train.optim import Lion, build_optimizer, freeze_body, fused_update, lr_at, param_groups, set_lr


class Net(nn.Module):
    """A body (a matrix, a bias, a LayerNorm) and a classifier ``head``, float64."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.norm(self.body(x)))


def _net(seed=0):
    torch.manual_seed(seed)
    return Net().double()


def _grads(net, steps, seed=1):
    rng = np.random.default_rng(seed)
    return [{n: rng.standard_normal(tuple(p.shape)) for n, p in net.named_parameters()} for _ in range(steps)]


def _np_sgd(p, grads, lrs, wd, mu, nesterov):
    buf = None
    for g, lr in zip(grads, lrs):
        d = g + wd * p  # torch's SGD: L2 decay added to the gradient
        buf = d.copy() if buf is None else mu * buf + d
        d = d + mu * buf if nesterov else buf
        p = p - lr * d
    return p


def _np_adamw(p, grads, lrs, wd, b1, b2, eps):
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, (g, lr) in enumerate(zip(grads, lrs), 1):
        p = p * (1 - lr * wd)  # decoupled decay
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
        p = p - lr * mhat / (np.sqrt(vhat) + eps)
    return p


def _np_lion(p, grads, lrs, wd, b1, b2):
    m = np.zeros_like(p)
    for g, lr in zip(grads, lrs):
        p = p * (1 - lr * wd) - lr * np.sign(b1 * m + (1 - b1) * g)
        m = b2 * m + (1 - b2) * g
    return p


def _run(cfg, steps=5, sched=None):
    """Steps of build_optimizer(cfg) with the lr of each step set by lr_at; returns
    (start weights, final weights, grads, lrs), weights by parameter name, as numpy float64."""
    net = _net()
    start = {n: p.detach().numpy().copy() for n, p in net.named_parameters()}
    opt = build_optimizer(net, cfg)
    grads = _grads(net, steps)
    sched = sched or ScheduleSection(steps=steps, warmup_steps=2, warmup_start_lr=0.1 * cfg.lr, min_lr=0.01)
    lrs = [lr_at(i, steps, 2, cfg.lr, sched) for i in range(steps)]
    params = dict(net.named_parameters())
    for g, lr in zip(grads, lrs):
        set_lr(opt, lr)
        for n, p in params.items():
            p.grad = torch.from_numpy(g[n]).clone() if p.requires_grad else None
        opt.step()
    end = {n: p.detach().numpy() for n, p in net.named_parameters()}
    return start, end, grads, lrs


def _decayed(name):
    return name.endswith("weight") and name != "norm.weight"


@pytest.mark.parametrize("nesterov,momentum", [(True, 0.9), (False, 0.8), (True, 0.0)])
def test_sgd_equals_the_numpy_float64_rule(nesterov, momentum):
    cfg = OptimSection(name="sgd", lr=0.3, momentum=momentum, nesterov=nesterov, weight_decay=0.05)
    start, end, grads, lrs = _run(cfg)
    for n in start:
        wd = 0.05 if _decayed(n) else 0.0
        want = _np_sgd(start[n], [g[n] for g in grads], lrs, wd, momentum, nesterov and momentum > 0)
        np.testing.assert_allclose(end[n], want, rtol=1e-12, atol=1e-12, err_msg=n)


@pytest.mark.parametrize("betas,eps", [((0.9, 0.999), 1e-8), ((0.8, 0.95), 0.3)])
def test_adamw_equals_the_numpy_float64_rule(betas, eps):
    cfg = OptimSection(name="adamw", lr=0.2, betas=betas, eps=eps, weight_decay=0.3)
    start, end, grads, lrs = _run(cfg)
    for n in start:
        wd = 0.3 if _decayed(n) else 0.0
        want = _np_adamw(start[n], [g[n] for g in grads], lrs, wd, *betas, eps)
        np.testing.assert_allclose(end[n], want, rtol=1e-12, atol=1e-12, err_msg=n)


def test_lion_equals_the_numpy_float64_rule_with_decay_on_matrices_only():
    cfg = OptimSection(name="lion", lr=0.05, betas=(0.7, 0.95), weight_decay=2.0)
    start, end, grads, lrs = _run(cfg, steps=6)
    for n in start:
        wd = 2.0 if _decayed(n) else 0.0
        want = _np_lion(start[n], [g[n] for g in grads], lrs, wd, 0.7, 0.95)
        np.testing.assert_allclose(end[n], want, rtol=1e-12, atol=1e-12, err_msg=n)


def test_lion_skips_parameters_without_gradient_and_returns_the_closure_loss():
    a, b = nn.Parameter(torch.ones(2, dtype=torch.float64)), nn.Parameter(torch.ones(2, dtype=torch.float64))
    opt = Lion([a, b], lr=0.5, weight_decay=0.1)
    a.grad = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss = opt.step(lambda: torch.tensor(3.0))
    assert float(loss) == 3.0 and opt.step() is None
    assert torch.equal(b, torch.ones(2, dtype=torch.float64)) and b not in opt.state
    # first step: (1 − 0.05)·1 − 0.5·sign(0.1·g); second step, same g: sign(0.9·0.01·g + 0.1·g)
    want = np.array([0.95 - 0.5, 0.95 + 0.5]) * 0.95 + np.array([-0.5, 0.5])
    np.testing.assert_allclose(a.detach().numpy(), want, rtol=0, atol=1e-15)
    assert opt.defaults == {"lr": 0.5, "betas": (0.9, 0.99), "weight_decay": 0.1}


@pytest.mark.parametrize("kw,match", [({"lr": 0.0}, "lr must be > 0"), ({"lr": -1.0}, "lr must be > 0"),
                                      ({"betas": (1.0, 0.5)}, "betas"), ({"betas": (0.5, -0.1)}, "betas")])
def test_lion_bad_hyperparameters_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        Lion([nn.Parameter(torch.zeros(1))], **kw)


def test_lion_accepts_the_edges_of_its_ranges():
    opt = Lion([nn.Parameter(torch.zeros(1))], lr=1e-9, betas=(0.0, 0.0))
    assert opt.defaults["betas"] == (0.0, 0.0)


def test_head_lr_scales_the_head_groups_and_keeps_decay_on_matrices():
    net = _net()
    groups = param_groups(net, 0.1, head_lr_scale=0.01)
    names = {id(p): n for n, p in net.named_parameters()}
    got = [(sorted(names[id(p)] for p in g["params"]), g["weight_decay"], g["lr_scale"]) for g in groups]
    assert got == [(["body.weight"], 0.1, 1.0), (["body.bias", "norm.bias", "norm.weight"], 0.0, 1.0),
                   (["head.weight"], 0.1, 0.01), (["head.bias"], 0.0, 0.01)]
    assert [g["lr_scale"] for g in param_groups(net, 0.1)] == [1.0, 1.0]  # scale 1: no head split
    opt = build_optimizer(net, OptimSection(name="sgd", lr=0.5, head_lr=0.05))
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5, 0.05, 0.05]  # peak lr before any schedule
    set_lr(opt, 0.2)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.2, 0.2, 0.02, 0.02], rel=1e-15)


def test_frozen_parameters_are_left_out_and_freeze_body_keeps_only_the_head():
    net = _net()
    opt = build_optimizer(net, OptimSection(name="adamw", lr=0.1, freeze="body"))
    trainable = [n for n, p in net.named_parameters() if p.requires_grad]
    assert trainable == ["head.weight", "head.bias"]
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    assert in_opt == {id(net.head.weight), id(net.head.bias)}
    with pytest.raises(BadInput, match="classifier head"):
        freeze_body(nn.Linear(2, 2))
    headless = nn.Sequential(nn.Linear(2, 2))
    headless.head = nn.Identity()  # a head without parameters is no head
    with pytest.raises(BadInput, match="Sequential has none"):
        freeze_body(headless)


def test_build_optimizer_kinds_and_fused_kernels():
    net = _net()
    sgd = build_optimizer(net, OptimSection(name="sgd", lr=0.1, momentum=0.0, nesterov=True))
    assert type(sgd) is torch.optim.SGD and sgd.defaults["nesterov"] is False and sgd.defaults["momentum"] == 0.0
    assert sgd.defaults["fused"] is True
    adamw = build_optimizer(net, OptimSection(name="adamw", lr=0.1, betas=(0.5, 0.6), eps=0.25))
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["betas"] == (0.5, 0.6)
    assert adamw.defaults["eps"] == 0.25 and adamw.defaults["fused"] is True
    lion = build_optimizer(net, OptimSection(name="lion", lr=0.1, betas=(0.5, 0.6)))
    assert type(lion) is Lion and lion.defaults["betas"] == (0.5, 0.6)
    bad = OptimSection(name="sgd")
    bad.name = "rmsprop"
    with pytest.raises(ValueError, match="unknown optimiser 'rmsprop'"):
        build_optimizer(net, bad)
    ints = [{"params": [torch.zeros(2, dtype=torch.long)]}]
    assert fused_update(ints) == {}  # integer tensors have no fused kernel


# ----------------------------------------------------------------------------- the schedule

def _cosine(step, total, warmup, peak, lo):
    """Closed form: ½(1 + cos(π t)) between peak and lo, t = (step − warmup)/(total − warmup − 1)."""
    t = min(1.0, (step - warmup) / max(1, total - warmup - 1))
    return lo + (peak - lo) * (1 + math.cos(math.pi * t)) / 2


def test_schedule_edges_in_closed_form():
    s = ScheduleSection(steps=22, warmup_steps=5, warmup_start_lr=0.25, min_lr=0.5)
    peak = 4.0
    assert lr_at(0, 22, 5, peak, s) == 0.25  # warmup starts at warmup_start_lr exactly
    assert lr_at(1, 22, 5, peak, s) == 0.25 + 3.75 / 5
    assert lr_at(4, 22, 5, peak, s) == 0.25 + 3.75 * 4 / 5  # the last warmup step is below the peak
    assert lr_at(5, 22, 5, peak, s) == peak  # cos(0) = 1: the peak right after warmup
    assert lr_at(13, 22, 5, peak, s) == pytest.approx(0.5 + 3.5 / 2, rel=1e-15)  # t = 1/2: halfway
    assert lr_at(21, 22, 5, peak, s) == pytest.approx(0.5, rel=1e-15)  # the floor at the last step
    assert lr_at(25, 22, 5, peak, s) == pytest.approx(0.5, rel=1e-15)  # t is clamped past the end
    const = ScheduleSection(steps=21, schedule="constant", warmup_start_lr=1.0)
    assert [lr_at(i, 21, 2, peak, const) for i in (0, 1, 2, 20)] == [1.0, 2.5, peak, peak]
    assert lr_at(0, 21, 0, peak, s) == peak  # no warmup: the peak at step 0
    assert lr_at(0, 2, 1, peak, s) == 0.25 and lr_at(1, 2, 1, peak, s) == peak  # one decay step


@settings(max_examples=60, deadline=None)
@given(total=st.integers(2, 400), warmup=st.integers(0, 50), frac=st.floats(0, 1),
       peak=st.floats(1e-4, 10.0), lo_frac=st.floats(0, 1), start_frac=st.floats(0, 1))
def test_schedule_is_the_closed_form_everywhere(total, warmup, frac, peak, lo_frac, start_frac):
    warmup = min(warmup, total - 1)
    step = int(frac * (total - 1))
    s = ScheduleSection(steps=total, warmup_start_lr=start_frac * peak, min_lr=lo_frac * peak)
    got = lr_at(step, total, warmup, peak, s)
    if step < warmup:
        want = start_frac * peak + (peak - start_frac * peak) * step / warmup
    else:
        want = _cosine(step, total, warmup, peak, lo_frac * peak)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert min(start_frac * peak, lo_frac * peak) - 1e-12 <= got <= peak + 1e-12


def test_defaults_are_the_papers_and_the_configs_peak_lr():
    assert Lion([nn.Parameter(torch.zeros(1))]).defaults == {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0}
    for name in ("sgd", "adamw", "lion"):  # a group added later starts at the peak lr
        assert build_optimizer(_net(), OptimSection(name=name, lr=0.37)).defaults["lr"] == 0.37


def test_set_lr_on_groups_without_a_scale_sets_the_lr_itself():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    set_lr(opt, 0.3)
    assert opt.param_groups[0]["lr"] == 0.3


def test_fused_kernels_on_cuda_parameters_too():
    on_gpu = SimpleNamespace(is_floating_point=lambda: True, device=torch.device("cuda", 0))
    assert fused_update([{"params": [on_gpu]}]) == {"fused": True}


def test_one_decay_step_reaches_the_floor():
    s = ScheduleSection(steps=3, warmup_steps=1, min_lr=0.5)
    assert [lr_at(i, 3, 1, 4.0, s) for i in range(3)] == [0.0, 4.0, 0.5]
