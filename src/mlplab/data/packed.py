"""The packed dataset format: fixed-size uint8 ``.npy`` shards and a JSON index.

A pack is a folder::

    index.json                  what is in the pack (below)
    train-00000.images.npy      uint8 (n, ch, N, N): images of shard 0 of the train split
    train-00000.labels.npy      int64 (n,): their class indices
    train-00001.images.npy ...
    val-00000.images.npy ...    (or test-...; the splits of the source)

Every shard holds ``shard_size`` examples except the last of a split. ``index.json``::

    format, version     "mlplab.packed", 1
    image_size          [N, N]; in_chans: ch; dtype "uint8"; layout "NCHW"
    classes             class names, in label order; num_classes
    mean, std           per-channel statistics of the packed train split, in [0, 1] units
    source              what was packed (a dataset name of the table, or "imagefolder:<path>")
    shard_size          examples per shard; fingerprint: sha256 of the packing plan (resume key)
    splits              {split: {count, shards: [{images, labels, count, sha256: {images, labels}, probe}]}}
                        (probe: ``shard_probe`` of the images file, checked each time a split is opened)

Why ``.npy``: it is numpy's own documented format (a short text header giving dtype and shape,
then the raw bytes), so any tool reads a shard with ``np.load`` and no mlplab, and a reader can
``np.load(mmap_mode="r")`` it: pages come from the page cache on demand, the training process's
own (anonymous) memory does not grow with the dataset, and a random batch costs one gather per
shard it touches. No compression, so there is nothing to decode at training time.

Packing (``mlplab.data.packing.pack``) writes each shard to a temporary file and renames it when complete, and
records the finished shards (with their sha256) in ``.pack-state.json``; a killed ``pack`` run
again with the same arguments verifies the finished shards and packs only the rest.
``index.json`` is written last: a folder with an index is a complete pack.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import BadInput
from .download import BadData

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "INDEX_NAME", "Pack", "PackedImages", "verify_pack", "is_pack",
           "shard_files", "sha256_file", "shard_probe"]

FORMAT_NAME = "mlplab.packed"
FORMAT_VERSION = 1
INDEX_NAME = "index.json"
STATE_NAME = ".pack-state.json"


def shard_files(split: str, k: int) -> tuple[str, str]:
    """File names (images, labels) of shard ``k`` of ``split``."""
    return f"{split}-{k:05d}.images.npy", f"{split}-{k:05d}.labels.npy"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


#: :func:`shard_probe` reads this many blocks of this many bytes of a shard
PROBE_BLOCKS, PROBE_BYTES = 8, 4096


def shard_probe(path: str | os.PathLike) -> str:
    """A cheap fingerprint of a shard file: the sha256 of its size and of ``PROBE_BLOCKS`` blocks
    of ``PROBE_BYTES`` spread evenly over it, the first and the last included (32 KiB read,
    whatever the shard's size). Another pack's shard, a cut or a grown file differ in it; a bit
    flipped between the blocks needs the full sha256 (``verify_pack``)."""
    size = os.path.getsize(path)
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        for k in range(PROBE_BLOCKS):
            f.seek(max(size - PROBE_BYTES, 0) * k // (PROBE_BLOCKS - 1))
            h.update(f.read(PROBE_BYTES))
    return h.hexdigest()


def is_pack(path: str | os.PathLike) -> bool:
    return (Path(path) / INDEX_NAME).is_file()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadData(f"{path}: cannot read ({e}); the file is truncated or not a pack index — "
                      f"pack again into a new folder") from e
    if not isinstance(obj, dict):
        raise BadData(f"{path}: expected a JSON object")
    return obj


# ----------------------------------------------------------------------------- reading

class Pack:
    """An opened pack: its index, checked (format, version, fields, shard files present)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser()
        path = self.root / INDEX_NAME
        if not path.is_file():
            hint = ("it holds an unfinished pack: run the same `mlplab pack` again to finish it"
                    if (self.root / STATE_NAME).is_file() else "make one with `mlplab pack SRC DST --image-size N`")
            raise BadInput(f"{self.root} is not a packed dataset (no {INDEX_NAME}); {hint}")
        index = _read_json(path)
        if index.get("format") != FORMAT_NAME or index.get("version") != FORMAT_VERSION:
            raise BadData(f"{path}: format {index.get('format')!r} version {index.get('version')!r}; this mlplab "
                          f"reads {FORMAT_NAME!r} version {FORMAT_VERSION}")
        try:
            self.image_size = tuple(int(v) for v in index["image_size"])
            self.in_chans = int(index["in_chans"])
            self.classes = [str(c) for c in index["classes"]]
            self.mean = tuple(float(v) for v in index["mean"])
            self.std = tuple(float(v) for v in index["std"])
            self.splits = {k: v for k, v in index["splits"].items()}
            for entry in self.splits.values():
                for sh in entry["shards"]:
                    _ = sh["images"], sh["labels"], int(sh["count"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise BadData(f"{path}: missing or malformed field ({type(e).__name__}: {e}); pack again") from e
        self.index = index

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def split(self, name: str) -> "PackedImages":
        """The images and labels of ``name`` ("test" falls back to "val", as for image folders)."""
        if name == "test" and "test" not in self.splits and "val" in self.splits:
            name = "val"
        if name not in self.splits:
            raise BadInput(f"{self.root} has no {name!r} split (it has {', '.join(self.splits)}); "
                           f"hold one out of train with data.val_fraction")
        return PackedImages(self.root, self.splits[name], self.in_chans, self.image_size)


class PackedImages:
    """One split of a pack: images read from memory-mapped shards, labels held in memory (int64).

    ``take(rows)`` gathers any rows into a new uint8 array (n, ch, H, W), reading each shard's
    rows in increasing order; ``take_ascending`` leaves them in that order (the loader's one-copy
    path). Opening checks every shard against the index before anything is read from it
    (:func:`_check_shard`): its header (dtype, shape, count), its size, the sha256 of its labels
    and the :func:`shard_probe` of its images. The full sha256 of the images reads the whole
    pack: ``verify_pack``.
    """

    def __init__(self, root: Path, entry: dict[str, Any], in_chans: int, image_size: tuple[int, int]):
        self.shards: list[np.ndarray] = []
        labels = []
        for sh in entry["shards"]:
            n = int(sh["count"])
            for key, shape, dtype in (("images", (n, in_chans, *image_size), np.uint8), ("labels", (n,), np.int64)):
                path = root / sh[key]
                try:
                    a = np.load(path, mmap_mode="r")
                except (OSError, ValueError, EOFError) as e:
                    raise BadData(f"{path}: cannot read the shard ({e}); it is missing or truncated — pack again "
                                  f"into a new folder") from e
                _check_shard(path, a, shape, dtype, sh, key)
                (self.shards if key == "images" else labels).append(a if key == "images" else np.array(a))
        self.starts = np.cumsum([0] + [len(a) for a in self.shards])
        self.labels = torch.from_numpy(np.concatenate(labels) if labels else np.zeros(0, np.int64))
        self.shape = (int(self.starts[-1]), in_chans, *image_size)

    def __len__(self) -> int:
        return self.shape[0]

    def take(self, rows: np.ndarray | torch.Tensor, out: np.ndarray | None = None) -> np.ndarray:
        """The images of ``rows`` (any order, repeats allowed) in that order, into ``out`` or a new
        uint8 array (n, ch, H, W)."""
        rows = rows.numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        out = np.empty((len(rows), *self.shape[1:]), np.uint8) if out is None else out
        staged = np.empty_like(out)
        order = self.take_ascending(rows, staged)
        out[order] = staged
        return out

    def take_ascending(self, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Gather the images of ``rows`` in ascending row order into ``out`` and return ``order``:
        ``out[k]`` holds row ``rows[order[k]]``, equal rows in the order asked (a stable sort: the
        same ``order`` on every machine). One copy per image (``np.take(out=)`` per shard,
        reading each shard's pages in increasing order), no temporary: the reader's fast path, which
        puts the batch back in the asked order with one gather on the device."""
        rows = np.asarray(rows)
        order = np.argsort(rows, kind="stable")
        if len(rows) == 0:
            return order
        sorted_rows = rows[order]
        if sorted_rows[0] < 0 or sorted_rows[-1] >= len(self):
            raise IndexError(f"rows {sorted_rows[0]}..{sorted_rows[-1]} out of range for {len(self)} images")
        shard = np.searchsorted(self.starts, sorted_rows, side="right") - 1
        cuts = np.flatnonzero(np.diff(shard)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(rows)]):
            s = shard[lo]  # mode="clip": the rows are in range (checked above), and numpy buffers out= otherwise
            np.take(self.shards[s], sorted_rows[lo:hi] - self.starts[s], axis=0, out=out[lo:hi], mode="clip")
        return order


def _check_shard(path: Path, a: np.memmap, shape: tuple[int, ...], dtype: type, entry: dict[str, Any],
                 key: str) -> None:
    """The shard file ``path`` (opened as ``a``) is the one ``index.json`` describes: its header,
    its size (header + data, no more), and its content: the labels' sha256 (they are read whole
    anyway), the images' :func:`shard_probe` (in packs written since the index holds one)."""
    if a.shape != shape or a.dtype != dtype:
        raise BadData(f"{path}: holds {a.dtype} {a.shape}, the index says {np.dtype(dtype)} {shape}; "
                      f"the pack is damaged — pack again")
    size = os.path.getsize(path)
    if size != a.offset + a.nbytes:
        raise BadData(f"{path}: {size} bytes, but its header says {a.offset + a.nbytes}; the pack is damaged — "
                      f"pack again into a new folder")
    if key == "labels":
        same = "sha256" not in entry or sha256_file(path) == entry["sha256"]["labels"]
    else:
        same = "probe" not in entry or shard_probe(path) == entry["probe"]
    if not same:
        raise BadData(f"{path}: its content differs from what {INDEX_NAME} records (another pack's images, or "
                      f"changed since it was packed); pack again into a new folder")


def verify_pack(root: str | os.PathLike) -> int:
    """Check every shard's sha256 against the index; returns the number of files checked."""
    p = Pack(root)
    n = 0
    for entry in p.splits.values():
        for sh in entry["shards"]:
            for key in ("images", "labels"):
                path = p.root / sh[key]
                if not path.is_file():
                    raise BadData(f"{path}: missing; pack again")
                if sha256_file(path) != sh["sha256"][key]:
                    raise BadData(f"{path}: sha256 differs from {INDEX_NAME}; the shard is corrupt — pack again "
                                  f"into a new folder")
                n += 1
    return n
