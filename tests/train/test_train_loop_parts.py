"""The training loop's parts called directly on stand-ins (no run): the evaluation against top-k
and cross-entropy written out in numpy, the accumulated backward against the whole batch's
gradient in float64, the weights' fingerprint against hashlib, and what ``train``, ``_prepare``,
``_wrap``, ``_load_data`` and ``_results`` do with what they are given."""
import contextlib
import dataclasses
import hashlib
import math
import os
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
from train_helpers import tiny_overrides

import mlplab.train.loop as loop
import mlplab.train.runplan as runplan
from mlplab.models import create_model
from mlplab.models.counting import count_flops
from mlplab.train import make_config
from mlplab.train.backend import describe_implementation
from mlplab.train.distributed import DistInfo
from mlplab.train.ema import WeightEMA
from mlplab.train.runplan import plan_run
from mlplab.utils.cpu import machine_tag
from mlplab.utils.seeds import derive_seed

CPU = torch.device("cpu")


# ----------------------------------------------------------------------------- the weights' fingerprint

def test_weights_digest_is_sha256_of_the_sorted_names_and_raw_bytes():
    m = nn.Linear(3, 2).double()  # state_dict order: weight, bias; sorted: bias, weight
    m.register_buffer("perm", torch.tensor([2, 0, 1]))
    h = hashlib.sha256()
    for name in ("bias", "perm", "weight"):
        h.update(name.encode())
        h.update(m.state_dict()[name].numpy().tobytes())
    assert loop.weights_digest(m) == h.hexdigest()
    with torch.no_grad():
        m.weight[0, 0] = np.nextafter(float(m.weight[0, 0]), 2.0)  # one ulp
    assert loop.weights_digest(m) != h.hexdigest()


# ----------------------------------------------------------------------------- evaluation

class Lookup(nn.Module):
    """Logits looked up by example: row ``x[:, 0]`` of the table (its mirror image ``x.flip(-1)``
    reads row ``x[:, -1]``); in training mode noise is added, as dropout would."""

    def __init__(self, table):
        super().__init__()
        self.table = nn.Parameter(table)
        self.calls = []

    def forward(self, x):
        self.calls.append((torch.is_autocast_enabled("cpu"), self.training, torch.is_grad_enabled()))
        out = self.table[x[:, 0].long()]
        return out + torch.randn_like(out) if self.training else out


class Moved:
    """A batch tensor that records how it is moved to the model's device."""

    def __init__(self, t, log):
        self.t, self.log = t, log

    def to(self, device, **kw):
        self.log.append((device, kw))
        return self.t


def _np_metrics(logits, y):
    """Top-1, top-5, mean cross-entropy, in float64 numpy."""
    logits = np.asarray(logits, dtype=np.float64)
    k = min(5, logits.shape[1])
    order = np.argsort(-logits, axis=1, kind="stable")
    shifted = logits - logits.max(1, keepdims=True)
    ce = np.log(np.exp(shifted).sum(1)) - shifted[np.arange(len(y)), y]
    return {"acc": float(np.mean(order[:, 0] == y)), "top5": float(np.mean((order[:, :k] == y[:, None]).any(1))),
            "loss": float(ce.mean())}


def _lookup(n=10, classes=7, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(2 * n, classes, generator=g, dtype=torch.float64).to(dtype)
    x = torch.stack([torch.arange(n), torch.arange(n) + n], 1).double()  # [own row, mirror row]
    y = torch.randint(0, classes, (n,), generator=g)
    return Lookup(table), x, y


def _approx(got, want):
    """Counts exact; the cross-entropy of fp32 logits to fp32's rounding."""
    assert set(got) == set(want)
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-6 if k == "loss" else 1e-12, abs=1e-15), k


def test_evaluate_is_top1_top5_and_cross_entropy_in_eval_mode_over_every_batch():
    model, x, y = _lookup()
    log = []
    batches = [(Moved(x[:3], log), Moved(y[:3], log)), (Moved(x[3:], log), Moved(y[3:], log))]
    entered = []

    @contextlib.contextmanager
    def autocast():
        entered.append(1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=True):
            yield

    got = loop.evaluate(model, batches, DistInfo(), autocast)
    _approx(got, _np_metrics(model.table.detach()[:10], y.numpy()))
    assert model.training and len(entered) == 2 and model.calls == [(True, False, False)] * 2
    assert log == [(CPU, {"non_blocking": True})] * 4
    model.eval()
    loop.evaluate(model, [(x, y)], DistInfo(), contextlib.nullcontext)
    assert not model.training


def test_evaluate_reads_soft_targets_as_their_class_and_has_top5_below_5_classes():
    model, x, y = _lookup(classes=3)
    soft = torch.nn.functional.one_hot(y, 3).double() * 0.8 + 0.2 / 3
    got = loop.evaluate(model, [(x[:4], soft[:4]), (x[4:], soft[4:])], DistInfo(), contextlib.nullcontext)
    _approx(got, _np_metrics(model.table.detach()[:10], y.numpy()))
    assert got["top5"] == 1.0


def test_evaluate_with_test_hflip_averages_the_logits_of_both_images():
    model, x, y = _lookup(classes=12)
    got = loop.evaluate(model, [(x[:6], y[:6]), (x[6:], y[6:])], DistInfo(), contextlib.nullcontext, hflip=True)
    t = model.table.detach().numpy()
    _approx(got, _np_metrics((t[:10] + t[10:]) / 2, y.numpy()))


def test_evaluate_computes_the_cross_entropy_in_fp32_from_low_precision_logits():
    model, x, y = _lookup(classes=9, dtype=torch.bfloat16)
    got = loop.evaluate(model, [(x, y)], DistInfo(), contextlib.nullcontext)
    want = _np_metrics(model.table.detach()[:10].double(), y.numpy())
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)


def test_evaluate_of_one_example_and_of_none():
    model, x, y = _lookup()
    one = loop.evaluate(model, [(x[:1], y[:1])], DistInfo(), contextlib.nullcontext)
    _approx(one, _np_metrics(model.table.detach()[:1], y[:1].numpy()))
    assert loop.evaluate(model, [], DistInfo(), contextlib.nullcontext) == {"acc": 0.0, "top5": 0.0, "loss": 0.0}


def test_evaluate_sums_every_process_before_dividing(monkeypatch):
    """The other process held 6 examples: 4 right, 5 in the top 5, cross-entropy sum 9."""
    model, x, y = _lookup()
    dist = DistInfo(rank=0, world_size=2)
    seen = []

    def reduce(t, info):
        seen.append((t.dtype, info))
        t += torch.tensor([9.0, 4.0, 5.0, 6.0], dtype=torch.float64)
        return t

    monkeypatch.setattr(loop, "all_reduce_sum", reduce)
    got = loop.evaluate(model, [(x, y)], dist, contextlib.nullcontext)
    mine = _np_metrics(model.table.detach()[:10], y.numpy())
    _approx(got, {"acc": (mine["acc"] * 10 + 4) / 16, "top5": (mine["top5"] * 10 + 5) / 16,
                  "loss": (mine["loss"] * 10 + 9) / 16})
    assert seen == [(torch.float64, dist)]


# ----------------------------------------------------------------------------- accumulated backward

def _linear(dtype=torch.float64):
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(6, 5)).to(dtype)


def _batch(n=12, soft=False):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 2, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 5, (n,), generator=g)
    if soft:
        y = torch.softmax(torch.randn(n, 5, generator=g, dtype=torch.float64), -1)
    return x, y


def _hand_grads(model, x, y):
    """The whole batch's mean cross-entropy and its gradient, float64."""
    model.zero_grad()
    logp = model(x).log_softmax(-1)
    loss = -(logp * (y if y.ndim == 2 else nn.functional.one_hot(y, 5))).sum(-1).mean()
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("soft", [False, True], ids=["labels", "soft targets"])
@pytest.mark.parametrize("k", [1, 3])
def test_accumulated_backward_is_the_whole_batchs_gradient(k, soft):
    model = _linear()
    x, y = _batch(soft=soft)
    want_loss, want = _hand_grads(model, x, y)
    model.zero_grad(set_to_none=True)
    entered, syncs = [], []

    @contextlib.contextmanager
    def autocast():
        entered.append(1)
        yield

    @contextlib.contextmanager
    def no_sync():
        syncs.append(1)
        yield

    loss, logits = loop.accumulated_backward(model, x, y, k, autocast, no_sync)
    for p, g in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-8)  # fp32 loss
    assert float(loss) == pytest.approx(want_loss, rel=1e-6) and loss.shape == () and not loss.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(logits, model(x), rtol=0, atol=0)
    assert not logits.requires_grad
    assert len(entered) == k and len(syncs) == k - 1  # the last backward all-reduces


def test_accumulated_backward_of_micro_batches_augmented_as_reached():
    model = _linear()
    x, y = _batch()
    _, want = _hand_grads(model, x, y)
    model.zero_grad(set_to_none=True)
    parts = iter([(x[:6], y[:6]), (x[6:], y[6:])])
    loss, logits = loop.accumulated_backward(model, parts, None, 2)
    for p, g in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-8)  # fp32 loss
    assert logits.shape == (12, 5)


def test_accumulated_backward_takes_the_loss_in_fp32_of_low_precision_logits():
    model = _linear(torch.bfloat16)
    x, y = _batch()
    loss, logits = loop.accumulated_backward(model, x.bfloat16(), y, 2)
    want = _np_metrics(logits.double().numpy(), y.numpy())["loss"]
    assert float(loss) == pytest.approx(want, rel=1e-6)


# ----------------------------------------------------------------------------- train(): the process around a run

@pytest.fixture
def process(monkeypatch):
    calls = []
    monkeypatch.setattr(loop, "as_plan", lambda cfg: SimpleNamespace(cfg=cfg))
    monkeypatch.setattr(loop, "keep_freed_memory", lambda: calls.append("keep"))
    monkeypatch.setattr(loop, "init_distributed", lambda kind: (calls.append(("init", kind)), DistInfo())[1])
    monkeypatch.setattr(loop, "cleanup", lambda dist, failed=None: calls.append(("cleanup", dist, failed)))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(("threads", n)))
    return calls


def _cfg_of(device="cpu", threads=None):
    return SimpleNamespace(run=SimpleNamespace(device=device, threads=threads))


@pytest.mark.parametrize("device,cuda,kind", [("cpu", True, "cpu"), ("auto", True, "cuda"), ("auto", False, "cpu"),
                                              ("cuda", True, "cuda")])
def test_train_sets_up_the_process_runs_and_cleans_up(process, monkeypatch, device, cuda, kind):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    got = []
    monkeypatch.setattr(loop, "_train", lambda *a: (got.append(a), {"done": 1})[1])
    cfg, hook = _cfg_of(device, threads=1), (lambda rec: None)
    assert loop.train(cfg, resume=True, overwrite=False, on_epoch_end=hook) == {"done": 1}
    assert process == [("threads", 1), "keep", ("init", kind), ("cleanup", DistInfo(), None)]
    (plan, dist, resume, overwrite, on_epoch_end), = got
    assert plan.cfg is cfg and dist == DistInfo() and (resume, overwrite, on_epoch_end) == (True, False, hook)
    loop.train(cfg, overwrite=True)
    assert got[1][2:] == (False, True, None)


def test_train_leaves_the_threads_alone_and_cleans_up_after_a_failure(process, monkeypatch):
    boom = RuntimeError("boom")

    def fails(*a):
        raise boom

    monkeypatch.setattr(loop, "_train", fails)
    with pytest.raises(RuntimeError, match="boom"):
        loop.train(_cfg_of(threads=None))
    # cleanup is given the failure, to free what its frames hold before the process group
    assert process == ["keep", ("init", "cpu"), ("cleanup", DistInfo(), boom)]


# ----------------------------------------------------------------------------- the parts of a run

def _bare_run(**kw):
    fields = dict(cfg=None, dist=DistInfo(), device=CPU, precision="fp32", data=None, model=None, optimizer=None,
                  dur=None, n_params=0, fpe=0.0)
    return loop._Run(**{**fields, **kw})


def test_the_runs_autocast_is_bf16_on_its_device_or_nothing(monkeypatch):
    with _bare_run(precision="bf16").autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with _bare_run(precision="fp32").autocast():
        assert not torch.is_autocast_enabled("cpu")
    monkeypatch.setattr(torch, "autocast", lambda *a, **kw: (a, kw))
    assert _bare_run(precision="bf16", device=torch.device("cuda", 1)).autocast() == \
        (("cuda",), {"dtype": torch.bfloat16})


@pytest.mark.parametrize("rank,world,download,order", [
    (0, 1, True, ["load"]), (0, 2, False, ["load"]), (1, 2, False, ["load"]),
    (0, 2, True, ["load", "barrier"]), (1, 2, True, ["barrier", "load"])])
def test_with_download_under_torchrun_rank_0_loads_first(monkeypatch, rank, world, download, order):
    calls = []
    dist = DistInfo(rank=rank, world_size=world)
    cfg = SimpleNamespace(data=SimpleNamespace(download=download))
    monkeypatch.setattr(loop, "load_run_data", lambda c, d: (calls.append("load"), (c, d))[1])
    monkeypatch.setattr(loop, "barrier", lambda info: calls.append("barrier") if info is dist else None)
    assert loop._load_data(cfg, CPU, dist) == (cfg, CPU)
    assert calls == order


def _plan(tmp_path, **extra):
    ov = tiny_overrides(tmp_path / "runs", "p", **{
        "model.name": "mlp", "data.train_subset": 48, "data.test_subset": 20, "run.batch_size": 16,
        "schedule.epochs": 1.5, "schedule.warmup_steps": 2, "optim.lr": 0.1, "run.seed": 3, **extra})
    for k in [k for k in ov if k.startswith("model.kwargs.")]:
        del ov[k]
    ov["model.kwargs"] = {"width": 8, "depth": 1}
    return plan_run(make_config(None, ov))


def test_prepare_builds_the_seeded_model_durations_and_optimiser(tmp_path, monkeypatch):
    plan = _plan(tmp_path, **{"run.ema_decay": 0.9})
    warned, checked = [], []
    monkeypatch.setattr(loop, "warn_if_cpu_node", lambda *a: warned.append(a))
    monkeypatch.setattr(runplan.RunPlan, "check_memory_with", lambda self, info: checked.append(info))
    dist = DistInfo()
    run = loop._prepare(plan, dist)
    after = torch.rand(4)
    torch.manual_seed(3)
    want = create_model("mlp", image_size=8, in_chans=3, num_classes=10, width=8, depth=1)
    for k, v in want.state_dict().items():
        assert torch.equal(run.model.state_dict()[k], v), k
    assert torch.equal(after, torch.rand(4, generator=torch.Generator().manual_seed(derive_seed(3, "rank", 0))))
    assert (run.dur.batch_per_rank, run.dur.steps_per_epoch, run.dur.total_steps, run.dur.total_epochs,
            run.dur.warmup_steps, run.dur.peak_lr) == (16, 3, 5, 2, 2, 0.1)
    assert len(run.data.train) == 48 and checked == [run.data.info] and warned == [(CPU, "cpu", dist)]
    assert run.cfg is plan.cfg and run.dist is dist and run.device == CPU and run.precision == "fp32"
    assert run.n_params == sum(p.numel() for p in want.parameters())
    assert run.fpe == count_flops(want, (3, 8, 8)) > 0 and run.train_fpe == 3 * run.fpe
    assert isinstance(run.ema, WeightEMA) and run.ema.decay == 0.9
    assert run.optimizer.param_groups[0]["params"][0] is next(run.model.parameters())
    assert run.train_model is None and run.ddp is None and not run.compiled


def test_prepare_uses_the_data_it_is_given_and_knows_no_training_flops_of_a_frozen_body(tmp_path, monkeypatch):
    plan = _plan(tmp_path, **{"optim.freeze": "body"})
    data = loop._prepare(plan, DistInfo()).data
    monkeypatch.setattr(loop, "_load_data", lambda *a: pytest.fail("the data was given"))
    run = loop._prepare(plan, DistInfo(), data)
    assert run.data is data and run.ema is None
    assert run.fpe > 0 and run.train_fpe == 0.0


def test_prepare_loads_the_plans_data_config(tmp_path, monkeypatch):
    plan = _plan(tmp_path)
    other = dataclasses.replace(plan, data_cfg=make_config(None, tiny_overrides(
        tmp_path, "q", **{"data.train_subset": 32, "run.seed": 3})))
    assert len(loop._prepare(other, DistInfo()).data.train) == 32


class _Called(Exception):
    pass


def test_prepare_warns_of_emulated_bf16_once_and_sets_the_fp32_policy_on_cuda(tmp_path, monkeypatch, capsys):
    plan = dataclasses.replace(_plan(tmp_path), precision="bf16")
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(loop, "set_fp32_matmul_policy", lambda: (_ for _ in ()).throw(_Called()))
    loop._prepare(plan, DistInfo(rank=1, world_size=2))
    assert capsys.readouterr().err == ""
    loop._prepare(plan, DistInfo())
    assert capsys.readouterr().err == (
        "mlplab train: warning: this CPU has no native bf16 (AVX512-BF16/AMX); bf16 matmuls are emulated and "
        "several times slower than fp32\n")
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: True)
    loop._prepare(plan, DistInfo())
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: False)
    loop._prepare(dataclasses.replace(plan, precision="fp32"), DistInfo())
    assert capsys.readouterr().err == ""
    with pytest.raises(_Called):
        loop._prepare(dataclasses.replace(plan, device=torch.device("cuda", 0)), DistInfo())
    assert capsys.readouterr().err == ""  # bf16 on a GPU: no CPU warning


class FakeDDP(nn.Module):
    def __init__(self, module, device_ids=None, broadcast_buffers=True):
        super().__init__()
        self.module, self.device_ids, self.broadcast_buffers = module, device_ids, broadcast_buffers


def _wrap_run(model, world=1, device=CPU, compile="auto"):
    return SimpleNamespace(model=model, dist=DistInfo(world_size=world), device=device, precision="bf16",
                           cfg=SimpleNamespace(run=SimpleNamespace(compile=compile)),
                           dur=SimpleNamespace(total_steps=7), ddp=None, train_model=None, compiled=None)


@pytest.mark.parametrize("compiles", [False, True])
@pytest.mark.parametrize("world", [1, 2])
def test_wrap_in_ddp_and_compile_as_chosen(monkeypatch, world, compiles):
    asked, compiled = [], []
    monkeypatch.setattr(nn.parallel, "DistributedDataParallel", FakeDDP)
    monkeypatch.setattr(loop, "resolve_compile", lambda *a: (asked.append(a), compiles)[1])
    monkeypatch.setattr(loop, "compile_model", lambda m, d: (compiled.append((m, d)), nn.Sequential(m))[1])
    model = nn.Linear(2, 2)
    run = _wrap_run(model, world, compile="auto")
    loop._wrap(run)
    assert asked == [("auto", CPU, "bf16", 7)]
    inner = run.train_model[0] if compiles else run.train_model
    if world == 1:
        assert inner is model and run.ddp is None
    else:
        assert inner is run.ddp and run.ddp.module is model
        assert run.ddp.device_ids is None and run.ddp.broadcast_buffers is False
    assert compiled == ([(inner, CPU)] if compiles else [])
    assert run.compiled is compiles


def test_ddp_broadcasts_buffers_only_for_batchnorm_and_pins_the_gpu(monkeypatch):
    monkeypatch.setattr(nn.parallel, "DistributedDataParallel", FakeDDP)
    monkeypatch.setattr(loop, "resolve_compile", lambda *a: False)
    run = _wrap_run(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), 2, device=torch.device("cuda", 1))
    loop._wrap(run)
    assert run.ddp.device_ids == [1] and run.ddp.broadcast_buffers is True


# ----------------------------------------------------------------------------- the results

class _Peak:
    rate = 2.5e9

    def __init__(self):
        self.asked = []

    def mfu(self, flops_per_s, world):
        self.asked.append((flops_per_s, world))
        return 0.125


def _results_run(val=False, train_fpe=30.0, compiled=False):
    torch.manual_seed(0)
    model = create_model("mlp", image_size=8, in_chans=3, num_classes=10, width=8, depth=1)
    data = SimpleNamespace(train=[0] * 48, test=[0] * 20, val=[0] * 5 if val else None)
    return SimpleNamespace(model=model, dist=DistInfo(), fpe=10.0, train_fpe=train_fpe, data=data,
                           dur=SimpleNamespace(steps_per_epoch=3), n_params=1234, precision="fp32",
                           compiled=compiled, device=CPU)


def _hist(i, ips, t, et, **extra):
    return {"epoch": i, "train_loss": 1.0 / i, "train_acc": 0.1 * i, "images_per_s": ips, "train_time_s": t,
            "epoch_time_s": et, **extra}


FINAL = {"acc": 0.5, "top5": 0.75, "loss": 1.25}


def test_results_hold_the_test_metrics_and_the_speed_of_the_epochs_after_the_first(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "run_cpu_seconds", lambda: 7.25)
    run, peak = _results_run(), _Peak()
    history = [_hist(1, 1.0, 100.0, 200.0), _hist(2, 10.0, 2.0, 3.0), _hist(3, 40.0, 6.0, 8.0)]
    state = loop.RunState(epoch=3, step=9, history=history, wall_before=50.0)
    t0 = time.perf_counter()
    res = loop._results(run, state, FINAL, tmp_path, peak, t0, data={"sha": "x"})
    ips = (10.0 * 2 + 40.0 * 6) / 8  # the first epoch (compilation, warm-up) is not timed
    assert res["images_per_s"] == pytest.approx(ips, rel=1e-12)
    assert res["epoch_time_s"] == pytest.approx(5.5, rel=1e-12)
    assert res["flops_per_s"] == pytest.approx(30.0 * ips) and res["mfu"] == 0.125
    assert peak.asked == [(pytest.approx(30.0 * ips), 1)]
    assert (res["test_acc"], res["test_top5"], res["test_loss"]) == (0.5, 0.75, 1.25)
    assert (res["train_loss"], res["train_acc"]) == (1.0 / 3, pytest.approx(0.3))
    assert (res["epochs"], res["steps"], res["steps_per_epoch"], res["train_examples"], res["test_examples"]) == \
        (3, 9, 3, 48, 20)
    assert 50.0 <= res["wall_s"] <= 50.0 + time.perf_counter() - t0
    assert res["cpu_s"] == 7.25  # the run's share of the process (utils.machine.run_cpu_seconds)
    assert res["loadavg"] == pytest.approx(list(os.getloadavg()), abs=0.5) and len(res["loadavg"]) == 3
    assert res["machine_tag"] == machine_tag() and res["matmul_flops_per_s"] == 2.5e9
    assert (res["params"], res["flops_per_example"], res["data"]) == (1234, 10.0, {"sha": "x"})
    assert res["effective_params"] == sum(p.numel() for p in run.model.parameters())
    assert (res["precision"], res["compiled"], res["device"], res["dynamo"]) == ("fp32", False, "cpu", None)
    assert res["implementation"] == describe_implementation(run.model, CPU, "fp32", False)
    assert (res["world_size"], res["threads"]) == (1, torch.get_num_threads())
    assert res["weights_sha256"] == loop.weights_digest(run.model)
    assert res["run_dir"] == str(tmp_path) and res["history"] is history
    assert not any(k.startswith("val") for k in res)


def test_results_of_one_epoch_none_and_a_validation_split(tmp_path, monkeypatch):
    run, peak = _results_run(val=True, train_fpe=0.0, compiled=True), _Peak()
    monkeypatch.setattr(loop, "dynamo_counts", lambda: {"graphs": 1})
    one = [_hist(1, 8.0, 4.0, 5.0, val_acc=0.25, val_top5=0.5, val_loss=2.0)]
    res = loop._results(run, loop.RunState(history=one), FINAL, tmp_path, peak, time.perf_counter())
    assert (res["images_per_s"], res["epoch_time_s"]) == (8.0, 5.0)
    assert res["flops_per_s"] is None and res["mfu"] is None and peak.asked == []
    assert (res["val_acc"], res["val_top5"], res["val_loss"]) == (0.25, 0.5, 2.0)
    assert res["compiled"] is True and res["dynamo"] == {"graphs": 1} and res["data"] is None
    no_val = [_hist(1, 8.0, 4.0, 5.0)]
    assert "val_acc" not in loop._results(run, loop.RunState(history=no_val), FINAL, tmp_path, peak, 0.0)
    run.data.val = None
    none = loop._results(run, loop.RunState(), FINAL, tmp_path, peak, 0.0)
    assert math.isnan(none["train_loss"]) and math.isnan(none["train_acc"]) and none["epochs"] == 0
    assert none["images_per_s"] == 0.0 and none["epoch_time_s"] == 0.0


def test_results_refuse_replicas_that_differ(tmp_path, monkeypatch):
    run = _results_run()
    run.dist = DistInfo(rank=0, world_size=2)
    other = ["same"]
    monkeypatch.setattr(torch.distributed, "all_gather_object",
                        lambda out, obj: out.__setitem__(slice(None), [obj, other[0] or obj]))
    other[0] = None  # the other replica agrees
    res = loop._results(run, loop.RunState(history=[_hist(1, 8.0, 4.0, 5.0)]), FINAL, tmp_path, _Peak(), 0.0)
    assert res["world_size"] == 2
    other[0] = "f00d"
    with pytest.raises(RuntimeError, match=r"^model replicas differ across ranks at the end of training: \['"):
        loop._results(run, loop.RunState(history=[_hist(1, 8.0, 4.0, 5.0)]), FINAL, tmp_path, _Peak(), 0.0)
