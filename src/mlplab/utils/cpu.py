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

__all__ = ["cpu_info", "cpu_has_native_bf16", "cpu_prefers_512_bit_vectors"]


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
    emulates bf16 matmuls, which is many times *slower* than fp32 (measured 30x on AVX2)."""
    return bool({"avx512_bf16", "amx_bf16"} & _flags())


def cpu_prefers_512_bit_vectors() -> bool:
    """Whether compiled loops may use 512-bit vectors (gcc's ``-march=native`` picks 256 bits on
    Intel): on an Intel CPU with AVX-512 (the fused seams use them for rows of whole vectors,
    :func:`mlplab.layers.fused._wide`). AMD's Zen 4 executes 512-bit operations as two 256-bit
    halves and is left to gcc's default (not measured)."""
    info = cpu_info()
    return info.get("vendor_id") == "GenuineIntel" and "avx512f" in _flags()
