"""Calibrate the cost estimate of ``mlplab reproduce --list`` (``mlplab.experiments.cost``).

Trains representative models of the cpu-scale plans, exactly as planned (same overrides) but 2
epochs on a random subset, one thread, in this process, and measures the second epoch in
**CPU seconds of this process** (``time.process_time``): with one thread that is the wall time
the epoch takes on a core of its own, whatever else runs on the machine (the machine this was
written on was shared, load 5–9; wall clocks there say more about the neighbours than about the
model). Then fits ``seconds per example = 3F / R + κ·A + τ0`` (F forward matmul FLOPs, A activation
elements written per example) by non-negative least squares over the normal (non-RP) models
(:func:`fit_constants`) and reports the RP slowdown against the S-Mixer of the same shape.

    . .venv/bin/activate
    nice -n 19 python benchmarks/calibrate_cost.py --out runs/calibrate_cost.json

or fits the same constants to finished ``mlplab reproduce`` folders, which is how they are used:
runs at ``--jobs 2`` side by side on the 2 cores, timed by the runs themselves (median epoch
seconds per example against 3F), the start-up per run from each experiment's wall time:

    python benchmarks/calibrate_cost.py --runs runs/experiments/fig6-cpu runs/experiments/scaling-cpu

or, as ``reproduce --list`` and the campaign's ETA use it, fits each CPU kind's constants to the
CPU seconds every finished run records (``results.json``: ``cpu_s``, ``machine_tag``) — one thread
per run, so a run's CPU seconds are its wall time on a quiet core — and writes them into the
calibration's ``machines`` table, which ``cost.cpu_machine()`` reads for the CPU kind it runs on,
and fits the ``linear_eval`` task's units to the wall seconds its runs record (``task_units``):

    python benchmarks/calibrate_cost.py --results docs/results benchmarks/results --write

or writes the calibration's ``lockstep`` table, which ``cost.lockstep_factor`` (and so ``reproduce
--lockstep auto``) reads, from a whole-process ``bench_lockstep.py`` result: per model, the
lockstep / sequential ratio of CPU seconds at the recipe's epochs (extrapolated from the timed runs'
split into start-up and training, ``bench_lockstep.extrapolated``), with the measured ratios beside it:

    python benchmarks/calibrate_cost.py --lockstep benchmarks/results/lockstep-process-*-epyc-avx512bf16.json --write

The numbers it printed are kept in ``src/mlplab/experiments/data/cost_calibration.json`` (``rows``);
``--calibration`` refits those rows and prints each whole experiment's measured / estimated minutes
at the fit and at the module's constants:

    python benchmarks/calibrate_cost.py --calibration
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# (label, experiment id, test on a run's overrides picking one planned model)
PICKS = [
    ("fig6 S-Mixer S=124 C=8", "fig6", lambda o: o.get("meta.S") == 124),
    ("fig6 S-Mixer S=41 C=40", "fig6", lambda o: o.get("meta.S") == 41),
    ("fig5 S-Mixer (smallest)", "fig5", lambda o: o["model.name"] == "s_mixer" and o.get("meta.C") == 4),
    ("fig5 RP S-Mixer (same shape)", "fig5", lambda o: o["model.name"] == "rp_s_mixer" and o.get("meta.C") == 4),
    ("fig4 MLP-Mixer S=28", "fig4", lambda o: o["model.name"] == "mlp_mixer" and o.get("meta.S") == 28),
    ("fig4 SW-MLP (widest)", "fig4", lambda o: o["model.name"] == "sw_mlp" and o.get("meta.S") == 28),
    ("figS5 S-Mixer P=1", "figS5", lambda o: o.get("model.kwargs.patch_size") == 1),
    ("table1 MLP-Mixer narrow", "table1", lambda o: "narrow" in str(o.get("meta.label"))),
]


def planned_run(id: str, pick) -> dict:
    from mlplab.experiments import expand, plan_experiment

    _, _, plan = plan_experiment(id, "cpu", dataset="fashion_mnist", check_available=False)
    for sw in plan.sweeps:
        for s in expand(sw):
            if sw.task == "train" and s.overrides.get("run.seed") == 0 and pick(s.overrides):
                return {k: v for k, v in s.overrides.items() if not k.startswith("meta.")}
    raise LookupError(id)


def time_run(overrides: dict, examples: int, out: Path) -> dict:
    from mlplab.train import make_config, train

    marks: list[tuple[float, float]] = []
    o = {**overrides, "data.train_subset": examples, "data.subset": "random", "data.test_subset": 2000,
         "schedule.epochs": 2, "run.threads": 1, "run.checkpoint_every": 0, "run.log": "none",
         "run.out_dir": str(out), "run.name": "r"}
    res = train(make_config(None, o), overwrite=True,
                on_epoch_end=lambda rec: marks.append((time.process_time(), time.perf_counter())))
    cpu = marks[1][0] - marks[0][0]
    wall = marks[1][1] - marks[0][1]
    return {"flops": res["flops_per_example"], "examples": res["train_examples"], "epoch_cpu_s": cpu,
            "epoch_wall_s": wall, "cpu_us_per_example": 1e6 * cpu / res["train_examples"],
            "loadavg": list(os.getloadavg())}


def finished_runs(folder: Path) -> list[dict]:
    """Timing rows of the finished training runs of one ``mlplab reproduce`` folder."""
    from mlplab.experiments.cost import run_counts, split_examples

    exp = json.loads((folder / "experiment.json").read_text())
    rows = []
    for res in sorted(folder.rglob("results.json")):
        spec = res.parent / "spec.json"
        if not spec.exists() or json.loads(spec.read_text()).get("task") != "train":
            continue
        o, r = json.loads(spec.read_text())["overrides"], json.loads(res.read_text())
        flops, acts, rp_share = run_counts(o)
        rows.append({"label": f"{folder.name}/{res.parent.name}", "model": o["model.name"], "rp_share": rp_share,
                     "flops": flops, "activations": acts, "examples": r["train_examples"], "epochs": r["epochs"],
                     "epoch_s": r["epoch_time_s"], "us_per_example": 1e6 * r["epoch_time_s"] / r["train_examples"],
                     "test_examples": r.get("test_examples") or split_examples(o, "test"),
                     "experiment": folder.name, "experiment_wall_s": exp.get("wall_s"), "jobs": exp.get("jobs", 1)})
    return rows


def fit_constants(rows: list[dict]) -> tuple[float, float, float]:
    """(R, κ, τ0) of seconds per example = 3F / R + κ·A + τ0 by non-negative least squares over
    rows with ``flops``, ``activations`` and ``us_per_example`` (R = inf where 1/R fits to 0)."""
    from scipy.optimize import nnls

    A = np.array([[3.0 * r["flops"], float(r["activations"]), 1.0] for r in rows])
    y = np.array([r["us_per_example"] * 1e-6 for r in rows])
    (inv_rate, kappa, tau), _ = nnls(A, y)
    return (1.0 / inv_rate if inv_rate > 0 else float("inf")), float(kappa), float(tau)


def experiment_minutes(key: str, rate: float, kappa: float, tau: float, epochs: int | None = None) -> float:
    """Estimated minutes of experiment ``key`` ("id scale") with the constants (R, κ, τ0), at
    ``epochs`` per training run when given (the plan as it was timed), else the plan's own."""
    from unittest import mock

    from mlplab.experiments import cost, estimate_cost, plan_experiment

    id, scale = key.split()
    overrides = {"schedule.epochs": epochs} if epochs is not None else None
    _, _, plan = plan_experiment(id, scale, dataset="fashion_mnist", check_available=False, overrides=overrides)
    with mock.patch.multiple(cost, RATE=rate, KAPPA_S=kappa, TAU_S=tau):
        return estimate_cost(plan, scale)["est_s"] / 60


def fit_calibration() -> dict:
    """Refit the calibration rows and compare the whole experiments at the fit and now."""
    from mlplab.experiments.cost import KAPPA_S, RATE, TAU_S, calibration

    CALIBRATION = calibration()["rows"]

    rows = [{**r, "us_per_example": 1e6 * r["s_per_example"]} for r in CALIBRATION if "s_per_example" in r]
    # rows timed only as a pair (table1) enter the fit as one row: their mean F, A and time
    pairs = [r for r in rows if r.get("pair_mean")]
    mean = {k: sum(r[k] for r in pairs) / len(pairs) for k in ("flops", "activations", "us_per_example")}
    fit = fit_constants([r for r in rows if not r.get("pair_mean")] + ([mean] if pairs else []))
    print(f"NNLS over {len(rows)} rows: R = {fit[0] / 1e9:.1f} GFLOP/s, κ = {fit[1] * 1e9:.2f} ns, "
          f"τ0 = {fit[2] * 1e6:.1f} µs; module: R = {RATE / 1e9:.1f}, κ = {KAPPA_S * 1e9:.2f} ns, "
          f"τ0 = {TAU_S * 1e6:.1f} µs")
    for r in rows:
        f = {k: 1e6 * (3 * r["flops"] / R + k_ * r["activations"] + t) for k, (R, k_, t) in
             (("fit", fit), ("module", (RATE, KAPPA_S, TAU_S)))}
        print(f"  {r['what']:42s} {r['us_per_example']:7.1f} µs/ex  fit {f['fit']:7.1f}  module {f['module']:7.1f}")
    (exps,) = [r for r in CALIBRATION if "s_per_example" not in r]
    out = {}
    for key, value in exps.items():
        if key in ("what", "source"):
            continue
        measured, _, epochs = value
        at_fit, now = experiment_minutes(key, *fit, epochs), experiment_minutes(key, RATE, KAPPA_S, TAU_S, epochs)
        out[key] = {"measured": measured, "fit": at_fit, "module": now}
        print(f"  {key:14s} measured {measured:5.1f} min  fit {at_fit:5.1f} ({measured / at_fit:.2f})"
              f"  module {now:5.1f} ({measured / now:.2f})")
    return {"fit": fit, "experiments": out}


def fit_finished(folders: list[Path]) -> dict:
    rows = [r for f in folders for r in finished_runs(f)]
    rate, kappa, tau = fit_constants([r for r in rows if r["rp_share"] == 0])
    pred = {id(r): 3 * r["flops"] / rate + kappa * r["activations"] + tau for r in rows}
    rp = [r["us_per_example"] * 1e-6 / pred[id(r)] for r in rows if r["rp_share"] == 1]
    overheads = []
    for name in sorted({r["experiment"] for r in rows}):
        rs = [r for r in rows if r["experiment"] == name]
        busy = sum(r["epochs"] * r["epoch_s"] + r["test_examples"] * pred[id(r)] / 3 for r in rs)
        overheads.append((rs[0]["experiment_wall_s"] * rs[0]["jobs"] - busy) / len(rs))
    for r in rows:
        print(f"  {r['label'][:70]:70s} F {r['flops'] / 1e6:7.2f} M  {r['us_per_example']:7.1f} µs/ex  "
              f"fit {1e6 * pred[id(r)]:7.1f}")
    fit = {"rate_flops_per_s": rate, "kappa_s": kappa, "tau_s": tau, "rp_slowdown": rp, "overhead_s_per_run": overheads,
           "runs": len(rows), "experiments": [f.name for f in folders]}
    print(f"fit over {len(rows)} runs: R = {rate / 1e9:.1f} GFLOP/s, κ = {kappa * 1e9:.2f} ns/element, "
          f"τ0 = {tau * 1e6:.1f} µs/example; RP slowdown "
          f"{np.median(rp) if rp else float('nan'):.2f} (median of {len(rp)}); start-up per run "
          + ", ".join(f"{o:.0f} s" for o in overheads))
    return {"rows": rows, "fit": fit}


#: CPU seconds a one-thread run can spend beyond its wall seconds (the interpreter's start-up, before
#: its clock starts); more means the number is a process's total over several runs
SHARED_PROCESS_S = 60.0


def shared_process_folders(results: list[Path]) -> set[Path]:
    """Sweep folders whose runs shared a process and recorded its total CPU seconds (results written
    before ``cpu_s`` became each run's own, ``utils.machine.run_cpu_seconds``): some run there spent
    more CPU than its wall time allows. All their runs are left out, the first of each process too."""
    out = set()
    for res in results:
        r = json.loads(res.read_text())
        if "cpu_s" in r and r["cpu_s"] > int(r.get("threads", 1)) * r["wall_s"] + SHARED_PROCESS_S:
            out.add(res.parent.parent)
    return out


def timed_runs(roots: list[Path]) -> list[dict]:
    """Every finished training run under ``roots`` that recorded its own CPU seconds, with the counts
    the estimate uses (one row per run; lockstep runs, which time several seeds at once, and
    :func:`shared_process_folders` left out)."""
    from mlplab.experiments.cost import _train_examples, run_counts, split_examples

    found = sorted(p for root in roots for p in root.rglob("results.json"))
    shared = shared_process_folders(found)
    rows = []
    for res in (p for p in found if p.parent.parent not in shared):
        spec = res.parent / "spec.json"
        if not spec.exists():
            continue
        sp, r = json.loads(spec.read_text()), json.loads(res.read_text())
        if sp.get("task", "train") != "train" or "cpu_s" not in r or r.get("lockstep") or int(r.get("threads", 1)) != 1:
            continue
        o = sp["overrides"]
        flops, acts, rp_share = run_counts(o)
        evals = 1 + (int(r["epochs"] // int(o["run.eval_every"])) if o.get("run.eval_every") else 0)
        rows.append({"label": f"{res.parent.parent.name}/{res.parent.name}", "tag": r.get("machine_tag", "?"),
                     "flops": flops, "activations": acts, "rp_share": rp_share, "cpu_s": float(r["cpu_s"]),
                     "steps": float(r["steps"]),
                     "examples": float(r["epochs"]) * float(r.get("train_examples") or _train_examples(o))
                     + evals * float(r.get("test_examples") or split_examples(o, "test")) / 3})
    return rows


def fit_machine(rows: list[dict]) -> dict:
    """One CPU kind's constants: cpu_s ≈ overhead + examples·(3F/R + κ·A + τ0) + steps·τs, by
    non-negative least squares over the runs without random permutations (τs is told apart from τ0
    by runs at other batch sizes); the RP slowdown is the median ratio of the RP runs' time beyond
    their start-up and steps to that prediction."""
    from scipy.optimize import nnls

    normal = [r for r in rows if r["rp_share"] == 0]
    A = np.array([[r["examples"] * 3.0 * r["flops"], r["examples"] * r["activations"], r["examples"], 1.0,
                   r["steps"]] for r in normal])
    (inv_rate, kappa, tau, overhead, step), _ = nnls(A, np.array([r["cpu_s"] for r in normal]))

    def examples_s(r: dict) -> float:
        return r["examples"] * (3.0 * r["flops"] * inv_rate + kappa * r["activations"] + tau)

    rp = [(r["cpu_s"] - overhead - r["steps"] * step) / examples_s(r) for r in rows if r["rp_share"] == 1]
    slow = float(np.median(rp)) if rp else 1.0
    ratios = [r["cpu_s"] / (overhead + r["steps"] * step + examples_s(r) * (1 + (slow - 1) * r["rp_share"]))
              for r in rows]
    return {"rate": 1.0 / inv_rate if inv_rate > 0 else float("inf"), "kappa": float(kappa), "tau": float(tau),
            "step_s": float(step), "overhead_s": float(overhead), "rp_slowdown": slow, "runs": len(rows),
            "measured_over_estimated": {"median": float(np.median(ratios)), "min": float(min(ratios)),
                                        "max": float(max(ratios))}}


def fit_results(roots: list[Path], write: bool) -> dict:
    rows = timed_runs(roots)
    out = {}
    for tag in sorted({r["tag"] for r in rows}):
        mine = [r for r in rows if r["tag"] == tag]
        if len([r for r in mine if r["rp_share"] == 0]) < 4:
            print(f"{tag}: {len(mine)} runs, too few to fit")
            continue
        out[tag] = fit = fit_machine(mine)
        m = fit["measured_over_estimated"]
        print(f"{tag}: {fit['runs']} runs; R = {fit['rate'] / 1e9:.1f} GFLOP/s, κ = {fit['kappa'] * 1e9:.2f} ns, "
              f"τ0 = {fit['tau'] * 1e6:.1f} µs, τs = {fit['step_s'] * 1e3:.2f} ms, start-up {fit['overhead_s']:.1f} s, "
              f"RP ×{fit['rp_slowdown']:.2f}; "
              f"measured / estimated per run: median {m['median']:.2f}, {m['min']:.2f}–{m['max']:.2f}")
    if write and out:
        data = json.loads(CALIBRATION_FILE.read_text())
        data.setdefault("machines", {}).update(out)
        CALIBRATION_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {', '.join(out)} into {CALIBRATION_FILE}")
    return out


CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "src/mlplab/experiments/data/cost_calibration.json"


def fit_linear_eval(roots: list[Path], write: bool) -> dict:
    """The ``linear_eval`` task's units (``cost.linear_eval_task_s``) from the wall seconds its
    finished runs record (one thread each; start-up not included): seconds per example whose
    features are extracted and probed, and per few-shot fit (draws × shot counts), by non-negative
    least squares."""
    from scipy.optimize import nnls

    rows = []
    for res in sorted(p for root in roots for p in root.rglob("results.json")):
        spec = res.parent / "spec.json"
        if not spec.exists():
            continue
        sp, r = json.loads(spec.read_text()), json.loads(res.read_text())
        if sp.get("task") != "linear_eval" or "wall_s" not in r:
            continue
        o = sp["overrides"]
        rows.append({"examples": float(r["train_examples"] + r["test_examples"]), "wall_s": float(r["wall_s"]),
                     "fits": float(int(o.get("draws", 5)) * len(o.get("shots") or []))})
    if len(rows) < 4 or not any(r["fits"] for r in rows) or all(r["fits"] for r in rows):
        print(f"linear_eval: {len(rows)} runs, too few (or none with and without few-shot fits) to fit")
        return {}
    (per_example, per_fit), _ = nnls(np.array([[r["examples"], r["fits"]] for r in rows]),
                                    np.array([r["wall_s"] for r in rows]))
    ratios = [r["wall_s"] / (per_example * r["examples"] + per_fit * r["fits"]) for r in rows]
    where = ", ".join(str(root) for root in roots)
    out = {"linear_eval": {"s": float(per_example), "per": "example whose features are extracted (training + test "
                           "split) and probed", "measured": f"{len(rows)} runs under {where}: wall seconds (one "
                           f"thread, start-up not included) per run / fit: median {np.median(ratios):.2f}, "
                           f"{min(ratios):.2f}-{max(ratios):.2f}"},
           "linear_eval_fit": {"s": float(per_fit), "per": "few-shot logistic fit (draws x shot counts)",
                               "measured": "fitted with linear_eval (its 'measured')"}}
    print(f"linear_eval: {len(rows)} runs; {per_example * 1e6:.1f} µs per example, {per_fit * 1e3:.1f} ms per "
          f"few-shot fit; measured / fit per run: median {np.median(ratios):.2f}, {min(ratios):.2f}-{max(ratios):.2f}")
    if write:
        data = json.loads(CALIBRATION_FILE.read_text())
        data["task_units"].update(out)
        CALIBRATION_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote the linear_eval units into {CALIBRATION_FILE}")
    return out


def lockstep_table(results: list[Path]) -> dict:
    """The calibration's ``lockstep`` table from ``bench_lockstep.py --mode process`` result files
    (one CPU kind)."""
    from bench_lockstep import extrapolated
    from bench_step_ab import recipe

    from mlplab.train.config import make_config

    measured, machines, loads = {}, set(), []
    for path in results:
        d = json.loads(path.read_text())
        if d.get("benchmark") != "bench_lockstep" or d.get("args", {}).get("mode") != "process":
            raise SystemExit(f"{path} is not a whole-process bench_lockstep.py result (--mode process)")
        machines.add(d["machine"])
        for sel, r in d["results"].items():
            runs, epochs = r["runs"], r["recipe_epochs"]
            loads += [x["loadavg"][0] for mode in runs.values() for x in mode]
            measured[make_config(*recipe(sel)).model.name] = {
                "recipe": sel, "seeds": int(d["args"]["seeds"]), "epochs": runs["off"][0]["epochs"],
                "recipe_epochs": epochs, "rounds": len(runs["off"]), "cpu": r["cpu_ratio"], "wall": r["wall_ratio"],
                "cpu_at_recipe_epochs": extrapolated(runs, epochs, "cpu"),
                "wall_at_recipe_epochs": extrapolated(runs, epochs), "command": d["command"],
                "source": f"benchmarks/results/{path.name}"}
    if len(machines) != 1:
        raise SystemExit(f"the lockstep results come from {len(machines)} CPU kinds ({', '.join(sorted(machines))}): "
                         "give the files of one")
    return {"what": "seconds of a sweep point's seeds trained in lockstep over the same seeds one after another, "
                    "per model (factor: CPU seconds at the recipe's epochs; below 1 reproduce --lockstep auto stacks)",
            "machine": machines.pop(), "loadavg": [min(loads), max(loads)],
            "factor": {m: round(x["cpu_at_recipe_epochs"], 3) for m, x in measured.items()}, "measured": measured}


def write_lockstep(results: list[Path], write: bool) -> dict:
    table = lockstep_table(results)
    for model, x in table["measured"].items():
        print(f"{model} ({x['recipe']}): lockstep / sequential {x['cpu']['median']:.3f} CPU, "
              f"{x['wall']['median']:.3f} wall "
              f"at {x['epochs']} epochs; at the recipe's {x['recipe_epochs']:g}: {x['cpu_at_recipe_epochs']:.3f} CPU, "
              f"{x['wall_at_recipe_epochs']:.3f} wall")
    if write:
        data = json.loads(CALIBRATION_FILE.read_text())
        data["lockstep"] = table
        CALIBRATION_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote the lockstep table into {CALIBRATION_FILE}")
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=5120, help="training subset per epoch (20 steps of 256)")
    ap.add_argument("--runs", nargs="+", type=Path, default=None,
                    help="fit to finished `mlplab reproduce` folders instead of training here")
    ap.add_argument("--results", nargs="+", type=Path, default=None,
                    help="fit each CPU kind to the CPU seconds of the finished runs under these folders")
    ap.add_argument("--lockstep", nargs="+", type=Path, default=None, metavar="RESULT",
                    help="the lockstep factors from bench_lockstep.py --mode process result files")
    ap.add_argument("--write", action="store_true",
                    help="with --results or --lockstep: store the fits or factors in the calibration")
    ap.add_argument("--calibration", action="store_true",
                    help="refit the cost calibration rows and compare the measured experiments")
    ap.add_argument("--out", default=None, help="write the rows and the fit as JSON here")
    args = ap.parse_args()
    if args.results:
        fit_results(args.results, args.write)
        fit_linear_eval(args.results, args.write)
        return
    if args.lockstep:
        write_lockstep(args.lockstep, args.write)
        return
    if args.calibration:
        fit_calibration()
        return
    if args.runs:
        out = fit_finished(args.runs)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({**out, "argv": sys.argv}, indent=2))
        return
    import torch

    torch.set_num_threads(1)
    t_import = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
    from mlplab.data import load_dataset

    t0 = time.process_time()
    load_dataset("fashion_mnist", "train"), load_dataset("fashion_mnist", "test")
    t_load = time.process_time() - t0
    from mlplab.experiments.cost import run_counts

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, id, pick in PICKS:
            o = planned_run(id, pick)
            r = {"label": label, "model": o["model.name"], "activations": run_counts(o)[1],
                 **time_run(o, args.examples, Path(tmp))}
            r["us_per_example"] = r["cpu_us_per_example"]
            rows.append(r)
            print(f"{label:32s} F {r['flops'] / 1e6:6.2f} MFLOP  {r['cpu_us_per_example']:7.1f} µs/example (CPU)"
                  f"  wall {r['epoch_wall_s']:.2f} s  load {r['loadavg'][0]:.1f}", flush=True)
    normal = [r for r in rows if not r["model"].startswith("rp_")]
    rate, kappa, tau = fit_constants(normal)
    rp = [(r, next(n for n in rows if n["flops"] == r["flops"] and n["model"] == r["model"][3:]))
          for r in rows if r["model"].startswith("rp_")]
    fit = {"rate_flops_per_s": rate, "kappa_s": kappa, "tau_s": tau,
           "rp_slowdown": [r["cpu_us_per_example"] / n["cpu_us_per_example"] for r, n in rp],
           "import_cpu_s": t_import, "load_fashion_mnist_cpu_s": t_load}
    print(f"fit: R = {rate / 1e9:.1f} GFLOP/s, κ = {kappa * 1e9:.2f} ns/element, τ0 = {tau * 1e6:.1f} µs/example; "
          f"RP slowdown {', '.join(f'{x:.2f}' for x in fit['rp_slowdown'])}; import {t_import:.1f} s, "
          f"data load {t_load:.1f} s (CPU)")
    for r in normal:
        pred = 3 * r["flops"] / rate + kappa * r["activations"] + tau
        print(f"  {r['label']:32s} measured {r['cpu_us_per_example']:7.1f}  fit {pred * 1e6:7.1f} µs/example")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"rows": rows, "fit": fit, "argv": sys.argv}, indent=2))


if __name__ == "__main__":
    main()
