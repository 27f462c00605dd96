"""Several processes (``torchrun --nproc_per_node=N``): DistributedDataParallel from env vars.

The same ``mlplab train`` command runs single-process or under torchrun. Under torchrun
(``WORLD_SIZE`` > 1) the process group is initialised from the environment (nccl on CUDA, gloo
on CPU), each rank trains on its shard of every epoch's global permutation, rank 0 alone logs and
writes files, and metrics are all-reduced.

Sharding: every rank draws the same permutation of the training set for epoch e (seed, e) and
takes the strided slice ``perm[rank::world]``. Batch k of rank r then holds positions
``k·B + r, k·B + r + world, ...`` of the permutation, so the union over ranks of batch k is exactly
batch k of a 1-process run with global batch B — and since DDP averages gradients over ranks,
the two runs take the same steps (up to float summation order).

Under Slurm without torchrun (``srun`` with one task per GPU: ``--ntasks-per-node=G``, as submitit
starts a multi-task job) the same roles come from Slurm's variables (:func:`launch_env`): the rank
from ``SLURM_PROCID``, the world size from ``SLURM_STEP_NUM_TASKS``, the local rank (the GPU) from
``SLURM_LOCALID``, and the processes meet on the step's first node at a port derived from the job id
(``MASTER_ADDR``/``MASTER_PORT`` override both). torchrun's variables, when set, win.
"""
from __future__ import annotations

import datetime
import gc
import os
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import BadInput
from ..utils.seeds import derive_generator

__all__ = [
    "BACKENDS",
    "DEFAULT_TIMEOUT_MIN",
    "DistInfo",
    "Launch",
    "all_reduce_sum",
    "barrier",
    "cleanup",
    "first_host",
    "init_distributed",
    "launch_env",
    "shard_indices",
]

#: How long a collective may wait for the slowest rank before the run fails (``MLPLAB_DIST_TIMEOUT_MIN``).
#: Long enough for rank 0 to write a checkpoint or evaluate while the others wait at a barrier.
DEFAULT_TIMEOUT_MIN = 30


#: ``MLPLAB_DIST_BACKEND``: the process group's backend; unset, nccl on CUDA and gloo on the CPU.
#: ``gloo`` on CUDA lets several ranks share one GPU (NCCL refuses two ranks on one device): how
#: ``scripts/gpu_check.py`` runs real DDP, its all-reduces and ``no_sync``, on a one-GPU node.
BACKENDS = ("nccl", "gloo")


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class Launch:
    """This process's place in a multi-process run, read from the environment (:func:`launch_env`)."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    init_method: str = "env://"  # torchrun: MASTER_ADDR/MASTER_PORT; srun: tcp://first-node:port


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``gpu[003-008,012],cpu1`` -> ``gpu003``."""
    head = re.match(r"[^,\[]*(\[[^\]]*\][^,\[]*)*", nodelist.strip()).group(0)
    return re.sub(r"\[([^\]\-,]*)[^\]]*\]", r"\1", head)


def launch_env(environ: Mapping[str, str] | None = None) -> Launch:
    """Who this process is: torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` when ``WORLD_SIZE``
    is set; else, in a Slurm step of several tasks (srun sets ``SLURM_STEP_NUM_TASKS``; a batch
    script alone does not), Slurm's task variables (module docstring); else one process."""
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    if "WORLD_SIZE" in env:
        if world <= 1:
            return Launch()
        missing = [k for k in ("RANK", "LOCAL_RANK") if k not in env]
        if missing:
            raise BadInput(f"WORLD_SIZE={world} but {' and '.join(missing)} not set; launch with torchrun "
                           "(or set RANK and LOCAL_RANK for every process)")
        return Launch(int(env["RANK"]), world, int(env["LOCAL_RANK"]))
    tasks = int(env.get("SLURM_STEP_NUM_TASKS", "1"))
    if tasks <= 1:
        return Launch()
    host = env.get("MASTER_ADDR") or first_host(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
    port = env.get("MASTER_PORT") or str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
    return Launch(int(env["SLURM_PROCID"]), tasks, int(env["SLURM_LOCALID"]), f"tcp://{host}:{port}")


def init_distributed(device_type: str) -> DistInfo:
    """Join the process group described by torchrun's (or srun's) env vars; a no-op without them.

    On CUDA the rank's GPU (``LOCAL_RANK``) becomes the current device before anything else
    touches CUDA, so no rank opens a context on GPU 0, and NCCL is bound to it (``device_id``);
    ``MLPLAB_DIST_BACKEND`` chooses another backend (:data:`BACKENDS`).
    ``LOCAL_RANK`` must be given: the global rank is not a GPU index on a second node."""
    launch = launch_env()
    if launch.world_size <= 1:
        return DistInfo()
    local_rank = launch.local_rank
    backend = os.environ.get("MLPLAB_DIST_BACKEND") or ("nccl" if device_type == "cuda" else "gloo")
    if backend not in BACKENDS or (backend == "nccl" and device_type != "cuda"):
        raise BadInput(f"MLPLAB_DIST_BACKEND={backend} on {device_type}: use gloo (any device) or nccl (CUDA), "
                       "or unset it")
    if not dist.is_initialized():
        timeout = datetime.timedelta(minutes=float(os.environ.get("MLPLAB_DIST_TIMEOUT_MIN", DEFAULT_TIMEOUT_MIN)))
        where = {} if launch.init_method == "env://" else {"init_method": launch.init_method, "rank": launch.rank,
                                                           "world_size": launch.world_size}
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        if backend == "nccl":  # bound to this rank's GPU
            dist.init_process_group(backend="nccl", timeout=timeout, device_id=torch.device("cuda", local_rank),
                                    **where)
        else:
            dist.init_process_group(backend="gloo", timeout=timeout, **where)
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank)


def shard_indices(n: int, epoch: int, seed: int, info: DistInfo, shuffle: bool = True,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """This rank's indices into the n training examples for ``epoch`` (see module docstring).
    Every rank gets the same count (the tail that does not divide evenly is left out)."""
    if shuffle:
        g = derive_generator(seed, "shard", epoch)
        perm = torch.randperm(n, generator=g)
    else:
        perm = torch.arange(n)
    per_rank = n // info.world_size
    return perm[info.rank::info.world_size][:per_rank].to(device)


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def cleanup(info: DistInfo, failed: BaseException | None = None) -> None:
    """Leave the process group (destroy it), after a run ended or ``failed`` with an exception.

    After a failure the exception's frames still hold the run's DDP wrapper, whose reducer holds
    the group: freed later by the reducer, the group joins gloo's worker threads while holding the
    GIL, and a worker that is just freeing a finished collective's tensor waits for the GIL — a
    deadlock (one rank in 15 here, after a run stopped right after a checkpoint's barrier). So the
    failed frames' variables are dropped and garbage collected first, and the group is freed here,
    by ``destroy_process_group``, which releases the GIL while it waits for the workers. The cost:
    a post-mortem debugger sees those frames without their variables."""
    if not (info.enabled and dist.is_initialized()):
        return
    if failed is not None:
        _drop_frames(failed)
        gc.collect()
    dist.destroy_process_group()


def _drop_frames(failed: BaseException) -> None:
    """Clear the variables of every finished frame in the tracebacks of ``failed``, its cause and
    context (and theirs), and an exception group's members."""
    todo, seen = [failed], set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
