"""Loaders: ``DeviceLoader`` (whole dataset on the device as uint8, airbench style) and
``StreamingLoader`` (decode from disk in worker processes, then the same batched augmentation
on the device), with one iteration interface and resumable state.

Randomness is derived, not carried: the permutation of epoch ``e`` comes from a generator
seeded with (seed, e) and the augmentation of batch ``i`` from (seed, e, i). So the state is
two integers, a resumed run continues identically, and a batch does not depend on how many
random numbers earlier batches consumed.

Micro-batches (``micro_batches=k``, a run's ``run.accumulate_steps``): each batch is gathered as
one and handed out as a :class:`MicroBatches`, whose k equal parts are converted and augmented one
at a time, when the training step reaches them, so the augmentation's temporaries (int64 gather
indices, float copies: tens of bytes per pixel) are a micro-batch's, never the whole batch's.
Part j of batch i draws from (seed, e, i, j); with k = 1 nothing changes. What k > 1 changes
against augmenting the whole batch: the random draws (another stream, the same distributions),
mixup/cutmix partners (the micro-batch reversed, not the batch) and ``mix_mode="batch"``'s one
λ and box (one per micro-batch). Without random augmentation the batches are bit-identical.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

import torch

from ..utils.seeds import derive_generator
from .augment import Augment, normalize
from .datasets import resize_images
from .download import BadData
from .formats import decode_image, folder_classes, list_image_folder
from .staging import PinnedRing, read_ahead

__all__ = ["DeviceLoader", "StreamingLoader", "PackedLoader", "ImageFolderDataset", "MicroBatches", "staged_batches",
           "packed_batches"]

Tensor = torch.Tensor


def to_device(t: Tensor, device: torch.device) -> Tensor:
    """A host tensor on ``device`` without making the host wait: through pinned memory and an
    asynchronous copy on CUDA (a copy from pageable memory synchronises the stream)."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class MicroBatches:
    """One batch as ``k`` equal micro-batches, each converted and augmented when it is reached
    (see the module docstring). Iterating yields ``(x_j, y_j)``; ``targets`` then holds the
    concatenated ``y_j`` (int64 labels or soft targets) of the parts reached so far."""

    def __init__(self, x: Tensor, y: Tensor, k: int, finish):
        self.x, self.y, self.k, self._finish = x, y, k, finish
        self._targets: list[Tensor] = []

    @property
    def device(self) -> torch.device:
        return self.x.device

    def __len__(self) -> int:
        return self.k

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        self._targets = []
        for j, (xj, yj) in enumerate(zip(self.x.chunk(self.k), self.y.chunk(self.k))):
            xj, yj = self._finish(xj, yj, j)
            self._targets.append(yj)
            yield xj, yj

    @property
    def targets(self) -> Tensor:
        return torch.cat(self._targets)


class _Loader:
    """Shared epoch/position bookkeeping and batch post-processing."""

    def __init__(self, n: int, batch_size: int, *, shuffle: bool, drop_last: bool, augment: Augment | None,
                 device: str | torch.device | None, seed: int, mean: Sequence[float] | None,
                 std: Sequence[float] | None, num_classes: int | None, micro_batches: int):
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if micro_batches < 1 or batch_size % micro_batches:
            raise ValueError(f"micro_batches must divide batch_size {batch_size}, got {micro_batches}")
        self.micro_batches = micro_batches
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

    def _finish(self, x: Tensor, y: Tensor, batch_index: int) -> tuple[Tensor | MicroBatches, Tensor | None]:
        """The batch as the step takes it: ``(x, y)`` augmented and normalised, or with
        ``micro_batches`` > 1 ``(MicroBatches, None)`` (each part finished when reached)."""
        if self.micro_batches == 1:
            return self._finish_part(x, y, (batch_index,))
        epoch = self.epoch  # the epoch ends (and the loader's counter moves on) before the last parts run
        return MicroBatches(x, y, self.micro_batches,
                            lambda xj, yj, j: self._finish_part(xj, yj, (batch_index, j), epoch)), None

    def _finish_part(self, x: Tensor, y: Tensor, key: tuple[int, ...],
                     epoch: int | None = None) -> tuple[Tensor, Tensor]:
        if self.augment is not None:
            epoch = self.epoch if epoch is None else epoch
            g = derive_generator(self.seed, "augment", epoch, *key, device=self.device)
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

    Host-staged: ``images`` in host memory with another ``device`` (a CUDA GPU; ``meta`` in the
    tests) stay on the host (a dataset larger than the GPU can spare); each batch is gathered
    there as uint8 by ``threads`` reader threads, ``prefetch`` batches ahead, straight into a ring
    of pinned buffers (:mod:`mlplab.data.staging`), crosses without a sync, and is augmented on
    the device like any other.
    """

    def __init__(self, images: Tensor, labels: Tensor, batch_size: int, *, shuffle: bool = True,
                 drop_last: bool = False, augment: Augment | None = None, device: str | torch.device | None = None,
                 seed: int = 0, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 num_classes: int | None = None, indices: Tensor | None = None, micro_batches: int = 1,
                 threads: int = 2, prefetch: int = 2):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"images must be uint8 (N, ch, H, W), got {tuple(images.shape)} {images.dtype}")
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        n = len(images) if indices is None else len(indices)
        super().__init__(n, batch_size, shuffle=shuffle, drop_last=drop_last, augment=augment,
                         device=device, seed=seed, mean=mean, std=std, num_classes=num_classes,
                         micro_batches=micro_batches)
        staged = images.device.type == "cpu" and self.device.type != "cpu"
        store = images.device if staged else self.device
        self.images = images.to(store)
        self.labels = labels.to(store, torch.long)
        self.indices = None if indices is None else indices.to(store, torch.long)
        self.threads, self.prefetch = max(1, int(threads)), max(1, int(prefetch))

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        start = self._start()
        store = self.images.device
        order = to_device(self.order(), store)
        if self.indices is not None:
            order = self.indices[order]  # positions -> rows of the stored dataset (n int64s, no image copy)
        rows = (order[i * self.batch_size:(i + 1) * self.batch_size] for i in range(start, len(self)))
        batches = staged_batches(self.images, self.labels, rows, self.device, self.threads, self.prefetch) \
            if store != self.device else \
            ((self.images.index_select(0, idx), self.labels.index_select(0, idx)) for idx in rows)
        for i, (x, y) in enumerate(batches, start):
            x, y = self._finish(x, y, i)
            self._advance()
            yield x, y
        self._end_epoch()


def staged_batches(images: Tensor, labels: Tensor, rows: Iterable[Tensor], device: torch.device, threads: int = 2,
                   prefetch: int = 2) -> Iterator[tuple[Tensor, Tensor]]:
    """``(images[idx], labels[idx])`` on ``device`` for each ``idx`` of ``rows``, gathered in host
    memory by ``threads`` reader threads, ``prefetch`` batches ahead, into a ring of (pinned)
    buffers, then copied asynchronously: ``DeviceLoader``'s host-staged path. On the CPU the
    batches are the ring's own buffers, valid until the next ``prefetch + 1`` batches are read."""
    ring = PinnedRing(prefetch + 2, device)

    def read(slot: int, idx: Tensor) -> tuple[Tensor, Tensor]:
        ring.wait(slot)
        x = ring.buffer(slot, "x", (len(idx), *images.shape[1:]), images.dtype)
        y = ring.buffer(slot, "y", (len(idx),), labels.dtype)
        return torch.index_select(images, 0, idx, out=x), torch.index_select(labels, 0, idx, out=y)

    for slot, (x, y) in read_ahead(rows, read, ring, threads):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        ring.copied(slot)
        yield x, y


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
                 num_classes: int | None = None, num_workers: int = 4, indices: Tensor | None = None,
                 micro_batches: int = 1):
        n = len(dataset) if indices is None else len(indices)
        super().__init__(n, batch_size, shuffle=shuffle, drop_last=drop_last, augment=augment,
                         device=device, seed=seed, mean=mean, std=std, num_classes=num_classes,
                         micro_batches=micro_batches)
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
    ``prefetch`` batches ahead of the one being used (numpy copies without holding the GIL), each
    with one copy per image: its rows in ascending order (``PackedImages.take_ascending``) straight
    into a ring of (pinned) buffers (:mod:`mlplab.data.staging`). They cross to ``device``, where
    one gather puts the rows back in the epoch's order (:func:`packed_batches`), for the batched
    augmentation. The process
    holds only those buffers and the labels, never the images: its memory does not grow with the
    pack. ``image_size`` other than the pack's resizes each batch on the device (antialiased
    bilinear, as ``resize_images``).
    """

    def __init__(self, images, labels: Tensor, batch_size: int, *, shuffle: bool = True, drop_last: bool = False,
                 augment: Augment | None = None, device: str | torch.device | None = None, seed: int = 0,
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 num_classes: int | None = None, indices: Tensor | None = None, threads: int = 2, prefetch: int = 4,
                 image_size: int | Sequence[int] | None = None, micro_batches: int = 1):
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        n = len(images) if indices is None else len(indices)
        super().__init__(n, batch_size, shuffle=shuffle, drop_last=drop_last, augment=augment,
                         device=device, seed=seed, mean=mean, std=std, num_classes=num_classes,
                         micro_batches=micro_batches)
        self.images = images
        self.labels = labels.to("cpu", torch.long)
        self.indices = None if indices is None else indices.to("cpu", torch.long)
        self.threads, self.prefetch = max(1, int(threads)), max(1, int(prefetch))
        size = (image_size, image_size) if isinstance(image_size, int) else image_size
        self.resize = tuple(size) if size is not None and tuple(size) != tuple(images.shape[-2:]) else None

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        start = self._start()
        order = self.order() if self.indices is None else self.indices[self.order()]
        rows = (order[i * self.batch_size:(i + 1) * self.batch_size] for i in range(start, len(self)))
        for i, (x, y) in enumerate(packed_batches(self.images, self.labels, rows, self.device, self.threads,
                                                  self.prefetch), start):
            if self.resize is not None:
                x = resize_images(x, self.resize)
            x, y = self._finish(x, y, i)
            self._advance()
            yield x, y
        self._end_epoch()


def packed_batches(images, labels: Tensor, rows: Iterable[Tensor], device: torch.device, threads: int = 2,
                   prefetch: int = 4) -> Iterator[tuple[Tensor, Tensor]]:
    """The images (``PackedImages``) and labels of each ``rows`` on ``device``, in that order:
    ``PackedLoader``'s reader. Each batch is read with one copy per image, in ascending row order,
    into a ring of (pinned) buffers by ``threads`` reader threads, ``prefetch`` batches ahead. On
    an accelerator it crosses asynchronously with the order it was read in and one gather there
    puts it back in the asked order; on the CPU the reader thread scatters it into place, into a
    second buffer of the ring (the images handed out are then the ring's own, valid until the next
    ``prefetch + 1`` batches are read; the labels are copies)."""
    ring = PinnedRing(prefetch + 2, device)
    on_host = device.type == "cpu"

    def read(slot: int, idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        ring.wait(slot)
        shape = (len(idx), *images.shape[1:])
        x = ring.buffer(slot, "ascending", shape, torch.uint8)
        y = ring.buffer(slot, "y", (len(idx),), torch.long)
        back = ring.buffer(slot, "back", (len(idx),), torch.long)
        ascending = images.take_ascending(idx.numpy(), x.numpy())  # x[k] holds row idx[ascending[k]]
        if on_host:  # scattered back into place here, by numpy (no torch threads inside the reader threads)
            in_order = ring.buffer(slot, "x", shape, torch.uint8)
            in_order.numpy()[ascending] = x.numpy()
            x = in_order
        else:
            back[torch.from_numpy(ascending)] = torch.arange(len(idx))  # x[back]: the asked order
        return x, torch.index_select(labels, 0, idx, out=y), back

    for slot, (x, y, back) in read_ahead(rows, read, ring, threads):
        y = y.to(device, non_blocking=True, copy=True)  # a copy on the CPU too: labels pass through unchanged
        if not on_host:
            x, back = x.to(device, non_blocking=True), back.to(device, non_blocking=True)
            ring.copied(slot)
            x = x.index_select(0, back)  # one gather on the device: the asked order again
        yield x, y
