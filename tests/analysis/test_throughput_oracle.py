"""The inference measurement (mlplab.analysis.throughput) watched from outside: a model that records
what it is given and a clock that ticks by hand, so every count, input, batch and rate is checked
against numbers written here."""
from __future__ import annotations

import itertools
import time

import pytest
import torch
import torch.nn as nn

import mlplab.analysis.throughput as throughput
from mlplab.analysis.throughput import (
    CLOCKS,
    best_batch,
    candidate_batches,
    device_sync,
    fitting_batches,
    measure_inference,
)


class Recorder(nn.Module):
    def __init__(self, log, name):
        super().__init__()
        self.log, self.name = log, name
        self.lin = nn.Linear(1, 1)

    def forward(self, x):
        self.log.append((self.name, x, torch.is_inference_mode_enabled(), self.training))
        return x


def test_the_clocks_and_the_sync_per_device():
    assert CLOCKS == {"wall": time.perf_counter, "cpu": time.process_time}
    for kind in ("cpu", "meta"):
        sync = device_sync(torch.device(kind))
        assert sync is not torch.cuda.synchronize and sync() is None


def test_candidate_batches_at_the_limit_and_without_one():
    assert candidate_batches([2, 4, 8], 0.25, 1.0) == [2, 4]  # 4 · 0.25 = 1.0: at the limit is allowed
    assert candidate_batches([8, 2], 10.0, 1.0) == [2]
    assert candidate_batches([3], 0.0, None) == [3]
    for bad in ([], [-2, 4]):
        with pytest.raises(ValueError, match=r"batch sizes must be positive integers, got \["):
            candidate_batches(bad, 1.0, None)
    assert candidate_batches([1.0, 2.5], 1.0, None) == [1, 2]  # read as integers


def test_fitting_batches_frees_the_device_cache_after_running_out(monkeypatch):
    freed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(True))

    def run(b):
        if b > 2:
            raise torch.OutOfMemoryError("out of memory")

    assert fitting_batches([4, 2, 1, 2.0], run) == [1, 2] and freed == [True]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert fitting_batches([4, 1], run) == [1] and freed == [True]
    with pytest.raises(RuntimeError, match=r"even the smallest batch \(3\) runs out of device memory"):
        fitting_batches([8, 3], run)


def test_best_batch_by_median_rate():
    # medians 0.2, 0.3, 0.5 s: rates 5, 6.67, 8 images/s; the mean would pick otherwise (1: 0.2 + outlier)
    assert best_batch({1: [0.2, 0.2, 5.0], 2: [0.3, 0.3, 0.3], 4: [0.5, 0.5, 9.0]}) == 4
    assert best_batch({4: [1.0], 2: [0.5], 8: [2.0]}) == 2  # a three-way tie: the smallest


def test_measure_inference_calls_counts_inputs_and_rates(monkeypatch):
    log = []
    models = {"a": Recorder(log, "a"), "b": Recorder(log, "b")}
    ticks = itertools.count()
    monkeypatch.setitem(CLOCKS, "wall", lambda: float(next(ticks)))  # every timed call lasts one tick
    out = measure_inference(models, {"a": (1, 2, 2), "b": (3,)}, {"a": [4, 2], "b": [1]}, reps=3, latency_reps=2,
                            search_reps=2, warmup=1, seed=5)
    calls = [(name, tuple(x.shape)) for name, x, _, _ in log]
    latency = [("a", (1, 1, 2, 2)), ("b", (1, 3))]
    search = [("a", (4, 1, 2, 2)), ("a", (2, 1, 2, 2)), ("b", (1, 3))]
    assert calls == latency * 3 + search * 3 + [("a", (4, 1, 2, 2)), ("b", (1, 3))] * 4  # warmup + reps, each
    assert all(inf and not training for _, _, inf, training in log)  # eval mode, inference mode
    inputs = {}
    for name, x, _, _ in log:  # one input per (model, batch), made once
        key = (name, x.shape[0])
        assert inputs.setdefault(key, x) is x
    g = torch.Generator().manual_seed(5)  # made in the order they are first needed
    for key, shape in ((("a", 1), (1, 1, 2, 2)), (("b", 1), (1, 3)), (("a", 4), (4, 1, 2, 2)),
                       (("a", 2), (2, 1, 2, 2))):
        assert torch.equal(inputs[key], torch.randn(*shape, generator=g))
    assert out["a"]["latency_s"] == [1.0, 1.0] and out["a"]["search"] == {"4": [1.0, 1.0], "2": [1.0, 1.0]}
    assert out["a"]["best_batch"] == 4 and out["b"]["best_batch"] == 1  # 4 images per tick beat 2
    assert out["a"]["throughput"] == [4.0] * 3 and out["b"]["throughput"] == [1.0] * 3
    assert set(out) == {"a", "b"} and set(out["a"]) == {"latency_s", "search", "best_batch", "throughput"}


def test_measure_inference_moves_inputs_and_does_not_search_memory_on_a_cpu(monkeypatch):
    log = []
    model = Recorder(log, "m").to("meta")
    monkeypatch.setattr(throughput, "fitting_batches", lambda *a, **k: pytest.fail("only a GPU's list is searched"))
    out = measure_inference({"m": model}, {"m": (2,)}, {"m": [1, 3]}, reps=1, latency_reps=0, search_reps=1,
                            warmup=0, device="meta", seed=1)
    assert all(x.device.type == "meta" for _, x, _, _ in log) and out["m"]["latency_s"] == []
    assert [x.shape[0] for _, x, _, _ in log] == [1, 3, out["m"]["best_batch"]]  # no warmup, no latency
    with pytest.raises(ValueError, match="clock must be one of wall, cpu, got 'gpu'"):
        measure_inference({}, {}, {}, reps=1, latency_reps=1, search_reps=1, clock="gpu")
    with pytest.raises(ValueError, match="^clock='cpu' times a CPU; use clock='wall' on a GPU$"):
        measure_inference({}, {}, {}, reps=1, latency_reps=1, search_reps=1, device="meta", clock="cpu")
