"""The published experiments by id (docs/science.md §7), and ``reproduce`` / ``report`` for any of them.

Each experiment is one function ``plan(scale) -> Plan`` registered with :func:`experiment`,
reading its settings for the scale from a table with one entry per scale (``sc.settings``); its
docstring gives the command, what it tests, the published result and the time it takes (as a
big_vision config does). Its ``analyse(runs) -> Analysis`` turns finished runs into tables,
figures and verdicts (see :mod:`mlplab.experiments.report`). How to add one:
``docs/adding-an-experiment.md``.
"""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import BadInput
from ..errors import did_you_mean
from ..utils.io import atomic_write_json
from ..utils.progress import RunTally, format_duration
from .cost import estimate_cost, spec_s, sweep_epochs
from .executors import SweepResult, check_specs, run_specs
from .plan import ALIASES, EXPERIMENTS, Experiment, Plan, experiment
from .recipes import SCALES, Scale, make_scale
from .report import load_manifest, write_report
from .specs import ORDER
from .sweep import RunSpec, expand

__all__ = ["Plan", "Experiment", "experiment", "EXPERIMENTS", "get_experiment", "list_experiments",
           "plan_experiment", "reproduce", "report_experiment", "estimate_cost", "default_out_dir", "format_list",
           "load_manifest"]


def _ordered() -> list[str]:
    known = [k for k in ORDER if k in EXPERIMENTS]
    return known + [k for k in EXPERIMENTS if k not in known]


def list_experiments() -> list[str]:
    """Every registered id, in ``specs.ORDER`` (docs/science.md §7 order)."""
    return _ordered()


def get_experiment(id: str) -> Experiment:
    """The experiment ``id`` (case-insensitive; aliases such as ``figS2-S3``); an unknown id is an
    error that lists the valid ones."""
    key = ALIASES.get(str(id).lower())
    if key is None:
        raise ValueError(f"unknown experiment {id!r}; {did_you_mean(id, _ordered())}valid ids are: "
                         f"{', '.join(_ordered())}")
    return EXPERIMENTS[key]


def plan_experiment(id: str, scale: str = "cpu", dataset: str | None = None,
                    check_available: bool = True, overrides: dict[str, Any] | None = None
                    ) -> tuple[Experiment, Scale, Plan]:
    """The experiment, its resolved scale and its plan. ``overrides`` (dotted run-config keys,
    e.g. ``{"schedule.epochs": 10}``) are applied to every training run of the plan."""
    exp = get_experiment(id)
    if scale in SCALES and scale not in exp.scales:
        raise BadInput(f"{exp.id} has no {scale} scale (it has {', '.join(exp.scales)})"
                       + (f"; run `mlplab reproduce {exp.id.removesuffix('-imagenet')} --scale {scale}`"
                          if exp.id.endswith("-imagenet") else ""))
    sc = make_scale(scale, dataset, exp.default_dataset, check_available=check_available)
    plan = exp.plan(sc)
    if overrides:
        for sw in plan.sweeps:
            if sw.task == "train":
                sw.base_overrides = {**sw.base_overrides, **overrides}
                sw.epochs = sweep_epochs(sw)
        plan.notes.append("overrides applied to every training run: "
                          + ", ".join(f"{k}={v}" for k, v in overrides.items()))
    return exp, sc, plan


def format_list(scales: Sequence[str] = ("smoke", "quick", "cpu", "paper")) -> str:
    """The table printed by ``mlplab reproduce --list``: runs, run-epochs and estimated wall time
    per scale (:func:`mlplab.experiments.cost.estimate_cost`; quick only where it differs from
    cpu). The cpu and quick scales are planned on the dataset they would use on this machine."""
    lines = []
    for id in list_experiments():
        exp = EXPERIMENTS[id]
        lines.append(f"{id:16s} {exp.title}")
        for sc in scales:
            if sc not in exp.scales:
                continue
            try:
                _, scale, plan = plan_experiment(id, sc, check_available=sc in ("quick", "cpu"))
                c = estimate_cost(plan, sc)
                if sc == "quick" and c == estimate_cost(plan_experiment(id, "cpu")[2], "cpu"):
                    continue
                where = scale.dataset
                if sc in ("quick", "cpu") and scale.requested_dataset not in (None, scale.dataset):
                    where += f" ({scale.requested_dataset} is not here)"
                machine = "1 V100" if sc == "paper" else f"2 CPU cores, --jobs {c['jobs']}"
                lines.append(f"{'':16s} {sc:5s}: {c['runs']:4d} runs, {c['run_epochs']:8.0f} run-epochs,"
                             f" ~{format_duration(c['est_s']):>7s} ({machine}); {where}")
            except Exception as e:  # a plan that cannot be built is shown, not hidden
                lines.append(f"{'':16s} {sc:5s}: cannot plan: {e}")
    lines.append("times: epochs × examples × (3 × forward FLOPs / R + κ × activations + τ0) per run plus start-up; cpu "
                 "scales: R, κ, τ0 measured on a 2-core AVX2 EPYC, runs dealt to 2 workers; paper: one V100 with R and τ0 "
                 "from the paper's Table S.3 timings (mlplab.experiments.cost)")
    return "\n".join(lines)


def default_out_dir(id: str, scale: str) -> Path:
    return Path("runs") / "experiments" / f"{get_experiment(id).id}-{scale}"


def reproduce(
    id: str,
    scale: str = "cpu",
    *,
    dataset: str | None = None,
    out_dir: str | Path | None = None,
    jobs: int = 1,
    executor: str = "inline",
    slurm: dict[str, Any] | None = None,
    report: bool = True,
    verbose: bool = True,
    command: str | None = None,
    overrides: dict[str, Any] | None = None,
    lockstep: str = "auto",
) -> dict[str, Any]:
    """Run experiment ``id`` at ``scale`` into ``out_dir`` and write its report there.

    ``overrides``: dotted run-config keys applied to every training run (e.g. more epochs).
    ``lockstep``: train a sweep point's seeds together where it pays, wherever supported, or
    never ("auto", "on", "off"; ``mlplab.experiments.executors``).
    Returns ``{"out_dir", "status" (per run), "failed", "report" (path or None), "verdicts"}``.
    Finished runs are skipped, so calling it again resumes a killed experiment.
    """
    exp, sc, plan = plan_experiment(id, scale, dataset, overrides=overrides)
    out = Path(out_dir) if out_dir is not None else default_out_dir(exp.id, scale)
    runs = [[expand(sw) for sw in stage] for stage in plan.stages]  # each sweep expanded once
    check_specs([s for stage in runs for sw_runs in stage for s in sw_runs], out)  # before any write
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "experiment": exp.id, "title": exp.title, "scale": sc.to_dict(),
        "command": command or "mlplab reproduce " + " ".join(shlex.quote(a) for a in [exp.id, "--scale", scale] +
                                                              (["--dataset", dataset] if dataset else [])),
        "argv": sys.argv, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "notes": sc.notes + plan.notes, "settings": plan.settings,
        "sweeps": [{"name": sw.name, "task": sw.task, "runs": len(sw_runs), "epochs": sw.epochs,
                    "description": sw.description}
                   for stage, stage_runs in zip(plan.stages, runs) for sw, sw_runs in zip(stage, stage_runs)],
        "cost": estimate_cost(plan, scale, expanded=runs, lockstep=lockstep), "jobs": jobs, "executor": executor,
        "lockstep": lockstep,
    }
    atomic_write_json(out / "experiment.json", manifest)
    status: dict[str, str] = {}
    failed: list[str] = []
    t0 = time.time()
    tally = RunTally({f"{s.sweep}/{s.name}" if s.sweep else s.name: spec_s(s, scale, sw.est_epoch_s, sw.epochs)
                      for stage, stage_runs in zip(plan.stages, runs)
                      for sw, sw_runs in zip(stage, stage_runs) for s in sw_runs}, jobs=jobs)
    for stage_runs in runs:
        specs: list[RunSpec] = [s for sw_runs in stage_runs for s in sw_runs]
        res: SweepResult = run_specs(specs, out, jobs=jobs, executor=executor, slurm=slurm, verbose=verbose,
                                     checked=True, tally=tally, lockstep=lockstep)
        status.update(res.status)
        failed += res.failed
    manifest["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    manifest["wall_s"] = time.time() - t0
    atomic_write_json(out / "experiment.json", manifest)
    out_report = None
    verdicts: list[dict[str, Any]] = []
    if report:
        rep = write_report(out, exp, verbose=verbose)
        out_report, verdicts = rep["report"], rep["verdicts"]
    return {"out_dir": str(out), "status": status, "failed": failed, "report": out_report, "verdicts": verdicts}


def report_experiment(id: str, out_dir: str | Path, verbose: bool = True) -> dict[str, Any]:
    """Re-decide experiment ``id`` from the runs on disk in ``out_dir``: rewrite its
    ``results.csv``, figures, ``report.md`` and ``verdicts.json`` (``mlplab report``)."""
    exp = get_experiment(id)
    man = load_manifest(out_dir)
    if man.get("experiment") != exp.id:
        raise ValueError(f"{out_dir} holds experiment {man.get('experiment')!r}, not {exp.id!r}: "
                         f"give the folder of a {exp.id} run with --out")
    return write_report(out_dir, exp, verbose=verbose)
