"""The GPU paths' decisions, checked on the CPU with mocked devices: precision and compile per
GPU generation, dynamo reset between runs, per-device MFU, DDP's rank setup, the sweep
executor's GPU assignment and the Slurm request."""
from __future__ import annotations

import io
import json

import pytest
import torch

from mlplab.errors import BadInput
from mlplab.experiments import executors
from mlplab.train import accelerator, backend, distributed, runplan
from mlplab.train.metrics import mfu

# (name, compute capability, is_bf16_supported as torch reports it) -> (precision auto, compile auto)
GPUS = {
    "P100": ((6, 0), False, "fp32", False),
    "V100": ((7, 0), True, "fp32", True),  # bf16 "supported" by emulation only
    "T4": ((7, 5), True, "fp32", True),
    "A100": ((8, 0), True, "bf16", True),
    "H100": ((9, 0), True, "bf16", True),
}


@pytest.fixture
def fake_gpu(monkeypatch):
    def use(name, triton=True):
        cap, bf16, _, _ = GPUS[name]
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
        monkeypatch.setattr(accelerator.importlib.util, "find_spec",
                            lambda n, *a: object() if (n == "triton" and triton) else None)
    return use


@pytest.mark.parametrize("name", sorted(GPUS))
def test_precision_and_compile_auto_per_gpu_generation(fake_gpu, name):
    fake_gpu(name)
    _, _, precision, compiles = GPUS[name]
    cuda = torch.device("cuda", 0)
    assert runplan.resolve_precision("auto", cuda) == precision
    assert backend.resolve_compile("auto", cuda, precision) is compiles
    assert runplan.resolve_precision("fp32", cuda) == "fp32" and backend.resolve_compile(False, cuda) is False


def test_compile_auto_needs_triton(fake_gpu):
    fake_gpu("H100", triton=False)
    cuda = torch.device("cuda", 0)
    assert backend.resolve_compile("auto", cuda, "bf16") is False
    m, said = torch.nn.Linear(2, 2), io.StringIO()
    assert backend.compile_model(m, cuda, warn=said) is m  # run.compile=true trains eagerly, saying why
    assert "the triton package is not installed; training eagerly" in said.getvalue()


def test_compile_model_resets_dynamo_between_runs(monkeypatch):
    """Runs trained one after another in one process each start from empty dynamo caches (else
    the recompile limit silently leaves later shapes eager while results say compiled)."""
    calls = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: calls.append("reset"))
    monkeypatch.setattr(torch, "compile", lambda m, **kw: ("compiled", m))
    monkeypatch.setattr(backend, "cpp_compiler", lambda: "/usr/bin/c++")
    for width in (2, 3, 4):
        assert backend.compile_model(torch.nn.Linear(width, 2), torch.device("cpu"))[0] == "compiled"
    assert calls == ["reset"] * 3


def test_fp32_policy_turns_tf32_off():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        accelerator.set_fp32_matmul_policy()
        assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_mfu_is_per_device():
    # 8 processes at 40% of their own device each: 40%, not 320%
    assert mfu(8 * 0.4 * 100e12, 100e12, 8) == pytest.approx(0.4)
    assert mfu(0.4 * 100e12, 100e12) == pytest.approx(0.4)


def test_ranks_need_local_rank(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(ValueError, match="LOCAL_RANK not set; launch with torchrun"):
        distributed.init_distributed("cuda")


def test_each_rank_sets_its_gpu_before_anything_reads_one(monkeypatch):
    """torch.cuda.set_device(LOCAL_RANK) happens before the process group (bound to that GPU)
    and before train() checks memory, so no rank opens a context on GPU 0."""
    events = []
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "6")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: events.append(("set_device", i)))
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda **kw: events.append(("init", kw["backend"], kw["device_id"],
                                                    kw["timeout"].total_seconds())))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 6)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 4)
    info = distributed.init_distributed("cuda")
    assert events == [("set_device", 2),
                      ("init", "nccl", torch.device("cuda", 2), 60.0 * distributed.DEFAULT_TIMEOUT_MIN)]
    assert (info.rank, info.world_size, info.local_rank) == (6, 4, 2)


@pytest.mark.parametrize("device,chosen,expect", [
    ("cuda", None, ("nccl", True)), ("cuda", "gloo", ("gloo", False)), ("cpu", None, ("gloo", False)),
    ("cpu", "gloo", ("gloo", False)),
])
def test_the_backend_is_nccl_on_cuda_unless_gloo_is_asked_for(monkeypatch, device, chosen, expect):
    """MLPLAB_DIST_BACKEND=gloo on CUDA: several ranks may share one GPU (gpu_check's DDP check);
    the rank's GPU is still made current first, and only NCCL is bound to it (device_id)."""
    events = []
    for k, v in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    if chosen:
        monkeypatch.setenv("MLPLAB_DIST_BACKEND", chosen)
    else:
        monkeypatch.delenv("MLPLAB_DIST_BACKEND", raising=False)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: events.append(("set_device", i)))
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda **kw: events.append((kw["backend"], "device_id" in kw)))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    distributed.init_distributed(device)
    assert events == ([("set_device", 0)] if device == "cuda" else []) + [expect]


@pytest.mark.parametrize("device,bad", [("cuda", "mpi"), ("cpu", "nccl")])
def test_an_unusable_backend_is_refused_in_one_sentence(monkeypatch, device, bad):
    for k, v in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MLPLAB_DIST_BACKEND": bad}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(BadInput, match=f"MLPLAB_DIST_BACKEND={bad} on {device}: use gloo"):
        distributed.init_distributed(device)


def test_a_rank_plans_on_its_own_gpu_before_the_group_exists(monkeypatch):
    """Under torchrun the plan (and its memory check) resolves cuda:LOCAL_RANK, not GPU 0."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runplan.resolve_device("auto", local_rank=runplan._torchrun_local_rank()) == torch.device("cuda", 2)


@pytest.mark.parametrize("visible,count,jobs,expected", [
    ("4,5,6,7", 8, 6, ["4", "5", "6", "7"]),  # the parent's list, never two runs on one GPU
    ("GPU-aa,GPU-bb", 8, 1, ["GPU-aa"]),
    (None, 3, 2, ["0", "1"]),
    (None, 0, 3, [None, None, None]),  # CPU: jobs workers share the cores
    ("", 8, 2, [None, None]),  # CUDA_VISIBLE_DEVICES="" hides every GPU
])
def test_worker_gpus_honour_the_parents_list(monkeypatch, visible, count, jobs, expected):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    slots = executors.worker_slots(jobs, executors.visible_gpus())
    assert slots == expected
    gpus = [s for s in slots if s is not None]
    assert len(gpus) == len(set(gpus))


def test_slurm_asks_for_a_gpu_unless_every_run_is_on_cpu(tmp_path):
    dirs = []
    for i, device in enumerate(["cpu", "cpu"]):
        d = tmp_path / f"r{i}"
        d.mkdir()
        (d / "spec.json").write_text(json.dumps({"name": d.name, "overrides": {"run.device": device}}))
        dirs.append(d)
    assert executors.slurm_gpus_per_run(dirs) == 0
    (dirs[1] / "spec.json").write_text(json.dumps({"name": "r1", "overrides": {}}))  # auto
    assert executors.slurm_gpus_per_run(dirs) == 1


@pytest.mark.parametrize("rank", [0, 1])
def test_with_download_rank_zero_fetches_first(monkeypatch, rank, tiny):
    """Under torchrun with data.download, rank 0 loads (downloads, extracts) before the barrier
    the other ranks wait at; without download every rank loads at once."""
    from mlplab.train import loop

    events = []
    monkeypatch.setattr(loop, "load_run_data", lambda cfg, device: events.append("load") or "data")
    monkeypatch.setattr(loop, "barrier", lambda dist: events.append("barrier"))
    dist = distributed.DistInfo(rank=rank, world_size=2)
    cfg = tiny(**{"data.download": True})
    assert loop._load_data(cfg, torch.device("cpu"), dist) == "data"
    assert events == (["load", "barrier"] if rank == 0 else ["barrier", "load"])
    events.clear()
    assert loop._load_data(tiny(), torch.device("cpu"), dist) == "data" and events == ["load"]


@pytest.mark.parametrize("initialized", [True, False])
def test_an_inline_sweep_hands_pytorchs_gpu_cache_back_after_each_run(monkeypatch, tmp_path, initialized):
    """Runs one after another in one process: what the allocator cached for a run is freed before
    the next one plans (its memory check and data.on_device=auto see it free); never where CUDA
    was not used (no context is made for it)."""
    from mlplab.utils.progress import RunTally

    calls = []
    monkeypatch.setattr(executors, "execute_run", lambda d: calls.append(d.name) or "done")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    dirs = [tmp_path / "a", tmp_path / "b"]
    out = executors._run_inline([([d], "") for d in dirs], lambda line: None, {}, RunTally(total=2),
                                {d: d.name for d in dirs})
    assert out == {d: "done" for d in dirs}
    assert calls == (["a", "empty_cache", "b", "empty_cache"] if initialized else ["a", "b"])
