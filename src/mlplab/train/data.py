"""From a config's ``data``/``augment`` sections to on-device splits and per-epoch loaders.

In-memory datasets live on the run device as uint8 (airbench habit; ``data.on_device=false`` keeps
them in host memory and the loop copies each batch over); ``mlplab.data.DeviceLoader`` turns index
ranges into normalised, augmented batches where the data lives. Packs (``data.dataset=packed``)
and large image folders stream instead (``data.stream``): a split then holds the memory-mapped
shards (``PackedImages``, read by ``PackedLoader``) or the list of files (``ImageFolderDataset``,
decoded by ``StreamingLoader`` in ``data.num_workers`` processes), and each rank reads only the
rows of its shard of the epoch. The training order
of epoch e is a function of (seed, e) only (see :mod:`mlplab.train.distributed`), so a resumed run
replays exactly the batches an uninterrupted one would have seen.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..data import (
    DeviceLoader,
    ImageFolderDataset,
    Pack,
    PackedImages,
    PackedLoader,
    StreamingLoader,
    build_augment,
    get_info,
    holdout_split,
    load_dataset,
    restrict_classes,
)
from ..data.datasets import search_dirs
from ..data.packed import INDEX_NAME, sha256_file
from ..errors import BadInput
from ..utils.seeds import derive_seed
from .config import ROOTED_DATASETS, RunConfig
from .distributed import DistInfo, shard_indices
from .memory import available_memory

__all__ = ["Split", "RunData", "load_run_data", "train_loader", "eval_loader", "data_identity", "same_data",
           "describe_data", "SPLIT_SEED", "STREAM_BYTES"]

#: The train/val holdout is drawn with a fixed seed, so runs with different seeds share a val set.
SPLIT_SEED = 0

#: ``data.stream=auto`` streams an image folder or pack whose decoded train split is larger than this.
STREAM_BYTES = 1 << 30


@dataclass
class Split:
    images: Any  # uint8 tensor (N, ch, H, W); streamed: PackedImages or ImageFolderDataset (with .shape)
    labels: torch.Tensor  # int64 (N,), of every example of ``images``
    rows: torch.Tensor | None = None  # streamed: the examples of ``images`` this split uses (None: all)

    def __len__(self) -> int:
        return len(self.labels) if self.rows is None else len(self.rows)

    @property
    def streamed(self) -> bool:
        return not isinstance(self.images, torch.Tensor)


@dataclass
class RunData:
    train: Split
    val: Split | None
    test: Split
    info: Any  # mlplab.data.DatasetInfo of the loaded (possibly resized) data
    augment: Any  # the batched augmentation callable (None -> none)
    device: torch.device | None = None  # the run's device (where streamed batches go)
    num_workers: int = 0  # data.num_workers


def _subset(split: Split, n: int | None, mode: str, seed: int) -> Split:
    if n is None or n >= len(split):
        return split
    if mode == "first":
        idx = torch.arange(n)
    else:
        idx = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed))[:n].sort().values
    if split.streamed:
        return Split(split.images, split.labels, idx if split.rows is None else split.rows[idx])
    return Split(split.images[idx], split.labels[idx])


def _keep_classes(split: Split | None, classes: list[int] | None) -> Split | None:
    """``split`` restricted to the examples of ``classes`` (``data.classes``), their labels
    relabelled to the position of their class in ``classes``."""
    if split is None or classes is None:
        return split
    lut = torch.full((max(int(split.labels.max()), max(classes)) + 1,), -1, dtype=torch.int64)
    lut[torch.tensor(classes)] = torch.arange(len(classes))
    labels = lut[split.labels.cpu()].to(split.labels.device)
    if split.streamed:
        rows = split.rows if split.rows is not None else torch.arange(len(labels))
        return Split(split.images, labels, rows[labels[rows.to(labels.device)] >= 0])
    keep = labels >= 0
    return Split(split.images[keep], labels[keep])


def load_run_data(cfg: RunConfig, device: torch.device) -> RunData:
    d = cfg.data
    streamed = _streamed_source(cfg)
    if streamed is not None:
        return _streamed_run_data(cfg, device, *streamed)
    kw: dict[str, Any] = dict(root=d.root, download=d.download, image_size=d.image_size)
    tr = load_dataset(d.dataset, "train", val_fraction=d.val_fraction, seed=SPLIT_SEED, **kw)
    te = load_dataset(d.dataset, "test", **kw)
    va = load_dataset(d.dataset, "val", val_fraction=d.val_fraction, seed=SPLIT_SEED, **kw) \
        if d.val_fraction > 0 else None
    info = restrict_classes(tr.info, d.classes)
    keep = lambda s: _keep_classes(s, d.classes)  # noqa: E731
    train = _subset(keep(Split(tr.images, tr.labels)), d.train_subset, d.subset, cfg.run.seed)
    test = _subset(keep(Split(te.images, te.labels)), d.test_subset, d.subset, cfg.run.seed)
    val = keep(Split(va.images, va.labels)) if va is not None else None
    store = device if _on_device(d.on_device, train, device) else torch.device("cpu")
    move = lambda s: None if s is None else Split(s.images.to(store), s.labels.to(store))  # noqa: E731
    return RunData(move(train), move(val), move(test), info, build_augment(cfg.augment, info), device,
                   d.num_workers)


def _streamed_source(cfg: RunConfig) -> tuple[Any, Any, Any] | None:
    """(train images, test images, info) when ``cfg`` streams its data, else None."""
    d = cfg.data
    if d.dataset not in ("packed", "imagefolder") or d.stream is False:
        return None
    if d.dataset == "packed":
        p = Pack(_root(cfg))
        train, test = p.split("train"), p.split("test")
        size = (d.image_size,) * 2 if d.image_size else p.image_size  # another size: batches are resized
        info = dataclasses.replace(get_info("packed"), num_classes=p.num_classes, image_size=size,
                                   in_chans=p.in_chans, mean=p.mean, std=p.std, classes=tuple(p.classes))
    else:
        info = get_info("imagefolder")
        root = next((r for r in search_dirs(info, _root(cfg)) if (r / "train").is_dir()), None)
        if root is None:
            return None  # load_dataset says where it looked
        train = ImageFolderDataset(root, "train", d.image_size, info.in_chans)
        held_out = "test" if (root / "test").is_dir() else "val"  # as load_dataset: test/, else ImageNet's val/
        test = ImageFolderDataset(root, held_out, train.image_size, info.in_chans, classes=train.classes)
        info = dataclasses.replace(info, num_classes=len(train.classes), image_size=(train.image_size,) * 2,
                                   classes=tuple(train.classes))
    if d.stream == "auto" and math.prod(train.shape) <= STREAM_BYTES:
        return None  # small enough to hold: the in-memory path
    return train, test, info


def _root(cfg: RunConfig) -> str:
    if cfg.data.root is None:
        raise BadInput(f"data.dataset={cfg.data.dataset} needs data.root=DIR "
                       + ("(the folder written by `mlplab pack`)" if cfg.data.dataset == "packed"
                          else "(a folder holding train/<class>/<image>)"))
    if not Path(cfg.data.root).expanduser().exists():
        raise BadInput(f"data.root={cfg.data.root} does not exist; give the folder that holds the data")
    return cfg.data.root


def _streamed_run_data(cfg: RunConfig, device: torch.device, train_images, test_images, info) -> RunData:
    d = cfg.data
    train = Split(train_images, train_images.labels)
    val = None
    if d.val_fraction > 0:
        tr_idx, va_idx = holdout_split(len(train), d.val_fraction, SPLIT_SEED)
        train, val = Split(train_images, train_images.labels, tr_idx), Split(train_images, train_images.labels, va_idx)
    info = restrict_classes(info, d.classes)
    train = _subset(_keep_classes(train, d.classes), d.train_subset, d.subset, cfg.run.seed)
    test = _subset(_keep_classes(Split(test_images, test_images.labels), d.classes), d.test_subset, d.subset,
                   cfg.run.seed)
    return RunData(train, _keep_classes(val, d.classes), test, info, build_augment(cfg.augment, info), device,
                   d.num_workers)


def data_identity(cfg: RunConfig) -> dict[str, str]:
    """What the run's data is (``results.json``'s ``data``; the resume check compares it):
    ``dataset``, and with ``data.root`` its resolved path ``root``; for a pack also
    ``index_sha256``, the sha256 of its ``index.json``, which lists every shard's sha256: the
    pack's content wherever it lies."""
    d = cfg.data
    ident = {"dataset": d.dataset}
    if d.root is not None:
        root = Path(d.root).expanduser().resolve()
        ident["root"] = str(root)
        if d.dataset == "packed" and (root / INDEX_NAME).is_file():
            ident["index_sha256"] = sha256_file(root / INDEX_NAME)
    return ident


def same_data(saved: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two :func:`data_identity` records name the same data: a pack by its index, an image
    folder by its resolved path; the table's datasets by their name (their files are checksummed)."""
    if saved.get("dataset") != now.get("dataset"):
        return False
    if now.get("dataset") == "packed":
        return saved.get("index_sha256") == now.get("index_sha256")
    return now.get("dataset") not in ROOTED_DATASETS or saved.get("root") == now.get("root")


def describe_data(ident: dict[str, Any]) -> str:
    """A :func:`data_identity` record in words: ``the pack /p (index sha256 1a2b3c4d5e6f)``."""
    if ident.get("dataset") == "packed":
        return f"the pack {ident.get('root')} (index sha256 {str(ident.get('index_sha256'))[:12]})"
    if ident.get("dataset") == "imagefolder":
        return f"the image folder {ident.get('root')}"
    return f"{ident.get('dataset')}" + (f" from {ident['root']}" if ident.get("root") else "")


def _on_device(flag: bool | str, train: Split, device: torch.device) -> bool:
    if flag != "auto":
        return bool(flag)
    if device.type != "cuda":
        return True
    return train.images.numel() < 0.3 * available_memory(device)  # uint8: numel bytes; leave room for the model


def _loader(split: Split, data: RunData, batch_size, *, augment, seed, drop_last, indices=None, micro_batches=1):
    """The loader for ``split`` restricted to ``indices`` (positions within the split), in order;
    ``micro_batches`` > 1: each batch augmented one micro-batch at a time (``data.MicroBatches``)."""
    kw = dict(shuffle=False, drop_last=drop_last, augment=augment, seed=seed, mean=data.info.mean, std=data.info.std,
              micro_batches=micro_batches)
    if not split.streamed:
        # batches go to the run's device; a split kept in host memory for a GPU run is staged (DeviceLoader)
        return DeviceLoader(split.images, split.labels, batch_size, device=data.device or split.images.device,
                            indices=indices, **kw)
    rows = split.rows if indices is None else (indices if split.rows is None else split.rows[indices])
    device = data.device or torch.device("cpu")
    if isinstance(split.images, PackedImages):
        return PackedLoader(split.images, split.labels, batch_size, device=device, indices=rows,
                            threads=data.num_workers or 2, image_size=data.info.image_size, **kw)
    return StreamingLoader(split.images, batch_size, device=device, indices=rows, num_workers=data.num_workers, **kw)


def _home(split: Split) -> torch.device:
    return torch.device("cpu") if split.streamed else split.images.device


def train_loader(data: RunData, epoch: int, batch_size: int, seed: int, dist: DistInfo, start: int = 0,
                 micro_batches: int = 1):
    """This rank's loader for ``epoch``: its shard of the epoch's permutation, in order, with
    augmentation seeded by (seed, epoch, rank). ``batch_size`` is per rank. A streamed split
    reads only this shard's rows. ``start``: the first batch (a run stopped mid-epoch resumes
    there; batch i's augmentation depends on i alone, so the batches are those of a whole epoch).
    ``micro_batches`` (``run.accumulate_steps``): each batch is augmented one micro-batch at a
    time, when the step reaches it (``mlplab.data.loader``)."""
    idx = shard_indices(len(data.train), epoch, seed, dist, device=_home(data.train))
    aug_seed = derive_seed(seed, "augment", epoch, dist.rank)
    loader = _loader(data.train, data, batch_size, augment=data.augment, seed=aug_seed, drop_last=True,
                     indices=idx, micro_batches=micro_batches)  # batches gather their rows: no per-epoch copy
    if start:
        loader.load_state_dict({"epoch": loader.epoch, "position": start})
    return loader


def eval_loader(split: Split, data: RunData, batch_size: int, dist: DistInfo):
    """Every example exactly once over all ranks (strided shards), no augmentation."""
    idx = torch.arange(dist.rank, len(split), dist.world_size, device=_home(split)) if dist.enabled else None
    return _loader(split, data, batch_size, augment=None, seed=0, drop_last=False, indices=idx)
