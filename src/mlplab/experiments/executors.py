"""Run the runs of a sweep: inline (this process), local (N worker processes sharing the cores
or one GPU each) or slurm (a job array through ``submitit``; a multi-GPU run is one job of one
task per GPU, and ``<run>/job.sbatch`` the same job by hand: :mod:`mlplab.experiments.slurm`).

Every run lives in its own folder ``<out>/<sweep>/<run>/``:

- ``spec.json``   what to run (overrides, task), written before the run starts;
- ``results.json`` written when the run finished — a run whose file reads back is skipped; an
  unreadable one (cut by a kill or a full disk) is set aside as ``results.unreadable.json`` and the
  run done again;
- ``error.txt``   the traceback of a failed run (the other runs go on);
- ``log.txt``     stdout/stderr of a worker process (local executor).

Seeds in lockstep (``lockstep="auto"``, ``reproduce --lockstep``): the unfinished seeds of one
sweep point (:func:`mlplab.experiments.sweep.seed_groups`) are one job, trained together as one
stacked model by :func:`mlplab.train.lockstep.train_lockstep` in one process, where the model
supports it and lockstep was measured to pay for it (:func:`lockstep_note`); every seed keeps its
own folder, files and outcome, exactly as its solo run's. "on": wherever supported; "off": every
run on its own. Each run's line says why it trains alone where lockstep was considered.

A killed sweep resumes where it stopped: finished runs are skipped and unfinished ones start
again in the same folder, where the trainer picks up its checkpoint. ``<out>/<sweep>/summary.json``
records the status of every run. One sweep at a time writes to an output folder: a second
``reproduce``/``sweep`` of the same ``--out`` is refused while the first holds ``<out>/.lock``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import BadInput, Interrupted, UnreadableFile
from ..train.distributed import launch_env
from ..utils.interrupts import library_stop_signals, raise_if_interrupted, stop_signals
from ..utils.io import atomic_write_json, atomic_write_text, folder_lock, read_json
from ..utils.processes import die_with_parent
from ..utils.progress import RunTally
from .cost import lockstep_factor, longest_first
from .slurm import job_gpus, spec_of, write_sbatch
from .sweep import RunSpec, Sweep, expand, run_dir_overrides, seed_groups

__all__ = ["SweepResult", "run_sweep", "run_specs", "execute_run", "execute_group", "available_cores", "EXECUTORS",
           "run_dir_overrides", "LOCKSTEP", "lockstep_note"]

EXECUTORS = ("inline", "local", "slurm")
#: ``lockstep`` choices: where measured to pay, wherever supported, never
LOCKSTEP = ("auto", "on", "off")
SWEEP_BUSY = ("another mlplab reproduce or sweep is writing there; wait for it to finish, then run the command "
              "again (finished runs are skipped)")


@dataclass
class SweepResult:
    """What a sweep did: per run ``done`` (ran now), ``skipped`` (finished before) or ``failed``."""

    out_dir: Path
    status: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    run_dirs: dict[str, Path] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [k for k, v in self.status.items() if v == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed

    def counts(self) -> dict[str, int]:
        return dict(Counter(self.status.values()))


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------
# one run


def _load_task(task: str):
    from .tasks import get_task  # a registered name, or 'module:function' from a sweep file

    return get_task(task)


def _train_config(spec: RunSpec, run_dir: Path):
    from ..train import make_config

    # meta.* keys label a run for the analysis (Ω, family, ...); they are not config keys.
    # make_config takes model.kwargs.x keys directly.
    overrides = {k: v for k, v in spec.overrides.items() if not k.startswith("meta.")}
    overrides.update(run_dir_overrides(run_dir))
    return make_config(spec.base, overrides)


def _train_run(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    from ..train import train  # the trainer writes config/metrics/results.json
    from ..train.config import to_dict

    cfg = _train_config(spec, run_dir)
    saved = run_dir / "config.json"
    if saved.is_file():
        try:
            read_json(saved, "run config")
        except UnreadableFile:  # cut by a kill or a full disk: the spec says what it was
            atomic_write_json(saved, to_dict(cfg))
    # a run killed earlier continues from its checkpoint (same config required)
    return train(cfg, resume=saved.is_file())


def finished(run_dir: str | os.PathLike) -> bool:
    """Whether the run in ``run_dir`` finished: its ``results.json`` reads back as an object."""
    from ..train.rundir import read_results

    return read_results(run_dir) is not None


def _set_aside_unreadable_results(run_dir: Path) -> None:
    """A ``results.json`` that does not read back makes the run unfinished; keep it for a look."""
    results = run_dir / "results.json"
    if results.exists() and not finished(run_dir):
        os.replace(results, run_dir / "results.unreadable.json")


def check_specs(specs: Sequence[RunSpec], out_dir: Path) -> None:
    """Validate every training run's config (keys, types, rules, dataset name, model against the
    dataset) once, before anything is launched or written: a typo in ``--set`` stops the whole
    experiment with one message instead of failing every run. Memory is not checked here (a
    cluster node may have more than this machine)."""
    from ..train.runplan import plan_run

    for s in specs:
        if s.task != "train":
            continue
        try:
            plan_run(_train_config(s, out_dir / (s.sweep or "") / s.name), here=False)
        except ValueError as e:
            raise BadInput(f"run {_key(s)}: {e}") from None


def execute_run(run_dir: str | os.PathLike) -> str:
    """Execute the run described by ``<run_dir>/spec.json``; return ``done`` / ``skipped`` / ``failed``.

    A failure writes its traceback to ``<run_dir>/error.txt`` and returns ``failed``;
    ``KeyboardInterrupt`` / ``SystemExit`` propagate (a killed run simply stays unfinished).
    """
    run_dir = Path(run_dir)
    results = run_dir / "results.json"
    if launch_env().rank != 0:  # one process of a multi-process run (torchrun, srun): rank 0 keeps the files
        if finished(run_dir):
            return "skipped"
        spec = RunSpec.from_json(read_json(run_dir / "spec.json", "run spec"))
        if spec.task == "train":
            _train_run(spec, run_dir)
        return "done"
    spec = _start(run_dir)
    if spec is None:
        return "skipped"
    err = run_dir / "error.txt"
    threads = os.environ.get("MLPLAB_NUM_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    t0 = time.time()
    try:
        if spec.task == "train":
            res = _train_run(spec, run_dir)
        else:
            res = _load_task(spec.task)(dict(spec.overrides), run_dir)
        if not results.exists():  # analysis tasks (and a trainer that wrote elsewhere)
            res = dict(res or {})
            res.setdefault("wall_s", time.time() - t0)
            if not (run_dir / "config.json").exists():
                atomic_write_json(run_dir / "config.json", {"task": spec.task, "overrides": spec.overrides})
            atomic_write_json(results, res)
        err.unlink(missing_ok=True)  # done, never done and failed (a refused second process may have written it)
        return "done"
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:
        if finished(run_dir):  # another process finished this run meanwhile: it is done
            return "done"
        atomic_write_text(err, traceback.format_exc())
        return "failed"


def _start(run_dir: Path) -> RunSpec | None:
    """A run about to execute: None when it finished before; else its spec, with an unreadable
    ``results.json`` and a previous attempt's ``error.txt`` set aside."""
    if finished(run_dir):
        return None
    _set_aside_unreadable_results(run_dir)
    err = run_dir / "error.txt"
    if err.exists():  # a previous attempt failed: keep its trace beside the new attempt
        os.replace(err, run_dir / "error.previous.txt")
    return RunSpec.from_json(read_json(run_dir / "spec.json", "run spec"))


def execute_group(run_dirs: Sequence[str | os.PathLike]) -> dict[str, str]:
    """Execute the training runs of one sweep point (``<run_dir>/spec.json``, differing only in
    their seed) together, in lockstep (:func:`mlplab.train.lockstep.train_lockstep`); per run
    directory ``done`` / ``skipped`` / ``failed``, each failure's traceback in its ``error.txt``
    (a diverged seed fails alone). ``KeyboardInterrupt`` / ``SystemExit`` propagate."""
    from ..train.lockstep import train_lockstep

    dirs = [Path(d) for d in run_dirs]
    out = {str(d): "skipped" for d in dirs}
    todo = [(d, spec) for d in dirs if (spec := _start(d)) is not None]
    if not todo:
        return out
    threads = os.environ.get("MLPLAB_NUM_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    try:
        outcomes = train_lockstep([_train_config(spec, d) for d, spec in todo],
                                  resume=[(d / "config.json").is_file() for d, _ in todo])
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # nothing was decided per seed: every unfinished one failed
        outcomes = [e] * len(todo)
    for (d, _), res in zip(todo, outcomes):
        if isinstance(res, BaseException) and not finished(d):
            atomic_write_text(d / "error.txt", "".join(traceback.format_exception(res)))
            out[str(d)] = "failed"
        else:
            (d / "error.txt").unlink(missing_ok=True)
            out[str(d)] = "done"
    return out


def lockstep_note(spec: RunSpec, mode: str) -> str | None:
    """Why the seeds of ``spec``'s sweep point train one after another under ``mode``
    (:data:`LOCKSTEP`), or None when they train in lockstep: the model cannot be stacked
    (:func:`mlplab.train.lockstep.lockstep_unsupported`), or (``auto``) lockstep was not
    measured to pay for it (:func:`mlplab.experiments.cost.lockstep_factor`: on the CPU machine)."""
    if mode == "off":
        return "lockstep off"
    if spec.task != "train":
        return "an analysis task"
    from ..train.lockstep import lockstep_unsupported

    cfg = _train_config(spec, Path(spec.sweep or ".") / spec.name)  # validated only: nothing is written
    why = lockstep_unsupported(cfg)
    if why is not None or mode == "on":
        return why
    factor = lockstep_factor(spec.overrides)
    if factor is None:
        return f"lockstep is not measured for {cfg.model.name}"
    if factor >= 1:
        return f"lockstep was measured at {factor:.2f}x the time of one seed after another for {cfg.model.name}"
    if cfg.run.device != "cpu" and visible_gpus():
        return "lockstep was measured on CPUs only"
    return None


def _jobs(specs: Sequence[RunSpec], dirs: dict[str, Path], mode: str) -> list[tuple[list[Path], str]]:
    """The units the executor runs, in the sweep's order: a sweep point's unfinished seeds together
    where lockstep applies (:func:`lockstep_note`; at its first seed's place), else each run alone;
    with each job's note for its line."""
    stacked: dict[str, list[RunSpec]] = {}  # first seed's key -> its group, trained in lockstep
    why: dict[str, str | None] = {}  # a run trained alone -> the reason, where lockstep was considered
    for group in seed_groups(specs):
        note = lockstep_note(group[0], mode) if len(group) > 1 else None
        if len(group) > 1 and note is None:
            stacked[_key(group[0])] = group
            why.update({_key(s): "" for s in group[1:]})
        else:
            why.update({_key(s): note for s in group})
    jobs: list[tuple[list[Path], str]] = []
    for s in specs:
        k = _key(s)
        if k in stacked:
            jobs.append(([dirs[_key(x)] for x in stacked[k]], f" in lockstep ({len(stacked[k])} seeds)"))
        elif why[k] != "":  # "" marks a later seed of a stacked group
            jobs.append(([dirs[k]], f" (alone: {why[k]})" if why[k] and mode != "off" else ""))
    return jobs


def _error_head(run_dir: Path) -> str:
    err = run_dir / "error.txt"
    if not err.exists():
        return ""
    lines = [ln for ln in err.read_text().strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# ---------------------------------------------------------------------------------------------
# executors


def _run_inline(jobs: list[tuple[list[Path], str]], log, out: dict[Path, str], tally: RunTally,
                names: dict[Path, str]) -> dict[Path, str]:
    for dirs, note in jobs:
        raise_if_interrupted()  # a stop signal swallowed inside the last run (utils.interrupts)
        log(tally.starting(dirs[0], names[dirs[0]] + note))
        status = {dirs[0]: execute_run(dirs[0])} if len(dirs) == 1 else \
            {Path(d): st for d, st in execute_group(dirs).items()}
        free_device_cache()
        for d in dirs:
            out[d] = status[d]
            tally.finish(d, out[d], names[d])
    return out


def free_device_cache() -> None:
    """Hand back the GPU memory PyTorch's allocator keeps cached after a run, so that the next run
    of this process finds it free (its memory check and ``data.on_device=auto`` count it too:
    ``train.memory.available_memory``). Nothing where CUDA was never used."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def visible_gpus() -> list[str]:
    """The GPUs this process may hand to its workers, as ``CUDA_VISIBLE_DEVICES`` entries: the
    parent's own list when it has one (indices or UUIDs, e.g. ``4,5,6,7``), else ``0..n-1``."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    except Exception:  # pragma: no cover
        return []


def worker_slots(jobs: int, gpus: list[str]) -> list[str | None]:
    """One entry per concurrent worker: its GPU, or None on CPU. With GPUs, at most one worker per
    GPU runs at a time (two runs sharing a GPU would also share its timing), so ``jobs`` is capped
    at the number of GPUs."""
    if not gpus:
        return [None] * max(1, jobs)
    return list(gpus[:max(1, min(jobs, len(gpus)))])


def _owned_by(parent: int) -> Callable[[], None]:
    """The executor owns its workers: each starts its own process group (so stopping it stops
    whatever it started) and, on Linux, is sent SIGTERM when the executor dies — even by SIGKILL,
    which no handler sees — so killing ``reproduce`` never leaves a run going on its own."""
    def child() -> None:
        os.setpgid(0, 0)  # not Linux: the process group still lets us stop it
        die_with_parent(parent, signal.SIGTERM)
    return child


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _run_local(jobs_: list[tuple[list[Path], str]], jobs: int, log, out: dict[Path, str],
               tally: RunTally, names: dict[Path, str]) -> dict[Path, str]:
    """``jobs`` worker processes (``python -m mlplab.experiments.worker RUN_DIR [RUN_DIR ...]``:
    one run, or a sweep point's seeds in lockstep) at a time, in the order of ``jobs_`` (the
    caller's: longest estimate first, :func:`mlplab.experiments.cost.longest_first`).

    With GPUs each worker sees exactly one of the GPUs this process may use (``worker_slots``:
    the parent's ``CUDA_VISIBLE_DEVICES`` is honoured, no GPU is shared); on CPU the cores are
    shared: threads per worker = cores // jobs. A lockstep job logs to its first run's
    ``log.txt``; the others' say so.
    """
    slots = worker_slots(jobs, visible_gpus())
    if len(slots) < jobs:
        log(f"--jobs {jobs}: {len(slots)} GPU(s) visible, running {len(slots)} at a time (one run per GPU)")
    jobs = len(slots)
    threads = max(1, available_cores() // jobs)
    pending = list(jobs_)
    running: dict[int, tuple[subprocess.Popen, list[Path], str, Any]] = {}  # slot -> process
    try:
        while pending or running:
            for slot in range(jobs):
                if slot in running or not pending:
                    continue
                dirs, note = pending.pop(0)
                log(tally.starting(dirs[0], names[dirs[0]] + note))
                env = dict(os.environ)
                env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                           MLPLAB_NUM_THREADS=str(threads))
                if slots[slot] is not None:
                    env["CUDA_VISIBLE_DEVICES"] = slots[slot]
                for d in dirs[1:]:
                    with open(d / "log.txt", "a") as f:
                        f.write(f"trained in lockstep with {', '.join(x.name for x in dirs)}: the log is "
                                f"{dirs[0] / 'log.txt'}\n")
                logf = open(dirs[0] / "log.txt", "ab")
                p = subprocess.Popen([sys.executable, "-m", "mlplab.experiments.worker", *map(str, dirs)],
                                     stdout=logf, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=_owned_by(os.getpid()))
                running[slot] = (p, dirs, note, logf)
            time.sleep(0.1)
            raise_if_interrupted()
            for slot, (p, dirs, note, logf) in list(running.items()):
                rc = p.poll()
                if rc is None:
                    continue
                logf.close()
                del running[slot]
                for d in dirs:
                    if finished(d):
                        out[d] = "done"
                        (d / "error.txt").unlink(missing_ok=True)
                    else:
                        out[d] = "failed"
                        if not (d / "error.txt").exists():
                            tail = (dirs[0] / "log.txt").read_text(errors="replace")[-4000:]
                            atomic_write_text(d / "error.txt", f"worker exited with code {rc}\n{tail}")
                    log(tally.finish(d, out[d], names[d] + note))
    except BaseException:
        for p, _, _, logf in running.values():  # only the process groups this sweep started
            _signal_group(p, signal.SIGTERM)
        for p, _, _, logf in running.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()
            logf.close()
        raise
    return out


def slurm_gpus_per_run(dirs: list[Path]) -> int:
    """GPUs each Slurm job asks for unless ``gpus_per_node`` is given: one, unless every run says
    ``run.device=cpu`` (a job array on a CPU partition then asks for none)."""
    for d in dirs:
        try:
            device = json.loads((d / "spec.json").read_text())["overrides"].get("run.device", "auto")
        except (OSError, ValueError, KeyError, AttributeError):
            return 1
        if device != "cpu":
            return 1
    return 0


class SlurmRun:
    """:func:`execute_run` as submitit's job function, checkpointable: when Slurm's signal comes
    while the run is not training (loading data, testing), submitit requeues the job with the same
    call, and the run goes on from its last checkpoint. During training the run's own handler
    checkpoints at the next step and requeues (:mod:`mlplab.train.preemption`)."""

    def __call__(self, run_dir: str) -> str:
        return execute_run(run_dir)

    def checkpoint(self, run_dir: str):
        import submitit

        return submitit.helpers.DelayedSubmission(SlurmRun(), run_dir)


def _run_slurm(dirs: list[Path], jobs: int, folder: Path, log, slurm: dict[str, Any] | None,
               out: dict[Path, str], tally: RunTally, names: dict[Path, str]) -> dict[Path, str]:
    """One job array through submitit; ``slurm`` are ``update_parameters`` arguments
    (``cluster="local"`` runs the same path with submitit's local executor, for tests), and
    ``submit=false`` only writes each run's ``job.sbatch``. Training runs with ``gpus_per_node``
    G > 1 run G tasks per node, one DDP process per GPU (:mod:`mlplab.experiments.slurm`)."""
    params = dict(slurm or {})
    cluster, submit = params.pop("cluster", None), params.pop("submit", True)
    params.setdefault("timeout_min", 24 * 60)
    if cluster not in ("local", "debug"):
        params.setdefault("gpus_per_node", slurm_gpus_per_run(dirs))
        if job_gpus(params) > 1 and all(spec_of(d).get("task", "train") == "train" for d in dirs):
            params.setdefault("tasks_per_node", job_gpus(params))
    scripts = [write_sbatch(d, params) for d in dirs]
    if not submit:
        log(f"wrote {len(scripts)} sbatch script(s), submitted nothing; submit one with: sbatch {scripts[0]}")
        return out
    try:
        import submitit
    except ImportError as e:
        raise ImportError(
            "executor='slurm' needs submitit: pip install 'mlplab[slurm]' (or pip install submitit); "
            f"or submit the script written beside each run by hand: sbatch {scripts[0]}"
        ) from e
    params.setdefault("slurm_array_parallelism", jobs)
    ex = submitit.AutoExecutor(folder=str(folder / ".submitit"), cluster=cluster)
    ex.update_parameters(**params)
    handles = ex.map_array(SlurmRun(), [str(d) for d in dirs])
    for d, h in zip(dirs, handles):
        raise_if_interrupted()
        try:
            out[d] = h.results()[0]  # rank 0's status (one per task)
        except Exception as e:  # the job died before execute_run could record it
            out[d] = "failed"
            if not (d / "error.txt").exists():
                atomic_write_text(d / "error.txt", f"slurm job {h.job_id} failed: {e}\n")
        log(tally.finish(d, out[d], names[d]))
    return out


# ---------------------------------------------------------------------------------------------
# sweeps


def _prepare(spec: RunSpec, run_dir: Path) -> None:
    """Write the run's ``spec.json`` (again, when a kill or a full disk cut it: the sweep
    definition says what it holds); a folder holding another run's spec is refused."""
    run_dir.mkdir(parents=True, exist_ok=True)
    p = run_dir / "spec.json"
    new = spec.to_json()
    if p.exists():
        try:
            old = read_json(p, "run spec")
        except UnreadableFile:
            old = None
        if old is not None:
            if old.get("overrides") != json.loads(json.dumps(new["overrides"], default=str)):
                raise BadInput(f"{run_dir} holds a run with other overrides; use another --out or remove the folder")
            return
    atomic_write_json(p, new)


def _dir_of(s: RunSpec, out_dir: Path) -> Path:
    return out_dir / s.sweep / s.name if s.sweep else out_dir / s.name


def _key(s: RunSpec) -> str:
    return f"{s.sweep}/{s.name}" if s.sweep else s.name


def run_specs(
    specs: Sequence[RunSpec],
    out_dir: str | os.PathLike,
    *,
    jobs: int = 1,
    executor: str = "inline",
    slurm: dict[str, Any] | None = None,
    verbose: bool = True,
    checked: bool = False,
    tally: RunTally | None = None,
    lockstep: str = "auto",
) -> SweepResult:
    """Execute ``specs`` into ``<out_dir>/<spec.sweep>/<spec.name>/`` (see :func:`run_sweep`).

    The result is keyed by ``"<sweep>/<run>"``. ``checked``: the caller ran :func:`check_specs`
    on these specs already (``reproduce`` checks every stage before the first starts). ``tally``
    counts runs (``[k/N]``) and the time left across several calls (``reproduce``'s stages); by
    default it counts this call's runs."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if lockstep not in LOCKSTEP:
        raise ValueError(f"unknown lockstep {lockstep!r}; choose one of {', '.join(LOCKSTEP)}")
    out_dir = Path(out_dir)
    if not checked:
        check_specs([s for s in specs if not finished(_dir_of(s, out_dir))], out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with folder_lock(out_dir, SWEEP_BUSY):
        return _run_specs_locked(specs, out_dir, jobs, executor, slurm, verbose, tally, lockstep)


def _run_specs_locked(specs: Sequence[RunSpec], out_dir: Path, jobs: int, executor: str,
                      slurm: dict[str, Any] | None, verbose: bool, tally: RunTally | None,
                      lockstep: str = "auto") -> SweepResult:
    log = (lambda msg: print(msg, flush=True)) if verbose else (lambda msg: None)
    result = SweepResult(out_dir)
    todo: list[Path] = []
    for s in specs:
        d = _dir_of(s, out_dir)
        _prepare(s, d)
        result.run_dirs[_key(s)] = d
        if finished(d):
            result.status[_key(s)] = "skipped"
        else:
            todo.append(d)
    if tally is None:  # count this call's runs to do
        tally = RunTally(total=len(todo))
    else:  # the caller's count, in which runs finished before are done
        for s in specs:
            tally.track(result.run_dirs[_key(s)], _key(s))
            if result.status.get(_key(s)) == "skipped":
                tally.skip(result.run_dirs[_key(s)])
    if todo:
        log(f"{len(todo)} run(s) to do, {len(specs) - len(todo)} finished before; executor={executor}, jobs={jobs}")
    st: dict[Path, str] = {}  # filled as runs end, so an interrupted sweep still records them
    key_of = {d: k for k, d in result.run_dirs.items()}
    several = len({s.sweep for s in specs}) > 1  # e.g. a sweep and its 2x longer twin: the same run names
    names = {d: k if several else d.name for d, k in key_of.items()}  # in progress lines
    try:
        # a sweep called from Python stops on `kill PID` too, and a swallowed Ctrl-C before its next run
        with stop_signals((signal.SIGTERM,)), library_stop_signals():
            if executor == "slurm":  # one array task per run
                _run_slurm(todo, jobs, out_dir, log, slurm, st, tally, names)
            else:
                work = _jobs([s for s in specs if result.run_dirs[_key(s)] in set(todo)], result.run_dirs, lockstep)
                if executor == "inline":
                    _run_inline(work, log, st, tally, names)
                else:
                    est = [sum(tally.estimates.get(key_of[d], 0.0) for d in dirs) for dirs, _ in work]
                    _run_local([work[i] for i in longest_first(est)], jobs, log, st, tally, names)
    except KeyboardInterrupt as e:
        if isinstance(e, Interrupted) and e.message:
            raise
        ended = sum(v == "done" for v in st.values())
        raise Interrupted(f"interrupted with {ended} of {len(todo)} run(s) finished in {out_dir}",
                          getattr(e, "signum", None)) from None
    finally:
        for d, status in st.items():
            result.status[key_of[d]] = status
            if status == "failed":
                result.errors[key_of[d]] = _error_head(d)
        _write_summaries(specs, result, out_dir)
    if result.failed:
        log(f"{len(result.failed)} run(s) failed: " + ", ".join(result.failed))
    return result


def _write_summaries(specs: Sequence[RunSpec], result: SweepResult, out_dir: Path) -> None:
    by_sweep: dict[str, list[RunSpec]] = {}
    for s in specs:
        by_sweep.setdefault(s.sweep, []).append(s)
    for sweep, ss in by_sweep.items():
        runs = []
        for s in ss:
            d = result.run_dirs[_key(s)]
            status = result.status.get(_key(s))
            if status is None:  # not reached (the sweep was interrupted)
                status = "unfinished"
            error = (result.errors.get(_key(s)) or _error_head(d)) if status == "failed" else ""
            runs.append({"name": s.name, "status": status, "error": error, "overrides": s.overrides})
        counts = dict(Counter(r["status"] for r in runs))
        atomic_write_json((out_dir / sweep if sweep else out_dir) / "summary.json",
                          {"sweep": sweep, "counts": counts, "runs": runs})


def run_sweep(
    sweep: Sweep | Sequence[Sweep],
    out_dir: str | os.PathLike,
    *,
    jobs: int = 1,
    executor: str = "inline",
    slurm: dict[str, Any] | None = None,
    verbose: bool = True,
    lockstep: str = "auto",
) -> SweepResult:
    """Run every run of ``sweep`` (or several sweeps) into ``<out_dir>/<sweep.name>/<run>/``.

    Finished runs (``results.json``) are skipped; a failed run writes ``error.txt`` and the
    others go on; ``<out_dir>/<sweep.name>/summary.json`` lists every run's status.
    ``executor``: ``inline`` (sequential, in this process), ``local`` (``jobs`` worker
    processes) or ``slurm`` (job array via submitit; ``slurm`` = ``update_parameters`` kwargs).
    ``lockstep`` (:data:`LOCKSTEP`): train a sweep point's seeds together where it pays ("auto"),
    wherever supported ("on"), or never ("off"); inline and local only.
    """
    sweeps = [sweep] if isinstance(sweep, Sweep) else list(sweep)
    specs: list[RunSpec] = []
    for sw in sweeps:
        specs.extend(expand(sw))
    return run_specs(specs, out_dir, jobs=jobs, executor=executor, slurm=slurm, verbose=verbose, lockstep=lockstep)
