"""The kinds of expected failure, and how the ``mlplab`` command reports them.

Two families, told apart by the exit status of the CLI (``mlplab.cli``):

* **bad input** (exit 2): the user asked for something that cannot be done — an unknown key, a
  wrong type, a patch size that does not divide the image. :class:`BadInput` is a ``ValueError``
  (and :class:`BadType` also a ``TypeError``), so library callers can catch the usual classes.
  Plain ``ValueError`` and ``FileNotFoundError`` count as bad input too: that is how the library
  has always signalled it.
* **runtime failure** (exit 1): the input was fine but the run could not finish — the loss
  diverged, another process holds the run folder, a download's checksum differs, the disk is
  full, memory ran out. :class:`RunFailure` is a ``RuntimeError``.

* **interrupt** (exit 130 for Ctrl-C, 143 for SIGTERM; 138/140 for SIGUSR1/SIGUSR2, a cluster's
  stop signal, after a checkpoint: ``mlplab.train.preemption``): :class:`Interrupted` is a
  ``KeyboardInterrupt`` that knows how far the run got and the command that continues it.

Anything else (a ``TypeError`` from inside torch, a ``KeyError``, an ``AssertionError``) is a bug
and the CLI shows its traceback.
"""
from __future__ import annotations

import difflib
import os
from typing import Iterable

__all__ = ["BadInput", "BadType", "RunFailure", "FolderInUse", "UnreadableFile", "Interrupted", "did_you_mean"]


class BadInput(ValueError):
    """The request cannot be done as given; the message says what to change."""


class BadType(BadInput, TypeError):
    """A config value has the wrong type; the message names the key and the expected type."""


class RunFailure(RuntimeError):
    """The input was valid but the run could not finish; the message says what happened."""


class FolderInUse(RunFailure):
    """Another process holds the folder's lock (``mlplab.utils.io.folder_lock``)."""


class UnreadableFile(RunFailure):
    """A file the tool wrote (results, spec, run config, checkpoint) is cut short or corrupt."""

    def __init__(self, path: str | os.PathLike, reason: str, what: str = "file",
                 fix: str = "remove it, or restore it from a copy"):
        self.path, self.reason = path, reason
        super().__init__(f"{what} {path} {reason}; it was cut short or damaged: {fix}")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a run; ``message`` says where it stopped and what was kept."""

    def __init__(self, message: str, signum: int | None = None):
        super().__init__(message)
        self.message, self.signum = message, signum


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` for the closest of ``choices`` (``difflib``), else ``""``."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""
