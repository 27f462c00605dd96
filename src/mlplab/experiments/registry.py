"""The published experiments by id (SPEC §7), and ``reproduce`` / ``report`` for any of them.

Each experiment is one function ``plan(scale) -> Plan`` registered with :func:`experiment`; its
docstring gives the command, what it tests, the published result and the time it takes (as a
big_vision config does). Its ``analyse(runs) -> Analysis`` turns finished runs into tables,
figures and verdicts (see :mod:`mlplab.experiments.report`).
"""
from __future__ import annotations

import inspect
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..utils.io import atomic_write_json
from .executors import SweepResult, check_specs, run_specs
from .recipes import Scale, make_scale
from .sweep import RunSpec, Sweep, expand

__all__ = ["Plan", "Experiment", "experiment", "EXPERIMENTS", "get_experiment", "list_experiments",
           "plan_experiment", "reproduce", "estimate_cost", "default_out_dir", "format_list"]


@dataclass
class Plan:
    """What an experiment runs at one scale: stages of sweeps (a stage starts when the one
    before has finished, e.g. CKA after training), plus notes for the report."""

    stages: list[list[Sweep]]
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # the key numbers, for the report

    @property
    def sweeps(self) -> list[Sweep]:
        return [s for st in self.stages for s in st]


@dataclass
class Experiment:
    id: str
    title: str
    plan: Callable[[Scale], Plan]
    analyse: Callable[..., Any]
    default_dataset: str = "cifar10"
    aliases: tuple[str, ...] = ()
    doc: str = ""

    def summary(self) -> str:
        return self.title


EXPERIMENTS: dict[str, Experiment] = {}
_ALIASES: dict[str, str] = {}


def experiment(id: str, title: str, *, analyse: Callable[..., Any], default_dataset: str = "cifar10",
               aliases: Sequence[str] = ()):
    """Register ``plan(scale) -> Plan`` as experiment ``id`` (decorator)."""

    def deco(fn: Callable[[Scale], Plan]) -> Callable[[Scale], Plan]:
        if id in EXPERIMENTS:
            raise ValueError(f"experiment {id!r} is registered twice")
        EXPERIMENTS[id] = Experiment(id, title, fn, analyse, default_dataset, tuple(aliases),
                                     inspect.cleandoc(fn.__doc__ or ""))
        for a in (id, *aliases):
            _ALIASES[a.lower()] = id
        return fn

    return deco


def _load_specs() -> None:
    from . import specs  # noqa: F401  (registers every experiment)


def list_experiments() -> list[str]:
    _load_specs()
    return list(EXPERIMENTS)


def get_experiment(id: str) -> Experiment:
    """The experiment ``id`` (case-insensitive; aliases such as ``figS2-S3``); an unknown id is an
    error that lists the valid ones."""
    _load_specs()
    key = _ALIASES.get(str(id).lower())
    if key is None:
        raise ValueError(f"unknown experiment {id!r}; valid ids are: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[key]


def plan_experiment(id: str, scale: str = "cpu", dataset: str | None = None,
                    check_available: bool = True, overrides: dict[str, Any] | None = None
                    ) -> tuple[Experiment, Scale, Plan]:
    """The experiment, its resolved scale and its plan. ``overrides`` (dotted run-config keys,
    e.g. ``{"schedule.epochs": 10}``) are applied to every training run of the plan."""
    exp = get_experiment(id)
    sc = make_scale(scale, dataset, exp.default_dataset, check_available=check_available)
    plan = exp.plan(sc)
    if overrides:
        for sw in plan.sweeps:
            if sw.task == "train":
                sw.base_overrides = {**sw.base_overrides, **overrides}
                if "schedule.epochs" in overrides:
                    sw.epochs = float(overrides["schedule.epochs"])
        plan.notes.append("overrides applied to every training run: "
                          + ", ".join(f"{k}={v}" for k, v in overrides.items()))
    return exp, sc, plan


# per training run on top of its epochs: process start / imports, data loading, final test, checkpoints
RUN_OVERHEAD_S = {"smoke": 2.0, "cpu": 6.0, "paper": 60.0}


def estimate_cost(plan: Plan, scale: str = "cpu") -> dict[str, float]:
    """runs, run-epochs and estimated seconds (runs × (epochs × est. s/epoch + overhead)) of a plan.

    The s/epoch figures of the cpu scale were measured on a 2-core box (1 process, ~1 200 img/s
    for a 1 MFLOP S-Mixer on 10k Fashion-MNIST images) and scaled by FLOPs; paper figures are
    rough V100-class guesses."""
    runs = epochs = secs = 0.0
    for sw in plan.sweeps:
        n = len(expand(sw))
        runs += n
        epochs += n * sw.epochs
        secs += n * (sw.epochs * sw.est_epoch_s + (RUN_OVERHEAD_S.get(scale, 0.0) if sw.task == "train" else 0.0))
    return {"runs": int(runs), "run_epochs": epochs, "est_s": secs}


def _fmt_time(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} d"


def format_list(scales: Sequence[str] = ("smoke", "cpu", "paper")) -> str:
    """The table printed by ``mlplab reproduce --list``."""
    lines = []
    for id in list_experiments():
        exp = EXPERIMENTS[id]
        lines.append(f"{id:14s} {exp.title}")
        for sc in scales:
            try:
                _, scale, plan = plan_experiment(id, sc, check_available=False)
                c = estimate_cost(plan, sc)
                where = scale.dataset
                if sc == "cpu" and scale.dataset not in ("synthetic", "fashion_mnist"):
                    where += " (fashion_mnist if absent)"
                lines.append(f"{'':14s} {sc:5s}: {c['runs']:4d} runs, {c['run_epochs']:8.0f} run-epochs,"
                             f" ~{_fmt_time(c['est_s']):>7s} ({'1 V100-class GPU' if sc == 'paper' else '2 CPU cores'}); {where}")
            except Exception as e:  # a plan that cannot be built is shown, not hidden
                lines.append(f"{'':14s} {sc:5s}: cannot plan: {e}")
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
) -> dict[str, Any]:
    """Run experiment ``id`` at ``scale`` into ``out_dir`` and write its report there.

    ``overrides``: dotted run-config keys applied to every training run (e.g. more epochs).
    Returns ``{"out_dir", "status" (per run), "failed", "report" (path or None), "verdicts"}``.
    Finished runs are skipped, so calling it again resumes a killed experiment.
    """
    exp, sc, plan = plan_experiment(id, scale, dataset, overrides=overrides)
    out = Path(out_dir) if out_dir is not None else default_out_dir(exp.id, scale)
    check_specs([s for stage in plan.stages for sw in stage for s in expand(sw)], out)  # before any write
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "experiment": exp.id, "title": exp.title, "scale": sc.to_dict(),
        "command": command or "mlplab reproduce " + " ".join(shlex.quote(a) for a in [exp.id, "--scale", scale] +
                                                              (["--dataset", dataset] if dataset else [])),
        "argv": sys.argv, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "notes": sc.notes + plan.notes, "settings": plan.settings,
        "sweeps": [{"name": s.name, "task": s.task, "runs": len(expand(s)), "epochs": s.epochs,
                    "description": s.description} for s in plan.sweeps],
        "cost": estimate_cost(plan, scale), "jobs": jobs, "executor": executor,
    }
    atomic_write_json(out / "experiment.json", manifest)
    status: dict[str, str] = {}
    failed: list[str] = []
    t0 = time.time()
    for stage in plan.stages:
        specs: list[RunSpec] = [s for sw in stage for s in expand(sw)]
        res: SweepResult = run_specs(specs, out, jobs=jobs, executor=executor, slurm=slurm, verbose=verbose)
        status.update(res.status)
        failed += res.failed
    manifest["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    manifest["wall_s"] = time.time() - t0
    atomic_write_json(out / "experiment.json", manifest)
    out_report = None
    verdicts: list[dict[str, Any]] = []
    if report:
        from .report import write_report

        rep = write_report(out, verbose=verbose)
        out_report, verdicts = rep["report"], rep["verdicts"]
    return {"out_dir": str(out), "status": status, "failed": failed, "report": out_report, "verdicts": verdicts}


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    p = Path(out_dir) / "experiment.json"
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist: run `mlplab reproduce ID --out {out_dir}` first")
    return json.loads(p.read_text())
