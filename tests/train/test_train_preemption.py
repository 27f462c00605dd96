"""Surviving the end of a Slurm job (mlplab.train.preemption): a REAL signal to a training process
in a fake Slurm job (SLURM_JOB_ID set, a fake ``scontrol`` on PATH) stops it at a step boundary
with a mid-epoch checkpoint and a requeue, and the resumed run ends bit for bit where an
uninterrupted one does; the hand-written ``srun torchrun`` script does the same through torchrun."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from train_helpers import tiny_overrides

from mlplab.errors import Interrupted
from mlplab.train import make_config, train
from mlplab.train.config import to_dict
from mlplab.train.distributed import DistInfo
from mlplab.train.preemption import StopSignals, warn_if_cpu_node

# 20 epochs of 16 steps: a signal sent after step 10 lands well inside the run
LONG = {"schedule.epochs": 20, "data.train_subset": 512, "run.log_every_steps": 5, "run.eval_every": 1,
        "run.checkpoint_every": 0}
TIMING = ("train_time_s", "epoch_time_s", "time_s", "images_per_s", "flops_per_s", "mfu")

FAKE_SCONTROL = """#!/bin/sh
# "show hostnames LIST" prints this host; anything else (requeue JOB) is written to the log
if [ "$1" = show ] && [ "$2" = hostnames ]; then echo localhost; exit 0; fi
echo "$@" >> "$FAKE_SCONTROL_LOG"
exit "${FAKE_SCONTROL_EXIT:-0}"
"""
FAKE_SRUN = """#!/bin/sh
# one task, and this process becomes it: its pid is the one Slurm would signal
echo $$ > "$FAKE_SRUN_PID"
exec "$@"
"""


@pytest.fixture
def fake_slurm(tmp_path, subprocess_env, monkeypatch):
    """The environment of a process in Slurm job 4242, with fake ``scontrol`` and ``srun``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL), ("srun", FAKE_SRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = dict(subprocess_env, SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="1", SLURM_JOB_NODELIST="localhost",
               FAKE_SCONTROL_LOG=str(tmp_path / "scontrol.log"), FAKE_SRUN_PID=str(tmp_path / "srun.pid"),
               PATH=f"{bin_dir}{os.pathsep}{subprocess_env['PATH']}")
    return env


def _steps_logged(run_dir: Path) -> int:
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    return max((json.loads(x)["step"] for x in lines if x.endswith("}")), default=0)


def _signal_after(proc: subprocess.Popen, run_dir: Path, step: int, pid: int | None = None) -> None:
    deadline = time.monotonic() + 300
    while _steps_logged(run_dir) < step:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
    os.kill(pid or proc.pid, signal.SIGUSR1)


def _timeless(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING}
            for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run the interrupted ones must end equal to (weights digest, metrics without timings)."""
    out = tmp_path_factory.mktemp("ref")
    res = train(make_config(None, tiny_overrides(out, "ref", **LONG)))
    return res["weights_sha256"], _timeless(Path(res["run_dir"])), res["test_acc"]


def test_sigusr1_checkpoints_mid_epoch_requeues_and_the_run_resumes_bit_for_bit(tmp_path, fake_slurm, uninterrupted):
    cfg = make_config(None, tiny_overrides(tmp_path / "runs", "pre", **LONG))
    cfg_file = tmp_path / "pre.json"
    cfg_file.write_text(json.dumps(to_dict(cfg)))
    run_dir = tmp_path / "runs" / "pre"
    p = subprocess.Popen([sys.executable, "-m", "mlplab.cli", "train", str(cfg_file)], env=fake_slurm, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _signal_after(p, run_dir, 10)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 128 + signal.SIGUSR1, err
    state = torch.load(run_dir / "checkpoint" / "state.pt", weights_only=True)
    step, epoch = state["step"], state["epoch"]
    assert 10 <= step < 320 and state["position"] == step - 16 * epoch > 0  # mid-epoch
    assert err.strip().splitlines()[-1] == (
        f"mlplab train: stopped by SIGUSR1 after step {step} (epoch {epoch + 1}) of {run_dir}; its checkpoint is "
        f"written; Slurm job 4242 requeued: it resumes from there; continue with mlplab train {cfg_file} --resume")
    assert (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"
    assert not (run_dir / "results.json").exists() and not (run_dir / "train_curves.png").exists()

    res = train(cfg, resume=True)  # what the requeued job does
    sha, metrics, test_acc = uninterrupted
    assert res["weights_sha256"] == sha and res["test_acc"] == test_acc
    assert _timeless(run_dir) == metrics  # step and epoch records, the ones before the stop included
    assert (run_dir / "train_curves.png").is_file()


@pytest.mark.slow
def test_the_srun_torchrun_script_passes_sigusr1_on_and_the_requeued_job_resumes(tmp_path, fake_slurm, uninterrupted):
    """``<run>/job.sbatch`` as Slurm runs it (fake ``srun``: one node, one task): SIGUSR1 to the
    task, torchrun, reaches the run through ``--signals-to-handle``; the job is requeued and the
    run, continued as the requeued job continues it, ends equal to the uninterrupted one."""
    from mlplab.experiments import Sweep, run_sweep
    from mlplab.experiments.executors import execute_run

    base = {k: v for k, v in tiny_overrides(tmp_path, "x", **LONG).items() if k not in ("run.out_dir", "run.name")}
    res = run_sweep(Sweep("pre", base, [("run.seed", [0])]), tmp_path / "out", executor="slurm",
                    slurm={"submit": False}, verbose=False)
    (run_dir,) = res.run_dirs.values()
    p = subprocess.Popen(["bash", str(run_dir / "job.sbatch")], env=fake_slurm, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not (tmp_path / "srun.pid").exists() or not (tmp_path / "srun.pid").read_text().strip():
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.01)
    _signal_after(p, run_dir, 10, pid=int((tmp_path / "srun.pid").read_text()))
    _, err = p.communicate(timeout=300)
    assert p.returncode != 0 and "mlplab worker: stopped by SIGUSR1 after step" in err, err
    assert (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"
    assert 0 < torch.load(run_dir / "checkpoint" / "state.pt", weights_only=True)["position"]
    assert execute_run(run_dir) == "done"
    sha, metrics, _ = uninterrupted
    assert json.loads((run_dir / "results.json").read_text())["weights_sha256"] == sha
    assert _timeless(run_dir) == metrics


# ----------------------------------------------------------------------------- the signals themselves

def test_under_slurm_sigterm_stops_at_the_next_step_without_requeueing(monkeypatch, tmp_path):
    """SIGTERM is also what ``scancel`` sends: it stops the run cleanly but never requeues."""
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: a requeue attempt would show in the message
    with StopSignals(DistInfo(), 50, torch.device("cpu")) as stop:
        assert not stop.requested(1)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered before kill returns (Python runs the handler next)
        assert stop.requested(2) and stop.requested(3)  # once agreed, it stays
        with pytest.raises(Interrupted) as e:
            stop.stop(tmp_path, 2, 1)
    assert e.value.signum == signal.SIGTERM
    assert e.value.message == (f"stopped by SIGTERM after step 2 (epoch 1) of {tmp_path}; its checkpoint is written; "
                               "Slurm job 77 resumes from there if Slurm requeues it")


def test_outside_slurm_sigterm_keeps_its_meaning_and_usr1_resumes_by_hand(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals(DistInfo(), 50, torch.device("cpu")) as stop:
        assert signal.getsignal(signal.SIGTERM) is before
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop.requested(1)
        with pytest.raises(Interrupted, match=r"stopped by SIGUSR2 .*; it resumes from there with --resume$"):
            stop.stop(tmp_path, 1, 1)
    assert signal.getsignal(signal.SIGUSR2) is not stop._handler  # handlers restored on exit


def test_a_failed_requeue_is_said(monkeypatch, tmp_path, fake_slurm):
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("PATH", fake_slurm["PATH"])
    monkeypatch.setenv("FAKE_SCONTROL_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_SCONTROL_EXIT", "1")
    stop = StopSignals(DistInfo(), 1, torch.device("cpu"))
    stop._handler(signal.SIGUSR1, None)
    assert stop.requested(1)
    with pytest.raises(Interrupted, match=r"requeueing Slurm job 9 failed \(exit 1\); submit it again to resume$"):
        stop.stop(tmp_path, 1, 1)


def test_ddp_processes_agree_every_n_steps_and_the_strongest_request_wins(monkeypatch):
    """Every process asks at the same steps; only every ``every``-th step reduces the flags
    (MAX: requeue > stop > none), so a process that saw nothing stops with the others."""
    reduced = []

    def all_reduce(t, op):
        reduced.append(int(t))
        t.fill_(max(int(t), 2))  # the other process saw SIGUSR1

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    stop = StopSignals(DistInfo(rank=1, world_size=2), 4, torch.device("cpu"))
    assert [stop.requested(s) for s in (1, 2, 3)] == [False, False, False] and reduced == []
    assert stop.requested(4) and reduced == [0] and stop.requested(5) and reduced == [0]
    with pytest.raises(Interrupted, match=r"by SIGUSR1 .*; Slurm job 5 is requeued by rank 0$"):
        monkeypatch.setenv("SLURM_JOB_ID", "5")
        stop.stop(Path("r"), 4, 1)


def test_a_slurm_job_on_a_cpu_node_warns_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("SLURM_JOB_ID", "31")
    warn_if_cpu_node(torch.device("cpu"), "auto", DistInfo())
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("mlplab train: warning: Slurm job 31 runs on ")
    assert "no GPU is usable; training on CPU" in err
    for device, choice, dist in ((torch.device("cpu"), "cpu", DistInfo()),  # asked for: no warning
                                 (torch.device("cpu"), "auto", DistInfo(rank=1, world_size=2)),  # rank 0 says it
                                 (torch.device("meta"), "auto", DistInfo())):
        warn_if_cpu_node(device, choice, dist)
    monkeypatch.delenv("SLURM_JOB_ID")
    warn_if_cpu_node(torch.device("cpu"), "auto", DistInfo())  # not under Slurm
    assert capsys.readouterr().err == ""
