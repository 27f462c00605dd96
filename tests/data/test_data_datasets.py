"""Dataset table, formats, verification, download and extraction - on small archives written in
the original on-disk formats (no network)."""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import pickle
import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from mlplab.data import (
    DATASETS,
    FASHION_MNIST_DEBIAN_DIR,
    ChecksumError,
    DataError,
    holdout_split,
    load_dataset,
    resize_images,
    safe_extract,
)
from mlplab.data import download as dl
from mlplab.data.formats import png_bytes, read_idx


@pytest.fixture(autouse=True)
def _empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLPLAB_DATA", str(tmp_path / "cache"))


def md5(path) -> str:
    return "md5:" + hashlib.md5(Path(path).read_bytes()).hexdigest()


def rng_images(n, c, h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, c, h, w), dtype=np.uint8)


# ----------------------------------------------------------------------------- writers (original formats)
def idx_bytes(a: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape) + a.tobytes()


def write_mnist(folder: Path, n_train=12, n_test=5, compress=True):
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for stem, n, seed in (("train", n_train, 1), ("t10k", n_test, 2)):
        x = rng_images(n, 1, 28, 28, seed)[:, 0]
        y = np.arange(n, dtype=np.uint8) % 10
        for kind, arr in (("images-idx3", x), ("labels-idx1", y)):
            name = f"{stem}-{kind}-ubyte"
            data = idx_bytes(arr)
            if compress:
                (folder / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (folder / name).write_bytes(data)
        out[stem] = (x, y)
    return out


def cifar_pickle(path: Path, data: np.ndarray, labels, key="labels"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump({b"data": data.reshape(len(data), -1), key.encode(): list(map(int, labels))}, f, protocol=2)


def write_cifar10_tar(folder: Path, per_batch=4):
    src = folder / "src"
    xs = rng_images(per_batch * 6, 3, 32, 32, 3)
    ys = np.arange(per_batch * 6) % 10
    for i in range(5):
        sl = slice(i * per_batch, (i + 1) * per_batch)
        cifar_pickle(src / "cifar-10-batches-py" / f"data_batch_{i + 1}", xs[sl], ys[sl])
    cifar_pickle(src / "cifar-10-batches-py" / "test_batch", xs[5 * per_batch:], ys[5 * per_batch:])
    with open(src / "cifar-10-batches-py" / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, f, protocol=2)
    archive = folder / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    shutil.rmtree(src)
    return archive, xs, ys


def write_stl10(folder: Path, n=6):
    d = folder / "stl10_binary"
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for split, seed in (("train", 5), ("test", 6)):
        x = rng_images(n, 3, 96, 96, seed)
        y = (np.arange(n) % 10) + 1  # 1-based on disk
        x.transpose(0, 1, 3, 2).tofile(d / f"{split}_X.bin")  # column-major per image
        y.astype(np.uint8).tofile(d / f"{split}_y.bin")
        out[split] = (x, y - 1)
    return out


def write_tiny_imagenet(folder: Path):
    d = folder / "tiny-imagenet-200"
    wnids = ["n02", "n01"]
    (d).mkdir(parents=True)
    (d / "wnids.txt").write_text("\n".join(wnids) + "\n")
    imgs = rng_images(6, 3, 64, 64, 7)
    k = 0
    for w in wnids:
        (d / "train" / w / "images").mkdir(parents=True)
        for j in range(2):
            (d / "train" / w / "images" / f"{w}_{j}.JPEG").write_bytes(png_bytes(imgs[k]))  # PNG bytes decode fine
            k += 1
    (d / "val" / "images").mkdir(parents=True)
    lines = []
    for j, w in enumerate(["n01", "n02"]):
        (d / "val" / "images" / f"val_{j}.JPEG").write_bytes(png_bytes(imgs[k]))
        lines.append(f"val_{j}.JPEG\t{w}\t0\t0\t63\t63")
        k += 1
    (d / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return imgs


# ----------------------------------------------------------------------------- table
def test_table_records_are_complete():
    for name, info in DATASETS.items():
        assert info.name == name
        assert len(info.mean) == len(info.std) == info.in_chans
        for f in info.files:
            assert f.checksum.split(":")[0] in ("md5", "sha256") and len(f.checksum.split(":")[1]) in (32, 64)
            if f.urls:
                assert f.urls[0].startswith("https://"), f.urls
    assert DATASETS["cifar10"].file("cifar-10-python.tar.gz").checksum == "md5:c58f30108f718f92721af3b95e74349a"
    assert DATASETS["fashion_mnist"].classes[0] == "T-shirt/top"
    with pytest.raises(ValueError, match="known datasets"):
        load_dataset("no_such_set", "train")


# ----------------------------------------------------------------------------- formats
def test_mnist_idx_gz_verified(tmp_path):
    ref = write_mnist(tmp_path / "mnist")
    sums = {f.name: md5(tmp_path / "mnist" / f.name) for f in DATASETS["mnist"].files}
    d = load_dataset("mnist", "train", root=tmp_path, checksums=sums)
    assert d.images.shape == (12, 1, 28, 28) and d.images.dtype == torch.uint8 and d.labels.dtype == torch.int64
    np.testing.assert_array_equal(d.images[:, 0].numpy(), ref["train"][0])
    np.testing.assert_array_equal(d.labels.numpy(), ref["train"][1])
    t = load_dataset("mnist", "test", root=tmp_path / "mnist", checksums=sums, image_size=32)
    assert t.images.shape == (5, 1, 32, 32) and t.info.image_size == (32, 32)


def test_mnist_raw_idx_and_table_checksum_mismatch(tmp_path):
    write_mnist(tmp_path / "mnist", compress=False)
    d = load_dataset("mnist", "train", root=tmp_path, verify=False)
    assert len(d) == 12
    with pytest.raises(ChecksumError, match="train-images-idx3-ubyte"):
        load_dataset("mnist", "train", root=tmp_path)  # the table's real checksums


def test_corrupt_idx_files_are_reported(tmp_path):
    folder = tmp_path / "mnist"
    write_mnist(folder)
    p = folder / "train-images-idx3-ubyte.gz"
    good = gzip.decompress(p.read_bytes())
    p.write_bytes(gzip.compress(good[:-100]))  # truncated content
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz.*truncated"):
        load_dataset("mnist", "train", root=tmp_path, verify=False)
    p.write_bytes(gzip.compress(b"\x12\x34\x08\x03" + good[4:]))
    with pytest.raises(DataError, match="magic"):
        read_idx(p)
    p.write_bytes(gzip.compress(good)[:-20])  # truncated gzip stream
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz"):
        load_dataset("mnist", "train", root=tmp_path, verify=False)
    write_mnist(folder, n_train=12)
    lab = folder / "train-labels-idx1-ubyte.gz"
    lab.write_bytes(gzip.compress(idx_bytes(np.zeros(11, np.uint8))))  # count mismatch
    with pytest.raises(DataError, match="12 images but .* 11 labels"):
        load_dataset("mnist", "train", root=tmp_path, verify=False)


def test_cifar10_archive_extracted_and_verified(tmp_path):
    archive, xs, ys = write_cifar10_tar(tmp_path / "cifar10")
    # member checksums: take them from a scratch extraction
    scratch = safe_extract(archive, tmp_path / "scratch")
    sums = {f.name: md5(scratch / f.name) for f in DATASETS["cifar10"].files if f.archive}
    sums["cifar-10-python.tar.gz"] = md5(archive)
    d = load_dataset("cifar10", "train", root=tmp_path, checksums=sums)
    assert d.images.shape == (20, 3, 32, 32) and d.classes[:2] == ["c0", "c1"]
    np.testing.assert_array_equal(d.images.numpy(), xs[:20])
    np.testing.assert_array_equal(d.labels.numpy(), ys[:20])
    t = load_dataset("cifar10", "test", root=tmp_path, checksums=sums)
    np.testing.assert_array_equal(t.images.numpy(), xs[20:])
    # a damaged extracted member is caught by its checksum
    member = tmp_path / "cifar10" / "cifar-10-batches-py" / "test_batch"
    member.write_bytes(member.read_bytes()[:-10])
    with pytest.raises(ChecksumError, match="test_batch"):
        load_dataset("cifar10", "test", root=tmp_path, checksums=sums)
    with pytest.raises(DataError, match="test_batch.*(truncated|corrupt)"):
        load_dataset("cifar10", "test", root=tmp_path, verify=False)


def test_cifar100_fine_labels(tmp_path):
    src = tmp_path / "cifar100"
    x = rng_images(6, 3, 32, 32, 9)
    for split in ("train", "test"):
        path = src / "cifar-100-python" / split
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump({b"data": x.reshape(6, -1), b"fine_labels": [99, 0, 5, 7, 1, 2],
                         b"coarse_labels": [1] * 6}, f, protocol=2)
    d = load_dataset("cifar100", "train", root=tmp_path, verify=False)
    assert d.labels.tolist() == [99, 0, 5, 7, 1, 2] and d.info.num_classes == 100
    np.testing.assert_array_equal(d.images.numpy(), x)


def test_pickle_that_runs_code_is_refused(tmp_path):
    path = tmp_path / "cifar100" / "cifar-100-python" / "train"
    path.parent.mkdir(parents=True)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path.write_bytes(pickle.dumps({b"data": Evil(), b"fine_labels": []}))
    with pytest.raises(DataError, match="refusing"):
        load_dataset("cifar100", "train", root=tmp_path, verify=False)


def test_stl10_binary_column_major_and_resize(tmp_path):
    ref = write_stl10(tmp_path / "stl10")
    d = load_dataset("stl10", "train", root=tmp_path, verify=False)
    np.testing.assert_array_equal(d.images.numpy(), ref["train"][0])
    np.testing.assert_array_equal(d.labels.numpy(), ref["train"][1])
    small = load_dataset("stl10", "test", root=tmp_path, verify=False, image_size=32)
    assert small.images.shape == (6, 3, 32, 32) and small.images.dtype == torch.uint8
    (tmp_path / "stl10" / "stl10_binary" / "train_X.bin").write_bytes(b"\x00" * 1000)
    with pytest.raises(DataError, match="train_X.bin.*truncated"):
        load_dataset("stl10", "train", root=tmp_path, verify=False)


def test_tiny_imagenet_folder_and_zip(tmp_path):
    imgs = write_tiny_imagenet(tmp_path / "unzipped")
    d = load_dataset("tiny_imagenet", "train", root=tmp_path / "unzipped")
    assert d.images.shape == (4, 3, 64, 64) and d.classes == ["n01", "n02"]
    assert d.labels.tolist() == [0, 0, 1, 1]  # sorted wnids: n01's images first
    np.testing.assert_array_equal(d.images[0].numpy(), imgs[2])
    v = load_dataset("tiny_imagenet", "test", root=tmp_path / "unzipped")  # test -> official val
    assert v.labels.tolist() == [0, 1]
    np.testing.assert_array_equal(v.images[1].numpy(), imgs[5])
    # the published zip in a folder is verified and extracted
    zdir = tmp_path / "zipped" / "tiny_imagenet"
    zdir.mkdir(parents=True)
    with zipfile.ZipFile(zdir / "tiny-imagenet-200.zip", "w") as zf:
        for p in sorted((tmp_path / "unzipped").rglob("*")):
            zf.write(p, p.relative_to(tmp_path / "unzipped").as_posix())
    z = load_dataset("tiny_imagenet", "val", root=tmp_path / "zipped",
                     checksums={"tiny-imagenet-200.zip": md5(zdir / "tiny-imagenet-200.zip")}, image_size=32)
    assert z.images.shape == (2, 3, 32, 32)


def test_image_folder_of_pngs(tmp_path):
    imgs = rng_images(5, 3, 10, 12, 11)
    for split, items in (("train", [("cat", 0), ("cat", 1), ("dog", 2)]), ("val", [("dog", 3), ("cat", 4)])):
        for cls, i in items:
            p = tmp_path / split / cls / f"{i}.png"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(png_bytes(imgs[i]))
    d = load_dataset("imagefolder", "train", root=tmp_path)
    assert d.classes == ["cat", "dog"] and d.labels.tolist() == [0, 0, 1] and d.info.num_classes == 2
    np.testing.assert_array_equal(d.images.numpy(), imgs[:3])
    v = load_dataset("imagefolder", "val", root=tmp_path, image_size=8)
    assert v.images.shape == (2, 3, 8, 8) and v.labels.tolist() == [0, 1]  # cat, dog by folder order
    (tmp_path / "train" / "dog" / "bad.png").write_bytes(b"not an image")
    with pytest.raises(DataError, match="bad.png"):
        load_dataset("imagefolder", "train", root=tmp_path)


# ----------------------------------------------------------------------------- download + verify
def test_download_via_file_url(tmp_path, monkeypatch):
    archive, xs, _ = write_cifar10_tar(tmp_path / "server")
    info = DATASETS["cifar10"]
    arc = info.file("cifar-10-python.tar.gz")
    files = tuple(dataclasses.replace(f, urls=(archive.as_uri(),), checksum=md5(archive)) if f is arc
                  else dataclasses.replace(f, checksum="") for f in info.files)
    monkeypatch.setitem(DATASETS, "cifar10", dataclasses.replace(info, files=files))
    with pytest.raises(DataError, match="download=True"):
        load_dataset("cifar10", "train")
    d = load_dataset("cifar10", "train", download=True)  # into $MLPLAB_DATA/cifar10
    np.testing.assert_array_equal(d.images.numpy(), xs[:20])
    assert (tmp_path / "cache" / "cifar10" / "cifar-10-python.tar.gz").is_file()


def test_download_bad_checksum_leaves_nothing(tmp_path, monkeypatch):
    def fake_fetch(url, dest, timeout=60.0):
        Path(dest).write_bytes(b"partial garbage")

    monkeypatch.setattr(dl, "fetch", fake_fetch)
    with pytest.raises(DataError, match="checksum mismatch"):
        load_dataset("mnist", "train", root=tmp_path / "r", download=True)
    left = list((tmp_path / "r").rglob("*"))
    assert [p for p in left if p.is_file()] == []  # no partial or corrupt file kept


def test_download_monkeypatched_fetch_mnist(tmp_path, monkeypatch):
    server = tmp_path / "server"
    ref = write_mnist(server)
    calls = []

    def fake_fetch(url, dest, timeout=60.0):
        calls.append(url)
        shutil.copyfile(server / url.rsplit("/", 1)[1], dest)

    monkeypatch.setattr(dl, "fetch", fake_fetch)
    sums = {f.name: md5(server / f.name) for f in DATASETS["mnist"].files}
    d = load_dataset("mnist", "test", root=tmp_path / "data", download=True, checksums=sums)
    np.testing.assert_array_equal(d.labels.numpy(), ref["t10k"][1])
    assert len(calls) == 2 and all(c.startswith("https://") for c in calls)
    assert (tmp_path / "data" / "mnist" / "t10k-images-idx3-ubyte.gz").is_file()


def test_verify_checksum_names_file(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    dl.verify_checksum(p, "md5:900150983cd24fb0d6963f7d28e17f72")
    dl.verify_checksum(p, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    with pytest.raises(ChecksumError, match="f.bin"):
        dl.verify_checksum(p, "md5:" + "0" * 32)


def test_missing_dataset_says_where_and_how(tmp_path):
    with pytest.raises(DataError) as e:
        load_dataset("cifar100", "train", root=tmp_path / "nowhere")
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and str(tmp_path / "cache" / "cifar100") in msg
    assert "download=True" in msg and "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz" in msg
    with pytest.raises(ValueError, match="val_fraction"):
        load_dataset("cifar100", "val", root=tmp_path)


# ----------------------------------------------------------------------------- safe extraction
def _tar_with(tmp_path, add):
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as tf:
        add(tf)
    return path


def _file_member(tf, name, data=b"x"):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))


@pytest.mark.parametrize("case", ["dotdot", "absolute", "symlink_out", "hardlink_out"])
def test_safe_extract_refuses_escaping_members(tmp_path, case):
    def add(tf):
        _file_member(tf, "ok/file.txt")
        if case == "dotdot":
            _file_member(tf, "ok/../../escaped.txt")
        elif case == "absolute":
            _file_member(tf, "/tmp/escaped_abs.txt")
        else:
            ti = tarfile.TarInfo("ok/link")
            ti.type = tarfile.SYMTYPE if case == "symlink_out" else tarfile.LNKTYPE
            ti.linkname = "../../etc/passwd" if case == "symlink_out" else "/etc/passwd"
            tf.addfile(ti)

    archive = _tar_with(tmp_path, add)
    target = tmp_path / "out"
    with pytest.raises(DataError, match="refusing"):
        safe_extract(archive, target)
    assert not (target / "ok" / "file.txt").exists()  # checked before anything is written
    assert not (tmp_path / "escaped.txt").exists()


def test_safe_extract_zip_dotdot_and_inside_link_ok(tmp_path):
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("a/../../escaped.txt", b"x")
    with pytest.raises(DataError, match="refusing"):
        safe_extract(z, tmp_path / "out")

    def add(tf):
        _file_member(tf, "d/file.txt", b"hello")
        ti = tarfile.TarInfo("d/link")
        ti.type, ti.linkname = tarfile.SYMTYPE, "file.txt"
        tf.addfile(ti)

    out = safe_extract(_tar_with(tmp_path, add), tmp_path / "ok")
    assert (out / "d" / "link").read_bytes() == b"hello"


# ----------------------------------------------------------------------------- splits, resize, synthetic
def test_holdout_split_deterministic_and_disjoint():
    tr, va = holdout_split(100, 0.1, seed=3)
    tr2, va2 = holdout_split(100, 0.1, seed=3)
    assert torch.equal(va, va2) and len(va) == 10 and len(tr) == 90
    assert set(tr.tolist()).isdisjoint(va.tolist()) and len(set(tr.tolist()) | set(va.tolist())) == 100
    assert not torch.equal(holdout_split(100, 0.1, seed=4)[1], va)
    a = load_dataset("synthetic", "train", val_fraction=0.25, num_samples=40)
    b = load_dataset("synthetic", "val", val_fraction=0.25, num_samples=40)
    assert len(a) == 30 and len(b) == 10


def test_resize_and_synthetic():
    x = torch.full((3, 1, 96, 96), 77, dtype=torch.uint8)
    y = resize_images(x, 32)
    assert y.shape == (3, 1, 32, 32) and torch.all(y == 77)
    s1 = load_dataset("synthetic", "train", image_size=16, num_samples=64, num_classes=4, in_chans=1)
    s2 = load_dataset("synthetic", "train", image_size=16, num_samples=64, num_classes=4, in_chans=1)
    assert torch.equal(s1.images, s2.images) and s1.images.shape == (64, 1, 16, 16)
    assert s1.info.num_classes == 4 and s1.info.in_chans == 1 and len(s1.info.mean) == 1
    # class structure: nearest class mean classifies the test split well
    t = load_dataset("synthetic", "test", image_size=16, num_samples=64, num_classes=4, in_chans=1)
    means = torch.stack([s1.images[s1.labels == k].float().mean(0) for k in range(4)])
    pred = ((t.images.float()[:, None] - means[None]) ** 2).flatten(2).sum(-1).argmin(1)
    assert (pred == t.labels).float().mean() > 0.9


@pytest.mark.parametrize("noise,in_chans", [(40.0, 3), (10.0, 1)])
def test_synthetic_normalisation_is_its_own_pixel_statistics(noise, in_chans):
    # the stated mean / std standardise the pixels: per channel, over a large sample, in numpy
    d = load_dataset("synthetic", "train", num_samples=16384, image_size=16, noise=noise, in_chans=in_chans, seed=5)
    x = d.images.numpy().astype(np.float64) / 255
    assert len(d.info.std) == in_chans
    for c in range(in_chans):
        z = (x[:, c] - d.info.mean[c]) / d.info.std[c]
        assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.03  # rounding/clamping: ~1% of the std


def test_synthetic_statistics_weigh_every_class_mean_pixel_once():
    # noise 0 at 4×4 (the prototypes' own size): an image is its class mean, rounded; the stated
    # statistics are those of the 8 classes × 16 pixels as a population (ddof 1 is 0.4 % off, a
    # scale of 1/256 for 1/255 is 0.4 % off; rounding moves them by < 0.1 % here)
    d = load_dataset("synthetic", "train", num_samples=256, image_size=4, num_classes=8, in_chans=2,
                     noise=0.0, seed=1)
    labels = d.labels.numpy()
    assert set(labels.tolist()) == set(range(8))
    means = np.stack([d.images.numpy()[labels == k][0] for k in range(8)]).astype(np.float64) / 255
    for c in range(2):
        assert d.info.mean[c] == pytest.approx(means[:, c].mean(), rel=0.002)
        assert d.info.std[c] == pytest.approx(means[:, c].std(ddof=0), rel=0.002)


@pytest.mark.skipif(not Path(FASHION_MNIST_DEBIAN_DIR, "train-images-idx3-ubyte.gz").is_file(),
                    reason="Debian package dataset-fashion-mnist not installed (apt-get install dataset-fashion-mnist)")
def test_real_fashion_mnist_from_debian():
    tr = load_dataset("fashion_mnist", "train")  # found in the Debian folder, content checksums verified
    te = load_dataset("fashion_mnist", "test")
    assert tr.images.shape == (60000, 1, 28, 28) and te.images.shape == (10000, 1, 28, 28)
    assert tr.labels.unique().tolist() == list(range(10)) and tr.info.num_classes == 10
    assert torch.bincount(te.labels).tolist() == [1000] * 10
    x = tr.images.double() / 255  # the table's normalisation is the training split's own statistics
    assert abs(x.mean().item() - tr.info.mean[0]) < 1e-4 and abs(x.std().item() - tr.info.std[0]) < 1e-4


def test_an_image_folder_with_train_and_test_uses_test_for_the_test_split(tmp_path):
    """A folder of one's own (train/ and test/) tests on test/; ImageNet's layout (train/, val/)
    on val/; neither is one sentence saying what an image folder holds."""
    import numpy as np
    from PIL import Image

    from mlplab.data import load_dataset
    from mlplab.data.download import DataError

    rng = np.random.default_rng(0)
    for split, n in (("train", 3), ("test", 2)):
        for c in ("a", "b"):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(tmp_path / split / c / f"{i}.png")
    test = load_dataset("imagefolder", "test", root=tmp_path, cache=False)
    assert len(test.labels) == 4
    (tmp_path / "test").rename(tmp_path / "val")
    assert len(load_dataset("imagefolder", "test", root=tmp_path, cache=False).labels) == 4
    (tmp_path / "val").rename(tmp_path / "other")
    with pytest.raises(DataError, match=r"has no val/ folder; an image folder holds train/<class>/<image> and "
                                        r"val/<class>/<image> \(or test/\)") as e:
        load_dataset("imagefolder", "test", root=tmp_path, cache=False)
    assert isinstance(e.value, ValueError)  # the user's folder: bad input (exit 2), not a runtime failure


@pytest.mark.parametrize("n,fraction,held", [(9, 0.3, 3), (7, 0.5, 4), (10, 0.25, 2), (5, 0.0, 0), (40, 0.99, 40)])
def test_holdout_split_is_the_seeds_permutation_cut_at_the_rounded_fraction(n, fraction, held):
    """The first round(n·f) of the seed's permutation are held out (Python's round: 2.5 → 2),
    both parts in ascending order."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(6)).tolist()
    tr, va = holdout_split(n, fraction, seed=6)
    assert held == round(n * fraction) and va.tolist() == sorted(perm[:held]) and tr.tolist() == sorted(perm[held:])
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=rf"^val_fraction must be in \[0, 1\), got {bad}$"):
            holdout_split(n, bad, seed=6)


def test_without_a_holdout_the_val_split_is_the_sets_own():
    from mlplab.data.datasets import make_synthetic

    own = make_synthetic("val", num_samples=20, image_size=8)
    got = load_dataset("synthetic", "val", num_samples=20, image_size=8)
    assert len(got) == 20 and torch.equal(got.images, own.images) and got.split == "val"
    test = load_dataset("synthetic", "test", num_samples=20, image_size=8, val_fraction=0.5)
    assert torch.equal(test.images, make_synthetic("test", num_samples=20, image_size=8).images)  # never cut


def test_a_pack_loads_whole_resized_with_its_own_statistics(tmp_path):
    """load_dataset of a pack: every image of the split (the test split is its val/), resized when
    asked, with the pack's classes and per-channel statistics (its index.json, read here)."""
    import json

    from mlplab.data import pack
    from mlplab.errors import BadInput

    rng = np.random.default_rng(3)
    for split, n in (("train", 3), ("val", 2)):
        for c in ("a", "b"):
            (tmp_path / "f" / split / c).mkdir(parents=True)
            for i in range(n):
                image = rng.integers(0, 256, (3, 8, 8), dtype=np.uint8)
                (tmp_path / "f" / split / c / f"{i}.png").write_bytes(png_bytes(image))
    pack(tmp_path / "f", tmp_path / "p", 8, workers=1, progress="none")
    index = json.loads((tmp_path / "p" / "index.json").read_text())
    full = load_dataset("packed", "train", root=tmp_path / "p")
    small = load_dataset("packed", "train", root=tmp_path / "p", image_size=4)
    for d, side in ((full, 8), (small, 4)):
        assert d.images.shape == (6, 3, side, side) and d.info.image_size == (side, side) and d.split == "train"
        assert d.info.mean == tuple(index["mean"]) and d.info.std == tuple(index["std"]) and d.info.in_chans == 3
        assert d.classes == ["a", "b"] and d.info.classes == ("a", "b") and d.info.num_classes == 2
        assert sorted(d.labels.tolist()) == [0, 0, 0, 1, 1, 1]
    assert torch.equal(small.labels, full.labels) and torch.equal(small.images, resize_images(full.images, 4))
    assert len(load_dataset("packed", "test", root=tmp_path / "p")) == 4
    pack(tmp_path / "f", tmp_path / "grey", 8, workers=1, in_chans=1, progress="none")
    grey = load_dataset("packed", "train", root=tmp_path / "grey", image_size=4)
    assert grey.images.shape == (6, 1, 4, 4) and grey.info.in_chans == 1 and len(grey.info.mean) == 1
    with pytest.raises(BadInput, match=r"^data.dataset=packed needs data.root=DIR, the folder written by "
                                       r"`mlplab pack`$"):
        load_dataset("packed", "train")


def test_a_holdout_keeps_the_examples_of_its_rows_with_the_sets_info_and_classes():
    from mlplab.data.datasets import make_synthetic

    whole = make_synthetic("train", num_samples=40, image_size=8, seed=2)
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(2)).tolist()
    for split, rows in (("train", sorted(perm[10:])), ("val", sorted(perm[:10]))):
        got = load_dataset("synthetic", split, num_samples=40, image_size=8, val_fraction=0.25, seed=2)
        assert torch.equal(got.images, whole.images[rows]) and torch.equal(got.labels, whole.labels[rows])
        assert got.info == whole.info and got.classes == whole.classes and got.split == split
