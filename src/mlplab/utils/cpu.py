"""What this machine's CPU can do, read once per process from ``/proc/cpuinfo`` (Linux;
elsewhere empty).

The one place that reads it: ``run.precision=auto`` asks :func:`cpu_has_native_bf16`, the fused
kernels (:mod:`mlplab.layers.fused`) :func:`cpu_info` for their cache key and, on every call,
:func:`cpu_prefers_512_bit_vectors` for their build (a read costs ~45 µs; a training step calls
the kernels dozens of times).
"""
from __future__ import annotations

import functools
import platform
from types import MappingProxyType
from typing import Mapping

__all__ = ["cpu_info", "cpu_has_native_bf16", "cpu_prefers_512_bit_vectors", "machine_tag"]


@functools.lru_cache(maxsize=1)
def cpu_info() -> Mapping[str, str]:
    """The first processor's ``vendor_id``, ``model name`` and ``flags`` lines of /proc/cpuinfo
    (keys missing where unreadable), with ``machine`` (``platform.machine()``); read-only."""
    info = {"machine": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("vendor_id", "model name", "flags") and key not in info:
                    info[key] = value.strip()
                if not line.strip() and "flags" in info:
                    break  # the end of the first processor's block
    except OSError:
        pass
    return MappingProxyType(info)


@functools.lru_cache(maxsize=1)
def _flags() -> frozenset[str]:
    return frozenset(cpu_info().get("flags", "").split())


def cpu_has_native_bf16() -> bool:
    """True when the CPU multiplies bf16 natively (AVX512-BF16 or AMX). Without it PyTorch
    emulates bf16 matmuls, which is many times *slower* than fp32 (~30× on an AVX2 CPU)."""
    return bool({"avx512_bf16", "amx_bf16"} & _flags())


def cpu_prefers_512_bit_vectors() -> bool:
    """Whether compiled loops may use 512-bit vectors (gcc's ``-march=native`` picks 256 bits on
    Intel): on an Intel CPU with AVX-512 (the fused seams use them for rows of whole vectors,
    :func:`mlplab.layers.fused.build.wide_rows`). AMD's Zen 4 executes 512-bit operations as two 256-bit
    halves and is left to gcc's default."""
    info = cpu_info()
    return info.get("vendor_id") == "GenuineIntel" and "avx512f" in _flags()


#: CPU families named in result file names, by a word of ``model name``
_FAMILIES = ("epyc", "xeon", "ryzen", "threadripper", "core", "graviton", "neoverse")


def machine_tag() -> str:
    """A short name of this CPU kind for result files (``benchmarks/results/``, ``docs/results/``):
    its family and fastest matmul path, e.g. ``epyc-avx512bf16``, ``xeon-amx``, ``epyc-avx2``.
    Results on one tag are comparable; across tags only ratios are."""
    words = cpu_info().get("model name", "").lower().replace("(r)", " ").replace("(tm)", " ").split()
    family = next((w for w in words if w in _FAMILIES), (cpu_info().get("vendor_id") or "cpu").lower())
    flags = _flags()
    isa = next((name for flag, name in (("amx_bf16", "amx"), ("avx512_bf16", "avx512bf16"), ("avx512f", "avx512"),
                                        ("avx2", "avx2"), ("asimd", "neon")) if flag in flags),
               platform.machine().lower() or "unknown")
    return f"{family}-{isa}"
