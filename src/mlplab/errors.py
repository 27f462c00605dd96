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

Anything else (a ``TypeError`` from inside torch, a ``KeyError``, an ``AssertionError``) is a bug
and the CLI shows its traceback.
"""
from __future__ import annotations

__all__ = ["BadInput", "BadType", "RunFailure"]


class BadInput(ValueError):
    """The request cannot be done as given; the message says what to change."""


class BadType(BadInput, TypeError):
    """A config value has the wrong type; the message names the key and the expected type."""


class RunFailure(RuntimeError):
    """The input was valid but the run could not finish; the message says what happened."""
