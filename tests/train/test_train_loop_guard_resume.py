"""The loop's NaN/divergence guard and its checkpoint/resume helpers, called directly on tiny
stand-ins for a run (no training): exact messages, the first bad step, what a resume restores."""
import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from mlplab.errors import BadInput, RunFailure
from mlplab.train import checkpoint as ckpt
from mlplab.train import loop
from mlplab.train.distributed import DistInfo
from mlplab.train.loop import NonFiniteError, RunState


def _run(factor=3.0, classes=10, steps_per_epoch=4, ema=False, seed=5):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    avg = SimpleNamespace(model=nn.Linear(3, 4)) if ema else None
    return SimpleNamespace(cfg=SimpleNamespace(run=SimpleNamespace(divergence_factor=factor, seed=seed)),
                           data=SimpleNamespace(info=SimpleNamespace(num_classes=classes)),
                           device=torch.device("cpu"), dist=DistInfo(),
                           dur=SimpleNamespace(steps_per_epoch=steps_per_epoch), model=model, optimizer=opt, ema=avg,
                           step_log=None)


def _t(v):
    return torch.tensor(v)


# ----------------------------------------------------------------------------- the guard

def test_the_divergence_limit_is_factor_times_ln_k():
    assert loop._Guard(_run(3.0, 10), 0, Path("r")).limit == 3.0 * math.log(10)
    assert loop._Guard(_run(2.0, 1), 0, Path("r")).limit == 2.0 * math.log(2)  # K = 1: ln 2, not 0
    assert loop._Guard(_run(None, 10), 0, Path("r")).limit == math.inf


def test_the_guards_flags_live_on_the_runs_device():
    """The flags are folded on the device every step and read only every nan_check_every steps:
    on a GPU they must be GPU tensors, or each step would copy to the host (``meta`` stands in)."""
    run = _run()
    run.device = torch.device("meta")
    g = loop._Guard(run, 7, Path("r"))
    assert g.code.device == g.first.device == g.step_t.device == torch.device("meta")
    assert g.code.dtype == g.first.dtype == g.step_t.dtype == torch.long and g.step_t.shape == ()


def test_good_steps_pass_and_a_loss_at_the_limit_is_not_divergence():
    g = loop._Guard(_run(1.0, 10), 0, Path("r"))
    g.limit = 2.0  # a limit a float32 loss can equal exactly
    for loss in (0.5, 1.9, 2.0):
        g.fold(_t(loss), None)
    g.fold(_t(1.0), _t(3.0))
    g.check(None)
    assert int(g.step_t) == 4 and int(g.code) == 0 and int(g.first) == -1


def test_divergence_is_reported_with_its_first_step_and_epoch():
    run = _run(1.0, 10, steps_per_epoch=4)
    g = loop._Guard(run, 5, Path("runs/x"))  # resumed at step 5: the next step is the 6th
    g.fold(_t(0.1), None)
    g.fold(_t(9.0), None)  # 0-based step 6: the 7th step, in epoch 2 (steps 5..8 0-based)
    g.fold(_t(float("nan")), None)  # worse, later: the kind becomes non-finite, the step stays
    assert int(g.code) == g.NONFINITE and int(g.first) == 6
    with pytest.raises(NonFiniteError) as e:
        g.check(2)
    assert str(e.value) == ("non-finite loss or gradient at step 7 (epoch 2) of run runs/x; the last good "
                            "checkpoint (epoch 2) is runs/x/checkpoint. Lower optim.lr, add optim.grad_clip, "
                            "or use run.precision=fp32, then start a new run.name")
    g = loop._Guard(run, 0, Path("runs/y"))
    for _ in range(4):
        g.fold(_t(0.1), None)
    g.fold(_t(2.31), _t(1.0))  # just above 1.0 × ln 10 = 2.303
    g.fold(_t(2.0), None)
    with pytest.raises(NonFiniteError) as e:
        g.check(None)
    assert str(e.value) == ("diverged (training loss above run.divergence_factor x ln K = 2.303) at step 5 "
                            "(epoch 2) of run runs/y; no checkpoint was written. Lower optim.lr, add "
                            "optim.grad_clip, or use run.precision=fp32, then start a new run.name")


@pytest.mark.parametrize("loss,gnorm", [(float("inf"), None), (float("-inf"), None), (1.0, float("nan")),
                                        (1.0, float("inf"))])
def test_a_non_finite_loss_or_gradient_norm_stops_at_its_step(loss, gnorm):
    g = loop._Guard(_run(None, 10, steps_per_epoch=3), 0, Path("r"))
    g.fold(_t(0.5), _t(1.0))
    g.fold(_t(loss), None if gnorm is None else _t(gnorm))
    with pytest.raises(NonFiniteError, match=r"^non-finite loss or gradient at step 2 \(epoch 1\) of run r;"):
        g.check(None)


def test_no_divergence_check_without_a_factor():
    g = loop._Guard(_run(None, 10), 0, Path("r"))
    g.fold(_t(1e30), _t(1e30))
    g.check(None)


# ----------------------------------------------------------------------------- writing a checkpoint

def test_weights_finite_looks_at_float_parameters_and_buffers_only():
    m = nn.Linear(2, 2)
    assert loop._weights_finite(m)
    m.register_buffer("count", torch.tensor([2 ** 62]))  # an integer buffer is never "non-finite"
    assert loop._weights_finite(m)
    m.register_buffer("scale", torch.tensor([1.0, float("inf")]))
    assert not loop._weights_finite(m)
    del m.scale
    with torch.no_grad():
        m.bias[1] = float("nan")
    assert not loop._weights_finite(m)
    assert loop._weights_finite(nn.Identity())  # nothing to check


def _saved_state(tmp_path):
    return torch.load(tmp_path / "checkpoint" / "state.pt", weights_only=True)


def test_save_checkpoint_writes_the_state_a_resume_needs(tmp_path):
    run = _run(ema=True, seed=11)
    run.model(torch.randn(2, 3)).sum().backward()
    run.optimizer.step()
    state = RunState(epoch=3, step=12, history=[{"epoch": 3}], wall_before=100.0, checkpoint_epoch=2)
    g = loop._Guard(run, 12, tmp_path)
    t0 = time.perf_counter()
    loop._save_checkpoint(run, state, tmp_path, g, t0)
    saved = _saved_state(tmp_path)
    assert state.checkpoint_epoch == 3
    assert (saved["epoch"], saved["step"], saved["history"]) == (3, 12, [{"epoch": 3}])
    assert saved["loader"] == {"epoch": 3, "seed": 11, "world_size": 1}
    assert 100.0 <= saved["wall_s"] <= 100.0 + (time.perf_counter() - t0)
    assert len(saved["rng"]) == 1 and torch.equal(saved["rng"][0]["torch"], torch.get_rng_state())
    assert saved["optimizer"]["state"][0]["step"] == 1
    assert (tmp_path / "checkpoint" / ckpt.EMA_FILE).is_file()


def test_save_checkpoint_refuses_non_finite_weights_and_keeps_the_last_good_one(tmp_path):
    run = _run()
    g = loop._Guard(run, 0, tmp_path)
    loop._save_checkpoint(run, RunState(epoch=1, step=4), tmp_path, g, time.perf_counter())
    with torch.no_grad():
        run.model[0].weight[0, 0] = float("inf")
    state = RunState(epoch=2, step=8, checkpoint_epoch=1)
    with pytest.raises(NonFiniteError) as e:
        loop._save_checkpoint(run, state, tmp_path, g, time.perf_counter())
    assert str(e.value).startswith(f"non-finite weights after step 8 (epoch 2) of run {tmp_path}; the last good "
                                   f"checkpoint (epoch 1) is {tmp_path / 'checkpoint'}.")
    assert _saved_state(tmp_path)["epoch"] == 1 and state.checkpoint_epoch == 1


@pytest.mark.parametrize("earlier", [None, 4])
def test_a_checkpoint_that_cannot_be_written_is_a_run_failure_naming_what_is_kept(tmp_path, monkeypatch, earlier):
    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "save_checkpoint", full_disk)
    state = RunState(epoch=5, step=20, checkpoint_epoch=earlier)
    with pytest.raises(RunFailure) as e:
        loop._save_checkpoint(_run(), state, tmp_path, loop._Guard(_run(), 0, tmp_path), time.perf_counter())
    kept = f"the last good checkpoint (epoch {earlier}) is kept" if earlier else "no earlier checkpoint exists"
    assert str(e.value) == (f"cannot write the checkpoint of epoch 5 in {tmp_path} (No space left on device); "
                            f"{kept}. Free space, then continue with --resume")
    assert state.checkpoint_epoch == earlier


# ----------------------------------------------------------------------------- resuming

def _metrics(path, epochs):
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps({"epoch": e}) + "\n" for e in epochs))


def test_resume_restores_weights_ema_optimizer_rng_and_counters(tmp_path):
    run = _run(ema=True)
    for _ in range(2):
        run.model(torch.randn(2, 3)).pow(2).sum().backward()
        run.optimizer.step()
    with torch.no_grad():
        run.ema.model.weight.fill_(0.25)
    torch.manual_seed(123)
    loop._save_checkpoint(run, RunState(epoch=2, step=8, history=[{"epoch": 1}, {"epoch": 2}], wall_before=7.5),
                          tmp_path, loop._Guard(run, 8, tmp_path), time.perf_counter())
    after_save = torch.rand(4)  # the draws the uninterrupted run makes next
    _metrics(tmp_path, [1, 2, 3])  # epoch 3 was logged, then the run was killed before its checkpoint

    fresh = _run(ema=True)
    fresh.model[0].weight.data.normal_()
    torch.manual_seed(999)
    state = loop._resume(fresh, SimpleNamespace(path=tmp_path, continuing=True))
    assert torch.equal(torch.rand(4), after_save)  # the global RNG continues where it was saved
    assert (state.epoch, state.step, state.checkpoint_epoch) == (2, 8, 2)
    assert state.history == [{"epoch": 1}, {"epoch": 2}] and state.wall_before >= 7.5
    for a, b in zip(fresh.model.state_dict().values(), run.model.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.all(fresh.ema.model.weight == 0.25)
    sa, sb = fresh.optimizer.state_dict(), run.optimizer.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for k in sb["state"]:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(sa["state"][k][name], sb["state"][k][name])
    epochs = [json.loads(x)["epoch"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]  # records after the checkpoint are dropped


def test_a_fresh_run_and_a_run_without_checkpoint_start_at_zero(tmp_path):
    run = _run()
    loop._save_checkpoint(run, RunState(epoch=1, step=4), tmp_path, loop._Guard(run, 4, tmp_path), 0.0)
    _metrics(tmp_path, [1, 2])
    fresh = _run()
    fresh.model[0].weight.data.fill_(3.0)
    state = loop._resume(fresh, SimpleNamespace(path=tmp_path, continuing=False))  # a new run: no resume
    assert state == RunState() and torch.all(fresh.model[0].weight == 3.0)
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2
    empty = tmp_path / "empty"
    _metrics(empty, [1])
    state = loop._resume(fresh, SimpleNamespace(path=empty, continuing=True))  # continuing, nothing saved
    assert state == RunState() and (empty / "metrics.jsonl").read_text() == ""
    assert torch.all(fresh.model[0].weight == 3.0)


def test_resume_with_another_world_size_is_refused(tmp_path):
    run = _run()
    loop._save_checkpoint(run, RunState(epoch=1, step=4), tmp_path, loop._Guard(run, 4, tmp_path), 0.0)
    state = torch.load(tmp_path / "checkpoint" / "state.pt", weights_only=True)
    state["rng"] = state["rng"] * 2  # as written by two processes
    torch.save(state, tmp_path / "checkpoint" / "state.pt")
    with pytest.raises(BadInput) as e:
        loop._resume(_run(), SimpleNamespace(path=tmp_path, continuing=True))
    assert str(e.value) == (f"the checkpoint in {tmp_path / 'checkpoint'} was written by 2 process(es); resume it "
                            "with the same number, not 1")


def test_rng_state_round_trip():
    st = loop._rng_state(torch.device("cpu"))
    assert set(st) == {"torch"}
    want = torch.rand(3)
    loop._set_rng_state(st, torch.device("cpu"))
    assert torch.equal(torch.rand(3), want)
    assert [set(s) for s in loop._gather_rng(torch.device("cpu"), DistInfo())] == [{"torch"}]


# ----------------------------------------------------------------------------- CUDA and other processes, faked

@pytest.fixture
def fake_cuda_rng(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: (calls.append(("get", device)), "cuda-state")[1])
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda st, device: calls.append(("set", st, device)))
    return calls


def test_a_cuda_run_saves_and_restores_the_device_generator_too(fake_cuda_rng):
    cuda = SimpleNamespace(type="cuda")
    st = loop._rng_state(cuda)
    assert st["cuda"] == "cuda-state" and torch.equal(st["torch"], torch.get_rng_state())
    assert fake_cuda_rng == [("get", cuda)]
    loop._set_rng_state(st, cuda)
    assert fake_cuda_rng[1:] == [("set", "cuda-state", cuda)]
    loop._set_rng_state({"torch": st["torch"]}, cuda)  # a CPU run's checkpoint resumed on a GPU
    loop._set_rng_state(st, torch.device("cpu"))
    assert len(fake_cuda_rng) == 2


class FakeCollectives:
    """torch.distributed's collectives as the other process (rank 1 of 2) would answer them."""

    def __init__(self, monkeypatch, other_code=0, other_first=2 ** 62):
        self.other_code, self.other_first, self.barriers = other_code, other_first, 0
        td = torch.distributed
        monkeypatch.setattr(td, "all_gather_object", self.all_gather_object)
        monkeypatch.setattr(td, "all_reduce", self.all_reduce)
        monkeypatch.setattr(td, "barrier", self.barrier)

    def all_gather_object(self, out, obj):
        out[0], out[1] = obj, {"torch": torch.Generator().manual_seed(77).get_state()}

    def all_reduce(self, t, op):
        """Element-wise with the other process's [code, first step] flag, at t's place in it."""
        other = torch.tensor([self.other_code, self.other_first])[t.storage_offset():t.storage_offset() + len(t)]
        reduce = {torch.distributed.ReduceOp.MAX: torch.maximum, torch.distributed.ReduceOp.MIN: torch.minimum}[op]
        t.copy_(reduce(t, other))

    def barrier(self):
        self.barriers += 1


def test_the_guard_combines_the_flags_of_every_process(monkeypatch):
    run = _run(None, 10, steps_per_epoch=5)
    run.dist = DistInfo(rank=0, world_size=2)
    FakeCollectives(monkeypatch, other_code=2, other_first=11)  # the other process went bad at step 12
    g = loop._Guard(run, 10, Path("r"))
    g.fold(_t(0.1), None)
    with pytest.raises(NonFiniteError, match=r"^non-finite loss or gradient at step 12 \(epoch 3\) of run r;"):
        g.check(None)
    FakeCollectives(monkeypatch, other_code=1)  # bad elsewhere, its step unknown here
    with pytest.raises(NonFiniteError, match=r"^diverged .* at a step on another process of run r;"):
        loop._Guard(run, 0, Path("r")).check(None)
    FakeCollectives(monkeypatch)  # everyone fine
    loop._Guard(run, 0, Path("r")).check(None)
    FakeCollectives(monkeypatch, other_code=1, other_first=7)  # both bad: the earlier step is reported
    g = loop._Guard(run, 3, Path("r"))
    g.fold(_t(float("nan")), None)
    with pytest.raises(NonFiniteError, match=r"^non-finite loss or gradient at step 4 \(epoch 1\) of run r;"):
        g.check(None)


@pytest.mark.parametrize("start,epoch", [(0, 1), (200, 41)])
def test_the_first_and_a_late_bad_step_are_named(start, epoch):
    g = loop._Guard(_run(None, 10, steps_per_epoch=5), start, Path("r"))
    g.fold(_t(float("nan")), None)
    with pytest.raises(NonFiniteError, match=rf"^non-finite loss or gradient at step {start + 1} \(epoch {epoch}\)"):
        g.check(None)


def test_only_the_main_process_writes_and_every_process_resumes_its_own_stream(tmp_path, monkeypatch):
    fake = FakeCollectives(monkeypatch)
    run = _run()
    run.dist = DistInfo(rank=1, world_size=2)
    state = RunState(epoch=1, step=4)
    loop._save_checkpoint(run, state, tmp_path, loop._Guard(run, 4, tmp_path), 0.0)
    assert not (tmp_path / "checkpoint").exists() and state.checkpoint_epoch == 1 and fake.barriers == 1
    run.dist = DistInfo(rank=0, world_size=2)
    loop._save_checkpoint(run, state, tmp_path, loop._Guard(run, 4, tmp_path), 0.0)
    rng = _saved_state(tmp_path)["rng"]
    assert len(rng) == 2 and fake.barriers == 2 and torch.equal(rng[0]["torch"], torch.get_rng_state())
    _metrics(tmp_path, [1, 2])
    other = _run()
    other.dist = DistInfo(rank=1, world_size=2)
    before = torch.get_rng_state()
    resumed = loop._resume(other, SimpleNamespace(path=tmp_path, continuing=True))
    assert resumed.epoch == 1 and fake.barriers == 3
    assert torch.equal(torch.rand(3), torch.rand(3, generator=torch.Generator().manual_seed(77)))  # rank 1's
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2  # rank 1 leaves the log alone
    torch.set_rng_state(before)
