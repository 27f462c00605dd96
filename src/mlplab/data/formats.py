"""Readers for the original on-disk formats. Each returns numpy uint8 images (N, ch, H, W) and
int64 labels (N,), and raises ``DataError`` naming the file when the file is truncated, has a
wrong magic number or its counts do not match - bad data is never used silently.
"""
from __future__ import annotations

import gzip
import io
import os
import pickle
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

import numpy as np

from .download import BadData, DataError

__all__ = ["read_idx", "read_idx_pair", "read_cifar_batches", "read_stl10", "decode_image",
           "decode_images", "list_image_folder", "folder_classes", "read_image_folder", "read_tiny_imagenet",
           "IMAGE_EXTENSIONS"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp", ".gif")

# IDX type codes (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT")
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike, *, ndim: int | None = None) -> np.ndarray:
    """Read an IDX file (gzip-compressed if it ends in ``.gz``), checking magic and length."""
    path = Path(path)
    try:
        raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"{path}: cannot read ({e}); the file is corrupt or truncated") from e
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES or not 1 <= raw[3] <= 4:
        raise DataError(f"{path}: wrong magic number {raw[:4].hex() or '(empty)'}; not an IDX file")
    nd = raw[3]
    if ndim is not None and nd != ndim:
        raise DataError(f"{path}: IDX file has {nd} dimensions, expected {ndim}")
    header = 4 + 4 * nd
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header")
    dims = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(nd))
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    want = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - header != want:
        raise DataError(f"{path}: IDX size mismatch: header says {dims} ({want} bytes of data), file "
                        f"has {len(raw) - header}; the file is truncated or corrupt")
    return np.frombuffer(raw, dtype, offset=header).reshape(dims)


def read_idx_pair(images_path: str | os.PathLike, labels_path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """MNIST-style images (N, 1, H, W) uint8 and labels (N,) int64."""
    x = read_idx(images_path, ndim=3)
    y = read_idx(labels_path, ndim=1)
    for path, a in ((images_path, x), (labels_path, y)):
        if a.dtype != np.uint8:
            raise DataError(f"{path}: IDX data type {a.dtype}, expected unsigned bytes (type code 0x08)")
    if len(x) != len(y):
        raise DataError(f"{images_path} has {len(x)} images but {labels_path} has {len(y)} labels")
    return np.ascontiguousarray(x[:, None].astype(np.uint8)), y.astype(np.int64)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that can rebuild numpy arrays and plain containers and nothing else.

    A dataset pickle from the network must not be able to run code on load.
    """

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                ("numpy._core.multiarray", "scalar"), ("_codecs", "encode"), ("copyreg", "_reconstructor"),
                ("builtins", "object")}

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset pickle")


def load_pickle(path: str | os.PathLike) -> dict:
    """Load a CIFAR pickle (python 2 or 3) safely; keys are returned as ``str``."""
    try:
        with open(path, "rb") as f:
            obj = _ArrayUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, OSError) as e:
        raise DataError(f"{path}: corrupt or truncated pickle ({type(e).__name__}: {e})") from e
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a dict in the pickle, found {type(obj).__name__}")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def read_cifar_batches(paths: Sequence[str | os.PathLike], label_key: str = "labels",
                       size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR python batches: ``data`` (N, 3*size*size) uint8 rows (R, G, B planes), labels list."""
    xs, ys = [], []
    for p in paths:
        d = load_pickle(p)
        if "data" not in d or label_key not in d:
            raise DataError(f"{p}: missing key 'data' or {label_key!r} (keys: {sorted(map(str, d))})")
        x = np.asarray(d["data"])
        y = np.asarray(d[label_key], dtype=np.int64)
        if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3 * size * size:
            raise DataError(f"{p}: data has shape {x.shape} {x.dtype}, expected (N, {3 * size * size}) uint8")
        if len(x) != len(y):
            raise DataError(f"{p}: {len(x)} images but {len(y)} labels")
        xs.append(x.reshape(-1, 3, size, size))
        ys.append(y)
    return np.ascontiguousarray(np.concatenate(xs)), np.concatenate(ys)


def read_stl10(x_path: str | os.PathLike, y_path: str | os.PathLike, size: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """STL-10 binary: images stored column-major (N, 3, W, H) uint8; labels uint8 1..10."""
    x_path, y_path = Path(x_path), Path(y_path)
    raw = np.fromfile(x_path, dtype=np.uint8)
    per = 3 * size * size
    if raw.size == 0 or raw.size % per:
        raise DataError(f"{x_path}: {raw.size} bytes is not a whole number of {size}x{size}x3 images; truncated?")
    y = np.fromfile(y_path, dtype=np.uint8).astype(np.int64)
    if len(y) != raw.size // per:
        raise DataError(f"{x_path} holds {raw.size // per} images but {y_path} has {len(y)} labels")
    if len(y) and (y.min() < 1 or y.max() > 10):
        raise DataError(f"{y_path}: labels outside 1..10 ({y.min()}..{y.max()})")
    x = raw.reshape(-1, 3, size, size).transpose(0, 1, 3, 2)  # column-major -> (N, 3, H, W)
    return np.ascontiguousarray(x), y - 1


def decode_image(path: str | os.PathLike, size: int | None = None, in_chans: int = 3) -> np.ndarray:
    """Decode one image with Pillow to uint8 (ch, H, W).

    With ``size``: resize the shorter side to ``size`` (bicubic, antialiased) and take the
    central ``size`` x ``size`` crop - the usual evaluation view.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("L" if in_chans == 1 else "RGB")
            if size is not None:
                w, h = im.size
                s = size / min(w, h)
                nw, nh = max(size, round(w * s)), max(size, round(h * s))
                if (nw, nh) != (w, h):
                    im = im.resize((nw, nh), Image.BICUBIC, reducing_gap=None)
                left, top = (nw - size) // 2, (nh - size) // 2
                im = im.crop((left, top, left + size, top + size))
            a = np.asarray(im, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise BadData(f"{path}: cannot decode image ({e}); replace or remove the file") from e
    return np.array(a[None] if a.ndim == 2 else a.transpose(2, 0, 1), order="C")  # writable, (ch, H, W)


def decode_images(paths: Sequence[str | os.PathLike], size: int | None = None, in_chans: int = 3,
                  threads: int | None = None) -> np.ndarray:
    """Decode many images (threads; Pillow releases the GIL while decoding) into (N, ch, H, W)."""
    if not paths:
        return np.zeros((0, in_chans, size or 0, size or 0), np.uint8)
    threads = threads or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(threads) as ex:
        arrs = list(ex.map(lambda p: decode_image(p, size, in_chans), paths, chunksize=64))
    shapes = {a.shape for a in arrs}
    if len(shapes) > 1:
        raise DataError(f"images have different sizes {sorted(shapes)[:4]}...; pass image_size= to resize")
    return np.stack(arrs)


def _is_image(p: Path) -> bool:
    return p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS


def _files_below(folder: Path) -> list[Path]:
    """Every file below ``folder``, sorted; a folder that cannot be read is an error naming it
    (``Path.rglob`` would skip it, and its class would look empty)."""
    def unreadable(e: OSError) -> None:
        raise BadData(f"{e.filename}: cannot read the folder ({e.strerror}); fix its permissions "
                      f"(chmod -R u+rX {e.filename}) or remove it")

    return sorted(Path(top) / f for top, _, files in os.walk(folder, onerror=unreadable) for f in files)


def list_image_folder(split_dir: str | os.PathLike, classes: Sequence[str] | None = None, *,
                      require_images: bool = True) -> tuple[list[Path], np.ndarray, list[str]]:
    """Files of ``split_dir/<class>/**/<image>``; classes are the sorted folder names (or given).

    Files without an image extension (``IMAGE_EXTENSIONS``) and hidden files are skipped, with
    one note on stderr giving their count and an example. A class folder without images is an
    error naming it when ``require_images`` (the train split: it would be a class that the model
    can never learn), and so is a train split of one class (a classifier of one class is always
    right); elsewhere (val) a class may be absent. A folder that cannot be read is named.
    """
    split_dir = Path(split_dir)
    if not split_dir.is_dir():
        what = f"{split_dir} is not a folder" if split_dir.exists() else \
            f"{split_dir.parent} has no {split_dir.name}/ folder"
        raise BadData(f"{what}; an image folder holds train/ and val/ (or test/), each with one subfolder per class")
    found = sorted(d.name for d in split_dir.iterdir() if d.is_dir() and not d.name.startswith("."))
    classes = list(classes) if classes is not None else found
    if require_images and len(classes) == 1:
        raise BadData(f"{split_dir} holds one class folder ({classes[0]}); a classifier needs two or more: add a "
                      f"folder per class ({split_dir}/<class>/<image>)")
    index = {c: i for i, c in enumerate(classes)}
    paths, labels, skipped = [], [], []
    for c in found:
        if c not in index:
            raise BadData(f"{split_dir / c}: class folder not among the train classes ({', '.join(classes)}); "
                          f"remove it or add it to train/")
        files, other = [], []
        for p in _files_below(split_dir / c):
            (files if _is_image(p) and not p.name.startswith(".") else other).append(p)
        if not files and require_images:
            raise BadData(f"{split_dir / c}: class folder holds no images (extensions: "
                          f"{' '.join(IMAGE_EXTENSIONS)}); add images or remove the folder")
        paths += files
        labels += [index[c]] * len(files)
        skipped += other
    if not paths:
        raise BadData(f"{split_dir}: no images found (expected {split_dir}/<class>/<image>)")
    if skipped:
        print(f"mlplab: note: skipped {len(skipped)} non-image file(s) in {split_dir}, e.g. {skipped[0]}",
              file=sys.stderr)
    return paths, np.asarray(labels, np.int64), classes


def folder_classes(root: str | os.PathLike) -> list[str] | None:
    """The classes of an image folder: the sorted sub-folder names of ``root/train`` (None without one)."""
    train = Path(root) / "train"
    if not train.is_dir():
        return None
    return sorted(d.name for d in train.iterdir() if d.is_dir() and not d.name.startswith("."))


def read_image_folder(root: str | os.PathLike, split: str, size: int | None = None, in_chans: int = 3
                      ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Decode ``root/<split>/<class>/<image>`` into memory. Classes come from ``root/train``."""
    root = Path(root)
    classes = folder_classes(root) if split != "train" else None
    paths, labels, classes = list_image_folder(root / split, classes, require_images=split == "train")
    return decode_images(paths, size, in_chans), labels, classes


def read_tiny_imagenet(folder: str | os.PathLike, split: str, size: int | None = None
                       ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``tiny-imagenet-200``: train/<wnid>/images/*.JPEG; val/images + val/val_annotations.txt.

    Classes are the sorted wnids of ``wnids.txt``.
    """
    folder = Path(folder)
    wnids_file = folder / "wnids.txt"
    try:
        wnids = sorted(w.strip() for w in wnids_file.read_text().split() if w.strip())
    except OSError as e:
        raise DataError(f"{wnids_file}: cannot read ({e})") from e
    index = {w: i for i, w in enumerate(wnids)}
    paths: list[Path] = []
    labels: list[int] = []
    if split == "train":
        for w in wnids:
            files = sorted(p for p in (folder / "train" / w / "images").glob("*") if _is_image(p))
            if not files:
                raise DataError(f"{folder / 'train' / w / 'images'}: no images for class {w}")
            paths += files
            labels += [index[w]] * len(files)
    elif split == "val":
        ann = folder / "val" / "val_annotations.txt"
        try:
            lines = ann.read_text().splitlines()
        except OSError as e:
            raise DataError(f"{ann}: cannot read ({e})") from e
        for ln, line in enumerate(lines, 1):
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) < 2 or parts[1] not in index:
                raise DataError(f"{ann}:{ln}: malformed line or unknown wnid: {line!r}")
            p = folder / "val" / "images" / parts[0]
            if not p.is_file():
                raise DataError(f"{p}: listed in {ann.name} but missing")
            paths.append(p)
            labels.append(index[parts[1]])
    else:
        raise ValueError(f"tiny_imagenet has splits train and val, not {split!r}")
    return decode_images(paths, size, 3), np.asarray(labels, np.int64), wnids


def png_bytes(image_chw: np.ndarray) -> bytes:
    """Encode (ch, H, W) uint8 as PNG (used by tests and tools that write image folders)."""
    from PIL import Image

    a = image_chw[0] if image_chw.shape[0] == 1 else image_chw.transpose(1, 2, 0)
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(a)).save(buf, format="PNG")
    return buf.getvalue()
