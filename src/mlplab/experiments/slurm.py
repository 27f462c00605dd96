"""Slurm jobs for a sweep's runs: one job per run, submitted through submitit or by hand.

``mlplab sweep/reproduce --executor slurm`` submits one job per run through submitit
(:mod:`mlplab.experiments.executors`); ``--slurm KEY=VALUE`` are submitit's parameters. With
``--slurm gpus_per_node=G`` (G > 1, and ``nodes=N``) a training run is ONE DistributedDataParallel
run over N·G processes: the job runs G tasks per node, one per GPU, and each task takes its rank
and GPU from Slurm (``SLURM_PROCID``, ``SLURM_LOCALID``: :func:`mlplab.train.distributed.launch_env`).

Beside every run the executor writes ``<run>/job.sbatch`` (:func:`sbatch_script`), the same run as
a script to read and submit by hand: one ``torchrun`` per node starts the G processes (``srun
torchrun``), ``--signal=USR1@90`` asks for SIGUSR1 90 s before the time limit, torchrun passes it to
its processes (``--signals-to-handle``) and gives them that long to stop (``--shutdown-timeout``);
the run checkpoints at the next step, rank 0 requeues the job and it resumes
(:mod:`mlplab.train.preemption`). ``--slurm submit=false`` writes the scripts and submits nothing.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from ..utils.io import atomic_write_text

__all__ = ["OUTPUT_FILE", "SBATCH_FILE", "SIGNAL_DELAY_S", "job_gpus", "sbatch_script", "spec_of", "write_sbatch"]

SBATCH_FILE = "job.sbatch"
OUTPUT_FILE = "slurm.out"  # every attempt of the job appends to it (a requeued job too)
#: seconds before the time limit at which Slurm sends SIGUSR1 (submitit's default too)
SIGNAL_DELAY_S = 90

# submitit's generic parameter names -> sbatch options (the others are slurm_<option>)
_GENERIC = {"nodes": "nodes", "gpus_per_node": "gpus-per-node", "timeout_min": "time", "name": "job-name"}
# submitit parameters that are no sbatch option of the script (or that the script sets itself)
_NOT_SBATCH = {"tasks_per_node", "cluster", "submit", "slurm_array_parallelism", "slurm_signal_delay_s",
               "slurm_additional_parameters", "slurm_setup", "slurm_srun_args", "slurm_use_srun",
               "slurm_stderr_to_stdout", "cpus_per_task", "mem_gb", "slurm_mem", "slurm_ntasks_per_node"}


def job_gpus(params: dict[str, Any]) -> int:
    """GPUs per node of a job with these submitit parameters (``gpus_per_node``, 0 when absent)."""
    return int(params.get("gpus_per_node") or 0)


def _options(params: dict[str, Any], run_dir: Path, cwd: Path) -> dict[str, Any]:
    """The sbatch options of the script, in the order they are written."""
    gpus = job_gpus(params)
    opts: dict[str, Any] = {"job-name": run_dir.name, "nodes": 1, "ntasks-per-node": 1}
    for k, v in params.items():
        if k in _NOT_SBATCH or v is None:
            continue
        opts[_GENERIC.get(k) or k.removeprefix("slurm_").replace("_", "-")] = v
    if not gpus:
        opts.pop("gpus-per-node", None)
    if params.get("cpus_per_task"):  # submitit's count per task = per GPU; here one task holds them all
        opts["cpus-per-task"] = int(params["cpus_per_task"]) * max(gpus, 1)
    if params.get("mem_gb") or params.get("slurm_mem"):
        opts["mem"] = f"{params['mem_gb']}G" if params.get("mem_gb") else params["slurm_mem"]
    opts.update(params.get("slurm_additional_parameters") or {})
    delay = int(params.get("slurm_signal_delay_s") or SIGNAL_DELAY_S)
    opts.update({"signal": f"USR1@{delay}", "requeue": True, "open-mode": "append",
                 "output": str(run_dir / OUTPUT_FILE), "chdir": str(cwd)})
    return opts


def sbatch_script(run_dir: str | os.PathLike, params: dict[str, Any] | None = None, *,
                  python: str | None = None, cwd: str | os.PathLike | None = None) -> str:
    """The ``srun torchrun`` sbatch script of the run in ``run_dir`` (its ``spec.json``), with the
    job's submitit ``params`` (``gpus_per_node``, ``nodes``, ``timeout_min``, ``slurm_partition``,
    ...). ``python``: the interpreter of the job (default: this one); ``cwd``: where the job runs
    (default: here; a run's relative paths, such as ``data.root``, are read from there)."""
    run_dir = Path(run_dir).resolve()
    params = dict(params or {})
    python = python or sys.executable
    cwd = Path(cwd or os.getcwd()).resolve()
    spec = spec_of(run_dir)
    gpus = job_gpus(params)
    procs = max(gpus, 1) if spec.get("task", "train") == "train" else 1  # an analysis task is one process
    delay = int(params.get("slurm_signal_delay_s") or SIGNAL_DELAY_S)
    flags = [f"#SBATCH --{k}" if v is True else f"#SBATCH --{k}={shlex.quote(str(v))}"
             for k, v in _options(params, run_dir, cwd).items()]
    torchrun = [[python, "-m", "torch.distributed.run"],
                ['--nnodes="$SLURM_JOB_NUM_NODES"', f"--nproc-per-node={procs}"],
                ["--rdzv-backend=c10d", '--rdzv-id="$SLURM_JOB_ID"', '--rdzv-endpoint="$head:$port"'],
                ["--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
                 f"--shutdown-timeout={max(delay - 10, 10)}"],
                ["-m", "mlplab.experiments.worker", str(run_dir)]]
    setup = list(params.get("slurm_setup") or [])
    lines = ["#!/bin/bash",
             f"# One mlplab run as one Slurm job: {_shape(params)} (a torchrun per node).",
             "# Submit it by hand:",
             f"#     sbatch {shlex.quote(str(run_dir / SBATCH_FILE))}",
             f"# {delay} s before the time limit Slurm sends SIGUSR1; torchrun passes it on, the run writes a",
             "# checkpoint at the next step, rank 0 requeues this job, and it resumes from that checkpoint.",
             f"# The run: {json.dumps(spec.get('overrides', {}))}",
             *flags, "", *setup,
             'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
             "port=$((20000 + SLURM_JOB_ID % 20000))  # the port mlplab derives from the job id",
             "srun " + " \\\n    ".join(" ".join(_quote(a) for a in group) for group in torchrun), ""]
    return "\n".join(lines)


def write_sbatch(run_dir: str | os.PathLike, params: dict[str, Any] | None = None) -> Path:
    """Write :func:`sbatch_script` to ``<run_dir>/job.sbatch`` (atomically) and return its path."""
    path = Path(run_dir) / SBATCH_FILE
    atomic_write_text(path, sbatch_script(run_dir, params))
    return path


def _shape(params: dict[str, Any]) -> str:
    nodes, gpus = int(params.get("nodes") or 1), job_gpus(params)
    return f"{nodes} node(s) x {gpus} GPU(s), one process per GPU" if gpus else f"{nodes} node(s), one CPU process each"


def spec_of(run_dir: Path) -> dict[str, Any]:
    """The run's ``spec.json`` (empty when it cannot be read: the script is still written)."""
    try:
        spec = json.loads((run_dir / "spec.json").read_text())
    except (OSError, ValueError):
        return {}
    return spec if isinstance(spec, dict) else {}


def _quote(arg: str) -> str:
    """Shell-quote an argument, except the ones that expand a shell variable (written quoted)."""
    return arg if "$" in arg else shlex.quote(arg)
