"""``mlplab pack`` from the shards people download: WebDataset tars (timm's ``imagenet-1k-wds``
layout) and Parquet files (the Hub's layout of ``imagenet-w21-p``). The oracle is the pack of the
same images as an image folder; then resuming, workers, and every bad input in one sentence."""
from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from mlplab import cli
from mlplab.data import BadData, load_dataset, pack, verify_pack
from mlplab.data import packing as packing_mod
from mlplab.data.formats import png_bytes
from mlplab.errors import BadInput

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SPLITS = {"train": (4, 3, 3), "val": (1, 2, 1)}  # images per class


def _images(seed=0):
    """{split: [(class, png bytes)]} in the order an image folder lists them (class, then name)."""
    rng = np.random.default_rng(seed)
    return {split: [(c, png_bytes(rng.integers(0, 256, (3, 10, 12), dtype=np.uint8)))
                    for c, n in enumerate(counts) for _ in range(n)] for split, counts in SPLITS.items()}


def write_folder(root: Path, images) -> Path:
    for split, items in images.items():
        for i, (c, blob) in enumerate(items):
            d = root / split / f"class{c}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{i:03d}.png").write_bytes(blob)
    return root


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def write_tars(root: Path, images, per_shard=4, label="cls", prefix="imagenet1k") -> Path:
    """timm's imagenet-1k-wds layout: {prefix}-{train,validation}-NNNN.tar of key.png + key.cls
    (``label="json"``: key.json with a "label" field, as well as other metadata)."""
    root.mkdir(parents=True, exist_ok=True)
    for split, items in images.items():
        word = "validation" if split == "val" else split
        for k in range(0, len(items), per_shard):
            with tarfile.open(root / f"{prefix}-{word}-{k // per_shard:04d}.tar", "w") as tf:
                for i, (c, blob) in enumerate(items[k:k + per_shard], k):
                    key = f"{split}_{i:06d}"
                    _add(tf, f"{key}.png", blob)
                    if label == "cls":
                        _add(tf, f"{key}.cls", str(c).encode())
                    else:
                        _add(tf, f"{key}.json", json.dumps({"filename": f"{i}.png", "label": c}).encode())
    return root


def write_parquet(root: Path, images, rows_per_file=6, row_group_size=4, names=None, label="label") -> Path:
    """The Hub's layout: data/{train,validation}-NNNNN-of-NNNNN.parquet with an ``image`` struct
    (bytes, path) and an integer ``label`` (a ClassLabel with ``names`` in the schema metadata)."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    for split, items in images.items():
        word = "validation" if split == "val" else split
        parts = [items[k:k + rows_per_file] for k in range(0, len(items), rows_per_file)]
        for k, part in enumerate(parts):
            table = pa.table({
                "image": pa.array([{"bytes": b, "path": f"{word}/{k}_{i}.png"} for i, (_, b) in enumerate(part)],
                                  pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                label: pa.array([c for c, _ in part], pa.int64()),
            })
            if names:
                features = {"image": {"_type": "Image"}, label: {"names": names, "_type": "ClassLabel"}}
                table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
            pq.write_table(table, root / "data" / f"{word}-{k:05d}-of-{len(parts):05d}.parquet",
                           row_group_size=row_group_size)
    return root


@pytest.fixture(scope="module")
def images():
    return _images()


@pytest.fixture(scope="module")
def reference(images, tmp_path_factory):
    """The pack of the same images as an image folder: arrays per split."""
    root = tmp_path_factory.mktemp("ref")
    pack(write_folder(root / "folder", images), root / "pack", 8, workers=1, shard_size=5, progress="none")
    return {s: load_dataset("packed", "train" if s == "train" else "test", root=root / "pack")
            for s in ("train", "val")}


def _assert_same_as_folder(dst: Path, reference) -> None:
    for split, ref in reference.items():
        got = load_dataset("packed", "train" if split == "train" else "test", root=dst)
        np.testing.assert_array_equal(got.images.numpy(), ref.images.numpy())
        np.testing.assert_array_equal(got.labels.numpy(), ref.labels.numpy())


@pytest.mark.parametrize("label", ["cls", "json"])
def test_webdataset_tars_pack_as_the_same_images_in_a_folder(images, reference, tmp_path, label):
    src = write_tars(tmp_path / "wds", images, label=label)
    index = pack(src, tmp_path / "p", 8, workers=1, shard_size=5, progress="none")
    assert index["source"] == f"webdataset:{src.resolve()}" and index["classes"] == ["0", "1", "2"]
    assert index["splits"]["train"]["count"] == 10 and index["splits"]["val"]["count"] == 4
    _assert_same_as_folder(tmp_path / "p", reference)
    assert verify_pack(tmp_path / "p") == 2 * (2 + 1)


def test_parquet_packs_as_the_same_images_with_the_hubs_class_names(images, reference, tmp_path):
    src = write_parquet(tmp_path / "hub", images, names=["cat", "dog", "eel"])
    index = pack(src, tmp_path / "p", 8, workers=1, shard_size=5, progress="none")
    assert index["source"] == f"parquet:{src.resolve()}" and index["classes"] == ["cat", "dog", "eel"]
    _assert_same_as_folder(tmp_path / "p", reference)
    # decoding processes, one row group per task: the same shards (same sha256)
    assert pack(src, tmp_path / "w", 8, workers=2, shard_size=5, progress="none")["splits"] == index["splits"]


def test_one_file_no_split_names_and_string_labels(images, tmp_path):
    src = tmp_path / "one"
    src.mkdir()
    rows = images["train"]
    table = pa.table({"img": pa.array([b for _, b in rows], pa.binary()),
                      "synset": pa.array([f"n0{c}" for c, _ in rows])})
    pq.write_table(table, src / "shard.parquet")
    index = pack(src / "shard.parquet", tmp_path / "p", 8, workers=1, progress="none", image_key="img",
                 label_key="synset")
    assert index["classes"] == ["n00", "n01", "n02"] and list(index["splits"]) == ["train"]
    assert load_dataset("packed", "train", root=tmp_path / "p").labels.tolist() == [c for c, _ in rows]


def test_a_killed_pack_of_tars_resumes_and_keeps_finished_shards(images, reference, tmp_path, monkeypatch):
    src, dst = write_tars(tmp_path / "wds", images), tmp_path / "p"
    real = packing_mod._save_npy

    def dying(path, array):
        if path.name == "train-00001.images.npy":
            raise KeyboardInterrupt
        return real(path, array)

    monkeypatch.setattr(packing_mod, "_save_npy", dying)
    with pytest.raises(KeyboardInterrupt):
        pack(src, dst, 8, workers=1, shard_size=5, progress="none")
    kept = (dst / "train-00000.images.npy").stat().st_mtime_ns
    monkeypatch.setattr(packing_mod, "_save_npy", real)
    pack(src, dst, 8, workers=1, shard_size=5, progress="none")
    assert (dst / "train-00000.images.npy").stat().st_mtime_ns == kept
    _assert_same_as_folder(dst, reference)


def _damage_member(tar: Path, member: str) -> None:
    """Overwrite the data of ``member`` in place with bytes that are not an image."""
    with tarfile.open(tar) as tf:
        m = tf.getmember(member)
    with open(tar, "r+b") as f:
        f.seek(m.offset_data)
        f.write(b"\0" * m.size)


def test_a_corrupt_member_is_refused_naming_the_shard_and_member(images, tmp_path, capsys):
    src = write_tars(tmp_path / "wds", images)
    _damage_member(src / "imagenet1k-train-0001.tar", "train_000005.png")
    argv = ["pack", str(src), str(tmp_path / "p"), "--image-size", "8", "--workers", "2", "--progress", "none"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mlplab pack: error: {src / 'imagenet1k-train-0001.tar'}: member train_000005.png cannot "
                          "be decoded as an image (") and err.endswith("the shard is damaged: download it again")
    assert "\n" not in err and not (tmp_path / "p" / "index.json").exists()
    # the shard downloaded again: the same command packs (the unfinished pack is started again)
    write_tars(tmp_path / "wds", images)
    assert cli.main(argv) == 0


def test_a_corrupt_parquet_row_is_refused_naming_file_row_and_path(images, tmp_path):
    src = write_parquet(tmp_path / "hub", {"train": images["train"][:5] + [(0, b"not an image")]})
    with pytest.raises(BadData, match=r"train-00000-of-00001\.parquet: row 1 of row group 1 \(train/0_5\.png\) "
                                      r"cannot be decoded as an image \(.*\); the file is damaged: download it again"):
        pack(src, tmp_path / "p", 8, workers=1, progress="none")


def test_a_missing_label_column_names_the_columns_and_the_option(images, tmp_path, capsys):
    src = write_parquet(tmp_path / "hub", images, label="target")
    file = src / "data" / "train-00000-of-00002.parquet"
    with pytest.raises(BadInput, match=f"{file} has no column 'label' \\(columns: image, target\\); name the label "
                                       "column with --label-key"):
        pack(src, tmp_path / "p", 8, workers=1, progress="none")
    assert cli.main(["pack", str(src), str(tmp_path / "p"), "--image-size", "8", "--workers", "1", "--progress",
                     "none", "--label-key", "target"]) == 0
    assert "3 classes, train 10, val 4 images" in capsys.readouterr().out


def test_damaged_shards_and_samples_are_one_sentence(images, tmp_path):
    src = write_tars(tmp_path / "wds", images)
    tar = src / "imagenet1k-train-0000.tar"
    tar.write_bytes(tar.read_bytes()[:700])  # truncated inside the first member
    with pytest.raises(BadData, match=f"{tar}: not a readable tar file \\(.*\\); download it again"):
        pack(src, tmp_path / "p", 8, progress="none")
    src = tmp_path / "nolabel"
    src.mkdir()
    with tarfile.open(src / "a.tar", "w") as tf:
        _add(tf, "x1.png", images["train"][0][1])
        _add(tf, "x1.txt", b"a caption")
    with pytest.raises(BadData, match=r"a\.tar: sample x1 has no label: no \.cls member and no 'label' in a \.json; "
                                      "name the label with --label-key"):
        pack(src, tmp_path / "p", 8, progress="none")
    with tarfile.open(src / "a.tar", "w") as tf:
        _add(tf, "x1.cls", b"1")
    with pytest.raises(BadData, match=r"a\.tar: sample x1 has no image member \(\.jpg, \.jpeg, .*\.webp"):
        pack(src, tmp_path / "p", 8, progress="none")
    (src / "a.tar").write_bytes(b"not a tar at all" * 40)
    with pytest.raises(BadData, match="a.tar: not a readable tar file"):
        pack(src, tmp_path / "p", 8, progress="none")
    (src / "a.tar").unlink()
    (src / "b.tar.gz").write_bytes(b"\x1f\x8b")
    with pytest.raises(BadInput, match=r"b\.tar\.gz is a compressed tar, which cannot be read at random; "
                                       "decompress the shards"):
        pack(src, tmp_path / "p", 8, progress="none")
    (src / "c.parquet").write_bytes(b"PAR1 damaged")
    with pytest.raises(BadData, match=r"c\.parquet: not a readable Parquet file \(.*\); download it again"):
        pack(src / "c.parquet", tmp_path / "p", 8, progress="none")


def test_bad_layouts_and_labels_are_one_sentence(images, tmp_path):
    src = write_tars(tmp_path / "wds", images)
    (src / "extra-0000.tar").write_bytes((src / "imagenet1k-train-0000.tar").read_bytes())
    with pytest.raises(BadInput, match="extra-0000.tar names no split while other shards do"):
        pack(src, tmp_path / "p", 8, progress="none")
    (src / "extra-0000.tar").unlink()
    write_parquet(src, images)
    with pytest.raises(BadInput, match="holds both tar and Parquet shards"):
        pack(src, tmp_path / "p", 8, progress="none")
    shutil.rmtree(src / "data")
    (src / "imagenet1k-train-0000.tar").rename(src / "train-validation-0000.tar")
    with pytest.raises(BadInput, match=r"train-validation-0000\.tar names two splits \(train, validation\); rename "
                                       "it so that its path names one of train, validation \\(or val\\), test"):
        pack(src, tmp_path / "p", 8, progress="none")
    names = tmp_path / "names"
    names.mkdir()
    for split, classes in (("train", ["b", "a"]), ("val", ["c"])):
        pq.write_table(pa.table({"image": pa.array([b"x"] * len(classes), pa.binary()), "label": classes}),
                       names / f"{split}.parquet")
    with pytest.raises(BadData, match="the val split has the label 'c', which no train sample has"):
        pack(names, tmp_path / "p", 8, progress="none")
    pq.write_table(pa.table({"image": [1, 2], "label": [0, 1]}), names / "train.parquet")
    with pytest.raises(BadInput, match=r"train\.parquet: column 'image' is int64, not encoded images \(binary, or a "
                                       r"struct with 'bytes'\); name the image column with --image-key"):
        pack(names, tmp_path / "p", 8, progress="none")
    hub = write_parquet(tmp_path / "hub", images, names=["cat", "dog"])  # label 2 has no name
    with pytest.raises(BadData, match="labels run from 0 to 2, outside the 2 classes 0..1 of the metadata"):
        pack(hub, tmp_path / "p", 8, progress="none")
    with pytest.raises(BadInput, match="--image-key and --label-key name what tar and Parquet shards hold"):
        pack("cifar10", tmp_path / "p", 8, progress="none", label_key="y")
    assert not (tmp_path / "p").exists()


def test_parquet_without_pyarrow_names_the_extra(images, tmp_path, monkeypatch):
    src = write_parquet(tmp_path / "hub", images)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(BadInput, match=r"^reading Parquet files needs pyarrow, the extra 'parquet' of mlplab: "
                                       r"pip install 'mlplab\[parquet\]'$"):
        pack(src, tmp_path / "p", 8, progress="none")
