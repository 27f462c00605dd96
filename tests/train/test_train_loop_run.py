"""The run around the training loop's parts (``train/loop.py``'s ``_train``), called directly with
its parts scripted: what it decides, each number derived by hand from the script.

The model, data, run folder, checkpoints and loggers are the real ones (a 1-hidden-layer MLP of
width 4 on 48 synthetic 8x8 images, batch 16: 3 steps an epoch). The parts are scripted (the
``Script`` below): an epoch (``_train_epoch``) advances a chosen number of steps and takes 10 s on
a fake clock, an evaluation returns chosen numbers and takes 1 s, the matmul peak is 1e9 FLOP/s.
So which epochs are evaluated and on which split, when checkpoints are written, every time, the
MFU and the results follow from the script by hand. The whole runs, against a training loop
written out, are in ``test_train_loop_oracle.py``. A run here takes ~0.05 s."""
import json
import math
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from train_helpers import tiny_overrides

import mlplab.train.loop as loop
from mlplab.train import NonFiniteError, make_config
from mlplab.train.distributed import DistInfo
from mlplab.train.preemption import Interrupted
from mlplab.train.runplan import as_plan

CPU = torch.device("cpu")
RATE = 1e9  # the scripted matmul peak, FLOP/s
EPOCH_S, EVAL_S = 10.0, 1.0  # what an epoch and an evaluation take on the fake clock
T0 = 1000.0  # the fake clock at the start


def _cfg(tmp_path, name="run", **extra):
    ov = tiny_overrides(tmp_path / "runs", name, **{
        "model.name": "mlp", "data.train_subset": 48, "data.test_subset": 20, "run.batch_size": 16,
        "schedule.epochs": 3, "schedule.warmup_steps": 1, "optim.name": "sgd", **extra})
    for k in [k for k in ov if k.startswith("model.kwargs.")]:
        del ov[k]
    ov["model.kwargs"] = {"width": 4, "depth": 1}
    return make_config(None, ov)


class _Peak:
    """MatmulPeak at RATE, recording the dtype it is asked for."""

    def __init__(self, made, device, dtype):
        self.device, self.dtype, self.rate = device, dtype, RATE
        made.append(self)

    def mfu(self, flops_per_s, world_size=1):
        return flops_per_s / (RATE * world_size)


class _Stop(loop.StopSignals):
    """The stop signals, recording what they are made with."""
    made: list = []

    def __init__(self, dist, every, device):
        super().__init__(dist, every, device)
        _Stop.made.append((dist, every, device))


class _StepLog(loop.StepLog):
    """The per-step records' keeper, recording what it is made with."""
    made: list = []

    def __init__(self, every, loggers, dist, device, optimizer, fpe, peak, clock):
        super().__init__(every, loggers, dist, device, optimizer, fpe, peak, clock)
        _StepLog.made.append((every, dist, device, fpe))


class Script:
    """The parts of a run, scripted (module docstring). ``steps[e]``: the steps epoch e advances;
    ``evals[k]``: the accuracy of the k-th evaluation (its top-5 is ``acc + 0.5``, its loss ``1 + acc``);
    ``losses[k]``: its loss instead; ``stop_epoch``: the epoch (0-based) in which a stop signal
    arrives after its first step (taking 5 s);
    ``nan_epoch``: the epoch whose first step has a NaN loss; ``nan_weights_epoch``: the epoch at
    whose start the weights turn NaN. Step s's loss is 2 for the guard and s for the per-step
    records (16 examples, 8 of them right)."""

    def __init__(self, monkeypatch, steps=(3, 3, 3), evals=None):
        self.now, self.steps, self.evals = T0, list(steps), list(evals or [0.1 * k for k in range(1, 10)])
        self.epochs, self.evaluated, self.checkpoints, self.peaks, self.described = [], [], [], [], []
        self.iterated = []  # the names the evaluations are shown under (a progress bar's)
        self.progress = []  # each epoch's progress mode
        self.stop_epoch = self.nan_epoch = self.nan_weights_epoch = None
        self.losses = []  # the evaluations' losses, when not 1 + acc
        self.run = None
        _Stop.made, _StepLog.made = [], []
        monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=lambda: self.now,
                                                          process_time=time.process_time))
        monkeypatch.setattr(loop, "_train_epoch", self.epoch)
        monkeypatch.setattr(loop, "evaluate", self.evaluate)
        monkeypatch.setattr(loop, "eval_loader", lambda split, data, batch, dist: ("loader", split, batch, dist))
        monkeypatch.setattr(loop, "MatmulPeak", lambda device, dtype: _Peak(self.peaks, device, dtype))
        monkeypatch.setattr(loop, "StopSignals", _Stop)
        monkeypatch.setattr(loop, "StepLog", _StepLog)
        monkeypatch.setattr(loop, "save_curves", lambda run_dir: None)  # ~1.5 s a figure
        real_save, real_describe = loop._save_checkpoint, loop.describe_implementation

        def save(run, state, run_dir, guard, t_start):
            self.checkpoints.append((state.epoch, state.step))
            real_save(run, state, run_dir, guard, t_start)

        def describe(*args):
            self.described.append(args)
            return real_describe(*args)

        real_progress = loop.Progress

        def progress(mode):
            made = real_progress(mode)
            iterate = made.iterate
            made.iterate = lambda iterable, desc: (self.iterated.append(desc), iterate(iterable, desc))[1]
            return made

        monkeypatch.setattr(loop, "Progress", progress)
        monkeypatch.setattr(loop, "_save_checkpoint", save)
        monkeypatch.setattr(loop, "describe_implementation", describe)

    def epoch(self, run, epoch, state, guard, progress):
        self.run = run
        self.epochs.append((epoch, state.step, state.position))
        self.progress.append(progress.mode)
        if epoch == self.nan_weights_epoch:
            with torch.no_grad():
                next(run.model.parameters()).fill_(float("nan"))
        for i in range(state.position, self.steps[epoch]):
            loss = float("nan") if epoch == self.nan_epoch and i == 0 else 2.0
            guard.fold(torch.tensor(loss), None)
            state.step += 1
            # the step's loss x 16 examples is the step number x 16, 8 of them right
            run.step_log.after_step(state.step, epoch + 1, torch.tensor([16.0 * state.step, 8.0],
                                                                         dtype=torch.float64), 16)
            if epoch == self.stop_epoch and i == 0:
                run.stop.received.append(signal.SIGUSR1)
                assert run.stop.requested(state.step)
                self.now += EPOCH_S / 2
                state.position, state.partial = 1, {"sums": torch.zeros(2, dtype=torch.float64), "seen": 16,
                                                    "train_time_s": 4.0}
                return None
        self.now += EPOCH_S
        state.position, state.partial = 0, None
        return {"epoch": epoch + 1, "step": state.step, "lr": 0.5, "train_loss": 2.0 + epoch,
                "train_acc": 0.25 * (epoch + 1), "train_time_s": 8.0, "images_per_s": 6.0}

    def evaluate(self, model, loader, dist, autocast, hflip=False):
        _, split, batch, loader_dist = loader
        run = self.run
        which = ("model" if model is run.model else "ema" if run.ema is not None and model is run.ema.model else "?")
        name = "test" if split is run.data.test else "val" if split is run.data.val else "?"
        assert loader_dist is dist and autocast == run.autocast
        self.evaluated.append((which, name, batch, hflip))
        self.now += EVAL_S
        k = len(self.evaluated) - 1
        acc = self.evals[k]
        return {"acc": acc, "top5": acc + 0.5, "loss": self.losses[k] if k < len(self.losses) else 1.0 + acc}


@pytest.fixture
def script(monkeypatch):
    return Script(monkeypatch)


def _run(cfg, dist=DistInfo(), resume=False, overwrite=False, on_epoch_end=None):
    return loop._train(as_plan(cfg), dist, resume, overwrite, on_epoch_end)


def _lines(run_dir):
    return [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------- epochs, evaluations, checkpoints

def test_each_epoch_is_evaluated_on_the_test_split_and_checkpointed_and_the_last_evaluation_is_the_test(
        tmp_path, script):
    seen = []
    res = _run(_cfg(tmp_path, **{"run.log": "lines"}), on_epoch_end=seen.append)
    assert script.progress == ["lines"] * 3
    assert script.epochs == [(0, 0, 0), (1, 3, 0), (2, 6, 0)]
    assert script.evaluated == [("model", "test", 64, False)] * 3  # no final evaluation: the last one is it
    assert script.checkpoints == [(1, 3), (2, 6), (3, 9)]
    assert [h["epoch"] for h in seen] == [1, 2, 3] and seen == res["history"]
    for e, h in enumerate(res["history"]):
        acc = 0.1 * (e + 1)
        assert h == {"epoch": e + 1, "step": 3 * (e + 1), "lr": 0.5, "train_loss": 2.0 + e, "train_acc": 0.25 * (e + 1),
                     "train_time_s": 8.0, "images_per_s": 6.0, "test_acc": acc, "test_top5": acc + 0.5,
                     "test_loss": 1.0 + acc, "epoch_time_s": EPOCH_S + EVAL_S, "time_s": (e + 1) * (EPOCH_S + EVAL_S),
                     "flops_per_s": h["flops_per_s"], "mfu": h["flops_per_s"] / RATE}
        assert h["flops_per_s"] == pytest.approx(3 * res["flops_per_example"] * 6.0, rel=1e-12)
    acc = pytest.approx(0.3)
    assert (res["test_acc"], res["test_top5"], res["test_loss"]) == (acc, pytest.approx(0.8), pytest.approx(1.3))
    assert (res["epochs"], res["steps"], res["steps_per_epoch"]) == (3, 9, 3)
    assert res["wall_s"] == 3 * (EPOCH_S + EVAL_S)
    assert res["epoch_time_s"] == EPOCH_S + EVAL_S and res["images_per_s"] == pytest.approx(6.0)
    assert res["data"] == {"dataset": "synthetic"} and "test_acc_ema" not in res
    run_dir = Path(res["run_dir"])
    assert json.loads((run_dir / "results.json").read_text()) == json.loads(json.dumps(res))
    assert [x["epoch"] for x in _lines(run_dir)] == [1, 2, 3]
    state = torch.load(run_dir / "checkpoint" / "state.pt", weights_only=True)
    assert (state["epoch"], state["step"], state["wall_s"]) == (3, 9, 3 * (EPOCH_S + EVAL_S))
    assert [(p.device, p.dtype) for p in script.peaks] == [(CPU, torch.float32)]
    assert script.iterated == ["test"] * 3
    (args,) = script.described[:1]
    assert args[0] is script.run.model and args[1:] == (CPU, "fp32", False) and args[3] is False
    assert _Stop.made == [(DistInfo(), 50, CPU)]
    assert _StepLog.made == [(0, DistInfo(), CPU, 3 * res["flops_per_example"])]


def test_with_a_validation_split_every_eval_every_epochs_are_validated_and_the_test_comes_once_at_the_end(
        tmp_path, script):
    cfg = _cfg(tmp_path, **{"data.val_fraction": 0.25, "schedule.epochs": 7, "run.eval_every": 3,
                            "run.checkpoint_every": 4, "augment.test_hflip": True})
    script.steps = [2] * 7  # 36 training examples: 2 steps an epoch
    res = _run(cfg)
    assert script.evaluated == [("model", "val", 64, True)] * 3 + [("model", "test", 64, True)]
    assert script.checkpoints == [(4, 8), (7, 14)]
    assert script.iterated == ["val"] * 3 + ["test"]
    evaluated = [e + 1 for e, h in enumerate(res["history"]) if any(k.startswith(("val_", "test_")) for k in h)]
    assert evaluated == [3, 6, 7]
    assert sorted(k for k in res["history"][2] if k.startswith(("val_", "test_"))) == ["val_acc", "val_loss",
                                                                                       "val_top5"]
    times = [h["epoch_time_s"] for h in res["history"]]
    assert times == [EPOCH_S + EVAL_S * (e in (3, 6, 7)) for e in range(1, 8)]
    assert [h["time_s"] for h in res["history"]] == [10.0, 20.0, 31.0, 41.0, 51.0, 62.0, 73.0]
    assert res["history"][5]["val_acc"] == pytest.approx(0.2)
    assert (res["val_acc"], res["val_top5"], res["val_loss"]) == (pytest.approx(0.3), pytest.approx(0.8),
                                                                  pytest.approx(1.3))
    assert (res["test_acc"], res["test_top5"], res["test_loss"]) == (pytest.approx(0.4), pytest.approx(0.9),
                                                                     pytest.approx(1.4))
    assert res["wall_s"] == 74.0  # the final test's second too
    assert res["epoch_time_s"] == sum(times[1:]) / 6  # the first epoch left out (it warms up)


def test_without_periodic_evaluations_the_last_epoch_is_tested_and_the_ema_after_it(tmp_path, script):
    res = _run(_cfg(tmp_path, **{"run.eval_every": 0, "run.checkpoint_every": 0, "run.ema_decay": 0.5}))
    assert script.evaluated == [("model", "test", 64, False), ("ema", "test", 64, False)]
    assert script.checkpoints == [(3, 9)]
    assert [sorted(k for k in h if k.startswith("test_")) for h in res["history"]] == \
        [[], [], ["test_acc", "test_loss", "test_top5"]]
    assert (res["test_acc"], res["test_acc_ema"], res["test_top5_ema"], res["test_loss_ema"]) == \
        (pytest.approx(0.1), pytest.approx(0.2), pytest.approx(0.7), pytest.approx(1.2))
    assert [h["epoch_time_s"] for h in res["history"]] == [EPOCH_S, EPOCH_S, EPOCH_S + EVAL_S]
    assert res["wall_s"] == 3 * EPOCH_S + EVAL_S  # measured before the EMA's test


# ----------------------------------------------------------------------------- stops, resumes, guards

def test_a_stop_checkpoints_its_step_and_the_resumed_run_goes_on_from_there_with_its_step_records(tmp_path, script):
    cfg = _cfg(tmp_path, **{"run.log_every_steps": 5})
    script.stop_epoch = 1
    with pytest.raises(Interrupted) as e:
        _run(cfg)
    run_dir = Path(cfg.run.out_dir) / "run"
    assert str(e.value) == (f"stopped by SIGUSR1 after step 4 (epoch 2) of {run_dir}; its checkpoint is written; "
                            "it resumes from there with --resume")
    assert script.checkpoints == [(1, 3), (1, 4)] and script.evaluated == [("model", "test", 64, False)]
    state = torch.load(run_dir / "checkpoint" / "state.pt", weights_only=True)
    assert (state["epoch"], state["step"], state["position"], state["wall_s"]) == (1, 4, 1, 16.0)
    script.stop_epoch, script.now, script.epochs, script.checkpoints = None, 5000.0, [], []
    res = _run(cfg, resume=True)
    assert script.epochs == [(1, 4, 1), (2, 6, 0)]  # epoch 2 from its second step, then epoch 3
    assert script.checkpoints == [(2, 6), (3, 9)]
    assert [h["epoch"] for h in res["history"]] == [1, 2, 3] and res["steps"] == 9
    assert [h["time_s"] for h in res["history"]] == [11.0, 27.0, 38.0]  # 16 s before the resume
    assert res["wall_s"] == 38.0
    # the record after step 5: steps 1-5 (4 before the stop), 16 examples each, loss s at step s
    step_recs = [x for x in _lines(run_dir) if x.get("kind") == "step"]
    assert [(x["step"], x["epoch"]) for x in step_recs] == [(5, 2)]
    (rec,) = step_recs
    assert rec["train_loss"] == (1 + 2 + 3 + 4 + 5) * 16 / 80 and rec["train_acc"] == 0.5
    assert rec["time_s"] == 16.0  # the run's clock: the 16 s before, none since
    assert rec["mfu"] == pytest.approx(3 * res["flops_per_example"] * rec["images_per_s"] / RATE, rel=1e-12)


def test_a_non_finite_loss_before_a_stop_is_reported_with_the_last_good_checkpoint(tmp_path, script):
    cfg = _cfg(tmp_path)
    script.stop_epoch = script.nan_epoch = 1
    with pytest.raises(NonFiniteError) as e:
        _run(cfg)
    run_dir = Path(cfg.run.out_dir) / "run"
    assert str(e.value).startswith(f"non-finite loss or gradient at step 4 (epoch 2) of run {run_dir}; the last "
                                   f"good checkpoint (epoch 1) is {run_dir / 'checkpoint'}. ")
    assert script.checkpoints == [(1, 3)]


@pytest.mark.parametrize("stop", [False, True])
def test_non_finite_weights_are_never_checkpointed(tmp_path, script, stop):
    cfg = _cfg(tmp_path)
    script.nan_weights_epoch, script.stop_epoch = 1, 1 if stop else None
    with pytest.raises(NonFiniteError) as e:
        _run(cfg)
    run_dir = Path(cfg.run.out_dir) / "run"
    at = "step 4 (epoch 1)" if stop else "step 6 (epoch 2)"
    assert str(e.value).startswith(f"non-finite weights after {at} of run {run_dir}; the last good checkpoint "
                                   f"(epoch 1) is {run_dir / 'checkpoint'}. ")
    assert torch.load(run_dir / "checkpoint" / "state.pt", weights_only=True)["epoch"] == 1


def test_an_evaluation_loss_at_the_divergence_limit_goes_on_and_one_above_it_stops(tmp_path, script):
    cfg = _cfg(tmp_path)
    limit = 100.0 * math.log(10)  # run.divergence_factor x ln K
    script.losses = [limit, math.nextafter(limit, math.inf)]
    with pytest.raises(NonFiniteError) as e:
        _run(cfg)
    run_dir = Path(cfg.run.out_dir) / "run"
    assert str(e.value).startswith(f"test loss {math.nextafter(limit, math.inf):.4g} (non-finite or above "
                                   f"run.divergence_factor x ln K = {limit:.4g}) after step 6 (epoch 2) of run "
                                   f"{run_dir}; the last good checkpoint (epoch 1) is {run_dir / 'checkpoint'}. ")
    assert script.checkpoints == [(1, 3)]


# ----------------------------------------------------------------------------- a finished run, overwrite, lines

@pytest.mark.parametrize("log", ["lines", "none"])
def test_a_finished_run_returns_its_results_and_says_so_once(tmp_path, script, capsys, log):
    cfg = _cfg(tmp_path, **{"run.log": log})
    _run(cfg)
    results = Path(cfg.run.out_dir) / "run" / "results.json"
    results.write_text(json.dumps({"note": "no accuracy"}))
    capsys.readouterr()
    assert _run(cfg, resume=True) == {"note": "no accuracy"}
    out, err = capsys.readouterr()
    assert out == (f"{results.parent} finished before (test acc not recorded); nothing to do. "
                   "--overwrite trains it again\n")
    assert err == ""
    assert len(script.epochs) == 3  # the first run's


def test_overwrite_trains_a_finished_run_again(tmp_path, script):
    cfg = _cfg(tmp_path)
    first = _run(cfg)
    script.epochs = []
    again = _run(cfg, overwrite=True)
    assert len(script.epochs) == 3 and again["test_acc"] == pytest.approx(0.6) != first["test_acc"]


def test_the_run_lines_say_what_runs_and_without_a_flop_count_no_mfu(tmp_path, script, capsys, monkeypatch):
    monkeypatch.setattr(loop, "count_flops", lambda model, shape: 0)
    cfg = _cfg(tmp_path, **{"run.log": "lines", "run.precision": "bf16", "schedule.epochs": 2})
    res = _run(cfg)
    run_dir = Path(res["run_dir"])
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"run {run_dir}: mlp ") and ", ?FLOP/example, 48 train examples, 6 steps" in lines[0]
    assert lines[-3:] == ["epoch 1/2 step 3 train_loss 2.0000 train_acc 0.2500 test_acc 0.1000 test_loss 1.1000 "
                          "6 img/s 11.0s",
                          "epoch 2/2 step 6 train_loss 3.0000 train_acc 0.5000 test_acc 0.2000 test_loss 1.2000 "
                          "6 img/s 11.0s",
                          f"test acc 0.2000 top5 0.7000 loss 1.2000 (22.0s) -> {run_dir}"]
    assert all("mfu" not in h and "flops_per_s" not in h for h in res["history"])
    assert (res["mfu"], res["flops_per_s"], res["flops_per_example"]) == (None, None, 0.0)
    assert [p.dtype for p in script.peaks] == [torch.bfloat16]
    assert script.described[0][1:] == (CPU, "bf16", False)
    assert _StepLog.made[0][3] == 0.0


# ----------------------------------------------------------------------------- the second of two processes

@pytest.fixture
def rank1(monkeypatch):
    """This process is rank 1 of 2; the other one computes the same."""
    td = torch.distributed
    monkeypatch.setattr(td, "all_reduce", lambda t, op=td.ReduceOp.SUM: t.mul_(2) if op == td.ReduceOp.SUM else t)
    monkeypatch.setattr(td, "all_gather_object", lambda out, obj: out.__setitem__(slice(None), [obj, obj]))
    monkeypatch.setattr(td, "barrier", lambda: None)
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", lambda m, **kw: m)
    return DistInfo(1, 2)


def test_the_second_process_evaluates_its_shard_and_writes_and_shows_nothing(tmp_path, script, rank1, capsys):
    cfg = _cfg(tmp_path, **{"run.log": "bar", "run.ema_decay": 0.5})
    res = _run(cfg, dist=rank1)
    assert script.progress == ["none"] * 3  # no bar either
    assert script.evaluated == [("model", "test", 32, False)] * 3 + [("ema", "test", 32, False)]
    assert [h["mfu"] for h in res["history"]] == [h["flops_per_s"] / (2 * RATE) for h in res["history"]]
    assert _Stop.made == [(rank1, 50, CPU)] and _StepLog.made[0][1] == rank1
    run_dir = Path(res["run_dir"])
    assert not (run_dir / "results.json").exists() and not (run_dir / "checkpoint").exists()
    assert capsys.readouterr().err == ""
