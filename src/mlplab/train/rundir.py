"""The run folder ``<run.out_dir>/<run.name>/``: one writer at a time, new or resumed, never half.

:func:`open_run_folder` is called after everything that can be checked without writing has been
checked (config, dataset, model, durations), so a refused or invalid run leaves nothing behind.
It then

1. takes the folder's lock: ``fcntl.flock`` on ``<run>/.lock``, held until the run ends (the
   kernel drops it when the process dies, so a killed run never leaves a stale lock). The holder
   writes its PID into the file; a second process is refused with a message naming that PID.
2. decides whether the call may use the folder: a new run, a resumed run with the same config,
   or a refusal (a finished or unfinished run is never overwritten without ``overwrite``).
3. for a new run, clears what an overwritten run left and writes ``config.json``; for a resumed
   one, drops ``metrics.jsonl`` records of epochs after the checkpoint.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import BadInput, RunFailure
from ..utils.io import atomic_write_json, atomic_write_text
from .config import RunConfig, config_diff, from_dict, to_dict
from .distributed import DistInfo, barrier

__all__ = ["RunFolder", "open_run_folder", "RunExistsError", "RunLockedError", "LOCK_FILE",
           "truncate_metrics"]

LOCK_FILE = ".lock"
# files a new run clears when it replaces an old one (``.lock`` stays: it is held)
_RUN_FILES = ("metrics.jsonl", "results.json", "error.txt")
_RUN_DIRS = ("checkpoint", "checkpoint.prev", "checkpoint.new", "tb", "wandb")


class RunExistsError(BadInput):
    """The run folder holds a run that this call must not overwrite."""


class RunLockedError(RunFailure):
    """Another process is writing to the run folder."""


@dataclass
class RunFolder:
    path: Path
    continuing: bool  # an existing run is resumed
    finished: dict[str, Any] | None  # its results when it had already finished


@contextlib.contextmanager
def _lock(run_dir: Path, enabled: bool) -> Iterator[None]:
    """Hold ``<run_dir>/.lock`` exclusively for the duration (rank 0 only under torchrun)."""
    if not enabled:
        yield
        return
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            raise RunLockedError(f"{run_dir} is in use by process {holder}; wait for it to finish "
                                 f"(or stop it), then --resume") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        except BaseException:
            if created and not (run_dir / "config.json").exists():
                shutil.rmtree(run_dir, ignore_errors=True)  # refused before writing: leave nothing
            raise
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


def _check(cfg: RunConfig, run_dir: Path, resume: bool, overwrite: bool) -> bool:
    """May this call use ``run_dir``? Returns whether an existing run is continued."""
    cfg_file = run_dir / "config.json"
    exists = cfg_file.is_file()
    if exists and resume:
        with open(cfg_file) as f:
            saved = from_dict(json.load(f))
        diff = config_diff(saved, cfg)
        if diff:
            lines = "; ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise RunExistsError(f"cannot resume {run_dir}: its config differs ({lines}). Nothing was "
                                 "changed; use the saved config, or a new run.name")
        return True
    if exists and not overwrite:
        state = "a finished run" if (run_dir / "results.json").is_file() else "an unfinished run"
        raise RunExistsError(f"{run_dir} already holds {state}; pass --resume (resume=True) to continue it, "
                             "--overwrite to replace it, or choose another run.name")
    return False


def _init(cfg: RunConfig, run_dir: Path) -> None:
    """A new run: clear what an overwritten run left, then write ``config.json``."""
    for name in _RUN_DIRS:
        shutil.rmtree(run_dir / name, ignore_errors=True)
    for name in _RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    atomic_write_json(run_dir / "config.json", to_dict(cfg))


def truncate_metrics(run_dir: Path, epoch: int) -> None:
    """Drop records of epochs after the checkpoint (a killed run may have logged them)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return
    keep = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the kill
            if rec.get("epoch", 0) <= epoch:
                keep.append(line if line.endswith("\n") else line + "\n")
    atomic_write_text(path, "".join(keep))


@contextlib.contextmanager
def open_run_folder(cfg: RunConfig, dist: DistInfo, resume: bool, overwrite: bool) -> Iterator[RunFolder]:
    """Lock, check and (for a new run) initialise the run folder; see the module docstring."""
    assert cfg.run.name is not None, "make_config fills run.name"
    run_dir = Path(cfg.run.out_dir) / cfg.run.name
    with _lock(run_dir, dist.is_main):
        barrier(dist)  # rank 0 holds the lock before any rank looks
        continuing = _check(cfg, run_dir, resume, overwrite)
        barrier(dist)  # every rank has looked before rank 0 writes
        finished = None
        if continuing and (run_dir / "results.json").is_file():
            with open(run_dir / "results.json") as f:
                finished = json.load(f)
        elif not continuing and dist.is_main:
            _init(cfg, run_dir)
        barrier(dist)
        yield RunFolder(run_dir, continuing, finished)
