"""Whole runs of the training loop against a training loop written out here.

A float64 MLP (one hidden layer of 8, dropout 0.25) on 48 synthetic 8x8 images, batch 16: 3 steps
an epoch, 1.5 epochs = 5 steps (the second epoch partial), plain SGD (no momentum, no weight
decay) so the update is ``p ← p − lr·g``, the lr a linear warmup then a cosine written out below.
The loop here draws the same batches (``train_loader``) and the same dropout stream
(``derive_seed(seed, "rank", 0)``) and computes the loss in float64; the run's fp32 cross-entropy
rounds its gradients to ~1e-7, hence the tolerances. Each run takes ~0.2 s (1 thread; the curves
figure is not drawn)."""
import contextlib
import json
import math
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from safetensors.torch import load_file
from train_helpers import tiny_overrides

import mlplab.train.loop as loop
import mlplab.train.runplan as runplan
from mlplab.models import create_model
from mlplab.train import NonFiniteError, make_config, train
from mlplab.train.backend import implementation_line
from mlplab.train.data import eval_loader, load_run_data, train_loader
from mlplab.train.distributed import DistInfo
from mlplab.train.preemption import Interrupted, StopSignals
from mlplab.utils.seeds import derive_seed
from mlplab.utils.units import format_count

CPU = torch.device("cpu")
PEAK, WARMUP = 0.1, 2


def _f64(model):
    """``model`` in float64, taking the loader's float32 images."""
    model.double().register_forward_pre_hook(lambda m, args: (args[0].double(),))
    return model


@pytest.fixture(autouse=True)
def float64_models(monkeypatch):
    real = runplan.create_model
    monkeypatch.setattr(runplan, "create_model", lambda name, **kw: _f64(real(name, **kw)))


@pytest.fixture(autouse=True)
def curves(monkeypatch):
    """The figure of the curves takes ~1.5 s to draw: record the call instead."""
    calls = []
    monkeypatch.setattr(loop, "save_curves", calls.append)
    return calls


class _Progress:
    """The run's progress, recorded: every step is due for an update."""

    def __init__(self, mode, made):
        self.mode, self.lines, self.updates, self.iterated = mode, [], [], []
        made.append(self)

    def due(self):
        return True

    def update(self, *args):
        self.updates.append(args)

    def iterate(self, iterable, desc):
        self.iterated.append(desc)
        return iterable

    def line(self, text):
        self.lines.append(text)


@pytest.fixture
def progress(monkeypatch):
    made = []
    monkeypatch.setattr(loop, "Progress", lambda mode: _Progress(mode, made))
    return made


def _cfg(tmp_path, name="run", drop=0.25, **extra):
    ov = tiny_overrides(tmp_path / "runs", name, **{
        "model.name": "mlp", "data.train_subset": 48, "data.test_subset": 20, "run.batch_size": 16,
        "schedule.epochs": 1.5, "schedule.warmup_steps": WARMUP, "optim.name": "sgd", "optim.lr": PEAK,
        "optim.momentum": 0.0, "optim.weight_decay": 0.0, **extra})
    for k in [k for k in ov if k.startswith("model.kwargs.")]:
        del ov[k]
    ov["model.kwargs"] = {"width": 8, "depth": 1, "drop_rate": drop}
    return make_config(None, ov)


def _lr(step, total):
    """Linear warmup from 0 to PEAK over WARMUP steps, then a cosine to 0 at the last step."""
    if step < WARMUP:
        return PEAK * step / WARMUP
    return PEAK * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - WARMUP) / max(1, total - WARMUP - 1))))


def _metrics(model, batches, hflip=False):
    """Top-1, top-5, mean cross-entropy in eval mode, float64 (``hflip``: of the mean logits of each
    image and its mirror image)."""
    model.eval()
    n = top1 = top5 = loss = 0.0
    with torch.no_grad():
        for x, y in batches:
            logits = (model(x) + model(x.flip(-1))) / 2 if hflip else model(x)
            loss += float(-(logits.log_softmax(-1)[torch.arange(len(y)), y]).sum())
            order = logits.argsort(-1, descending=True)
            top1 += float((order[:, 0] == y).sum())
            top5 += float((order[:, :5] == y[:, None]).any(-1).sum())
            n += len(y)
    model.train()
    return {"acc": top1 / n, "top5": top5 / n, "loss": loss / n}


def _hand_run(cfg, ema_decay=None, epochs=2, total=5, eval_split="test", eval_epochs=(1, 2), hflip=False,
              dist=DistInfo(), clip=None):
    """The run written out: per-epoch records, the final model (and its EMA). ``dist``: the run is
    one of two processes that compute the same (its shard of each batch and of the evaluation
    splits; the other process's sums equal these); ``clip``: gradients clipped to this norm."""
    r = cfg.run
    bs = 16 // dist.world_size
    data = load_run_data(cfg, CPU)
    torch.manual_seed(r.seed)
    model = _f64(create_model("mlp", image_size=8, in_chans=data.info.in_chans, num_classes=data.info.num_classes,
                              width=8, depth=1, drop_rate=cfg.model.kwargs["drop_rate"]))
    ema = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(derive_seed(r.seed, "rank", dist.rank))
    split = data.test if eval_split == "test" else data.val
    step, history, running, steps, seen_all = 0, [], [], [], []
    for epoch in range(epochs):
        loss_sum = correct = seen = 0.0
        for x, y in train_loader(data, epoch, bs, r.seed, dist):
            if step == total:
                break
            lr = _lr(step, total)
            logits = model(x)
            loss = -(logits.log_softmax(-1)[torch.arange(len(y)), y]).mean()
            grads = torch.autograd.grad(loss, list(model.parameters()))
            if clip is not None:
                norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
                grads = [g * min(1.0, clip / (norm + 1e-6)) for g in grads]
            with torch.no_grad():
                for p, g, a in zip(model.parameters(), grads, ema):
                    p -= lr * g
                    if ema_decay is not None:
                        a.mul_(ema_decay).add_((1 - ema_decay) * p)
            loss_sum += float(loss.detach()) * len(y)
            correct += float((logits.argmax(-1) == y).sum())
            seen += len(y)
            step += 1
            running.append((epoch + 1, loss_sum / seen, correct / seen))
            steps.append((epoch + 1, float(loss.detach()), float((logits.argmax(-1) == y).sum()), lr))
        rec = {"epoch": epoch + 1, "step": step, "lr": lr, "train_loss": loss_sum / seen, "train_acc": correct / seen}
        seen_all.append(seen * dist.world_size)
        if epoch + 1 in eval_epochs:
            ev = _metrics(model, eval_loader(split, data, 64 // dist.world_size, dist), hflip)
            rec.update({f"{eval_split}_{k}": v for k, v in ev.items()})
        history.append(rec)
    test = _metrics(model, eval_loader(data.test, data, 64 // dist.world_size, dist), hflip)
    averaged = None
    if ema_decay is not None:
        averaged = _f64(create_model("mlp", image_size=8, in_chans=data.info.in_chans,
                                     num_classes=data.info.num_classes, width=8, depth=1))
        with torch.no_grad():
            for p, a in zip(averaged.parameters(), ema):
                p.copy_(a)
        averaged = _metrics(averaged, eval_loader(data.test, data, 64 // dist.world_size, dist), hflip)
    _hand_run.running, _hand_run.steps, _hand_run.seen = running, steps, seen_all
    return history, model, test, averaged


def _close(got, want, rel=1e-6):
    assert set(got) >= set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=rel, abs=1e-9), k


def _weights(run_dir, name="model.safetensors"):
    return load_file(str(Path(run_dir) / "checkpoint" / name))


def _assert_weights(saved, model):
    assert sorted(saved) == sorted(model.state_dict())
    for k, want in model.state_dict().items():
        torch.testing.assert_close(saved[k], want, rtol=1e-5, atol=1e-6, msg=k)  # fp32 loss: ~1e-7


def test_a_run_is_the_hand_written_loop(tmp_path, curves):
    cfg = _cfg(tmp_path, **{"run.log_every_steps": 2})
    res = train(cfg)
    history, model, test, _ = _hand_run(cfg)
    assert [(h["epoch"], h["step"]) for h in res["history"]] == [(1, 3), (2, 5)]
    for got, want in zip(res["history"], history):
        _close(got, want)
        assert got["images_per_s"] * got["train_time_s"] == pytest.approx(48 if got["epoch"] == 1 else 32)
        assert got["epoch_time_s"] >= got["train_time_s"] > 0
    assert res["history"][-1]["lr"] == 0.0 and res["history"][0]["lr"] == PEAK  # the cosine's end, its peak
    _close(res, {"test_acc": test["acc"], "test_top5": test["top5"], "test_loss": test["loss"],
                 "train_loss": history[-1]["train_loss"], "train_acc": history[-1]["train_acc"]})
    assert (res["epochs"], res["steps"], res["steps_per_epoch"]) == (2, 5, 3)
    assert (res["train_examples"], res["test_examples"]) == (48, 20)
    run_dir = Path(res["run_dir"])
    _assert_weights(_weights(run_dir), model)
    assert json.loads((run_dir / "results.json").read_text()) == json.loads(json.dumps(res))
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    epochs = [x for x in lines if "kind" not in x]
    for got, want in zip(epochs, history):
        _close(got, want)
    assert len(epochs) == 2 and "test_acc_ema" not in res
    # a record every 2 steps, the mean over those 2 (16 examples each), across the epoch's end
    s = _hand_run.steps
    step_recs = [x for x in lines if x.get("kind") == "step"]
    assert [(x["step"], x["epoch"]) for x in step_recs] == [(2, 1), (4, 2)]
    for x, (a, b) in zip(step_recs, [(s[0], s[1]), (s[2], s[3])]):
        _close(x, {"train_loss": (a[1] + b[1]) / 2, "train_acc": (a[2] + b[2]) / 32, "lr": b[3]})
    state = torch.load(run_dir / "checkpoint" / "state.pt", weights_only=True)
    assert (state["epoch"], state["step"], state["position"]) == (2, 5, 0)
    assert curves == [run_dir]


def test_validation_is_evaluated_every_eval_every_epochs_and_the_test_once_at_the_end(tmp_path):
    cfg = _cfg(tmp_path, **{"data.val_fraction": 0.25, "schedule.epochs": 3, "run.eval_every": 2,
                            "run.checkpoint_every": 2})
    seen = []
    res = train(cfg, on_epoch_end=lambda rec: seen.append(
        (rec["epoch"], torch.load(Path(cfg.run.out_dir) / "run" / "checkpoint" / "state.pt",
                                  weights_only=True)["epoch"]
         if (Path(cfg.run.out_dir) / "run" / "checkpoint" / "state.pt").exists() else None)))
    history, model, test, _ = _hand_run(cfg, epochs=3, total=9, eval_split="val", eval_epochs=(2, 3))
    assert seen == [(1, None), (2, 2), (3, 3)]  # a checkpoint every 2 epochs, and at the end
    assert [sorted(k for k in h if k.startswith(("val", "test"))) for h in res["history"]] == \
        [[], ["val_acc", "val_loss", "val_top5"], ["val_acc", "val_loss", "val_top5"]]
    for got, want in zip(res["history"], history):
        _close(got, want)
    _close(res, {"test_acc": test["acc"], "test_top5": test["top5"], "test_loss": test["loss"],
                 "val_acc": history[-1]["val_acc"], "val_loss": history[-1]["val_loss"],
                 "val_top5": history[-1]["val_top5"]})
    _assert_weights(_weights(res["run_dir"]), model)


def test_ema_is_averaged_after_every_step_and_tested_at_the_end(tmp_path, progress):
    cfg = _cfg(tmp_path, **{"run.ema_decay": 0.5})
    res = train(cfg)
    assert ", 5 steps (3/epoch) of batch 16, EMA decay 0.5, peak lr 0.1, cpu " in progress[0].lines[0]
    assert progress[0].lines[-1].startswith(
        f"test acc {res['test_acc']:.4f} top5 {res['test_top5']:.4f} loss {res['test_loss']:.4f} (EMA: acc "
        f"{res['test_acc_ema']:.4f} loss {res['test_loss_ema']:.4f}) ({res['wall_s']:.1f}s) -> ")
    _, model, test, averaged = _hand_run(cfg, ema_decay=0.5)
    _close(res, {"test_acc": test["acc"], "test_loss": test["loss"], "test_acc_ema": averaged["acc"],
                 "test_top5_ema": averaged["top5"], "test_loss_ema": averaged["loss"]})
    assert res["test_loss_ema"] != pytest.approx(res["test_loss"], rel=1e-3)  # two models, two numbers
    _assert_weights(_weights(res["run_dir"]), model)


def test_accumulated_micro_batches_step_like_the_whole_batch(tmp_path, progress):
    one = train(_cfg(tmp_path, "one", drop=0.0))
    acc = train(_cfg(tmp_path, "acc", drop=0.0, **{"run.accumulate_steps": 4}))
    assert " of batch 16, peak lr" in progress[0].lines[0]
    assert " of batch 16 (4 accumulated micro-batches per process), peak lr 0.1, " in progress[1].lines[0]
    assert acc["steps"] == one["steps"] == 5
    for a, b in zip(acc["history"], one["history"]):
        _close(a, {k: b[k] for k in ("lr", "train_acc", "test_loss", "test_acc")}, rel=1e-9)
        # the step's loss is a float32 mean: over 16 examples, or of four means of 4 (its rounding)
        _close(a, {"train_loss": b["train_loss"]}, rel=1e-6)
    w1, w4 = _weights(one["run_dir"]), _weights(acc["run_dir"])
    for k in w1:
        torch.testing.assert_close(w4[k], w1[k], rtol=1e-9, atol=1e-12, msg=k)


class _StopAt(StopSignals):
    """A cluster's stop signal arriving during optimiser step ``AT``."""
    AT = 2

    def requested(self, step):
        if step == self.AT:
            self.received.append(signal.SIGUSR1)
        return super().requested(step)


def test_a_stop_mid_epoch_checkpoints_its_step_and_resumes_to_the_same_weights(tmp_path, monkeypatch):
    whole = train(_cfg(tmp_path, "whole"))
    cfg = _cfg(tmp_path, "stopped")
    monkeypatch.setattr(loop, "StopSignals", _StopAt)
    with pytest.raises(Interrupted, match=r"^stopped by SIGUSR1 after step 2 \(epoch 1\) of "):
        train(cfg)
    state = torch.load(Path(cfg.run.out_dir) / "stopped" / "checkpoint" / "state.pt", weights_only=True)
    assert (state["epoch"], state["step"], state["position"]) == (0, 2, 2)
    history, *_ = _hand_run(cfg, epochs=1, total=2, eval_epochs=())
    (partial,) = state["partial"]
    assert partial["seen"] == 32
    torch.testing.assert_close(partial["sums"], torch.tensor([history[0]["train_loss"] * 32,
                                                              history[0]["train_acc"] * 32], dtype=torch.float64),
                               rtol=1e-6, atol=0)
    monkeypatch.setattr(loop, "StopSignals", StopSignals)
    made = []
    monkeypatch.setattr(loop, "Progress", lambda mode: _Progress(mode, made))
    res = train(cfg, resume=True)
    assert made[0].lines[0].endswith(", 1 process(es), resumed at epoch 0 step 2")
    assert [h["train_loss"] for h in res["history"]] == [h["train_loss"] for h in whole["history"]]
    assert res["weights_sha256"] == whole["weights_sha256"]


def test_a_non_finite_evaluation_stops_the_run_before_its_checkpoint(tmp_path, monkeypatch):
    real = runplan.create_model

    def nan_in_eval(name, **kw):
        model = real(name, **kw)
        model.register_forward_hook(lambda m, a, out: out if m.training else out * float("nan"))
        return model

    monkeypatch.setattr(runplan, "create_model", nan_in_eval)
    cfg = _cfg(tmp_path)
    with pytest.raises(NonFiniteError) as e:
        train(cfg)
    assert str(e.value).startswith(
        f"test loss nan (non-finite or above run.divergence_factor x ln K = {100 * math.log(10):.4g}) after step 3 "
        f"(epoch 1) of run {Path(cfg.run.out_dir) / 'run'}; no checkpoint was written.")
    assert not (Path(cfg.run.out_dir) / "run" / "checkpoint").exists()


def test_runs_in_one_process_each_record_their_own_cpu_seconds(tmp_path):
    """results.json's cpu_s is the run's, not the process's total so far: two runs trained one after
    another in one process (the inline executor, a notebook) together spent no more than it has."""
    first, second = train(_cfg(tmp_path, name="a")), train(_cfg(tmp_path, name="b"))
    assert 0 < first["cpu_s"] and 0 < second["cpu_s"]
    assert first["cpu_s"] + second["cpu_s"] <= time.process_time()


def test_a_finished_run_is_not_trained_again(tmp_path, capsys):
    cfg = _cfg(tmp_path, **{"run.log": "lines"})
    first = train(cfg)
    capsys.readouterr()
    again = train(cfg, resume=True)
    assert again == json.loads(json.dumps(first))
    run_dir = Path(first["run_dir"])
    out, err = capsys.readouterr()
    assert out == (f"{run_dir} finished before (test acc {first['test_acc']:.4f}); nothing to do. "
                   "--overwrite trains it again\n")
    assert err == ""


def test_progress_shows_the_running_metrics_each_step_and_a_line_per_epoch(tmp_path, progress):
    cfg = _cfg(tmp_path, **{"run.log": "lines"})
    res = train(cfg)
    _hand_run(cfg)
    (p,) = progress
    assert p.mode == "lines" and p.iterated == ["test", "test"]  # the last evaluation is the final test
    done = [(1, 3, 1), (1, 3, 2), (1, 3, 3), (2, 2, 1), (2, 2, 2)]
    assert [u[:4] for u in p.updates] == [(e, 2, i, n) for e, n, i in done]
    for (*_, text), (_, loss, acc) in zip(p.updates, _hand_run.running):
        assert text == f"loss {loss:.4f} acc {acc:.3f}"
    run_dir, h = Path(res["run_dir"]), res["history"]
    assert p.lines[0] == (f"run {run_dir}: mlp {format_count(res['params'])} params, "
                          f"{format_count(res['flops_per_example'])}FLOP/example, 48 train examples, 5 steps "
                          f"(3/epoch) of batch 16, peak lr 0.1, cpu {implementation_line(res['implementation'])}, "
                          "1 process(es)")
    for line, rec in zip(p.lines[1:3], h):
        assert line == (f"epoch {rec['epoch']}/2 step {rec['step']} train_loss {rec['train_loss']:.4f} train_acc "
                        f"{rec['train_acc']:.4f} test_acc {rec['test_acc']:.4f} test_loss {rec['test_loss']:.4f} "
                        f"{rec['images_per_s']:.0f} img/s {rec['epoch_time_s']:.1f}s mfu {rec['mfu']:.1%}")
        assert rec["mfu"] > 0 and rec["flops_per_s"] == pytest.approx(3 * res["flops_per_example"] *
                                                                      rec["images_per_s"])
    assert p.lines[3:] == [f"test acc {res['test_acc']:.4f} top5 {res['test_top5']:.4f} loss {res['test_loss']:.4f} "
                           f"({res['wall_s']:.1f}s) -> {run_dir}"]


@pytest.fixture
def loggers(monkeypatch):
    """What the loop hands its loggers: (kind, record's step, step given) per record, and the results."""
    real, calls = loop.open_loggers, []

    @contextlib.contextmanager
    def spy(run_dir, cfg, enabled):
        calls.append(("enabled", enabled))
        with real(run_dir, cfg, enabled=enabled) as lg:
            log, finish = lg.log, lg.finish
            lg.log = lambda rec, step: (calls.append((rec.get("kind", "epoch"), rec["step"], step)), log(rec, step))
            lg.finish = lambda results: (calls.append(("finish", results)), finish(results))
            yield lg

    monkeypatch.setattr(loop, "open_loggers", spy)
    return calls


def test_every_evaluation_mirrors_when_asked_the_ema_and_the_val_split_too(tmp_path, loggers):
    cfg = _cfg(tmp_path, **{"augment.test_hflip": True, "run.ema_decay": 0.5, "data.val_fraction": 0.25,
                            "optim.grad_clip": 0.05})
    res = train(cfg)
    history, model, test, averaged = _hand_run(cfg, ema_decay=0.5, eval_split="val", hflip=True, clip=0.05)
    for got, want in zip(res["history"], history):
        _close(got, want)
    _close(res, {"test_acc": test["acc"], "test_loss": test["loss"], "test_top5": test["top5"],
                 "test_acc_ema": averaged["acc"], "test_loss_ema": averaged["loss"]})
    _assert_weights(_weights(res["run_dir"]), model)
    assert loggers[:3] == [("enabled", True), ("epoch", 3, 3), ("epoch", 5, 5)] and len(loggers) == 4
    assert loggers[3][0] == "finish" and loggers[3][1] is res
    times = [h["time_s"] for h in res["history"]]
    assert 0 < times[0] < times[1] <= res["wall_s"]


class FakeDDP(nn.Module):
    """DDP of two processes that compute the same: the gradients' mean is this process's own."""

    def __init__(self, module, device_ids=None, broadcast_buffers=True):
        super().__init__()
        self.module, self.unsynced = module, 0

    def forward(self, x):
        return self.module(x)

    @contextlib.contextmanager
    def no_sync(self):
        self.unsynced += 1
        yield


@pytest.fixture
def two_processes(monkeypatch):
    """This process is rank 0 of 2; the other one computes the same on its shard, so every sum
    doubles and every maximum, minimum and gathered object is this process's."""
    seen = {"barriers": 0, "sums": 0, "init": [], "cleanup": [], "dist": DistInfo(0, 2)}
    td = torch.distributed

    def all_reduce(t, op=td.ReduceOp.SUM):
        if op == td.ReduceOp.SUM:
            seen["sums"] += 1
            t.mul_(2)

    monkeypatch.setattr(td, "all_reduce", all_reduce)
    monkeypatch.setattr(td, "all_gather_object", lambda out, obj: out.__setitem__(slice(None), [obj, obj]))
    monkeypatch.setattr(td, "barrier", lambda: seen.__setitem__("barriers", seen["barriers"] + 1))
    monkeypatch.setattr(nn.parallel, "DistributedDataParallel", FakeDDP)
    monkeypatch.setattr(loop, "init_distributed", lambda kind: (seen["init"].append(kind), seen["dist"])[1])
    monkeypatch.setattr(loop, "cleanup", lambda d: seen["cleanup"].append(d))
    return seen


def test_two_processes_train_each_its_shard_and_report_the_sums_of_both(tmp_path, two_processes, progress):
    cfg = _cfg(tmp_path, drop=0.0, **{"data.val_fraction": 0.25, "run.accumulate_steps": 2})
    res = train(cfg)
    history, model, test, _ = _hand_run(cfg, eval_split="val", dist=DistInfo(0, 2))
    assert two_processes["init"] == ["cpu"] and two_processes["cleanup"] == [DistInfo(0, 2)]
    assert res["world_size"] == 2 and res["steps"] == 5 and res["steps_per_epoch"] == 3
    for got, want, n in zip(res["history"], history, _hand_run.seen):
        _close(got, want)
        assert got["images_per_s"] * got["train_time_s"] == pytest.approx(n)
    _close(res, {"test_acc": test["acc"], "test_loss": test["loss"], "test_top5": test["top5"]})
    _assert_weights(_weights(res["run_dir"]), model)
    assert " of batch 16 (2 accumulated micro-batches per process), " in progress[0].lines[0]
    assert progress[0].lines[0].endswith(", 2 process(es)")
    # opening the folder (3), the resume (1), a checkpoint each epoch (2) and the end (1)
    assert two_processes["barriers"] == 7


def test_the_second_process_trains_its_shard_and_writes_nothing(tmp_path, two_processes, progress, loggers, curves):
    two_processes["dist"] = DistInfo(1, 2)
    cfg = _cfg(tmp_path, **{"run.ema_decay": 0.5})
    res = train(cfg)
    history, model, test, averaged = _hand_run(cfg, ema_decay=0.5, dist=DistInfo(1, 2))
    for got, want in zip(res["history"], history):
        _close(got, want)
    _close(res, {"test_acc": test["acc"], "test_loss": test["loss"], "test_acc_ema": averaged["acc"]})
    assert progress[0].mode == "none" and loggers[0] == ("enabled", False) and curves == []
    run_dir = Path(res["run_dir"])
    assert not (run_dir / "results.json").exists() and not (run_dir / "checkpoint").exists()
