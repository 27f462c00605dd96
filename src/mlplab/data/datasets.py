"""``load_dataset``: find (or download and verify) a dataset, decode it to uint8 tensors.

Where a dataset is looked for, in this order (the first folder that holds the split wins):

1. the explicit ``root`` (``data.root`` in a run config): ``root/<folder>`` then ``root`` itself;
2. the cache: ``$MLPLAB_DATA/<folder>`` or ``~/.cache/mlplab/data/<folder>``;
3. system folders named in the table (``extra_dirs``), e.g. Debian's Fashion-MNIST package at
   ``/usr/share/datasets/fashion-mnist``.

A folder may hold the extracted files or the archive as published (it is extracted in place).
With ``download=True`` a missing dataset is fetched from the table's URLs into ``root/<folder>``
(or the cache), checksum-verified, and extracted with ``safe_extract``. With ``verify=True``
(default) every file read is checked against the table's checksums first.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import BadInput
from ..utils.io import atomic_save, torch_load
from ..utils.seeds import derive_generator
from .download import BadData, DataError, cache_dir, download_file, safe_extract, verify_checksum
from .formats import load_pickle, read_cifar_batches, read_idx_pair, read_image_folder, read_stl10, read_tiny_imagenet
from .table import DataFile, DatasetInfo, get_info

__all__ = ["ImageData", "load_dataset", "resize_images", "holdout_split", "make_synthetic", "search_dirs"]


@dataclass
class ImageData:
    """A decoded split: ``images`` uint8 (N, ch, H, W), ``labels`` int64 (N,)."""

    images: torch.Tensor
    labels: torch.Tensor
    info: DatasetInfo
    classes: list[str]
    split: str

    def __len__(self) -> int:
        return len(self.labels)


def resize_images(images: torch.Tensor, size: int | Sequence[int], chunk: int = 2048) -> torch.Tensor:
    """Resize uint8 (N, ch, H, W) with antialiased bilinear interpolation, back to uint8."""
    hw = (size, size) if isinstance(size, int) else tuple(size)
    if tuple(images.shape[-2:]) == hw:
        return images
    out = torch.empty((images.shape[0], images.shape[1], *hw), dtype=torch.uint8, device=images.device)
    for i in range(0, len(images), chunk):
        x = images[i:i + chunk].float()
        y = F.interpolate(x, size=hw, mode="bilinear", antialias=True, align_corners=False)
        out[i:i + chunk] = y.round_().clamp_(0, 255).to(torch.uint8)
    return out


def holdout_split(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic (train_idx, val_idx) of ``range(n)``; ``round(n * val_fraction)`` held out."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    nv = int(round(n * val_fraction))
    return perm[nv:].sort().values, perm[:nv].sort().values


def make_synthetic(split: str, *, num_samples: int | None = None, image_size: int | Sequence[int] = 32,
                   in_chans: int = 3, num_classes: int = 10, seed: int = 0, noise: float = 40.0
                   ) -> ImageData:
    """Deterministic images with class structure: a smooth random prototype per class + noise.

    Prototypes depend on ``seed`` only (shared by all splits); samples on (seed, split); the
    normalisation statistics are the generator's own (``_synthetic_statistics``).
    """
    h, w = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    n = num_samples if num_samples is not None else (1024 if split == "train" else 256)
    g = torch.Generator().manual_seed(int(seed))
    protos = torch.rand(num_classes, in_chans, 4, 4, generator=g) * 2 - 1
    protos = F.interpolate(protos, size=(h, w), mode="bilinear", align_corners=False)  # (K, ch, H, W)
    gs = derive_generator(seed, "synthetic", split)
    labels = torch.randint(num_classes, (n,), generator=gs)
    x = 128 + 80 * protos[labels] + noise * torch.randn(n, in_chans, h, w, generator=gs)
    images = x.round().clamp(0, 255).to(torch.uint8)
    mean, std = _synthetic_statistics(128 + 80 * protos.double(), noise)
    info = dataclasses.replace(get_info("synthetic"), num_classes=num_classes, image_size=(h, w),
                               in_chans=in_chans, mean=mean, std=std)
    return ImageData(images, labels, info, [str(i) for i in range(num_classes)], split)


def _synthetic_statistics(class_means: torch.Tensor, noise: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std, in [0, 1] units, of pixels drawn as a uniformly chosen class's mean
    image (``class_means``: (K, ch, H, W), 0–255) plus N(0, noise²), before rounding and clamping:
    the class means' average and, by the law of total variance, sqrt(Var(class means) + noise²)."""
    mean = class_means.mean((0, 2, 3)) / 255
    std = (class_means.var((0, 2, 3), correction=0) + noise ** 2).sqrt() / 255
    return tuple(mean.tolist()), tuple(std.tolist())


def search_dirs(info: DatasetInfo, root: str | os.PathLike | None) -> list[Path]:
    """Candidate folders in search order (see module docstring)."""
    dirs: list[Path] = []
    if root is not None:
        r = Path(root).expanduser()
        dirs += [r / info.folder, r] if info.folder else [r]
    dirs.append(cache_dir() / info.folder)
    dirs += [Path(d) for d in info.extra_dirs]
    out: list[Path] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def _split_files(info: DatasetInfo, split: str) -> list[DataFile]:
    return [f for f in info.files if split in f.splits]


def _idx_path(d: Path, f: DataFile) -> Path | None:
    """The file as published (.gz) or already decompressed."""
    for p in (d / f.name, d / f.name.removesuffix(".gz")):
        if p.is_file():
            return p
    return None


def _present(info: DatasetInfo, d: Path, split: str) -> bool:
    """Does folder ``d`` hold ``split`` (extracted, or as the published archive)?"""
    if not d.is_dir():
        return False
    fmt = info.format
    if fmt == "idx":
        return all(_idx_path(d, f) is not None for f in _split_files(info, split))
    if fmt in ("cifar10", "cifar100", "stl10"):
        members = _split_files(info, split)
        if all((d / f.name).is_file() for f in members):
            return True
        return any((d / a.name).is_file() for a in info.archives())
    if fmt == "tiny_imagenet":
        return (d / "tiny-imagenet-200" / "wnids.txt").is_file() or (d / info.files[0].name).is_file()
    if fmt == "imagefolder":
        return (d / split).is_dir()
    return False


def _extract_if_needed(info: DatasetInfo, d: Path, split: str, verify: bool) -> None:
    if info.format in ("cifar10", "cifar100", "stl10"):
        if all((d / f.name).is_file() for f in _split_files(info, split)):
            return
    elif info.format == "tiny_imagenet":
        if (d / "tiny-imagenet-200" / "wnids.txt").is_file():
            return
    else:
        return
    for a in info.archives():
        if (d / a.name).is_file():
            if verify:
                verify_checksum(d / a.name, a.checksum)
            safe_extract(d / a.name, d)
            return


def _missing_message(info: DatasetInfo, split: str, dirs: list[Path]) -> str:
    """Two lines: where it looked, and what to set (CLI key and Python argument) to get the data."""
    where = ", ".join(str(d) for d in dirs) or str(cache_dir())
    if info.format == "imagefolder":
        how = "set data.root=DIR (root= in Python) to a folder holding train/<class>/<image> and val/<class>/<image>"
    else:
        names = ", ".join(f.name for f in (info.archives() or info.files))
        urls = ", ".join(u for f in info.archives() for u in f.urls[:1])
        how = (f"set data.download=true (download=True in Python) to fetch {names} from {urls}, "
               f"or data.root=DIR (root=) to a folder that holds them")
    return f"dataset {info.name!r} ({split} split) is not in {where}.\nTo get it: {how}."


def _download(info: DatasetInfo, target: Path, split: str) -> None:
    if info.format == "idx":
        for f in _split_files(info, split):
            if _idx_path(target, f) is None:
                download_file(f.urls, target / f.name, f.checksum)
        return
    for a in info.archives():
        if not (target / a.name).is_file():
            download_file(a.urls, target / a.name, a.checksum)


def _read(info: DatasetInfo, d: Path, split: str, verify: bool, image_size) -> tuple[np.ndarray, np.ndarray, list[str]]:
    fmt = info.format
    files = _split_files(info, split)
    if verify and fmt != "imagefolder":
        for f in files:
            p = _idx_path(d, f) if fmt == "idx" else d / f.name
            if p is not None and p.suffix == ".gz":
                verify_checksum(p, f.checksum, f.content_checksum)
            elif p is not None:  # an extracted member, or a decompressed IDX file
                verify_checksum(p, f.content_checksum or f.checksum)
    classes = list(info.classes)
    if fmt == "idx":
        imgs, labs = files if "images" in files[0].name else files[::-1]
        x, y = read_idx_pair(_idx_path(d, imgs), _idx_path(d, labs))
    elif fmt == "cifar10":
        x, y = read_cifar_batches([d / f.name for f in files], "labels")
        meta = d / "cifar-10-batches-py" / "batches.meta"
        if meta.is_file():
            classes = [c.decode() if isinstance(c, bytes) else c for c in load_pickle(meta).get("label_names", classes)]
    elif fmt == "cifar100":
        x, y = read_cifar_batches([d / f.name for f in files], "fine_labels")
        meta = d / "cifar-100-python" / "meta"
        if meta.is_file():
            classes = [c.decode() if isinstance(c, bytes) else c for c in load_pickle(meta).get("fine_label_names", [])]
    elif fmt == "stl10":
        xf, yf = files if files[0].name.endswith("_X.bin") else files[::-1]
        x, y = read_stl10(d / xf.name, d / yf.name)
    elif fmt == "tiny_imagenet":
        x, y, classes = read_tiny_imagenet(d / "tiny-imagenet-200", split, _side(image_size))
    elif fmt == "imagefolder":
        x, y, classes = read_image_folder(d, split, _side(image_size), info.in_chans)
    else:  # pragma: no cover
        raise ValueError(f"unknown format {fmt!r}")
    if len(y) and (y.min() < 0 or (info.num_classes and y.max() >= info.num_classes)):
        raise DataError(f"{d}: {info.name} {split} labels outside 0..{info.num_classes - 1}")
    return x, y, classes


def _side(image_size) -> int | None:
    if image_size is None:
        return None
    if isinstance(image_size, int):
        return image_size
    h, w = image_size
    if h != w:
        raise ValueError("image folders are decoded to square images; pass an int image_size")
    return int(h)


def load_dataset(name: str, split: str, root: str | os.PathLike | None = None, download: bool = False,
                 image_size: int | Sequence[int] | None = None, *, val_fraction: float = 0.0, seed: int = 0,
                 verify: bool = True, checksums: Mapping[str, str] | None = None, cache: bool = False,
                 **synthetic_options) -> ImageData:
    """Load one split of a dataset of the table as uint8 tensors.

    Args:
        name: a key of ``DATASETS``.
        split: ``"train"``, ``"val"`` or ``"test"``. With ``val_fraction > 0``, ``"train"`` and
            ``"val"`` are a deterministic partition (``seed``) of the official training split.
            Without it, ``"val"`` is the official validation split where one exists. ``"test"``
            on a dataset without public test labels (Tiny ImageNet, image folders) is its ``val``.
        root: a folder searched first (``data.root`` in a run config); downloads go to ``root/<folder>``.
        download: fetch missing files from the table's URLs (checksum-verified, atomic).
        image_size: resize on load (int or (H, W)); antialiased bilinear in torch for tensor
            datasets, shorter-side resize + centre crop (Pillow) for image folders.
        verify: check checksums of the files read (archives are always checked after download).
        checksums: ``{file name: "md5:..."}`` overriding the table (custom mirrors, tests).
        cache: save decoded image-folder / Tiny ImageNet tensors beside the data (``.pt``).
        **synthetic_options: for ``"synthetic"``: num_samples, in_chans, num_classes, noise.
    """
    info = get_info(name)
    if split not in ("train", "val", "test"):
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
    if synthetic_options and info.format != "synthetic":
        raise TypeError(f"unexpected options for {name}: {sorted(synthetic_options)}")
    if info.format == "synthetic":
        size = image_size if image_size is not None else 32
        data = make_synthetic("train" if val_fraction > 0 and split == "val" else split, image_size=size,
                              seed=seed, **synthetic_options)
        return _apply_holdout(data, split, val_fraction, seed)

    if checksums:
        unknown = set(checksums) - {f.name for f in info.files}
        if unknown:
            raise KeyError(f"checksums for unknown files {sorted(unknown)}; files: {[f.name for f in info.files]}")
        info = dataclasses.replace(info, files=tuple(
            dataclasses.replace(f, checksum=checksums[f.name], content_checksum="") if f.name in checksums else f
            for f in info.files))

    source = split
    if val_fraction > 0:
        if split in ("train", "val"):
            source = "train"
    elif split == "val" and "val" not in info.splits:
        raise ValueError(f"{name} has no official validation split; pass val_fraction > 0 to hold out "
                         f"part of the training split")
    if split == "test" and "test" not in info.splits:
        source = "val"  # ImageNet's convention: the val/ folder is the test set
        if info.format == "imagefolder" and root is not None and (Path(root).expanduser() / "test").is_dir():
            source = "test"  # a folder of one's own with train/ and test/

    if info.format == "packed":
        return _apply_holdout(_load_pack(info, source, root, image_size),
                              split, val_fraction, seed)
    dirs = search_dirs(info, root)
    if root is not None and not download and not Path(root).expanduser().exists():
        raise BadData(f"data.root={root} does not exist (an explicit root is never skipped); "
                      + _missing_message(info, source, dirs))
    found = next((d for d in dirs if _present(info, d, source)), None)
    if found is None and download and info.archives():
        found = dirs[0]
        _download(info, found, source)
    if found is None and info.format == "imagefolder" and root is not None:  # the user's own folder, misshapen
        raise BadData(f"{root} has no {source}/ folder; an image folder holds train/<class>/<image> and "
                      f"val/<class>/<image> (or test/): make one folder per class under each")
    if found is None:
        raise DataError(_missing_message(info, source, dirs))
    _extract_if_needed(info, found, source, verify)

    cache_file = found / f".mlplab_decoded_{source}_{_side(image_size) or 'orig'}.pt"
    if cache and info.format in ("tiny_imagenet", "imagefolder") and cache_file.is_file():
        blob = torch_load(cache_file)
        x, y, classes = blob["images"], blob["labels"], list(blob["classes"])
    else:
        xn, yn, classes = _read(info, found, source, verify, image_size)
        x, y = torch.from_numpy(np.ascontiguousarray(xn)), torch.from_numpy(yn)
        if cache and info.format in ("tiny_imagenet", "imagefolder"):
            atomic_save(cache_file, lambda tmp: torch.save({"images": x, "labels": y, "classes": classes}, tmp))
    if image_size is not None:
        x = resize_images(x, image_size)
    num_classes = info.num_classes or len(classes)
    info = dataclasses.replace(info, image_size=tuple(x.shape[-2:]), num_classes=num_classes,
                               in_chans=int(x.shape[1]))
    return _apply_holdout(ImageData(x, y, info, classes, split), split, val_fraction, seed)


def _load_pack(info: DatasetInfo, split: str, root, image_size) -> ImageData:
    """A whole split of a pack in memory (for small packs and tools; training streams packs)."""
    from .packed import Pack

    if root is None:
        raise BadInput("data.dataset=packed needs data.root=DIR, the folder written by `mlplab pack`")
    p = Pack(root)
    part = p.split(split)
    x = torch.from_numpy(part.take(np.arange(len(part))))
    if image_size is not None:
        x = resize_images(x, image_size)
    info = dataclasses.replace(info, num_classes=p.num_classes, image_size=tuple(x.shape[-2:]), in_chans=p.in_chans,
                               mean=p.mean, std=p.std, classes=tuple(p.classes))
    return ImageData(x, part.labels.clone(), info, list(p.classes), split)


def _apply_holdout(data: ImageData, split: str, val_fraction: float, seed: int) -> ImageData:
    if val_fraction <= 0 or split == "test":
        return data
    tr, va = holdout_split(len(data), val_fraction, seed)
    idx = tr if split == "train" else va
    return ImageData(data.images[idx], data.labels[idx], data.info, data.classes, split)
