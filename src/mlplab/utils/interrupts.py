"""Ctrl-C and SIGTERM as an exception that is never lost.

Python's own Ctrl-C handler raises ``KeyboardInterrupt`` wherever the main thread happens to be.
When that is inside a weakref callback or a ``__del__`` (e.g. a ``WeakSet`` entry removed while
matplotlib draws the run's curves), Python prints "Exception ignored in ..." and carries on: the
signal is gone and the run trains to its end. While :func:`stop_signals`
is entered, each of its signals raises :class:`~mlplab.errors.Interrupted` where the main thread
is *and* is remembered; :func:`raise_if_interrupted`, asked after every training step and between
a sweep's runs, raises it again, so a swallowed signal still stops the work within one step.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

from ..errors import Interrupted

__all__ = ["library_stop_signals", "raise_if_interrupted", "stop_signals"]

_received: list[int] = []  # the signals seen while stop_signals is entered, in order of arrival
_depth = 0  # how many stop_signals are entered (a sweep inside a command enters a second one)


def _handler(signum: int, frame: object) -> None:
    _received.append(signum)
    raise Interrupted("", signum)


def _is_default(handler: object) -> bool:
    return handler is signal.default_int_handler or handler is signal.SIG_DFL


@contextlib.contextmanager
def stop_signals(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM), only_default: bool = False,
                 ) -> Iterator[None]:
    """While entered, each of ``signals`` raises :class:`~mlplab.errors.Interrupted` (its
    ``signum`` set) and is remembered for :func:`raise_if_interrupted`. A signal the process
    inherited as ignored stays ignored (a suite or campaign started with ``&`` from a script
    ignores Ctrl-C, as the shell meant). ``only_default``: take a signal only from Python's own
    handler, leaving another one in place (a notebook's, an application's, an outer entry's). Off
    the main thread nothing is installed (Python's rule)."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in signals}
    for s, h in old.items():
        if h is not signal.SIG_IGN and (_is_default(h) or not only_default):
            signal.signal(s, _handler)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        if _depth == 0:
            _received.clear()


def library_stop_signals() -> contextlib.AbstractContextManager[None]:
    """What a library call that trains (``train``, ``train_lockstep``, a sweep) enters: Ctrl-C
    taken from Python's own handler only, so that a caller's handler (a notebook's, an
    application's, a command's) stays in place and SIGTERM keeps the caller's meaning."""
    return stop_signals((signal.SIGINT,), only_default=True)


def raise_if_interrupted() -> None:
    """Raise :class:`~mlplab.errors.Interrupted` for the first stop signal received since the
    outermost :func:`stop_signals` was entered, if any (a host-side check: no device sync)."""
    if _received:
        raise Interrupted("", _received[0])
