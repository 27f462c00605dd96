"""The packed reader (``mlplab.data.packed``) on packs written by hand from the format's
description: what opening checks, each refusal's message, ``take`` against numpy fancy indexing,
and ``verify_pack``."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from loader_helpers import IMAGES, LABELS, write_pack

from mlplab.data.download import BadData
from mlplab.data.packed import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_NAME,
    Pack,
    is_pack,
    sha256_file,
    shard_files,
    shard_probe,
    verify_pack,
)
from mlplab.errors import BadInput


def _index(root):
    return json.loads((root / INDEX_NAME).read_text())


def _rewrite(root, **changes):
    (root / INDEX_NAME).write_text(json.dumps({**_index(root), **changes}))


def test_the_format_constants_and_file_names():
    assert (FORMAT_NAME, FORMAT_VERSION, INDEX_NAME) == ("mlplab.packed", 1, "index.json")
    assert shard_files("val", 12) == ("val-00012.images.npy", "val-00012.labels.npy")


def test_a_pack_opens_with_its_fields(tmp_path):
    root = write_pack(tmp_path / "p")
    assert is_pack(root) and not is_pack(tmp_path) and not is_pack(tmp_path / "nothing")
    p = Pack(str(root))
    assert p.root == root and p.image_size == (4, 4) and p.in_chans == 3 and p.num_classes == 3
    assert p.classes == ["c0", "c1", "c2"] and p.mean == (0.4, 0.5, 0.6) and p.std == (0.2, 0.25, 0.3)
    assert p.index == _index(root) and list(p.splits) == ["train"]
    split = p.split("train")
    assert len(split) == 11 and split.shape == (11, 3, 4, 4) and split.starts.tolist() == [0, 4, 8, 11]
    assert split.labels.dtype == torch.int64 and torch.equal(split.labels, LABELS)
    assert all(isinstance(s, np.memmap) for s in split.shards)  # images stay on disk


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_take_is_numpy_fancy_indexing(tmp_path, seed):
    split = Pack(write_pack(tmp_path / "p", shard=3)).split("train")
    rows = np.random.default_rng(seed).integers(0, 11, 17)  # repeats, any order, every shard
    np.testing.assert_array_equal(split.take(rows), IMAGES.numpy()[rows])
    np.testing.assert_array_equal(split.take(torch.from_numpy(rows)), IMAGES.numpy()[rows])
    out = np.zeros((17, 3, 4, 4), np.uint8)
    assert split.take(rows, out=out) is out
    np.testing.assert_array_equal(out, IMAGES.numpy()[rows])
    assert split.take(np.array([10, 0])).tolist() == IMAGES.numpy()[[10, 0]].tolist()
    assert split.take(np.zeros(0, np.int64)).shape == (0, 3, 4, 4)
    for bad in ([11], [0, -1]):
        with pytest.raises(IndexError, match=r"out of range for 11 images"):
            split.take(np.array(bad))


def test_test_falls_back_to_val_and_a_missing_split_is_bad_input(tmp_path):
    root = write_pack(tmp_path / "p")
    entry = _index(root)["splits"]["train"]
    _rewrite(root, splits={"train": entry, "val": entry})
    p = Pack(root)
    assert len(p.split("test")) == 11
    with pytest.raises(BadInput, match=rf"^{root} has no 'extra' split \(it has train, val\); hold one out of "
                                       r"train with data\.val_fraction$"):
        p.split("extra")
    _rewrite(root, splits={"train": entry, "test": {"count": 4, "shards": entry["shards"][:1]}, "val": entry})
    assert len(Pack(root).split("test")) == 4  # a real test split is used
    _rewrite(root, splits={"train": entry})
    with pytest.raises(BadInput, match="has no 'test' split"):
        Pack(root).split("test")


def test_a_folder_without_an_index_says_how_to_make_or_finish_one(tmp_path):
    with pytest.raises(BadInput, match=rf"^{tmp_path} is not a packed dataset \(no index.json\); make one with "
                                       r"`mlplab pack SRC DST --image-size N`$"):
        Pack(tmp_path)
    (tmp_path / ".pack-state.json").write_text("{}")
    with pytest.raises(BadInput, match=r"no index.json\); it holds an unfinished pack: run the same `mlplab pack` "
                                       r"again to finish it$"):
        Pack(tmp_path)


@pytest.mark.parametrize("change,match", [
    ({"format": "other"}, r"format 'other' version 1; this mlplab reads 'mlplab.packed' version 1$"),
    ({"version": 2}, r"format 'mlplab.packed' version 2; this mlplab reads"),
    ({"image_size": None}, r"missing or malformed field \(TypeError: .*\); pack again$"),
    ({"in_chans": "three"}, r"missing or malformed field \(ValueError: "),
    ({"classes": 3}, r"missing or malformed field \(TypeError: "),
    ({"mean": ["x"]}, r"missing or malformed field \(ValueError: "),
    ({"std": None}, r"missing or malformed field \(TypeError: "),
    ({"splits": []}, r"missing or malformed field \(AttributeError: "),
    ({"splits": {"train": {"shards": [{"images": "a", "labels": "b"}]}}}, r"missing or malformed field \(KeyError: "
                                                                           r"'count'\)"),
    ({"splits": {"train": {"shards": [{"images": "a", "count": 1}]}}}, r"\(KeyError: 'labels'\)"),
    ({"splits": {"train": {"shards": [{"labels": "a", "count": 1}]}}}, r"\(KeyError: 'images'\)"),
    ({"splits": {"train": {"shards": [{"images": "a", "labels": "b", "count": "x"}]}}}, r"\(ValueError: "),
])
def test_a_malformed_index_is_bad_data(tmp_path, change, match):
    root = write_pack(tmp_path / "p")
    _rewrite(root, **change)
    with pytest.raises(BadData, match=match):
        Pack(root)


def test_missing_fields_and_unreadable_indexes(tmp_path):
    root = write_pack(tmp_path / "p")
    index = _index(root)
    for key in ("image_size", "in_chans", "classes", "mean", "std", "splits"):
        (root / INDEX_NAME).write_text(json.dumps({k: v for k, v in index.items() if k != key}))
        with pytest.raises(BadData, match=rf"missing or malformed field \(KeyError: '{key}'\)"):
            Pack(root)
    (root / INDEX_NAME).write_text("[1, 2]")
    with pytest.raises(BadData, match=rf"^{root / INDEX_NAME}: expected a JSON object$"):
        Pack(root)
    (root / INDEX_NAME).write_bytes(b"\xff\xfe{")
    with pytest.raises(BadData, match=r"cannot read \(.*\); the file is truncated or not a pack index — pack again "
                                      r"into a new folder$"):
        Pack(root)


def test_a_shard_that_disagrees_with_the_index_is_refused(tmp_path):
    root = write_pack(tmp_path / "p")
    entry = _index(root)["splits"]["train"]
    entry["shards"][1]["count"] = 5
    _rewrite(root, splits={"train": entry})
    shard = root / "train-00001.images.npy"
    with pytest.raises(BadData, match=rf"^{shard}: holds uint8 \(4, 3, 4, 4\), the index says uint8 \(5, 3, 4, 4\); "
                                      r"the pack is damaged — pack again$"):
        Pack(root).split("train")
    root = write_pack(tmp_path / "q")
    np.save(root / "train-00002.labels.npy", np.zeros(3, np.int32))
    with pytest.raises(BadData, match=r"train-00002.labels.npy: holds int32 \(3,\), the index says int64 \(3,\)"):
        Pack(root).split("train")
    np.save(root / "train-00002.labels.npy", np.zeros(3, np.int64))
    np.save(root / "train-00000.images.npy", IMAGES[:4].numpy().astype(np.int16))
    with pytest.raises(BadData, match=r"train-00000.images.npy: holds int16 \(4, 3, 4, 4\), the index says uint8"):
        Pack(root).split("train")
    (root / "train-00000.images.npy").unlink()
    with pytest.raises(BadData, match=r"train-00000.images.npy: cannot read the shard \(.*\); it is missing or "
                                      r"truncated — pack again into a new folder$"):
        Pack(root).split("train")
    _rewrite(root, splits={"train": {"count": 0, "shards": []}})
    empty = Pack(root).split("train")
    assert len(empty) == 0 and empty.labels.dtype == torch.int64 and len(empty.labels) == 0


def _with_sha(root):
    index = _index(root)
    for sh in index["splits"]["train"]["shards"]:
        sh["sha256"] = {k: hashlib.sha256((root / sh[k]).read_bytes()).hexdigest() for k in ("images", "labels")}
    (root / INDEX_NAME).write_text(json.dumps(index))
    return root


def test_verify_pack_counts_files_and_names_the_bad_one(tmp_path):
    root = _with_sha(write_pack(tmp_path / "p"))
    assert verify_pack(root) == 6  # 3 shards x (images, labels)
    labels = root / "train-00001.labels.npy"
    blob = bytearray(labels.read_bytes())
    blob[-1] ^= 1
    labels.write_bytes(bytes(blob))
    with pytest.raises(BadData, match=rf"^{labels}: sha256 differs from index.json; the shard is corrupt — pack "
                                      r"again into a new folder$"):
        verify_pack(root)
    labels.unlink()
    with pytest.raises(BadData, match=rf"^{labels}: missing; pack again$"):
        verify_pack(root)


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 100])
def test_sha256_file_reads_in_chunks(tmp_path, size):
    data = bytes(range(256))[:size] * 3
    path = tmp_path / "f"
    path.write_bytes(data)
    assert sha256_file(path, chunk=8) == hashlib.sha256(data).hexdigest() == sha256_file(path)


class _Reads:
    """An open file that records the size of every read."""

    def __init__(self, f, reads):
        self.f, self.reads = f, reads

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def seek(self, at):
        self.f.seek(at)

    def read(self, n=-1):
        block = self.f.read(n)
        self.reads.append(len(block) if n is not None and n >= 0 else "whole file")
        return block


def _record_reads(monkeypatch) -> list:
    from mlplab.data import packed

    reads, real_open = [], open
    monkeypatch.setattr(packed, "open", lambda p, mode="r": _Reads(real_open(p, mode), reads), raising=False)
    return reads


def test_sha256_file_holds_one_chunk_at_a_time(tmp_path, monkeypatch):
    """A shard can be gigabytes: the checksum reads it chunk by chunk, never whole."""
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 4)
    reads = _record_reads(monkeypatch)
    assert sha256_file(path, chunk=100) == hashlib.sha256(bytes(range(256)) * 4).hexdigest()
    assert reads == [100] * 10 + [24, 0]


def test_a_pack_path_may_start_with_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write_pack(tmp_path / "p")
    assert Pack("~/p").root == tmp_path / "p" and len(Pack("~/p").split("train")) == 11


def _probe_oracle(data: bytes) -> str:
    """shard_probe from its description: the size, then 8 blocks of 4 KiB at evenly spaced
    offsets from the first byte to the last block."""
    h = hashlib.sha256(str(len(data)).encode())
    for k in range(8):
        at = max(len(data) - 4096, 0) * k // 7
        h.update(data[at:at + 4096])
    return h.hexdigest()


@pytest.mark.parametrize("size", [0, 100, 4096, 4097, 51_200])
def test_shard_probe_is_the_size_and_eight_blocks(tmp_path, size):
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    path = tmp_path / "s.npy"
    path.write_bytes(data)
    assert shard_probe(path) == _probe_oracle(data)


def test_shard_probe_tells_other_content_and_other_sizes_apart(tmp_path, monkeypatch):
    data = bytearray(np.random.default_rng(0).integers(0, 256, 51_200, dtype=np.uint8).tobytes())
    path = tmp_path / "s.npy"
    path.write_bytes(bytes(data))
    probe = shard_probe(path)
    for at in (0, 6729 * 3 + 100, len(data) - 1):  # inside the first, a middle and the last block
        changed = bytearray(data)
        changed[at] ^= 1
        path.write_bytes(bytes(changed))
        assert shard_probe(path) != probe
    path.write_bytes(bytes(data) + b"\0")
    assert shard_probe(path) != probe
    changed = bytearray(data)
    changed[5000] ^= 1  # between the first two blocks: the full sha256 (verify_pack) tells
    path.write_bytes(bytes(changed))
    assert shard_probe(path) == probe
    reads = _record_reads(monkeypatch)
    shard_probe(path)
    assert reads == [4096] * 8  # 32 KiB, whatever the size


def _with_probes(root):
    index = _index(root)
    for sh in index["splits"]["train"]["shards"]:
        sh["probe"] = shard_probe(root / sh["images"])
    (root / INDEX_NAME).write_text(json.dumps(index))
    return root


def test_opening_checks_each_shards_size_labels_and_images_against_the_index(tmp_path):
    """Another pack's shard of the same shape (the images or the labels), or a file grown past
    its header, is refused when the split is opened, before anything is read from it."""
    root = _with_probes(_with_sha(write_pack(tmp_path / "p")))
    assert len(Pack(root).split("train")) == 11
    images = root / "train-00001.images.npy"
    np.save(images, IMAGES[4:8].numpy() ^ 1)
    with pytest.raises(BadData, match=rf"^{images}: its content differs from what index.json records \(another "
                                      r"pack's images, or changed since it was packed\); pack again into a new "
                                      r"folder$"):
        Pack(root).split("train")
    root = _with_probes(_with_sha(write_pack(tmp_path / "q")))
    np.save(root / "train-00001.labels.npy", LABELS[4:8].numpy()[::-1].astype(np.int64))
    with pytest.raises(BadData, match=r"train-00001\.labels\.npy: its content differs"):
        Pack(root).split("train")
    root = _with_probes(_with_sha(write_pack(tmp_path / "r")))
    size = (root / "train-00002.images.npy").stat().st_size
    with open(root / "train-00002.images.npy", "ab") as f:
        f.write(b"\0" * 7)
    with pytest.raises(BadData, match=rf"train-00002\.images\.npy: {size + 7} bytes, but its header says {size}; "
                                      r"the pack is damaged — pack again into a new folder$"):
        Pack(root).split("train")
    old = write_pack(tmp_path / "old")  # written before indexes held probes and sha256: opened on headers and sizes
    np.save(old / "train-00001.images.npy", IMAGES[4:8].numpy() ^ 1)
    assert len(Pack(old).split("train")) == 11
