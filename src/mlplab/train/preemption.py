"""Surviving the end of a cluster job: stop at a step boundary on Slurm's signal, checkpoint, requeue.

Slurm warns a job before it ends it: ``sbatch --signal=USR1@90`` sends SIGUSR1 90 s before the time
limit (submitit asks for SIGUSR2), and preemption or ``scancel`` send SIGTERM. While
:func:`mlplab.train.train` runs, SIGUSR1 and SIGUSR2 — and, inside a Slurm job, SIGTERM — only
raise a flag. The loop finishes the step it is in, writes a checkpoint at that step boundary
(mid-epoch: the loader's position, the epoch's running sums and the step log go with it), and stops
with :class:`~mlplab.errors.Interrupted`, whose message says where. After SIGUSR1/SIGUSR2 inside a
Slurm job, rank 0 first requeues the job (``scontrol requeue $SLURM_JOB_ID``, as submitit and
Lightning do): it starts again, and the run resumes from that checkpoint bit for bit. SIGTERM
never requeues, because ``scancel`` sends it too; Slurm requeues a preempted job itself (a
partition with ``PreemptMode=REQUEUE``, a job submitted with ``--requeue``). Outside Slurm, SIGTERM
keeps its usual meaning (``mlplab.cli``: stop now, keep the last checkpoint).

Under DistributedDataParallel every process must stop after the same step, so the processes agree
every ``run.nan_check_every`` steps (one all-reduce of a flag, next to the NaN guard's read): a
signal takes effect within that many steps. A single process stops after the step it is in.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import torch

from ..errors import Interrupted
from .distributed import DistInfo

__all__ = ["REQUEUE_SIGNALS", "StopSignals", "requeue", "slurm_job_id", "warn_if_cpu_node"]

#: the signals a scheduler sends before a job's time runs out (Slurm ``--signal``; submitit uses USR2)
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
_STOP, _REQUEUE = 1, 2  # what the processes agree on (the larger wins)


def slurm_job_id() -> str | None:
    """The Slurm job this process runs in (``SLURM_JOB_ID``), or None outside Slurm."""
    return os.environ.get("SLURM_JOB_ID") or None


def requeue(job_id: str) -> str:
    """``scontrol requeue JOB``: the job goes back to the queue and starts again from its script.
    Returns what happened, in words, for the run's last message."""
    try:
        done = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"requeueing Slurm job {job_id} failed ({e}); submit it again to resume"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        why = why[-1] if why else f"exit {done.returncode}"
        return f"requeueing Slurm job {job_id} failed ({why}); submit it again to resume"
    return f"Slurm job {job_id} requeued: it resumes from there"


class StopSignals:
    """While entered, the stop signals (module docstring) set a flag instead of stopping the process.

    :meth:`requested` is asked after every step; it reads the flag on the host (no device sync)
    and, under DDP, agrees with the other processes every ``every`` steps. Once it says yes it
    keeps saying yes. Handlers are installed only on the main thread (Python's rule); elsewhere
    the run simply never sees a stop request."""

    def __init__(self, dist: DistInfo, every: int, device: torch.device):
        self.dist, self.every, self.device = dist, max(1, int(every)), device
        self.received: list[int] = []  # signal numbers, in order of arrival
        self._agreed = 0
        self._old: dict[int, Any] = {}

    def signals(self) -> tuple[int, ...]:
        return REQUEUE_SIGNALS + ((signal.SIGTERM,) if slurm_job_id() else ())

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in self.signals():
                self._old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old.clear()

    def _handler(self, signum: int, frame: Any) -> None:
        self.received.append(signum)  # the same signal may come twice (Slurm and torchrun both forward it)

    def _local(self) -> int:
        if not self.received:
            return 0
        return _REQUEUE if any(s in REQUEUE_SIGNALS for s in self.received) else _STOP

    def requested(self, step: int) -> bool:
        """Whether to stop after ``step`` (1-based count of steps done)."""
        if self._agreed or (self.dist.enabled and step % self.every):
            return bool(self._agreed)
        code = self._local()
        if self.dist.enabled:
            flag = torch.tensor([code], dtype=torch.long, device=self.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            code = int(flag.item())
        self._agreed = code
        return bool(code)

    def stop(self, run_dir: Path, step: int, epoch: int) -> None:
        """After the checkpoint of ``step`` is written: requeue the Slurm job (rank 0, after
        SIGUSR1/SIGUSR2) and raise :class:`Interrupted` naming the signal and the checkpoint."""
        signum = next((s for s in self.received if s in REQUEUE_SIGNALS), self.received[0] if self.received
                      else REQUEUE_SIGNALS[0])  # another rank's signal: name ours, or USR1
        job = slurm_job_id()
        if self._agreed == _REQUEUE and job is not None:
            after = requeue(job) if self.dist.is_main else f"Slurm job {job} is requeued by rank 0"
        else:
            after = "it resumes from there with --resume" if job is None else \
                f"Slurm job {job} resumes from there if Slurm requeues it"
        raise Interrupted(f"stopped by {signal.Signals(signum).name} after step {step} (epoch {epoch}) of "
                          f"{run_dir}; its checkpoint is written; {after}", signum)


def warn_if_cpu_node(device: torch.device, choice: str, dist: DistInfo) -> None:
    """One line on stderr when a Slurm job trains on CPU without having asked for it
    (``run.device=auto`` on a node where CUDA is not usable)."""
    job = slurm_job_id()
    if job is None or device.type != "cpu" or choice == "cpu" or not dist.is_main:
        return
    print(f"mlplab train: warning: Slurm job {job} runs on {socket.gethostname()}, where no GPU is usable; training "
          "on CPU (ask for GPUs with sbatch --gpus-per-node=N or --slurm gpus_per_node=N, or set run.device=cpu)",
          file=sys.stderr, flush=True)
