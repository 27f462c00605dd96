"""Seeds in lockstep (``mlplab.train.lockstep``) against the same seeds one after another.

Two measurements, each interleaved (solo, lockstep, solo, lockstep, ...) so load drift hits both:

``--mode process`` (whole process, as ``reproduce`` runs them): per round, the K seeds of a recipe
as a sweep run by the local executor with ``--lockstep off`` (K worker processes, one after
another) and with ``--lockstep on`` (one worker process training the K seeds together), each
``python -m mlplab.cli sweep FILE --executor local --jobs 1`` timed from outside: wall seconds and
the CPU seconds of the processes. The ratio lockstep / one after another is the lockstep factor
``mlplab.experiments.cost`` reads (``data/cost_calibration.json``, ``lockstep``).

``--mode step`` (in one process): the loop's epoch function over ``--steps`` steps for each seed's
solo run (compiled where the recipe compiles), against the lockstep epoch function over the same
steps for the stack: how the per-step cost compares, without the start-up.

Recipes as in ``bench_step_ab.py``: ``fmnist_fast``, ``fig5:s_mixer`` and ``fig5:sw_mlp`` (the
widest point of that family in fig5's cpu plan). ``--set`` overrides every run (e.g. fewer epochs:
``schedule.epochs=2``, which makes the start-up a larger share than in the recipe).

    . .venv/bin/activate
    python benchmarks/bench_lockstep.py --mode step --seeds 5 --threads 1 --reps 9
    python benchmarks/bench_lockstep.py --mode process --seeds 5 --threads 1 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step_ab import paired_ratio, recipe, start_training  # noqa: E402
from common import default_out, describe, environment, fmt_table, interleaved, setup_torch, write_results  # noqa: E402

import mlplab  # noqa: E402


def sweep_file(selector: str, seeds: int, extra: dict[str, Any], path: Path) -> Path:
    """A sweep file of the recipe's ``seeds`` seeds (the model's own seed follows ``run.seed``)."""
    base, overrides = recipe(selector)
    overrides = {k: v for k, v in {**overrides, **extra}.items() if k not in ("run.seed", "model.kwargs.seed")}
    keys = ["run.seed"] + (["model.kwargs.seed"] if selector.startswith("fig5:") else [])
    sweep = {"name": selector.replace(":", "-"), "seeds": list(range(seeds)), "seed_keys": keys,
             "base": base if base else overrides}
    if base:
        sweep["base_overrides"] = overrides
    path.write_text(json.dumps(sweep))
    return path


def run_sweep(file: Path, out: Path, lockstep: str) -> dict[str, float]:
    """One ``mlplab sweep`` process (and its workers), timed from outside."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mlplab.cli", "sweep", str(file), "--out", str(out),
                           "--executor", "local", "--jobs", "1", "--lockstep", lockstep],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{file} --lockstep {lockstep} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    results = [json.loads(p.read_text()) for p in sorted(out.glob("*/*/results.json"))]
    # training seconds (the epochs' steps); a lockstep group's epochs are shared by its seeds
    train_s = sum(sum(h["train_time_s"] for h in r["history"]) / len(r.get("lockstep", {}).get("seeds", [0]))
                  for r in results)
    return {"wall_s": wall, "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "train_s": train_s, "epochs": results[0]["epochs"], "test_acc": [r["test_acc"] for r in results],
            "loadavg": list(os.getloadavg())}


def extrapolated(runs: dict[str, list[dict]], epochs: float, clock: str = "wall") -> float:
    """The lockstep / sequential ratio at ``epochs`` epochs per run, from each mode's measured
    split into training (per epoch) and everything else (start-up, data, compilation, evaluation):
    medians over the rounds. ``clock="cpu"``: in CPU seconds, the training's share of them taken
    as its share of the wall time (one thread per run, so the process's share of a core is the
    same in both parts)."""
    def at(mode: str) -> float:
        train = [x["train_s"] * (x["cpu_s"] / x["wall_s"] if clock == "cpu" else 1.0) for x in runs[mode]]
        fixed = statistics.median(x[f"{clock}_s"] - t for x, t in zip(runs[mode], train))
        per_epoch = statistics.median(t / x["epochs"] for x, t in zip(runs[mode], train))
        return fixed + epochs * per_epoch
    return at("on") / at("off")


def process_mode(a: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    rows, out = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for sel in a.recipes:
            file = sweep_file(sel, a.seeds, extra, Path(tmp) / f"{sel.replace(':', '-')}.json")
            runs: dict[str, list[dict]] = {"off": [], "on": []}
            for r in range(a.rounds):
                for mode in ("off", "on"):
                    res = run_sweep(file, Path(tmp) / f"out-{sel.replace(':', '-')}-{mode}-{r}", mode)
                    runs[mode].append(res)
                    print(f"{sel} round {r + 1} lockstep {mode}: {res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} s CPU, "
                          f"load {res['loadavg'][0]:.1f}", flush=True)
            wall = paired_ratio([x["wall_s"] for x in runs["on"]], [x["wall_s"] for x in runs["off"]])
            cpu = paired_ratio([x["cpu_s"] for x in runs["on"]], [x["cpu_s"] for x in runs["off"]])
            full = _recipe_epochs(sel)
            out[sel] = {"runs": runs, "wall_ratio": wall, "cpu_ratio": cpu, "recipe_epochs": full,
                        "wall_ratio_at_recipe_epochs": extrapolated(runs, full),
                        "cpu_ratio_at_recipe_epochs": extrapolated(runs, full, "cpu")}
            rows.append([sel, runs["off"][0]["epochs"], f"{statistics.median(x['wall_s'] for x in runs['off']):.0f}",
                         f"{statistics.median(x['wall_s'] for x in runs['on']):.0f}", f"{wall['median']:.3f}",
                         f"{cpu['median']:.3f}", f"{out[sel]['wall_ratio_at_recipe_epochs']:.3f} ({full:g})",
                         _accs(runs)])
    print(fmt_table(["recipe", "epochs", f"{a.seeds} seeds one after another, wall s", "in lockstep, wall s",
                     "lockstep / sequential, wall", "lockstep / sequential, CPU",
                     "wall ratio at the recipe's epochs (extrapolated)", "test acc % (sequential | lockstep)"], rows))
    return out


def _recipe_epochs(selector: str) -> float:
    """Epochs per run of the recipe as it is planned (before ``--set``)."""
    from mlplab.train.config import make_config

    base, overrides = recipe(selector)
    return float(make_config(base, overrides).schedule.epochs)


def _accs(runs: dict[str, list[dict]]) -> str:
    fmt = lambda accs: " ".join(f"{100 * x:.2f}" for x in accs)  # noqa: E731
    return f"{fmt(runs['off'][-1]['test_acc'])} | {fmt(runs['on'][-1]['test_acc'])}"


def step_mode(a: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    """Per-step cost: K solo runs' steps against the stack's, through the loop's and lockstep's
    epoch functions (nothing written)."""
    from mlplab.train import lockstep, loop
    from mlplab.train.config import make_config
    from mlplab.train.data import load_run_data
    from mlplab.train.distributed import init_distributed
    from mlplab.train.runplan import plan_run

    rows, out, candidates = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for sel in a.recipes:
            base, overrides = recipe(sel)
            plans = []
            for seed in range(a.seeds):
                o = {**overrides, **extra, "run.seed": seed, "run.out_dir": tmp, "run.name": f"{sel}-{seed}",
                     "run.log": "none"}
                if sel.startswith("fig5:"):
                    o["model.kwargs.seed"] = seed
                plans.append(plan_run(make_config(base, o)))
            dist = init_distributed("cpu")
            data = load_run_data(plans[0].data_cfg, plans[0].device)  # one copy for every run
            solo = [loop._prepare(p, dist, data) for p in plans]
            for run in solo:
                loop._wrap(run)
                start_training(mlplab, run, dist)
            candidates[f"{sel}/solo"] = _solo_steps(loop, solo, a.steps, Path(tmp))
            candidates[f"{sel}/lockstep"] = _lockstep_steps(lockstep, loop, plans, dist, data, a.steps, Path(tmp))
            if a.module_stack and plans[0].cfg.model.name.endswith("mixer"):
                candidates[f"{sel}/lockstep-module"] = _lockstep_steps(lockstep, loop, plans, dist, data, a.steps,
                                                                       Path(tmp), impl="module")
        times = interleaved(candidates, a.reps, a.warmup, clock=a.clock, log=lambda m: print(m, flush=True))
    per = lambda ts: f"{1e3 * statistics.median(ts) / a.steps / a.seeds:.2f}"  # noqa: E731
    for sel in a.recipes:
        s = times[f"{sel}/solo"]
        for name in ("lockstep", "lockstep-module"):
            if f"{sel}/{name}" not in times:
                continue
            r = out[f"{sel}/{name}"] = paired_ratio(times[f"{sel}/{name}"], s)
            what = "the model's own path" if name == "lockstep" else "module path (impl=module)"
            rows.append([sel, what, per(s), per(times[f"{sel}/{name}"]),
                         f"{r['median']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"])
    print(fmt_table(["recipe", "stacked forward", "solo ms per seed-step", "lockstep ms per seed-step",
                     "lockstep / solo [95% CI]"], rows))
    return {"ratios": out, "times_s": times}


def _solo_steps(loop, runs, steps: int, tmp: Path):
    parts = []
    for run in runs:
        state, guard = loop.RunState(), loop._Guard(run, 0, tmp)
        parts.append((run, state, guard))

    def call() -> None:
        for run, state, guard in parts:
            state.step = run.dur.total_steps - steps
            loop._train_epoch(run, 0, state, guard, loop.Progress("none"))
    return call


def _lockstep_steps(lockstep, loop, plans, dist, data, steps: int, tmp: Path, impl: str | None = None):
    members = []
    for plan in plans:
        run = loop._prepare(plan, dist, data)
        members.append(lockstep._Member(plan, run, loop._rng_state(run.device), guard=loop._Guard(run, 0, tmp)))
    stack = lockstep._Stack([m.run for m in members],
                            lockstep._Streams([m.rng for m in members], members[0].run.device))
    if impl is not None:
        stack.template.impl = impl
    guard = loop._Guard(members[0].run, 0, tmp)
    guard.code = guard.code.expand(len(members)).clone()
    guard.first = guard.first.expand(len(members)).clone()

    def call() -> None:
        for m in members:
            m.state.step = m.run.dur.total_steps - steps
        lockstep._train_epoch(members, stack, guard, 0)
    return call


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["process", "step"], default="process")
    p.add_argument("--recipes", default="fmnist_fast,fig5:s_mixer,fig5:sw_mlp")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="threads of every run (run.threads)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    p.add_argument("--rounds", type=int, default=2, help="process mode: interleaved rounds")
    p.add_argument("--steps", type=int, default=10, help="step mode: steps per timed call")
    p.add_argument("--reps", type=int, default=9, help="step mode: interleaved rounds")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--clock", default="cpu", choices=["wall", "cpu"], help="step mode's clock")
    p.add_argument("--module-stack", action="store_true",
                   help="step mode: also time the stacked Mixers on the module path (their fused seams off)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    a.recipes = [r for r in a.recipes.split(",") if r]
    setup_torch(a.threads)
    env = environment()
    print(describe(env), flush=True)
    extra = {"run.threads": a.threads, **mlplab.train.config.parse_overrides(a.set, what="--set")}
    res = process_mode(a, extra) if a.mode == "process" else step_mode(a, extra)
    title = (f"{a.seeds} seeds of {', '.join(a.recipes)} in lockstep against one after another, whole process "
             f"({a.threads} thread(s) per run)"
             if a.mode == "process" else f"{a.seeds} seeds in lockstep against one after another: training steps, "
             f"one process ({a.threads} thread(s), {a.clock} clock)")
    write_results(a.out or default_out(f"bench_lockstep_{a.mode}"),
                  {"benchmark": "bench_lockstep", "title": title, "args": {k: str(v) for k, v in vars(a).items()},
                   "environment": env, "loadavg_end": list(os.getloadavg()), "results": res})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
