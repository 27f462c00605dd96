"""When does a column map pay as one left GEMM? (``mlplab.layers.common.left_gemm_pays``)

A PK layer applies its group map f to every column of x (B, n, cols): either as a left GEMM with
W broadcast over the batch (``LinearAct.forward_columns``: B GEMMs of n' × n × cols, no copy of x)
or on the transposed input (one (B·cols) × n GEMM plus two transposes). Times forward + backward
of φ(W X + b) both ways, interleaved, for the (n, cols) shapes of the experiments' Mixers, and
prints left/transposed: > 1 means the transposed path is faster. The threshold
``LEFT_GEMM_MIN_COLS`` was set from this table.

    python benchmarks/bench_left_gemm.py --threads 1
"""
from __future__ import annotations

import argparse

import torch
from common import add_common_args, describe, environment, interleaved, setup_torch, summarise, write_results

from mlplab.layers.common import LEFT_GEMM_MIN_COLS, LinearAct

# (n, cols): fig6's pairs at Ω = 2^16 (token mixing n = S, cols = C), S = C = 64, and small-C extremes
SHAPES = [(124, 8), (196, 8), (83, 16), (49, 16), (64, 32), (41, 40), (40, 41), (64, 64), (32, 64), (16, 49),
          (16, 83), (8, 124)]


def step(f: LinearAct, x: torch.Tensor, left: bool):
    def run():
        y = f.forward_columns(x) if left else f(x.transpose(-1, -2)).transpose(-1, -2)
        y.sum().backward()
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, "left_gemm")
    p.add_argument("--batch", type=int, default=256)
    a = p.parse_args()
    setup_torch(a.threads, a.seed)
    env = environment()
    print(describe(env))
    print(f"batch {a.batch}, fp32, forward + backward of φ(W X + b); "
          f"threshold LEFT_GEMM_MIN_COLS = {LEFT_GEMM_MIN_COLS}")
    shapes = SHAPES[:3] if a.quick else SHAPES
    rows = []
    for n, cols in shapes:
        f = LinearAct(n, n)
        x = torch.randn(a.batch, n, cols, requires_grad=True)
        t = interleaved({"left": step(f, x, True), "transposed": step(f, x, False)}, a.reps, a.warmup,
                        inner=5, clock=a.clock)
        s = {k: summarise(v) for k, v in t.items()}
        ratio = s["left"]["median_s"] / s["transposed"]["median_s"]
        rows.append({"n": n, "cols": cols, "left_ms": 1e3 * s["left"]["median_s"],
                     "transposed_ms": 1e3 * s["transposed"]["median_s"], "left_over_transposed": ratio,
                     "chosen": "left" if cols >= LEFT_GEMM_MIN_COLS else "transposed"})
        print(f"n={n:4d} cols={cols:4d}  left {rows[-1]['left_ms']:7.2f} ms  transposed "
              f"{rows[-1]['transposed_ms']:7.2f} ms  left/transposed {ratio:5.2f}  chosen: {rows[-1]['chosen']}")
    write_results(a.out, {"env": env, "args": vars(a), "rows": rows})


if __name__ == "__main__":
    main()
