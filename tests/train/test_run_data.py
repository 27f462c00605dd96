"""``train.data`` piece by piece: the subsets a run keeps (the first N, or the run seed's random N
in the data's order), ``data.classes`` relabelled in the order given (in memory and streamed),
where the splits are stored, the loaders' shards and the data's identity, each against an
expectation written here. (Disjoint splits for every seed: test_splits_oracle.py.)"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mlplab.data import load_dataset, pack
from mlplab.data.formats import png_bytes
from mlplab.errors import BadInput
from mlplab.train import data as D
from mlplab.train import make_config
from mlplab.train.distributed import DistInfo, shard_indices
from mlplab.utils.seeds import derive_seed

CPU = torch.device("cpu")


def _cfg(**ov):
    return make_config(None, {"data.dataset": "synthetic", "data.image_size": 8, "run.name": "d", **ov})


def _keys(images):
    return [bytes(row) for row in images.reshape(len(images), -1).numpy()]


def test_the_first_n_examples_or_the_run_seeds_random_n_in_the_datas_order():
    full = {s: load_dataset("synthetic", s, image_size=8) for s in ("train", "test")}
    first = D.load_run_data(_cfg(**{"data.train_subset": 100, "data.test_subset": 30}), CPU)
    assert torch.equal(first.train.images, full["train"].images[:100]) and first.val is None
    assert torch.equal(first.test.labels, full["test"].labels[:30])
    for seed in (0, 3):
        data = D.load_run_data(_cfg(**{"data.train_subset": 100, "data.test_subset": 30, "data.subset": "random",
                                       "run.seed": seed}), CPU)
        for split, n, got in (("train", 100, data.train), ("test", 30, data.test)):
            pick = np.sort(torch.randperm(len(full[split].labels), generator=torch.Generator().manual_seed(seed))
                           .numpy()[:n])  # the seed's draw, kept in the data's order
            assert torch.equal(got.images, full[split].images[pick])
            assert torch.equal(got.labels, full[split].labels[pick])
    everything = D.load_run_data(_cfg(**{"data.train_subset": 1024, "data.subset": "random"}), CPU)
    assert torch.equal(everything.train.images, full["train"].images)  # N ≥ the split: all of it, in order


def test_data_classes_keeps_those_examples_relabelled_in_the_order_given():
    full = load_dataset("synthetic", "test", image_size=8)
    data = D.load_run_data(_cfg(**{"data.classes": [7, 2]}), CPU)
    keep = [i for i, c in enumerate(full.labels.tolist()) if c in (7, 2)]
    assert torch.equal(data.test.images, full.images[keep])
    assert data.test.labels.tolist() == [0 if full.labels[i] == 7 else 1 for i in keep]
    assert data.info.num_classes == 2 and set(data.train.labels.tolist()) == {0, 1}
    assert D._keep_classes(None, [1]) is None
    split = D.Split(full.images[:4], torch.tensor([0, 1, 2, 1]))
    assert D._keep_classes(split, None) is split
    high = D._keep_classes(split, [9, 1])  # a class beyond the labels present
    assert high.labels.tolist() == [1, 1] and torch.equal(high.images, split.images[[1, 3]])


def test_streamed_classes_and_subsets_are_rows_of_the_shared_images():
    images = torch.zeros(6, 1, 2, 2, dtype=torch.uint8)
    labels = torch.tensor([2, 0, 1, 2, 1, 0])

    class Streamed:  # what a streamed split holds: not a tensor
        shape = images.shape

    s = D.Split(Streamed(), labels)
    assert s.streamed and len(s) == 6 and not D.Split(images, labels).streamed
    kept = D._keep_classes(s, [2, 1])
    assert kept.images is s.images and kept.rows.tolist() == [0, 2, 3, 4]
    assert kept.labels.tolist()[:5] == [0, -1, 1, 0, 1]
    again = D._keep_classes(D.Split(s.images, labels, torch.tensor([5, 3, 2])), [2])
    assert again.rows.tolist() == [3]
    first = D._subset(kept, 2, "first", 0)
    assert first.rows.tolist() == [0, 2] and first.images is s.images and len(first) == 2
    assert first.labels is kept.labels  # the labels of every example of the shared images
    assert D._subset(s, 3, "first", 0).rows.tolist() == [0, 1, 2]
    pick = sorted(torch.randperm(4, generator=torch.Generator().manual_seed(5))[:3].tolist())
    assert D._subset(kept, 3, "random", 5).rows.tolist() == [[0, 2, 3, 4][i] for i in pick]
    assert D._subset(kept, None, "random", 5) is kept and D._subset(kept, 4, "first", 0) is kept


def test_splits_are_stored_where_data_on_device_says(monkeypatch):
    split = D.Split(torch.zeros(300, 1, 1, 1, dtype=torch.uint8), torch.zeros(300, dtype=torch.int64))
    assert D._on_device(True, split, CPU) and not D._on_device(False, split, CPU)
    assert D._on_device("auto", split, CPU)  # CPU: the data is where the run is anyway
    for memory, held in ((1001, True), (1000, False)):  # on a GPU: 300 bytes of images < 30% of its free memory
        monkeypatch.setattr(D, "available_memory", lambda device, m=memory: m if device.type == "cuda" else 0)
        assert D._on_device("auto", split, torch.device("cuda")) == held, memory
    host = D.load_run_data(_cfg(**{"data.train_subset": 300}), torch.device("cuda"))  # too big for its 1000 bytes
    assert host.train.images.device == host.test.images.device == CPU and host.device == torch.device("cuda")
    kept = D.load_run_data(_cfg(**{"data.on_device": False, "data.val_fraction": 0.1}), CPU)
    assert kept.train.images.device == kept.val.images.device == kept.test.images.device == CPU
    meta = torch.device("meta")  # stands in for an accelerator: where the splits and the batches go
    for flag, home in ((True, meta), (False, CPU), ("auto", meta)):
        data = D.load_run_data(_cfg(**{"data.on_device": flag, "data.val_fraction": 0.1, "data.num_workers": 3}),
                               meta)
        assert {s.images.device for s in (data.train, data.val, data.test)} == {home}, flag
        assert {s.labels.device for s in (data.train, data.val, data.test)} == {home}, flag
        assert data.device == meta and data.num_workers == 3
        x, y = next(iter(D.eval_loader(data.test, data, 4, DistInfo())))
        assert x.device == y.device == meta  # a split kept in host memory is staged to the run's device


def test_an_eval_loader_gives_every_example_once_over_the_ranks_in_order():
    data = D.load_run_data(_cfg(**{"data.test_subset": 25}), CPU)
    x, y = zip(*D.eval_loader(data.test, data, 10, DistInfo()))
    assert [len(b) for b in y] == [10, 10, 5] and torch.equal(torch.cat(y), data.test.labels)
    mean, std = torch.tensor(data.info.mean).view(1, -1, 1, 1), torch.tensor(data.info.std).view(1, -1, 1, 1)
    normalised = (data.test.images.double() / 255 - mean) / std
    assert torch.allclose(torch.cat(x).double(), normalised, atol=1e-5)  # no augmentation
    ranks = [torch.cat([b for _, b in D.eval_loader(data.test, data, 4, DistInfo(rank=r, world_size=3))])
             for r in range(3)]
    assert [len(r) for r in ranks] == [9, 8, 8]
    assert all(torch.equal(ranks[r], data.test.labels[r::3]) for r in range(3))


def test_a_train_loader_is_its_ranks_shard_of_the_epochs_permutation():
    data = D.load_run_data(_cfg(**{"data.train_subset": 40, "augment.hflip": True}), CPU)
    epochs = {}
    for epoch in (0, 1):
        shards = [torch.cat([b for _, b in D.train_loader(data, epoch, 4, 7, DistInfo(rank=r, world_size=2))])
                  for r in (0, 1)]
        assert [len(s) for s in shards] == [20, 20]
        epochs[epoch] = torch.cat(shards)
        assert sorted(epochs[epoch].tolist()) == sorted(data.train.labels.tolist())  # each example once
    assert not torch.equal(epochs[0], epochs[1])  # another order each epoch
    whole = list(D.train_loader(data, 0, 8, 7, DistInfo()))
    later = list(D.train_loader(data, 0, 8, 7, DistInfo(), start=3))  # resumed after 3 batches
    assert len(whole) == 5 and len(later) == 2
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(whole[3:], later))
    drop = list(D.train_loader(D.load_run_data(_cfg(**{"data.train_subset": 21}), CPU), 0, 8, 7, DistInfo()))
    assert [len(b[1]) for b in drop] == [8, 8]  # full batches only
    micro = next(iter(D.train_loader(data, 0, 8, 7, DistInfo(), micro_batches=2)))
    assert len(micro[0]) == 2  # the batch's two micro-batches, each augmented when reached


def test_the_datas_identity_and_its_description(tmp_path):
    assert D.data_identity(_cfg()) == {"dataset": "synthetic"}
    (tmp_path / "index.json").write_text('{"shards": []}')
    import hashlib

    digest = hashlib.sha256(b'{"shards": []}').hexdigest()
    packed = D.data_identity(_cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "." / "")}))
    assert packed == {"dataset": "packed", "root": str(tmp_path.resolve()), "index_sha256": digest}
    folder = D.data_identity(_cfg(**{"data.dataset": "imagefolder", "data.root": str(tmp_path)}))
    assert folder == {"dataset": "imagefolder", "root": str(tmp_path.resolve())}
    assert D.describe_data(packed) == f"the pack {tmp_path.resolve()} (index sha256 {digest[:12]})"
    assert D.describe_data(folder) == f"the image folder {tmp_path.resolve()}"
    assert D.describe_data({"dataset": "cifar10"}) == "cifar10"
    assert D.describe_data({"dataset": "cifar10", "root": "/d"}) == "cifar10 from /d"
    assert not D.same_data({"dataset": "packed", "index_sha256": "1"}, {"dataset": "packed"})
    assert D.same_data({"dataset": "packed"}, {"dataset": "packed"})


def test_same_data_compares_what_decides_each_datasets_content():
    pack = {"dataset": "packed", "root": "/a", "index_sha256": "1"}
    assert D.same_data(pack, {**pack, "root": "/moved"})  # the same index wherever it lies
    assert not D.same_data(pack, {**pack, "index_sha256": "2"})  # packed again in place
    folder = {"dataset": "imagefolder", "root": "/a"}
    assert D.same_data(folder, dict(folder)) and not D.same_data(folder, {**folder, "root": "/b"})
    assert D.same_data({"dataset": "cifar10", "root": "/a"}, {"dataset": "cifar10", "root": "/b"})  # checksummed
    assert not D.same_data({"dataset": "cifar10"}, {"dataset": "cifar100"})


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An image folder: 3 classes of 6, 6 and 6 distinct 8x8 training images, 2 12x12 test images each."""
    root, rng = tmp_path_factory.mktemp("rundata") / "folder", np.random.default_rng(1)
    for split, n in (("train", 6), ("test", 2)):
        for c in range(3):
            (root / split / f"c{c}").mkdir(parents=True)
            for i in range(n):
                side = 8 if split == "train" else 12
                (root / split / f"c{c}" / f"{i}.png").write_bytes(png_bytes(rng.integers(0, 256, (3, side, side),
                                                                                         dtype=np.uint8)))
    return root


def test_a_pack_streams_with_its_own_classes_size_and_statistics(folder, tmp_path, monkeypatch):
    pack(folder, tmp_path / "p", 8, workers=1, shard_size=7, progress="none")
    cfg = _cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "p"), "data.image_size": None,
                  "data.stream": True, "data.val_fraction": 0.25, "data.classes": [2, 0], "augment.hflip": True})
    data = D.load_run_data(cfg, CPU)
    assert data.train.streamed and data.info.num_classes == 2 and data.info.image_size == (8, 8)
    assert data.info.classes == ("c2", "c0") and len(data.test) == 4
    index = json.loads((tmp_path / "p" / "index.json").read_text())  # the pack's own statistics, read here
    assert data.info.mean == tuple(index["mean"]) and data.info.std == tuple(index["std"])
    assert data.info.in_chans == 3 and data.num_workers == 0 and data.device == CPU
    assert data.augment.cfg == cfg.augment and data.augment.num_classes == 2  # the run's, for its classes
    pack(folder, tmp_path / "grey", 8, workers=1, in_chans=1, progress="none")
    grey = D.load_run_data(_cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "grey"),
                                   "data.image_size": None, "data.stream": True}), CPU)
    assert grey.info.in_chans == 1 and len(grey.info.mean) == 1
    rows = sorted(data.train.rows.tolist() + data.val.rows.tolist())
    assert len(rows) == 12 and set(data.train.labels[rows].tolist()) == {0, 1}
    resized = D.load_run_data(_cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "p"),
                                      "data.image_size": 4, "data.stream": True}), CPU)
    assert resized.info.image_size == (4, 4) and len(resized.train) == 18
    held = D.load_run_data(_cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "p"),
                                   "data.image_size": None, "data.stream": "auto"}), CPU)
    assert not held.train.streamed and len(held.train) == 18  # small: held in memory
    for limit, streamed in ((18 * 3 * 8 * 8 - 1, True), (18 * 3 * 8 * 8, False)):  # the decoded train split's bytes
        monkeypatch.setattr(D, "STREAM_BYTES", limit)
        assert D.load_run_data(_cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "p"),
                                       "data.image_size": None, "data.stream": "auto"}), CPU).train.streamed == streamed


def test_an_image_folder_streams_its_test_split_with_the_training_classes(folder):
    cfg = _cfg(**{"data.dataset": "imagefolder", "data.root": str(folder), "data.image_size": None,
                  "data.stream": True, "data.test_subset": 4, "data.subset": "first"})
    data = D.load_run_data(cfg, CPU)
    assert data.train.streamed and len(data.train) == 18 and data.val is None
    assert data.test.rows.tolist() == [0, 1, 2, 3] and data.info.classes == ("c0", "c1", "c2")
    assert data.info.image_size == (8, 8) and data.info.num_classes == 3 and data.device == CPU
    assert data.test.images.shape == (6, 3, 8, 8) and data.test.images.classes == ["c0", "c1", "c2"]  # train's size
    x, _ = next(iter(D.eval_loader(data.test, data, 2, DistInfo())))
    assert x.shape == (2, 3, 8, 8)
    sized = D.load_run_data(_cfg(**{"data.dataset": "imagefolder", "data.root": str(folder), "data.image_size": 4,
                                    "data.stream": True}), CPU)
    assert sized.info.image_size == (4, 4) and sized.train.images.image_size == sized.test.images.image_size == 4


def test_an_image_folder_streams_when_auto_finds_it_large_and_a_folder_without_train_is_named(folder, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setattr(D, "STREAM_BYTES", 18 * 3 * 8 * 8 - 1)
    data = D.load_run_data(_cfg(**{"data.dataset": "imagefolder", "data.root": str(folder), "data.image_size": None,
                                   "data.stream": "auto"}), CPU)
    assert data.train.streamed and data.train.images.shape == (18, 3, 8, 8)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match=r"has no train/ folder"):  # load_dataset's sentence: where it looked
        D.load_run_data(_cfg(**{"data.dataset": "imagefolder", "data.root": str(tmp_path / "empty"),
                                "data.stream": True}), CPU)


def test_a_streamed_source_needs_an_existing_root(tmp_path):
    for ds in ("packed", "imagefolder"):
        with pytest.raises(BadInput, match=rf"^data.dataset={ds} needs data.root=DIR \("):
            D.load_run_data(_cfg(**{"data.dataset": ds, "data.stream": True}), CPU)
        with pytest.raises(BadInput, match=r"^data.root=.*nowhere does not exist; give the folder that holds the "
                                           r"data$"):
            D.load_run_data(_cfg(**{"data.dataset": ds, "data.stream": True, "data.root": str(tmp_path / "nowhere")}),
                            CPU)
    with pytest.raises(BadInput, match=r"the folder written by `mlplab pack`"):
        D.load_run_data(_cfg(**{"data.dataset": "packed", "data.stream": True}), CPU)
    with pytest.raises(BadInput, match=r"a folder holding train/<class>/<image>"):
        D.load_run_data(_cfg(**{"data.dataset": "imagefolder", "data.stream": True}), CPU)


def test_streamed_random_subsets_are_the_run_seeds_rows(folder, tmp_path):
    pack(folder, tmp_path / "p", 8, workers=1, shard_size=7, progress="none")
    data = D.load_run_data(_cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "p"), "data.image_size": None,
                                   "data.stream": True, "data.subset": "random", "data.train_subset": 5,
                                   "data.test_subset": 4, "run.seed": 5}), CPU)
    for split, n, got in ((18, 5, data.train), (6, 4, data.test)):
        want = sorted(torch.randperm(split, generator=torch.Generator().manual_seed(5))[:n].tolist())
        assert got.rows.tolist() == want
    first = D.load_run_data(_cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "p"), "data.image_size": None,
                                    "data.stream": True, "data.train_subset": 5, "data.classes": [1, 2]}), CPU)
    ones = [i for i, c in enumerate(first.train.labels.tolist()) if c >= 0]
    assert first.train.rows.tolist() == ones[:5]


class _Recorded:
    """Replaces the three loader classes in train.data: what each is built with, then the real one."""

    def __init__(self, monkeypatch):
        self.calls = []
        for name in ("DeviceLoader", "PackedLoader", "StreamingLoader"):
            real = getattr(D, name)

            def build(*args, _real=real, _name=name, **kw):
                self.calls.append((_name, args, kw))
                return _real(*args, **kw)
            monkeypatch.setattr(D, name, build)

    def last(self):
        return self.calls[-1]


def _same(kw, want):
    """The recorded keyword arguments against the ones expected (tensors by value)."""
    assert set(kw) == set(want), set(kw) ^ set(want)
    for k, v in want.items():
        got = kw[k]
        assert (torch.equal(got, v) if isinstance(v, torch.Tensor) else got == v), (k, got, v)


def test_each_loader_is_built_with_the_splits_rows_statistics_and_the_documented_seeds(folder, tmp_path,
                                                                                       monkeypatch):
    """The augmentation of (run.seed, epoch, rank) is drawn from derive_seed(run.seed, "augment",
    epoch, rank) (docs/training.md), the epoch's order from its shard; evaluation neither shuffles
    nor augments nor drops; a pack is read by data.num_workers threads (0: 2), an image folder by
    data.num_workers processes."""
    rec = _Recorded(monkeypatch)
    data = D.load_run_data(_cfg(**{"data.train_subset": 40, "data.test_subset": 10, "augment.hflip": True,
                                   "data.num_workers": 3}), CPU)
    stats = dict(mean=data.info.mean, std=data.info.std)
    dist = DistInfo(rank=1, world_size=2)
    D.train_loader(data, 3, 4, 7, dist, micro_batches=2)
    name, (images, labels, batch), kw = rec.last()
    assert name == "DeviceLoader" and images is data.train.images and labels is data.train.labels and batch == 4
    _same(kw, dict(shuffle=False, drop_last=True, augment=data.augment, seed=derive_seed(7, "augment", 3, 1),
                   micro_batches=2, device=CPU, indices=shard_indices(40, 3, 7, dist), **stats))
    assert data.augment.cfg.hflip and data.augment.cfg == make_config(None, {"augment.hflip": True}).augment
    D.eval_loader(data.test, data, 5, dist)
    _same(rec.last()[2], dict(shuffle=False, drop_last=False, augment=None, seed=0, micro_batches=1, device=CPU,
                              indices=torch.tensor([1, 3, 5, 7, 9]), **stats))
    assert rec.last()[2]["indices"].dtype == torch.int64
    D.eval_loader(data.test, data, 5, DistInfo())
    assert rec.last()[2]["indices"] is None  # one process: every example, in order
    meta = torch.device("meta")  # splits held on an accelerator: their rows are chosen there, not copied over
    held = D.load_run_data(_cfg(**{"data.train_subset": 40, "data.test_subset": 10}), meta)
    D.train_loader(held, 0, 4, 7, dist)
    assert rec.last()[2]["indices"].device == rec.last()[2]["device"] == meta
    D.eval_loader(held.test, held, 5, dist)
    assert rec.last()[2]["indices"].device == rec.last()[2]["device"] == meta

    pack(folder, tmp_path / "p", 8, workers=1, shard_size=7, progress="none")
    for workers, threads in ((0, 2), (3, 3)):
        packed = D.load_run_data(_cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "p"),
                                         "data.image_size": 4, "data.stream": True, "data.num_workers": workers,
                                         "data.classes": [1, 2]}), CPU)
        rows = packed.train.rows
        stats = dict(mean=packed.info.mean, std=packed.info.std)
        loader = D.train_loader(packed, 1, 3, 7, DistInfo(), start=2)
        name, (images, labels, batch), kw = rec.last()
        assert name == "PackedLoader" and images is packed.train.images and labels is packed.train.labels
        _same(kw, dict(shuffle=False, drop_last=True, augment=packed.augment, seed=derive_seed(7, "augment", 1, 0),
                       micro_batches=1, device=CPU, indices=rows[shard_indices(12, 1, 7, DistInfo())],
                       threads=threads, image_size=(4, 4), **stats))
        assert loader.state_dict()["position"] == 2 and loader.state_dict()["epoch"] == loader.epoch
        x, _ = next(iter(loader))
        assert x.shape == (3, 3, 4, 4)  # the pack's 8x8 images resized as read
        D.eval_loader(packed.test, packed, 5, DistInfo(rank=0, world_size=3))
        _same(rec.last()[2], dict(shuffle=False, drop_last=False, augment=None, seed=0, micro_batches=1, device=CPU,
                                  indices=packed.test.rows[[0, 3]], threads=threads, image_size=(4, 4), **stats))

    D.eval_loader(packed.test, packed, 5, DistInfo())
    assert torch.equal(rec.last()[2]["indices"], packed.test.rows) and len(packed.test.rows) == 4

    streamed = D.load_run_data(_cfg(**{"data.dataset": "imagefolder", "data.root": str(folder),
                                       "data.image_size": None, "data.stream": True, "data.num_workers": 0}), CPU)
    D.eval_loader(streamed.test, streamed, 2, DistInfo())
    name, (dataset, batch), kw = rec.last()
    assert name == "StreamingLoader" and dataset is streamed.test.images and batch == 2
    _same(kw, dict(shuffle=False, drop_last=False, augment=None, seed=0, micro_batches=1, device=CPU, indices=None,
                   num_workers=0, mean=streamed.info.mean, std=streamed.info.std))
    streamed.num_workers, streamed.device = 2, meta
    D.train_loader(streamed, 0, 2, 1, DistInfo())
    assert rec.last()[2]["device"] == meta and rec.last()[2]["indices"].device == CPU  # read on the host
    assert rec.last()[2]["num_workers"] == 2 and rec.last()[2]["indices"].tolist() == \
        shard_indices(18, 0, 1, DistInfo()).tolist()
    streamed.device = None  # RunData built without a device: batches stay on the host
    D.eval_loader(streamed.test, streamed, 2, DistInfo())
    assert rec.last()[2]["device"] == CPU


def test_the_datasets_are_read_as_the_data_section_says(monkeypatch):
    """Every split is loaded from data.root, downloading where data.download says, at data.image_size;
    the training and validation splits cut with the split seed."""
    calls = []
    real = D.load_dataset

    def recorded(*args, **kw):
        calls.append((args, kw))
        return real(*args, **{k: v for k, v in kw.items() if k not in ("root", "download")})
    monkeypatch.setattr(D, "load_dataset", recorded)
    D.load_run_data(_cfg(**{"data.root": "/nowhere", "data.download": True, "data.val_fraction": 0.5}), CPU)
    assert [a for a, _ in calls] == [("synthetic", "train"), ("synthetic", "test"), ("synthetic", "val")]
    for (_, split), kw in calls:
        assert {k: kw[k] for k in ("root", "download", "image_size")} == {"root": "/nowhere", "download": True,
                                                                          "image_size": 8}
        assert kw.get("seed") == (D.SPLIT_SEED if split != "test" else None) and kw.get("val_fraction") in (0.5, None)
