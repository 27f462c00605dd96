"""Measuring a run: the machine's matmul rate for MFU (the progress bar: :mod:`mlplab.utils.progress`).

MFU follows nanoGPT's ``estimate_mfu``: achieved FLOP/s = 3 × forward FLOPs × images/s (forward
FLOPs from ``mlplab.models.counting.count_flops``; the backward pass costs about twice the
forward), divided by what the machine can do. Instead of a
datasheet peak we *measure* the machine's dense matmul rate once per (device, dtype, threads) at
the run's precision, so the number is honest on CPUs (where no datasheet applies) and on a
shared machine.
"""
from __future__ import annotations

import functools
import time

import torch
import torch.nn.functional as F

from ..utils.progress import Progress  # noqa: F401  (the training loop's progress, re-exported)

__all__ = ["matmul_flops_per_s", "mfu", "Progress"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@functools.lru_cache(maxsize=None)
def _matmul_rate(device_str: str, dtype_str: str, threads: int) -> float:
    device = torch.device(device_str)
    dtype = getattr(torch, dtype_str)
    autocast = dtype != torch.float32

    def op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # the op a training step runs: nn.Linear under autocast at low precision (on CPU,
        # autocast's oneDNN bf16 gemm is ~10x faster than `a @ b` on bf16 tensors). The operands
        # are cast beforehand, so the rate is the GEMM's alone, without the casts.
        with torch.autocast(device.type, dtype=dtype, enabled=autocast):
            return F.linear(a, b)

    n, n_max = (2048, 8192) if device.type == "cuda" else (256, 1024)
    g = torch.Generator(device=device).manual_seed(0)  # never touch the global RNG of the run
    while True:  # grow the matrices until one product takes a measurable time
        a = torch.randn(n, n, device=device, generator=g).to(dtype)
        b = torch.randn(n, n, device=device, generator=g).to(dtype)
        op(a, b)
        _sync(device)
        t0 = time.perf_counter()
        op(a, b)
        _sync(device)
        dt = time.perf_counter() - t0
        if dt > 0.05 or n >= n_max:
            break
        n *= 2
    reps = max(2, min(50, int(0.3 / max(dt, 1e-6))))  # about 0.3 s in all
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        op(a, b)
    _sync(device)
    return 2.0 * n**3 * reps / (time.perf_counter() - t0)


def matmul_flops_per_s(device: torch.device, dtype: torch.dtype) -> float:
    """Measured dense matmul FLOP/s of ONE device (this process's) at ``dtype`` (cached)."""
    return _matmul_rate(str(device), str(dtype).replace("torch.", ""), torch.get_num_threads())


def mfu(flops_per_s: float, peak_per_device: float, world_size: int = 1) -> float:
    """Model FLOPs utilisation: the run's achieved FLOP/s over all its ``world_size`` processes,
    divided by what those devices can do together (each process measures its own device)."""
    return flops_per_s / (peak_per_device * max(1, world_size))
