"""From a config's ``data``/``augment`` sections to on-device splits and per-epoch loaders.

The datasets live on the run device as uint8 (airbench habit; ``data.on_device=false`` keeps them
in host memory and the loop copies each batch over); ``mlplab.data.DeviceLoader`` turns index
ranges into normalised, augmented batches where the data lives. The training order
of epoch e is a function of (seed, e) only (see :mod:`mlplab.train.distributed`), so a resumed run
replays exactly the batches an uninterrupted one would have seen.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..data import DeviceLoader, build_augment, load_dataset
from ..utils.seeds import derive_seed
from .config import RunConfig
from .distributed import DistInfo, shard_indices

__all__ = ["Split", "RunData", "load_run_data", "train_loader", "eval_loader", "SPLIT_SEED"]

#: The train/val holdout is drawn with a fixed seed, so runs with different seeds share a val set.
SPLIT_SEED = 0


@dataclass
class Split:
    images: torch.Tensor  # uint8 (N, ch, H, W)
    labels: torch.Tensor  # int64 (N,)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class RunData:
    train: Split
    val: Split | None
    test: Split
    info: Any  # mlplab.data.DatasetInfo of the loaded (possibly resized) data
    augment: Any  # the batched augmentation callable (None -> none)


def _subset(split: Split, n: int | None, mode: str, seed: int) -> Split:
    if n is None or n >= len(split):
        return split
    if mode == "first":
        idx = torch.arange(n)
    else:
        idx = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed))[:n].sort().values
    return Split(split.images[idx], split.labels[idx])


def load_run_data(cfg: RunConfig, device: torch.device) -> RunData:
    d = cfg.data
    kw: dict[str, Any] = dict(root=d.root, download=d.download, image_size=d.image_size)
    tr = load_dataset(d.dataset, "train", val_fraction=d.val_fraction, seed=SPLIT_SEED, **kw)
    te = load_dataset(d.dataset, "test", **kw)
    va = load_dataset(d.dataset, "val", val_fraction=d.val_fraction, seed=SPLIT_SEED, **kw) \
        if d.val_fraction > 0 else None
    train = _subset(Split(tr.images, tr.labels), d.train_subset, d.subset, cfg.run.seed)
    test = _subset(Split(te.images, te.labels), d.test_subset, d.subset, cfg.run.seed)
    val = Split(va.images, va.labels) if va is not None else None
    store = device if _on_device(d.on_device, train, device) else torch.device("cpu")
    move = lambda s: None if s is None else Split(s.images.to(store), s.labels.to(store))  # noqa: E731
    return RunData(move(train), move(val), move(test), tr.info, build_augment(cfg.augment, tr.info))


def _on_device(flag: bool | str, train: Split, device: torch.device) -> bool:
    if flag != "auto":
        return bool(flag)
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return train.images.numel() < 0.3 * free  # uint8: numel bytes; leave room for the model


def _loader(images, labels, batch_size, *, augment, device, seed, info, shuffle, drop_last, indices=None):
    return DeviceLoader(images, labels, batch_size, shuffle=shuffle, drop_last=drop_last, augment=augment,
                        device=device, seed=seed, mean=info.mean, std=info.std, indices=indices)


def train_loader(data: RunData, epoch: int, batch_size: int, seed: int, dist: DistInfo) -> DeviceLoader:
    """This rank's loader for ``epoch``: its shard of the epoch's permutation, in order, with
    augmentation seeded by (seed, epoch, rank). ``batch_size`` is per rank."""
    idx = shard_indices(len(data.train), epoch, seed, dist, device=data.train.images.device)
    aug_seed = derive_seed(seed, "augment", epoch, dist.rank)
    return _loader(data.train.images, data.train.labels, batch_size, augment=data.augment,
                   device=data.train.images.device, seed=aug_seed, info=data.info, shuffle=False, drop_last=True,
                   indices=idx)  # batches gather their rows: no per-epoch copy of the dataset


def eval_loader(split: Split, data: RunData, batch_size: int, dist: DistInfo) -> DeviceLoader:
    """Every example exactly once over all ranks (strided shards), no augmentation."""
    idx = torch.arange(dist.rank, len(split), dist.world_size, device=split.images.device) if dist.enabled else None
    return _loader(split.images, split.labels, batch_size, augment=None, device=split.images.device, seed=0,
                   info=data.info, shuffle=False, drop_last=False, indices=idx)
