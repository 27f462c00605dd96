"""DeviceLoader / StreamingLoader: shapes, coverage, determinism, resumable state."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mlplab.data import AugmentConfig, DeviceLoader, ImageFolderDataset, StreamingLoader, build_augment, load_dataset
from mlplab.data.download import BadData
from mlplab.data.formats import png_bytes


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", "train", image_size=16, num_samples=200, num_classes=5)


def collect(loader, n=None):
    out = []
    for i, b in enumerate(loader):
        out.append(b)
        if n is not None and i + 1 == n:
            break
    return out


def test_shapes_len_and_drop_last(data):
    lo = DeviceLoader(data.images, data.labels, 64, shuffle=False, drop_last=False, mean=data.info.mean,
                      std=data.info.std)
    assert len(lo) == 4
    batches = collect(lo)
    assert [len(x) for x, _ in batches] == [64, 64, 64, 8]
    x, y = batches[0]
    assert x.dtype == torch.float32 and x.shape == (64, 3, 16, 16) and y.dtype == torch.int64
    assert torch.equal(torch.cat([y for _, y in batches]), data.labels)  # in order, every sample
    mean, std = (torch.tensor(v).view(3, 1, 1) for v in (data.info.mean, data.info.std))
    expect = (data.images[:64].float() / 255 - mean) / std
    assert torch.allclose(x, expect, atol=1e-5)
    ld = DeviceLoader(data.images, data.labels, 64, drop_last=True)
    assert len(ld) == 3 and [len(x) for x, _ in collect(ld)] == [64] * 3


def test_shuffle_covers_each_sample_once_and_is_seeded(data):
    idx = torch.arange(200, dtype=torch.long)  # labels = sample ids
    lo = DeviceLoader(data.images, idx, 50, seed=3)
    e0 = torch.cat([y for _, y in collect(lo)])
    e1 = torch.cat([y for _, y in collect(lo)])
    assert sorted(e0.tolist()) == list(range(200)) and not torch.equal(e0, e1)
    assert lo.epoch == 2
    again = DeviceLoader(data.images, idx, 50, seed=3)
    assert torch.equal(torch.cat([y for _, y in collect(again)]), e0)
    other = DeviceLoader(data.images, idx, 50, seed=4)
    assert not torch.equal(torch.cat([y for _, y in collect(other)]), e0)


def test_augmented_batches_soft_targets_and_determinism(data):
    cfg = AugmentConfig(crop_padding=2, hflip=True, mixup=0.8, cutmix=1.0, label_smoothing=0.1,
                        random_erasing=0.25, randaugment="rand-m9-mstd0.5-inc1")
    aug = build_augment(cfg, data.info)
    a = collect(DeviceLoader(data.images, data.labels, 64, augment=aug, seed=1, drop_last=True))
    b = collect(DeviceLoader(data.images, data.labels, 64, augment=aug, seed=1, drop_last=True))
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert ya.shape == (64, 5) and torch.allclose(ya.sum(1), torch.ones(64))
    assert not torch.equal(a[0][0], a[1][0])


@pytest.mark.parametrize("stop_after", [2, 4])  # mid-epoch, and right after an epoch's last batch
def test_state_dict_resumes_identically(data, stop_after):
    aug = build_augment(AugmentConfig(crop_padding=2, hflip=True, mixup=0.2), data.info)

    def make():
        return DeviceLoader(data.images, data.labels, 50, augment=aug, seed=7)

    ref = make()
    full = collect(ref) + collect(ref)  # two epochs, 8 batches
    first = make()
    collect(first, stop_after)
    state = first.state_dict()
    assert all(isinstance(v, int) for v in state.values())
    resumed = make()
    resumed.load_state_dict(state)
    rest = collect(resumed)
    if stop_after == 4:  # the epoch was finished: the next iteration is the whole next epoch
        assert len(rest) == 4
    rest += collect(resumed) if len(rest) < 8 - stop_after else []
    for (xa, ya), (xb, yb) in zip(full[stop_after:], rest):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert len(rest) == 8 - stop_after
    with pytest.raises(ValueError, match="batch_size"):
        DeviceLoader(data.images, data.labels, 25).load_state_dict(state)


def test_streaming_loader_matches_device_loader(tmp_path):
    imgs = np.random.default_rng(0).integers(0, 256, (12, 3, 8, 8), dtype=np.uint8)
    for i in range(12):
        p = tmp_path / "train" / f"c{i % 3}" / f"{i:02d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(png_bytes(imgs[i]))
    ds = ImageFolderDataset(tmp_path, "train", image_size=8)
    assert ds.classes == ["c0", "c1", "c2"] and len(ds) == 12
    ref = load_dataset("imagefolder", "train", root=tmp_path)
    aug = build_augment(AugmentConfig(crop_padding=2, hflip=True), ref.info)
    dev = collect(DeviceLoader(ref.images, ref.labels, 5, augment=aug, seed=2))
    stream = StreamingLoader(ds, 5, augment=aug, seed=2, num_workers=1)
    got = collect(stream)
    assert len(got) == len(dev) == 3 and stream.epoch == 1
    for (xa, ya), (xb, yb) in zip(dev, got):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_streaming_loader_resumes_mid_epoch_and_takes_indices(tmp_path):
    imgs = np.random.default_rng(1).integers(0, 256, (14, 3, 8, 8), dtype=np.uint8)
    for i in range(14):
        p = tmp_path / "train" / f"c{i % 2}" / f"{i:02d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(png_bytes(imgs[i]))
    ds = ImageFolderDataset(tmp_path, "train", image_size=8)
    aug = build_augment(AugmentConfig(random_resized_crop=True, hflip=True), mean=(0.5,) * 3, std=(0.25,) * 3)
    kw = dict(augment=aug, seed=4, num_workers=0, drop_last=True)
    full = collect(StreamingLoader(ds, 3, **kw))
    part = StreamingLoader(ds, 3, **kw)
    it = iter(part)
    next(it), next(it)
    resumed = StreamingLoader(ds, 3, **kw)
    resumed.load_state_dict(part.state_dict())
    rest = collect(resumed)
    assert len(full) == 4 and len(rest) == 2 and resumed.epoch == 1
    for (xa, ya), (xb, yb) in zip(rest, full[2:]):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    idx = torch.tensor([13, 2, 7])
    ys = torch.cat([y for _, y in StreamingLoader(ds, 2, shuffle=False, indices=idx, num_workers=0, mean=(0.5,) * 3,
                                                  std=(0.25,) * 3)])
    assert torch.equal(ys, ds.labels[idx])


def test_indices_select_rows_in_order_without_copying(data):
    """``indices`` gives the batches of images[indices] (augmentation seeded the same), and the
    loader keeps the caller's dataset tensor itself, not a per-epoch copy."""
    idx = torch.randperm(len(data.labels), generator=torch.Generator().manual_seed(3))[:150]
    aug = build_augment(AugmentConfig(crop_padding=2, hflip=True), data.info)
    a = DeviceLoader(data.images, data.labels, 32, shuffle=False, drop_last=True, augment=aug, seed=7, indices=idx)
    b = DeviceLoader(data.images[idx], data.labels[idx], 32, shuffle=False, drop_last=True, augment=aug, seed=7)
    assert a.images is data.images and len(a) == len(b) == 4
    for (xa, ya), (xb, yb) in zip(collect(a), collect(b)):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_an_image_folder_without_a_size_takes_the_first_images(tmp_path):
    """``image_size=None``: every image at the first image's side (class ``a``'s, the first in
    order), and a first image that is not square is named in the refusal."""
    rng = np.random.default_rng(2)
    for root, first in ((tmp_path / "mixed", (3, 6, 6)), (tmp_path / "wide", (3, 4, 8))):
        for cls, shape in (("a", first), ("b", (3, 8, 8))):
            (root / "train" / cls).mkdir(parents=True)
            (root / "train" / cls / "0.png").write_bytes(png_bytes(rng.integers(0, 256, shape, dtype=np.uint8)))
    ds = ImageFolderDataset(tmp_path / "mixed", "train", None)
    assert ds.image_size == 6 and ds.shape == (2, 3, 6, 6) and ds[1][0].shape == (3, 6, 6)
    with pytest.raises(BadData, match=r"wide/train/a/0\.png is 8x4; set data\.image_size=N"):
        ImageFolderDataset(tmp_path / "wide", "train", None)


def test_an_image_folder_keeps_the_classes_it_is_given(tmp_path):
    """A held-out split labelled with the classes given (the train split's, in their order), not
    with the sorted folders of ``root/train``."""
    rng = np.random.default_rng(3)
    for split, cls in (("train", "a"), ("train", "b"), ("val", "a"), ("val", "b")):
        (tmp_path / split / cls).mkdir(parents=True)
        (tmp_path / split / cls / "0.png").write_bytes(png_bytes(rng.integers(0, 256, (3, 4, 4), dtype=np.uint8)))
    val = ImageFolderDataset(tmp_path, "val", 4, classes=["b", "a"])
    assert val.classes == ["b", "a"] and [p.parent.name for p in val.paths] == ["a", "b"]
    assert val.labels.tolist() == [1, 0]
    assert ImageFolderDataset(tmp_path, "val", 4).labels.tolist() == [0, 1]
