"""Loaders: ``DeviceLoader`` (whole dataset on the device as uint8, airbench style) and
``StreamingLoader`` (decode from disk in worker processes, then the same batched augmentation
on the device), with one iteration interface and resumable state.

Randomness is derived, not carried: the permutation of epoch ``e`` comes from a generator
seeded with (seed, e) and the augmentation of batch ``i`` from (seed, e, i). So the state is
two integers, a resumed run continues identically, and a batch does not depend on how many
random numbers earlier batches consumed.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import torch

from ..utils.seeds import derive_generator
from .augment import Augment, normalize
from .datasets import resize_images
from .download import BadData
from .formats import decode_image, folder_classes, list_image_folder

__all__ = ["DeviceLoader", "StreamingLoader", "PackedLoader", "ImageFolderDataset"]

Tensor = torch.Tensor


def to_device(t: Tensor, device: torch.device) -> Tensor:
    """A host tensor on ``device`` without making the host wait: through pinned memory and an
    asynchronous copy on CUDA (a copy from pageable memory synchronises the stream)."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class _Loader:
    """Shared epoch/position bookkeeping and batch post-processing."""

    def __init__(self, n: int, batch_size: int, *, shuffle: bool, drop_last: bool, augment: Augment | None,
                 device: str | torch.device | None, seed: int, mean: Sequence[float] | None,
                 std: Sequence[float] | None, num_classes: int | None):
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.n = n
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.augment = augment
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.seed = int(seed)
        self.mean = tuple(mean) if mean is not None else (augment.mean if augment is not None else None)
        self.std = tuple(std) if std is not None else (augment.std if augment is not None else None)
        self.num_classes = num_classes if num_classes is not None else (augment.num_classes if augment else None)
        self.epoch = 0
        self.position = 0  # batches of the current epoch already handed out

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else math.ceil(self.n / self.batch_size)

    @property
    def soft_targets(self) -> bool:
        return self.augment is not None and self.augment.soft_targets

    def order(self, epoch: int | None = None) -> Tensor:
        """The sample order of ``epoch`` (a permutation when shuffling)."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return torch.arange(self.n)
        return torch.randperm(self.n, generator=derive_generator(self.seed, "perm", epoch))

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = int(epoch), 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "n": self.n,
                "batch_size": self.batch_size}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        for key in ("n", "batch_size"):
            if key in state and int(state[key]) != getattr(self, key):
                raise ValueError(f"loader state has {key}={state[key]}, this loader {getattr(self, key)}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.seed = int(state.get("seed", self.seed))

    def _finish(self, x: Tensor, y: Tensor, batch_index: int) -> tuple[Tensor, Tensor]:
        if self.augment is not None:
            g = derive_generator(self.seed, "augment", self.epoch, batch_index, device=self.device)
            return self.augment(x, y, g, self.mean, self.std)
        x = x.float()
        if self.mean is not None and self.std is not None:
            return normalize(x, self.mean, self.std), y
        return x / 255.0, y

    def _start(self) -> int:
        if self.position >= len(self):  # saved right after the last batch of an epoch
            self.epoch, self.position = self.epoch + 1, 0
        return self.position

    def _advance(self) -> None:
        self.position += 1

    def _end_epoch(self) -> None:
        self.epoch, self.position = self.epoch + 1, 0


class DeviceLoader(_Loader):
    """Iterate ``(x, y)`` over a dataset held on ``device`` as uint8 (N, ch, H, W).

    ``x`` is float (B, ch, H, W), augmented (if ``augment``) and normalised with ``mean``/``std``
    (defaults: the augment's, i.e. the dataset's). ``y`` is int64 (B,) or soft targets (B, K).
    Each ``iter()`` runs the rest of the current epoch; ``state_dict()`` after any batch and
    ``load_state_dict()`` on a fresh loader continue with exactly the same batches.

    ``indices`` (optional, int64 on any device) restricts the loader to ``images[indices]``, in
    that order, without copying the dataset: each batch gathers only its own rows (a training
    epoch's shard, say). Shuffling then permutes positions within ``indices``.

    Host-staged: ``images`` in host memory with a CUDA ``device`` stay on the host (a dataset
    larger than the GPU can spare); each batch is gathered there as uint8, crosses through pinned
    memory without a sync, and is augmented on the GPU like any other.
    """

    def __init__(self, images: Tensor, labels: Tensor, batch_size: int, *, shuffle: bool = True,
                 drop_last: bool = False, augment: Augment | None = None, device: str | torch.device | None = None,
                 seed: int = 0, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 num_classes: int | None = None, indices: Tensor | None = None):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"images must be uint8 (N, ch, H, W), got {tuple(images.shape)} {images.dtype}")
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        n = len(images) if indices is None else len(indices)
        super().__init__(n, batch_size, shuffle=shuffle, drop_last=drop_last, augment=augment,
                         device=device, seed=seed, mean=mean, std=std, num_classes=num_classes)
        staged = images.device.type == "cpu" and self.device.type == "cuda"
        store = images.device if staged else self.device
        self.images = images.to(store)
        self.labels = labels.to(store, torch.long)
        self.indices = None if indices is None else indices.to(store, torch.long)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        start = self._start()
        store = self.images.device
        order = to_device(self.order(), store)
        if self.indices is not None:
            order = self.indices[order]  # positions -> rows of the stored dataset (n int64s, no image copy)
        for i in range(start, len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            x, y = self.images[idx], self.labels[idx]
            if store != self.device:  # host-staged: uint8 over the bus, augmented on the GPU
                x, y = to_device(x, self.device), to_device(y, self.device)
            x, y = self._finish(x, y, i)
            self._advance()
            yield x, y
        self._end_epoch()


class ImageFolderDataset(torch.utils.data.Dataset):
    """``root/<split>/<class>/<image>`` decoded with Pillow to uint8 (ch, size, size).

    Decoding is deterministic (shorter side to ``image_size``, centre crop; ``None``: the first
    image's side); all random augmentation happens later on the device, so workers need no
    random state.
    """

    def __init__(self, root: str | Path, split: str, image_size: int | None, in_chans: int = 3,
                 classes: Sequence[str] | None = None):
        root = Path(root)
        if classes is None and split != "train":
            classes = folder_classes(root)
        self.paths, labels, self.classes = list_image_folder(root / split, classes, require_images=split == "train")
        self.labels = torch.from_numpy(labels)
        if image_size is None:  # the first image's size, for every image
            h, w = decode_image(self.paths[0], None, in_chans).shape[1:]
            if h != w:
                raise BadData(f"{self.paths[0]} is {w}x{h}; set data.image_size=N to stream the images at one "
                              f"square size")
            image_size = h
        self.image_size, self.in_chans = image_size, in_chans
        self.shape = (len(self.paths), in_chans, image_size, image_size)  # of the decoded dataset

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return torch.from_numpy(decode_image(self.paths[i], self.image_size, self.in_chans)), int(self.labels[i])


class StreamingLoader(_Loader):
    """Same interface as ``DeviceLoader`` for datasets that stay on disk (e.g. ImageNet folders).

    ``dataset[i] -> (uint8 (ch, H, W), label)`` is decoded by ``num_workers`` processes of a
    ``torch.utils.data.DataLoader`` in this epoch's order (``num_workers=0``: in this process);
    batches go to ``device`` and get the same batched augmentation as ``DeviceLoader``.
    ``indices`` restricts it to those examples, as for ``DeviceLoader``.
    """

    def __init__(self, dataset: torch.utils.data.Dataset, batch_size: int, *, shuffle: bool = True,
                 drop_last: bool = False, augment: Augment | None = None, device: str | torch.device | None = None,
                 seed: int = 0, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 num_classes: int | None = None, num_workers: int = 4, indices: Tensor | None = None):
        n = len(dataset) if indices is None else len(indices)
        super().__init__(n, batch_size, shuffle=shuffle, drop_last=drop_last, augment=augment,
                         device=device, seed=seed, mean=mean, std=std, num_classes=num_classes)
        self.dataset = dataset
        self.num_workers = num_workers
        self.indices = None if indices is None else indices.to("cpu", torch.long)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        start = self._start()
        stop = len(self) * self.batch_size if self.drop_last else self.n
        order = self.order() if self.indices is None else self.indices[self.order()]
        indices = order[start * self.batch_size:stop].tolist()
        dl = torch.utils.data.DataLoader(self.dataset, batch_size=self.batch_size, sampler=indices,
                                         num_workers=self.num_workers, pin_memory=self.device.type == "cuda",
                                         drop_last=False, persistent_workers=False)
        for i, (x, y) in enumerate(dl, start):
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, torch.long, non_blocking=True)
            x, y = self._finish(x, y, i)
            self._advance()
            yield x, y
        self._end_epoch()


class PackedLoader(_Loader):
    """Same interface as ``DeviceLoader`` for a split of a pack (``mlplab.data.packed.PackedImages``).

    Batches are gathered from the memory-mapped shards by ``threads`` reader threads, up to
    ``prefetch`` batches ahead of the one being used (numpy copies without holding the GIL), then
    moved to ``device`` for the batched augmentation. The process holds only those batches and the
    labels, never the images: its memory does not grow with the pack. ``image_size`` other than
    the pack's resizes each batch on the device (antialiased bilinear, as ``resize_images``).
    """

    def __init__(self, images, labels: Tensor, batch_size: int, *, shuffle: bool = True, drop_last: bool = False,
                 augment: Augment | None = None, device: str | torch.device | None = None, seed: int = 0,
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 num_classes: int | None = None, indices: Tensor | None = None, threads: int = 2, prefetch: int = 4,
                 image_size: int | Sequence[int] | None = None):
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        n = len(images) if indices is None else len(indices)
        super().__init__(n, batch_size, shuffle=shuffle, drop_last=drop_last, augment=augment,
                         device=device, seed=seed, mean=mean, std=std, num_classes=num_classes)
        self.images = images
        self.labels = labels.to("cpu", torch.long)
        self.indices = None if indices is None else indices.to("cpu", torch.long)
        self.threads, self.prefetch = max(1, int(threads)), max(1, int(prefetch))
        size = (image_size, image_size) if isinstance(image_size, int) else image_size
        self.resize = tuple(size) if size is not None and tuple(size) != tuple(images.shape[-2:]) else None

    def _read(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        x = torch.from_numpy(self.images.take(rows.numpy()))
        y = self.labels[rows]
        if self.device.type == "cuda":
            x, y = x.pin_memory(), y.pin_memory()
        return x, y

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor
        from itertools import islice

        start = self._start()
        order = self.order() if self.indices is None else self.indices[self.order()]
        batches = (order[i * self.batch_size:(i + 1) * self.batch_size] for i in range(start, len(self)))
        with ThreadPoolExecutor(self.threads) as pool:
            pending = deque(pool.submit(self._read, rows) for rows in islice(batches, self.prefetch))
            i = start
            while pending:
                x, y = pending.popleft().result()
                rows = next(batches, None)
                if rows is not None:
                    pending.append(pool.submit(self._read, rows))
                x = x.to(self.device, non_blocking=True)
                y = y.to(self.device, non_blocking=True)
                if self.resize is not None:
                    x = resize_images(x, self.resize)
                x, y = self._finish(x, y, i)
                self._advance()
                i += 1
                yield x, y
        self._end_epoch()
