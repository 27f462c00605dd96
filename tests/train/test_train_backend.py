"""Compile policy: auto compiles on CUDA only, an explicit choice is kept, a missing C++ compiler
falls back to eager with one line, and a compiled run trains to the eager run's result; the run
names the implementation each model ran."""
import io
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from train_helpers import tiny_overrides

import mlplab
from mlplab.train import backend


@pytest.mark.parametrize("choice, device, precision, steps, expect", [
    ("auto", "cuda", "fp32", 1, True),
    ("auto", "cpu", "bf16", 5000, True),     # long bf16 CPU run: compiled Mixers ~1.5x faster
    ("auto", "cpu", "bf16", 100, False),     # too short to repay ~20 s of compilation
    ("auto", "cpu", "fp32", 5000, False),    # fp32: no gain measured
    (True, "cpu", "fp32", 1, True), (False, "cuda", "bf16", 5000, False)])
def test_resolve_compile(monkeypatch, choice, device, precision, steps, expect):
    monkeypatch.setattr(backend, "cpp_compiler", lambda: "/usr/bin/c++")
    monkeypatch.setattr(backend, "compile_unavailable_reason", lambda device: None)  # a GPU Triton supports
    assert backend.resolve_compile(choice, torch.device(device), precision, steps) is expect


def test_auto_without_a_compiler_stays_eager(monkeypatch):
    monkeypatch.setattr(backend, "cpp_compiler", lambda: None)
    assert backend.resolve_compile("auto", torch.device("cpu"), "bf16", 10**6) is False


def test_no_cpp_compiler_trains_eagerly(monkeypatch):
    monkeypatch.setattr(backend, "cpp_compiler", lambda: None)
    model, out = nn.Linear(2, 2), io.StringIO()
    assert backend.compile_model(model, torch.device("cpu"), warn=out) is model
    assert "no C++ compiler" in out.getvalue() and "training eagerly" in out.getvalue()


def test_compile_config_values_are_checked():
    assert mlplab.make_config("synthetic_tiny", ["run.compile=true"]).run.compile is True
    assert mlplab.make_config("synthetic_tiny", ["run.compile=auto"]).run.compile == "auto"
    assert mlplab.make_config("synthetic_tiny", {}).run.compile == "auto"
    with pytest.raises((TypeError, ValueError), match="run.compile"):
        mlplab.make_config("synthetic_tiny", ["run.compile=sometimes"])


@pytest.mark.slow
@pytest.mark.skipif(backend.cpp_compiler() is None, reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_run_matches_eager(tmp_path):
    """Same seed, same data: the compiled step computes the eager step's function (fp32 round-off)."""
    res = {}
    for flag in (False, True):
        cfg = mlplab.make_config(None, tiny_overrides(tmp_path, name=f"c{flag}", **{
            "run.compile": flag, "schedule.epochs": 1, "model.kwargs.depth": 1}))
        res[flag] = mlplab.train(cfg)
    assert res[True]["train_loss"] == pytest.approx(res[False]["train_loss"], rel=1e-4)
    assert res[True]["test_acc"] == pytest.approx(res[False]["test_acc"], abs=2 / 128)


@pytest.mark.parametrize("native, device, cuda_bf16, expect", [
    (True, "cpu", False, "bf16"),   # AVX512-BF16 / AMX: native bf16 matmuls
    (False, "cpu", False, "fp32"),  # AVX2 only: bf16 is emulated and slower than fp32
    (False, "cuda", True, "bf16"),
    (True, "cuda", False, "fp32"),  # a GPU without bf16: the CPU's flags do not matter
])
def test_precision_auto_follows_the_hardware(monkeypatch, native, device, cuda_bf16, expect):
    from mlplab.train import runplan

    monkeypatch.setattr(runplan, "cpu_has_native_bf16", lambda: native)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda_bf16)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))  # per generation: test_gpu_policy
    assert runplan.resolve_precision("auto", torch.device(device)) == expect
    assert runplan.resolve_precision("fp32", torch.device(device)) == "fp32"


_FAULTS_PER_CYCLE = r"""
import ctypes, ctypes.util, resource, statistics, sys, torch
from mlplab.train.backend import keep_freed_memory
try:  # glibc's initial mmap threshold, held fixed (no adaptation): big blocks are unmapped when freed
    ctypes.CDLL(ctypes.util.find_library("c")).mallopt(-3, 128 * 1024)
except (OSError, AttributeError):
    pass
if sys.argv[1] == "keep" and not keep_freed_memory():  # ... unless keep_freed_memory changes that
    print("SKIP"); sys.exit(0)
def faults_of_one_cycle():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [torch.empty(4 << 20).fill_(1.0) for _ in range(3)]  # 3 x 16 MiB, like a step's activations
    del blocks
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
faults_of_one_cycle()
print(statistics.median(faults_of_one_cycle() for _ in range(20)))
"""


def _median_faults_per_cycle(mode: str) -> str:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", _FAULTS_PER_CYCLE, mode], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_keep_freed_memory_reuses_blocks_without_page_faults():
    """Three 16 MiB blocks allocated, filled and freed 20 times. Where glibc unmaps them when freed
    (its initial 128 KiB mmap threshold, held fixed) every cycle maps fresh pages (~12,000 faults,
    one per 4 KiB page); keep_freed_memory called after that must make the median cycle take none.
    (glibc's own adaptive thresholds give either, from one process to the next: ~8,000 or 0, so
    they are not the baseline.) Medians, since the
    kernel may fault a few cycles on its own (the heap grows now and then; CI once saw 3 of 20).
    In fresh processes, as the allocator's state is per process."""
    kept = _median_faults_per_cycle("keep")
    if kept == "SKIP":
        pytest.skip("not glibc: keep_freed_memory changes nothing")
    unmapped = float(_median_faults_per_cycle("unmap"))
    assert unmapped >= 3 * 1024, unmapped  # the measurement sees unmapping
    assert float(kept) < unmapped / 8, (kept, unmapped)
    assert backend.keep_freed_memory() is backend.keep_freed_memory()  # idempotent


# ----------------------------------------------------------------------------- implementation

def test_the_run_names_the_implementation_each_model_ran(monkeypatch):
    from mlplab.layers import fused
    from mlplab.models import create_model
    from mlplab.train.backend import describe_implementation, implementation_line

    cpu = torch.device("cpu")
    mixer = create_model("s_mixer", hidden_dim=8, depth=2, image_size=8)
    if fused.available():
        d = describe_implementation(mixer, cpu, "fp32", False)
        assert d["path"] == "fused seams" and d["why_not_fused"] is None and d["kernels"]["available"]
        assert implementation_line(d) == "fused seams, eager, fp32"
    mixer.impl = "module"
    assert implementation_line(describe_implementation(mixer, cpu, "bf16", True)) == \
        "module path (impl=module), compiled, bf16"
    mixer.impl = "auto"
    monkeypatch.setattr(fused, "available", lambda: False)
    monkeypatch.setattr(fused, "status", lambda: {"available": False, "reason": "no C compiler", "library": None})
    d = describe_implementation(mixer, cpu, "fp32", False)
    assert (d["path"], d["why_not_fused"]) == ("module path", "the fused kernels are unavailable: no C compiler")
    assert d["kernels"]["reason"] == "no C compiler"
    d = describe_implementation(create_model("mlp", image_size=8), cpu, "fp32", False)
    assert (d["path"], d["why_not_fused"], d["kernels"]) == ("module path", None, None)  # no fused path to miss


def test_an_impl_the_model_or_machine_lacks_is_refused_in_one_sentence():
    from mlplab.errors import BadInput
    from mlplab.models import create_model
    from mlplab.train.backend import apply_impl

    cpu = torch.device("cpu")
    with pytest.raises(BadInput, match="model.impl=fused: mlp has no 'fused' implementation"):
        apply_impl(create_model("mlp", image_size=8), "fused", cpu, "fp32")
    with pytest.raises(BadInput, match="the fused seams cannot run this training step: a Mixer without LayerNorms"):
        apply_impl(create_model("s_mixer", hidden_dim=8, depth=1, image_size=8, norm=False), "fused", cpu, "fp32")
    assert apply_impl(create_model("s_mixer", hidden_dim=8, depth=1, image_size=8), "definition", cpu, "fp32").impl \
        == "definition"


def test_results_record_the_implementation(tiny):
    from mlplab.train import train

    res = train(tiny("impl", **{"model.impl": "module"}))
    saved = json.loads((Path(res["run_dir"]) / "results.json").read_text())
    assert saved["implementation"]["path"] == "module path" and saved["implementation"]["impl"] == "module"
    assert saved["implementation"]["why_not_fused"] == "impl=module"
