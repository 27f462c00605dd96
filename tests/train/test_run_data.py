"""``train.data`` piece by piece: the subsets a run keeps (the first N, or the run seed's random N
in the data's order), ``data.classes`` relabelled in the order given (in memory and streamed),
where the splits are stored, the loaders' shards and the data's identity, each against an
expectation written here. (Disjoint splits for every seed: test_splits_oracle.py.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mlplab.data import load_dataset, pack
from mlplab.data.formats import png_bytes
from mlplab.errors import BadInput
from mlplab.train import data as D
from mlplab.train import make_config
from mlplab.train.distributed import DistInfo

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
    assert D._subset(s, 3, "first", 0).rows.tolist() == [0, 1, 2]
    pick = sorted(torch.randperm(4, generator=torch.Generator().manual_seed(5))[:3].tolist())
    assert D._subset(kept, 3, "random", 5).rows.tolist() == [[0, 2, 3, 4][i] for i in pick]
    assert D._subset(kept, None, "random", 5) is kept and D._subset(kept, 4, "first", 0) is kept


def test_splits_are_stored_where_data_on_device_says(monkeypatch):
    split = D.Split(torch.zeros(300, 1, 1, 1, dtype=torch.uint8), torch.zeros(300, dtype=torch.int64))
    assert D._on_device(True, split, CPU) and not D._on_device(False, split, CPU)
    assert D._on_device("auto", split, CPU)  # CPU: the data is where the run is anyway
    for memory, held in ((1001, True), (1000, False)):  # on a GPU: 300 bytes of images < 30% of its free memory
        monkeypatch.setattr(D, "available_memory", lambda device, m=memory: m)
        assert D._on_device("auto", split, torch.device("cuda")) == held, memory
    kept = D.load_run_data(_cfg(**{"data.on_device": False, "data.val_fraction": 0.1}), CPU)
    assert kept.train.images.device == kept.val.images.device == kept.test.images.device == CPU


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


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An image folder: 3 classes of 6, 6 and 6 distinct 8x8 training images, 2 test images each."""
    root, rng = tmp_path_factory.mktemp("rundata") / "folder", np.random.default_rng(1)
    for split, n in (("train", 6), ("test", 2)):
        for c in range(3):
            (root / split / f"c{c}").mkdir(parents=True)
            for i in range(n):
                (root / split / f"c{c}" / f"{i}.png").write_bytes(png_bytes(rng.integers(0, 256, (3, 8, 8),
                                                                                         dtype=np.uint8)))
    return root


def test_a_pack_streams_with_its_own_classes_size_and_statistics(folder, tmp_path, monkeypatch):
    pack(folder, tmp_path / "p", 8, workers=1, shard_size=7, progress="none")
    cfg = _cfg(**{"data.dataset": "packed", "data.root": str(tmp_path / "p"), "data.image_size": None,
                  "data.stream": True, "data.val_fraction": 0.25, "data.classes": [2, 0]})
    data = D.load_run_data(cfg, CPU)
    assert data.train.streamed and data.info.num_classes == 2 and data.info.image_size == (8, 8)
    assert data.info.classes == ("c2", "c0") and len(data.test) == 4
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
    assert data.info.image_size == (8, 8) and data.info.num_classes == 3


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
