"""The packed format: what `pack` writes (readable by plain numpy), resuming a killed pack, the
checks on reading, PackedLoader (same batches as DeviceLoader, exact mid-epoch resume), bad input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mlplab import cli
from mlplab.data import (
    AugmentConfig,
    BadData,
    DeviceLoader,
    Pack,
    PackedLoader,
    build_augment,
    load_dataset,
    pack,
    verify_pack,
)
from mlplab.data import packing as packed_mod
from mlplab.data.formats import png_bytes
from mlplab.errors import BadInput


def write_folder(root: Path, per_class=(5, 4, 3), val=2, size=(12, 10), seed=0) -> Path:
    rng = np.random.default_rng(seed)
    for split, counts in (("train", per_class), ("val", (val,) * len(per_class))):
        for c, n in enumerate(counts):
            d = root / split / f"class{c}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                (d / f"{i}.png").write_bytes(png_bytes(rng.integers(0, 256, (3, *size), dtype=np.uint8)))
    return root


@pytest.fixture
def folder(tmp_path):
    return write_folder(tmp_path / "folder")


def test_pack_writes_npy_shards_and_an_index_plain_numpy_reads(folder, tmp_path):
    dst = tmp_path / "pack"
    index = pack(folder, dst, 8, workers=1, shard_size=5, progress="none")
    on_disk = json.loads((dst / "index.json").read_text())
    assert on_disk == index
    assert index["format"] == "mlplab.packed" and index["version"] == 1 and index["image_size"] == [8, 8]
    assert index["classes"] == ["class0", "class1", "class2"] and index["num_classes"] == 3
    assert index["splits"]["train"]["count"] == 12 and index["splits"]["val"]["count"] == 6
    assert [s["count"] for s in index["splits"]["train"]["shards"]] == [5, 5, 2]
    ref = load_dataset("imagefolder", "train", root=folder, image_size=8)
    xs = np.concatenate([np.load(dst / s["images"]) for s in index["splits"]["train"]["shards"]])
    ys = np.concatenate([np.load(dst / s["labels"]) for s in index["splits"]["train"]["shards"]])
    assert xs.dtype == np.uint8 and ys.dtype == np.int64
    np.testing.assert_array_equal(xs, ref.images.numpy())
    np.testing.assert_array_equal(ys, ref.labels.numpy())
    flat = xs.transpose(1, 0, 2, 3).reshape(3, -1) / 255.0
    np.testing.assert_allclose(index["mean"], flat.mean(1), atol=1e-6)
    np.testing.assert_allclose(index["std"], flat.std(1), atol=1e-6)
    assert not (dst / ".pack-state.json").exists()
    assert verify_pack(dst) == 2 * (3 + 2)
    # the same command again: verified, nothing rewritten
    before = {p.name: p.stat().st_mtime_ns for p in dst.iterdir()}
    assert pack(folder, dst, 8, workers=1, shard_size=5, progress="none") == index
    assert {p.name: p.stat().st_mtime_ns for p in dst.iterdir()} == before


def test_workers_give_the_same_pack(folder, tmp_path):
    a = pack(folder, tmp_path / "a", 8, workers=1, shard_size=100, progress="none")
    b = pack(folder, tmp_path / "b", 8, workers=2, shard_size=100, progress="none")
    assert a["splits"] == b["splits"]  # same sha256 per shard


def test_load_dataset_reads_a_pack_and_resizes(folder, tmp_path):
    pack(folder, tmp_path / "p", 8, workers=1, progress="none")
    d = load_dataset("packed", "test", root=tmp_path / "p")  # test -> val, as for image folders
    assert d.images.shape == (6, 3, 8, 8) and d.info.num_classes == 3 and d.split == "test"
    assert load_dataset("packed", "train", root=tmp_path / "p", image_size=4).images.shape == (12, 3, 4, 4)


def test_a_killed_pack_resumes_and_keeps_finished_shards(folder, tmp_path, monkeypatch):
    dst = tmp_path / "pack"
    real = packed_mod._save_npy
    calls = []

    def dying(path, array):
        if len(calls) == 3:  # shard 0 (images, labels) done, shard 1's images written, then killed
            raise KeyboardInterrupt
        calls.append(path.name)
        return real(path, array)

    monkeypatch.setattr(packed_mod, "_save_npy", dying)
    with pytest.raises(KeyboardInterrupt):
        pack(folder, dst, 8, workers=1, shard_size=5, progress="none")
    assert not (dst / "index.json").exists() and (dst / ".pack-state.json").exists()
    assert not [p for p in dst.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(BadInput, match="unfinished pack"):
        Pack(dst)
    kept = (dst / "train-00000.images.npy").stat().st_mtime_ns
    (dst / "train-00001.images.npy").write_bytes(b"damaged")  # not recorded as finished: rewritten anyway
    monkeypatch.setattr(packed_mod, "_save_npy", real)
    index = pack(folder, dst, 8, workers=1, shard_size=5, progress="none")
    assert (dst / "train-00000.images.npy").stat().st_mtime_ns == kept
    assert index == pack(folder, tmp_path / "fresh", 8, workers=1, shard_size=5, progress="none")
    verify_pack(dst)


def test_a_finished_shard_that_was_damaged_is_repacked(folder, tmp_path, monkeypatch):
    dst = tmp_path / "pack"
    real = packed_mod._save_npy
    calls = []

    def dying(path, array):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(path.name)
        return real(path, array)

    monkeypatch.setattr(packed_mod, "_save_npy", dying)
    with pytest.raises(KeyboardInterrupt):
        pack(folder, dst, 8, workers=1, shard_size=5, progress="none")
    monkeypatch.setattr(packed_mod, "_save_npy", real)
    blob = bytearray((dst / "train-00000.images.npy").read_bytes())
    blob[-1] ^= 0xFF
    (dst / "train-00000.images.npy").write_bytes(bytes(blob))
    pack(folder, dst, 8, workers=1, shard_size=5, progress="none")
    verify_pack(dst)


def test_verify_and_open_detect_damage(folder, tmp_path):
    dst = tmp_path / "pack"
    pack(folder, dst, 8, workers=1, shard_size=5, progress="none")
    path = dst / "train-00001.images.npy"
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(BadData, match="train-00001.images.npy: sha256 differs"):
        verify_pack(dst)
    path.write_bytes(bytes(blob[:-10]))  # truncated: the header no longer matches the size
    with pytest.raises(BadData, match="train-00001.images.npy"):
        Pack(dst).split("train")
    index = json.loads((dst / "index.json").read_text())
    (dst / "index.json").write_text(json.dumps({**index, "version": 99}))
    with pytest.raises(BadData, match="version 99"):
        Pack(dst)
    (dst / "index.json").write_text('{"format": "mlplab.pa')
    with pytest.raises(BadData, match="index.json: cannot read"):
        Pack(dst)
    with pytest.raises(BadInput, match="not a packed dataset"):
        Pack(tmp_path)


def test_bad_destinations_and_sources_are_refused(folder, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(BadInput, match="not empty and holds no pack"):
        pack(folder, other, 8, progress="none")
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    pack(folder, tmp_path / "p", 8, workers=1, progress="none")
    with pytest.raises(BadInput, match="already holds a pack of other settings"):
        pack(folder, tmp_path / "p", 16, workers=1, progress="none")
    with pytest.raises(BadInput, match="neither a folder nor a dataset"):
        pack(tmp_path / "missing", tmp_path / "q", 8, progress="none")
    with pytest.raises(BadInput, match="no train/ folder"):
        pack(folder / "train", tmp_path / "q", 8, progress="none")
    assert not (tmp_path / "q").exists()


def test_cli_pack_exit_codes_and_messages(folder, tmp_path, capsys):
    dst = tmp_path / "p"
    assert cli.main(["pack", str(folder), str(dst), "--image-size", "8", "--workers", "1", "--progress", "none"]) == 0
    assert "3 classes, train 12, val 6 images at 8x8" in capsys.readouterr().out
    assert cli.main(["pack", "--verify", str(dst)]) == 0
    assert cli.main(["pack", str(folder), str(tmp_path / "q")]) == 2
    assert "--image-size" in capsys.readouterr().err
    assert cli.main(["pack", str(folder), str(tmp_path / "q"), "--image-size", "0"]) == 2
    assert cli.main(["pack", "imagefolder", str(tmp_path / "q"), "--image-size", "8"]) == 2
    assert "by its path" in capsys.readouterr().err
    (folder / "train" / "class1" / "broken.png").write_bytes(b"not a png")
    assert cli.main(["pack", str(folder), str(tmp_path / "r"), "--image-size", "8", "--workers", "1",
                     "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert "broken.png: cannot decode image" in err and "Traceback" not in err
    assert not (tmp_path / "q").exists() and not (tmp_path / "r" / "index.json").exists()
    (folder / "train" / "class1" / "broken.png").unlink()  # fixed: the same command now packs
    assert cli.main(["pack", str(folder), str(tmp_path / "r"), "--image-size", "8", "--workers", "1",
                     "--progress", "none"]) == 0
    assert verify_pack(tmp_path / "r") == 2 * 2


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(), reason="needs dataset-fashion-mnist")
def test_pack_a_dataset_of_the_table(tmp_path):
    index = pack("fashion_mnist", tmp_path / "f", 28, shard_size=40_000, progress="none")
    assert index["splits"]["train"]["count"] == 60_000 and index["splits"]["test"]["count"] == 10_000
    assert index["classes"][0] == "T-shirt/top" and index["in_chans"] == 1
    np.testing.assert_allclose(index["mean"], [0.2860], atol=1e-4)
    p = Pack(tmp_path / "f").split("test")
    ref = load_dataset("fashion_mnist", "test")
    rows = np.array([9999, 0, 5000, 17])
    np.testing.assert_array_equal(p.take(rows), ref.images[rows].numpy())


# ----------------------------------------------------------------------------- PackedLoader

@pytest.fixture
def packed(tmp_path):
    root = write_folder(tmp_path / "f", per_class=(9, 8, 7), size=(8, 8))
    pack(root, tmp_path / "p", 8, workers=1, shard_size=7, progress="none")
    return Pack(tmp_path / "p").split("train")


def test_take_gathers_rows_across_shards(packed):
    full = packed.take(np.arange(len(packed)))
    rows = np.array([23, 0, 7, 6, 13, 7, 20])
    np.testing.assert_array_equal(packed.take(rows), full[rows])


def test_packed_loader_gives_the_device_loaders_batches(packed):
    images = torch.from_numpy(packed.take(np.arange(len(packed))))
    aug = build_augment(AugmentConfig(random_resized_crop=True, hflip=True), mean=(0.5,) * 3, std=(0.25,) * 3,
                        num_classes=3)
    kw = dict(shuffle=True, drop_last=False, augment=aug, seed=3)
    ref = list(DeviceLoader(images, packed.labels, 5, **kw))
    got = list(PackedLoader(packed, packed.labels, 5, threads=2, prefetch=2, **kw))
    assert len(got) == len(ref) == 5
    for (x, y), (rx, ry) in zip(got, ref):
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_packed_loader_resumes_mid_epoch_exactly(packed):
    kw = dict(shuffle=True, drop_last=True, seed=1, mean=(0.5,) * 3, std=(0.25,) * 3)
    full = PackedLoader(packed, packed.labels, 4, **kw)
    first = list(full) + [b for _, b in zip(range(2), iter(full))]  # epoch 0 (6 batches), 2 of epoch 1
    assert len(first) == 8
    part = PackedLoader(packed, packed.labels, 4, **kw)
    it = iter(part)
    for _ in range(3):
        next(it)
    state = part.state_dict()
    resumed = PackedLoader(packed, packed.labels, 4, **kw)
    resumed.load_state_dict(state)
    rest = list(resumed) + [b for _, b in zip(range(2), iter(resumed))]
    assert len(rest) == 5 and resumed.state_dict()["epoch"] == 1
    for (x, y), (rx, ry) in zip(rest, first[3:]):
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_packed_loader_indices_read_only_those_rows(packed):
    rows = torch.tensor([3, 17, 9, 22])
    ys = torch.cat([y for _, y in PackedLoader(packed, packed.labels, 3, shuffle=False, indices=rows,
                                               mean=(0.5,) * 3, std=(0.25,) * 3)])
    assert torch.equal(ys, packed.labels[rows])


# ----------------------------------------------------------------------------- resuming and refusing (issue 36)

def _killed_after(monkeypatch, files: int):
    """``_save_npy`` that raises KeyboardInterrupt after ``files`` files (a kill between shards);
    returns the function that undoes it."""
    real, calls = packed_mod._save_npy, []

    def dying(path, array):
        if len(calls) == files:
            raise KeyboardInterrupt
        calls.append(path.name)
        return real(path, array)

    monkeypatch.setattr(packed_mod, "_save_npy", dying)
    return lambda: monkeypatch.setattr(packed_mod, "_save_npy", real)


def test_a_resumed_pack_packs_again_only_the_shards_whose_source_files_changed(folder, tmp_path, monkeypatch):
    dst = tmp_path / "pack"
    undo = _killed_after(monkeypatch, 4)  # shards 0 and 1 of train finished
    with pytest.raises(KeyboardInterrupt):
        pack(folder, dst, 8, workers=1, shard_size=5, progress="none")
    undo()
    times = {n: (dst / n).stat().st_mtime_ns for n in ("train-00000.images.npy", "train-00001.images.npy")}
    # rows 5-9 (shard 1) are class0's last image and class1's; one of them is replaced
    (folder / "train" / "class1" / "0.png").write_bytes(png_bytes(np.zeros((3, 12, 10), np.uint8)))
    index = pack(folder, dst, 8, workers=1, shard_size=5, progress="none")
    assert (dst / "train-00000.images.npy").stat().st_mtime_ns == times["train-00000.images.npy"]
    assert (dst / "train-00001.images.npy").stat().st_mtime_ns != times["train-00001.images.npy"]
    fresh = pack(folder, tmp_path / "fresh", 8, workers=1, shard_size=5, progress="none")
    assert index["splits"] == fresh["splits"] and index["mean"] == fresh["mean"]
    assert verify_pack(dst) == 10


def test_histograms_count_every_byte_in_bounded_chunks(monkeypatch):
    x = np.random.default_rng(0).integers(0, 256, (5, 3, 4, 6), dtype=np.uint8)
    naive = [np.bincount(x[:, c].reshape(-1), minlength=256).tolist() for c in range(3)]
    assert packed_mod._histograms(x) == naive
    for values in (1, 7, 24, 25, 1000):  # below one image's channel, one image, several
        monkeypatch.setattr(packed_mod, "_BINCOUNT_VALUES", values)
        assert packed_mod._histograms(x) == naive


def test_a_refused_pack_leaves_nothing_behind(folder, tmp_path, monkeypatch):
    new = tmp_path / "a" / "b" / "pack"
    (folder / "train" / "class0" / "0.png").write_bytes(b"not a png")  # in the first shard
    with pytest.raises(BadData, match="0.png: cannot decode image"):
        pack(folder, new, 8, workers=1, shard_size=5, progress="none")
    assert not (tmp_path / "a").exists()  # no .pack-state.json, no .lock, no folders
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BadData):
        pack(folder, empty, 8, workers=1, shard_size=5, progress="none")
    assert list(empty.iterdir()) == []
    monkeypatch.setattr(packed_mod, "host_memory_available", lambda: 10 * 2**30)
    with pytest.raises(BadInput, match=r"^--image-size 50000 needs about 335\.3 GiB of memory to pack \(12 images of "
                                       r"7,152\.6 MiB per shard\), more than the 10\.0 GiB available; choose a smaller "
                                       r"--image-size$"):
        pack(folder, new, 50_000, progress="none")
    with pytest.raises(BadInput, match=r"needs about 13\.4 GiB .* \(12 images of 286\.1 MiB per shard\), more than the "
                                       r"10\.0 GiB available; choose --shard-size 8 or less, or a smaller "
                                       r"--image-size"):
        pack(folder, new, 10_000, progress="none")
    with pytest.raises(BadInput, match=rf"^{folder}/sub/p is inside the source folder {folder}; the pack's files would "
                                       rf"land among the images it packs: give a destination outside {folder}$"):
        pack(folder, folder / "sub" / "p", 8, progress="none")
    with pytest.raises(BadInput, match="is inside the source folder"):
        pack(folder, folder, 8, progress="none")
    assert not (tmp_path / "a").exists() and not (folder / "sub").exists()


def test_an_unfinished_pack_of_an_older_mlplab_is_refused_without_deleting_it(folder, tmp_path):
    dst = tmp_path / "pack"
    dst.mkdir()
    (dst / ".pack-state.json").write_text(json.dumps({"fingerprint": "x", "done": {"train-00000.images.npy": {}}}))
    (dst / "train-00000.images.npy").write_bytes(b"a finished shard")
    with pytest.raises(BadInput, match=rf"^{dst} holds an unfinished pack made by an older mlplab "
                                       r"\(1 shard\(s\) done\) "
                                       rf"with other settings than this command's; nothing was changed: delete {dst} "
                                       r"to start over$"):
        pack(folder, dst, 8, workers=1, progress="none")
    assert sorted(p.name for p in dst.iterdir()) == [".pack-state.json", "train-00000.images.npy"]
