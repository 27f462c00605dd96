"""Training-step time and page faults with glibc's default allocator against ``keep_freed_memory``.

The allocator's state belongs to a process, so every measurement is a fresh child process (a
model, a precision, an allocator setting) that builds the model, takes ``--warmup`` steps and
times ``--steps`` more; the two settings alternate (default, kept, default, kept, ...) ``--reps``
times per model. Printed per model: median step time of each setting, minor page faults per
step, and the ratio default / kept (> 1: keeping freed memory is faster).

    python benchmarks/bench_malloc.py --threads 1 --reps 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    TRAINED_MODELS,
    add_common_args,
    add_trained_model_args,
    describe,
    environment,
    fmt_table,
    trained_model_choice,
    write_results,
)


def child(model: str, dtype: str, keep: bool, threads: int, batch: int, warmup: int, steps: int) -> dict:
    """One process's measurement (run with ``--child``): median step seconds and faults per step."""
    import torch
    from common import train_step_fn

    import mlplab
    from mlplab.train.backend import keep_freed_memory

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if keep:
        keep_freed_memory()
    name, overrides, shape = TRAINED_MODELS[model]
    net = mlplab.create_model(name, **overrides)
    x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
    step = train_step_fn(net, x, y, "adamw", dtype)
    for _ in range(warmup):
        step()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / steps
    return {"step_s": statistics.median(ts), "faults_per_step": faults}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, "bench_malloc")
    add_trained_model_args(p, 10, "timed steps per process")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    env = environment()
    dtype, models = trained_model_choice(p, a, env)
    if a.quick:
        a.reps, a.steps, a.warmup, a.batch = 1, 2, 1, 32
    if a.child is not None:
        print(json.dumps(child(a.child, dtype, a.keep, a.threads, a.batch, a.warmup, a.steps)))
        return 0
    print(describe(env) + f", {dtype}, batch {a.batch}")
    results: dict[str, dict[str, list[dict]]] = {m: {"default": [], "kept": []} for m in models}
    for r in range(a.reps):
        for m in models:
            for setting in ("default", "kept"):
                cmd = [sys.executable, __file__, "--child", m, "--dtype", dtype, "--threads", str(a.threads),
                       "--batch", str(a.batch), "--warmup", str(a.warmup), "--steps", str(a.steps)]
                out = subprocess.run(cmd + (["--keep"] if setting == "kept" else []), check=True,
                                     capture_output=True, text=True, env=dict(os.environ)).stdout
                results[m][setting].append(json.loads(out.strip().splitlines()[-1]))
            d, k = results[m]["default"][-1], results[m]["kept"][-1]
            print(f"  rep {r + 1}/{a.reps} {m}: default {1e3 * d['step_s']:.1f} ms, kept {1e3 * k['step_s']:.1f} ms "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    rows, summary = [], {}
    for m in models:
        med = {s: statistics.median(x["step_s"] for x in results[m][s]) for s in ("default", "kept")}
        flt = {s: statistics.median(x["faults_per_step"] for x in results[m][s]) for s in ("default", "kept")}
        ratio = statistics.median(d["step_s"] / k["step_s"] for d, k in zip(results[m]["default"], results[m]["kept"]))
        summary[m] = {"step_s": med, "faults_per_step": flt, "default_over_kept": ratio}
        rows.append([m, f"{1e3 * med['default']:.1f} ms", f"{1e3 * med['kept']:.1f} ms",
                     f"{flt['default']:.0f}", f"{flt['kept']:.0f}", f"{ratio:.3f}"])
    print(fmt_table(["model", "default", "kept", "faults/step default", "kept", "default/kept"], rows))
    write_results(a.out, {"env": env, "dtype": dtype, "batch": a.batch, "results": results, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
