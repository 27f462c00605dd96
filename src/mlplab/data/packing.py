"""``pack``: write an image folder, WebDataset tar or Parquet shards (``mlplab.data.sources``) or a
dataset of the table as a pack (format: ``mlplab.data.packed``).

Each shard is written to a temporary file and renamed when complete; finished shards (with their
sha256, byte histograms for the mean/std, and a digest of their source files) are recorded in
``.pack-state.json``, so a killed ``pack`` run again with the same arguments verifies the
finished shards and packs only the rest (and the shards whose source files changed since).
``index.json`` is written last.

The destination is held by one ``pack`` at a time (``mlplab.utils.io.folder_lock``); a second
one, or one with other settings than the unfinished pack it finds, is refused and changes
nothing. A pack inside the folder it packs, or one whose shards cannot fit in memory, is refused
before anything is written.
"""
from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import re
import shlex
import signal
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import BadInput
from ..utils.io import LOCK_FILE, atomic_save, atomic_write_json, claimed_folder
from ..utils.machine import host_memory_available
from ..utils.processes import die_with_parent
from .formats import decode_image, list_image_folder
from .packed import (
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_NAME,
    STATE_NAME,
    _read_json,
    is_pack,
    sha256_file,
    shard_files,
    shard_probe,
    verify_pack,
)
from .sources import SHARD_KINDS, find_shards, open_shards

__all__ = ["pack", "DEFAULT_SHARD_SIZE"]

DEFAULT_SHARD_SIZE = 10_000
_CHUNK = 64  # images per decoding task
_BINCOUNT_VALUES = 1 << 23  # values per np.bincount call (_histograms)
#: a temporary file of ``atomic_save`` (a shard, the state or the index) that a killed pack left
_TEMP_FILE = re.compile(r"\.(?:(?:train|val|test)-\d{5}\.(?:images|labels)\.npy|\.pack-state\.json|index\.json)"
                        r"\..+\.tmp")


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
    shard_digest: Callable[[int, int], str]  # the same for rows [lo, hi): a shard is packed again when it changes


@dataclass
class _Source:
    name: str
    classes: list[str]
    in_chans: int
    splits: dict[str, _SplitSource]
    folder: Path | None = None  # the folder of the files packed (None: a dataset of the table)


def _digest(lines: Sequence[bytes | np.ndarray]) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line)
    return h.hexdigest()


def _folder_source(root: Path, size: int, in_chans: int) -> _Source:
    classes = None
    splits: dict[str, _SplitSource] = {}
    for split in ("train", "val", "test"):
        if not (root / split).is_dir():
            continue
        paths, labels, found = list_image_folder(root / split, classes, require_images=split == "train")
        classes = classes if classes is not None else found
        names = [str(p) for p in paths]
        lines = []  # per file: where it is, its size and time, its class
        for p, y in zip(paths, labels):
            st = p.stat()
            lines.append(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0{y}\n".encode())

        def read(lo: int, hi: int, ex: Executor | None, names=names) -> np.ndarray:
            part = names[lo:hi]
            if ex is None or len(part) < 64:
                return _decode_chunk(part, size, in_chans)
            step = _CHUNK
            chunks = [part[i:i + step] for i in range(0, len(part), step)]
            return np.concatenate(list(ex.map(_decode_chunk, chunks, [size] * len(chunks), [in_chans] * len(chunks))))

        splits[split] = _SplitSource(labels, read, _digest(lines), lambda lo, hi, lines=lines: _digest(lines[lo:hi]))
    if "train" not in splits:
        raise BadInput(f"{root} has no train/ folder; an image folder to pack holds train/<class>/<image> "
                       f"(and optionally val/<class>/<image>)")
    return _Source(f"imagefolder:{root.resolve()}", list(classes or []), in_chans, splits, root)


def _table_source(name: str, size: int, root: str | None, download: bool) -> _Source:
    from .datasets import load_dataset
    from .table import get_info

    info = get_info(name)
    splits: dict[str, _SplitSource] = {}
    classes: list[str] = []
    for split in info.splits:
        d = load_dataset(name, split, root=root, download=download, image_size=size)
        x, y = d.images.numpy(), d.labels.numpy()
        classes = classes or list(d.classes) or [str(i) for i in range(d.info.num_classes)]
        rows = lambda lo, hi, x=x, y=y: [x[lo:hi], y[lo:hi]]  # noqa: E731  (hashed in place, not copied)
        splits[split] = _SplitSource(y, lambda lo, hi, ex, x=x: x[lo:hi], _digest(rows(0, len(y))),
                                     lambda lo, hi, rows=rows: _digest(rows(lo, hi)))
    return _Source(name, classes, int(info.in_chans), splits)


def _open_source(source: str | os.PathLike, size: int, in_chans: int, root: str | None, download: bool,
                 keys: tuple[str | None, str | None] = (None, None)) -> _Source:
    from .table import DATASETS

    path = Path(source).expanduser()
    shards = find_shards(path)
    if shards:
        s = open_shards(path, shards, size, in_chans, *keys)
        # a shard's content is the split's files: any change to them packs every shard again
        return _Source(s.name, s.classes, in_chans,
                       {k: _SplitSource(v.labels, v.read, v.digest, lambda lo, hi, d=v.digest: f"{d}:{lo}:{hi}")
                        for k, v in s.splits.items()}, path if path.is_dir() else path.parent)
    if keys != (None, None):
        raise BadInput("--image-key and --label-key name what tar and Parquet shards hold; "
                       f"{source} holds no .tar or .parquet files")
    if str(source) in DATASETS and not path.is_dir():
        if DATASETS[str(source)].format in ("imagefolder", "synthetic", "packed"):
            raise BadInput(f"pack an image folder by its path (mlplab pack DIR DST), not the table name {source!r}")
        return _table_source(str(source), size, root, download)
    if path.is_dir():
        return _folder_source(path, size, in_chans)
    packable = (k for k, v in sorted(DATASETS.items()) if v.format not in ("imagefolder", "synthetic", "packed"))
    raise BadInput(f"{source} is neither a folder nor a dataset of the table; give an image folder "
                   f"(DIR/train/<class>/<image>), a folder of .tar or .parquet shards, or one of: "
                   f"{', '.join(packable)}")


# ----------------------------------------------------------------------------- packing

def _plan_fingerprint(src: _Source, size: int, shard_size: int) -> str:
    plan = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "source": src.name, "image_size": size,
            "in_chans": src.in_chans, "shard_size": shard_size, "classes": src.classes,
            "splits": {k: [len(s.labels), s.digest] for k, s in src.splits.items()}}
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()


def _histograms(x: np.ndarray) -> list[list[int]]:
    """Per-channel counts of each byte value 0..255: exact statistics that add over shards.
    ``np.bincount`` widens its input to int64, so it is given at most ``_BINCOUNT_VALUES`` values
    at a time (a 64 MiB copy, whatever the image size)."""
    n, ch = x.shape[:2]
    rows = max(1, _BINCOUNT_VALUES // max(1, math.prod(x.shape[2:])))
    h = np.zeros((ch, 256), np.int64)
    for i in range(0, n, rows):
        for c in range(ch):
            v = x[i:i + rows, c].reshape(-1)
            for j in range(0, len(v), _BINCOUNT_VALUES):
                h[c] += np.bincount(v[j:j + _BINCOUNT_VALUES], minlength=256)
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


#: what a second pack into a folder in use is told
PACK_BUSY = "wait for it to finish (or stop it); a pack has one writer at a time"


def pack(source: str | os.PathLike, dst: str | os.PathLike, image_size: int, *, workers: int = 2,
         shard_size: int = DEFAULT_SHARD_SIZE, in_chans: int = 3, root: str | None = None, download: bool = False,
         progress: str = "auto", image_key: str | None = None, label_key: str | None = None) -> dict[str, Any]:
    """Pack an image folder (``source`` a path holding ``train/<class>/<image>``), WebDataset tar
    or Parquet shards (``source`` a folder of them or one file; ``image_key``/``label_key`` as in
    ``mlplab.data.sources``) or a dataset of the table (``source`` its name; ``root``/``download``
    as in ``load_dataset``) into ``dst`` (module docstring), images resized to ``image_size``
    (shorter side, centre crop for files; antialiased bilinear for tensor datasets). ``workers``
    processes decode image files.
    Returns the index. A finished pack of the same plan is verified and returned as it is.

    One writer at a time: ``dst`` is locked (``.lock``, as run folders are). An unfinished pack
    is finished only with the settings it was started with (source, size, shard size, channels);
    another command is refused and nothing is changed. Source files changed since are packed
    again shard by shard. A refused call leaves nothing behind."""
    size = int(image_size)
    if size < 1:
        raise BadInput(f"--image-size must be a positive number of pixels, got {image_size}")
    if shard_size < 1:
        raise BadInput(f"--shard-size must be >= 1, got {shard_size}")
    if in_chans not in (1, 3):
        raise BadInput(f"--in-chans must be 1 (grey) or 3 (RGB), got {in_chans}")
    dst = Path(dst).expanduser()
    if dst.exists() and not dst.is_dir():
        raise BadInput(f"{dst} is a file; give a folder (new or empty) for the pack")
    src = _open_source(source, size, in_chans, root, download, (image_key, label_key))
    _check_destination(src, dst)
    _check_memory(src, size, shard_size)
    settings = {"source": src.name, "image_size": size, "shard_size": shard_size, "in_chans": src.in_chans}
    fingerprint = _plan_fingerprint(src, size, shard_size)
    if is_pack(dst):  # finished: read only (a shared pack may not be writable)
        return _finished(dst, fingerprint)
    with claimed_folder(dst, PACK_BUSY):
        if is_pack(dst):  # finished by the writer that held it a moment ago
            return _finished(dst, fingerprint)
        state = _start_or_resume(dst, settings)
        try:
            index = _write_shards(src, dst, state, fingerprint, workers, progress)
        except BaseException:
            if not state["done"]:  # nothing worth keeping: leave the folder as it was
                (dst / STATE_NAME).unlink(missing_ok=True)
            raise
        atomic_write_json(dst / INDEX_NAME, index)
        (dst / STATE_NAME).unlink()
    return index


def _check_destination(src: _Source, dst: Path) -> None:
    """A pack inside the folder it packs would pack itself (and add files to the user's data)."""
    if src.folder is None:
        return
    here, there = src.folder.resolve(), dst.resolve()
    if there == here or here in there.parents:
        raise BadInput(f"{dst} is inside the source folder {src.folder}; the pack's files would land among the "
                       f"images it packs: give a destination outside {src.folder}")


def _check_memory(src: _Source, size: int, shard_size: int) -> None:
    """Refuse a pack whose shard cannot be assembled in the memory available now: a shard is held
    twice while it is assembled from its decoded chunks, and each chunk twice while it is decoded."""
    free = host_memory_available()
    per_image = src.in_chans * size * size
    rows = min(shard_size, max(len(s.labels) for s in src.splits.values()))
    need = 2 * rows * per_image + 2 * min(_CHUNK, rows) * per_image
    if free is None or need <= free:
        return
    # the largest shard that fits: 4 images' worth per image up to one chunk, 2 beyond
    fits = free // (4 * per_image) if free < 4 * _CHUNK * per_image else (free // per_image - 2 * _CHUNK) // 2
    fix = f"choose --shard-size {fits} or less, or a smaller --image-size" if fits >= 1 else \
        "choose a smaller --image-size"
    raise BadInput(f"--image-size {size} needs about {need / 2**30:,.1f} GiB of memory to pack ({rows} images of "
                   f"{per_image / 2**20:,.1f} MiB per shard), more than the {free / 2**30:.1f} GiB available; {fix}")


def _finished(dst: Path, fingerprint: str) -> dict[str, Any]:
    index = _read_json(dst / INDEX_NAME)
    if index.get("fingerprint") != fingerprint:
        raise BadInput(f"{dst} already holds a pack of other settings or data ({index.get('source')}, "
                       f"{index.get('image_size')}); choose another destination or delete it")
    verify_pack(dst)
    return index


def _command(settings: dict[str, Any], dst: Path) -> str:
    """The ``mlplab pack`` command that packs with ``settings``."""
    s = settings
    folder = str(s["source"]).startswith("imagefolder:")
    extra = (f" --shard-size {s['shard_size']}" if s["shard_size"] != DEFAULT_SHARD_SIZE else "") + \
        (" --in-chans 1" if s["in_chans"] == 1 and folder else "")
    source = str(s["source"])
    for kind in ("imagefolder", *SHARD_KINDS.values()):  # the source's path, without its kind
        source = source.removeprefix(f"{kind}:")
    return f"mlplab pack {shlex.quote(source)} {shlex.quote(str(dst))} --image-size {s['image_size']}{extra}"


def _start_or_resume(dst: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The packing state of ``dst`` (held): an unfinished pack of the same settings is continued,
    one of other settings with finished shards refused, anything else started afresh."""
    for f in dst.iterdir():  # temporary files of a writer that was killed mid-write
        if _TEMP_FILE.fullmatch(f.name):
            f.unlink()
    state_path = dst / STATE_NAME
    state = _read_json(state_path) if state_path.is_file() else None
    if state is not None and state.get("done") and state.get("settings") != settings:
        was = state.get("settings")
        what = (f"of {str(was['source']).split(':', 1)[-1]} at {was['image_size']}x{was['image_size']}"
                if was else "made by an older mlplab")
        how = f"finish it with `{_command(was, dst)}`, or " if was else ""
        raise BadInput(f"{dst} holds an unfinished pack {what} ({len(state['done'])} shard(s) done) with other "
                       f"settings than this command's; nothing was changed: {how}delete {dst} to start over")
    if state is None and any(p.name not in (STATE_NAME, LOCK_FILE) for p in dst.iterdir()):
        raise BadInput(f"{dst} is not empty and holds no pack; give a new or empty folder")
    if state is None or state.get("settings") != settings:
        state = {"settings": settings, "done": {}}
    atomic_write_json(state_path, state)
    return state


def _write_shards(src: _Source, dst: Path, state: dict[str, Any], fingerprint: str, workers: int,
                  progress: str) -> dict[str, Any]:
    """Write every shard not yet written (a finished shard whose source files did not change and
    whose files match their sha256 is kept); returns the index."""
    total = sum(len(s.labels) for s in src.splits.values())
    report = _Report(total, progress)
    # decoders that die with this process, and spawned, not forked: a forked one would share the
    # destination's lock, and after a kill of this process would live on holding what the rerun needs
    decoded = ("imagefolder:", *(f"{k}:" for k in SHARD_KINDS.values()))  # sources of encoded image files
    parallel = workers > 1 and src.name.startswith(decoded)
    ex = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=die_with_parent,
                             initargs=(os.getpid(), signal.SIGKILL)) if parallel else None
    shard_size = state["settings"]["shard_size"]
    splits_index: dict[str, Any] = {}
    train_hists: np.ndarray | None = None
    try:
        for split, s in src.splits.items():
            shards = []
            n = len(s.labels)
            for k in range(math.ceil(n / shard_size)):
                lo, hi = k * shard_size, min(n, (k + 1) * shard_size)
                img_name, lab_name = shard_files(split, k)
                digest = s.shard_digest(lo, hi)
                done = state["done"].get(img_name)
                reused = (done is not None and done.get("source") == digest
                          and _shard_intact(dst, img_name, lab_name, done["sha256"]))
                if not reused:
                    done = _write_shard(dst, s, split, lo, hi, img_name, lab_name, ex)
                    state["done"][img_name] = {**done, "source": digest}
                    atomic_write_json(dst / STATE_NAME, state)
                if split == "train":
                    h = np.asarray(done["hist"], dtype=np.int64)
                    train_hists = h if train_hists is None else train_hists + h
                shards.append({"images": img_name, "labels": lab_name, "count": hi - lo, "sha256": done["sha256"],
                               "probe": done.get("probe") or shard_probe(dst / img_name)})
                report.shard(img_name, hi - lo, reused)
            splits_index[split] = {"count": n, "shards": shards}
    finally:
        report.close()
        if ex is not None:
            ex.shutdown(cancel_futures=True)
    mean, std = _mean_std(np.asarray(train_hists).tolist())
    size = state["settings"]["image_size"]
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "image_size": [size, size],
            "in_chans": src.in_chans, "dtype": "uint8", "layout": "NCHW", "classes": src.classes,
            "num_classes": len(src.classes), "mean": mean, "std": std, "source": src.name,
            "shard_size": shard_size, "fingerprint": fingerprint, "splits": splits_index}


def _write_shard(dst: Path, s: _SplitSource, split: str, lo: int, hi: int, img_name: str, lab_name: str,
                 ex: Executor | None) -> dict[str, Any]:
    x = np.ascontiguousarray(s.read(lo, hi, ex), np.uint8)
    y = np.ascontiguousarray(s.labels[lo:hi], dtype=np.int64)
    return {"count": hi - lo, "hist": _histograms(x) if split == "train" else None,
            "sha256": {"images": _save_npy(dst / img_name, x), "labels": _save_npy(dst / lab_name, y)},
            "probe": shard_probe(dst / img_name)}


def _shard_intact(dst: Path, img_name: str, lab_name: str, sha: dict[str, str]) -> bool:
    return all((dst / f).is_file() and sha256_file(dst / f) == sha[k]
               for f, k in ((img_name, "images"), (lab_name, "labels")))
