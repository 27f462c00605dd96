"""The ring of host buffers batches are gathered into (``mlplab.data.staging``) and the loaders'
micro-batches: buffers reused, pinned only for CUDA, a slot refilled only after the copy out of it
finished (CUDA events, faked here), reads in order and never more than ``slots - 2`` ahead."""
from __future__ import annotations

import threading
import time

import pytest
import torch
from loader_helpers import IMAGES, LABELS, MEAN, STD, K, record_pools

from mlplab.data import AugmentConfig, DeviceLoader, MicroBatches, build_augment, staging
from mlplab.data.staging import PinnedRing, read_ahead
from mlplab.utils.seeds import derive_generator


def test_buffers_are_made_once_per_slot_and_viewed_at_the_batch_size():
    ring = PinnedRing(3, "cpu")
    a = ring.buffer(0, "x", (4, 3, 2, 2), torch.uint8)
    assert a.shape == (4, 3, 2, 2) and not ring.pinned
    assert ring.buffer(0, "x", (4, 3, 2, 2), torch.uint8).data_ptr() == a.data_ptr()  # reused
    short = ring.buffer(0, "x", (1, 3, 2, 2), torch.uint8)  # a last, shorter batch: a view of the same room
    assert short.shape == (1, 3, 2, 2) and short.data_ptr() == a.data_ptr()
    assert ring.buffer(1, "x", (4, 3, 2, 2), torch.uint8).data_ptr() != a.data_ptr()  # another slot
    assert ring.buffer(0, "y", (4,), torch.long).dtype == torch.long  # another name
    assert ring.buffer(0, "x", (8, 3, 2, 2), torch.uint8).shape == (8, 3, 2, 2)  # more rows: made again
    with pytest.raises(ValueError, match="at least 2 slots"):
        PinnedRing(1, "cpu")


def test_a_buffer_asked_with_another_dtype_or_row_shape_is_made_anew():
    ring = PinnedRing(2, "cpu")
    a = ring.buffer(0, "x", (4, 3), torch.uint8)
    b = ring.buffer(0, "x", (4, 3), torch.int64)  # the same shape, another dtype
    assert b.dtype == torch.int64 and b.shape == (4, 3) and b.data_ptr() != a.data_ptr()
    c = ring.buffer(0, "x", (4, 5), torch.int64)  # the same dtype, other rows
    assert c.dtype == torch.int64 and c.shape == (4, 5) and c.data_ptr() != b.data_ptr()


@pytest.mark.parametrize("threads,workers", [(0, 1), (1, 1), (3, 3)])
def test_read_ahead_runs_the_threads_asked_for(monkeypatch, threads, workers):
    pools = record_pools(monkeypatch)
    assert [r for _, r in read_ahead(range(3), lambda slot, job: job, PinnedRing(3, "cpu"), threads)] == [0, 1, 2]
    assert pools == [workers]


@pytest.mark.parametrize("device,pinned", [("cuda", True), ("cuda:1", True), ("cpu", False), ("meta", False)])
def test_buffers_are_pinned_for_a_cuda_device_only(monkeypatch, device, pinned):
    asked = []
    monkeypatch.setattr(torch, "empty", lambda shape, dtype, pin_memory: asked.append(pin_memory) or
                        torch.zeros(shape, dtype=dtype))
    PinnedRing(2, device).buffer(0, "x", (2, 3), torch.uint8)
    assert asked == [pinned]


def test_a_slot_waits_for_the_copy_recorded_after_its_last_use(monkeypatch):
    """CUDA: the consumer records an event after enqueueing the copy out of a slot; the reader
    that fills the slot again waits for that event (in its own thread), and for nothing else."""
    log = []

    class Event:
        def record(self):
            log.append(("record", id(self)))

        def synchronize(self):
            log.append(("wait", id(self)))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    ring = PinnedRing(2, "cpu")
    ring.pinned = True  # as for a CUDA device (no GPU here)
    ring.wait(0)
    assert log == []  # never copied out of: nothing to wait for
    ring.copied(0)
    ring.copied(0)  # the slot keeps its event, recorded again
    ring.wait(0)
    ring.wait(1)
    first = log[0][1]
    assert log == [("record", first), ("record", first), ("wait", first)]
    cpu = PinnedRing(2, "cpu")
    cpu.copied(0)
    cpu.wait(0)
    assert len(log) == 3  # on the CPU the copy is done when it returns


@pytest.mark.parametrize("slots,threads", [(2, 1), (3, 2), (4, 3)])
def test_reads_come_back_in_order_and_never_overwrite_a_slot_in_use(slots, threads):
    ring = PinnedRing(slots, "cpu")
    lock, state = threading.Lock(), {"started": 0, "most_ahead": 0}
    used = [0]

    def read(slot, job):
        with lock:
            state["started"] += 1
            state["most_ahead"] = max(state["most_ahead"], state["started"] - used[0])
        buf = ring.buffer(slot, "x", (3,), torch.long)
        buf.fill_(job)
        return buf

    got = []
    for n, (slot, buf) in enumerate(read_ahead(range(10), read, ring, threads)):
        assert slot == n % slots
        time.sleep(0.002)  # let the readers run ahead while this slot is in use
        assert buf.tolist() == [n] * 3  # not refilled under the consumer
        got.append(n)
        used[0] += 1
    assert got == list(range(10))
    assert state["most_ahead"] <= max(1, slots - 2) + 1  # the one in use and at most slots - 2 ahead


def test_a_reader_error_reaches_the_consumer():
    def read(slot, job):
        if job == 2:
            raise OSError("shard gone")
        return job

    with pytest.raises(OSError, match="shard gone"):
        list(read_ahead(range(5), read, PinnedRing(3, "cpu"), 2))


AUGMENTED = build_augment(AugmentConfig(crop_padding=1, hflip=True, mixup=0.5, label_smoothing=0.1),
                          num_classes=K, mean=MEAN, std=STD)


@pytest.mark.parametrize("augment", [None, AUGMENTED], ids=["plain", "augmented"])
def test_micro_batches_are_the_batch_split_and_finished_one_part_at_a_time(augment):
    """k = 2: each batch's parts are the batch's halves, part j of batch i augmented from the stream
    (seed, "augment", epoch, i, j); without random augmentation bit-identical to k = 1's batches."""
    whole = list(DeviceLoader(IMAGES, LABELS, 4, shuffle=False, drop_last=True, augment=augment, seed=3,
                              mean=MEAN, std=STD))
    split = DeviceLoader(IMAGES, LABELS, 4, shuffle=False, drop_last=True, augment=augment, seed=3, mean=MEAN,
                         std=STD, micro_batches=2)
    batches = list(split)
    assert len(batches) == len(whole) == 2 and all(y is None and isinstance(mb, MicroBatches) for mb, y in batches)
    for i, (mb, _) in enumerate(batches):
        assert len(mb) == 2 and mb.device == torch.device("cpu")
        parts = list(mb)
        for j, (xj, yj) in enumerate(parts):
            rows = slice(4 * i + 2 * j, 4 * i + 2 * j + 2)
            if augment is None:
                assert torch.equal(xj, whole[i][0][2 * j:2 * j + 2]) and torch.equal(yj, whole[i][1][2 * j:2 * j + 2])
            else:
                want = augment(IMAGES[rows], LABELS[rows], derive_generator(3, "augment", 0, i, j), MEAN, STD)
                assert torch.equal(xj, want[0]) and torch.equal(yj, want[1])
        assert torch.equal(mb.targets, torch.cat([yj for _, yj in parts]))
    with pytest.raises(ValueError, match="micro_batches must divide batch_size 4, got 3"):
        DeviceLoader(IMAGES, LABELS, 4, micro_batches=3)


def test_the_staging_module_is_what_the_loaders_use():
    from mlplab.data import loader

    assert loader.PinnedRing is staging.PinnedRing and loader.read_ahead is staging.read_ahead
