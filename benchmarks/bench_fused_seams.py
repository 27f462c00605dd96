"""Fused seams against the module path on fig6's S-Mixers, eager and compiled.

fig6 (quick/cpu scale) trains S-Mixers on Fashion-MNIST (28×28×1, patch 4, L = 4, batch 256)
with (S, C) from very many tokens and few channels to the reverse. Whether a seam
(x + act(t) and the next LayerNorm) should run as mlplab's fused C kernel or as separate ops
depends on the row length C and on whether inductor compiles the step; this benchmark measures
both, per (S, C), with the candidates of one configuration interleaved:

  fused             eager, ``impl = "auto"`` (the default)
  unfused           eager, ``impl = "module"`` (LayerNorm / GELU / add as torch ops)
  fused_compiled    torch.compile of the default model (the fused kernels are custom ops
                    that inductor calls as they are)
  unfused_compiled  torch.compile with ``impl = "module"`` (inductor generates the seams)

It prints ms per training step (forward, cross-entropy, backward, AdamW) and the unfused/fused
time ratio, eager and compiled (> 1: fused faster).

    . .venv/bin/activate
    python benchmarks/bench_fused_seams.py --threads 1 --dtypes bf16 --compile
    python benchmarks/bench_fused_seams.py --quick
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_common_args,
    describe,
    environment,
    fmt_table,
    interleaved,
    setup_torch,
    train_step_fn,
    write_results,
)

import mlplab  # noqa: E402

FIG6_PAIRS = "124,8;41,40;40,41;83,16;8,124"  # (S, C): fig6 quick's four plus one C = 16 point


def build(name: str, S: int, C: int, fused: bool, depth: int) -> torch.nn.Module:
    m = mlplab.create_model(name, image_size=28, in_chans=1, num_classes=10, patch_size=4,
                            num_tokens=S, hidden_dim=C, depth=depth)
    m.impl = "auto" if fused else "module"
    return m


def run_pair(name: str, S: int, C: int, dtype: str, a: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(a.seed)
    torch._dynamo.reset()  # one compiled pair at a time: else dynamo's recompile limit (8 per
    # code object, all Mixers share forward) silently leaves later configurations eager
    x = torch.randn(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    models = {"fused": build(name, S, C, True, a.depth), "unfused": build(name, S, C, False, a.depth)}
    if a.compile:
        models["fused_compiled"] = torch.compile(build(name, S, C, True, a.depth))
        models["unfused_compiled"] = torch.compile(build(name, S, C, False, a.depth))
    steps = {k: train_step_fn(m, x, y, "adamw", dtype) for k, m in models.items()}
    print(f"\n[{name} S={S} C={C} / {dtype}] batch {a.batch}, L={a.depth}, {torch.get_num_threads()} threads",
          flush=True)
    load0 = os.getloadavg()
    times = interleaved(steps, a.reps, a.warmup, clock=a.clock)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = {"eager": statistics.median(u / f for u, f in zip(times["unfused"], times["fused"]))}
    if a.compile:
        ratio["compiled"] = statistics.median(
            u / f for u, f in zip(times["unfused_compiled"], times["fused_compiled"]))
    return {"model": name, "S": S, "C": C, "dtype": dtype, "ms_per_step": {k: 1e3 * v for k, v in med.items()},
            "unfused_over_fused_paired_median": ratio, "times_s": times,
            "loadavg_start": list(load0), "loadavg_end": list(os.getloadavg())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, "bench_fused_seams")
    p.add_argument("--pairs", default=FIG6_PAIRS, help="semicolon list of S,C")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16 (CPU autocast)")
    p.add_argument("--models", default="s_mixer", help="comma list of registered Mixers, e.g. s_mixer,rp_s_mixer")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--compile", action="store_true", help="also time both under torch.compile")
    a = p.parse_args(argv)
    if a.quick:
        a.pairs, a.batch, a.depth, a.warmup, a.reps = "24,8;8,24", 32, 2, 1, 3
    setup_torch(a.threads, a.seed)
    env = environment()
    print(describe(env))
    pairs = [tuple(int(v) for v in s.split(",")) for s in a.pairs.split(";")]
    runs = [run_pair(name, S, C, dtype, a) for name in a.models.split(",")
            for dtype in a.dtypes.split(",") for S, C in pairs]
    cols = ["fused", "unfused"] + (["fused_compiled", "unfused_compiled"] if a.compile else [])
    rows = [[r["model"], f"S={r['S']} C={r['C']}", r["dtype"], *(r["ms_per_step"][k] for k in cols),
             *r["unfused_over_fused_paired_median"].values()] for r in runs]
    print("\nms per step; ratio = unfused / fused time (paired median, > 1: fused faster)")
    print(fmt_table(["model", "config", "dtype", *cols, "ratio eager", *(["ratio compiled"] if a.compile else [])],
                    rows))
    write_results(a.out, {"benchmark": "bench_fused_seams", "args": {k: str(v) for k, v in vars(a).items()},
                          "environment": env, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
