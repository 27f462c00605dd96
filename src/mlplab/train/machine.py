"""What this machine offers a run, in one dict (``mlplab info``): torch, the CPU and its bf16
support, threads, whether ``torch.compile`` works, the fused kernels, CUDA devices, and where the
datasets, kernels and Hub downloads are kept."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..data.datasets import _present, search_dirs
from ..data.download import cache_dir as data_cache_dir
from ..data.table import DATASETS
from ..interop.hub import hub_cache_dir
from ..layers import fused
from ..models.registry import get_pretrained, list_models
from ..utils.cpu import cpu_has_native_bf16, cpu_info
from ..version import __version__
from .backend import cpp_compiler

__all__ = ["machine_info", "check_compile", "COMPILE_CHECK"]

#: the program ``check_compile`` runs in a fresh interpreter: one tiny function, compiled and run
COMPILE_CHECK = ("import torch\n"
                 "f = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2 + 1)\n"
                 "assert torch.allclose(f(torch.ones(8)), torch.nn.functional.gelu(torch.ones(8)) * 2 + 1)\n")


def check_compile(timeout: float = 180.0, program: str = COMPILE_CHECK) -> dict[str, Any]:
    """Run ``program`` (a tiny ``torch.compile``) in a subprocess: ``{"works", "seconds", "reason"}``.

    A subprocess, so that a compiler crash or hang cannot take this process with it; ``reason``
    is the last line of its error output, or that it ran past ``timeout`` seconds."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"works": False, "seconds": round(time.perf_counter() - t0, 1),
                "reason": f"no result within {timeout:g} s"}
    seconds = round(time.perf_counter() - t0, 1)
    if proc.returncode == 0:
        return {"works": True, "seconds": seconds, "reason": None}
    last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    return {"works": False, "seconds": seconds, "reason": last}


def _datasets() -> dict[str, str | None]:
    """Each file-backed dataset's folder on this machine (its test split), or None."""
    out = {}
    for name, info in DATASETS.items():
        if not info.files:  # synthetic, image folders: nothing to find
            continue
        out[name] = next((str(d) for d in search_dirs(info, None) if _present(info, d, "test")), None)
    return out


def _cached_weights() -> list[str]:
    """The published weights (``ARCH.TAG``) already in the Hub cache."""
    cache = Path(hub_cache_dir())
    return [n for n in list_models(pretrained=True)
            if (cache / ("models--" + get_pretrained(n)["hf_hub_id"].replace("/", "--")) / "snapshots").is_dir()]


def _cuda() -> list[dict[str, Any]]:
    if not torch.cuda.is_available():
        return []
    devices = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        devices.append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                        "memory_gib": round(p.total_memory / 2**30, 1)})
    return devices


def machine_info(compile_check: bool = True, timeout: float = 180.0) -> dict[str, Any]:
    """The setup ``mlplab info`` prints (``compile_check=False`` skips the compile, ~10-60 s)."""
    flags = set(cpu_info().get("flags", "").split())
    info: dict[str, Any] = {
        "mlplab": __version__, "python": platform.python_version(), "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": {"model": cpu_info().get("model name", platform.processor() or "unknown"),
                "machine": cpu_info().get("machine"),
                "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                "bf16": sorted({"avx512_bf16", "amx_bf16", "amx_tile"} & flags),
                "native_bf16": cpu_has_native_bf16(), "avx512": "avx512f" in flags},
        "threads": torch.get_num_threads(),
        "cpp_compiler": cpp_compiler(),
        "compile": check_compile(timeout) if compile_check else None,
        "fused_kernels": fused.status(),
        "cuda": _cuda(),
        "folders": {"data_cache": str(data_cache_dir()), "kernel_cache": str(fused.build.cache_dir()),
                    "hub_cache": hub_cache_dir()},
        "datasets": _datasets(),
        "cached_weights": _cached_weights(),
    }
    return info
