"""How the training step runs on this machine: compiled (``torch.compile``) or eager.

``run.compile=auto`` compiles on CUDA, and on CPU when the run autocasts to bf16, is long enough
to repay the compilation (at least ``MIN_STEPS_CPU`` steps) and a C++ compiler is present.
Measured on a 2-core AVX512-BF16 EPYC, candidates interleaved, 1 thread, batch 256
(``benchmarks/bench_mixer_step.py --compile``, ``benchmarks/bench_fmnist_fast.py``):

    model (28x28 Fashion-MNIST shapes)   bf16 compiled/eager   fp32 compiled/eager   compile time
    S-Mixer S=49, C=64, L=8              1.49                  0.97                  20 s
    S-Mixer S=64 (skip layer), C=64      1.50                  0.95                  21 s
    MLP-Mixer C=128, D_S=64, D_C=256     1.11                  1.03                  18 s
    bottleneck MLP B-4/Wi-512            0.99                  1.01                  13 s

so fp32 gains nothing (eager), and bf16 Mixers gain up to 1.5× once ~20 s of compilation are
paid. (Those Mixer figures predate the fused seams of ``mlplab.layers.fused``: eager Mixers
now run within 5-20% of compiled ones; see the README's Performance section.)
``run.compile=true``/``false`` overrides. Without a C++ compiler (inductor needs one on CPU)
the run says so in one line and trains eagerly instead of failing.

Host memory (:func:`keep_freed_memory`). glibc's allocator hands blocks of a few MB (a batch of
activations) back to the kernel when they are freed and maps fresh zero pages when they are
asked for again: every training step then takes thousands of page faults. Training on CPU
therefore asks glibc (``mallopt``) to serve blocks up to 32 MiB from its heap and not to trim it.
Measured on a 2-core AVX512-BF16 EPYC, bf16, batch 256: in ``benchmarks/bench_malloc.py``'s
step loop (a fresh process per measurement) 2,200-28,000 page faults per step fell to ~0 and
steps got 1.03-1.44× faster; in whole ``mlplab train`` runs (3 alternating pairs) faults fell
~10× and images/s rose 1.01× (S-Mixer) and 1.08× (MLP-Mixer): the loop's steady state faults
less than a short benchmark. The process keeps its peak heap until it exits.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import sys

import torch
import torch.nn as nn

from .accelerator import compile_unavailable_reason

__all__ = ["resolve_compile", "compile_model", "cpp_compiler", "keep_freed_memory", "MIN_STEPS_CPU"]


#: Fewest optimiser steps for which ``auto`` compiles on CPU: at ~0.05-0.1 s per step and a 1.5×
#: speed-up, ~20 s of compilation are repaid after roughly 600-1200 steps.
MIN_STEPS_CPU = 1000


def resolve_compile(choice: bool | str, device: torch.device, precision: str = "fp32", steps: int = 0) -> bool:
    """Whether to compile: ``True``/``False`` as given; ``"auto"``: on GPUs that Triton supports
    (``train.accelerator``), or on CPU for bf16
    runs of at least ``MIN_STEPS_CPU`` steps when a C++ compiler is present (see above)."""
    if isinstance(choice, bool):
        return choice
    if device.type == "cuda":
        return compile_unavailable_reason(device) is None
    return precision == "bf16" and steps >= MIN_STEPS_CPU and cpp_compiler() is not None


def cpp_compiler() -> str | None:
    """The C++ compiler inductor would use on CPU ($CXX, else c++/g++/clang++), or None."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def compile_model(model: nn.Module, device: torch.device, *, warn=sys.stderr) -> nn.Module:
    """``torch.compile(model)``, or ``model`` itself (with one line on ``warn``) when the backend
    cannot build kernels here: no C++ compiler on CPU, an unsupported GPU or no Triton on CUDA.

    Dynamo's caches are reset first: a process that trains one run after another (a sweep run
    inline, a notebook) would otherwise reach dynamo's recompile limit after a few model shapes
    and silently run the rest eagerly while reporting them compiled."""
    if device.type == "cpu" and cpp_compiler() is None:
        print("mlplab train: run.compile: no C++ compiler (c++/g++/clang++, or $CXX) found for "
              "torch.compile on CPU; training eagerly", file=warn)
        return model
    if device.type == "cuda" and (why := compile_unavailable_reason(device)) is not None:
        print(f"mlplab train: run.compile: {why}; training eagerly", file=warn)
        return model
    torch._dynamo.reset()
    return torch.compile(model)


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Blocks below this come from the heap; 32 MiB is glibc's largest allowed mmap threshold on 64-bit.
HEAP_BLOCK_LIMIT = 32 << 20
#: Free memory at the top of the heap beyond this is returned to the kernel.
HEAP_TRIM_THRESHOLD = 1 << 30
_kept = False


def keep_freed_memory() -> bool:
    """Let glibc reuse freed blocks instead of unmapping them (see the module docstring).

    Returns whether the allocator is (now) set so; ``False`` where the C library is not glibc
    (musl, macOS, Windows), where nothing is changed. Idempotent; affects the whole process."""
    global _kept
    if _kept:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc only: other C libraries have no (or another) mallopt
    except (OSError, AttributeError):
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _kept = bool(libc.mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_LIMIT)) and \
        bool(libc.mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD))
    return _kept
