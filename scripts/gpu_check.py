"""Accept a GPU node: one PASS/FAIL/SKIP line per check, gated on stated floors, results kept as it goes.

Command (docs/gpu.md): ``FMNIST_DIR=... bash scripts/gpu_check.sh --short --out results/gpu``
(``gpu_check.sh`` uses the node's own ``python3`` when it imports a CUDA torch; no pip, no apt).
It prints torch, CUDA, the driver and the device first; ``--out DIR`` then holds ``gpu_check.json``,
rewritten (atomically) after every check, so a run killed by its allocation keeps what it measured,
and every benchmark's JSON and log beside it.
Expect: PASS on every line of a working GPU from Ampere on (bf16 needs compute capability 8.0).
Time: ``--short`` at most 7 minutes on one H100 (each check has a budget, the sum fits; the
Mixer-B/16 benchmark runs first); the full run (no ``--short``) has no overall limit, its budgets
add up to 54 minutes. Neither has run on a GPU yet.

Checks
  bench_b16            full-size Mixer-B/16 (224x224, batch 256, bf16, AdamW) train step, eager and
                       compiled, normal and RP, against timm's MlpMixer at mixer_b16_224's sizes and the
                       GEMM rate measured in the same process; FAILs below the floors in FLOORS
  sync_free[RECIPE]    loader + augmentation batches under torch.cuda.set_sync_debug_mode("error");
                       ``[host]``: a dataset held in host memory, staged through the pinned ring
  train[MODEL,MODE]    a short bf16 run of every family, eager, and compiled (short: the sparse SW-MLP);
                       a dense model's compiled run FAILs with a graph break or a skipped frame
  ddp_resume           DDP on one GPU: two gloo ranks, compiled, run.accumulate_steps=2, stopped after
                       epoch 1 and resumed: weights bit-identical to an uninterrupted run, one all-reduce
                       per step (no_sync under accumulation)
  fmnist               Fashion-MNIST from $FMNIST_DIR (the four IDX files) to 90% in < 10 s; SKIP without it
  bench_smixer         (full run only) the S-Mixer's RP/normal
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]

#: A check FAILs below these (docs/gpu.md): Mixer-B/16's MFU as a share of the bf16 GEMM rate
#: measured in the same process, its step time against timm's on the same device, RP's step time
#: against the normal Mixer's, and the measured GEMM rate against the device's datasheet peak.
FLOORS = {"mfu_compiled": 0.25, "mfu_eager": 0.15, "speed_vs_timm": 0.90, "rp_over_normal": 1.10,
          "gemm_vs_datasheet": 0.50}

#: Seconds per check: (full run, --short). A check past its budget FAILs as timed out; the
#: --short budgets add up to at most SHORT_TOTAL_S, whatever the node.
BUDGETS = {"bench_b16": (600, 195), "sync_free": (60, 10), "train_eager": (60, 6), "train_compiled": (180, 40),
           "ddp_resume": (300, 60), "fmnist": (120, 25), "bench_smixer": (300, None)}
SHORT_TOTAL_S = 7 * 60

RECIPES: dict[str, dict[str, Any]] = {  # (image side, augment config)
    "cifar": {"side": 32, "augment": dict(crop_padding=4, hflip=True)},
    "cifar_autoaugment": {"side": 32, "augment": dict(crop_padding=4, hflip=True, autoaugment="cifar10",
                                                      random_erasing=0.25, mixup=0.8, cutmix=1.0,
                                                      label_smoothing=0.1)},
    "imagenet_style": {"side": 64, "augment": dict(hflip=True, randaugment="rand-m9-mstd0.5-inc1",
                                                   random_erasing=0.25, mixup=0.8, cutmix=1.0, mix_mode="elem",
                                                   label_smoothing=0.1)},
}

MODELS: dict[str, dict[str, Any]] = {  # one per family, small, on 32x32 synthetic images
    "mlp_mixer": {"model.kwargs.patch_size": 4, "model.kwargs.hidden_dim": 64, "model.kwargs.depth": 2},
    "rp_mlp_mixer": {"model.kwargs.patch_size": 4, "model.kwargs.hidden_dim": 64, "model.kwargs.depth": 2},
    "s_mixer": {"model.kwargs.patch_size": 4, "model.kwargs.hidden_dim": 64, "model.kwargs.depth": 2},
    "rp_s_mixer": {"model.kwargs.patch_size": 4, "model.kwargs.hidden_dim": 64, "model.kwargs.depth": 2},
    "sw_mlp": {"model.kwargs.patch_size": 4, "model.kwargs.width": 512, "model.kwargs.depth": 2,
               "model.kwargs.density": 0.25},
    "sw_mlp[sparse]": {"model.kwargs.patch_size": 4, "model.kwargs.width": 512, "model.kwargs.depth": 2,
                       "model.kwargs.density": 0.25, "model.kwargs.storage": "sparse"},
    "mlp": {"model.kwargs.width": 256, "model.kwargs.depth": 2},
}
SPARSE = {"sw_mlp[sparse]"}  # compiled with a graph break at each sparse product, by design
#: graph breaks in DDP's own wrapper (its forward's bookkeeping is not traced, by PyTorch's design)
DDP_WRAPPER = re.compile(r"DistributedDataParallel|Reducer")

#: The four Fashion-MNIST IDX files (each also found gzipped)
FMNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")


class Skip(Exception):
    """A check that cannot run here (missing data): SKIP, not FAIL."""


class CheckTimeout(Exception):
    pass


# ----------------------------------------------------------------------------- the node and the summary

def node_record(device: torch.device) -> dict[str, Any]:
    """torch, CUDA, the driver and the device: printed first, kept in the summary."""
    rec: dict[str, Any] = {"python": sys.executable, "torch": torch.__version__, "cuda": torch.version.cuda,
                           "driver": None, "device": str(device), "gpu": None, "timm": None}
    with contextlib.suppress(ImportError):
        import timm

        rec["timm"] = timm.__version__
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        rec["gpu"] = {"name": p.name, "capability": f"{p.major}.{p.minor}",
                      "memory_gib": round(p.total_memory / 2**30, 1),
                      "datasheet_bf16_tflops": _datasheet(p.name)}
        rec["driver"] = _driver_version()
    return rec


def _datasheet(name: str) -> float | None:
    from mlplab.train.accelerator import datasheet_bf16_tflops

    return datasheet_bf16_tflops(name)


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def node_lines(rec: dict[str, Any]) -> list[str]:
    gpu = rec["gpu"]
    peak = (f", datasheet bf16 {gpu['datasheet_bf16_tflops']:g} TFLOP/s" if gpu and gpu["datasheet_bf16_tflops"]
            else ", not in the datasheet table: MFU against the measured GEMM rate only" if gpu else "")
    return [f"torch {rec['torch']} ({rec['python']}), timm {rec['timm'] or 'not importable'}",
            f"CUDA {rec['cuda'] or 'none (a CPU build)'}, driver {rec['driver'] or 'unknown'}",
            f"device {rec['device']}" + (f": {gpu['name']}, compute capability {gpu['capability']}, "
                                         f"{gpu['memory_gib']} GiB{peak}" if gpu else "")]


class Summary:
    """The JSON summary, rewritten atomically after every check (a killed run keeps its results)."""

    def __init__(self, path: Path, mode: str, node: dict[str, Any]):
        self.path = path
        self.data: dict[str, Any] = {"mode": mode, "node": node, "floors": FLOORS, "checks": {}, "finished": False}
        self.write()

    def record(self, name: str, status: str, seconds: float, budget: float | None, detail: str,
               numbers: dict[str, Any] | None = None) -> None:
        self.data["checks"][name] = {"status": status, "seconds": round(seconds, 1), "budget_s": budget,
                                     "detail": detail, "numbers": numbers or {}}
        statuses = [c["status"] for c in self.data["checks"].values()]
        self.data.update(passed=statuses.count("PASS"), failed=statuses.count("FAIL"), skipped=statuses.count("SKIP"))
        self.write()

    def write(self) -> None:
        from mlplab.utils.io import atomic_write_json

        atomic_write_json(self.path, self.data)


# ----------------------------------------------------------------------------- budgets

@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise :class:`CheckTimeout` in this (main) thread after ``seconds``."""
    if not seconds:
        yield
        return

    def alarm(signum, frame):
        raise CheckTimeout(f"timed out after its budget of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_child(cmd: list[str], timeout: float | None, log: Path, env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` in its own process group, output to ``log``; past ``timeout`` the whole group is
    killed (compile workers too) and :class:`CheckTimeout` raised."""
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env or child_env(),
                             start_new_session=True)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CheckTimeout(f"timed out after its budget of {timeout:.0f} s (log: {log})") from None
        finally:  # also when this check's own time limit interrupts the wait
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def child_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def log_tail(log: Path, n: int = 1500) -> str:
    return log.read_text(errors="replace")[-n:] if log.is_file() else ""


# ----------------------------------------------------------------------------- Mixer-B/16, gated

def judge_b16(run: dict[str, Any], floors: dict[str, float] = FLOORS) -> tuple[bool, str, dict[str, Any]]:
    """PASS/FAIL of one ``bench_mixer_step`` b16/bf16 run against ``floors``: (ok, the line, numbers)."""
    res, gemm = run["results"], run["gemm_gflops"] / 1e3  # TFLOP/s
    n = {"mfu_eager": res["mlplab"]["mfu"], "mfu_compiled": res.get("mlplab_compiled", {}).get("mfu"),
         "gemm_tflops": gemm, "datasheet_tflops": run.get("peak_tflops"),
         "rp_over_normal": run["rp_over_normal_time_ratio"],
         "rp_over_normal_compiled": run.get("rp_over_normal_time_ratio_compiled"),
         "speed_vs_timm": res["mlplab"].get("speed_vs_timm"),
         "ms_per_step": {k: r["ms_per_step"] for k, r in res.items()}}
    below = [f"{what} {value:.3g} {sign} floor {floor:g}" for what, value, sign, floor, bad in [
        ("MFU eager", n["mfu_eager"], "<", floors["mfu_eager"], n["mfu_eager"] < floors["mfu_eager"]),
        ("MFU compiled", n["mfu_compiled"], "<", floors["mfu_compiled"],
         n["mfu_compiled"] is not None and n["mfu_compiled"] < floors["mfu_compiled"]),
        ("RP/normal eager", n["rp_over_normal"], ">", floors["rp_over_normal"],
         n["rp_over_normal"] > floors["rp_over_normal"]),
        ("RP/normal compiled", n["rp_over_normal_compiled"], ">", floors["rp_over_normal"],
         n["rp_over_normal_compiled"] is not None and n["rp_over_normal_compiled"] > floors["rp_over_normal"]),
        ("speed vs timm", n["speed_vs_timm"], "<", floors["speed_vs_timm"],
         n["speed_vs_timm"] is not None and n["speed_vs_timm"] < floors["speed_vs_timm"]),
        ("GEMM / datasheet", gemm / (n["datasheet_tflops"] or 1), "<", floors["gemm_vs_datasheet"],
         bool(n["datasheet_tflops"]) and gemm / n["datasheet_tflops"] < floors["gemm_vs_datasheet"]),
    ] if bad]
    if n["mfu_compiled"] is None:
        below.append("no compiled step was timed")
    return not below, _b16_line(run, n) + ("; BELOW: " + ", ".join(below) if below else ""), n


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _b16_line(run: dict[str, Any], n: dict[str, Any]) -> str:
    peak = n["datasheet_tflops"]
    vs_peak = (f" ({_pct(n['mfu_eager'] * n['gemm_tflops'] / peak)} / "
               f"{_pct(None if n['mfu_compiled'] is None else n['mfu_compiled'] * n['gemm_tflops'] / peak)} of the "
               f"datasheet {peak:g} TFLOP/s)") if peak else " (no datasheet peak for this device)"
    timm = (f"{n['speed_vs_timm']:.2f}x timm's step" if n["speed_vs_timm"] is not None
            else "timm not importable: no comparison")
    comp = "-" if n["rp_over_normal_compiled"] is None else f"{n['rp_over_normal_compiled']:.3f}"
    return (f"Mixer-B/16 {run['image']}x{run['image']} bf16 batch {run['batch']}: "
            f"MFU eager {_pct(n['mfu_eager'])} / compiled {_pct(n['mfu_compiled'])} of the GEMM rate measured here, "
            f"{n['gemm_tflops']:.0f} TFLOP/s{vs_peak}; "
            f"RP/normal {n['rp_over_normal']:.3f} eager, {comp} compiled; {timm} (eager)")


def check_bench(suite: str, device: torch.device, out: Path, budget: float | None, short: bool) -> tuple[str, dict]:
    target, log = out / f"bench_{suite}.json", out / f"bench_{suite}.log"
    peak = _datasheet(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_mixer_step.py"), "--device", device.type, "--suites", suite,
           "--dtypes", "bf16", "--batch", "256", "--optimizer", "adamw", "--compile", "--warmup", "2",
           "--reps", "8" if short else "15", "--out", str(target)] + (["--peak-tflops", f"{peak:g}"] if peak else [])
    rc = run_child(cmd, budget, log)
    if rc != 0:
        raise AssertionError(f"bench_mixer_step exited {rc}: {log_tail(log)}")
    run = next(r for r in json.loads(target.read_text())["runs"] if r["suite"] == suite)
    if suite == "b16":
        ok, line, numbers = judge_b16(run)
    else:
        rp = run["rp_over_normal_time_ratio"]
        ok, numbers = rp <= FLOORS["rp_over_normal"], {"rp_over_normal": rp}
        line = f"S-Mixer bf16: RP/normal {rp:.3f}" + ("" if ok else f" > floor {FLOORS['rp_over_normal']:g}")
    if not ok:
        raise Failed(line, numbers)
    return line, numbers


class Failed(AssertionError):
    """A check that ran and measured, below a floor: its numbers are kept."""

    def __init__(self, line: str, numbers: dict[str, Any]):
        super().__init__(line)
        self.numbers = numbers


# ----------------------------------------------------------------------------- loading and training

def check_sync_free(recipe: str, device: torch.device, batches: int, host: bool = False) -> str:
    from mlplab.data import AugmentConfig, DeviceLoader, build_augment

    r = RECIPES[recipe]
    n, side = 256 * (batches + 1), r["side"]
    where = torch.device("cpu") if host else device
    g = torch.Generator(device=where).manual_seed(0)
    images = torch.randint(0, 256, (n, 3, side, side), dtype=torch.uint8, device=where, generator=g)
    labels = torch.randint(0, 100, (n,), device=where, generator=g)
    aug = build_augment(AugmentConfig(**r["augment"]), num_classes=100, mean=(0.5,) * 3, std=(0.25,) * 3)
    loader = DeviceLoader(images, labels, 256, shuffle=True, drop_last=True, augment=aug, device=device)
    it = iter(loader)
    next(it)  # per-process constants (mean/std, policy tables) reach the device once, here
    t0, seen = time.perf_counter(), 0
    with sync_debug_error(device):
        for _ in it:
            seen += 1
        for _ in loader:  # a second epoch: its permutation crosses over without a sync too
            seen += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return f"{seen} batches of 256 at {side}x{side}{' from host memory' if host else ''}, {256 * seen / dt:,.0f} img/s"


class sync_debug_error:
    """``torch.cuda.set_sync_debug_mode("error")`` inside the block (nothing on the CPU)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            torch.cuda.set_sync_debug_mode("error")

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.set_sync_debug_mode(0)


def run_overrides(model: str, out: Path, device: torch.device, compiled: bool, epochs: int, name: str,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A short run on synthetic 32x32 images (1024 of them; 512 for a one-epoch check)."""
    o = {"model.name": model.split("[")[0], **MODELS[model], "data.dataset": "synthetic", "data.image_size": 32,
         "data.train_subset": 1024 if epochs > 1 else 512, "data.test_subset": 256, "optim.name": "adamw",
         "optim.lr": 1e-3, "schedule.epochs": epochs, "run.batch_size": 128, "run.log": "none",
         "run.precision": "bf16" if device.type == "cuda" or _cpu_bf16() else "fp32",
         "run.compile": compiled, "run.out_dir": str(out), "run.name": name, "run.device": device.type,
         "run.tensorboard": False}
    o.update(extra or {})
    return o


def _cpu_bf16() -> bool:
    from mlplab.utils.cpu import cpu_has_native_bf16

    return cpu_has_native_bf16()


def check_train(model: str, compiled: bool, device: torch.device, out: Path, epochs: int) -> str:
    from mlplab.train import make_config, train

    res = train(make_config(None, run_overrides(model, out, device, compiled, epochs,
                                                f"{model}-{'compiled' if compiled else 'eager'}")))
    if not all(torch.isfinite(torch.tensor(h["train_loss"])) for h in res["history"]):
        raise AssertionError(f"non-finite training loss: {[h['train_loss'] for h in res['history']]}")
    if res["compiled"] != compiled:
        raise AssertionError(f"asked compiled={compiled}, ran compiled={res['compiled']}")
    line = (f"{res['precision']} {'compiled' if res['compiled'] else 'eager'}: loss "
            f"{res['history'][0]['train_loss']:.3f} -> {res['train_loss']:.3f}, {res['images_per_s']:,.0f} img/s"
            + (f", MFU {100 * res['mfu']:.1f}%" if res.get("mfu") else ""))
    if compiled:
        d = res["dynamo"]
        line += (f"; dynamo: {d['graphs']} graphs, {d['graph_breaks']} graph breaks, "
                 f"{d['skipped_frames']} skipped frames")
        if model not in SPARSE and (d["graph_breaks"] or d["skipped_frames"]):
            raise AssertionError(f"{line}: a dense model must compile whole ({d['break_reasons']})")
    return line


# ----------------------------------------------------------------------------- DDP on one GPU

def ddp_overrides(device: torch.device, out: Path) -> dict[str, Any]:
    """The resume check's run: the S-Mixer, compiled, 2 accumulated micro-batches, 2 epochs."""
    small = device.type == "cpu"
    return run_overrides("s_mixer", out, device, True, 2, "ddp", {
        "run.checkpoint_every": 1, "run.accumulate_steps": 2, "run.batch_size": 32 if small else 128,
        "data.train_subset": 128 if small else 1024, "data.test_subset": 64 if small else 256,
        "model.kwargs.depth": 1 if small else 2, "model.kwargs.hidden_dim": 16 if small else 64})


def ddp_child(cfg_file: Path, report: Path) -> None:
    """One rank: an uninterrupted run, a run stopped after epoch 1, its resumption; reports the
    weights' digests, the all-reduces per run and dynamo's counts."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from mlplab.train import loop, make_config, train

    counts: dict[str, int] = {}
    wrap = loop._wrap

    def counting_wrap(run):  # count DDP's gradient all-reduces: one per step means no_sync held
        wrap(run)

        def hook(state, bucket):
            counts[current] = counts.get(current, 0) + 1
            return allreduce_hook(state, bucket)

        run.ddp.register_comm_hook(None, hook)

    class Stop(Exception):
        pass

    def stop(rec):
        if rec["epoch"] == 1:
            raise Stop

    loop._wrap = counting_wrap
    base = json.loads(cfg_file.read_text())
    ports = os.environ["MLPLAB_CHECK_PORTS"].split(",")  # a process group per run, each on its own port
    out: dict[str, Any] = {}
    current = "reference"
    os.environ["MASTER_PORT"] = ports[0]
    ref = train(make_config(None, {**base, "run.name": "reference"}))
    current = "stopped"
    os.environ["MASTER_PORT"] = ports[1]
    with contextlib.suppress(Stop):
        train(make_config(None, base), on_epoch_end=stop)
    current = "resumed"
    os.environ["MASTER_PORT"] = ports[2]
    res = train(make_config(None, base), resume=True)
    for key, r in (("reference", ref), ("resumed", res)):
        out[key] = {k: r[k] for k in ("weights_sha256", "steps", "world_size", "compiled", "dynamo", "train_loss")}
    out["allreduces"] = counts
    report.write_text(json.dumps(out))


def check_ddp_resume(device: torch.device, out: Path, budget: float | None) -> str:
    work = out / "ddp"
    work.mkdir(parents=True, exist_ok=True)
    cfg_file = work / "config.json"
    cfg_file.write_text(json.dumps(ddp_overrides(device, work)))
    ports = ",".join(free_ports(3))
    procs = []
    for rank in range(2):  # both on this GPU (LOCAL_RANK 0): gloo, since NCCL refuses two ranks on one GPU
        env = child_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                        MLPLAB_CHECK_PORTS=ports, MLPLAB_DIST_BACKEND="gloo", OMP_NUM_THREADS="1")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--ddp-child", str(cfg_file),
               str(work / f"rank{rank}.json")]
        procs.append((subprocess.Popen(cmd, stdout=open(work / f"rank{rank}.log", "w"), stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True), work / f"rank{rank}.log"))
    t0 = time.perf_counter()
    try:
        for p, log in procs:
            if p.wait(timeout=None if budget is None else max(1.0, budget - (time.perf_counter() - t0))):
                raise AssertionError(f"rank exited {p.returncode}: {log_tail(log)}")
    except subprocess.TimeoutExpired:
        raise CheckTimeout(f"timed out after its budget of {budget:.0f} s (logs: {work})") from None
    finally:
        for p, _ in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return judge_ddp([json.loads((work / f"rank{r}.json").read_text()) for r in range(2)])


def free_ports(n: int) -> list[str]:
    """``n`` distinct TCP ports free now (for process groups' stores)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [str(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def judge_ddp(ranks: list[dict[str, Any]]) -> str:
    """Both ranks: the resumed weights equal the uninterrupted run's bit for bit, the replicas
    agree, DDP ran on 2 processes, compiled whole, with one all-reduce per optimiser step."""
    ref, res = ranks[0]["reference"], ranks[0]["resumed"]
    problems = []
    if len({r["resumed"]["weights_sha256"] for r in ranks} | {r["reference"]["weights_sha256"] for r in ranks}) != 1:
        problems.append("resumed weights differ from the uninterrupted run's (or the ranks disagree)")
    if not (res["world_size"] == ref["world_size"] == 2 and res["compiled"] and ref["compiled"]):
        problems.append(f"ran on {res['world_size']} process(es), compiled={res['compiled']}")
    d = ref["dynamo"] or {}
    model_breaks = {k: n for k, n in d.get("break_reasons", {}).items() if not DDP_WRAPPER.search(k)}
    if model_breaks:  # DDP's own frames break by design; the model inside must compile whole
        problems.append(f"dynamo: graph breaks in the model: {model_breaks}")
    steps = ref["steps"]
    if any(r["allreduces"].get("reference") != steps for r in ranks):
        problems.append(f"{ranks[0]['allreduces'].get('reference')} gradient all-reduces for {steps} steps "
                        "(no_sync should leave one per step)")
    if problems:
        raise AssertionError("; ".join(problems))
    return (f"2 gloo ranks on one device, DDP compiled ({d.get('backend')}: {d.get('graphs')} graphs, no break in "
            f"the model), "
            f"accumulate_steps=2: "
            f"{steps} steps, one all-reduce each; stopped after epoch 1 and resumed: weights bit-identical "
            f"(sha256 {res['weights_sha256'][:12]})")


# ----------------------------------------------------------------------------- Fashion-MNIST

def fmnist_folder(env: dict[str, str] | None = None) -> Path:
    """``$FMNIST_DIR`` (or its ``fashion_mnist/``) holding the four IDX files; :class:`Skip` without it."""
    env = os.environ if env is None else env
    if not env.get("FMNIST_DIR"):
        raise Skip("set FMNIST_DIR to a folder holding the four Fashion-MNIST IDX files (~30 MB: "
                   "train-images-idx3-ubyte.gz, ...) to run it; a node without internet cannot download them")
    root = Path(env["FMNIST_DIR"]).expanduser()
    for d in (root, root / "fashion_mnist"):
        if all((d / f).is_file() or (d / f"{f}.gz").is_file() for f in FMNIST_FILES):
            return d
    raise AssertionError(f"FMNIST_DIR={root} holds no Fashion-MNIST: it needs {', '.join(FMNIST_FILES)} "
                         "(each may be .gz), in it or in its fashion_mnist/")


def check_fmnist(device: torch.device, out: Path, budget: float | None, short: bool) -> tuple[str, dict]:
    folder = fmnist_folder()
    target, log = out / "bench_fmnist_fast.json", out / "bench_fmnist_fast.log"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_fmnist_fast.py"), "--device", device.type,
           "--seeds", "0" if short else "0,1,2", "--set", f"data.root={folder}", "--out-dir", str(out / "fmnist"),
           "--out", str(target)]
    if run_child(cmd, budget, log) != 0:
        raise AssertionError(f"bench_fmnist_fast failed: {log_tail(log)}")
    spec = importlib.util.spec_from_file_location("bench_fmnist_fast", ROOT / "benchmarks" / "bench_fmnist_fast.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    acc, secs = (bench.GPU_TARGETS if device.type == "cuda" else bench.TARGETS)["fmnist_fast"]
    runs = json.loads(target.read_text())["runs"]
    numbers = {"test_acc": [r["test_acc"] for r in runs], "wall_s": [r["wall_s"] for r in runs]}
    line = (f"{len(runs)} seed(s): test accuracy {', '.join(f'{100 * a:.2f}%' for a in numbers['test_acc'])} in "
            f"{', '.join(f'{s:.1f} s' for s in numbers['wall_s'])} (target >= {100 * acc:g}% in <= {secs:g} s)")
    if not all(r["test_acc"] >= acc and r["wall_s"] <= secs for r in runs):
        raise Failed(line, numbers)
    return line, numbers


# ----------------------------------------------------------------------------- the run

def plan_checks(a: argparse.Namespace, device: torch.device, out: Path) -> list[tuple[str, str, Callable]]:
    """(name, budget key, check) in running order; a check returns its line or (line, numbers)."""
    short, groups = a.short, set(a.only.split(",")) if a.only else {"bench", "sync", "train", "ddp", "fmnist"}
    budget = lambda key: BUDGETS[key][1 if short else 0]  # noqa: E731
    batches, epochs = (5, 1) if a.quick else (50, 1) if short else (300, 2)
    checks: list[tuple[str, str, Callable]] = []
    if "bench" in groups:
        checks.append(("bench_b16", "bench_b16", lambda: check_bench("b16", device, out, budget("bench_b16"), short)))
    if "sync" in groups:
        checks += [(f"sync_free[{r}]", "sync_free", lambda r=r: check_sync_free(r, device, batches)) for r in RECIPES]
        checks.append(("sync_free[cifar,host]", "sync_free",
                       lambda: check_sync_free("cifar", device, batches, host=True)))
    if "train" in groups:
        work = out / "runs"
        checks += [(f"train[{m},eager]", "train_eager", lambda m=m: check_train(m, False, device, work, epochs))
                   for m in MODELS]
        if not a.no_compile:
            checks += [(f"train[{m},compiled]", "train_compiled",
                        lambda m=m: check_train(m, True, device, work, epochs))
                       for m in MODELS if not short or m in SPARSE]
    if "ddp" in groups:
        checks.append(("ddp_resume", "ddp_resume", lambda: check_ddp_resume(device, out, budget("ddp_resume"))))
    if "fmnist" in groups:
        checks.append(("fmnist", "fmnist", lambda: check_fmnist(device, out, budget("fmnist"), short)))
    if "bench" in groups and not short:
        checks.append(("bench_smixer", "bench_smixer", lambda: check_bench("smixer", device, out, None, short)))
    return checks


def run_check(fn: Callable, budget: float | None) -> tuple[str, str, dict]:
    """(status, detail, numbers) of one check within its budget; a failure is a result, not a crash."""
    try:
        with time_limit(budget):
            got = fn()
        line, numbers = got if isinstance(got, tuple) else (got, {})
        return "PASS", line, numbers
    except Skip as e:
        return "SKIP", str(e), {}
    except Failed as e:
        return "FAIL", str(e), e.numbers
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - a check's failure is a result
        if os.environ.get("MLPLAB_DEBUG"):
            traceback.print_exc()
        return "FAIL", f"{type(e).__name__}: {e}".strip()[-1500:], {}


def main(argv: list[str] | None = None) -> int:
    if importlib.util.find_spec("mlplab") is None:  # run as `python3 scripts/gpu_check.py` from a checkout
        sys.path.insert(0, str(ROOT / "src"))
    a = parse_args(argv)
    if a.ddp_child:
        ddp_child(Path(a.ddp_child[0]), Path(a.ddp_child[1]))
        return 0
    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device visible (torch {torch.__version__}, CUDA build {torch.version.cuda}: "
              "torch.cuda.is_available() is False); use --device cpu for the CPU smoke run", file=sys.stderr)
        return 2
    device = torch.device(a.device)
    out = (a.out or Path(tempfile.mkdtemp(prefix="gpu_check-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    node = node_record(device)
    for line in node_lines(node):
        print(line, flush=True)
    summary = Summary(out / "gpu_check.json", "short" if a.short else "full", node)
    print(f"results: {summary.path} (rewritten after every check)", flush=True)
    deadline = time.perf_counter() + (SHORT_TOTAL_S if a.short else float("inf"))
    for name, key, fn in plan_checks(a, device, out):
        budget = BUDGETS[key][1 if a.short else 0]
        left = deadline - time.perf_counter()
        if left < 5:
            summary.record(name, "SKIP", 0.0, budget, "out of time: the short run's 7 minutes are spent")
            print(f"SKIP {name}: out of time", flush=True)
            continue
        budget = min(budget, left) if budget else (None if left == float("inf") else left)
        t0 = time.perf_counter()
        status, detail, numbers = run_check(fn, budget)
        summary.record(name, status, time.perf_counter() - t0, budget, detail, numbers)
        print(f"{status} {name} ({time.perf_counter() - t0:.1f} s): {detail}", flush=True)
    summary.data["finished"] = True
    summary.write()
    d = summary.data
    print(f"{d.get('passed', 0)} passed, {d.get('failed', 0)} failed, {d.get('skipped', 0)} skipped -> {summary.path}")
    return 1 if d.get("failed") else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--short", action="store_true", help="a short allocation: at most 7 minutes on one H100")
    p.add_argument("--quick", action="store_true", help="a few batches only (the CPU smoke run of the tests)")
    p.add_argument("--only", default="", help="comma list of check groups: bench,sync,train,ddp,fmnist")
    p.add_argument("--no-compile", action="store_true", help="eager training checks only")
    p.add_argument("--out", type=Path, default=None, help="folder for gpu_check.json (rewritten after every check), "
                                                          "the benchmarks' JSON and logs (default: a new temp folder)")
    p.add_argument("--ddp-child", nargs=2, metavar=("CONFIG", "REPORT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    unknown = set(a.only.split(",")) - {"bench", "sync", "train", "ddp", "fmnist", ""} if a.only else set()
    if unknown:
        p.error(f"--only: unknown group(s) {sorted(unknown)}; choose from bench, sync, train, ddp, fmnist")
    return a


if __name__ == "__main__":
    raise SystemExit(main())
