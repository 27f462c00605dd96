"""The training loop's epochs against an SGD loop written out here, and the edges of its parts
that the other direct tests leave open (a second process's share, a label ranked 5th or 6th,
two micro-batches, an epoch resumed at its last step, sub-second timings).

The epochs run a float64 MLP (one hidden layer of 8) on 48 synthetic images with label-smoothed
(soft) targets, in two micro-batches per step, with an EMA: the loop here takes plain SGD steps
``p ← p − lr·g`` at the scheduled lr (linear warmup over 2 steps, then a cosine to 0 at step 5)
on the whole batch's float64 soft cross-entropy."""
import contextlib
import dataclasses
import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from test_train_loop_epoch import Recorder, _batches, _Guard, _Progress
from test_train_loop_parts import FINAL, Lookup, _hist, _np_metrics, _Peak, _plan, _results_run
from train_helpers import tiny_overrides

import mlplab.train.loop as loop
import mlplab.train.runplan as runplan
from mlplab.models import create_model
from mlplab.models.counting import count_params
from mlplab.train import make_config
from mlplab.train.backend import describe_implementation
from mlplab.train.data import train_loader
from mlplab.train.distributed import DistInfo
from mlplab.train.runplan import plan_run
from mlplab.utils.seeds import derive_seed

CPU = torch.device("cpu")


def _f64(model):
    model.double().register_forward_pre_hook(lambda m, args: (args[0].double(),))
    return model


def _sgd_run(tmp_path, monkeypatch, **extra):
    real = runplan.create_model
    monkeypatch.setattr(runplan, "create_model", lambda name, **kw: _f64(real(name, **kw)))
    ov = tiny_overrides(tmp_path / "runs", "s", **{
        "model.name": "mlp", "data.train_subset": 48, "data.test_subset": 20, "run.batch_size": 16,
        "schedule.epochs": 1.5, "schedule.warmup_steps": 2, "optim.name": "sgd", "optim.lr": 0.1,
        "optim.momentum": 0.0, "optim.weight_decay": 0.0, "run.accumulate_steps": 2,
        "augment.label_smoothing": 0.1, "run.ema_decay": 0.5, "run.nan_check_every": 2, **extra})
    for k in [k for k in ov if k.startswith("model.kwargs.")]:
        del ov[k]
    ov["model.kwargs"] = {"width": 8, "depth": 1}
    run = loop._prepare(plan_run(make_config(None, ov)), DistInfo())
    run.train_model = run.model
    run.step_log = SimpleNamespace(after_step=Recorder())
    run.stop = SimpleNamespace(requested=Recorder(False))
    return run


def _lr(step):
    return 0.1 * step / 2 if step < 2 else 0.1 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - 2) / 2)))


def test_each_step_is_an_sgd_step_at_its_scheduled_lr_on_the_soft_targets(tmp_path, monkeypatch):
    run = _sgd_run(tmp_path, monkeypatch)
    torch.manual_seed(0)
    model = _f64(create_model("mlp", image_size=8, in_chans=3, num_classes=10, width=8, depth=1))
    model.load_state_dict(run.model.state_dict())
    ema = [p.detach().clone() for p in model.parameters()]
    state, step, losses, records = loop.RunState(), 0, [], []
    for epoch, steps in ((0, 3), (1, 2)):
        loss_sum = correct = 0.0
        for x, y in list(train_loader(run.data, epoch, 16, 0, DistInfo()))[:steps]:
            assert y.ndim == 2  # soft targets
            logits = model(x)
            loss = -(y * logits.log_softmax(-1)).sum(-1).mean()
            grads = torch.autograd.grad(loss, list(model.parameters()))
            with torch.no_grad():
                for p, g, a in zip(model.parameters(), grads, ema):
                    p -= _lr(step) * g
                    a.mul_(0.5).add_(0.5 * p)
            losses.append(float(loss.detach()))
            loss_sum += float(loss.detach()) * 16
            correct += float((logits.argmax(-1) == y.argmax(-1)).sum())
            step += 1
        records.append((loss_sum / (16 * steps), correct / (16 * steps), _lr(step - 1)))
    guard = _Guard(run, 0, tmp_path)
    t0 = time.perf_counter()
    got = [loop._train_epoch(run, e, state, guard, _Progress()) for e in (0, 1)]
    assert 0 < got[0]["train_time_s"] + got[1]["train_time_s"] <= time.perf_counter() - t0
    assert [f[0] for f in guard.folds] == pytest.approx(losses, rel=1e-6)
    for rec, (loss, acc, lr) in zip(got, records):
        assert rec["train_loss"] == pytest.approx(loss, rel=1e-6) and rec["train_acc"] == acc
        assert rec["lr"] == pytest.approx(lr, abs=1e-15)
    assert state.step == 5 and [c[:2] for c in run.step_log.after_step.calls] == [(1, 1), (2, 1), (3, 1), (4, 2),
                                                                                 (5, 2)]
    for p, q, a, e in zip(run.model.parameters(), model.parameters(), run.ema.model.parameters(), ema):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-7)


def test_the_steps_run_under_the_runs_autocast(tmp_path, monkeypatch):
    from test_train_loop_epoch import _run

    run, _ = _run(tmp_path, accumulate=1, world=1)
    run.precision = "bf16"
    batches = _batches(2)
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    seen = []
    run.model.register_forward_pre_hook(lambda m, a: seen.append(torch.get_autocast_dtype("cpu")
                                                                  if torch.is_autocast_enabled("cpu") else None))
    loop._train_epoch(run, 0, loop.RunState(), _Guard(run, 0, tmp_path), _Progress())
    assert seen == [torch.bfloat16] * 2


def test_an_epoch_resumed_before_its_last_step_runs_that_step_only(tmp_path, monkeypatch):
    from test_train_loop_epoch import _run

    run, _ = _run(tmp_path, accumulate=1, world=1)
    batches = _batches()
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    starts = []
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: (starts.append(start),
                                                                                     batches[start:])[1])
    partial = {"sums": torch.tensor([2.0, 3.0], dtype=torch.float64), "seen": 16, "train_time_s": 1.0}
    state = loop.RunState(epoch=1, step=4, position=1, partial=partial)  # step 5 of 5 is left
    guard = _Guard(run, 4, tmp_path)
    rec = loop._train_epoch(run, 1, state, guard, _Progress())
    assert starts == [1]
    (step, epoch, batch, n), = run.step_log.after_step.calls
    assert (step, epoch, n, state.step, rec["step"]) == (5, 2, 16, 5, 5)
    assert rec["train_loss"] == pytest.approx((2.0 + float(batch[0])) / 32, rel=1e-12)
    assert rec["train_acc"] == pytest.approx((3.0 + float(batch[1])) / 32, rel=1e-12)


# ----------------------------------------------------------------------------- the parts' edges

def test_prepare_for_the_second_of_two_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "warn_if_cpu_node", Recorder())
    dist = DistInfo(rank=1, world_size=2)
    run = loop._prepare(_plan(tmp_path), dist)
    after = torch.rand(4)
    assert torch.equal(after, torch.rand(4, generator=torch.Generator().manual_seed(derive_seed(3, "rank", 1))))
    assert (run.dur.batch_per_rank, run.dur.steps_per_epoch, run.dur.total_steps) == (8, 3, 5)
    assert loop.warn_if_cpu_node.calls == [(CPU, "cpu", dist)]
    torch.manual_seed(3)  # the same initial weights on every process
    want = create_model("mlp", image_size=8, in_chans=3, num_classes=10, width=8, depth=1)
    assert all(torch.equal(run.model.state_dict()[k], v) for k, v in want.state_dict().items())


def test_top5_counts_the_5th_ranked_label_and_not_the_6th():
    g = torch.Generator().manual_seed(4)
    table = torch.randn(4, 9, generator=g, dtype=torch.float64)
    ranked = table.argsort(-1, descending=True)
    y = torch.stack([ranked[0, 4], ranked[1, 5], ranked[2, 0], ranked[3, 1]])
    x = torch.stack([torch.arange(4), torch.arange(4)], 1).double()
    got = loop.evaluate(Lookup(table), [(x, y)], DistInfo(), contextlib.nullcontext)
    assert (got["acc"], got["top5"]) == (0.25, 0.75)
    assert got["loss"] == pytest.approx(_np_metrics(table, y.numpy())["loss"], rel=1e-6)


def test_two_micro_batches_give_the_whole_batchs_gradient_and_loss():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(6, 5)).double()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 2, 3, generator=g, dtype=torch.float64), torch.randint(0, 5, (8,), generator=g)
    loss = nn.functional.cross_entropy(model(x), y)
    want = torch.autograd.grad(loss, list(model.parameters()))
    got_loss, logits = loop.accumulated_backward(model, x, y, 2)
    for p, w in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, w, rtol=1e-5, atol=1e-8)
    assert float(got_loss) == pytest.approx(float(loss.detach()), rel=1e-6) and logits.shape == (8, 5)


def test_results_of_sub_second_epochs_of_a_masked_compiled_model(tmp_path):
    run, peak = _results_run(compiled=True), _Peak()
    torch.manual_seed(0)
    run.model = create_model("sw_mlp", image_size=8, in_chans=3, num_classes=10, width=16, depth=1, density=0.5)
    history = [_hist(1, 8.0, 0.5, 0.75), _hist(2, 4.0, 0.25, 0.5), _hist(3, 2.0, 0.25, 0.25)]
    res = loop._results(run, loop.RunState(history=history), FINAL, tmp_path, peak, 0.0)
    assert res["images_per_s"] == pytest.approx((4.0 * 0.25 + 2.0 * 0.25) / 0.5, rel=1e-12)
    assert res["epoch_time_s"] == pytest.approx(0.375, rel=1e-12)
    one = loop._results(run, loop.RunState(history=history[:1]), FINAL, tmp_path, peak, 0.0)
    assert (one["images_per_s"], one["epoch_time_s"]) == (8.0, 0.75)
    assert res["effective_params"] == count_params(run.model, effective=True) < count_params(run.model)
    assert res["implementation"] == describe_implementation(run.model, CPU, "fp32", True)
    assert Path(res["run_dir"]) == tmp_path


def test_results_of_two_epochs_time_the_second_and_describe_a_mixers_path(tmp_path):
    run, peak = _results_run(), _Peak()
    torch.manual_seed(0)
    run.model = create_model("mlp_mixer", image_size=8, in_chans=3, num_classes=10, patch_size=4, hidden_dim=8,
                             depth=1)
    two = [_hist(1, 8.0, 0.5, 0.75), _hist(2, 4.0, 0.25, 0.5)]
    res = loop._results(run, loop.RunState(history=two), FINAL, tmp_path, peak, 0.0)
    assert (res["images_per_s"], res["epoch_time_s"]) == (4.0, 0.5)
    assert res["implementation"] == describe_implementation(run.model, CPU, "fp32", False)


# ----------------------------------------------------------------------------- resuming mid-epoch

def test_resume_restores_the_position_partial_sums_and_step_records_of_its_process(tmp_path):
    from test_train_loop_guard_resume import _run

    run = _run()
    run.step_log = SimpleNamespace(state_dict=lambda: {"seen": 7, "interval_s": 1.5})
    partial = {"sums": torch.tensor([3.0, 2.0], dtype=torch.float64), "seen": 32, "train_time_s": 4.0}
    state = loop.RunState(epoch=1, step=6, history=[{"epoch": 1}], position=2, partial=partial)
    loop._save_checkpoint(run, state, tmp_path, loop._Guard(run, 6, tmp_path), 0.0)
    lines = [{"epoch": 1, "step": 4}, {"kind": "step", "epoch": 2, "step": 6},
             {"kind": "step", "epoch": 2, "step": 8}, {"epoch": 2, "step": 8}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = loop._resume(_run(), SimpleNamespace(path=tmp_path, continuing=True))
    assert (got.epoch, got.step, got.position, got.checkpoint_epoch) == (1, 6, 2, 1)
    assert got.partial["seen"] == 32 and torch.equal(got.partial["sums"], partial["sums"])
    assert got.step_log == {"seen": 7, "interval_s": 1.5}
    kept = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert kept == lines[:2]  # records after the checkpoint's step are dropped


def test_resume_of_a_checkpoint_written_before_mid_epoch_stops_existed(tmp_path):
    from test_train_loop_guard_resume import _run

    run = _run()
    loop._save_checkpoint(run, loop.RunState(epoch=1, step=4), tmp_path, loop._Guard(run, 4, tmp_path), 0.0)
    path = tmp_path / "checkpoint" / "state.pt"
    saved = torch.load(path, weights_only=True)
    for key in ("position", "partial", "step_log"):
        del saved[key]
    torch.save(saved, path)
    got = loop._resume(_run(), SimpleNamespace(path=tmp_path, continuing=True))
    assert (got.epoch, got.step, got.position, got.partial, got.step_log) == (1, 4, 0, None, None)


# ----------------------------------------------------------------------------- what runs where

class _Spy(torch.Tensor):
    """A tensor that records where it is sent."""
    sent = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.to:
            cls.sent.append(args[1:])
        return super().__torch_function__(func, types, args, kwargs or {})


def test_the_fingerprint_reads_the_weights_on_the_host():
    m = nn.Module()
    m.register_buffer("w", torch.arange(3.0).as_subclass(_Spy))
    _Spy.sent.clear()
    loop.weights_digest(m)
    assert _Spy.sent == [("cpu",)]


class _Found(Exception):
    pass


def test_evaluate_keeps_its_sums_on_the_models_device(monkeypatch):
    """``meta`` stands in for an accelerator: the sums reach the all-reduce on the model's device."""
    g = torch.Generator().manual_seed(0)
    model = Lookup(torch.randn(4, 3, generator=g)).to("meta")
    x = torch.stack([torch.arange(2), torch.arange(2)], 1).double().to("meta")
    y = torch.tensor([0, 1], device="meta")

    def reduce(t, dist):
        raise _Found(t.device, t.dtype, t.shape)

    monkeypatch.setattr(loop, "all_reduce_sum", reduce)
    with pytest.raises(_Found) as e:
        loop.evaluate(model, [(x, y)], DistInfo(), contextlib.nullcontext)
    assert e.value.args == (torch.device("meta"), torch.float64, (4,))


def test_evaluate_sums_in_float64_a_huge_loss_with_small_ones():
    """Cross-entropy 1e8 for one example and ~1 for nine: in float32 the small ones would vanish
    (its spacing at 1e8 is 8)."""
    table = torch.zeros(10, 2)
    table[0, 1] = 1e8  # label 0, logit of class 1 = 1e8: cross-entropy 1e8
    table[1:, 0] = torch.linspace(-1, 1, 9)
    x = torch.stack([torch.arange(10), torch.arange(10)], 1).double()
    y = torch.zeros(10, dtype=torch.long)
    got = loop.evaluate(Lookup(table), [(x[:1], y[:1])] + [(x[i:i + 1], y[i:i + 1]) for i in range(1, 10)],
                        DistInfo(), contextlib.nullcontext)
    small = sum(math.log(1 + math.exp(-float(v))) for v in torch.linspace(-1, 1, 9))
    assert got["loss"] * 10 == pytest.approx(1e8 + small, abs=1e-3)


class _Images(nn.Module):
    """Logits by example from NCHW images: pixel [c, 0, w] is an index into the table; the mirror
    image reads column -1, another channel order reads channel 1."""

    def __init__(self, table):
        super().__init__()
        self.table = nn.Parameter(table)

    def forward(self, x):
        return self.table[x[:, 0, 0, 0].long()]


def test_the_mirror_image_is_flipped_along_the_width():
    g = torch.Generator().manual_seed(5)
    n = 6
    table = torch.randn(3 * n, 7, generator=g, dtype=torch.float64)
    i = torch.arange(n).double()
    x = torch.stack([torch.stack([i, i + n], -1), torch.stack([i + 2 * n, i + 2 * n], -1)], 1)[:, :, None, :]
    y = torch.randint(0, 7, (n,), generator=g)
    got = loop.evaluate(_Images(table), [(x, y)], DistInfo(), contextlib.nullcontext, hflip=True)
    t = table.numpy()
    want = _np_metrics((t[:n] + t[n:2 * n]) / 2, y.numpy())
    assert (got["acc"], got["top5"]) == (want["acc"], want["top5"])
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)


def test_train_neither_resumes_nor_overwrites_unless_asked(monkeypatch):
    got = []
    monkeypatch.setattr(loop, "as_plan", lambda cfg: SimpleNamespace(cfg=cfg))
    monkeypatch.setattr(loop, "keep_freed_memory", lambda: None)
    monkeypatch.setattr(loop, "init_distributed", lambda kind: DistInfo())
    monkeypatch.setattr(loop, "_train", lambda *a: got.append(a))
    loop.train(SimpleNamespace(run=SimpleNamespace(device="cpu", threads=None)))
    assert got[0][2:] == (False, False, None)


def test_a_checkpoint_holds_the_partial_sums_and_step_records_of_every_process(tmp_path, monkeypatch):
    from test_train_loop_guard_resume import _run

    other = {"partial": {"seen": 16}, "step_log": {"seen": 3}}
    monkeypatch.setattr(torch.distributed, "all_gather_object",
                        lambda out, obj: out.__setitem__(slice(None), [obj, other if "partial" in obj else obj]))
    monkeypatch.setattr(torch.distributed, "barrier", lambda: None)
    run = _run()
    run.dist = DistInfo(rank=0, world_size=2)
    run.step_log = SimpleNamespace(state_dict=lambda: {"seen": 5})
    state = loop.RunState(epoch=0, step=2, position=2, partial={"seen": 32})
    loop._save_checkpoint(run, state, tmp_path, loop._Guard(run, 2, tmp_path), 0.0)
    saved = torch.load(tmp_path / "checkpoint" / "state.pt", weights_only=True)
    assert saved["partial"] == [{"seen": 32}, {"seen": 16}] and saved["step_log"] == [{"seen": 5}, {"seen": 3}]
    assert saved["position"] == 2


class _NoCheck(loop._Guard):
    def check(self, checkpoint_epoch):
        pass


@pytest.mark.parametrize("resumed", [False, True])
def test_the_epochs_sums_stay_float64_on_the_runs_device(tmp_path, monkeypatch, resumed):
    """``meta`` stands in for an accelerator: the running sums live there (no copy per step)."""
    from test_train_loop_epoch import _run

    run, _ = _run(tmp_path, accumulate=1, world=1)
    run.model.to("meta")
    run.device = torch.device("meta")
    batches = [(x.to("meta"), y.to("meta")) for x, y in _batches(2)]
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])

    def reduce(t, dist):
        raise _Found(t.device, t.dtype)

    monkeypatch.setattr(loop, "all_reduce_sum", reduce)
    progress = SimpleNamespace(due=lambda: False)
    partial = {"sums": torch.zeros(2, dtype=torch.float64), "seen": 16, "train_time_s": 1.0} if resumed else None
    state = loop.RunState(position=1 if resumed else 0, partial=partial)
    with pytest.raises(_Found) as e:
        loop._train_epoch(run, 0, state, _NoCheck(run, 0, tmp_path), progress)
    assert e.value.args == (torch.device("meta"), torch.float64)


def test_an_epoch_of_one_example_and_the_progress_it_shows(tmp_path, monkeypatch):
    from test_train_loop_epoch import _run

    run, _ = _run(tmp_path, accumulate=1, world=1)
    run.dur = dataclasses.replace(run.dur, total_steps=1)
    x, _ = _batches(1)[0]
    with torch.no_grad():
        logits = run.model(x[:1])
    y = logits.argmax(-1)  # the model is right: accuracy 1
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: [(x[:1], y)])
    want_loss, want_acc = float(nn.functional.cross_entropy(logits, y)), 1.0
    progress = _Progress()
    rec = loop._train_epoch(run, 0, loop.RunState(), _Guard(run, 0, tmp_path), progress)
    assert rec["train_loss"] == pytest.approx(want_loss, rel=1e-6) and rec["train_acc"] == want_acc
    assert progress.updates == [(1, 2, 1, 1, f"loss {want_loss:.4f} acc {want_acc:.3f}")]


def test_the_progress_shows_the_running_mean_of_the_epoch(tmp_path, monkeypatch):
    from test_train_loop_epoch import _run

    run, _ = _run(tmp_path, accumulate=1, world=1)
    batches = _batches()
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    progress = _Progress()
    loop._train_epoch(run, 0, loop.RunState(), _Guard(run, 0, tmp_path), progress)
    loss = correct = 0.0
    for (step, _, batch, n), update in zip(run.step_log.after_step.calls, progress.updates):
        loss, correct = loss + float(batch[0]), correct + float(batch[1])
        assert update == (1, 2, step, 3, f"loss {loss / (16 * step):.4f} acc {correct / (16 * step):.3f}")


@pytest.mark.parametrize("every", [4, 100])
def test_a_bad_step_names_the_last_good_checkpoint(tmp_path, monkeypatch, every):
    """Read mid-epoch (every 4 steps: after step 4) or at the epoch's end."""
    from test_train_loop_epoch import _run

    run, _ = _run(tmp_path, accumulate=1, world=1)
    run.cfg.run.nan_check_every = every
    batches = _batches()
    batches[0] = (batches[0][0] * float("nan"), batches[0][1])
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    state = loop.RunState(epoch=1, step=3, checkpoint_epoch=1)
    guard = _Guard(run, 3, tmp_path)
    with pytest.raises(loop.NonFiniteError, match=r"^non-finite loss or gradient at step 4 \(epoch 2\) of run .*; "
                                                  r"the last good checkpoint \(epoch 1\) is "):
        loop._train_epoch(run, 1, state, guard, _Progress())
    assert len(guard.folds) == (1 if every == 4 else 2)


def test_a_stop_records_the_time_the_epoch_took_so_far(tmp_path, monkeypatch):
    from test_train_loop_epoch import _run

    run, _ = _run(tmp_path, accumulate=1, world=1)
    batches = _batches()
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    run.stop.requested.answer = True
    state = loop.RunState()
    t0 = time.perf_counter()
    loop._train_epoch(run, 0, state, _Guard(run, 0, tmp_path), _Progress())
    assert 0 < state.partial["train_time_s"] <= time.perf_counter() - t0


class _BiaslessBody(nn.Module):
    """A body of matrices only: the optimiser's second group is the head's."""

    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(192, 8, bias=False), nn.Linear(8, 10)

    def forward(self, x):
        return self.head(self.body(x.flatten(1)))


def test_the_epochs_lr_is_the_bodys_when_the_head_has_its_own(tmp_path, monkeypatch):
    from test_train_loop_epoch import _run

    from mlplab.train.optim import build_optimizer

    run, _ = _run(tmp_path, accumulate=1, world=1)
    batches = _batches()
    monkeypatch.setattr(loop, "train_loader", lambda *a, start=0, micro_batches=1: batches[start:])
    run.model = run.train_model = _BiaslessBody()
    run.optimizer = build_optimizer(run.model, dataclasses.replace(run.cfg.optim, head_lr=0.05))
    assert [g["lr_scale"] for g in run.optimizer.param_groups] == [1.0, 0.5, 0.5]
    rec = loop._train_epoch(run, 0, loop.RunState(), _Guard(run, 0, tmp_path), _Progress())
    assert rec["lr"] == pytest.approx(0.1, abs=1e-15)  # step 3 of 5: the peak, after a warmup of 2


def test_prepare_puts_the_model_on_the_plans_device_and_builds_it_for_the_loaded_data(tmp_path, monkeypatch):
    """``meta`` stands in for an accelerator; a plan that knows the model's size only from the
    opened data (image folders, packs) builds it from the loaded data's record."""
    plan = _plan(tmp_path)
    monkeypatch.setattr(loop, "warn_if_cpu_node", Recorder())
    run = loop._prepare(dataclasses.replace(plan, device=torch.device("meta")), DistInfo())
    assert {p.device for p in run.model.parameters()} == {torch.device("meta")}
    run = loop._prepare(dataclasses.replace(plan, model_kwargs=None), DistInfo())
    assert run.model.head.out_features == 10 and run.fpe > 0
