"""Accept a GPU machine: every check prints one PASS/FAIL line, then a JSON summary.

Command: ``bash scripts/gpu_check.sh`` (one GPU; ``--quick`` for a fast pass, ``--device cpu``
runs the same checks small on the CPU, which is how the test suite keeps this script working).
Expect: PASS on every line of a working GPU from Ampere on (bf16 checks need compute capability
8.0); the benchmark lines also print MFU and RP/normal, and whether the speed targets were met.
Time: under 10 minutes on one H100 (most of it compiling the models).

Checks
  sync_free[RECIPE]   a few hundred loader + augmentation batches of each recipe under
                      ``torch.cuda.set_sync_debug_mode("error")``: any host sync fails it.
  train[MODEL,MODE]   a short bf16 training of every model family, eager and compiled.
  ddp_resume          ``torchrun --nproc_per_node=1``: a run stopped after epoch 1, resumed, and
                      compared with an uninterrupted run (weights to 1e-5, losses to 1e-4).
  bench_mixer_step    Mixer-B/16 and the S-Mixer, bf16, eager and compiled: MFU against the
                      measured GEMM rate and the published peak, RP/normal.
  bench_fmnist_fast   Fashion-MNIST to 90% (the GPU target is < 10 s).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]

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


def check_sync_free(recipe: str, device: torch.device, batches: int) -> str:
    from mlplab.data import AugmentConfig, DeviceLoader, build_augment

    r = RECIPES[recipe]
    n, side = 256 * (batches + 1), r["side"]
    g = torch.Generator(device=device).manual_seed(0)
    images = torch.randint(0, 256, (n, 3, side, side), dtype=torch.uint8, device=device, generator=g)
    labels = torch.randint(0, 100, (n,), device=device, generator=g)
    aug = build_augment(AugmentConfig(**r["augment"]), num_classes=100, mean=(0.5,) * 3, std=(0.25,) * 3)
    loader = DeviceLoader(images, labels, 256, shuffle=True, drop_last=True, augment=aug, device=device)
    it = iter(loader)
    next(it)  # per-process constants (mean/std, policy tables) reach the device once, here
    t0, seen = time.perf_counter(), 0
    with sync_debug_error(device):
        for x, y in it:
            seen += 1
        for x, y in loader:  # a second epoch: its permutation crosses over without a sync too
            seen += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return f"{seen} batches of 256 at {side}x{side}, {256 * seen / dt:,.0f} img/s"


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


def _run_config(model: str, out: Path, device: torch.device, compiled: bool, epochs: int,
                name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A short run on synthetic 32x32 images (2,048 of them; 512 for a one-epoch quick check)."""
    kw = dict(MODELS[model])
    o = {"model.name": model.split("[")[0], **kw, "data.dataset": "synthetic", "data.image_size": 32,
         "data.train_subset": 2048 if epochs > 1 else 512, "data.test_subset": 256, "optim.name": "adamw",
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

    res = train(make_config(None, _run_config(model, out, device, compiled, epochs,
                                              f"{model}-{'compiled' if compiled else 'eager'}")))
    if not all(torch.isfinite(torch.tensor(h["train_loss"])) for h in res["history"]):
        raise AssertionError(f"non-finite training loss: {[h['train_loss'] for h in res['history']]}")
    if res["compiled"] != compiled:
        raise AssertionError(f"asked compiled={compiled}, ran compiled={res['compiled']}")
    return (f"{res['precision']} {'compiled' if res['compiled'] else 'eager'}: loss "
            f"{res['history'][0]['train_loss']:.3f} -> {res['train_loss']:.3f}, {res['images_per_s']:,.0f} img/s"
            + (f", MFU {100 * res['mfu']:.1f}%" if res.get("mfu") else ""))


_DDP_CHILD = """
import sys
import json
from mlplab.train import make_config, train
cfg = make_config(None, json.loads(open(sys.argv[1]).read()))
if sys.argv[2] == "stop":
    def stop(rec):
        if rec["epoch"] == 1:
            raise SystemExit(3)
    train(cfg, on_epoch_end=stop)
else:
    train(cfg, resume=True)
"""


def check_ddp_resume(device: torch.device, out: Path) -> str:
    from safetensors.torch import load_file

    from mlplab.train import make_config, train

    o = _run_config("s_mixer", out, device, False, 2, "ddp", {"run.checkpoint_every": 1})
    cfg_file, child = out / "ddp.json", out / "ddp_child.py"
    cfg_file.write_text(json.dumps(o))
    child.write_text(_DDP_CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", str(child),
           str(cfg_file)]
    first = subprocess.run(cmd + ["stop"], env=env, capture_output=True, text=True, timeout=600)
    if not (out / "ddp" / "checkpoint").is_dir():
        raise AssertionError("no checkpoint after epoch 1: " + first.stderr[-1500:])
    second = subprocess.run(cmd + ["resume"], env=env, capture_output=True, text=True, timeout=600)
    if second.returncode != 0:
        raise AssertionError("resume failed: " + second.stderr[-1500:])
    resumed = json.loads((out / "ddp" / "results.json").read_text())
    reference = train(make_config(None, {**o, "run.name": "reference"}))
    w1 = load_file(str(out / "ddp" / "checkpoint" / "model.safetensors"))
    w2 = load_file(str(Path(reference["run_dir"]) / "checkpoint" / "model.safetensors"))
    worst = max(float((w1[k].float() - w2[k].float()).abs().max()) for k in w1)
    if worst > 1e-5 and device.type == "cpu" or worst > 1e-3:
        raise AssertionError(f"resumed weights differ from the uninterrupted run's by {worst:.3g}")
    for a, b in zip(resumed["history"], reference["history"]):
        if abs(a["train_loss"] - b["train_loss"]) > 1e-4 * max(1.0, abs(b["train_loss"])):
            raise AssertionError(f"loss histories differ: {a['train_loss']} vs {b['train_loss']}")
    return f"world 1 (torchrun), stopped after epoch 1 and resumed; max weight difference {worst:.2g}"


def check_bench(script: str, args: list[str], out: Path) -> str:
    target = out / f"{script}.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), *args, "--out", str(target)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise AssertionError(p.stderr[-2000:] or p.stdout[-2000:])
    tail = [line for line in p.stdout.splitlines() if line.strip()][-4:]
    return " | ".join(tail)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="few batches and epochs (a minute or two)")
    p.add_argument("--only", default="", help="comma list of check groups: sync,train,ddp,bench")
    p.add_argument("--no-compile", action="store_true", help="eager training only")
    p.add_argument("--out", type=Path, default=None, help="JSON summary path (default: print only)")
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible (torch.cuda.is_available() is False); use --device cpu "
              "for the CPU smoke run", file=sys.stderr)
        return 2
    device = torch.device(a.device)
    groups = set(a.only.split(",")) if a.only else {"sync", "train", "ddp", "bench"}
    batches, epochs = (5, 1) if a.quick else (300, 2)
    checks: list[tuple[str, Callable[[], str]]] = []
    work = Path(tempfile.mkdtemp(prefix="mlplab-gpu-check-"))
    if "sync" in groups:
        checks += [(f"sync_free[{r}]", lambda r=r: check_sync_free(r, device, batches)) for r in RECIPES]
    if "train" in groups:
        modes = [False] if a.no_compile else [False, True]
        checks += [(f"train[{m},{'compiled' if c else 'eager'}]", lambda m=m, c=c: check_train(m, c, device, work, epochs))
                   for m in MODELS for c in modes]
    if "ddp" in groups:
        checks.append(("ddp_resume", lambda: check_ddp_resume(device, work)))
    if "bench" in groups:
        quick = ["--quick"] if a.quick else []
        checks.append(("bench_mixer_step", lambda: check_bench(
            "bench_mixer_step", ["--device", a.device, "--suites", "b16,smixer", "--dtypes", "bf16", "--batch", "256",
                                 "--optimizer", "adamw", "--compile", "--peak-tflops", "989", *quick], work)))
        checks.append(("bench_fmnist_fast", lambda: check_bench(
            "bench_fmnist_fast", ["--device", a.device, "--seeds", "0" if a.quick else "0,1,2"], work)))
    summary: dict[str, Any] = {"device": str(device), "torch": torch.__version__, "checks": {}}
    if device.type == "cuda":
        summary["gpu"] = {"name": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability())}
    for name, fn in checks:
        t0 = time.perf_counter()
        try:
            detail, ok = fn(), True
        except BaseException as e:  # noqa: BLE001 - a check's failure is a result, not a crash
            if isinstance(e, KeyboardInterrupt):
                raise
            detail, ok = f"{type(e).__name__}: {e}".strip()[-1500:], False
            if os.environ.get("MLPLAB_DEBUG"):
                traceback.print_exc()
        dt = time.perf_counter() - t0
        summary["checks"][name] = {"pass": ok, "seconds": round(dt, 1), "detail": detail}
        print(f"{'PASS' if ok else 'FAIL'} {name} ({dt:.1f} s): {detail}", flush=True)
    passed = sum(c["pass"] for c in summary["checks"].values())
    summary["passed"], summary["failed"] = passed, len(checks) - passed
    print(json.dumps(summary, indent=1))
    if a.out:
        from mlplab.utils.io import atomic_write_json

        atomic_write_json(a.out, summary)
    print(f"{passed} passed, {len(checks) - passed} failed")
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
