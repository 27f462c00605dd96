"""The machine a timing ran on, recorded beside the numbers so that a reader can judge them.

One record for every timing the project writes: the inference experiment
(the ``inference`` task, :func:`mlplab.experiments.tasks.inference_task`, its ``machine``) and the benchmarks
(``benchmarks/common.environment``, which keeps its published names of two keys).
"""
from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable

import torch

from .cpu import cpu_has_native_bf16, cpu_info, machine_tag

__all__ = ["MATMUL_FLAGS", "machine_record", "host_memory_available", "device_sync", "run_cpu_seconds"]

#: the /proc/cpuinfo flags that decide the fastest matmul path (``cpu_flags`` lists those present)
MATMUL_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "avx512f", "avx2"})


def device_sync(device: torch.device) -> Callable[[], None]:
    """What to call before reading the clock: ``torch.cuda.synchronize`` on CUDA (kernels run
    asynchronously), nothing on a CPU."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


_cpu_at_last_run_end = [0.0]  # this process's CPU seconds when its previous run ended


def run_cpu_seconds() -> float:
    """CPU seconds this process spent on the run that ends now: since its previous run ended, or
    since the process started for its first (a worker of its own counts the interpreter's start-up
    as its run's). Each call ends a run. Several runs in one process (the inline executor, a
    notebook) each get their own share, not the process's total."""
    now = time.process_time()
    spent, _cpu_at_last_run_end[0] = now - _cpu_at_last_run_end[0], now
    return spent


def host_memory_available() -> int | None:
    """Bytes of host memory a new allocation can have now without swapping (``MemAvailable`` of
    ``/proc/meminfo``); None where the kernel does not say."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def _cpu_capability() -> str:
    """The vector ISA PyTorch's CPU kernels were dispatched to (``AVX512``, ``AVX2``, ...)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # a torch without torch.backends.cpu
        return "unknown"


def machine_record(device: torch.device | str = "cpu") -> dict[str, Any]:
    """What a reader needs to judge timings made on ``device``:

    * ``cpu`` (model name), ``machine_tag`` (family and matmul path, as in result file names),
      ``cpu_flags`` (those of :data:`MATMUL_FLAGS` present), ``cpu_capability`` (PyTorch's
      dispatch), ``native_bf16`` (AVX512-BF16 or AMX: bf16 faster than fp32), ``cpu_count``;
    * ``torch``, ``python``, ``platform``, ``threads`` (``torch.get_num_threads()``);
    * ``loadavg`` (1, 5, 15 min) and ``time_utc`` when recorded;
    * ``device`` and ``gpu`` (its name when ``device`` is CUDA and one is present, else None).
    """
    device = torch.device(device)
    info = cpu_info()
    flags = set(info.get("flags", "").split())
    cuda = device.type == "cuda" and torch.cuda.is_available()
    return {
        "cpu": info.get("model name") or platform.processor(),
        "machine_tag": machine_tag(),
        "cpu_flags": sorted(MATMUL_FLAGS & flags),
        "cpu_capability": _cpu_capability(),
        "native_bf16": cpu_has_native_bf16(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "loadavg": list(os.getloadavg()),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if cuda else None,
    }
