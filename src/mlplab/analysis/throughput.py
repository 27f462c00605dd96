"""Inference speed of built models: latency at batch 1 and throughput at the best batch size,
timed *interleaved* (repetition r times every candidate once before repetition r + 1 starts, so
the load of a shared machine drifts over all candidates alike; the benchmarks' rule).

:func:`measure_inference` is the whole measurement of Scaling MLPs Table 4 and the Mixer paper's
throughput column: (0) on a GPU, the candidate batch sizes that fit in its memory, one pass each
(:func:`fitting_batches`); (1) latency, ``latency_reps`` forward passes of one image per model; (2) the
batch search, ``search_reps`` passes at every candidate batch size, the best being the one of
highest median images/s; (3) throughput, ``reps`` passes at each model's best batch. A forward pass
is ``model(x)`` in eval mode under ``torch.inference_mode``; on CUDA each timing waits for the
device (``torch.cuda.synchronize``) before reading the clock.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn as nn

from ..utils.machine import device_sync, machine_record  # re-exported: the clock's sync, the record beside every timing

__all__ = ["CLOCKS", "device_sync", "interleaved_times", "candidate_batches", "fitting_batches", "best_batch",
           "measure_inference", "machine_record"]

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # what a timing reads


def interleaved_times(calls: Mapping[Any, Callable[[], Any]], reps: int, warmup: int = 1,
                      sync: Callable[[], None] = lambda: None,
                      clock: Callable[[], float] = time.perf_counter) -> dict[Any, list[float]]:
    """Seconds of each call, ``warmup`` untimed rounds then ``reps`` rounds, each round calling
    every candidate once in order."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    sync()
    times: dict[Any, list[float]] = {k: [] for k in calls}
    for _ in range(reps):
        for k, fn in calls.items():
            t0 = clock()
            fn()
            sync()
            times[k].append(clock() - t0)
    return times


def candidate_batches(batches: Sequence[int], example_s: float, max_call_s: float | None) -> list[int]:
    """The batch sizes worth searching for a model whose forward pass takes about ``example_s``
    seconds per image: those whose pass is estimated at ``max_call_s`` or less (every one when
    ``max_call_s`` is None), and always the smallest."""
    bs = sorted({int(b) for b in batches})
    if not bs or bs[0] < 1:
        raise ValueError(f"batch sizes must be positive integers, got {list(batches)}")
    if max_call_s is None:
        return bs
    return [b for b in bs if b * example_s <= max_call_s] or bs[:1]


def fitting_batches(batches: Sequence[int], run: Callable[[int], Any],
                    drop: Callable[[int], Any] = lambda b: None) -> list[int]:
    """The batch sizes at which ``run(batch)`` (one forward pass) does not run out of device
    memory, smallest first: the first that raises ``torch.OutOfMemoryError`` ends the list
    (``drop(batch)`` then frees what was made for it). A GPU's search list can go past its memory
    (ResNet-152 at 64×64 without the first stride holds 17 GB of activations per layer at batch 4096)."""
    ok: list[int] = []
    for b in sorted({int(x) for x in batches}):
        try:
            run(b)
        except torch.OutOfMemoryError:
            drop(b)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            break
        ok.append(b)
    if not ok:
        raise RuntimeError(f"even the smallest batch ({min(batches)}) runs out of device memory")
    return ok


def best_batch(times: Mapping[int, Sequence[float]]) -> int:
    """The batch size of highest median images per second (``times``: batch → seconds per pass);
    the smaller batch on a tie."""
    return max(sorted(times), key=lambda b: b / statistics.median(times[b]))


def measure_inference(models: Mapping[str, nn.Module], input_shapes: Mapping[str, tuple[int, ...]],
                      batches: Mapping[str, Sequence[int]], *, reps: int, latency_reps: int,
                      search_reps: int, warmup: int = 1, device: torch.device | str = "cpu",
                      seed: int = 0, clock: str = "wall") -> dict[str, dict[str, Any]]:
    """Latency, batch search and throughput of every model (see the module docstring).

    ``models``: label → model (on ``device``); ``input_shapes``: label → (ch, H, W);
    ``batches``: label → the batch sizes to search. Returns label → ``{"latency_s": [seconds at
    batch 1 per rep; none when latency_reps is 0], "search": {batch: [seconds]}, "best_batch",
    "throughput": [images/s per rep at the best batch]}``. Inputs are standard normal images made
    once per (model, batch).

    ``clock="cpu"`` times by this process's CPU time (``time.process_time``), for one thread on a
    CPU shared with other jobs: it leaves out the time the process waits for a core, so it
    measures the models, not the neighbours (with several threads it would add their times up)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    device = torch.device(device)
    if clock == "cpu" and device.type != "cpu":
        raise ValueError("clock='cpu' times a CPU; use clock='wall' on a GPU")
    now = CLOCKS[clock]
    sync = device_sync(device)
    g = torch.Generator().manual_seed(seed)
    inputs: dict[tuple[str, int], torch.Tensor] = {}

    def call(label: str, b: int) -> Callable[[], Any]:
        if (label, b) not in inputs:
            inputs[(label, b)] = torch.randn(b, *input_shapes[label], generator=g).to(device)
        x, m = inputs[(label, b)], models[label]
        return lambda: m(x)

    for m in models.values():
        m.eval()
    out: dict[str, dict[str, Any]] = {}
    with torch.inference_mode():
        if device.type == "cuda":  # a CPU's list is capped by time (candidate_batches) before it gets here
            batches = {k: fitting_batches(batches[k], lambda b, k=k: call(k, b)(),
                                          drop=lambda b, k=k: inputs.pop((k, b), None)) for k in models}
        lat = interleaved_times({k: call(k, 1) for k in models}, latency_reps, warmup, sync, now) if latency_reps else {
            k: [] for k in models}
        keys = [(k, int(b)) for k in models for b in batches[k]]
        search = interleaved_times({kb: call(*kb) for kb in keys}, search_reps, warmup, sync, now)
        best = {k: best_batch({b: search[(kk, b)] for kk, b in keys if kk == k}) for k in models}
        final = interleaved_times({k: call(k, best[k]) for k in models}, reps, warmup, sync, now)
    for k in models:
        out[k] = {"latency_s": lat[k], "search": {str(b): search[(kk, b)] for kk, b in keys if kk == k},
                  "best_batch": best[k], "throughput": [best[k] / t for t in final[k]]}
    return out
