"""The published experiments by id (docs/science.md §7), and ``reproduce`` / ``report`` for any of them.

Each experiment is one function ``plan(scale) -> Plan`` registered with :func:`experiment`,
reading its settings for the scale from a table with one entry per scale (``sc.settings``); its
docstring gives the command, what it tests, the published result and the time it takes (as a
big_vision config does). Its ``analyse(runs) -> Analysis`` turns finished runs into tables,
figures and verdicts (see :mod:`mlplab.experiments.report`). How to add one:
``docs/adding-an-experiment.md``.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import BadInput, did_you_mean
from ..utils.io import atomic_write_json
from ..utils.progress import RunTally, format_duration
from .claims import LONGER, LONGER_SUFFIX
from .cost import cpu_machine, estimate_cost, spec_s, sweep_epochs
from .derived import derive
from .executors import SweepResult, check_specs, run_specs
from .plan import ALIASES, EXPERIMENTS, Experiment, Plan, experiment
from .protocol import frozen_protocol, protocol_content, protocol_file, protocol_hash
from .recipes import SCALES, Scale, make_scale
from .report import load_manifest, write_report
from .specs import ORDER
from .sweep import RunSpec, Sweep, expand, name_keys

__all__ = ["Plan", "Experiment", "experiment", "EXPERIMENTS", "get_experiment", "list_experiments",
           "plan_experiment", "reproduce", "report_experiment", "estimate_cost", "default_out_dir", "format_list",
           "load_manifest", "experiment_protocol", "freeze_protocol", "LONGER_SCALES"]

LONGER_SCALES = ("quick", "cpu")  # scales whose training conditions each get a longer run (convergence check)


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
                    check_available: bool = True, overrides: dict[str, Any] | None = None,
                    role: str = "exploratory") -> tuple[Experiment, Scale, Plan]:
    """The experiment, its resolved scale and its plan. ``overrides`` (dotted run-config keys,
    e.g. ``{"schedule.epochs": 10}``) are applied to every training run of the plan; ``role``
    ``confirmatory`` plans the fresh seeds (:meth:`Scale.seeds`). At cpu and quick scale, each
    training sweep of an experiment with trained claims gets its longer runs beside it."""
    exp = get_experiment(id)
    if scale in SCALES and scale not in exp.scales:
        raise BadInput(f"{exp.id} has no {scale} scale (it has {', '.join(exp.scales)})"
                       + (f"; run `mlplab reproduce {exp.id.removesuffix('-imagenet')} --scale {scale}`"
                          if exp.id.endswith("-imagenet") else ""))
    sc = make_scale(scale, dataset, exp.default_dataset, check_available=check_available, role=role)
    plan = exp.plan(sc)
    if overrides:
        for sw in plan.sweeps:
            if sw.task == "train":
                sw.base_overrides = {**sw.base_overrides, **overrides}
                sw.epochs = sweep_epochs(sw)
        plan.notes.append("overrides applied to every training run: "
                          + ", ".join(f"{k}={v}" for k, v in overrides.items()))
    if exp.needs_plateau and scale in LONGER_SCALES:
        plan.stages = [stage + [_longer(sw) for sw in stage if sw.task == "train"] for stage in plan.stages]
    return exp, sc, plan


def _longer(sw: Sweep) -> Sweep:
    """The longer runs of a training sweep: its points at its first seed, trained ``LONGER`` × as
    long, with the same names (``claims.require_convergence`` pairs them by name)."""
    return dataclasses.replace(sw, name=sw.name + LONGER_SUFFIX, seeds=[list(sw.seeds)[0]],
                               derived=[*sw.derived, derive("longer", factor=LONGER)], name_keys=name_keys(sw),
                               epochs=sw.epochs * LONGER, description=f"{sw.name} at its first seed, trained "
                               f"{LONGER:g}× as long: does a longer run still learn? (convergence check)")


def experiment_protocol(id: str, scale: str = "cpu", dataset: str | None = None, role: str = "exploratory",
                        check_available: bool = True) -> tuple[dict[str, Any], str]:
    """The protocol of ``id`` at ``scale`` (:mod:`mlplab.experiments.protocol`) and its hash."""
    exp, sc, plan = plan_experiment(id, scale, dataset, check_available=check_available, role=role)
    content = protocol_content(exp, sc, [s for sw in plan.sweeps for s in expand(sw)], role)
    return content, protocol_hash(content)


def freeze_protocol(id: str, scale: str = "cpu", dataset: str | None = None, reason: str = "") -> str:
    """Freeze the confirmatory protocol of ``id`` at ``scale``: write its content and hash into the
    experiment's protocol file (``experiments/data/protocols/ID.json``), to be committed before the
    confirmatory run. Returns the hash."""
    if not reason.strip():
        raise BadInput("freezing a protocol needs --reason: say why this protocol (and what changed since the last)")
    exp = get_experiment(id)
    content, h = experiment_protocol(exp.id, scale, dataset, role="confirmatory")
    f = Path(str(protocol_file(exp.id)))
    data = json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {"experiment": exp.id, "history": []}
    data.setdefault("frozen", {})[scale] = {"hash": h, "frozen": time.strftime("%Y-%m-%d"), "reason": reason.strip(),
                                            "content": content}
    f.parent.mkdir(parents=True, exist_ok=True)
    from ..utils.io import atomic_write_text

    atomic_write_text(f, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return h


def _check_frozen(exp: Experiment, scale: str, content: dict[str, Any], h: str) -> None:
    """A confirmatory run needs this exact protocol frozen before it: refuse otherwise, naming what differs."""
    frozen = frozen_protocol(exp.id, scale)
    if frozen is None:
        raise BadInput(f"{exp.id} has no frozen {scale} protocol: freeze it first (`mlplab reproduce {exp.id} --scale "
                       f"{scale} --freeze --reason \"...\"`, then commit experiments/data/protocols/{exp.id}.json)")
    if frozen["hash"] != h:
        old = frozen.get("content", {})
        diff = [k for k in sorted(set(old) | set(content)) if old.get(k) != content.get(k)]
        raise BadInput(f"the {scale} protocol of {exp.id} has changed since it was frozen ({frozen['hash']} → {h}; "
                       f"differs in: {', '.join(diff) or 'nothing shown'}): a confirmatory run uses the frozen "
                       "protocol; record the change in the protocol history and freeze again (--freeze --reason)")


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
                 f"scales: R, κ, τ0 of {cpu_machine().name}, runs dealt to 2 workers longest first; paper: one "
                 "V100 with R and τ0 from the paper's Table S.3 timings (mlplab.experiments.cost)")
    return "\n".join(lines)


def default_out_dir(id: str, scale: str, role: str = "exploratory") -> Path:
    """``runs/experiments/ID-SCALE`` (``-confirm`` appended for a confirmatory run)."""
    suffix = "-confirm" if role == "confirmatory" else ""
    return Path("runs") / "experiments" / f"{get_experiment(id).id}-{scale}{suffix}"


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
    role: str = "exploratory",
    on_run_end: Callable[[Any, str], None] | None = None,
    lockstep: str = "auto",
) -> dict[str, Any]:
    """Run experiment ``id`` at ``scale`` into ``out_dir`` and write its report there.

    ``overrides``: dotted run-config keys applied to every training run (e.g. more epochs);
    ``role="confirmatory"``: the fresh seeds of the frozen protocol (refused when the protocol is
    not frozen, or differs from the frozen one — overrides change it). ``on_run_end(run_dir,
    status)`` is called as each run ends (the campaign commits finished runs with it).
    ``lockstep``: train a sweep point's seeds together where it pays, wherever supported, or
    never ("auto", "on", "off"; ``mlplab.experiments.executors``).
    Returns ``{"out_dir", "status" (per run), "failed", "report" (path or None), "verdicts"}``.
    Finished runs are skipped, so calling it again resumes a killed experiment.
    """
    exp, sc, plan = plan_experiment(id, scale, dataset, overrides=overrides, role=role)
    out = Path(out_dir) if out_dir is not None else default_out_dir(exp.id, scale, role)
    runs = [[expand(sw) for sw in stage] for stage in plan.stages]  # each sweep expanded once
    flat = [s for stage in runs for sw_runs in stage for s in sw_runs]
    content = protocol_content(exp, sc, flat, role)
    h = protocol_hash(content)
    if role == "confirmatory":
        _check_frozen(exp, scale, content, h)
    check_specs(flat, out)  # before any write
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "experiment": exp.id, "title": exp.title, "scale": sc.to_dict(),
        "command": command or "mlplab reproduce " + " ".join(shlex.quote(a) for a in [exp.id, "--scale", scale] +
                                                              (["--dataset", dataset] if dataset else []) +
                                                              (["--confirm"] if role == "confirmatory" else [])),
        "argv": sys.argv, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "notes": sc.notes + plan.notes, "settings": plan.settings,
        "protocol": {"hash": h, "role": role, "seeds": content["seeds"]},
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
                      for sw, sw_runs in zip(stage, stage_runs) for s in sw_runs}, jobs=jobs, on_finish=on_run_end)
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
