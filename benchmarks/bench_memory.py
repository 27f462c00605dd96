"""Memory, FLOPs and step time: SW-MLP (masked and sparse storage) vs RP-Mixer vs MLP-Mixer.

The Table S.3 analogue of Hayase & Karakida (2024), CIFAR setting: MLP-Mixer S = 64, C = 48,
L = 3, γ = 2. The SW-MLP gets the same effective width m = S·C = 3072, the same γ and depth,
and the same connection budget Ω = γ(C·S² + C²·S)/2 (docs/science.md §3), hence density p = Ω/(γ m²).
A masked SW-MLP stores a dense m×γm weight and mask per layer (memory ∝ m²); the sparse
storage keeps only the nonzeros (∝ p·m²).

Memory: every model runs in a *fresh subprocess* (torch's allocations are invisible to
tracemalloc): parameter + buffer bytes, and the peak resident set size (``ru_maxrss``) of
``--steps`` training steps, reported as the rise over the process's RSS right after building
the input batch (imports and data excluded, model and its gradients/optimizer state included).
Time: all models in one process, steps interleaved (A, B, C, D, A, ...), median step time,
and seconds per epoch-equivalent = median step × ceil(50000 / batch) (CIFAR-10 train set).

    PYTHONPATH=src python benchmarks/bench_memory.py            # batch 128 as in the paper
    python benchmarks/bench_memory.py --quick
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_common_args,
    environment,
    fmt_table,
    forward_flops,
    interleaved,
    setup_torch,
    summarise,
    train_step_fn,
    write_results,
)

import mlplab  # noqa: E402


def model_specs(a: argparse.Namespace) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (registered model, overrides) for the four Table S.3 candidates."""
    S, C, L, g = a.S, a.C, a.depth, a.gamma
    m = S * C
    omega = g * (C * S * S + C * C * S) / 2
    p = omega / (g * m * m)
    mix = dict(num_tokens=S, hidden_dim=C, depth=L, expansion=float(g))
    sw = dict(width=m, density=p, expansion=float(g), depth=L, block="mlp")
    specs = {
        "mlp_mixer": ("mlp_mixer", mix),
        "rp_mlp_mixer": ("rp_mlp_mixer", mix),
        "sw_mlp_masked": ("sw_mlp", {**sw, "storage": "masked"}),
        "sw_mlp_sparse": ("sw_mlp", {**sw, "storage": "sparse"}),
    }
    if "sw_mlp" not in mlplab.list_models():
        print("sw_mlp is not registered (yet): only the Mixers are measured")
        specs = {k: v for k, v in specs.items() if not k.startswith("sw_")}
    return specs


def _bytes(model: torch.nn.Module) -> dict[str, int]:
    pb = sum(p.numel() * p.element_size() for p in model.parameters())
    bb = sum(b.numel() * b.element_size() for b in model.buffers())
    return {"param_bytes": pb, "buffer_bytes": bb, "param_plus_buffer_bytes": pb + bb,
            "params": sum(p.numel() for p in model.parameters())}


def _rss_now_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child(spec_json: str) -> None:
    """Runs in the fresh subprocess: build one model, do the steps, print one JSON line."""
    spec = json.loads(spec_json)
    setup_torch(spec["threads"], spec["seed"])
    x = torch.randn(spec["batch"], 3, 32, 32)
    y = torch.randint(0, 10, (spec["batch"],))
    rss0 = _rss_now_kb()
    peak0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if spec["model"] == "__baseline__":  # torch's own runtime cost of a training step
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    else:
        model = mlplab.create_model(spec["model"], **spec["overrides"])
    rss_model = _rss_now_kb()
    step = train_step_fn(model, x, y, spec["optimizer"], "fp32")
    for _ in range(spec["steps"]):
        step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux
    out = {**_bytes(model), "rss_before_model_kb": rss0, "rss_after_build_kb": rss_model,
           "peak_rss_kb": peak, "peak_rss_before_model_kb": peak0,
           "peak_rise_mb": (peak - max(rss0, 0)) / 1024, "build_rise_mb": (rss_model - rss0) / 1024}
    print("RESULT " + json.dumps(out), flush=True)


def measure_memory(name: str, model: str, overrides: dict, a: argparse.Namespace) -> dict[str, Any]:
    spec = dict(model=model, overrides=overrides, batch=a.batch, steps=a.mem_steps, threads=a.threads,
                seed=a.seed, optimizer=a.optimizer)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(mlplab.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, env=env)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"memory run of {name} failed:\n{r.stdout}\n{r.stderr}")


def nonzero_fwd_flops(model: torch.nn.Module, counted: int) -> int:
    """Per-example forward matmul FLOPs counting only the SW layers' nonzeros (2·nnz each).

    ``counted`` comes from the FLOP counter, which sees a masked layer as dense (2·in·out) and
    may not see ``torch.sparse.mm`` at all; both are replaced by 2·nnz."""
    total = counted
    for mod in model.modules():
        if hasattr(mod, "nnz") and hasattr(mod, "in_features"):
            if hasattr(mod, "mask"):
                total -= 2 * mod.in_features * mod.out_features
            total += 2 * int(mod.nnz)
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, "bench_memory")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--S", type=int, default=64)
    p.add_argument("--C", type=int, default=48)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--gamma", type=float, default=2.0)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--mem-steps", type=int, default=3, help="training steps in each memory subprocess")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    p.add_argument("--epoch-examples", type=int, default=50000)
    p.add_argument("--models", default=None, help="comma list (default: all four)")
    a = p.parse_args(argv)
    if a.child is not None:
        child(a.child)
        return 0
    if a.quick:
        a.S, a.C, a.batch, a.warmup, a.reps, a.mem_steps = 16, 12, 32, 1, 3, 1
    setup_torch(a.threads, a.seed)
    env = environment()
    specs = model_specs(a)
    if a.models:
        specs = {k: v for k, v in specs.items() if k in a.models.split(",")}
    m = a.S * a.C
    omega = a.gamma * (a.C * a.S**2 + a.C**2 * a.S) / 2
    print(f"S={a.S}, C={a.C}, L={a.depth}, γ={a.gamma}: m={m}, Ω={omega:.0f}, "
          f"SW density p={omega / (a.gamma * m * m):.5f}; batch {a.batch}; torch {env['torch']}, "
          f"{env['num_threads']} threads, load {env['loadavg']}", flush=True)

    base_mem = measure_memory("baseline", "__baseline__", {}, a)
    print(f"  memory baseline (tiny linear model): peak RSS rise {base_mem['peak_rise_mb']:.1f} MiB", flush=True)
    mem = {}
    for name, (model, ov) in specs.items():
        mem[name] = measure_memory(name, model, ov, a)
        print(f"  memory {name}: params+buffers {mem[name]['param_plus_buffer_bytes'] / 2**20:.2f} MiB, "
              f"peak RSS rise {mem[name]['peak_rise_mb']:.1f} MiB", flush=True)

    torch.manual_seed(a.seed)
    models = {k: mlplab.create_model(mn, **ov) for k, (mn, ov) in specs.items()}
    x = torch.randn(a.batch, 3, 32, 32)
    y = torch.randint(0, 10, (a.batch,))
    flops = {}
    for k, mdl in models.items():
        counted = forward_flops(mdl, x[:1])
        flops[k] = {"fwd_flops_counted": counted, "fwd_flops_nonzero": nonzero_fwd_flops(mdl, counted)}
    if "sw_mlp_masked" in flops and "sw_mlp_sparse" in flops:  # same net: use the masked count
        flops["sw_mlp_sparse"]["fwd_flops_nonzero"] = flops["sw_mlp_masked"]["fwd_flops_nonzero"]
    steps = {k: train_step_fn(mdl, x, y, a.optimizer, "fp32") for k, mdl in models.items()}
    times = interleaved(steps, a.reps, a.warmup, log=lambda s: print(s, flush=True), clock=a.clock)
    n_steps = math.ceil(a.epoch_examples / a.batch)
    base = "mlp_mixer"
    rows, res = [], {}
    for k, ts in times.items():
        med = statistics.median(ts)
        r = {**summarise(ts), **mem[k], **flops[k], "ms_per_step": 1e3 * med,
             "s_per_epoch_equiv": med * n_steps, "time_vs_mixer": med / statistics.median(times[base]),
             "time_vs_mixer_paired_median": statistics.median(t / b for t, b in zip(ts, times[base])),
             "peak_net_mb": mem[k]["peak_rise_mb"] - base_mem["peak_rise_mb"],
             "memory_vs_mixer_peak": (mem[k]["peak_rise_mb"] - base_mem["peak_rise_mb"])
             / max(mem[base]["peak_rise_mb"] - base_mem["peak_rise_mb"], 1e-9),
             "bytes_vs_mixer": mem[k]["param_plus_buffer_bytes"] / mem[base]["param_plus_buffer_bytes"]}
        res[k] = r
        rows.append([k, r["params"], r["param_plus_buffer_bytes"] / 2**20, r["bytes_vs_mixer"], r["peak_rise_mb"],
                     r["peak_net_mb"], r["memory_vs_mixer_peak"], r["fwd_flops_counted"] / 1e6,
                     r["fwd_flops_nonzero"] / 1e6, r["ms_per_step"], r["s_per_epoch_equiv"],
                     r["time_vs_mixer_paired_median"]])
    print(fmt_table(["model", "params", "param+buf MiB", "x mixer", "peak rise MiB", "net MiB", "net x mixer",
                     "fwd MFLOP (dense count)", "fwd MFLOP (nonzero)", "ms/step", "s/epoch", "time x mixer"], rows))
    print(f"peak rise = max RSS during {a.mem_steps} steps - RSS before the model; net = minus the "
          f"rise of a tiny linear model ({base_mem['peak_rise_mb']:.1f} MiB: torch's own runtime)")
    print("paper (V100, Table S.3): SW-MLP 28.2 s/epoch, RP-Mixer 6.41, MLP-Mixer 6.08 "
          "(RP/Mixer 1.054, SW/Mixer 4.64)")
    write_results(a.out, {"benchmark": "bench_memory", "args": {k: str(v) for k, v in vars(a).items()},
                          "environment": env, "loadavg_end": list(os.getloadavg()),
                          "omega": omega, "width": m, "sw_density": omega / (a.gamma * m * m),
                          "steps_per_epoch": n_steps, "baseline_memory": base_mem, "times_s": times,
                          "results": res})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
