"""A recipe's training step: this tree against any git revision, side by side in one process.

A change anywhere between the loader and the optimiser (the loop, the augmentation, a layer, the
kernels) moves a small model's step by a few per cent: less than this machine's drift between two
processes. Here the whole ``mlplab`` package of a revision (``git archive``) is imported next to
this tree's, under the name ``mlplab_old``, and each side builds the recipe's run exactly as its
own ``mlplab train`` would (config, plan, data on the device, model, optimiser, ``torch.compile``
when the recipe's ``run.compile`` resolves so); then each round times ``--steps`` training steps of
the loop's own epoch function (``train.loop._train_epoch``: loader, augmentation, forward,
backward, optimiser, NaN guard) for the old side and the new, alternating (A, B, A, B, ...), so
both see the same load. It prints per recipe the median step time of each side and the median
of the per-round old/new ratios with a 95% bootstrap interval (> 1: this tree is faster).

Recipes: ``fmnist_fast`` (the named config) and fig5's cpu-scale points, taken from this tree's
experiment plan (``plan_experiment("fig5", "cpu")``): ``fig5:s_mixer`` is the S-Mixer point of the
largest effective width, ``fig5:sw_mlp`` the SW-MLP's, ``fig5:FAMILY:I`` the I-th point of that
family in plan order. Both sides get the same overrides; a key the old config lacks is dropped
there (and printed). Its noise: ``--old HEAD`` on a clean tree measures the same code twice.

    . .venv/bin/activate
    python benchmarks/bench_step_ab.py --old 7154ed1 --threads 1 --clock cpu --reps 15
    python benchmarks/bench_step_ab.py --old HEAD --recipes fig5:s_mixer --reps 9   # the noise floor
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, default_out, describe, environment, fmt_table, interleaved, setup_torch, write_results  # noqa: E402

import mlplab  # noqa: E402

OLD_NAME = "mlplab_old"


def import_revision(revision: str, into: Path) -> Any:
    """The ``mlplab`` package of a git revision, imported as ``mlplab_old``: its sources from
    ``git archive`` under ``into``, its custom ops under the ``mlplab_old::`` namespace (torch
    refuses a second definition of ``mlplab::...``)."""
    tar = subprocess.run(["git", "archive", revision, "src/mlplab"], cwd=REPO, capture_output=True)
    if tar.returncode:
        raise SystemExit(f"cannot read src/mlplab at {revision!r}: {tar.stderr.decode().strip()}")
    tarfile.open(fileobj=io.BytesIO(tar.stdout)).extractall(into, filter="data")
    pkg = into / "src" / "mlplab"
    spec = importlib.util.spec_from_file_location(OLD_NAME, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[OLD_NAME] = module
    import torch

    define = torch.library.custom_op
    torch.library.custom_op = lambda name, *a, **kw: define(name.replace("mlplab::", f"{OLD_NAME}::"), *a, **kw)
    try:
        spec.loader.exec_module(module)
        for sub in ("train", "train.loop", "train.config", "train.distributed", "experiments"):
            importlib.import_module(f"{OLD_NAME}.{sub}")
    finally:
        torch.library.custom_op = define
    return module


def fig5_point(selector: str) -> dict[str, Any]:
    """Overrides of a fig5 cpu-scale run (seed 0) from this tree's plan: ``fig5:FAMILY[:I]``."""
    from mlplab.experiments import plan_experiment
    from mlplab.experiments.sweep import expand

    _, family, *index = selector.split(":")
    _, _, plan = plan_experiment("fig5", "cpu")
    points = [r.overrides for sw in plan.sweeps for r in expand(sw)
              if r.overrides.get("meta.family") == family and r.overrides.get("run.seed") == 0]
    if not points:
        raise SystemExit(f"fig5's cpu plan has no {family!r} runs")
    o = points[int(index[0])] if index else max(points, key=lambda o: o["meta.m"])
    return {k: v for k, v in o.items() if not k.startswith("meta.")}


def recipe(selector: str) -> tuple[str | None, dict[str, Any]]:
    """(named base config or None, overrides) of a recipe selector."""
    if selector.startswith("fig5:"):
        return None, fig5_point(selector)
    return selector, {}


def known_overrides(pkg: Any, base: str | None, overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The overrides ``pkg``'s config accepts, and the keys it refuses: each key is tried with
    those accepted before it, ``model.name`` first (model keywords are checked against the model)."""
    keep, dropped = {}, []
    for k in sorted(overrides, key=lambda k: k != "model.name"):
        try:
            pkg.train.config.make_config(base, {**keep, k: overrides[k]})
            keep[k] = overrides[k]
        except (ValueError, TypeError, KeyError):
            dropped.append(k)
    return keep, dropped


def build_side(pkg: Any, base: str | None, overrides: dict[str, Any], steps: int, run_dir: Path
               ) -> tuple[Any, Callable[[], None]]:
    """The recipe's run as ``pkg``'s ``mlplab train`` builds it (config, plan, data, model,
    optimiser, DDP/compile wrapping; nothing written), and a closure that runs ``steps`` of its
    training steps through ``pkg``'s epoch function."""
    loop = pkg.train.loop
    cfg = pkg.train.config.make_config(base, {**overrides, "run.out_dir": str(run_dir.parent),
                                              "run.name": run_dir.name, "run.log": "none"})
    dist = pkg.train.distributed.init_distributed("cpu")
    runplan = sys.modules.get(f"{pkg.__name__}.train.runplan")
    # before the plan (no runplan module): checked by the loop
    run = loop._prepare(runplan.plan_run(cfg) if runplan else loop.check_run(cfg), dist)
    loop._wrap(run)
    start_training(pkg, run, dist)
    state = (getattr(loop, "RunState", None) or loop._Progress)()
    guard, progress = loop._Guard(run, 0, run_dir), loop.Progress("none")

    def step() -> None:
        state.step = run.dur.total_steps - steps  # the epoch function runs exactly `steps` steps
        loop._train_epoch(run, 0, state, guard, progress)

    return run, step


def start_training(pkg: Any, run: Any, dist: Any) -> None:
    """What ``pkg``'s loop sets on a run as its training starts, where that revision has it:
    per-step records (none: every recipe here has ``run.log_every_steps=0``) and the stop signals
    (never raised here)."""
    if getattr(run, "step_log", True) is None:
        run.step_log = sys.modules[f"{pkg.__name__}.train.loggers"].StepLog(
            0, None, dist, run.device, run.optimizer, run.train_fpe, None, time.perf_counter)
    if getattr(run, "stop", True) is None:
        run.stop = sys.modules[f"{pkg.__name__}.train.preemption"].StopSignals(dist, run.cfg.run.nan_check_every,
                                                                               run.device)


def paired_ratio(old: list[float], new: list[float], resamples: int = 4000, seed: int = 0) -> dict[str, float]:
    """Median of the per-round old/new ratios and a 95% percentile-bootstrap interval of it."""
    r = np.asarray(old) / np.asarray(new)
    boots = np.median(np.random.default_rng(seed).choice(r, (resamples, r.size)), axis=1)
    return {"median": float(np.median(r)), "lo": float(np.percentile(boots, 2.5)),
            "hi": float(np.percentile(boots, 97.5)), "n": int(r.size)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", default="HEAD", help="git revision to compare this tree against (default HEAD)")
    p.add_argument("--recipes", default="fmnist_fast,fig5:s_mixer,fig5:sw_mlp",
                   help="comma list: named configs, or fig5:FAMILY[:I] points of fig5's cpu plan")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override for both sides, e.g. run.compile=false (repeatable)")
    p.add_argument("--steps", type=int, default=20, help="training steps per timed call")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=15, help="interleaved rounds")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                   help="wall time, or process CPU time (fair under contention with --threads 1)")
    p.add_argument("--out", type=Path, default=default_out("bench_step_ab"))
    a = p.parse_args(argv)
    setup_torch(a.threads)
    env = environment()
    print(describe(env), flush=True)
    extra = mlplab.train.config.parse_overrides(a.set, what="--set")
    with tempfile.TemporaryDirectory() as tmp:
        old = import_revision(a.old, Path(tmp))
        candidates, resolved, dropped = {}, {}, {}
        for sel in [s for s in a.recipes.split(",") if s]:
            base, overrides = recipe(sel)
            overrides.update(extra)
            old_overrides, dropped[sel] = known_overrides(old, base, overrides)
            if dropped[sel]:
                print(f"{sel}: {a.old} has no {', '.join(dropped[sel])}; dropped on its side", flush=True)
            for tag, pkg, o in (("old", old, old_overrides), ("new", mlplab, overrides)):
                run, step = build_side(pkg, base, o, a.steps, Path(tmp) / "runs" / f"{tag}-{len(candidates)}")
                candidates[f"{sel}/{tag}"] = step
                resolved[f"{sel}/{tag}"] = {"precision": run.precision, "model": run.cfg.model.name,
                                            "compiled": run.compiled}
        # every side is wrapped (compile_model resets dynamo) before the first compiled call
        times = interleaved(candidates, a.reps, a.warmup, clock=a.clock,
                            log=lambda m: print(m, flush=True))
    rows, ratios = [], {}
    for sel in dict.fromkeys(k.split("/")[0] for k in candidates):
        o, n = times[f"{sel}/old"], times[f"{sel}/new"]
        r = ratios[sel] = paired_ratio(o, n)
        rows.append([sel, resolved[f"{sel}/new"]["precision"], f"{1e3 * statistics.median(o) / a.steps:.2f}",
                     f"{1e3 * statistics.median(n) / a.steps:.2f}",
                     f"{r['median']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"])
    print(fmt_table(["recipe", "precision", f"{a.old} ms/step", "this tree ms/step", "old/new [95% CI]"], rows))
    write_results(a.out, {"benchmark": "bench_step_ab",
                          "title": f"Training step A/B: this tree against {a.old}, one process",
                          "args": {k: str(v) for k, v in vars(a).items()}, "environment": env,
                          "loadavg_end": list(os.getloadavg()), "resolved": resolved, "dropped": dropped,
                          "ratios": ratios, "times_s": times})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
