"""Training-step time with the three ways torch applies an SGD/AdamW update on the CPU.

``loop`` is torch's per-parameter Python loop (its CPU default), ``foreach`` batches the
element-wise ops over parameters, ``fused`` is one kernel per parameter (what ``mlplab.train``
uses, :func:`mlplab.train.optim.fused_update`). One process, the candidates interleaved
(loop, foreach, fused, loop, ...) for ``--reps`` rounds of ``--steps`` steps each, per model and
optimizer. Printed: median step time of each and the ratio loop / candidate (> 1: faster).

    python benchmarks/bench_optimizer.py --threads 1 --reps 7
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    TRAINED_MODELS,
    add_common_args,
    add_trained_model_args,
    describe,
    environment,
    fmt_table,
    interleaved,
    setup_torch,
    train_step_fn,
    trained_model_choice,
    write_results,
)

UPDATES = ("loop", "foreach", "fused")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, "bench_optimizer")
    add_trained_model_args(p, 5, "steps timed together per candidate and round")
    p.add_argument("--optimizers", default="adamw,sgd")
    a = p.parse_args(argv)
    setup_torch(a.threads, a.seed)
    env = environment()
    dtype, models = trained_model_choice(p, a, env)
    if a.quick:
        a.reps, a.steps, a.warmup, a.batch = 1, 1, 1, 16
    print(describe(env) + f", {dtype}, batch {a.batch}")
    import mlplab

    rows, results = [], {}
    for label in models:
        name, overrides, shape = TRAINED_MODELS[label]
        x, y = torch.randn(a.batch, *shape), torch.randint(0, 10, (a.batch,))
        for opt in a.optimizers.split(","):
            steps = {}
            for update in UPDATES:
                torch.manual_seed(a.seed)
                steps[update] = train_step_fn(mlplab.create_model(name, **overrides), x, y, opt, dtype, update=update)
            times = interleaved(steps, a.reps, a.warmup, inner=a.steps,
                                log=lambda s: print(f"[{label} / {opt}]" + s, flush=True), clock=a.clock)
            med = {k: statistics.median(v) for k, v in times.items()}
            ratio = {k: statistics.median(lo / t for lo, t in zip(times["loop"], v)) for k, v in times.items()}
            results[f"{label} / {opt}"] = {"step_s": med, "loop_over": ratio, "times_s": times}
            rows.append([label, opt] + [f"{1e3 * med[k]:.1f} ms" for k in UPDATES]
                        + [f"{ratio['foreach']:.3f}", f"{ratio['fused']:.3f}"])
    print(fmt_table(["model", "optimizer", *UPDATES, "loop/foreach", "loop/fused"], rows))
    write_results(a.out, {"env": env, "dtype": dtype, "batch": a.batch, "steps": a.steps, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
