"""The three loaders against one oracle: the loaders' contract written out by hand (epoch e's order
is ``randperm(n, derive_generator(seed, "perm", e))``, batch i is rows ``order[i·B:(i+1)·B]``,
augmented with ``derive_generator(seed, "augment", e, i)``). Every loader gives exactly those
batches, and stopping after any k batches — mid-epoch, at an epoch's last batch, in the next
epoch — then resuming from ``state_dict()`` in a fresh loader gives exactly the remaining ones."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from loader_helpers import AUG, IMAGES, LABELS, MEAN, STD, B, InMemory, K, N, write_pack

from mlplab.data import DeviceLoader, ImageFolderDataset, PackedLoader, StreamingLoader
from mlplab.data import loader as loader_mod
from mlplab.data.datasets import resize_images
from mlplab.data.download import BadData
from mlplab.data.formats import png_bytes
from mlplab.data.packed import Pack
from mlplab.utils.seeds import derive_generator


def make(kind, tmp_path, **kw):
    kw = {"augment": AUG, "seed": 5, **kw}
    if kind == "device":
        return DeviceLoader(IMAGES, LABELS, B, **kw)
    if kind == "streaming":
        return StreamingLoader(InMemory(), B, num_workers=0, **kw)
    root = tmp_path / "pack"
    if not root.exists():
        write_pack(root)
    return PackedLoader(Pack(root).split("train"), LABELS, B, threads=2, prefetch=2, **kw)


def reference(epochs, *, drop_last=False, shuffle=True, seed=5, augment=AUG, indices=None):
    n = N if indices is None else len(indices)
    per_epoch = n // B if drop_last else math.ceil(n / B)
    out = []
    for e in range(epochs):
        order = torch.randperm(n, generator=derive_generator(seed, "perm", e)) if shuffle else torch.arange(n)
        if indices is not None:
            order = indices[order]
        for i in range(per_epoch):
            rows = order[i * B:(i + 1) * B]
            out.append(augment(IMAGES[rows], LABELS[rows], derive_generator(seed, "augment", e, i), MEAN, STD))
    return out


def take(loader, k):
    """The next k batches, running into the following epochs as a training loop does."""
    out = []
    while len(out) < k:
        for b in loader:
            out.append(b)
            if len(out) == k:
                break
    return out


def same(got, want):
    assert len(got) == len(want)
    for (x, y), (rx, ry) in zip(got, want):
        assert torch.equal(x, rx) and torch.equal(y, ry)


KINDS = ["device", "streaming", "packed"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("drop_last,shuffle", [(False, True), (True, True), (False, False)])
def test_two_epochs_are_the_contracts_batches(kind, tmp_path, drop_last, shuffle):
    loader = make(kind, tmp_path, drop_last=drop_last, shuffle=shuffle)
    assert len(loader) == (N // B if drop_last else math.ceil(N / B))
    same(list(loader) + list(loader), reference(2, drop_last=drop_last, shuffle=shuffle))
    assert loader.state_dict() == {"epoch": 2, "position": 0, "seed": 5, "n": N, "batch_size": B}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("drop_last", [False, True])
def test_stop_after_any_k_batches_then_resume_gives_exactly_the_rest(kind, tmp_path, drop_last):
    per_epoch = N // B if drop_last else math.ceil(N / B)
    want = reference(2, drop_last=drop_last)
    for k in range(0, 2 * per_epoch):
        first = make(kind, tmp_path, drop_last=drop_last)
        same(take(first, k), want[:k])
        state = first.state_dict()
        assert all(type(v) is int for v in state.values()) and json.loads(json.dumps(state)) == state
        assert state["epoch"] * per_epoch + state["position"] == k  # (epoch, batches of it done)
        resumed = make(kind, tmp_path, drop_last=drop_last, seed=99)  # the state's seed wins
        resumed.load_state_dict(state)
        same(take(resumed, 2 * per_epoch - k), want[k:])


@pytest.mark.parametrize("kind", KINDS)
def test_indices_resume_too(kind, tmp_path):
    idx = torch.tensor([10, 3, 7, 0, 5, 9, 1])
    want = reference(2, indices=idx)
    first = make(kind, tmp_path, indices=idx)
    assert len(first) == 3
    same(take(first, 2), want[:2])
    resumed = make(kind, tmp_path, indices=idx)
    resumed.load_state_dict(first.state_dict())
    same(take(resumed, 4), want[2:])


def test_load_state_checks_the_shape_of_the_data(tmp_path):
    state = make("device", tmp_path).state_dict()
    with pytest.raises(ValueError, match=r"^loader state has batch_size=3, this loader 4$"):
        DeviceLoader(IMAGES, LABELS, 4).load_state_dict(state)
    with pytest.raises(ValueError, match=r"^loader state has n=11, this loader 10$"):
        DeviceLoader(IMAGES[:10], LABELS[:10], 3).load_state_dict(state)
    lo = DeviceLoader(IMAGES, LABELS, 3, seed=8)
    lo.load_state_dict({"epoch": 4, "position": 2})  # an older state without seed/n/batch_size
    assert lo.state_dict() == {"epoch": 4, "position": 2, "seed": 8, "n": N, "batch_size": 3}
    lo.set_epoch(7)
    assert (lo.epoch, lo.position) == (7, 0)
    assert torch.equal(lo.order(), torch.randperm(N, generator=derive_generator(8, "perm", 7)))
    assert torch.equal(lo.order(2), torch.randperm(N, generator=derive_generator(8, "perm", 2)))
    with pytest.raises(ValueError, match="batch_size must be positive, got 0"):
        DeviceLoader(IMAGES, LABELS, 0)


def test_batches_without_augmentation_are_normalised_or_scaled():
    x, y = next(iter(DeviceLoader(IMAGES, LABELS, 4, shuffle=False, mean=MEAN, std=STD)))
    want = (IMAGES[:4].double() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    torch.testing.assert_close(x.double(), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(y, LABELS[:4])
    x, _ = next(iter(DeviceLoader(IMAGES, LABELS, 4, shuffle=False)))  # no statistics: [0, 1]
    assert x.dtype == torch.float32 and torch.equal(x, IMAGES[:4].float() / 255.0)
    x, _ = next(iter(DeviceLoader(IMAGES, LABELS, 4, shuffle=False, mean=MEAN)))  # mean alone is not enough
    assert torch.equal(x, IMAGES[:4].float() / 255.0)
    lo = DeviceLoader(IMAGES, LABELS, 4, augment=AUG)
    assert (lo.mean, lo.std, lo.num_classes, lo.soft_targets) == (MEAN, STD, K, True)
    lo = DeviceLoader(IMAGES, LABELS, 4, augment=AUG, mean=(0.0,) * 3, std=(1.0,) * 3, num_classes=7)
    assert (lo.mean, lo.std, lo.num_classes) == ((0.0,) * 3, (1.0,) * 3, 7)
    lo = DeviceLoader(IMAGES, LABELS, 4)
    assert (lo.mean, lo.std, lo.num_classes, lo.soft_targets) == (None, None, None, False)


def test_device_loader_refuses_bad_arrays():
    with pytest.raises(ValueError, match=r"images must be uint8 \(N, ch, H, W\), got \(11, 3, 4, 4\) torch.float32"):
        DeviceLoader(IMAGES.float(), LABELS, 2)
    with pytest.raises(ValueError, match=r"images must be uint8"):
        DeviceLoader(IMAGES[0], LABELS, 2)
    with pytest.raises(ValueError, match="^11 images but 10 labels$"):
        DeviceLoader(IMAGES, LABELS[:10], 2)
    with pytest.raises(ValueError, match="^11 images but 10 labels$"):
        PackedLoader(IMAGES.numpy(), LABELS[:10], 2)


def test_to_device_pins_and_copies_asynchronously_only_for_cuda():
    calls = []

    class Fake:
        def pin_memory(self):
            calls.append("pin")
            return self

        def to(self, device, non_blocking=False):
            calls.append(("to", device.type, non_blocking))
            return "moved"

    assert loader_mod.to_device(Fake(), torch.device("cpu")) == "moved" and calls == [("to", "cpu", False)]
    calls.clear()
    assert loader_mod.to_device(Fake(), SimpleNamespace(type="cuda")) == "moved"
    assert calls == ["pin", ("to", "cuda", True)]


def test_packed_loader_resizes_batches_to_image_size(tmp_path):
    images = Pack(write_pack(tmp_path / "p")).split("train")
    kw = dict(shuffle=True, augment=AUG, seed=2)
    got = list(PackedLoader(images, LABELS, B, image_size=6, **kw))
    same(got, list(DeviceLoader(resize_images(IMAGES, 6), LABELS, B, **kw)))
    same_size = PackedLoader(images, LABELS, B, image_size=(4, 4))
    assert same_size.resize is None and PackedLoader(images, LABELS, B, image_size=(6, 5)).resize == (6, 5)
    assert PackedLoader(images, LABELS, B, threads=0, prefetch=0).threads == 1


def test_image_folder_sizes_and_classes(tmp_path):
    rng = np.random.default_rng(0)
    for split, cls, shape in (("train", "b", (3, 6, 6)), ("train", "a", (3, 6, 6)), ("val", "a", (3, 6, 6))):
        d = tmp_path / split / cls
        d.mkdir(parents=True, exist_ok=True)
        (d / "0.png").write_bytes(png_bytes(rng.integers(0, 256, shape, dtype=np.uint8)))
    ds = ImageFolderDataset(tmp_path, "train", None)
    assert ds.image_size == 6 and ds.shape == (2, 3, 6, 6) and ds.classes == ["a", "b"]
    x, y = ds[1]
    assert x.shape == (3, 6, 6) and x.dtype == torch.uint8 and y == 1
    val = ImageFolderDataset(tmp_path, "val", 4, in_chans=1)
    assert val.classes == ["a", "b"] and val.shape == (1, 1, 4, 4) and val[0][0].shape == (1, 4, 4)
    for c in ("a", "b"):  # two classes: a folder of one is refused before its images are looked at
        wide = tmp_path / "wide" / "train" / c
        wide.mkdir(parents=True)
        (wide / "0.png").write_bytes(png_bytes(rng.integers(0, 256, (3, 4, 8), dtype=np.uint8)))
    with pytest.raises(BadData, match=r"0\.png is 8x4; set data\.image_size=N to stream the images at one square size"):
        ImageFolderDataset(tmp_path / "wide", "train", None)


def test_a_host_dataset_for_a_cuda_run_stays_on_the_host():
    """Host-staged: building the loader moves nothing to the GPU (this runs without one)."""
    idx = torch.tensor([3, 1], dtype=torch.int32)
    lo = DeviceLoader(IMAGES, LABELS.int(), 2, device="cuda", indices=idx)
    assert lo.device == torch.device("cuda") and lo.images.device.type == "cpu" and lo.images is IMAGES
    assert lo.labels.dtype == torch.int64 and lo.labels.device.type == "cpu" and lo.indices.device.type == "cpu"
    assert lo.indices.dtype == torch.int64
    meta = DeviceLoader(IMAGES, LABELS.int(), 2, device="meta", indices=idx)  # any accelerator: staged the same
    assert meta.images is IMAGES and meta.indices.device.type == "cpu"
    on = DeviceLoader(IMAGES.to("meta"), LABELS.int(), 2, device="meta", indices=idx)  # data there: stays there
    assert on.images.device.type == on.labels.device.type == on.indices.device.type == "meta"
    assert on.labels.dtype == on.indices.dtype == torch.int64
    stream = StreamingLoader(InMemory(), 2, device="cuda", indices=idx.int(), num_workers=0)
    assert stream.indices.dtype == torch.int64 and stream.num_workers == 0


def test_streaming_hands_the_epochs_rows_to_one_data_loader(monkeypatch):
    made = []
    real = torch.utils.data.DataLoader

    def spy(dataset, **kw):
        made.append(kw)
        return real(dataset, **kw)

    monkeypatch.setattr(torch.utils.data, "DataLoader", spy)
    lo = StreamingLoader(InMemory(), B, shuffle=False, drop_last=True, num_workers=0, mean=MEAN, std=STD)
    assert len(take(lo, 2)) == 2
    lo2 = StreamingLoader(InMemory(), B, shuffle=False, drop_last=True, num_workers=0, mean=MEAN, std=STD)
    lo2.load_state_dict(lo.state_dict())
    assert len(list(lo2)) == 1
    assert made[0] == {"batch_size": B, "sampler": list(range(9)), "num_workers": 0, "pin_memory": False,
                       "drop_last": False, "persistent_workers": False}
    assert made[1]["sampler"] == [6, 7, 8]  # resumed: only the rest of the epoch is decoded


def test_streaming_labels_come_back_int64():
    class Int32Labels(InMemory):
        def __getitem__(self, i):
            return IMAGES[i], torch.tensor(int(LABELS[i]), dtype=torch.int32)

    _, y = next(iter(StreamingLoader(Int32Labels(), 4, shuffle=False, num_workers=0)))
    assert y.dtype == torch.int64 and torch.equal(y, LABELS[:4])


def test_packed_reads_stay_prefetch_batches_ahead(tmp_path, monkeypatch):
    from mlplab.data import staging

    pools, submitted = [], []

    class Pool(staging.ThreadPoolExecutor):
        def __init__(self, workers):
            pools.append(workers)
            super().__init__(workers)

        def submit(self, fn, slot, rows):
            submitted.append((slot, rows.tolist()))
            return super().submit(fn, slot, rows)

    monkeypatch.setattr(staging, "ThreadPoolExecutor", Pool)
    images = Pack(write_pack(tmp_path / "p")).split("train")
    lo = PackedLoader(images, LABELS, 2, shuffle=False, threads=3, prefetch=2, mean=MEAN, std=STD)
    seen = [len(submitted) for _ in lo]
    assert pools == [3] and len(seen) == 6
    assert seen == [3, 4, 5, 6, 6, 6]  # 2 ahead at the start, one more per batch used, 6 batches in all
    # a ring of prefetch + 2 slots: the slot being read and the one whose copy may be in flight are never refilled
    assert submitted == [(0, [0, 1]), (1, [2, 3]), (2, [4, 5]), (3, [6, 7]), (0, [8, 9]), (1, [10])]
    assert (lo.threads, lo.prefetch) == (3, 2)
    lo = PackedLoader(images, LABELS, 2, threads=0, prefetch=0)
    assert (lo.threads, lo.prefetch) == (1, 1)


def test_the_readers_ring_is_made_for_the_loaders_device(tmp_path, monkeypatch):
    """Packs and host-staged datasets gather into a ring for the loader's device: pinned buffers
    when it is a CUDA device (tests/data/test_data_staging.py), plain ones on the CPU."""
    from mlplab.data import staging

    made = []
    monkeypatch.setattr(loader_mod, "PinnedRing", lambda slots, device: made.append((slots, str(device))) or
                        staging.PinnedRing(slots, "cpu"))
    images = Pack(write_pack(tmp_path / "p")).split("train")
    next(iter(PackedLoader(images, LABELS, 2, prefetch=3)))
    next(iter(DeviceLoader(IMAGES, LABELS, 2, device="meta", prefetch=2)))
    assert made == [(5, "cpu"), (4, "meta")]


def test_streaming_pins_host_memory_for_a_cuda_run(monkeypatch):
    made = []

    class Stop(Exception):
        pass

    def spy(dataset, **kw):
        made.append(kw)
        raise Stop

    monkeypatch.setattr(torch.utils.data, "DataLoader", spy)
    with pytest.raises(Stop):
        next(iter(StreamingLoader(InMemory(), B, device="cuda", num_workers=0)))
    assert made[0]["pin_memory"] is True


def test_a_train_class_without_images_is_refused_a_val_class_may_be_empty(tmp_path):
    rng = np.random.default_rng(0)
    for split, cls in (("train", "a"), ("train", "b"), ("val", "a")):
        d = tmp_path / split / cls
        d.mkdir(parents=True, exist_ok=True)
        (d / "0.png").write_bytes(png_bytes(rng.integers(0, 256, (3, 4, 4), dtype=np.uint8)))
    (tmp_path / "val" / "b").mkdir()  # no val images of class b
    val = ImageFolderDataset(tmp_path, "val", 4)
    assert val.classes == ["a", "b"] and len(val) == 1
    (tmp_path / "train" / "c").mkdir()
    with pytest.raises(BadData, match=r"train/c: class folder holds no images"):
        ImageFolderDataset(tmp_path, "train", 4)


def test_streaming_defaults_and_settings():
    lo = StreamingLoader(InMemory(), B)
    assert (lo.seed, lo.num_workers, lo.shuffle, lo.drop_last, lo.device) == (0, 4, True, False, torch.device("cpu"))
    lo = StreamingLoader(InMemory(), B, mean=MEAN, std=STD, num_classes=7, seed=3)
    assert (lo.mean, lo.std, lo.num_classes, lo.seed) == (MEAN, STD, 7, 3)
    lo = DeviceLoader(IMAGES, LABELS, B)
    assert (lo.seed, lo.shuffle, lo.drop_last) == (0, True, False)
    lo = PackedLoader(IMAGES.numpy(), LABELS, B)
    assert (lo.seed, lo.shuffle, lo.drop_last, lo.threads, lo.prefetch, lo.resize) == (0, True, False, 2, 4, None)


def test_packed_loader_settings_pass_through():
    lo = PackedLoader(IMAGES.numpy(), LABELS.int(), B, mean=MEAN, std=STD, num_classes=7, indices=torch.tensor(
        [1, 2], dtype=torch.int32))
    assert (lo.mean, lo.std, lo.num_classes) == (MEAN, STD, 7)
    assert lo.labels.dtype == lo.indices.dtype == torch.int64


def test_the_loaders_statistics_override_the_augments_and_batches_of_one_work():
    mean, std = (0.0, 0.1, 0.2), (1.0, 0.9, 0.8)
    got = list(DeviceLoader(IMAGES, LABELS, B, augment=AUG, seed=5, mean=mean, std=std))
    want = [AUG(IMAGES[r], LABELS[r], derive_generator(5, "augment", 0, i), mean, std)
            for i, r in enumerate(torch.randperm(N, generator=derive_generator(5, "perm", 0)).split(B))]
    same(got, want)
    assert len(list(DeviceLoader(IMAGES, LABELS, 1))) == N


def test_host_staged_batches_cross_through_to_device_and_equal_the_unstaged_ones(monkeypatch):
    """Staged for an accelerator (``meta`` here, whose copies are recorded and kept on the CPU so
    that their values can be compared), the batches gathered into the ring are the same batches."""
    want = list(DeviceLoader(IMAGES, LABELS, B, augment=AUG, seed=5))
    staged = DeviceLoader(IMAGES, LABELS, B, augment=AUG, seed=5, device="meta", threads=2, prefetch=1)
    crossed, to = [], torch.Tensor.to

    def kept_on_the_host(self, *args, **kwargs):
        if args and str(args[0]) == "meta":
            crossed.append((self.dtype, kwargs))
            return self.clone()  # what arrives: the ring's slot, copied
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", kept_on_the_host)
    monkeypatch.setattr(loader_mod, "derive_generator", lambda *key, device=None: derive_generator(*key))
    same(list(staged), want)
    assert crossed == [(torch.uint8, {"non_blocking": True}), (torch.int64, {"non_blocking": True})] * len(want)
