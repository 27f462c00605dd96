"""Progress a person can read: tqdm bars with rate and time left on a terminal, plain lines elsewhere.

* :class:`Progress` — a training run: one bar per epoch (steps/s, the epoch's and the run's time
  left, the running loss) and one line per epoch; off a terminal only the lines. Evaluation
  batches get a bar of their own (:meth:`Progress.iterate`).
* :class:`RunTally` — an experiment's runs: ``[k/N]`` over all its stages and the time left, from
  the cost model's estimate of each run (``mlplab.experiments.cost``) rescaled by how long the
  finished runs really took.
* :func:`byte_bar` — a download.

A bar never reads the device: the training loop decides when it pays for the one host sync that
the running loss needs (:meth:`Progress.due`, at most every ``interval`` seconds).
"""
from __future__ import annotations

import shutil
import sys
import time
from typing import Callable, Iterable, Mapping, TextIO, TypeVar

from tqdm import tqdm

__all__ = ["Progress", "RunTally", "byte_bar", "format_duration"]

T = TypeVar("T")


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``2.5 h``, ``3 d``: a duration as a person says it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


def _is_tty(stream: TextIO) -> bool:
    return bool(getattr(stream, "isatty", None) and stream.isatty())


def _columns() -> int:
    """The terminal's width ($COLUMNS, else 80 where the terminal reports none)."""
    return shutil.get_terminal_size().columns or 80


class Progress:
    """A training run's progress. ``mode``: "bar" (tqdm on ``stream``), "lines" (one line per
    epoch), "none", or "auto" (a bar on a terminal, else lines)."""

    def __init__(self, mode: str, stream: TextIO | None = None, interval: float = 0.5):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if _is_tty(self.stream) else "lines"
        self.mode = mode
        self.interval = interval
        self._last = 0.0
        self._bar: tqdm | None = None
        self._epoch: int | None = None
        self._first = 0  # the step at which the epoch's bar opened

    def due(self) -> bool:
        """Whether :meth:`update` should be called now (a bar, and ``interval`` seconds passed)."""
        return self.mode == "bar" and time.perf_counter() - self._last >= self.interval

    def update(self, epoch: int, epochs: int, done: int, total: int, text: str) -> None:
        """Step ``done`` of ``total`` in epoch ``epoch`` of ``epochs`` (1-based); ``text``: the
        running metrics. The bar shows steps/s, the epoch's time left and the run's."""
        self._last = time.perf_counter()
        if self._bar is None or self._epoch != epoch:  # the steps before the bar opened are not timed
            self._close()
            self._bar = tqdm(total=total, initial=done, desc=f"epoch {epoch}/{epochs}", unit="step", file=self.stream,
                             leave=False, ncols=_columns(), mininterval=0, smoothing=0)
            self._epoch, self._first = epoch, done
        bar = self._bar
        bar.update(done - bar.n)
        timed = done - self._first
        rate = timed / max(time.perf_counter() - bar.start_t, 1e-9) if timed > 0 else None
        left = ((total - done) + (epochs - epoch) * total) / rate if rate else None
        bar.set_postfix_str(text + (f", run {format_duration(left)} left" if left is not None else ""), refresh=True)

    def iterate(self, iterable: Iterable[T], desc: str) -> Iterable[T]:
        """``iterable`` with a bar of its own (evaluation batches) in bar mode; itself otherwise."""
        if self.mode != "bar":
            return iterable
        self._close()
        return tqdm(iterable, desc=desc, unit="batch", file=self.stream, leave=False, ncols=_columns())

    def line(self, text: str) -> None:
        """One line of the run's log (closes an open bar first)."""
        if self.mode == "none":
            return
        self._close()
        self.stream.write(text + "\n")
        self.stream.flush()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar, self._epoch = None, None


class RunTally:
    """``[k/N]`` over an experiment's runs and the time left.

    ``estimates``: seconds per run key (``"sweep/run"``) from the cost model; ``jobs`` runs go at
    once. The time left is the estimate of the runs not yet done, divided by ``jobs`` until a run
    has finished, then scaled by (wall time so far) / (estimate of the runs finished)."""

    def __init__(self, estimates: Mapping[str, float] | None = None, total: int | None = None, jobs: int = 1,
                 on_finish: Callable[[object, str], None] | None = None):
        self.estimates = dict(estimates or {})
        self.on_finish = on_finish  # called with (where, status) as each run ends
        self.total = total if total is not None else len(self.estimates)
        self.jobs = max(1, jobs)
        self.done = 0
        self._keys: dict[object, str] = {}
        self._finished: set[str] = set()
        self._done_estimate = 0.0
        self._t0: float | None = None

    def track(self, where: object, key: str) -> None:
        """Name the run at ``where`` (its folder) by its key."""
        self._keys[where] = key

    def skip(self, where: object) -> None:
        """A run finished before this call (it counts as done and takes no time)."""
        self._finished.add(self._keys.get(where, str(where)))
        self.done += 1

    def starting(self, where: object, name: str) -> str:
        """The line for a run that starts now."""
        if self._t0 is None:
            self._t0 = time.perf_counter()
        return f"[{self.done + 1}/{self.total}] {name}{self._left()}"

    def finish(self, where: object, status: str, name: str) -> str:
        """Count a run as ended with ``status``; the line that says so."""
        if self._t0 is None:
            self._t0 = time.perf_counter()
        key = self._keys.get(where, str(where))
        if key not in self._finished:
            self._finished.add(key)
            self._done_estimate += self.estimates.get(key, 0.0)
        self.done += 1
        if self.on_finish is not None:
            self.on_finish(where, status)
        return f"[{self.done}/{self.total}] {status:7s} {name}{self._left()}"

    def seconds_left(self) -> float | None:
        """The estimated wall seconds until every run is done (None without estimates)."""
        left = sum(s for k, s in self.estimates.items() if k not in self._finished)
        if not self.estimates:
            return None
        if self._done_estimate > 0 and self._t0 is not None:
            return left * (time.perf_counter() - self._t0) / self._done_estimate
        return left / self.jobs

    def _left(self) -> str:
        s = self.seconds_left()
        return "" if s is None or self.done >= self.total else f" (~{format_duration(s)} left)"


def byte_bar(total: int | None, desc: str, stream: TextIO | None = None) -> tqdm:
    """A download's bar (bytes, rate, time left); silent off a terminal."""
    stream = stream or sys.stderr
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=stream, leave=False,
                disable=not _is_tty(stream), ncols=_columns())
