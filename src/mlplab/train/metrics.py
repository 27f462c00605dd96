"""Measuring a run: the machine's matmul rate for MFU (the progress bar: :mod:`mlplab.utils.progress`).

MFU follows nanoGPT's ``estimate_mfu``: achieved FLOP/s = 3 × forward FLOPs × images/s (forward
FLOPs from ``mlplab.models.counting.count_flops``; the backward pass costs about twice the
forward), divided by what the machine can do. Instead of a
datasheet peak we *measure* the machine's dense matmul rate once per (device, dtype, threads) at
the run's precision, so the number is honest on CPUs (where no datasheet applies).

On a shared machine a rate measured while others compute is too low, and an MFU against it
can pass 100%. So the rate is the best of several short timings (a slice lost to another process
lowers one of them, not the best), the larger of every measurement this process made, and
measured again as soon as the run itself goes faster than it (:class:`MatmulPeak`); a run still
faster than its device's measured rate reports no MFU. An MFU above 100% is never reported.
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from ..utils.machine import device_sync
from ..utils.progress import Progress  # noqa: F401  (the training loop's progress, re-exported)

__all__ = ["matmul_flops_per_s", "mfu", "MatmulPeak", "Progress"]


#: the best rate measured in this process per (device, dtype, threads)
_RATES: dict[tuple[str, str, int], float] = {}


def _matmul_rate(device_str: str, dtype_str: str, threads: int, blocks: int = 5) -> float:
    """FLOP/s of a square GEMM at ``dtype``: the best of ``blocks`` timings of ~0.06 s each."""
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
    sync = device_sync(device)
    g = torch.Generator(device=device).manual_seed(0)  # never touch the global RNG of the run
    while True:  # grow the matrices until one product takes a measurable time
        a = torch.randn(n, n, device=device, generator=g).to(dtype)
        b = torch.randn(n, n, device=device, generator=g).to(dtype)
        op(a, b)
        sync()
        t0 = time.perf_counter()
        op(a, b)
        sync()
        dt = time.perf_counter() - t0
        if dt > 0.05 or n >= n_max:
            break
        n *= 2
    reps = max(1, min(50, int(0.06 / max(dt, 1e-6))))  # about 0.06 s per block
    best = 0.0
    for _ in range(blocks):
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            op(a, b)
        sync()
        best = max(best, 2.0 * n**3 * reps / (time.perf_counter() - t0))
    return best


def matmul_flops_per_s(device: torch.device, dtype: torch.dtype, *, again: bool = False) -> float:
    """Measured dense matmul FLOP/s of ONE device (this process's) at ``dtype``: the best this
    process has measured (``again``: measure once more first)."""
    key = (str(device), str(dtype).replace("torch.", ""), torch.get_num_threads())
    if again or key not in _RATES:
        _RATES[key] = max(_RATES.get(key, 0.0), _matmul_rate(*key))
    return _RATES[key]


def mfu(flops_per_s: float, peak_per_device: float, world_size: int = 1) -> float:
    """Model FLOPs utilisation: the run's achieved FLOP/s over all its ``world_size`` processes,
    divided by what those devices can do together (each process measures its own device)."""
    return flops_per_s / (peak_per_device * max(1, world_size))


class MatmulPeak:
    """The rate a run's MFU divides by (module docstring): measured at the start, and once more
    when the run goes faster than it (the start was measured on a busy machine)."""

    def __init__(self, device: torch.device, dtype: torch.dtype):
        self.device, self.dtype = device, dtype
        self.rate = matmul_flops_per_s(device, dtype)
        self.remeasured = False

    def mfu(self, flops_per_s: float, world_size: int = 1) -> float | None:
        """The MFU of ``flops_per_s``, or None when the run is faster than its device's measured
        rate even after measuring it again (never a number above 1)."""
        u = mfu(flops_per_s, self.rate, world_size)
        if u > 1.0 and not self.remeasured:
            self.remeasured = True
            self.rate = matmul_flops_per_s(self.device, self.dtype, again=True)
            u = mfu(flops_per_s, self.rate, world_size)
        return u if u <= 1.0 else None
