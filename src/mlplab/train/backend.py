"""How the training step runs on this machine: compiled (``torch.compile``) or eager.

``run.compile=auto`` compiles on CUDA only. On CPU it was measured both ways
(``benchmarks/bench_mixer_step.py --compile``, 2-core AVX512-BF16 EPYC, bf16 autocast, batch 256-512):
the S-Mixer S=C=64 at 32×32 went from 4.3k to 5.1-6.4k img/s, but the Fashion-MNIST models at
28×28 (S-Mixer S=49, bottleneck MLP) became 12-22% *slower*, fp32 gained nothing, and the first
step costs 8-28 s of compilation. ``run.compile=true`` opts in; when no C++ compiler is present
(inductor needs one on CPU) the run says so and trains eagerly instead of failing.
"""
from __future__ import annotations

import os
import shutil
import sys

import torch
import torch.nn as nn

__all__ = ["resolve_compile", "compile_model", "cpp_compiler"]


def resolve_compile(choice: bool | str, device: torch.device) -> bool:
    """Whether to compile: ``True``/``False`` as given; ``"auto"`` -> on CUDA only (see above)."""
    if isinstance(choice, bool):
        return choice
    return device.type == "cuda"


def cpp_compiler() -> str | None:
    """The C++ compiler inductor would use on CPU ($CXX, else c++/g++/clang++), or None."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def compile_model(model: nn.Module, device: torch.device, *, warn=sys.stderr) -> nn.Module:
    """``torch.compile(model)``, or ``model`` itself (with one line on ``warn``) when the CPU
    backend has no C++ compiler to build its kernels with."""
    if device.type == "cpu" and cpp_compiler() is None:
        print("mlplab train: run.compile: no C++ compiler (c++/g++/clang++, or $CXX) found for "
              "torch.compile on CPU; training eagerly", file=warn)
        return model
    return torch.compile(model)
