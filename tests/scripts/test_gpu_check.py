"""scripts/gpu_check.py and gpu_check.sh, without a GPU: the gates on fake measurements, the
summary rewritten after every check, the budgets, Fashion-MNIST's SKIP, the DDP check's verdict,
the checks themselves small on the CPU, and the shell script on a fake node without pip."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def b16_run(**change):
    """A bench_mixer_step b16/bf16 run as its JSON holds it (numbers made up, H100-like)."""
    res = {"mlplab": {"mfu": 0.40, "ms_per_step": 40.0, "speed_vs_timm": 1.10},
           "mlplab_compiled": {"mfu": 0.55, "ms_per_step": 29.0}, "mlplab_rp": {"mfu": 0.39, "ms_per_step": 41.0},
           "mlplab_rp_compiled": {"mfu": 0.54, "ms_per_step": 29.5}, "timm": {"mfu": 0.36, "ms_per_step": 44.0},
           "reference": {"mfu": 0.35, "ms_per_step": 45.0}}
    run = {"suite": "b16", "dtype": "bf16", "batch": 256, "image": 224, "gemm_gflops": 700e3, "peak_tflops": 989.5,
           "rp_over_normal_time_ratio": 1.03, "rp_over_normal_time_ratio_compiled": 1.02, "results": res}
    for k, v in change.items():
        if "." in k:
            name, field = k.split(".")
            if v is None:
                res[name].pop(field, None)
            else:
                res[name][field] = v
        elif v is None:
            run["results"].pop(k, None) if k in res else run.pop(k)
        else:
            run[k] = v
    return run


# ----------------------------------------------------------------------------- the gates

def test_a_fast_mixer_b16_passes_and_its_line_shows_every_number(gc):
    ok, line, n = gc.judge_b16(b16_run())
    assert ok and "BELOW" not in line
    assert "Mixer-B/16 224x224 bf16 batch 256: MFU eager 40.0% / compiled 55.0% of the GEMM rate measured here, " \
           "700 TFLOP/s (28.3% / 38.9% of the datasheet 989.5 TFLOP/s)" in line
    assert "RP/normal 1.030 eager, 1.020 compiled; 1.10x timm's step (eager)" in line
    assert n["mfu_compiled"] == 0.55 and n["speed_vs_timm"] == 1.10 and n["ms_per_step"]["timm"] == 44.0


@pytest.mark.parametrize("change,below", [
    ({"mlplab_compiled.mfu": 0.24}, "MFU compiled 0.24 < floor 0.25"),
    ({"mlplab.mfu": 0.14}, "MFU eager 0.14 < floor 0.15"),
    ({"rp_over_normal_time_ratio": 1.11}, "RP/normal eager 1.11 > floor 1.1"),
    ({"rp_over_normal_time_ratio_compiled": 1.2}, "RP/normal compiled 1.2 > floor 1.1"),
    ({"mlplab.speed_vs_timm": 0.89}, "speed vs timm 0.89 < floor 0.9"),
    ({"gemm_gflops": 400e3}, "GEMM / datasheet 0.404 < floor 0.5"),
    ({"mlplab_compiled": None}, "no compiled step was timed"),
])
def test_each_floor_fails_the_check_and_says_which(gc, change, below):
    ok, line, _ = gc.judge_b16(b16_run(**change))
    assert not ok and line.endswith("; BELOW: " + below), line


def test_at_the_floors_it_passes(gc):
    f = gc.FLOORS
    run = b16_run(**{"mlplab.mfu": f["mfu_eager"], "mlplab_compiled.mfu": f["mfu_compiled"],
                     "mlplab.speed_vs_timm": f["speed_vs_timm"], "rp_over_normal_time_ratio": f["rp_over_normal"],
                     "rp_over_normal_time_ratio_compiled": f["rp_over_normal"],
                     "gemm_gflops": 1e3 * f["gemm_vs_datasheet"] * 989.5})
    assert gc.judge_b16(run)[0]


def test_without_timm_or_a_datasheet_entry_those_comparisons_are_left_out(gc):
    ok, line, n = gc.judge_b16(b16_run(**{"mlplab.speed_vs_timm": None, "peak_tflops": None, "gemm_gflops": 50e3}))
    assert ok and n["speed_vs_timm"] is None and n["datasheet_tflops"] is None
    assert "timm not importable: no comparison" in line and "(no datasheet peak for this device)" in line


def test_the_bench_check_runs_full_size_mixer_b16_and_gates_what_it_wrote(gc, tmp_path, monkeypatch):
    seen = []

    def fake_child(cmd, timeout, log, env=None):
        seen.append((cmd, timeout))
        Path(cmd[cmd.index("--out") + 1]).write_text(json.dumps({"runs": [b16_run(gemm_gflops=600e3)]}))
        return 0

    monkeypatch.setattr(gc, "run_child", fake_child)
    monkeypatch.setattr(gc.torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3")
    line, n = gc.check_bench("b16", torch.device("cuda"), tmp_path, 195, short=True)
    cmd, timeout = seen[0]
    assert timeout == 195 and "--quick" not in cmd  # never a shrunken stand-in
    for flag, value in (("--suites", "b16"), ("--dtypes", "bf16"), ("--batch", "256"), ("--peak-tflops", "989.5"),
                        ("--device", "cuda")):
        assert cmd[cmd.index(flag) + 1] == value
    assert "--compile" in cmd and "of the GEMM rate measured here, 600 TFLOP/s" in line
    monkeypatch.setattr(gc, "run_child", lambda cmd, timeout, log, env=None: (
        Path(cmd[cmd.index("--out") + 1]).write_text(json.dumps({"runs": [b16_run(rp_over_normal_time_ratio=1.3)]}))
        and 0))
    with pytest.raises(gc.Failed, match="BELOW: RP/normal eager 1.3") as failed:
        gc.check_bench("b16", torch.device("cuda"), tmp_path, 195, short=True)
    assert failed.value.numbers["rp_over_normal"] == 1.3  # a failure keeps what it measured


def test_the_datasheet_table_by_device_name():
    from mlplab.train.accelerator import datasheet_bf16_tflops

    expect = {"NVIDIA H100 80GB HBM3": 989.5, "NVIDIA H100 PCIe": 756.5, "NVIDIA H100 NVL": 835.5,
              "NVIDIA H200": 989.5, "NVIDIA A100-SXM4-80GB": 312.0, "NVIDIA A100 80GB PCIe": 312.0,
              "NVIDIA L40S": 362.05, "NVIDIA L40": 181.05, "NVIDIA L4": 121.0, "NVIDIA A10": 125.0,
              "NVIDIA GeForce RTX 4090": 165.2, "NVIDIA GH200 480GB": 989.5,
              "NVIDIA A10G": None, "Tesla V100-SXM2-32GB": None, "NVIDIA B300": None}
    assert {name: datasheet_bf16_tflops(name) for name in expect} == expect


# ----------------------------------------------------------------------------- the run

def test_without_a_gpu_it_says_so(gc, capsys, monkeypatch):
    monkeypatch.setattr(gc.torch.cuda, "is_available", lambda: False)
    assert gc.main(["--short"]) == 2
    assert "no CUDA device visible" in capsys.readouterr().err


def test_the_node_is_printed_first_with_driver_and_datasheet(gc, monkeypatch):
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=80 * 2**30)
    monkeypatch.setattr(gc.torch.cuda, "get_device_properties", lambda d: props)
    monkeypatch.setattr(gc, "_driver_version", lambda: "550.54.15")
    monkeypatch.setattr(gc.torch.version, "cuda", "12.4")
    lines = gc.node_lines(gc.node_record(torch.device("cuda", 0)))
    assert lines[0].startswith(f"torch {torch.__version__} ({sys.executable}), timm ")
    assert lines[1] == "CUDA 12.4, driver 550.54.15"
    assert lines[2] == ("device cuda:0: NVIDIA H100 80GB HBM3, compute capability 9.0, 80.0 GiB, "
                        "datasheet bf16 989.5 TFLOP/s")
    props.name = "NVIDIA B300"
    assert gc.node_lines(gc.node_record(torch.device("cuda", 0)))[2].endswith(
        "not in the datasheet table: MFU against the measured GEMM rate only")


def _fake_checks(gc, monkeypatch, checks):
    monkeypatch.setattr(gc, "plan_checks", lambda a, device, out: checks)
    monkeypatch.setattr(gc, "node_record", lambda device: {"node": "fake"})
    monkeypatch.setattr(gc, "node_lines", lambda rec: ["torch x", "CUDA y", "device z"])


def test_the_summary_is_rewritten_after_every_check(gc, tmp_path, monkeypatch, capsys):
    """A run killed during its third check (its allocation ends) keeps the first two results."""
    path = tmp_path / "gpu_check.json"

    def third():
        on_disk = json.loads(path.read_text())
        assert set(on_disk["checks"]) == {"one", "two"} and not on_disk["finished"]
        raise KeyboardInterrupt  # the kill

    _fake_checks(gc, monkeypatch, [("one", "sync_free", lambda: "fine"),
                                   ("two", "fmnist", lambda: (_ for _ in ()).throw(gc.Skip("no data"))),
                                   ("three", "sync_free", third)])
    with pytest.raises(KeyboardInterrupt):
        gc.main(["--device", "cpu", "--out", str(tmp_path)])
    saved = json.loads(path.read_text())
    assert saved["checks"]["one"]["status"] == "PASS" and saved["checks"]["two"]["status"] == "SKIP"
    assert (saved["passed"], saved["failed"], saved["skipped"], saved["finished"]) == (1, 0, 1, False)
    assert saved["node"] == {"node": "fake"} and saved["floors"] == gc.FLOORS
    printed = capsys.readouterr().out.splitlines()
    assert printed[:3] == ["torch x", "CUDA y", "device z"] and printed[3].startswith(f"results: {path}")


def test_a_check_past_its_budget_fails_and_the_rest_still_run(gc, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(gc.BUDGETS, "sync_free", (0.3, 0.3))
    _fake_checks(gc, monkeypatch, [("slow", "sync_free", lambda: time.sleep(5)), ("next", "sync_free", lambda: "ok"),
                                   ("broken", "sync_free", lambda: 1 / 0)])
    assert gc.main(["--device", "cpu", "--out", str(tmp_path)]) == 1
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert saved["checks"]["slow"]["status"] == "FAIL" and "timed out after its budget of 0 s" in \
        saved["checks"]["slow"]["detail"]
    assert saved["checks"]["next"]["status"] == "PASS" and saved["finished"]
    assert saved["checks"]["broken"]["detail"] == "ZeroDivisionError: division by zero"
    assert "1 passed, 2 failed, 0 skipped" in capsys.readouterr().out


def test_the_short_run_fits_seven_minutes_and_skips_what_no_longer_fits(gc, tmp_path, monkeypatch):
    a = gc.parse_args(["--short"])
    names = [n for n, _, _ in gc.plan_checks(a, torch.device("cuda"), tmp_path)]
    assert names[0] == "bench_b16" and "bench_smixer" not in names  # the decisive number first
    assert [n for n in names if "compiled" in n] == ["train[sw_mlp[sparse],compiled]"]
    assert sum(gc.BUDGETS[key][1] for _, key, _ in gc.plan_checks(a, torch.device("cuda"), tmp_path)) <= \
        gc.SHORT_TOTAL_S - 15  # startup and the node's lines included
    monkeypatch.setattr(gc, "SHORT_TOTAL_S", 0)
    _fake_checks(gc, monkeypatch, [("one", "sync_free", lambda: "never")])
    assert gc.main(["--device", "cpu", "--short", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "gpu_check.json").read_text())["checks"]["one"]["status"] == "SKIP"


def test_a_child_past_its_budget_is_killed_with_its_own_children(gc, tmp_path):
    pid_file = tmp_path / "grandchild"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    with pytest.raises(gc.CheckTimeout, match="timed out after its budget of 2 s"):
        gc.run_child([sys.executable, "-c", code], 2, tmp_path / "log")
    pid = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the grandchild outlived the check")


# ----------------------------------------------------------------------------- Fashion-MNIST and DDP

def test_fashion_mnist_is_skipped_without_its_folder_and_read_from_it(gc, tmp_path):
    with pytest.raises(gc.Skip, match="set FMNIST_DIR to a folder holding the four Fashion-MNIST IDX files"):
        gc.fmnist_folder({})
    with pytest.raises(AssertionError, match=f"FMNIST_DIR={tmp_path} holds no Fashion-MNIST: it needs "
                                             "train-images-idx3-ubyte, "):
        gc.fmnist_folder({"FMNIST_DIR": str(tmp_path)})
    inner = tmp_path / "fashion_mnist"
    inner.mkdir()
    for i, f in enumerate(gc.FMNIST_FILES):
        (inner / (f + ".gz" if i % 2 else f)).write_bytes(b"")
    assert gc.fmnist_folder({"FMNIST_DIR": str(tmp_path)}) == inner
    assert gc.run_check(lambda: gc.fmnist_folder({}), None)[0] == "SKIP"


DDP_BREAKS = {"Unsupported method call (call_method UserDefinedObjectVariable(Reducer) _rebuild_buckets [] {})": 1,
              "Attempted to call function marked as skipped (module: torch.nn.parallel.distributed, qualname: "
              "DistributedDataParallel._inside_ddp_forward, skip reason: file matches MOD_SKIPLIST)": 2}


def test_the_fmnist_check_gates_accuracy_and_time(gc, tmp_path, monkeypatch):
    monkeypatch.setenv("FMNIST_DIR", str(tmp_path))
    for f in gc.FMNIST_FILES:
        (tmp_path / f"{f}.gz").write_bytes(b"")
    seen = []

    def fake_child(runs):
        def child(cmd, timeout, log, env=None):
            seen.append(cmd)
            Path(cmd[cmd.index("--out") + 1]).write_text(json.dumps({"runs": runs}))
            return 0
        return child

    monkeypatch.setattr(gc, "run_child", fake_child([{"test_acc": 0.905, "wall_s": 8.2}]))
    line, n = gc.check_fmnist(torch.device("cuda"), tmp_path, 25, short=True)
    assert line == "1 seed(s): test accuracy 90.50% in 8.2 s (target >= 90% in <= 10 s)" and n["wall_s"] == [8.2]
    assert f"data.root={tmp_path}" in seen[0] and seen[0][seen[0].index("--seeds") + 1] == "0"
    for runs in ([{"test_acc": 0.899, "wall_s": 8.2}], [{"test_acc": 0.95, "wall_s": 10.5}]):
        monkeypatch.setattr(gc, "run_child", fake_child(runs))
        with pytest.raises(gc.Failed, match=r"target >= 90% in <= 10 s"):
            gc.check_fmnist(torch.device("cuda"), tmp_path, 25, short=True)


def ddp_report(sha="a" * 64, allreduces=4, steps=4, world=2, breaks=0):
    reasons = {**DDP_BREAKS, **({"Data pointer comparison (richcompare_impl)": breaks} if breaks else {})}
    run = {"weights_sha256": sha, "steps": steps, "world_size": world, "compiled": True, "train_loss": 1.0,
           "dynamo": {"backend": "inductor", "graphs": 3, "graph_breaks": 3 + breaks, "skipped_frames": 3,
                      "break_reasons": reasons}}
    return {"reference": dict(run, weights_sha256="a" * 64), "resumed": run,
            "allreduces": {"reference": allreduces, "stopped": 2, "resumed": 2}}


def test_the_ddp_verdict(gc):
    assert "stopped after epoch 1 and resumed: weights bit-identical" in gc.judge_ddp([ddp_report()] * 2)
    for bad, match in ((dict(sha="b" * 64), "resumed weights differ"), (dict(allreduces=8), "8 gradient all-reduces "
                       "for 4 steps"), (dict(world=1), "ran on 1 process"),
                       (dict(breaks=1), "graph breaks in the model: {'Data pointer")):
        with pytest.raises(AssertionError, match=match):
            gc.judge_ddp([ddp_report(**bad), ddp_report(**bad)])


@pytest.mark.slow
def test_ddp_on_one_device_two_gloo_ranks_compiled_resume_bit_identically(gc, tmp_path, monkeypatch):
    """The GPU check's own code on the CPU: two gloo ranks, DDP under torch.compile (dynamo and AOT
    autograd as on a GPU; inductor's kernel generation left out to keep the suite fast), two
    accumulated micro-batches, stopped after epoch 1 and resumed."""
    monkeypatch.setenv("MLPLAB_COMPILE_BACKEND", "aot_eager")
    line = gc.check_ddp_resume(torch.device("cpu"), tmp_path, 600)
    assert "2 gloo ranks on one device, DDP compiled (aot_eager: " in line and "weights bit-identical" in line, line


@pytest.mark.slow
def test_checks_run_on_the_cpu(gc, tmp_path, capsys):
    rc = gc.main(["--device", "cpu", "--quick", "--only", "sync,train,fmnist", "--no-compile", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rc == 0, printed
    assert set(summary["checks"]) == {f"sync_free[{r}]" for r in gc.RECIPES} | {"sync_free[cifar,host]", "fmnist"} | \
        {f"train[{m},eager]" for m in gc.MODELS}
    assert summary["checks"].pop("fmnist")["status"] == "SKIP" or os.environ.get("FMNIST_DIR")
    assert all(c["status"] == "PASS" for c in summary["checks"].values()) and summary["finished"]
    assert printed.startswith(f"torch {torch.__version__}") and "passed, 0 failed" in printed


# ----------------------------------------------------------------------------- gpu_check.sh on a fake node

def _fake_node(tmp_path, python: str):
    """A checkout whose setup.sh only records that it ran, and a PATH where pip and apt record and fail."""
    repo, bin_ = tmp_path / "repo", tmp_path / "bin"
    (repo / "scripts").mkdir(parents=True)
    bin_.mkdir()
    shutil.copy(ROOT / "scripts" / "gpu_check.sh", repo / "scripts")
    shutil.copy(ROOT / "pyproject.toml", repo)
    (repo / "scripts" / "gpu_check.py").symlink_to(SCRIPT)
    (repo / "src").symlink_to(ROOT / "src")
    (repo / "scripts" / "setup.sh").write_text(f"echo setup >> {tmp_path / 'calls'}; exit 1\n")
    for tool in ("pip", "pip3", "apt-get", "apt", "sudo", "curl", "wget"):
        (bin_ / tool).write_text(f"#!/bin/sh\necho {tool} >> {tmp_path / 'calls'}\nexit 1\n")
        (bin_ / tool).chmod(0o755)
    (bin_ / "python3").write_text(f"#!/bin/sh\nexec {python} \"$@\"\n")
    (bin_ / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_}:/usr/bin:/bin"
    return repo, env, tmp_path / "calls"


def _gpu_check_sh(repo, env, *args):
    return subprocess.run(["bash", str(repo / "scripts" / "gpu_check.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_node_with_torch_runs_the_check_as_it_is(tmp_path):
    """python3 imports torch: used as it is (no pip, apt or setup), its lines first, results kept."""
    repo, env, calls = _fake_node(tmp_path, sys.executable)
    out = _gpu_check_sh(repo, env, "--device", "cpu", "--quick", "--only", "fmnist", "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert not calls.exists()
    lines = out.stdout.splitlines()
    assert lines[0] == f"gpu_check: {sys.executable}: torch {torch.__version__}, CUDA {torch.version.cuda}"
    assert lines[1].startswith(f"torch {torch.__version__}") and lines[2].startswith("CUDA ") and \
        lines[3].startswith("device cpu")
    assert json.loads((tmp_path / "r" / "gpu_check.json").read_text())["finished"]


def test_a_cuda_torch_is_never_replaced_even_without_a_visible_gpu(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import torch.version\ntorch.version.cuda = '12.8'\n")
    repo, env, calls = _fake_node(tmp_path, sys.executable)
    env["PYTHONPATH"] = str(site)
    out = _gpu_check_sh(repo, env, "--short")
    assert out.returncode == 2 and not calls.exists(), out.stdout + out.stderr
    assert "CUDA 12.8" in out.stdout and "no CUDA device visible" in out.stderr


def test_without_a_usable_torch_it_falls_back_to_setup(tmp_path):
    repo, env, calls = _fake_node(tmp_path, f"{sys.executable} -S")  # -S: no site-packages, no torch
    out = _gpu_check_sh(repo, env, "--short")
    assert out.returncode == 2 and calls.read_text().split() == ["setup"], out.stdout + out.stderr
    assert ": no torch" in out.stdout and "running scripts/setup.sh" in out.stdout and "setup failed" in out.stderr
    cpu_only, env, calls = _fake_node(tmp_path / "cpu", sys.executable)
    out = _gpu_check_sh(cpu_only, env, "--short")  # a CPU build is not usable for a GPU check
    assert "not usable, a CPU build of torch" in out.stdout and calls.read_text().split() == ["setup"]
