"""What ``mlplab pack`` reads besides image folders: the shards people download from the Hub.

* **WebDataset tar shards** (timm's ``imagenet-1k-wds``: ``imagenet1k-train-0000.tar`` ...): a
  sample is the members that share a key (the member name up to the first dot of its file
  name): one image (``key.jpg``, ``.png``, ``.webp`` ... or the extension ``image_key``) and its
  label, the text of ``key.cls`` (or of the member ``key.<label_key>``), else the field
  ``"label"`` (or ``label_key``) of ``key.json``. Read with the standard library's ``tarfile``:
  the headers are indexed once, and each image is read at its offset, so the shards are packed in
  any order and by several processes. Compressed tars cannot be read that way and are refused.
* **Parquet files** (the Hub's datasets layout, timm's ``imagenet-w21-p``: ``data/train-00000-of-
  NNNNN.parquet`` with the columns ``image``, a struct of the encoded ``bytes`` and the original
  ``path``, and ``label``, an integer class): the image column (``image_key``, default ``image``;
  a struct with ``bytes`` or a binary column) and the label column (``label_key``, default
  ``label``; integers or class names). Class names come from the Hub's schema metadata when the
  label is a ``ClassLabel``. Needs pyarrow (``pip install 'mlplab[parquet]'``).

The split of a shard is the word ``train``, ``validation``/``val`` or ``test`` in its path (file
name or folder); when no path names a split, every shard is train. Labels are integers 0..K-1
(classes named by number, or by the metadata's names) or strings (classes are the sorted names
of the train split). A damaged shard or an image that does not decode is refused, in one sentence
naming the shard and the member or row (as an undecodable file of an image folder is): a pack
never silently lacks images of its source. Download that shard again and run the same ``pack``.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import BadInput
from .download import BadData
from .formats import IMAGE_EXTENSIONS, decode_image

__all__ = ["ShardSource", "ShardSplit", "find_shards", "open_shards", "SHARD_KINDS"]

#: file suffix -> the kind of shard source (the prefix of the pack's ``source``)
SHARD_KINDS = {".tar": "webdataset", ".parquet": "parquet"}
#: words of a shard's path -> the pack's split
_SPLIT_WORDS = {"train": "train", "validation": "val", "val": "val", "test": "test"}
_IMAGE_EXTS = tuple(e[1:] for e in IMAGE_EXTENSIONS)
_CHUNK = 64  # images per decoding task
_PARQUET_EXTRA = "pip install 'mlplab[parquet]'"


@dataclass
class ShardSplit:
    """One split: labels, a reader of image rows [lo, hi) (``read(lo, hi, executor)``), and a
    digest of what identifies the content (the shard files' names, sizes and times, the keys)."""
    labels: np.ndarray
    read: Callable[[int, int, Executor | None], np.ndarray]
    digest: str


@dataclass
class ShardSource:
    name: str  # "webdataset:<absolute path>" or "parquet:<absolute path>"
    classes: list[str]
    splits: dict[str, ShardSplit]


# ----------------------------------------------------------------------------- finding shards

def _is_image_folder(path: Path) -> bool:
    train = path / "train"
    return train.is_dir() and any(p.is_dir() for p in train.iterdir())


def find_shards(path: Path) -> list[Path]:
    """The tar or Parquet files of ``path`` (itself, or a folder searched recursively; hidden
    files skipped), sorted; empty for an image folder (``train/<class>/...``) or a folder without
    shards. Both kinds at once, or compressed tars, are refused."""
    if path.is_file():
        candidates = [path]
    elif path.is_dir() and not _is_image_folder(path):
        candidates = [p for p in path.rglob("*") if not any(q.startswith(".") for q in p.relative_to(path).parts)]
    else:
        return []
    files = sorted(p for p in candidates if p.suffix.lower() in SHARD_KINDS and p.is_file())
    if not files:
        compressed = (".tar.gz", ".tgz", ".tar.xz", ".tar.zst")
        packed = next((p for p in candidates if p.name.lower().endswith(compressed)), None)
        if packed is not None:
            raise BadInput(f"{packed} is a compressed tar, which cannot be read at random; decompress the shards "
                           "to plain .tar files (e.g. gunzip) and pack those")
    if len({p.suffix.lower() for p in files}) > 1:
        raise BadInput(f"{path} holds both tar and Parquet shards; give the folder of one of them")
    return files


def _split_of(rel: Path) -> str | None:
    words = {w for w in re.split(r"[-_./\\]+", str(rel).lower()) if w in _SPLIT_WORDS}
    splits = {_SPLIT_WORDS[w] for w in words}
    if len(splits) > 1:
        raise BadInput(f"{rel} names two splits ({', '.join(sorted(words))}); rename it so that its path names one of "
                       "train, validation (or val), test")
    return splits.pop() if splits else None


def _group_by_split(root: Path, files: list[Path]) -> dict[str, list[Path]]:
    base = root if root.is_dir() else root.parent
    named = {f: _split_of(f.relative_to(base)) for f in files}
    if all(s is None for s in named.values()):
        return {"train": files}
    unnamed = [f for f, s in named.items() if s is None]
    if unnamed:
        raise BadInput(f"{unnamed[0]} names no split while other shards do; its path must name one of train, "
                       "validation (or val), test")
    groups = {s: [f for f in files if named[f] == s] for s in ("train", "val", "test")}
    if not groups["train"]:
        raise BadInput(f"{root} holds no train shards (paths naming train); a pack needs a train split")
    return {s: fs for s, fs in groups.items() if fs}


def _digest(files: Sequence[Path], base: Path, keys: tuple[str | None, str | None]) -> str:
    h = hashlib.sha256(json.dumps(keys).encode())
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(base)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


# ----------------------------------------------------------------------------- labels -> classes

def _as_labels(values: np.ndarray | list, where: Path) -> np.ndarray | list[str]:
    """Raw labels of one file: int64 class numbers, or a list of class names."""
    if isinstance(values, np.ndarray):
        return values
    if all(isinstance(v, int) for v in values):
        return np.asarray(values, np.int64)
    if all(isinstance(v, str) for v in values):
        return values
    raise BadData(f"{where}: labels mix numbers and names (e.g. {values[0]!r}); a source uses one kind")


def _class_indices(raw: dict[str, list], names: list[str] | None,
                   where: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """Per split, the raw labels of its files (``_as_labels``) -> (classes, int64 labels per split):
    class numbers 0..K-1 (K from ``names`` or the largest label) or class names (the sorted names
    of the train split)."""
    parts = [p for ps in raw.values() for p in ps]
    if all(isinstance(p, np.ndarray) for p in parts):
        arrays = {s: np.concatenate(ps) for s, ps in raw.items()}
        low, high = min(int(a.min()) for a in arrays.values()), max(int(a.max()) for a in arrays.values())
        k = len(names) if names else high + 1
        if low < 0 or high >= k:
            raise BadData(f"{where}: labels run from {low} to {high}, outside the {k} classes 0..{k - 1}"
                          f"{' of the metadata' if names else ''}; labels must be class numbers 0..K-1")
        return (list(names) if names else [str(i) for i in range(k)]), arrays
    if any(isinstance(p, np.ndarray) for p in parts):
        raise BadData(f"{where}: some shards label by class number, others by class name; a source uses one kind")
    classes = sorted({v for p in raw["train"] for v in p})
    index = {c: i for i, c in enumerate(classes)}
    out = {}
    for s, ps in raw.items():
        values = [v for p in ps for v in p]
        unknown = next((v for v in values if v not in index), None)
        if unknown is not None:
            raise BadData(f"{where}: the {s} split has the label {unknown!r}, which no train sample has; "
                          "every class must be among the train labels")
        out[s] = np.asarray([index[v] for v in values], np.int64)
    return classes, out


def _label_value(text: str | int | Any, where: str) -> int | str:
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise BadData(f"{where}: the label {text!r} is neither a class number nor a class name")
    if isinstance(text, str):
        text = text.strip()
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        if not text:
            raise BadData(f"{where}: the label is empty")
    return text


# ----------------------------------------------------------------------------- WebDataset tars

def _tar_samples(path: Path, image_key: str | None, label_key: str | None) -> tuple[list, list, list]:
    """(image offsets, image sizes, raw labels) of the samples of one tar, in member order. Only
    plain tars: a compressed one has no offsets to read at."""
    exts = (image_key.lower(),) if image_key else _IMAGE_EXTS
    samples: dict[str, dict[str, tarfile.TarInfo]] = {}
    try:
        with tarfile.open(path, "r:") as tf:
            for m in tf:
                folder, _, fname = m.name.rpartition("/")
                stem, dot, ext = fname.partition(".")
                if m.isfile() and dot and not fname.startswith("."):
                    samples.setdefault(f"{folder}/{stem}" if folder else stem, {}).setdefault(ext.lower(), m)
            offsets, sizes, labels = [], [], []
            for key, members in samples.items():
                image = next((members[e] for e in members if e in exts), None)
                if image is None:
                    raise BadData(f"{path}: sample {key} has no image member ({', '.join('.' + e for e in exts)}); "
                                  "the shard is damaged or not an image dataset: download it again")
                offsets.append(image.offset_data)
                sizes.append(image.size)
                labels.append(_tar_label(tf, path, key, members, label_key))
    except (tarfile.TarError, EOFError, OSError) as e:
        raise BadData(f"{path}: not a readable tar file ({e}); download it again") from None
    return offsets, sizes, labels


def _tar_label(tf: tarfile.TarFile, path: Path, key: str, members: dict, label_key: str | None) -> int | str:
    where = f"{path}: sample {key}"
    member = members.get(label_key or "cls")
    if member is not None:
        return _label_value(tf.extractfile(member).read().decode("utf-8", "replace"), where)
    field = label_key or "label"
    if "json" in members:
        try:
            meta = json.loads(tf.extractfile(members["json"]).read())
        except ValueError as e:
            raise BadData(f"{where}: its .json is not valid JSON ({e}); download the shard again") from None
        if isinstance(meta, dict) and field in meta:
            return _label_value(meta[field], where)
    raise BadData(f"{where} has no label: no .{label_key or 'cls'} member and no {field!r} in a .json; "
                  "name the label with --label-key (a member extension or a .json field)")


def _decode_tar_chunk(path: str, offsets: Sequence[int], sizes: Sequence[int], size: int, in_chans: int) -> np.ndarray:
    """Worker task: decode the images stored at ``offsets`` of one tar."""
    out = []
    with open(path, "rb") as f:
        for off, n in zip(offsets, sizes):
            f.seek(off)
            data = f.read(n)
            try:
                out.append(decode_image(io.BytesIO(data), size, in_chans))
            except BadData as e:
                raise BadData(f"{path}: member {_member_at(path, off)} cannot be decoded as an image "
                              f"({e.__cause__ or e}); the shard is damaged: download it again") from None
    return np.stack(out)


def _member_at(path: str, offset: int) -> str:
    """The name of the member whose data starts at ``offset`` (only read to word an error)."""
    with tarfile.open(path, "r:") as tf:
        return next((m.name for m in tf if m.offset_data == offset), f"at byte {offset}")


# ----------------------------------------------------------------------------- Parquet

def _pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise BadInput(f"reading Parquet files needs pyarrow, the extra 'parquet' of mlplab: "
                       f"{_PARQUET_EXTRA}") from None
    return pq


def _parquet_file(path: Path):
    pq = _pyarrow_parquet()
    import pyarrow as pa

    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise BadData(f"{path}: not a readable Parquet file ({e}); download it again") from None


def _class_names(pf, label_key: str) -> list[str] | None:
    """The names of a Hub ``ClassLabel`` column, from the schema's ``huggingface`` metadata."""
    meta = (pf.schema_arrow.metadata or {}).get(b"huggingface")
    try:
        feature = json.loads(meta)["info"]["features"][label_key]
    except (TypeError, ValueError, KeyError):
        return None
    names = feature.get("names") if isinstance(feature, dict) else None
    return [str(n) for n in names] if isinstance(names, list) and names else None


def _check_columns(path: Path, pf, image_key: str, label_key: str) -> None:
    import pyarrow as pa

    schema = pf.schema_arrow
    for key, what, option in ((label_key, "label", "--label-key"), (image_key, "image", "--image-key")):
        if key not in schema.names:
            raise BadInput(f"{path} has no column {key!r} (columns: {', '.join(schema.names)}); name the {what} "
                           f"column with {option}")
    t = schema.field(image_key).type
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or (pa.types.is_struct(t) and t.get_field_index("bytes") >= 0)):
        raise BadInput(f"{path}: column {image_key!r} is {t}, not encoded images (binary, or a struct with 'bytes'); "
                       "name the image column with --image-key")
    t = schema.field(label_key).type
    if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise BadInput(f"{path}: column {label_key!r} is {t}, not class numbers or names; name the label column "
                       "with --label-key")


def _parquet_labels(path: Path, image_key: str, label_key: str
                    ) -> tuple[np.ndarray | list[str], list[int], list[str] | None]:
    """(raw labels: int64 class numbers or class names, rows per row group, class names or None)
    of one Parquet file."""
    pf = _parquet_file(path)
    _check_columns(path, pf, image_key, label_key)
    column = pf.read(columns=[label_key]).column(0)
    if column.null_count:
        row = column.is_null().to_pylist().index(True)
        raise BadData(f"{path}: row {row} has no label (null in column {label_key!r}); download the file again")
    groups = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    import pyarrow as pa

    values = column.to_numpy().astype(np.int64) if pa.types.is_integer(column.type) else column.to_pylist()
    return values, groups, _class_names(pf, label_key)


def _decode_parquet_chunk(path: str, group: int, rows: Sequence[int], image_key: str, size: int,
                          in_chans: int) -> np.ndarray:
    """Worker task: decode ``rows`` (indices within row group ``group``) of one Parquet file."""
    column = _parquet_file(Path(path)).read_row_group(group, columns=[image_key]).column(0)
    out = []
    for r in rows:
        cell = column[r].as_py()
        data, name = (cell.get("bytes"), cell.get("path")) if isinstance(cell, dict) else (cell, None)
        try:
            if data is None:
                raise BadData("no bytes")
            out.append(decode_image(io.BytesIO(data), size, in_chans))
        except BadData as e:
            raise BadData(f"{path}: row {r} of row group {group}{f' ({name})' if name else ''} cannot be decoded as "
                          f"an image ({e.__cause__ or e}); the file is damaged: download it again") from None
    return np.stack(out)


# ----------------------------------------------------------------------------- the source

@dataclass
class _Rows:
    """Where each image of a split is: file index, and (tar) byte offset and size or (Parquet)
    row group and row within it."""
    files: list[str]
    file: np.ndarray
    a: np.ndarray
    b: np.ndarray


def _tasks(rows: _Rows, lo: int, hi: int, kind: str) -> list[tuple]:
    """The decoding tasks of rows [lo, hi): runs of one file (and row group), ``_CHUNK`` images
    at most (Parquet: up to 1024 rows of one row group, read once per task)."""
    cap = _CHUNK if kind == "webdataset" else 1024
    tasks, start = [], lo
    for i in range(lo + 1, hi + 1):
        same = i < hi and rows.file[i] == rows.file[start] and (kind == "webdataset" or rows.a[i] == rows.a[start])
        if not same or i - start == cap:
            f = rows.files[rows.file[start]]
            if kind == "webdataset":
                tasks.append((f, rows.a[start:i].tolist(), rows.b[start:i].tolist()))
            else:
                tasks.append((f, int(rows.a[start]), rows.b[start:i].tolist()))
            start = i
    return tasks


def _reader(rows: _Rows, kind: str, size: int, in_chans: int, image_key: str) -> Callable:
    def read(lo: int, hi: int, ex: Executor | None) -> np.ndarray:
        tasks = _tasks(rows, lo, hi, kind)
        if kind == "webdataset":
            args = [list(t) + [size, in_chans] for t in tasks]
            fn = _decode_tar_chunk
        else:
            args = [list(t) + [image_key, size, in_chans] for t in tasks]
            fn = _decode_parquet_chunk
        parts = [fn(*a) for a in args] if ex is None else list(ex.map(fn, *zip(*args)))
        return np.concatenate(parts)
    return read


def _index_files(kind: str, files: list[Path], image_key: str | None, label_key: str | None
                 ) -> tuple[_Rows, list, list[str] | None]:
    """Every image of ``files``: where it is, the raw labels of each file (``_as_labels``), and
    the class names a file states."""
    fidx, a, b, labels = [], [], [], []
    names = None
    for i, f in enumerate(files):
        if kind == "webdataset":
            offsets, sizes, raw = _tar_samples(f, image_key, label_key)
            a.append(np.asarray(offsets, np.int64))
            b.append(np.asarray(sizes, np.int64))
        else:
            raw, groups, found = _parquet_labels(f, image_key or "image", label_key or "label")
            names = names or found
            a.append(np.repeat(np.arange(len(groups), dtype=np.int64), groups))  # row group of each row
            b.append(np.concatenate([np.arange(n, dtype=np.int64) for n in groups] or [np.zeros(0, np.int64)]))
        if len(raw) == 0:
            raise BadData(f"{f} holds no samples; download it again or remove it")
        fidx.append(np.full(len(raw), i, np.int32))
        labels.append(_as_labels(raw, f))
    rows = _Rows([str(f) for f in files], np.concatenate(fidx), np.concatenate(a), np.concatenate(b))
    return rows, labels, names


def open_shards(path: Path, files: list[Path], size: int, in_chans: int, image_key: str | None = None,
                label_key: str | None = None) -> ShardSource:
    """The shards ``files`` (``find_shards(path)``) as a source to pack: splits by path, every
    sample indexed, labels turned into classes (module docstring)."""
    kind = SHARD_KINDS[files[0].suffix.lower()]
    base = path if path.is_dir() else path.parent
    rows, raw, digests = {}, {}, {}
    names = None
    for split, fs in _group_by_split(path, files).items():
        rows[split], raw[split], found = _index_files(kind, fs, image_key, label_key)
        names = names or found
        digests[split] = _digest(fs, base, (image_key, label_key))
    classes, labels = _class_indices(raw, names, path)
    reader = {s: _reader(rows[s], kind, size, in_chans, image_key or "image") for s in rows}
    return ShardSource(f"{kind}:{path.resolve()}", classes,
                       {s: ShardSplit(labels[s], reader[s], digests[s]) for s in rows})
