"""The run folder ``<run.out_dir>/<run.name>/``: one writer at a time, new or resumed, never half.

:func:`open_run_folder` is called after everything that can be checked without writing has been
checked (config, dataset, model, durations), so a refused or invalid run leaves nothing behind.
It then

1. takes the folder's lock (``mlplab.utils.io.folder_lock``: ``fcntl.flock`` on ``<run>/.lock``,
   held until the run ends and dropped by the kernel when the process dies). A second process is
   refused with a message naming the holder's PID and command.
2. decides whether the call may use the folder: a new run, a resumed run with the same config
   and the same data (``data.json``: an image folder's path, a pack's index hash), or a refusal.
   A finished run, or an unfinished one with a checkpoint, is never replaced without ``overwrite``;
   a run that stopped before its first checkpoint (it diverged, crashed or was interrupted) holds
   nothing worth keeping, so the same command simply starts it again. A folder
   of someone else's files is not trained into without ``overwrite``; ``resume`` of a folder
   that holds no run is refused (a mistyped ``run.name`` does not silently start a new run).
3. for a new run, clears what an earlier run left and writes ``config.json`` (and
   ``data.json``); for a resumed
   one, drops ``metrics.jsonl`` records of epochs after the checkpoint. A ``results.json`` that
   cannot be read counts as unfinished: the resumed run writes it again.
4. turns Ctrl-C (and SIGTERM, which ``mlplab.cli`` maps to it) inside the run into
   :class:`~mlplab.errors.Interrupted`, whose message names the last checkpoint.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import BadInput, FolderInUse, Interrupted, UnreadableFile
from ..utils.io import LOCK_FILE, atomic_write_json, atomic_write_text, claimed_folder, read_json
from .checkpoint import find_checkpoint
from .config import ROOTED_DATASETS, RunConfig, config_diff, from_dict, to_dict
from .data import data_identity, describe_data, same_data
from .distributed import DistInfo, barrier
from .loggers import STEP_KIND

__all__ = ["RunFolder", "open_run_folder", "RunExistsError", "RunLockedError", "LOCK_FILE",
           "truncate_metrics", "read_results", "checkpoint_epoch"]

# files a new run clears when it replaces an old one (``.lock`` stays: it is held)
_RUN_FILES = ("metrics.jsonl", "results.json", "error.txt", "data.json")
#: what the run trained on, when the config alone does not say (image folders, packs: train.data.data_identity)
DATA_FILE = "data.json"
_RUN_DIRS = ("checkpoint", "checkpoint.prev", "checkpoint.new", "tb", "wandb")
# what a sweep's run folder holds before its trainer starts (``mlplab.experiments.executors``)
_SWEEP_FILES = ("spec.json", "log.txt", "error.txt", "error.previous.txt", "results.unreadable.json",
                "job.sbatch", "slurm.out")  # the last two: mlplab.experiments.slurm

RunLockedError = FolderInUse  # another process is writing to the run folder


class RunExistsError(BadInput):
    """The run folder holds a run that this call must not overwrite."""


@dataclass
class RunFolder:
    path: Path
    continuing: bool  # an existing run is resumed
    finished: dict[str, Any] | None  # its results when it had already finished
    data: dict[str, Any] | None = None  # what it trains on (train.data.data_identity)


def read_results(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's ``results.json``, or None when it is missing or unreadable (a run killed while
    an older tool wrote it, a file cut by a full disk): such a run counts as unfinished."""
    try:
        return read_json(Path(run_dir) / "results.json", "results file")
    except (OSError, UnreadableFile):
        return None


def checkpoint_epoch(run_dir: str | Path) -> int | None:
    """The epoch of the run's last complete checkpoint (from its safetensors header), or None."""
    found = find_checkpoint(run_dir)
    if found is None:
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(found / "model.safetensors"), framework="pt") as f:
            return int((f.metadata() or {}).get("epoch"))
    except Exception:  # a damaged checkpoint: the resume says so
        return None


@contextlib.contextmanager
def _lock(run_dir: Path, enabled: bool) -> Iterator[None]:
    """Hold ``<run_dir>/.lock`` for the duration (rank 0 only under torchrun); what this call
    made is removed again when it fails before writing ``config.json`` (``claimed_folder``)."""
    if not enabled:
        yield
        return
    with claimed_folder(run_dir, "wait for it to finish (or stop it), then --resume"):
        yield


def _siblings(run_dir: Path) -> list[str]:
    try:
        return [p.name for p in run_dir.parent.iterdir() if (p / "config.json").is_file()]
    except OSError:
        return []


def _saved_data(run_dir: Path) -> dict[str, Any] | None:
    """The data a run in ``run_dir`` trained on (``data.json``); None for a run that did not
    record it (one of the table's datasets, or an older mlplab)."""
    try:
        return read_json(run_dir / DATA_FILE, "run data record", fix="remove it, or pass --overwrite")
    except FileNotFoundError:
        return None


def _check_data(run_dir: Path, data: dict[str, Any], resume: bool) -> None:
    """Refuse to continue or report a run that trained on other data than this call's."""
    saved = _saved_data(run_dir)
    if saved is None or same_data(saved, data):
        return
    if resume:
        raise RunExistsError(f"cannot resume {run_dir}: it trained on {describe_data(saved)}, not on "
                             f"{describe_data(data)}. Nothing was changed; give its data.root, or a new run.name")
    raise RunExistsError(f"{run_dir} holds a run trained on {describe_data(saved)}, not on {describe_data(data)}; "
                         "choose another run.name, or pass --overwrite to replace it")


def _check(cfg: RunConfig, run_dir: Path, resume: bool, overwrite: bool, data: dict[str, Any]) -> bool:
    """May this call use ``run_dir``? Returns whether an existing run is continued."""
    cfg_file = run_dir / "config.json"
    if not cfg_file.is_file():
        if find_checkpoint(run_dir) is not None and not overwrite:
            raise RunExistsError(f"{run_dir} holds a checkpoint but no config.json; restore config.json to resume "
                                 "it, or pass --overwrite to start the run again")
        if resume:
            close = difflib.get_close_matches(run_dir.name, _siblings(run_dir), n=1)
            hint = f"did you mean run.name={close[0]}? " if close else ""
            raise RunExistsError(f"nothing to resume: {run_dir} holds no run; {hint}drop --resume to start it")
        foreign = sorted(p.name for p in run_dir.iterdir() if p.name not in (LOCK_FILE, *_SWEEP_FILES)) \
            if run_dir.is_dir() else []
        if foreign and not overwrite:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise RunExistsError(f"{run_dir} is not an mlplab run folder but holds files ({shown}); choose another "
                                 "run.name, or pass --overwrite to train into it (its other files are kept)")
        return False
    epoch = checkpoint_epoch(run_dir)
    results = read_results(run_dir)
    keepsake = results is not None or find_checkpoint(run_dir) is not None
    if not keepsake:  # stopped before its first checkpoint: nothing to keep, the run starts again (new config.json)
        return False
    if not overwrite:
        _check_data(run_dir, data, resume)
    if resume:
        try:
            saved = from_dict(read_json(cfg_file, "run config",
                                        fix="restore it from a copy, or pass --overwrite to start the run again"))
        except ValueError as e:
            raise RunExistsError(f"cannot resume {run_dir}: its config.json no longer fits this version of mlplab "
                                 f"({e}); use --overwrite or a new run.name") from None
        diff = config_diff(saved, cfg)
        if diff:
            lines = "; ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise RunExistsError(f"cannot resume {run_dir}: its config differs ({lines}). Nothing was "
                                 "changed; use the saved config, or a new run.name")
        return True
    if overwrite:
        return False
    if results is not None:
        raise RunExistsError(f"{run_dir} already holds a finished run; pass --resume to use its results, "
                             "--overwrite to train it again, or choose another run.name")
    at = f" (last checkpoint: epoch {epoch})" if epoch is not None else ""
    raise RunExistsError(f"{run_dir} already holds an unfinished run{at}; pass --resume (resume=True) to "
                         "continue it, --overwrite to replace it, or choose another run.name")


def _init(cfg: RunConfig, run_dir: Path, data: dict[str, Any]) -> None:
    """A new run: clear what an earlier run left, then write ``config.json`` (and ``data.json``
    for data that its config does not name: an image folder, a pack)."""
    for name in _RUN_DIRS:
        shutil.rmtree(run_dir / name, ignore_errors=True)
    for name in _RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    atomic_write_json(run_dir / "config.json", to_dict(cfg))
    if data["dataset"] in ROOTED_DATASETS:
        atomic_write_json(run_dir / DATA_FILE, data)


def truncate_metrics(run_dir: Path, epoch: int, step: int | None = None) -> None:
    """Drop records logged after the checkpoint of ``epoch`` (and ``step``: a checkpoint written
    mid-epoch) — a killed run may have logged them — and lines cut short by a kill or a full disk.
    Epoch records are kept up to ``epoch``, per-step records (``"kind": "step"``) up to ``step``."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return
    keep = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the kill
            if not isinstance(rec, dict):
                continue
            if (rec.get("step", 0) <= step if rec.get("kind") == STEP_KIND and step is not None
                    else rec.get("epoch", 0) <= epoch):
                keep.append(line if line.endswith("\n") else line + "\n")
    atomic_write_text(path, "".join(keep))


def _last_logged_epoch(run_dir: Path) -> int:
    try:
        lines = (run_dir / "metrics.jsonl").read_text(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            rec = json.loads(line)
            if rec.get("kind") != STEP_KIND:  # a step record's epoch is the one in progress
                return int(rec["epoch"])
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return 0


def _interrupted(run_dir: Path, signum: int | None, epochs: int | None = None) -> Interrupted:
    """Where a stopped run stood: the epoch it was in (or, past its last of ``epochs``, the final
    test and files) and the checkpoint a resume starts from."""
    epoch = checkpoint_epoch(run_dir)
    now = max(_last_logged_epoch(run_dir), epoch or 0) + 1
    kept = (f"the checkpoint of epoch {epoch} is kept" if epoch is not None
            else "no checkpoint yet, a resume starts it again")
    if epochs and now > epochs:
        return Interrupted(f"interrupted after the last epoch ({epochs}) of {run_dir}, before its results were "
                           f"written ({kept})", signum)
    return Interrupted(f"interrupted at epoch {now} of {run_dir} ({kept})", signum)


@contextlib.contextmanager
def open_run_folder(cfg: RunConfig, dist: DistInfo, resume: bool, overwrite: bool,
                    epochs: int | None = None) -> Iterator[RunFolder]:
    """Lock, check and (for a new run) initialise the run folder; see the module docstring.
    ``epochs``: the run's length, for the message of a run interrupted after its last epoch."""
    assert cfg.run.name is not None, "make_config fills run.name"
    run_dir = Path(cfg.run.out_dir) / cfg.run.name
    data = data_identity(cfg)
    with _lock(run_dir, dist.is_main):
        barrier(dist)  # rank 0 holds the lock before any rank looks
        continuing = _check(cfg, run_dir, resume, overwrite, data)
        barrier(dist)  # every rank has looked before rank 0 writes
        finished = None
        if continuing:
            finished = read_results(run_dir)
            if finished is not None and dist.is_main:
                acc = finished.get("test_acc")
                acc = f"{acc:.4f}" if isinstance(acc, (int, float)) else "not recorded"
                print(f"{run_dir} finished before (test acc {acc}); nothing to do. --overwrite trains it again",
                      flush=True)
        elif dist.is_main:
            _init(cfg, run_dir, data)
        barrier(dist)
        try:
            yield RunFolder(run_dir, continuing, finished, data)
        except KeyboardInterrupt as e:
            if isinstance(e, Interrupted) and e.message:
                raise
            raise _interrupted(run_dir, getattr(e, "signum", None), epochs) from None
