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
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import BadInput
from ..utils.seeds import derive_generator

__all__ = ["DistInfo", "init_distributed", "shard_indices", "all_reduce_sum", "barrier", "cleanup",
           "DEFAULT_TIMEOUT_MIN", "BACKENDS"]

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


def init_distributed(device_type: str) -> DistInfo:
    """Join the process group described by torchrun's env vars; a no-op without them.

    On CUDA the rank's GPU (``LOCAL_RANK``) becomes the current device before anything else
    touches CUDA, so no rank opens a context on GPU 0, and NCCL is bound to it (``device_id``);
    ``MLPLAB_DIST_BACKEND`` chooses another backend (:data:`BACKENDS`).
    ``LOCAL_RANK`` must be given: the global rank is not a GPU index on a second node."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    missing = [k for k in ("RANK", "LOCAL_RANK") if k not in os.environ]
    if missing:
        raise BadInput(f"WORLD_SIZE={world} but {' and '.join(missing)} not set; launch with torchrun "
                       "(or set RANK and LOCAL_RANK for every process)")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    backend = os.environ.get("MLPLAB_DIST_BACKEND") or ("nccl" if device_type == "cuda" else "gloo")
    if backend not in BACKENDS or (backend == "nccl" and device_type != "cuda"):
        raise BadInput(f"MLPLAB_DIST_BACKEND={backend} on {device_type}: use gloo (any device) or nccl (CUDA), "
                       "or unset it")
    if not dist.is_initialized():
        timeout = datetime.timedelta(minutes=float(os.environ.get("MLPLAB_DIST_TIMEOUT_MIN", DEFAULT_TIMEOUT_MIN)))
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        if backend == "nccl":  # bound to this rank's GPU
            dist.init_process_group(backend="nccl", timeout=timeout, device_id=torch.device("cuda", local_rank))
        else:
            dist.init_process_group(backend="gloo", timeout=timeout)
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


def cleanup(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
