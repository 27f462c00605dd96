"""The readers that feed a model its batches from host memory (``mlplab.data.loader``'s
``packed_batches`` and ``staged_batches``, ``PackedImages.take_ascending``) and the batches a
``DeviceLoader`` or ``PackedLoader`` hands out, each against an expectation written out here: the rows a seed and
epoch must give, the bytes of each row of a pack written by hand, every batch's values after the
crossing to an accelerator (``meta`` stands in for one: its copies are recorded and kept on the
host so that their values can be compared)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from loader_helpers import IMAGES, LABELS, MEAN, STD, InMemory, N, record_pools, write_pack

from mlplab.data import DeviceLoader, MicroBatches, PackedLoader, StreamingLoader, staging
from mlplab.data import loader as loader_mod
from mlplab.data.loader import packed_batches, staged_batches
from mlplab.data.packed import Pack

META = torch.device("meta")
# the batches asked for: any order, repeats, rows on both sides of each shard boundary (shards of 3:
# rows 0-2, 3-5, 6-8, 9-10), a last shorter batch
ROWS = [[7, 2, 9], [0, 10, 3], [3, 3, 5], [8, 6, 1], [4]]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    return Pack(write_pack(tmp_path_factory.mktemp("pack"), shard=3)).split("train")


def batches_of(rows):
    return (torch.tensor(r, dtype=torch.long) for r in rows)


class Crossings:
    """``Tensor.to(meta, ...)`` recorded and answered with a host copy (what arrives on the device:
    the values of the ring's slot at the time of the copy)."""

    def __init__(self, monkeypatch):
        self.log, self.sources, to = [], [], torch.Tensor.to

        def crossing(t, *args, **kwargs):
            if args and isinstance(args[0], (str, torch.device)) and torch.device(args[0]) == META:
                self.log.append((t.dtype, tuple(t.shape), kwargs))
                self.sources.append(t.data_ptr())
                return t.clone()
            return to(t, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, "to", crossing)


class RecordingRing(staging.PinnedRing):
    """The reader's ring, with each slot whose copy-out the consumer reported."""

    made: list = []

    def __init__(self, slots, device):
        super().__init__(slots, device)
        self.reported: list[int] = []
        self.handed: list[tuple] = []  # (slot, shape, dtype, data_ptr) of each buffer handed to a reader
        RecordingRing.made.append(self)

    def buffer(self, slot, name, shape, dtype):
        buf = super().buffer(slot, name, shape, dtype)
        self.handed.append((slot, tuple(shape), dtype, buf.data_ptr()))
        return buf

    def copied(self, slot):
        self.reported.append(slot)
        super().copied(slot)


@pytest.fixture
def ring(monkeypatch):
    RecordingRing.made = []
    monkeypatch.setattr(loader_mod, "PinnedRing", RecordingRing)
    return RecordingRing.made


# ----------------------------------------------------------------------------- PackedImages.take_ascending

def test_take_ascending_reads_the_rows_sorted_and_says_where_each_came_from(split):
    rows = np.array([7, 2, 9, 2, 0, 10, 3, 5, 6])
    out = np.full((len(rows), 3, 4, 4), 77, np.uint8)
    order = split.take_ascending(rows, out)
    # the rows sorted, equal rows in the order asked: 0 (at 4), 2 (at 1), 2 (at 3), 3 (at 6), 5 (at 7), ...
    assert order.tolist() == [4, 1, 3, 6, 7, 8, 0, 2, 5]
    assert out.tolist() == IMAGES.numpy()[[0, 2, 2, 3, 5, 6, 7, 9, 10]].tolist()  # the pack's bytes, each row
    assert out.tolist() == IMAGES.numpy()[rows[order]].tolist()  # out[k] holds row rows[order[k]]


def test_take_ascending_keeps_equal_rows_in_the_order_asked(split):
    """Many repeats (more rows than numpy's small-array sort handles by insertion): the order is
    the stable one, a hand-written sort by (row, position), on every machine."""
    rows = np.random.default_rng(4).integers(0, 11, 64)
    out = np.zeros((64, 3, 4, 4), np.uint8)
    order = split.take_ascending(rows, out)
    assert order.tolist() == sorted(range(64), key=lambda k: (rows[k], k))
    assert out.tolist() == IMAGES.numpy()[sorted(rows)].tolist()


@pytest.mark.parametrize("rows", [[0], [10], [2, 3], [8, 9], [10, 0], [5, 4, 3, 2, 1, 0], list(range(11))])
def test_take_ascending_at_every_shard_boundary_and_the_ends(split, rows):
    out = np.zeros((len(rows), 3, 4, 4), np.uint8)
    order = split.take_ascending(np.array(rows), out)
    assert sorted(order.tolist()) == list(range(len(rows)))
    assert [rows[k] for k in order] == sorted(rows)
    assert out.tolist() == IMAGES.numpy()[sorted(rows)].tolist()


def test_take_ascending_of_no_rows_touches_nothing_and_bad_rows_are_refused(split):
    out = np.full((2, 3, 4, 4), 5, np.uint8)
    order = split.take_ascending(np.zeros(0, np.int64), out[:0])
    assert order.shape == (0,) and (out == 5).all()
    with pytest.raises(IndexError, match=r"^rows 3\.\.11 out of range for 11 images$"):
        split.take_ascending(np.array([11, 3]), out)
    with pytest.raises(IndexError, match=r"^rows -1\.\.4 out of range for 11 images$"):
        split.take_ascending(np.array([4, -1]), out)
    assert (out == 5).all()  # refused before anything was read


def test_take_ascending_copies_straight_into_out_without_a_temporary(tmp_path):
    """The images go from the shard's pages into ``out`` with no batch-sized buffer between them
    (numpy's ``take(out=)`` buffers the whole output unless told the rows are in range)."""
    images = torch.randint(0, 256, (40, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    big = Pack(write_pack(tmp_path / "big", images=images, labels=torch.arange(40) % 3, shard=40)).split("train")
    rows = np.random.default_rng(5).integers(0, 40, 32)
    out = np.empty((32, 3, 32, 32), np.uint8)
    big.take_ascending(rows, out)  # numpy's and the reader's first-call setup
    tracemalloc.start()
    try:
        order = big.take_ascending(rows, out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.tolist() == images.numpy()[rows[order]].tolist()
    assert peak < out.nbytes / 4, (peak, out.nbytes)  # the sort's few int64s, not a copy of the batch


# ----------------------------------------------------------------------------- packed_batches

def test_packed_batches_on_the_host_are_the_asked_rows_in_the_asked_order(split, ring):
    got = []
    for x, y in packed_batches(split, LABELS, batches_of(ROWS), torch.device("cpu"), threads=2, prefetch=1):
        assert x.dtype == torch.uint8 and y.dtype == torch.int64 and x.device.type == y.device.type == "cpu"
        got.append((x.clone(), y))  # the images are the ring's (valid for prefetch + 1 more batches)
    assert len(got) == len(ROWS) and [r.slots for r in ring] == [3]
    for (x, y), rows in zip(got, ROWS):
        assert x.tolist() == IMAGES.numpy()[rows].tolist()
        assert y.tolist() == [r % 3 for r in rows]  # the labels are copies: still right after the ring came round
    assert ring[0].reported == []  # on the host nothing crosses


def test_packed_batches_cross_in_read_order_and_are_gathered_back_on_the_device(split, ring, monkeypatch):
    crossed = Crossings(monkeypatch)
    got = list(packed_batches(split, LABELS, batches_of(ROWS), META, threads=2, prefetch=2))
    monkeypatch.undo()
    for (x, y), rows in zip(got, ROWS):
        assert x.tolist() == IMAGES.numpy()[rows].tolist() and y.tolist() == [r % 3 for r in rows]
    assert len(got) == len(ROWS)
    # per batch: its labels (a copy), its images in ascending row order and the order that puts them back
    want = []
    for rows in ROWS:
        n = len(rows)
        want += [(torch.int64, (n,), {"non_blocking": True, "copy": True}),
                 (torch.uint8, (n, 3, 4, 4), {"non_blocking": True}), (torch.int64, (n,), {"non_blocking": True})]
    assert crossed.log == want
    assert [r.slots for r in ring] == [4] and ring[0].reported == [0, 1, 2, 3, 0]  # each slot once it crossed
    # everything crosses from the ring's buffers (pinned on CUDA: the copies do not wait for the host)
    assert set(crossed.sources) <= {ptr for *_, ptr in ring[0].handed}


def test_packed_batches_defaults(split, ring, monkeypatch):
    pools = record_pools(monkeypatch)
    got = [y.tolist() for _, y in packed_batches(split, LABELS, batches_of(ROWS[:2]), torch.device("cpu"))]
    assert got == [[1, 2, 0], [0, 1, 0]] and [r.slots for r in ring] == [6] and pools == [2]
    got = [y.tolist() for _, y in staged_batches(IMAGES, LABELS, batches_of(ROWS[:2]), torch.device("cpu"))]
    assert got == [[1, 2, 0], [0, 1, 0]] and [r.slots for r in ring] == [6, 4] and pools == [2, 2]


# ----------------------------------------------------------------------------- staged_batches

def test_staged_batches_on_the_host_are_the_asked_rows(ring):
    got = [(x.clone(), y.clone()) for x, y in staged_batches(IMAGES, LABELS, batches_of(ROWS), torch.device("cpu"),
                                                             threads=1, prefetch=1)]
    assert len(got) == len(ROWS) and [r.slots for r in ring] == [3]
    for (x, y), rows in zip(got, ROWS):
        assert x.dtype == torch.uint8 and x.tolist() == IMAGES.numpy()[rows].tolist()
        assert y.dtype == torch.int64 and y.tolist() == [r % 3 for r in rows]


def test_staged_batches_gather_straight_into_the_rings_buffers(ring):
    """One copy per batch on the host: ``index_select(out=)`` into the slot's (pinned, on CUDA)
    buffers, which on the CPU are the batch itself."""
    got = [(x.data_ptr(), y.data_ptr()) for x, y in staged_batches(IMAGES, LABELS, batches_of(ROWS[:4]),
                                                                    torch.device("cpu"), threads=1, prefetch=1)]
    handed = ring[0].handed
    assert [(slot, shape, dtype) for slot, shape, dtype, _ in handed] == [
        (slot, shape, dtype) for slot in (0, 1, 2, 0) for shape, dtype in (((3, 3, 4, 4), torch.uint8),
                                                                           ((3,), torch.int64))]
    assert got == [(handed[2 * k][3], handed[2 * k + 1][3]) for k in range(4)]


def test_staged_batches_cross_each_batch_once_and_free_its_slot(ring, monkeypatch):
    crossed = Crossings(monkeypatch)
    got = list(staged_batches(IMAGES, LABELS, batches_of(ROWS), META, threads=2, prefetch=1))
    monkeypatch.undo()
    for (x, y), rows in zip(got, ROWS):
        assert x.tolist() == IMAGES.numpy()[rows].tolist() and y.tolist() == [r % 3 for r in rows]
    assert crossed.log == [c for rows in ROWS for c in ((torch.uint8, (len(rows), 3, 4, 4), {"non_blocking": True}),
                                                         (torch.int64, (len(rows),), {"non_blocking": True}))]
    assert len(got) == len(ROWS) and ring[0].reported == [0, 1, 2, 0, 1]
    assert set(crossed.sources) <= {ptr for *_, ptr in ring[0].handed}  # from the (pinned) ring


# ----------------------------------------------------------------------------- the loaders' batches

# randperm(11) from derive_generator(5, "perm", e) (tests/data/test_data_loader_resume.py's contract)
ORDER_SEED5 = {0: [7, 10, 4, 1, 5, 3, 6, 8, 0, 9, 2], 1: [4, 6, 9, 1, 10, 5, 7, 8, 0, 3, 2]}
LOADERS = [("device", "cpu"), ("device", "meta"), ("packed", "cpu"), ("packed", "meta")]


def loader(kind, device, split, labels=LABELS, batch_size=4, **kw):
    """A host dataset's loader for ``device``: on the CPU as it is, staged for ``meta``."""
    if kind == "device":
        return DeviceLoader(IMAGES, labels, batch_size, device=device, threads=1, prefetch=1, **kw)
    return PackedLoader(split, labels, batch_size, device=device, threads=2, prefetch=1, **kw)


def _ids(loader):
    """The rows of each batch of the loader's next epoch (labels = row numbers)."""
    return [y.tolist() for _, y in loader]


@pytest.mark.parametrize("kind,device", LOADERS)
def test_a_seed_and_epoch_give_these_rows_in_these_batches(kind, device, split, monkeypatch):
    if device == "meta":
        Crossings(monkeypatch)
    ids = torch.arange(N)
    lo = loader(kind, device, split, ids, seed=5)
    assert _ids(lo) == [[7, 10, 4, 1], [5, 3, 6, 8], [0, 9, 2]]  # a last short batch, nothing dropped
    assert _ids(lo) == [[4, 6, 9, 1], [10, 5, 7, 8], [0, 3, 2]]
    assert _ids(loader(kind, device, split, ids, seed=5, drop_last=True)) == [[7, 10, 4, 1], [5, 3, 6, 8]]
    assert _ids(loader(kind, device, split, ids, seed=5, shuffle=False)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    # positions 0..4 of indices, permuted by randperm(5) from (5, "perm", 0): [3, 4, 1, 2, 0]
    lo = loader(kind, device, split, ids, 2, seed=5, indices=torch.tensor([10, 3, 7, 0, 5]))
    assert _ids(lo) == [[0, 5], [3, 7], [10]]


@pytest.mark.parametrize("kind,device", LOADERS)
@pytest.mark.parametrize("k", [1, 3, 4])
def test_a_resumed_loader_neither_repeats_nor_skips_a_row(kind, device, k, split, monkeypatch):
    """Stopped after k batches (k = 3: the last of epoch 0) and resumed in a fresh loader: the rows
    handed out before and after are the two epochs' permutations, each row once per epoch."""
    if device == "meta":
        Crossings(monkeypatch)
    ids = torch.arange(N)
    first = loader(kind, device, split, ids, seed=5)
    seen = []
    while len(seen) < k:
        for _, y in first:
            seen.append(y.tolist())
            if len(seen) == k:
                break
    state = first.state_dict()
    assert 3 * state["epoch"] + state["position"] == k  # after the last batch of an epoch: (0, 3)
    resumed = loader(kind, device, split, ids, seed=1)
    resumed.load_state_dict(state)
    while len(seen) < 6:
        seen += _ids(resumed)
    assert [r for b in seen for r in b] == ORDER_SEED5[0] + ORDER_SEED5[1]


@pytest.mark.parametrize("kind,device", LOADERS)
def test_each_batch_is_float_normalised_with_the_given_statistics(kind, device, split, monkeypatch):
    if device == "meta":
        Crossings(monkeypatch)
    rows = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    img = IMAGES.numpy().astype(np.float64) / 255.0
    got = list(loader(kind, device, split, shuffle=False, mean=MEAN, std=STD))
    assert len(got) == 3
    for (x, y), r in zip(got, rows):
        want = (img[r] - np.array(MEAN)[:, None, None]) / np.array(STD)[:, None, None]
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        np.testing.assert_allclose(x.numpy(), want, rtol=0, atol=1e-5)
        assert y.tolist() == [i % 3 for i in r]


def test_a_loader_on_the_datasets_device_uses_no_ring_and_its_labels_stay_valid(ring):
    """A dataset already on the loader's device is gathered there (no host ring); every batch's
    labels are the batch's own, not a buffer that a later batch overwrites."""
    ys = [y for _, y in DeviceLoader(IMAGES, torch.arange(N), 1, seed=5, threads=1, prefetch=1)]
    assert ring == [] and torch.cat(ys).tolist() == ORDER_SEED5[0]


def test_a_dataset_on_one_accelerator_for_a_loader_on_another_is_moved_there(monkeypatch):
    """Only a host dataset is staged: a dataset on one accelerator (``meta`` here) for a loader on
    another (a CUDA device, recorded: no GPU here) is moved there, labels too."""
    moved, to = [], torch.Tensor.to

    def recording_to(t, *args, **kwargs):
        if args and isinstance(args[0], (str, torch.device)) and torch.device(args[0]).type == "cuda":
            moved.append((t.device.type, t.dtype, args))
            return t
        return to(t, *args, **kwargs)

    images, labels = IMAGES.to("meta"), LABELS.int().to("meta")
    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    DeviceLoader(images, labels, 4, device="cuda")
    monkeypatch.undo()
    cuda = torch.device("cuda")
    assert moved == [("meta", torch.uint8, (cuda,)), ("meta", torch.int32, (cuda, torch.long))]


def test_a_dataset_on_another_device_than_the_loaders_is_moved_there(monkeypatch):
    """Only a host dataset for an accelerator is staged; a dataset on one device for a loader on
    another (``meta`` for the CPU here) is moved to the loader's device."""
    moved, to = [], torch.Tensor.to

    def recording_to(t, *args, **kwargs):
        if t.device.type == "meta":
            moved.append(args)
            return IMAGES.clone() if t.dtype == torch.uint8 else to(t, *args, **kwargs)
        return to(t, *args, **kwargs)

    on_meta = IMAGES.to("meta")
    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    lo = DeviceLoader(on_meta, LABELS, 4, device="cpu", shuffle=False)
    monkeypatch.undo()
    assert moved == [(torch.device("cpu"),)] and lo.images.device.type == "cpu"
    assert [y.tolist() for _, y in lo] == [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1]]


def test_device_loader_threads_and_prefetch(ring, monkeypatch):
    assert (DeviceLoader(IMAGES, LABELS, 2).threads, DeviceLoader(IMAGES, LABELS, 2).prefetch) == (2, 2)
    for asked, kept in (((0, 0), (1, 1)), ((1, 1), (1, 1)), ((3, 5), (3, 5))):
        lo = DeviceLoader(IMAGES, LABELS, 2, threads=asked[0], prefetch=asked[1])
        assert (lo.threads, lo.prefetch) == kept
    pools = record_pools(monkeypatch)
    Crossings(monkeypatch)
    next(iter(DeviceLoader(IMAGES, LABELS, 2, device="meta", threads=3, prefetch=1)))
    assert pools == [3] and [r.slots for r in ring] == [3]


def test_micro_batches_have_no_targets_before_a_part_is_reached():
    mb = MicroBatches(IMAGES[:4], LABELS[:4], 2, lambda x, y, j: (x, y))
    with pytest.raises(ValueError, match="non-empty list"):
        mb.targets
    assert [y.tolist() for _, y in mb] == [[0, 1], [2, 0]] and mb.targets.tolist() == [0, 1, 2, 0]


@pytest.mark.parametrize("kind", ["streaming", "packed"])
def test_the_streaming_and_pack_loaders_hand_out_micro_batches(kind, split):
    kw = dict(shuffle=False, micro_batches=2, mean=MEAN, std=STD)
    lo = StreamingLoader(InMemory(), 4, num_workers=0, **kw) if kind == "streaming" else \
        PackedLoader(split, LABELS, 4, **kw)
    mb, y = next(iter(lo))
    assert lo.micro_batches == 2 and y is None and isinstance(mb, MicroBatches) and len(mb) == 2
    assert [yj.tolist() for _, yj in mb] == [[0, 1], [2, 0]]
