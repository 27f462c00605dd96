"""How the training step runs on this machine: the model's implementation, compiled or eager.

Implementation (``model.impl``, :class:`mlplab.models.impl.Impl`). :func:`apply_impl` sets it on
a model and refuses a path the model or machine lacks; the run plan calls it on the model it builds
on the meta device (:func:`mlplab.train.runplan.plan_run`), so ``--print-config`` and
``check_specs`` refuse an impossible ``model.impl`` before any data loads, and the plan's
``build_model`` on the model a run trains. :func:`describe_implementation` is what the run line
and ``results.json`` say: the path the training step takes (fused seams, module path or
definition), why a Mixer does not take the fused seams, compiled or eager, the precision and the
kernels' status.

``run.compile=auto`` compiles on CUDA, and on CPU when the run autocasts to bf16, is long enough
to repay the ~20 s of compilation (at least ``MIN_STEPS_CPU`` steps) and a C++ compiler is present:
in fp32 compiling gains little on these models, and bf16 Mixers gain up to ~1.1× over their fused
eager seams (:mod:`mlplab.models.mixer_fused`; docs/performance.md). ``run.compile=true``/``false``
overrides. Without a C++ compiler (inductor needs one on CPU) the run says so in one line and
trains eagerly instead of failing.

Host memory (:func:`keep_freed_memory`). glibc's allocator hands blocks of a few MB (a batch of
activations) back to the kernel when they are freed and maps fresh zero pages when they are
asked for again: every training step then takes thousands of page faults. Training on CPU
therefore asks glibc (``mallopt``) to serve blocks up to 32 MiB from its heap and not to trim it.
Without it a step takes thousands of page faults (``benchmarks/bench_malloc.py``); with it whole
runs are a few per cent faster (docs/performance.md). The process keeps its peak heap until it exits.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import sys

import torch
import torch.nn as nn

from ..errors import BadInput
from ..layers import fused
from ..models.base import VisionMLP
from ..models.impl import Fusable, Impl
from .accelerator import compile_unavailable_reason

__all__ = ["resolve_compile", "compile_model", "dynamo_counts", "cpp_compiler", "keep_freed_memory", "MIN_STEPS_CPU",
           "apply_impl", "describe_implementation", "implementation_line"]


def _training_step_fusable(model: VisionMLP, device: torch.device | None, precision: str | None) -> Fusable:
    """Whether a model with fused seams takes them in a training step on ``device`` (None: a
    machine not known yet, so only the model's structure and mode count), with the run's autocast."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        return model.fusable(device)


def apply_impl(model: VisionMLP, impl: Impl | str, device: torch.device | None, precision: str | None) -> VisionMLP:
    """Set ``model.impl`` for a run on ``device`` (None: planned for another machine); BadInput (one
    sentence) for a path the model lacks, or ``fused`` where its seams cannot run the training step."""
    impl = Impl.parse(impl)
    try:
        model.impl = impl
    except ValueError as e:
        raise BadInput(f"model.impl={impl.value}: {e}") from None
    if impl is Impl.FUSED:
        ok, why = _training_step_fusable(model, device, precision)
        if not ok:
            raise BadInput(f"model.impl=fused, but the fused seams cannot run this training step: {why}; "
                           f"use model.impl=auto")
    return model


def describe_implementation(model: VisionMLP, device: torch.device, precision: str, compiled: bool) -> dict:
    """How a run's training step computes ``model``: {"path": "fused seams" | "module path" |
    "definition", "impl": model.impl, "why_not_fused": the reason a Mixer takes no fused seams
    (None otherwise), "compiled", "precision", "kernels": :func:`mlplab.layers.fused.status` on
    CPU for a model that would run them (None elsewhere)}."""
    impl = model.impl
    seams = Impl.FUSED in model.IMPLS and device.type == "cpu"  # the kernels are CPU only
    fusable = _training_step_fusable(model, device, precision) if seams else Fusable(False)
    path = "fused seams" if fusable.ok else "definition" if impl is Impl.DEFINITION else "module path"
    kernels = seams and impl in (Impl.AUTO, Impl.FUSED)
    return {"path": path, "impl": impl.value, "why_not_fused": fusable.reason or None, "compiled": bool(compiled),
            "precision": precision, "kernels": fused.status() if kernels else None}


def implementation_line(desc: dict) -> str:
    """:func:`describe_implementation` in the run line's words: "module path (the fused kernels
    are unavailable: no C compiler ...), eager, bf16"."""
    why = f" ({desc['why_not_fused']})" if desc["why_not_fused"] else ""
    return f"{desc['path']}{why}, {'compiled' if desc['compiled'] else 'eager'}, {desc['precision']}"


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


#: the backend of the last :func:`compile_model` (``dynamo_counts`` reports it)
_backend: str | None = None


def compile_model(model: nn.Module, device: torch.device, *, warn=sys.stderr, backend: str | None = None) -> nn.Module:
    """``torch.compile(model)``, or ``model`` itself (with one line on ``warn``) when the backend
    cannot build kernels here: no C++ compiler on CPU, an unsupported GPU or no Triton on CUDA.

    Dynamo's caches are reset first: a process that trains one run after another (a sweep run
    inline, a notebook) would otherwise reach dynamo's recompile limit after a few model shapes
    and silently run the rest eagerly while reporting them compiled. ``backend``: torch.compile's,
    else ``$MLPLAB_COMPILE_BACKEND``, else inductor (``"eager"`` traces with dynamo only, enough for
    the graph counts of :func:`dynamo_counts`; ``"aot_eager"`` also differentiates the graphs as
    inductor does, without generating kernels: the CPU tests of compiled DDP use it)."""
    global _backend
    if device.type == "cpu" and cpp_compiler() is None:
        print("mlplab train: run.compile: no C++ compiler (c++/g++/clang++, or $CXX) found for "
              "torch.compile on CPU; training eagerly", file=warn)
        return model
    if device.type == "cuda" and (why := compile_unavailable_reason(device)) is not None:
        print(f"mlplab train: run.compile: {why}; training eagerly", file=warn)
        return model
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # dynamo_counts: this model's graphs only
    _backend = backend or os.environ.get("MLPLAB_COMPILE_BACKEND") or "inductor"
    return torch.compile(model, backend=_backend)


def dynamo_counts() -> dict:
    """What dynamo made of the code compiled since :func:`compile_model` (``results.json``'s
    ``dynamo``): the ``backend``, ``graphs`` (FX graphs compiled), ``graph_breaks``,
    ``skipped_frames`` (Python frames dynamo gave up on and ran eagerly, e.g. a loop with a graph
    break inside), and ``break_reasons`` (each reason's first line and the code it names, with its
    count). A dense model compiles to one graph per shape with no break; the sparse SW-MLP breaks
    at each sparse product, which runs outside the traced region (``layers.masked._sparse_product``);
    under DDP the wrapper's own frames break by design (``DistributedDataParallel``, its ``Reducer``)."""
    c = torch._dynamo.utils.counters
    reasons: dict[str, int] = {}
    for reason, n in c["graph_break"].items():
        line = _break_reason(reason)
        reasons[line] = reasons.get(line, 0) + n
    frames = c["frames"]
    return {"backend": _backend, "graphs": int(c["stats"].get("unique_graphs", 0)),
            "graph_breaks": int(sum(reasons.values())),
            "skipped_frames": int(frames.get("total", 0) - frames.get("ok", 0)), "break_reasons": reasons}


def _break_reason(text: str) -> str:
    """A graph break's reason in one line: its first line and, where dynamo gives one, the code it
    is about (its "Developer debug context", addresses left out)."""
    lines = [ln.strip() for ln in text.strip().splitlines()] or ["?"]
    where = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Developer debug context:")), "")
    where = re.sub(r"\d{6,}", "N", re.sub(r" at 0x[0-9a-f]+", "", where))[:160]  # addresses and pointers
    return f"{lines[0]} ({where})" if where else lines[0]


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
