"""``pack``: write an image folder, WebDataset tar or Parquet shards (``mlplab.data.sources``) or a
dataset of the table as a pack (format: ``mlplab.data.packed``).

Each shard is written to a temporary file and renamed when complete; finished shards (with their
sha256 and byte histograms, for the mean/std) are recorded in ``.pack-state.json``, so a killed
``pack`` run again with the same arguments verifies the finished shards and packs only the rest.
``index.json`` is written last.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import BadInput
from ..utils.io import atomic_save, atomic_write_json
from .formats import decode_image, list_image_folder
from .sources import SHARD_KINDS, find_shards, open_shards
from .packed import (FORMAT_NAME, FORMAT_VERSION, INDEX_NAME, STATE_NAME, _read_json, is_pack, sha256_file,
                     shard_files, verify_pack)

__all__ = ["pack", "DEFAULT_SHARD_SIZE"]

DEFAULT_SHARD_SIZE = 10_000
_CHUNK = 64  # images per decoding task
_SHARD_FILE = re.compile(r"(train|val|test)-\d{5}\.(images|labels)\.npy|\.(train|val|test)-\d{5}\..*\.tmp")


# ----------------------------------------------------------------------------- sources

def _decode_chunk(paths: Sequence[str], size: int, in_chans: int) -> np.ndarray:
    """Worker task: decode (shorter side to ``size``, centre crop) a list of files."""
    return np.stack([decode_image(p, size, in_chans) for p in paths])


@dataclass
class _SplitSource:
    """One split to pack: labels, and a reader of image rows [lo, hi)."""
    labels: np.ndarray
    read: Callable[[int, int, Executor | None], np.ndarray]
    digest: str  # what identifies the content (file list, or the array bytes)


@dataclass
class _Source:
    name: str
    classes: list[str]
    in_chans: int
    splits: dict[str, _SplitSource]


def _folder_source(root: Path, size: int, in_chans: int) -> _Source:
    classes = None
    splits: dict[str, _SplitSource] = {}
    for split in ("train", "val", "test"):
        if not (root / split).is_dir():
            continue
        paths, labels, found = list_image_folder(root / split, classes, require_images=split == "train")
        classes = classes if classes is not None else found
        names = [str(p) for p in paths]
        h = hashlib.sha256()
        for p in paths:
            st = p.stat()
            h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())

        def read(lo: int, hi: int, ex: Executor | None, names=names) -> np.ndarray:
            part = names[lo:hi]
            if ex is None or len(part) < 64:
                return _decode_chunk(part, size, in_chans)
            step = _CHUNK
            chunks = [part[i:i + step] for i in range(0, len(part), step)]
            return np.concatenate(list(ex.map(_decode_chunk, chunks, [size] * len(chunks), [in_chans] * len(chunks))))

        splits[split] = _SplitSource(labels, read, h.hexdigest())
    if "train" not in splits:
        raise BadInput(f"{root} has no train/ folder; an image folder to pack holds train/<class>/<image> "
                       f"(and optionally val/<class>/<image>)")
    return _Source(f"imagefolder:{root.resolve()}", list(classes or []), in_chans, splits)


def _table_source(name: str, size: int, root: str | None, download: bool) -> _Source:
    from .datasets import load_dataset
    from .table import get_info

    info = get_info(name)
    splits: dict[str, _SplitSource] = {}
    classes: list[str] = []
    for split in info.splits:
        d = load_dataset(name, split, root=root, download=download, image_size=size)
        x = d.images.numpy()
        classes = classes or list(d.classes) or [str(i) for i in range(d.info.num_classes)]
        h = hashlib.sha256(x.tobytes())
        h.update(d.labels.numpy().tobytes())
        splits[split] = _SplitSource(d.labels.numpy(), lambda lo, hi, ex, x=x: x[lo:hi], h.hexdigest())
    return _Source(name, classes, int(info.in_chans), splits)


def _open_source(source: str | os.PathLike, size: int, in_chans: int, root: str | None, download: bool,
                 keys: tuple[str | None, str | None] = (None, None)) -> _Source:
    from .table import DATASETS

    path = Path(source).expanduser()
    shards = find_shards(path)
    if shards:
        s = open_shards(path, shards, size, in_chans, *keys)
        return _Source(s.name, s.classes, in_chans,
                       {k: _SplitSource(v.labels, v.read, v.digest) for k, v in s.splits.items()})
    if keys != (None, None):
        raise BadInput("--image-key and --label-key name what tar and Parquet shards hold; "
                       f"{source} holds no .tar or .parquet files")
    if str(source) in DATASETS and not path.is_dir():
        if DATASETS[str(source)].format in ("imagefolder", "synthetic", "packed"):
            raise BadInput(f"pack an image folder by its path (mlplab pack DIR DST), not the table name {source!r}")
        return _table_source(str(source), size, root, download)
    if path.is_dir():
        return _folder_source(path, size, in_chans)
    raise BadInput(f"{source} is neither a folder nor a dataset of the table; give an image folder "
                   f"(DIR/train/<class>/<image>), a folder of .tar or .parquet shards, or one of: "
                   f"{', '.join(k for k, v in sorted(DATASETS.items()) if v.format not in ('imagefolder', 'synthetic', 'packed'))}")


# ----------------------------------------------------------------------------- packing

def _plan_fingerprint(src: _Source, size: int, shard_size: int) -> str:
    plan = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "source": src.name, "image_size": size,
            "in_chans": src.in_chans, "shard_size": shard_size, "classes": src.classes,
            "splits": {k: [len(s.labels), s.digest] for k, s in src.splits.items()}}
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()


def _histograms(x: np.ndarray) -> list[list[int]]:
    """Per-channel counts of each byte value 0..255: exact statistics that add over shards."""
    h = np.zeros((x.shape[1], 256), np.int64)
    for i in range(0, len(x), 256):  # bincount widens to int64: chunks keep that copy small (25 MB at 64x64x3)
        for c in range(x.shape[1]):
            h[c] += np.bincount(x[i:i + 256, c].reshape(-1), minlength=256)
    return h.tolist()


def _mean_std(hists: list[list[int]]) -> tuple[list[float], list[float]]:
    v = np.arange(256, dtype=np.float64) / 255
    mean, std = [], []
    for h in np.asarray(hists, dtype=np.float64):
        n = max(h.sum(), 1.0)
        m = float((h * v).sum() / n)
        mean.append(round(m, 6))
        std.append(round(float(math.sqrt(max((h * v * v).sum() / n - m * m, 0.0))), 6))
    return mean, std


def _save_npy(path: Path, array: np.ndarray) -> str:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.save(f, array)
    atomic_save(path, write)
    return sha256_file(path)


class _Report:
    """tqdm bar on a terminal, one line per shard otherwise."""

    def __init__(self, total: int, mode: str):
        tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.mode = ("bar" if tty else "lines") if mode == "auto" else mode
        self.bar = None
        if self.mode == "bar":
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="img", desc="pack", file=sys.stderr, smoothing=0.1)
        self.t0, self.total, self.done = time.perf_counter(), total, 0

    def shard(self, name: str, n: int, reused: bool) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.mode == "lines":
            rate = self.done / max(time.perf_counter() - self.t0, 1e-9)
            print(f"pack: {name} {'verified' if reused else 'written'} ({self.done}/{self.total} images, "
                  f"{rate:,.0f} img/s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def pack(source: str | os.PathLike, dst: str | os.PathLike, image_size: int, *, workers: int = 2,
         shard_size: int = DEFAULT_SHARD_SIZE, in_chans: int = 3, root: str | None = None, download: bool = False,
         progress: str = "auto", image_key: str | None = None, label_key: str | None = None) -> dict[str, Any]:
    """Pack an image folder (``source`` a path holding ``train/<class>/<image>``), WebDataset tar
    or Parquet shards (``source`` a folder of them or one file; ``image_key``/``label_key`` as in
    ``mlplab.data.sources``) or a dataset of the table (``source`` its name; ``root``/``download``
    as in ``load_dataset``) into ``dst`` (module docstring), images resized to ``image_size``
    (shorter side, centre crop for files; antialiased bilinear for tensor datasets). ``workers``
    processes decode image files.
    Returns the index. A finished pack of the same plan is verified and returned as it is."""
    if int(image_size) < 1:
        raise BadInput(f"--image-size must be a positive number of pixels, got {image_size}")
    if shard_size < 1:
        raise BadInput(f"--shard-size must be >= 1, got {shard_size}")
    if in_chans not in (1, 3):
        raise BadInput(f"--in-chans must be 1 (grey) or 3 (RGB), got {in_chans}")
    dst = Path(dst).expanduser()
    if dst.exists() and not dst.is_dir():
        raise BadInput(f"{dst} is a file; give a folder (new or empty) for the pack")
    src = _open_source(source, int(image_size), in_chans, root, download, (image_key, label_key))
    fingerprint = _plan_fingerprint(src, int(image_size), shard_size)
    if is_pack(dst):
        index = _read_json(dst / INDEX_NAME)
        if index.get("fingerprint") != fingerprint:
            raise BadInput(f"{dst} already holds a pack of other settings or data ({index.get('source')}, "
                           f"{index.get('image_size')}); choose another destination or delete it")
        verify_pack(dst)
        return index
    state_path = dst / STATE_NAME
    state = _read_json(state_path) if state_path.is_file() else None
    if state is not None and state.get("fingerprint") != fingerprint:
        # an unfinished pack of other settings, or of files that changed since (a broken image
        # replaced): its shards were written by pack itself, so they are removed and packing restarts
        for f in dst.iterdir():
            if _SHARD_FILE.fullmatch(f.name):
                f.unlink()
        print(f"pack: {dst} held an unfinished pack of other settings or files; starting it again", file=sys.stderr)
        state = None
    if state is None and dst.is_dir() and any(p.name != STATE_NAME for p in dst.iterdir()):
        raise BadInput(f"{dst} is not empty and holds no pack; give a new or empty folder")
    state = state or {"fingerprint": fingerprint, "source": src.name, "done": {}}
    dst.mkdir(parents=True, exist_ok=True)
    atomic_write_json(state_path, state)

    total = sum(len(s.labels) for s in src.splits.values())
    report = _Report(total, progress)
    decoded = ("imagefolder:", *(f"{k}:" for k in SHARD_KINDS.values()))  # sources of encoded image files
    ex = ProcessPoolExecutor(workers) if workers > 1 and src.name.startswith(decoded) else None
    splits_index: dict[str, Any] = {}
    train_hists: list[list[int]] | None = None
    try:
        for split, s in src.splits.items():
            shards = []
            n = len(s.labels)
            for k in range(math.ceil(n / shard_size)):
                lo, hi = k * shard_size, min(n, (k + 1) * shard_size)
                img_name, lab_name = shard_files(split, k)
                done = state["done"].get(img_name)
                reused = done is not None and _shard_intact(dst, img_name, lab_name, done["sha256"])
                if not reused:
                    x = s.read(lo, hi, ex)
                    y = np.ascontiguousarray(s.labels[lo:hi], dtype=np.int64)
                    done = {"count": hi - lo, "hist": _histograms(x) if split == "train" else None,
                            "sha256": {"images": _save_npy(dst / img_name, np.ascontiguousarray(x, np.uint8)),
                                       "labels": _save_npy(dst / lab_name, y)}}
                    state["done"][img_name] = done
                    atomic_write_json(state_path, state)
                if split == "train":
                    h = np.asarray(done["hist"], dtype=np.int64)
                    train_hists = h if train_hists is None else train_hists + h
                shards.append({"images": img_name, "labels": lab_name, "count": hi - lo, "sha256": done["sha256"]})
                report.shard(img_name, hi - lo, reused)
            splits_index[split] = {"count": n, "shards": shards}
    finally:
        report.close()
        if ex is not None:
            ex.shutdown(cancel_futures=True)
    mean, std = _mean_std(np.asarray(train_hists).tolist())
    index = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "image_size": [int(image_size)] * 2,
             "in_chans": src.in_chans, "dtype": "uint8", "layout": "NCHW", "classes": src.classes,
             "num_classes": len(src.classes), "mean": mean, "std": std, "source": src.name,
             "shard_size": shard_size, "fingerprint": fingerprint, "splits": splits_index}
    atomic_write_json(dst / INDEX_NAME, index)
    state_path.unlink()
    return index


def _shard_intact(dst: Path, img_name: str, lab_name: str, sha: dict[str, str]) -> bool:
    return all((dst / f).is_file() and sha256_file(dst / f) == sha[k]
               for f, k in ((img_name, "images"), (lab_name, "labels")))
