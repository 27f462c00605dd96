"""Shared timing helpers for the benchmarks (not a test suite, not part of the package).

Every comparison here is *interleaved*: after a warm-up, repetition r runs candidate A, then B,
then C, ..., then repetition r + 1 does the same. On a machine shared with other jobs the load
drifts over minutes; interleaving exposes every candidate to the same drift, so the ratios of
the medians stay fair even when the absolute numbers are noisy. The load average and thread
count are recorded with every result so that a reader can judge that noise.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from mlplab.utils.cpu import machine_tag
from mlplab.utils.machine import machine_record

__all__ = [
    "add_common_args",
    "setup_torch",
    "environment",
    "interleaved",
    "summarise",
    "gemm_rate",
    "forward_flops",
    "autocast_ctx",
    "train_step_fn",
    "fmt_table",
    "write_results",
    "default_out",
]

REPO = Path(__file__).resolve().parents[1]

#: (label, registry name, overrides, input shape): the models the reproductions and presets train
TRAINED_MODELS = {
    "s_mixer S=C=64 L=8": ("s_mixer", dict(image_size=32, patch_size=4, num_tokens=64, hidden_dim=64, depth=8),
                           (3, 32, 32)),
    "mlp_mixer C=128 L=4": ("mlp_mixer", dict(image_size=28, in_chans=1, patch_size=4, hidden_dim=128,
                                              token_hidden=64, channel_hidden=256, depth=4), (1, 28, 28)),
    "bottleneck_mlp B-4/Wi-256": ("bottleneck_mlp", dict(image_size=28, in_chans=1, width=256, depth=4), (1, 28, 28)),
}


def default_out(name: str) -> Path:
    """``benchmarks/results/<what>-pt<torch>-<machine>.json``: what was measured, with which torch
    and on which CPU kind (timm's ``results/benchmark-...-pt240-...`` naming); ``docs/performance.md``
    is generated from these files (``python scripts/gen_docs.py``)."""
    what = name.removeprefix("bench_").replace("_", "-")
    torch_tag = "pt" + "".join(torch.__version__.split("+")[0].split(".")[:2])
    return REPO / "benchmarks" / "results" / f"{what}-{torch_tag}-{machine_tag()}.json"


def add_common_args(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("--out", type=Path, default=default_out(name), help="JSON results path (atomic write)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds of every candidate first")
    p.add_argument("--reps", type=int, default=5, help="interleaved timed rounds")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few rounds (smoke run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                   help="wall time, or process CPU time (fair under contention with --threads 1)")


def add_trained_model_args(p: argparse.ArgumentParser, steps: int, steps_help: str) -> None:
    """--dtype, --batch, --steps, --models for the benchmarks that train ``TRAINED_MODELS``."""
    p.add_argument("--dtype", default=None, choices=["fp32", "bf16"],
                   help="default: bf16 where the CPU has native bf16, else fp32 (what run.precision=auto picks)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=steps, help=steps_help)
    p.add_argument("--models", default=",".join(TRAINED_MODELS), help="comma-separated labels of TRAINED_MODELS")


def trained_model_choice(p: argparse.ArgumentParser, a: argparse.Namespace,
                         env: dict[str, Any]) -> tuple[str, list[str]]:
    """(dtype, model labels) from :func:`add_trained_model_args`' options; unknown labels end the run."""
    models = [m for m in a.models.split(",") if m]
    unknown = [m for m in models if m not in TRAINED_MODELS]
    if unknown:
        p.error(f"unknown model label(s) {unknown}; choose from {list(TRAINED_MODELS)}")
    return a.dtype or ("bf16" if env["native_bf16"] else "fp32"), models


def setup_torch(threads: int, seed: int = 0) -> None:
    """Threads, seed, and the host allocator set as ``mlplab.train`` sets it (keep freed memory)."""
    from mlplab.train.backend import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)


def describe(env: dict[str, Any]) -> str:
    """One line every benchmark prints first: versions, threads, CPU and its bf16 capability, the
    GPU where one is used, load."""
    bf16 = "native bf16 (AVX512-BF16/AMX)" if env["native_bf16"] else "NO native bf16 (emulated: slower than fp32)"
    gpu = f", GPU {env['gpu']}" if env.get("gpu") else ""
    return (f"torch {env['torch']}, {env['num_threads']} threads, {env['processor']} ({env['cpu_capability']}, "
            f"{bf16}){gpu}, load {env['loadavg']}")


#: benchmark result files name two of :func:`mlplab.utils.machine.machine_record`'s keys their own way
BENCHMARK_KEYS = {"cpu": "processor", "threads": "num_threads"}


def environment(device: str = "cpu") -> dict[str, Any]:
    """What a reader needs to judge the numbers (versions, threads, CPU and its bf16, the GPU when
    ``device`` is cuda, load while measuring): ``machine_record(device)`` under the benchmark
    files' key names (:data:`BENCHMARK_KEYS`)."""
    return {BENCHMARK_KEYS.get(k, k): v for k, v in machine_record(device).items()}


def interleaved(
    candidates: dict[str, Callable[[], Any]],
    reps: int,
    warmup: int,
    inner: int = 1,
    log: Callable[[str], None] | None = None,
    clock: str = "wall",
) -> dict[str, list[float]]:
    """Seconds per call of every candidate, measured A, B, C, A, B, C, ... after a warm-up.

    ``inner`` calls are timed together (for very short calls) and divided out.
    ``clock="cpu"`` uses this process's CPU time (``time.process_time``) instead of wall time:
    with one thread on an oversubscribed machine it excludes the time spent descheduled, so it
    measures the code, not the neighbours (with several threads it would count spin-waiting).
    """
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be wall or cpu, got {clock!r}")
    now = time.perf_counter if clock == "wall" else time.process_time
    for _ in range(warmup):
        for fn in candidates.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in candidates}
    for r in range(reps):
        for name, fn in candidates.items():
            t0 = now()
            for _ in range(inner):
                fn()
            times[name].append((now() - t0) / inner)
        if log is not None:
            log(f"  rep {r + 1}/{reps}: " + ", ".join(f"{k} {1e3 * v[-1]:.1f} ms" for k, v in times.items())
                + f"  (load {os.getloadavg()[0]:.1f})")
    return times


def summarise(ts: list[float]) -> dict[str, float]:
    """Median (the reported number), min and the spread of repeated timings, in seconds."""
    return {
        "median_s": statistics.median(ts),
        "min_s": min(ts),
        "max_s": max(ts),
        "iqr_s": (statistics.quantiles(ts, n=4)[2] - statistics.quantiles(ts, n=4)[0]) if len(ts) >= 2 else 0.0,
        "n": len(ts),
    }


@contextlib.contextmanager
def autocast_ctx(dtype: str, device: str = "cpu"):
    """``fp32``: nothing; ``bf16``: autocast to bfloat16 on ``device``'s type (matmuls in bf16,
    reductions fp32)."""
    if dtype == "bf16":
        with torch.autocast(device, dtype=torch.bfloat16):
            yield
    elif dtype == "fp32":
        yield
    else:
        raise ValueError(f"dtype must be fp32 or bf16, got {dtype!r}")


def gemm_rate(dtype: str, n: int = 2048, reps: int = 3) -> dict[str, float]:
    """Large square GEMM rate in GFLOP/s (2n³ FLOPs per product), median of ``reps``.

    ``bf16`` multiplies bfloat16 operands under CPU autocast, as the training steps do.
    """
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    if dtype == "bf16":
        a, b = a.bfloat16(), b.bfloat16()
    a @ b  # warm-up (oneDNN/MKL kernel selection)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    med = statistics.median(ts)
    return {"n": n, "median_s": med, "gflops": 2 * n**3 / med / 1e9, "best_gflops": 2 * n**3 / min(ts) / 1e9}


def forward_flops(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Forward FLOPs of one call (matmuls, as counted by torch.utils.flop_counter: 2 per MAC)."""
    from torch.utils.flop_counter import FlopCounterMode

    was = model.training
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(x)
    model.train(was)
    return int(fc.get_total_flops())


def train_step_fn(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    optimizer: str = "sgd",
    dtype: str = "fp32",
    lr: float = 1e-3,
    update: str = "auto",
) -> Callable[[], float]:
    """A closure doing one training step: forward (autocast when bf16), cross-entropy, backward,
    optimizer step, on ``x``'s device. Parameters stay fp32 (mixed precision), as in a real run;
    the returned loss (a float) waits for the device, so a timed call is a whole step. ``update``: how the
    optimizer applies its update: "auto" as ``mlplab.train`` does (fused kernels where torch has
    them), or "fused", "foreach", "loop" (torch's per-parameter Python loop)."""
    from mlplab.train.optim import fused_update

    model.train()
    params = list(model.parameters())
    kw = {"auto": fused_update([{"params": params}]), "fused": {"fused": True}, "foreach": {"foreach": True},
          "loop": {"foreach": False}}[update]
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, **kw)
    elif optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.05, **kw)
    else:
        raise ValueError(f"optimizer must be sgd or adamw, got {optimizer!r}")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with autocast_ctx(dtype, x.device.type):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


#: every table printed by :func:`fmt_table` in this process; :func:`write_results` stores them
_TABLES: list[dict[str, Any]] = []


def fmt_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain fixed-width table (strings as given, floats with 4 significant digits)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    body = [[cell(v) for v in r] for r in rows]
    _TABLES.append({"columns": list(headers), "rows": body})
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    sep = "  ".join("-" * w for w in widths)
    out = [line, sep] + ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                         for r in body]
    return "\n".join(out)


def write_results(path: Path, obj: dict[str, Any]) -> Path:
    from mlplab.utils.io import atomic_write_json

    obj = {"machine": machine_tag(), "command": " ".join(["python", *sys.argv]), **obj}
    obj.setdefault("tables", _TABLES)
    p = atomic_write_json(path, obj)
    print(f"wrote {p}")
    return p
