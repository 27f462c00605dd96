"""What per-step records cost: the ``fmnist_fast`` recipe's steps with and without ``run.log_every_steps``.

One run of the recipe (its model, data, optimiser and loop, ``mlplab.train.loop._train_epoch``, on
2N batches of the training set per epoch) trains every epoch as two blocks of N
steps, one without per-step records and one with them (a record at the block's end), in turns
(off-on, then on-off, so the work at an epoch's start and end falls on both alike), after a
warm-up epoch. Each block is timed with this process's CPU time (``--clock cpu``, the default:
with one thread it leaves out the time spent descheduled by other jobs) or wall time; the
blocks of one epoch are a pair, under the same load. The result is the median of the paired
ratios on/off with a 95% bootstrap interval; beside it, the hook alone: ``StepLog.after_step``
called as the loop calls it (an add on the device each step; every N-th a host read and a line
of ``metrics.jsonl``), in microseconds per step and as a fraction of a step.

    . .venv/bin/activate
    python benchmarks/bench_step_log.py                    # N = 50, 60 pairs, 1 thread, CPU time
    python benchmarks/bench_step_log.py --every 10 --clock wall
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    add_common_args,
    describe,
    environment,
    fmt_table,
    setup_torch,
    write_results,
)

from mlplab.train import loop, make_config
from mlplab.train.distributed import DistInfo
from mlplab.train.loggers import StepLog, open_loggers
from mlplab.train.metrics import Progress
from mlplab.train.preemption import StopSignals
from mlplab.train.runplan import as_plan


class AlternatingLog:
    """Stands in for the run's StepLog: blocks of ``every`` steps alternately without and with the
    real one (off-on in even epochs, on-off in odd ones), each block's seconds per step recorded."""

    def __init__(self, real: StepLog, every: int, clock):
        self.real, self.every, self.clock = real, every, clock
        self.times: dict[bool, list[float]] = {False: [], True: []}
        self.t0 = clock()

    def after_step(self, step: int, epoch: int, batch: torch.Tensor, n: int) -> None:
        block = (step - 1) // self.every  # two blocks per epoch
        on = (block + block // 2) % 2 == 1
        if on:
            self.real.after_step(step, epoch, batch, n)
        if step % self.every == 0:
            now = self.clock()
            self.times[on].append((now - self.t0) / self.every)
            self.t0 = now


def alternate_blocks(every: int, pairs: int, threads: int, clock, out: Path) -> dict[bool, list[float]]:
    """Seconds per step of each block without (False) and with (True) per-step records, paired by epoch."""
    cfg = make_config("fmnist_fast", {"schedule.epochs": pairs + 1, "data.train_subset": 2 * every * 256,
                                      "run.threads": threads, "run.log": "none", "run.out_dir": str(out),
                                      "run.name": "bench"})
    dist = DistInfo()
    run = loop._prepare(as_plan(cfg), dist)
    loop._wrap(run)
    state, guard = loop.RunState(), loop._Guard(run, 0, out)
    run.stop = StopSignals(dist, cfg.run.nan_check_every, run.device)
    with open_loggers(out, cfg) as loggers:
        real = StepLog(every, loggers, dist, run.device, run.optimizer, run.train_fpe, 1.0, time.perf_counter)
        run.step_log = log = AlternatingLog(real, every, clock)
        for e in range(pairs + 1):
            loop._train_epoch(run, e, state, guard, Progress("none"))
            state.epoch = e + 1
            if e:
                off, on = log.times[False][-1], log.times[True][-1]
                print(f"  pair {e}/{pairs}: off {1e3 * off:.2f} ms/step, on {1e3 * on:.2f} ms/step, "
                      f"ratio {on / off:.4f} (load {os.getloadavg()[0]:.1f})", flush=True)
    return {k: v[1:] for k, v in log.times.items()}  # the first epoch warms up


def hook_cost(every: int, steps: int = 20000) -> float:
    """Seconds per step of ``StepLog.after_step`` alone (amortised over its records)."""
    cfg = make_config("synthetic_tiny")
    opt = torch.optim.SGD(torch.nn.Linear(4, 4).parameters(), lr=0.1)
    batch = torch.tensor([2.3 * 256, 30.0], dtype=torch.float64)
    with tempfile.TemporaryDirectory() as d, open_loggers(Path(d), cfg) as loggers:
        log = StepLog(every, loggers, DistInfo(), torch.device("cpu"), opt, 1.0, 1.0, time.perf_counter)
        t0 = time.perf_counter()
        for s in range(1, steps + 1):
            log.after_step(s, 1, batch, 256)
        return (time.perf_counter() - t0) / steps


def bootstrap_median(xs: list[float], n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``xs``."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(p, "bench_step_log")
    p.set_defaults(threads=1, clock="cpu")
    p.add_argument("--every", type=int, default=50, help="run.log_every_steps of the candidate (default 50)")
    p.add_argument("--pairs", type=int, default=60, help="timed (off, on) pairs of blocks, one per epoch")
    a = p.parse_args()
    if a.quick:
        a.pairs = 2
    setup_torch(a.threads, a.seed)
    env = environment()
    print(describe(env) + f", clock {a.clock}")
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    load = [list(os.getloadavg())]
    with tempfile.TemporaryDirectory() as d:
        times = alternate_blocks(a.every, a.pairs, a.threads, clock, Path(d))
    load.append(list(os.getloadavg()))
    off, on = times[False], times[True]
    ratios = [b / a_ for a_, b in zip(off, on)]
    lo, hi = bootstrap_median(ratios)
    hook = hook_cost(a.every)
    print(fmt_table(["candidate", "median ms/step", "paired ratio on/off (95% CI)"],
                    [["log_every_steps=0", 1e3 * statistics.median(off), ""],
                     [f"log_every_steps={a.every}", 1e3 * statistics.median(on),
                      f"{statistics.median(ratios):.4f} [{lo:.4f}, {hi:.4f}]"]]))
    note = (f"the hook alone: {1e6 * hook:.2f} us/step (wall) = {hook / statistics.median(off):.3%} of a step; "
            f"{a.pairs} pairs of {a.every}-step blocks, {a.threads} thread(s), {a.clock} clock, load "
            f"{load[0][0]:.1f} -> {load[1][0]:.1f}")
    print(note)
    write_results(a.out, {"benchmark": "step_log", "environment": env, "notes": [note],
                          "title": f"Per-step records: fmnist_fast steps with run.log_every_steps={a.every} against 0",
                          "every": a.every, "pairs": a.pairs,
                          "threads": a.threads, "clock": a.clock, "loadavg_before_after": load,
                          "step_s": {"off": off, "on": on}, "ratios_on_off": ratios,
                          "ratio_median": statistics.median(ratios), "ratio_ci95": [lo, hi],
                          "hook_s_per_step": hook, "hook_fraction_of_step": hook / statistics.median(off)})


if __name__ == "__main__":
    main()
