"""The one record of the machine a timing ran on, and its two callers (the inference experiment's
``machine``, the benchmarks' ``environment``)."""
import importlib.util
import json
import os
import platform
from pathlib import Path

import pytest
import torch

from mlplab.analysis import throughput
from mlplab.utils import machine
from mlplab.utils.machine import machine_record

REPO = Path(__file__).resolve().parents[2]
KEYS = {"cpu", "machine_tag", "cpu_flags", "cpu_capability", "native_bf16", "cpu_count", "torch", "python",
        "platform", "threads", "loadavg", "time_utc", "device", "gpu"}


def _benchmarks_common():
    spec = importlib.util.spec_from_file_location("benchmarks_common", REPO / "benchmarks" / "common.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("vendor, model, flags, tag, listed, bf16", [
    ("AuthenticAMD", "AMD EPYC 9R14 96-Core Processor", "fpu avx2 avx512f avx512_bf16 fma",
     "epyc-avx512bf16", ["avx2", "avx512_bf16", "avx512f"], True),
    ("GenuineIntel", "Intel(R) Xeon(R) Platinum 8488C", "avx2 avx512f amx_bf16 amx_tile",
     "xeon-amx", ["amx_bf16", "avx2", "avx512f"], True),
    ("AuthenticAMD", "AMD EPYC 7R13 Processor", "fpu avx2 fma", "epyc-avx2", ["avx2"], False),
])
def test_the_record_describes_the_cpu_from_its_flags(cpuinfo, vendor, model, flags, tag, listed, bf16):
    cpuinfo(vendor, flags, model=model)
    m = machine_record("cpu")
    assert set(m) == KEYS
    assert (m["cpu"], m["machine_tag"], m["cpu_flags"], m["native_bf16"]) == (model, tag, listed, bf16)
    assert m["device"] == "cpu" and m["gpu"] is None


def test_the_record_reads_torch_threads_and_load_when_called(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (3.5, 2.0, 1.25))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        m = machine_record()
    finally:
        torch.set_num_threads(threads)
    assert m["threads"] == 1 and m["loadavg"] == [3.5, 2.0, 1.25] and m["cpu_count"] == os.cpu_count()
    assert (m["torch"], m["python"], m["platform"]) == (torch.__version__, platform.python_version(),
                                                        platform.platform())
    assert m["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert json.loads(json.dumps(m)) == m  # plain JSON values, written as they are


def test_the_gpu_is_named_only_for_a_cuda_device_on_a_machine_with_one(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: asked.append(d) or "Some GPU")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert machine_record("cuda")["gpu"] is None and asked == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    m = machine_record("cuda:1")
    assert (m["device"], m["gpu"]) == ("cuda:1", "Some GPU") and asked == [torch.device("cuda:1")]
    assert machine_record("cpu")["gpu"] is None and len(asked) == 1


def test_a_torch_without_cpu_capability_is_recorded_as_unknown(monkeypatch):
    monkeypatch.delattr(torch.backends.cpu, "get_cpu_capability")
    assert machine_record()["cpu_capability"] == "unknown"


def test_both_timing_callers_use_the_one_record(monkeypatch):
    """The inference experiment takes it as it is; the benchmarks under their two own key names."""
    assert throughput.machine_record is machine.machine_record
    common = _benchmarks_common()
    fixed = {**machine_record(), "loadavg": [1.0, 1.0, 1.0], "time_utc": "2026-01-01T00:00:00Z"}
    monkeypatch.setattr(common, "machine_record", lambda device="cpu": {**fixed, "device": device})
    env = common.environment("cuda")
    assert set(env) == KEYS - {"cpu", "threads"} | {"processor", "num_threads"}
    assert (env["processor"], env["num_threads"]) == (fixed["cpu"], fixed["threads"])
    assert {k: v for k, v in env.items() if k not in ("processor", "num_threads")} == {
        k: v for k, v in {**fixed, "device": "cuda"}.items() if k not in ("cpu", "threads")}


def test_committed_benchmark_environments_still_read():
    """Files written before the record gained keys print their one-line description."""
    common = _benchmarks_common()
    files = sorted((REPO / "benchmarks" / "results").glob("*.json"))
    envs = [e for e in (json.loads(f.read_text()).get("environment") for f in files) if e]
    assert envs, "no committed benchmark file records an environment"
    for env in envs:
        line = common.describe(env)
        assert line.startswith(f"torch {env['torch']}, {env['num_threads']} threads, {env['processor']} (")


def test_each_run_gets_the_cpu_seconds_since_the_previous_run_ended(monkeypatch):
    clock = iter([12.5, 20.0, 20.25])
    monkeypatch.setattr(machine.time, "process_time", lambda: next(clock))
    monkeypatch.setattr(machine, "_cpu_at_last_run_end", [0.0])
    # the first run of a process: since it started (a worker's start-up is its run's)
    assert [machine.run_cpu_seconds() for _ in range(3)] == [12.5, 7.5, 0.25]
