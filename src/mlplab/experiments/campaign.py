"""The confirmation campaign: every experiment with a cpu scale, run on its frozen protocol's fresh
seeds, its per-run results committed as they finish so that a campaign outlasting one sitting
continues on another machine (docs/experiments.md, "The confirmation campaign").

    mlplab reproduce --all --scale cpu --confirm --jobs 2

A confirmed result lives in ``docs/results/<id>-<scale>-<machine>/``: the report and its
``verdicts.json``, ``protocol.json`` (the hash, role and seeds it ran), and under ``runs/`` each
finished run's ``spec.json``, ``config.json`` and ``results.json`` (no checkpoints). Before an id
runs, the committed runs of a folder with the same protocol hash are copied into the run folder,
where the executor finds them finished: a committed run is never repeated, and runs of another
protocol are never mixed in. Staged ids (a later stage reads an earlier one's checkpoints:
fig2a-c, sm-transfer, sm-batch-size, mixer-ablations, mixer-weights) are committed as a whole.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import BadInput
from ..utils.io import atomic_write_json, read_json
from .protocol import frozen_protocol

__all__ = ["RUN_FILES", "campaign_order", "results_folder", "restore_runs", "publish_run", "publish_report",
           "campaign_ids"]

RUN_FILES = ("spec.json", "config.json", "results.json")  # what a committed run keeps (no checkpoints)
REPORT_FILES = ("report.md", "verdicts.json", "experiment.json", "results.csv", "runs.csv")


def campaign_order(ids: Sequence[str], first: Sequence[str] = ("fig5",), then: Sequence[str] = ()) -> list[str]:
    """``ids`` in campaign order: ``first`` (the main job), then ``then`` (e.g. the ids whose last
    committed verdicts were recovered from prose), then the rest in their given order."""
    head = list(dict.fromkeys([i for i in first if i in ids] + [i for i in then if i in ids]))
    return head + [i for i in ids if i not in head]


def campaign_ids(ids: Sequence[str], scale: str, scales_of: Callable[[str], Sequence[str]]) -> list[str]:
    """The ids that have ``scale`` (the ImageNet ids have no cpu scale)."""
    return [i for i in ids if scale in scales_of(i)]


def _protocol_of(folder: Path) -> dict[str, Any] | None:
    p = folder / "protocol.json"
    return read_json(p, "protocol record") if p.is_file() else None


def results_folder(root: Path, id: str, scale: str, h: str, machine: str) -> Path:
    """The committed folder of ``id`` at ``scale`` for protocol hash ``h``: an existing
    ``<id>-<scale>-*`` folder that records the same hash (a campaign begun on another machine),
    else a new ``<id>-<scale>-<machine>``. A folder of the same name but another protocol is refused."""
    for f in sorted(root.glob(f"{id}-{scale}-*")):
        rec = _protocol_of(f)
        if rec and rec.get("hash") == h:
            return f
    dest = root / f"{id}-{scale}-{machine}"
    rec = _protocol_of(dest)
    if dest.exists() and any(dest.iterdir()) and (rec is None or rec.get("hash") != h):
        what = f"runs of protocol {rec.get('hash')}" if rec else "an earlier result without a protocol record"
        raise BadInput(f"{dest} holds {what}, not protocol {h}: move it under {root / 'explore'} (exploratory) "
                       f"or {root / 'recovered'} first")
    return dest


def restore_runs(results: Path, out: Path, h: str) -> int:
    """Copy the committed runs of ``results`` (protocol hash ``h``) into the run folder ``out``,
    where the executor counts them finished. Returns how many were restored; none when the
    folder records another protocol."""
    rec = _protocol_of(results)
    if rec is None or rec.get("hash") != h:
        return 0
    n = 0
    for spec in sorted((results / "runs").glob("*/*/spec.json")):
        src = spec.parent
        dest = out / src.parent.name / src.name
        if (src / "results.json").is_file() and not (dest / "results.json").is_file():
            dest.mkdir(parents=True, exist_ok=True)
            for name in RUN_FILES:
                if (src / name).is_file():
                    shutil.copy2(src / name, dest / name)
            n += 1
    return n


def publish_run(run_dir: Path, results: Path) -> bool:
    """Copy a finished run's files (``RUN_FILES``) under ``results/runs/<sweep>/<name>/``, results
    last so that a cut copy is never taken for a finished run. False when it has not finished."""
    run_dir = Path(run_dir)
    if not (run_dir / "results.json").is_file():
        return False
    dest = results / "runs" / run_dir.parent.name / run_dir.name
    dest.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, dest / name)
    return True


def start_results(results: Path, protocol: dict[str, Any], machine: dict[str, Any]) -> None:
    """Mark ``results`` as holding runs of ``protocol`` (``{"hash", "role", "seeds"}``) before the
    first run lands, with the machine of the sitting that began it."""
    results.mkdir(parents=True, exist_ok=True)
    if not (results / "protocol.json").is_file():
        atomic_write_json(results / "protocol.json", {**protocol, "begun": time.strftime("%Y-%m-%d"),
                                                      "machine": machine})


def publish_report(out: Path, results: Path, exploratory: Path | None = None) -> None:
    """Copy a finished id's report files and figures into ``results`` (and every run, for staged
    ids committed as a whole), with the exploratory run's verdicts beside them when given."""
    for f in sorted(out.iterdir()):
        if f.is_file() and (f.name in REPORT_FILES or f.suffix in (".png", ".csv")):
            shutil.copy2(f, results / f.name)
    for spec in sorted(out.glob("*/*/spec.json")):
        publish_run(spec.parent, results)
    if exploratory is not None and exploratory.is_file():
        shutil.copy2(exploratory, results / "exploratory.json")


def frozen_ids(ids: Sequence[str], scale: str) -> tuple[list[str], list[str]]:
    """(ids whose ``scale`` protocol is frozen, ids whose is not)."""
    ok = [i for i in ids if frozen_protocol(i, scale) is not None]
    return ok, [i for i in ids if i not in ok]


def campaign_state(root: Path, scale: str) -> dict[str, dict[str, Any]]:
    """Per committed folder of ``scale`` under ``root``: its protocol record and how many runs it holds."""
    out = {}
    for f in sorted(root.glob(f"*-{scale}-*")):
        rec = _protocol_of(f)
        if rec is not None:
            out[f.name] = {**rec, "runs": len(list((f / "runs").glob("*/*/results.json")))}
    return out


def write_json(path: Path, data: Any) -> None:
    atomic_write_json(path, json.loads(json.dumps(data, default=str)))


def recovered_ids(root: Path) -> list[str]:
    """The ids whose last committed verdicts were recovered from prose (``root/recovered/``)."""
    out = []
    for f in sorted((root / "recovered").glob("*/verdicts.json")):
        try:
            out.append(read_json(f, "verdicts")["experiment"])
        except Exception:  # an unreadable record only loses its place in the order
            continue
    return out


def latest_exploratory(root: Path, id: str, scale: str) -> Path | None:
    """The verdicts of the latest exploratory run of ``id`` at ``scale`` committed under ``root/explore/``."""
    found = sorted((root / "explore").glob(f"{id}-{scale}-*/verdicts.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def run_campaign(scale: str = "cpu", *, ids: Sequence[str] | None = None, jobs: int = 2, executor: str = "local",
                 results_root: Path = Path("docs/results"), out_root: Path = Path("runs/experiments"),
                 verbose: bool = True) -> list[dict[str, Any]]:
    """Run every id with a ``scale`` (or ``ids``) on its frozen protocol's confirmatory seeds, in
    campaign order, committing each finished run into its results folder as it ends and each
    report as its id finishes; resumable after a kill, here or on another machine from the
    committed runs. Ids without a frozen protocol are skipped and named. Returns one record per id."""
    from ..utils.cpu import machine_tag
    from ..utils.machine import machine_record
    from ..utils.progress import format_duration
    from .cost import estimate_cost
    from .protocol import protocol_content, protocol_hash
    from .registry import get_experiment, list_experiments, plan_experiment, reproduce
    from .sweep import expand

    log = print if verbose else (lambda *a, **k: None)
    every = campaign_ids(list(ids or list_experiments()), scale, lambda i: get_experiment(i).scales)
    order = campaign_order(every, then=recovered_ids(results_root))
    ready, unfrozen = frozen_ids(order, scale)
    if unfrozen:
        log(f"no frozen {scale} protocol, skipped: {', '.join(unfrozen)}")
    plans = {i: plan_experiment(i, scale, role="confirmatory") for i in ready}
    total = sum(estimate_cost(p, scale, jobs)["est_s"] for _, _, p in plans.values())
    log(f"campaign: {len(ready)} ids at {scale} scale, estimated {format_duration(total)} with --jobs {jobs}")
    records = []
    for id in ready:
        exp, sc, plan = plans[id]
        runs = [s for sw in plan.sweeps for s in expand(sw)]
        content = protocol_content(exp, sc, runs, "confirmatory")
        h = protocol_hash(content)
        results = results_folder(results_root, id, scale, h, machine_tag())
        out = out_root / f"{id}-{scale}-confirm"
        staged = len(plan.stages) > 1
        committed = len(list((results / "runs").glob("*/*/results.json")))
        if (results / "verdicts.json").is_file() and committed == len(runs):
            log(f"{id}: confirmed before ({committed} runs committed in {results})")
            records.append({"id": id, "results": str(results), "status": "confirmed before"})
            continue
        restored = restore_runs(results, out, h) if not staged or committed == len(runs) else 0
        start_results(results, {"hash": h, "role": "confirmatory", "seeds": content["seeds"]}, machine_record())
        explore = latest_exploratory(results_root, id, scale)
        if explore is not None:
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy2(explore, out / "exploratory.json")
        log(f"{id}: {len(runs)} runs, {restored} restored from {results}; protocol {h}")
        commit = (lambda where, status: publish_run(Path(where), results)) if not staged else None
        res = reproduce(id, scale, out_dir=out, jobs=jobs, executor=executor, role="confirmatory", verbose=verbose,
                        on_run_end=commit)
        publish_report(out, results)
        records.append({"id": id, "results": str(results), "status": "failed runs" if res["failed"] else "done",
                        "failed": res["failed"]})
    return records
