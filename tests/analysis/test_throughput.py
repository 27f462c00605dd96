"""Interleaved timing: the order of calls, the device sync after every timed call (CUDA by a
mock), the batch search, and the whole measurement on tiny models."""
import itertools

import pytest
import torch
import torch.nn as nn

from mlplab.analysis.throughput import (
    best_batch,
    candidate_batches,
    device_sync,
    fitting_batches,
    interleaved_times,
    measure_inference,
)


def test_interleaved_times_round_robin_with_a_sync_after_each_call():
    log = []
    calls = {k: (lambda k=k: log.append(k)) for k in "abc"}
    ticks = itertools.count()
    times = interleaved_times(calls, reps=2, warmup=1, sync=lambda: log.append("sync"),
                              clock=lambda: float(next(ticks)))
    assert log == ["a", "b", "c", "sync"] + ["a", "sync", "b", "sync", "c", "sync"] * 2
    assert times == {k: [1.0, 1.0] for k in "abc"}


def test_cuda_timing_waits_for_the_device(monkeypatch):
    assert device_sync(torch.device("cuda")) is torch.cuda.synchronize
    device_sync(torch.device("cpu"))()  # a no-op
    with pytest.raises(ValueError, match="clock='cpu' times a CPU"):
        measure_inference({"m": nn.Linear(2, 2)}, {"m": (2,)}, {"m": [1]}, reps=1, latency_reps=1, search_reps=1,
                          device="cuda", clock="cpu")
    with pytest.raises(ValueError, match="clock must be one of wall, cpu"):
        measure_inference({}, {}, {}, reps=1, latency_reps=1, search_reps=1, clock="gpu")


def test_candidate_batches_keep_the_passes_under_the_limit():
    assert candidate_batches([16, 1, 4, 64], 0.01, 0.5) == [1, 4, 16]
    assert candidate_batches([4, 16], 1.0, 0.5) == [4]  # always the smallest
    assert candidate_batches([4, 1, 4], 1.0, None) == [1, 4]
    with pytest.raises(ValueError, match="positive integers"):
        candidate_batches([0, 4], 1.0, None)


def test_best_batch_is_the_highest_median_rate():
    assert best_batch({1: [0.1, 0.1, 0.9], 4: [0.3, 0.3, 0.3], 16: [2.0, 2.0, 2.0]}) == 4  # 13.3 vs 10 and 8 images/s
    assert best_batch({1: [0.1], 2: [0.2]}) == 1  # a tie: the smaller


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_measure_inference_on_tiny_models(clock):
    class Flat(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.fc = nn.Linear(3 * d * d, 4)

        def forward(self, x):
            return self.fc(x.flatten(1))

    models = {"small": Flat(4), "big": Flat(8)}
    out = measure_inference(models, {"small": (3, 4, 4), "big": (3, 8, 8)}, {"small": [1, 8], "big": [2]}, reps=3,
                            latency_reps=2, search_reps=2, clock=clock)
    assert list(out) == ["small", "big"]
    assert len(out["small"]["latency_s"]) == 2 and set(out["small"]["search"]) == {"1", "8"}
    assert out["big"]["best_batch"] == 2 and len(out["big"]["throughput"]) == 3
    assert all(t > 0 for r in out.values() for t in r["throughput"])
    assert not any(m.training for m in models.values())
    none = measure_inference(models, {"small": (3, 4, 4), "big": (3, 8, 8)}, {"small": [1], "big": [1]}, reps=1,
                             latency_reps=0, search_reps=1)
    assert none["small"]["latency_s"] == []


def test_fitting_batches_stop_at_the_first_out_of_memory():
    dropped = []

    def run(b):
        if b >= 64:
            raise torch.OutOfMemoryError("CUDA out of memory")

    assert fitting_batches([256, 1, 16, 64, 4096], run, drop=dropped.append) == [1, 16]
    assert dropped == [64]
    with pytest.raises(RuntimeError, match=r"even the smallest batch \(4\) runs out of device memory"):
        fitting_batches([4], lambda b: run(64))
