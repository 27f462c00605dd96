"""Device placement without a GPU: batches, generators and random boxes land on the device they
are asked for. The ``meta`` device stands in for an accelerator (tensors with shapes and no
data); a default-device context stands in for a user's ``torch.set_default_device``."""
from __future__ import annotations

import pytest
import torch
from loader_helpers import AUG, IMAGES, LABELS, B, InMemory, write_pack

from mlplab.data import DeviceLoader, PackedLoader, StreamingLoader
from mlplab.data import loader as loader_mod
from mlplab.data.augment import crop_flip_host
from mlplab.data.packed import Pack
from mlplab.data.resized_crop import resized_crop_boxes


def _loaders(tmp_path, **kw):
    pack = Pack(write_pack(tmp_path / "pack")).split("train")
    return {"streaming": StreamingLoader(InMemory(), B, num_workers=0, **kw),
            "packed": PackedLoader(pack, LABELS, B, threads=1, prefetch=1, **kw),
            "staged": DeviceLoader(IMAGES, LABELS, B, threads=1, prefetch=1, **kw)}


@pytest.mark.parametrize("kind", ["streaming", "packed", "staged"])
def test_batches_are_copied_to_the_loaders_device_asynchronously(kind, tmp_path, monkeypatch):
    """Every host batch goes to the loader's device with ``non_blocking=True`` (on a GPU, from
    pinned memory: the copy overlaps the step instead of synchronising the stream): images and
    labels, and for a pack the order its rows were read in."""
    copies = []
    to = torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        copies.append((self.device.type, args, kwargs))
        return to(self, *args, **kwargs)

    loader = _loaders(tmp_path, device="meta", shuffle=False)[kind]
    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    x, y = next(iter(loader))
    monkeypatch.undo()
    assert x.device.type == y.device.type == "meta" and x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.shape == (B, 3, 4, 4) and y.shape == (B,)
    moves = [(args, kw) for dev, args, kw in copies if dev == "cpu" and args and args[0] == torch.device("meta")]
    assert len(moves) == (3 if kind == "packed" else 2), copies
    assert all(kw.get("non_blocking") is True for _, kw in moves), copies


@pytest.mark.parametrize("kind", ["streaming", "packed", "staged"])
def test_augmentation_draws_from_a_generator_on_the_loaders_device(kind, tmp_path, monkeypatch):
    seen = []

    class Drawn(Exception):
        pass

    def recording(*key, **kw):
        if key[1] != "augment":  # the epoch's order: drawn on the host
            return derive(*key, **kw)
        seen.append((key, kw))
        raise Drawn

    derive = loader_mod.derive_generator

    loader = _loaders(tmp_path, device="meta", augment=AUG, seed=5)[kind]
    monkeypatch.setattr(loader_mod, "derive_generator", recording)
    with pytest.raises(Drawn):
        next(iter(loader))
    assert seen == [((5, "augment", 0, 0), {"device": torch.device("meta")})]


def test_crop_boxes_follow_the_generators_device_not_the_default_device():
    want = resized_crop_boxes(64, 28, 32, torch.Generator().manual_seed(3))
    with torch.device("meta"):  # a user's default device (e.g. torch.set_default_device("cuda"))
        got = resized_crop_boxes(64, 28, 32, torch.Generator().manual_seed(3))
    assert got.device.type == "cpu" and got.dtype == torch.int64 and torch.equal(got, want)


@pytest.mark.parametrize("kind", ["streaming", "packed"])
def test_labels_and_indices_are_kept_on_the_host_as_int64(kind, tmp_path, monkeypatch):
    """The epoch's order is drawn and sliced on the host, where the rows are read: indices (and a
    pack's labels) given on a device are copied to the host as int64 (recorded: no GPU here)."""
    pack = Pack(write_pack(tmp_path / "pack")).split("train")
    idx, labels = torch.tensor([3, 1, 4], dtype=torch.int32), LABELS.int()
    moved, to = [], torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        if self is idx or self is labels:
            moved.append(("indices" if self is idx else "labels", args, kwargs))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    if kind == "streaming":
        lo = StreamingLoader(InMemory(), B, num_workers=0, indices=idx, device="meta")
    else:
        lo = PackedLoader(pack, labels, B, indices=idx, device="meta")
    monkeypatch.undo()
    want = [("indices", ("cpu", torch.long), {})] if kind == "streaming" else \
        [("labels", ("cpu", torch.long), {}), ("indices", ("cpu", torch.long), {})]
    assert moved == want and lo.indices.dtype == torch.int64 and lo.indices.device.type == "cpu"


def test_the_host_crop_draws_on_the_host_whatever_the_default_device():
    x = torch.randint(0, 256, (6, 1, 5, 5), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    want = crop_flip_host(x, 2, True, torch.Generator().manual_seed(1))
    with torch.device("meta"):  # a user's default device (e.g. torch.set_default_device("cuda"))
        got = crop_flip_host(x, 2, True, torch.Generator().manual_seed(1))
    assert got.device.type == "cpu" and torch.equal(got, want)
