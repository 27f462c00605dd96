"""Host batches on their way to an accelerator: a small ring of preallocated buffers, filled ahead.

A batch gathered in host memory for a GPU (a dataset kept on the host, a pack) used to cost an
allocation and two or three copies: the gather into a fresh tensor (``images[idx]``, advanced
indexing byte by byte: ~20k 64x64 images/s per thread), then ``pin_memory()`` into another. Here
each batch is gathered once, by ``torch.index_select(out=)`` or numpy ``take(out=)`` (row copies),
straight into a buffer that is pinned when the batches go to a CUDA device, so the copy to the
device is asynchronous and needs no staging copy of its own.

The buffers form a ring of ``slots``; reader threads fill up to ``slots - 2`` batches ahead of the
one being used (``read_ahead``), and a slot is filled again only after the copy out of it has
finished: the consumer records a CUDA event after enqueueing the copy (``PinnedRing.copied``) and
the reader waits for it (``PinnedRing.wait``) in its own thread, so the training step never waits
on the host. On the CPU (and the ``meta`` device that stands in for an accelerator in the tests)
the consumer reads a slot before it asks for the next batch, and the ring's size alone keeps the
slot from being refilled while in use.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Callable, Iterable, Iterator, TypeVar

import torch

__all__ = ["PinnedRing", "read_ahead"]

T = TypeVar("T")
J = TypeVar("J")


class PinnedRing:
    """``slots`` sets of host buffers (one per name, e.g. images and labels), allocated at their
    first use with room for ``rows`` rows and reused; pinned when ``device`` is a CUDA device."""

    def __init__(self, slots: int, device: torch.device | str):
        if slots < 2:
            raise ValueError(f"a ring needs at least 2 slots, got {slots}")
        self.slots = slots
        self.device = torch.device(device)
        self.pinned = self.device.type == "cuda"
        self._buffers: list[dict[str, torch.Tensor]] = [{} for _ in range(slots)]
        self._events: list = [None] * slots

    def buffer(self, slot: int, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Slot ``slot``'s buffer ``name`` viewed as ``shape`` (its rows may be fewer than the room
        made at first use, e.g. a last, shorter batch)."""
        buf = self._buffers[slot].get(name)
        if buf is None or buf.dtype != dtype or buf.shape[1:] != shape[1:] or len(buf) < shape[0]:
            buf = torch.empty(shape, dtype=dtype, pin_memory=self.pinned)
            self._buffers[slot][name] = buf
        return buf[:shape[0]]

    def wait(self, slot: int) -> None:
        """Block (the calling reader thread) until the last copy out of ``slot`` has finished."""
        event = self._events[slot]
        if event is not None:
            event.synchronize()

    def copied(self, slot: int) -> None:
        """Call after enqueueing the copies out of ``slot`` on the current stream."""
        if self.pinned:
            event = self._events[slot] or torch.cuda.Event()
            event.record()
            self._events[slot] = event


def read_ahead(jobs: Iterable[J], read: Callable[[int, J], T], ring: PinnedRing,
               threads: int) -> Iterator[tuple[int, T]]:
    """``(slot, read(slot, job))`` for each job in order, computed by ``threads`` reader threads up
    to ``ring.slots - 2`` jobs ahead; job ``n`` uses slot ``n % ring.slots``. ``read`` must start
    with ``ring.wait(slot)`` when it fills a slot that a device copy may still be reading."""
    ahead = ring.slots - 2
    jobs = iter(jobs)
    with ThreadPoolExecutor(max(1, threads)) as pool:
        n = 0
        pending: deque = deque()
        for job in islice(jobs, max(1, ahead)):
            pending.append((n % ring.slots, pool.submit(read, n % ring.slots, job)))
            n += 1
        while pending:
            slot, fut = pending.popleft()
            result = fut.result()
            job = next(jobs, None)
            if job is not None:
                pending.append((n % ring.slots, pool.submit(read, n % ring.slots, job)))
                n += 1
            yield slot, result
