"""Train an S-Mixer (S = C = 64, 8 blocks, patch 4) on real Fashion-MNIST on the CPU, at fp32 and bf16.

28x28 with patch 4 gives S0 = 49 patches of 16 values; the first block's learned skip W~ maps
49 -> S = 64 tokens (docs/science.md §2), so the model is the spec's S = C = 64 S-Mixer. Recipe: the named
config ``fmnist_s_mixer`` (AdamW lr 1e-2, wd 0.05 on matrices, batch 64, warmup 0.1 epoch, cosine to
1e-5, random crop with padding 1, 20 epochs; see the config's notes for the recipes tried).

Run:     python benchmarks/bench_train_fmnist.py --threads 2 --bf16-steps 0   (the measured run)
         python benchmarks/bench_train_fmnist.py --epochs 2 --bf16-steps 0   (quicker)
Took:    18.7 min (56 s/epoch, 1125 img/s) on 2 quiet cores of an AVX2 EPYC at fp32.
Expect:  90.3% test accuracy after 20 epochs (89.5% after 12); bf16 is only faster on CPUs with
         native bf16 (AVX512-BF16/AMX) — without it PyTorch emulates bf16 matmuls (0.17x here).
Prints:  test accuracy, wall time per epoch, images/s, achieved FLOP/s and MFU (against the
         measured matmul rate at the same precision), bf16/fp32 speed ratio, and os.getloadavg()
         beside the timings (the machine may be shared: timings are then pessimistic).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from mlplab.train import make_config, parse_overrides, train
from mlplab.utils.cpu import cpu_has_native_bf16


def run(precision: str, overrides: dict, name: str, out_dir: str) -> dict:
    cfg = make_config("fmnist_s_mixer", {**overrides, "run.precision": precision, "run.name": name,
                                         "run.out_dir": out_dir, "run.device": "cpu"})
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    res = train(cfg, overwrite=True)
    res["bench_wall_s"] = time.perf_counter() - t0
    res["loadavg_before"], res["loadavg_after"] = list(load_before), list(os.getloadavg())
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=float, default=None, help="fp32 training length (default: the config's)")
    p.add_argument("--bf16-steps", type=int, default=40,
                   help="bf16: a throughput run of this many steps (0: skip; -1: the full recipe)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads; on a shared, loaded 2-core machine 1 beats 2 (OpenMP spin-waits)")
    p.add_argument("--train-subset", type=int, default=None, help="use only N training images")
    p.add_argument("--out-dir", default="runs/bench_fmnist")
    p.add_argument("--log", default="lines")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. augment.hflip=true")
    args = p.parse_args(argv)

    base = {"run.threads": args.threads, "run.log": args.log, "data.train_subset": args.train_subset}
    if args.epochs is not None:
        base["schedule.epochs"] = args.epochs
    base.update(parse_overrides(args.overrides))
    rows = []
    fp32 = run("fp32", base, "fp32", args.out_dir)
    rows.append(("fp32", fp32))
    if args.bf16_steps:
        bf = dict(base)
        if args.bf16_steps > 0:  # throughput only: a few hundred steps, a small test subset
            bf.update({"schedule.epochs": None, "schedule.steps": args.bf16_steps, "data.test_subset": 1000,
                       "run.eval_every": 0, "run.checkpoint_every": 0})
        rows.append(("bf16", run("bf16", bf, "bf16", args.out_dir)))

    print(f"\nS-Mixer S=C=64 L=8 patch 4 on Fashion-MNIST, {torch.get_num_threads()} thread(s), "
          f"torch {torch.__version__}, native CPU bf16: {cpu_has_native_bf16()}")
    print(f"{'prec':5} {'steps':>6} {'test acc':>8} {'s/epoch':>8} {'img/s':>8} {'GFLOP/s':>8} "
          f"{'matmul GF/s':>11} {'MFU':>6}  loadavg (1/5/15 min, before -> after)")
    for name, r in rows:
        acc = f"{r['test_acc']:.4f}" if name == "fp32" or args.bf16_steps < 0 else "(n/a)"
        partial = name != "fp32" and args.bf16_steps > 0  # a throughput run: extrapolate the epoch time
        per_epoch = f"{r['train_examples'] / r['images_per_s']:7.0f}*" if partial else f"{r['epoch_time_s']:8.1f}"
        print(f"{name:5} {r['steps']:6d} {acc:>8} {per_epoch} {r['images_per_s']:8.0f} "
              f"{(r['flops_per_s'] or 0) / 1e9:8.2f} {r['matmul_flops_per_s'] / 1e9:11.1f} {r['mfu'] or 0:6.1%}  "
              f"{' '.join(f'{x:.1f}' for x in r['loadavg_before'])} -> "
              f"{' '.join(f'{x:.1f}' for x in r['loadavg_after'])}")
    if len(rows) == 2 and args.bf16_steps > 0:
        print("* training time of one full epoch extrapolated from the bf16 throughput run")
    if len(rows) == 2:
        print(f"bf16 / fp32 training speed: {rows[1][1]['images_per_s'] / rows[0][1]['images_per_s']:.2f}x")
    summary = {name: {k: v for k, v in r.items() if k != "history"} for name, r in rows}
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "bench_summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
