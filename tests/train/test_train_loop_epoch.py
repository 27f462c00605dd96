"""One epoch of the training loop (``_train_epoch``) called directly, with its loader, its other
process and its helpers standing in: what each step is given and what the epoch's record holds,
against sums written out here."""
import contextlib
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from train_helpers import tiny_overrides

import mlplab.train.loop as loop
from mlplab.train import make_config
from mlplab.train.distributed import DistInfo
from mlplab.train.runplan import plan_run

CPU = torch.device("cpu")
OTHER = torch.tensor([10.0, 7.0], dtype=torch.float64)  # the other process's [loss x n, correct]


class Far:
    """A batch tensor on another device: records how it is moved to the run's."""

    device = torch.device("meta")

    def __init__(self, t, log):
        self.t, self.log = t, log

    def to(self, device, **kw):
        self.log.append((device, kw))
        return self.t


class Recorder:
    def __init__(self, answer=None):
        self.calls, self.answer = [], answer

    def __call__(self, *args):
        self.calls.append(args)
        return self.answer


class _Progress:
    def __init__(self):
        self.updates = []

    def due(self):
        return True

    def update(self, *args):
        self.updates.append(args)


def _run(tmp_path, accumulate=2, clip=None, world=2):
    ov = tiny_overrides(tmp_path / "runs", "e", **{
        "model.name": "mlp", "data.train_subset": 48, "data.test_subset": 20, "run.batch_size": 16,
        "schedule.epochs": 1.5, "schedule.warmup_steps": 2, "optim.name": "sgd", "optim.lr": 0.1,
        "optim.momentum": 0.0, "optim.weight_decay": 0.0, "run.accumulate_steps": accumulate, "run.nan_check_every": 2,
        "optim.grad_clip": clip})
    for k in [k for k in ov if k.startswith("model.kwargs.")]:
        del ov[k]
    ov["model.kwargs"] = {"width": 8, "depth": 1}
    run = loop._prepare(plan_run(make_config(None, ov)), DistInfo())
    run.dist = DistInfo(rank=0, world_size=world)
    run.train_model = run.model
    syncs = []

    @contextlib.contextmanager
    def no_sync():
        syncs.append(1)
        yield

    run.ddp = type("DDP", (), {"no_sync": staticmethod(no_sync)})()
    run.step_log = type("StepLog", (), {"after_step": Recorder()})()
    run.stop = type("Stop", (), {"requested": Recorder(False)})()
    return run, syncs


def _batches(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 3, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(n)]


class _Guard(loop._Guard):
    def __init__(self, *a):
        super().__init__(*a)
        self.checks, self.folds = [], []

    def check(self, checkpoint_epoch):
        self.checks.append((int(self.step_t), checkpoint_epoch))
        super().check(checkpoint_epoch)

    def fold(self, loss, grad_norm):
        self.folds.append((float(loss), None if grad_norm is None else float(grad_norm)))
        super().fold(loss, grad_norm)


def _loss_acc(model, x, y):
    with torch.no_grad():
        logits = model(x)
    return float(nn.functional.cross_entropy(logits, y)), float((logits.argmax(-1) == y).sum())


def test_an_epoch_moves_its_batches_accumulates_and_sums_over_both_processes(tmp_path, monkeypatch):
    run, syncs = _run(tmp_path)
    batches, moved, asked = _batches(), [], []

    def loader(data, epoch, bs, seed, dist, start=0, micro_batches=1):
        asked.append((data, epoch, bs, seed, dist, start, micro_batches))
        return [(Far(x, moved), Far(y, moved)) for x, y in batches[start:]]

    reduced = []
    monkeypatch.setattr(loop, "train_loader", loader)
    monkeypatch.setattr(loop, "all_reduce_sum", lambda t, d: (reduced.append(d), t.add_(OTHER))[1])
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda t, op: None)  # the guard's: the other is fine
    run.model.eval()  # as an evaluation leaves it: the epoch trains in training mode
    want = [_loss_acc(run.model, *batches[0])]  # before the first step: what its forward sees
    modes = []
    run.model.register_forward_pre_hook(lambda m, a: modes.append(m.training))
    guard, progress = _Guard(run, 0, tmp_path), _Progress()
    state = loop.RunState(epoch=0, step=0)
    rec = loop._train_epoch(run, 0, state, guard, progress)
    assert asked == [(run.data, 0, 16, 0, run.dist, 0, 2)]
    assert moved == [(CPU, {"non_blocking": True})] * 6
    assert modes == [True] * 6 and len(syncs) == 3  # 2 micro-batches a step, one without the all-reduce
    assert reduced == [run.dist] and state.step == 3 and (state.position, state.partial) == (0, None)
    assert guard.checks == [(2, None), (3, None)]  # every nan_check_every = 2 steps, and at the end
    losses = [f[0] for f in guard.folds]
    assert losses[0] == pytest.approx(want[0][0], rel=1e-6) and [f[1] for f in guard.folds] == [None] * 3
    log = run.step_log.after_step.calls
    assert [(s, e, n) for s, e, _, n in log] == [(1, 1, 16), (2, 1, 16), (3, 1, 16)]
    assert [float(c[2][0]) / 16 for c in log] == pytest.approx(losses, rel=1e-6)
    assert run.stop.requested.calls == [(1,), (2,), (3,)]
    correct = sum(float(b[1]) for _, _, b, _ in log)
    assert rec["epoch"] == 1 and rec["step"] == 3 and rec["lr"] == run.optimizer.param_groups[0]["lr"] == 0.1
    assert rec["train_loss"] == pytest.approx((16 * sum(losses) + 10.0) / 96, rel=1e-6)
    assert rec["train_acc"] == pytest.approx((correct + 7.0) / 96, rel=1e-12)
    assert rec["images_per_s"] == pytest.approx(96 / rec["train_time_s"], rel=1e-12)
    assert [u[:4] for u in progress.updates] == [(1, 2, 1, 3), (1, 2, 2, 3), (1, 2, 3, 3)]


def test_an_epoch_stopped_by_a_signal_goes_on_from_its_step_and_sums(tmp_path, monkeypatch):
    run, _ = _run(tmp_path, accumulate=1, world=1)
    batches = _batches()
    monkeypatch.setattr(loop, "train_loader", lambda data, epoch, bs, seed, dist, start=0, micro_batches=1:
                        batches[start:])
    run.stop.requested.answer = True
    state = loop.RunState(epoch=0, step=0)
    assert loop._train_epoch(run, 0, state, _Guard(run, 0, tmp_path), _Progress()) is None
    (step, epoch, first, n), = run.step_log.after_step.calls
    assert (state.step, state.position, state.partial["seen"]) == (1, 1, 16)
    assert torch.equal(state.partial["sums"], first) and state.partial["train_time_s"] > 0
    run.stop.requested.answer = False
    state.partial["train_time_s"] = 100.0
    rec = loop._train_epoch(run, 0, state, _Guard(run, 1, tmp_path), _Progress())
    rest = run.step_log.after_step.calls[1:]
    assert [c[0] for c in rest] == [2, 3] and state.step == 3 and (state.position, state.partial) == (0, None)
    total = first + sum(c[2] for c in rest)
    assert rec["train_loss"] == pytest.approx(float(total[0]) / 48, rel=1e-12)
    assert rec["train_acc"] == pytest.approx(float(total[1]) / 48, rel=1e-12)
    assert rec["train_time_s"] > 100.0 and rec["images_per_s"] == pytest.approx(48 / rec["train_time_s"])


def test_the_last_epoch_runs_only_the_steps_left(tmp_path, monkeypatch):
    run, _ = _run(tmp_path, accumulate=1, world=1)
    batches = _batches()
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    state = loop.RunState(epoch=1, step=3)  # 5 steps in all: 2 left
    rec = loop._train_epoch(run, 1, state, _Guard(run, 3, tmp_path), _Progress())
    assert state.step == 5 and rec["step"] == 5 and rec["epoch"] == 2
    assert [c[:2] for c in run.step_log.after_step.calls] == [(4, 2), (5, 2)]
    assert rec["lr"] == 0.0  # the cosine's last step


def test_clipping_hands_the_guard_the_gradient_norm_before_clipping(tmp_path, monkeypatch):
    run, _ = _run(tmp_path, accumulate=1, clip=1e-3, world=1)
    run.model.blocks[0].fc.bias.requires_grad_(False)  # frozen: no gradient, not in the norm
    batches = _batches(1)
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    x, y = batches[0]
    trained = [p for p in run.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in trained]
    loss = nn.functional.cross_entropy(run.model(x), y)
    grads = torch.autograd.grad(loss, trained)
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    state = loop.RunState(epoch=0, step=2)  # at the peak lr, 0.1
    guard = _Guard(run, 2, tmp_path)
    loop._train_epoch(run, 0, state, guard, _Progress())
    assert guard.folds[0][1] == pytest.approx(norm, rel=1e-5) and norm > 1e-3
    for p, p0, g in zip(trained, before, grads):
        torch.testing.assert_close(p.detach(), p0 - 0.1 * g * 1e-3 / (norm + 1e-6), rtol=1e-4, atol=1e-8)


def test_a_bad_step_stops_the_epoch_at_the_next_check(tmp_path, monkeypatch):
    run, _ = _run(tmp_path, accumulate=1, world=1)
    batches = _batches()
    batches[0] = (batches[0][0] * float("nan"), batches[0][1])
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    guard = _Guard(run, 0, Path("r"))
    with pytest.raises(loop.NonFiniteError, match=r"^non-finite loss or gradient at step 1 \(epoch 1\)"):
        loop._train_epoch(run, 0, loop.RunState(), guard, _Progress())
    assert len(guard.folds) == 2 and guard.checks == [(2, None)]  # nan_check_every = 2: read after step 2
