"""Batched augmentation on the device, with per-sample randomness (airbench's habit).

Pipeline of ``Augment.__call__`` on a uint8 batch (B, ch, H, W):

1. random crop with zero padding (per-sample offsets, one gather), or RandomResizedCrop
   (``mlplab.data.resized_crop``: per-sample boxes, one ``grid_sample``),
2. horizontal flip (per-sample mask),
3. AutoAugment or RandAugment (per-sample sub-policies / ops, grouped by op),
4. normalise ``(x / 255 - mean) / std``,
5. random erasing (timm "pixel" mode: per-sample rectangle filled with N(0, 1) noise),
6. mixup / cutmix (timm ``Mixup`` semantics) and label smoothing -> soft targets (B, K).

All random numbers come from the ``torch.Generator`` passed in, drawn on the batch's device (the
generator lives there: ``derive_generator(..., device=)``), so a batch is a pure function of
(images, labels, generator state) and nothing waits on the host: no per-batch host tensor, no
``.item()``, no host→device copy (``tests/data/test_augment_sync_free.py`` checks this on the
``meta`` device). Beta draws for mixup/cutmix are made on the device too (``sample_beta``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from .autoaugment import AutoAugment, RandAugment, parse_randaugment
from .resized_crop import random_resized_crop

__all__ = ["AugmentConfig", "Augment", "build_augment", "random_crop", "random_hflip", "crop_flip_host", "one_hot",
           "mix_batch", "erasing_masks", "random_erasing", "normalize", "sample_beta"]

Tensor = torch.Tensor


@dataclass
class AugmentConfig:
    """The ``augment`` section of a run config. Defaults = no augmentation."""

    crop_padding: int = 0  # pixels of zero padding for the random crop (CIFAR recipe: 4)
    random_resized_crop: bool = False  # Inception/DeiT crop, resized back to the image size (ImageNet recipes)
    rrc_scale: tuple[float, float] = (0.08, 1.0)  # its box area, as a fraction of the image (timm/DeiT)
    rrc_ratio: tuple[float, float] = (3 / 4, 4 / 3)  # its box aspect w/h, drawn log-uniform (timm/DeiT)
    hflip: bool = False  # random horizontal flip with probability 0.5
    mixup: float = 0.0  # mixup Beta(alpha, alpha); 0 = off
    cutmix: float = 0.0  # cutmix Beta(alpha, alpha); 0 = off
    mix_switch_prob: float = 0.5  # with both on: probability of cutmix instead of mixup
    mix_prob: float = 1.0  # probability that a batch (or sample, mix_mode="elem") is mixed
    mix_mode: str = "batch"  # "batch": one lam/box per batch (timm default); "elem": per sample
    random_erasing: float = 0.0  # probability per sample
    autoaugment: str = "none"  # "none" | "cifar10" | "imagenet"
    randaugment: str = ""  # timm string, e.g. "rand-m9-mstd0.5-inc1"; "" = off
    label_smoothing: float = 0.0  # timm-style: off = eps / K, on = 1 - eps + eps / K
    test_hflip: bool = False  # evaluation: average the logits of each image and its mirror image

    def __post_init__(self) -> None:
        if self.crop_padding < 0:
            raise ValueError(f"augment.crop_padding must be >= 0, got {self.crop_padding}")
        if self.crop_padding and self.random_resized_crop:
            raise ValueError("choose either augment.crop_padding or augment.random_resized_crop, not both")
        lo, hi = self.rrc_scale
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"augment.rrc_scale must be [lo, hi] with 0 < lo <= hi <= 1, got {list(self.rrc_scale)}")
        lo, hi = self.rrc_ratio
        if not 0 < lo <= hi:
            raise ValueError(f"augment.rrc_ratio must be [lo, hi] with 0 < lo <= hi, got {list(self.rrc_ratio)}")
        for name in ("mixup", "cutmix"):
            if getattr(self, name) < 0:
                raise ValueError(f"augment.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("mix_switch_prob", "mix_prob", "random_erasing", "label_smoothing"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"augment.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.autoaugment not in ("none", "cifar10", "imagenet"):
            raise ValueError(f"augment.autoaugment must be 'none', 'cifar10' or 'imagenet', got {self.autoaugment!r}")
        if self.mix_mode not in ("batch", "elem"):
            raise ValueError(f"augment.mix_mode must be 'batch' or 'elem', got {self.mix_mode!r}")
        if self.randaugment:
            parse_randaugment(self.randaugment)
        if self.randaugment and self.autoaugment != "none":
            raise ValueError("choose either augment.autoaugment or augment.randaugment, not both")

    @property
    def soft_targets(self) -> bool:
        """True when the loader returns soft targets (B, K) instead of int64 labels."""
        return self.mixup > 0 or self.cutmix > 0 or self.label_smoothing > 0


_CHANNEL_CONSTANTS: dict[tuple, tuple[Tensor, Tensor]] = {}


def _channel_constants(mean: Sequence[float], std: Sequence[float], dtype: torch.dtype,
                       device: torch.device) -> tuple[Tensor, Tensor]:
    """255·mean and 255·std as (1, ch, 1, 1) tensors on ``device``, copied there once per process."""
    key = (tuple(float(v) for v in mean), tuple(float(v) for v in std), dtype, str(device))
    if key not in _CHANNEL_CONSTANTS:
        m = torch.tensor(key[0], dtype=dtype).view(1, -1, 1, 1) * 255
        s = torch.tensor(key[1], dtype=dtype).view(1, -1, 1, 1) * 255
        _CHANNEL_CONSTANTS[key] = (m.to(device), s.to(device))
    return _CHANNEL_CONSTANTS[key]


def normalize(x: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """``(x / 255 - mean) / std`` per channel, for x in [0, 255]."""
    m, s = _channel_constants(mean, std, x.dtype, x.device)
    return (x - m) / s


def random_crop(x: Tensor, padding: int, generator: torch.Generator, *, return_offsets: bool = False):
    """Per-sample random crops of the zero-padded batch, all gathered with one ``gather``.

    Offsets (dy, dx) are uniform in [0, 2 * padding]; an output pixel (i, j) of sample b is
    padded[b, :, dy_b + i, dx_b + j], so crops never read outside the padded image.
    """
    if padding <= 0:
        return (x, torch.zeros(len(x), 2, dtype=torch.long, device=x.device)) if return_offsets else x
    b, c, h, w = x.shape
    hp, wp = h + 2 * padding, w + 2 * padding
    padded = torch.nn.functional.pad(x, (padding,) * 4).reshape(b, c, hp * wp)  # (B, ch, Hp*Wp)
    off = offd = torch.randint(0, 2 * padding + 1, (b, 2), generator=generator, device=x.device)
    window = (torch.arange(h, device=x.device)[:, None] * wp + torch.arange(w, device=x.device)).view(1, h * w)
    idx = (window + (offd[:, 0] * wp + offd[:, 1]).view(b, 1)).view(b, 1, h * w).expand(b, c, h * w)
    out = padded.gather(2, idx).view(b, c, h, w)
    return (out, off) if return_offsets else out


def crop_flip_host(x: Tensor, padding: int, hflip: bool, generator: torch.Generator, p: float = 0.5) -> Tensor:
    """``random_hflip(random_crop(x, padding))`` for a batch in host memory, equal to it element for
    element (the same draws in the same order), at several times its speed: each sample is one
    slice copy of its window (the zero border left from ``np.zeros``), mirrored in the same copy,
    instead of a gather through a full-size index tensor. On an accelerator the batched ops stay."""
    b, c, h, w = x.shape
    off = (torch.randint(0, 2 * padding + 1, (b, 2), generator=generator, device=x.device).tolist()
           if padding > 0 else [(padding, padding)] * b)
    flips = (torch.rand(b, generator=generator, device=x.device) < p).tolist() if hflip else [False] * b
    src = x.numpy()
    out = np.zeros_like(src) if padding > 0 else np.empty_like(src)
    for i, ((dy, dx), flip) in enumerate(zip(off, flips)):
        sy, sx = dy - padding, dx - padding  # the window's top-left corner in the unpadded image
        r0, r1, c0, c1 = max(0, -sy), min(h, h - sy), max(0, -sx), min(w, w - sx)
        window = src[i, :, r0 + sy:r1 + sy, c0 + sx:c1 + sx]
        if flip:
            out[i, :, r0:r1, w - c1:w - c0] = window[:, :, ::-1]
        else:
            out[i, :, r0:r1, c0:c1] = window
    return torch.from_numpy(out)


def random_hflip(x: Tensor, generator: torch.Generator, p: float = 0.5, *, return_mask: bool = False):
    mask = torch.rand(len(x), generator=generator, device=x.device) < p
    out = torch.where(mask.view(-1, 1, 1, 1), x.flip(-1), x)
    return (out, mask) if return_mask else out


def one_hot(y: Tensor, num_classes: int, smoothing: float = 0.0, dtype=torch.float32) -> Tensor:
    """Soft targets (B, K): ``1 - eps + eps/K`` on the label, ``eps/K`` elsewhere (timm)."""
    off = smoothing / num_classes
    t = torch.full((len(y), num_classes), off, dtype=dtype, device=y.device)
    return t.scatter_(1, y.view(-1, 1), 1.0 - smoothing + off)


def _gamma_log(alpha: float, n: int, generator: torch.Generator, device: torch.device,
               attempts: int = 16) -> Tensor:
    """log of n Gamma(alpha, 1) draws on ``device``: Marsaglia & Tsang's squeeze method with
    ``attempts`` vectorised proposals per draw (the first accepted one is kept; each is accepted
    with probability > 0.95, so all failing has probability < 1e-20), boosted by U^(1/alpha)
    for alpha < 1. Working in logs keeps tiny alphas from underflowing to 0/0."""
    boost = alpha < 1.0
    d = (alpha + 1.0 if boost else alpha) - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    z = torch.randn(n, attempts, generator=generator, device=device, dtype=torch.float64)
    u = torch.rand(n, attempts, generator=generator, device=device, dtype=torch.float64)
    v = (1.0 + c * z) ** 3
    logv = torch.log(v.clamp(min=1e-300))
    ok = (v > 0) & (torch.log(u) < 0.5 * z * z + d - d * v + d * logv)
    first = ok.to(torch.uint8).argmax(1, keepdim=True)  # first accepted proposal (0 if none)
    out = math.log(d) + logv.gather(1, first).squeeze(1)
    if boost:
        u1 = torch.rand(n, generator=generator, device=device, dtype=torch.float64)
        out = out + torch.log(u1.clamp(min=1e-300)) / alpha
    return out


def sample_beta(alpha: float, n: int, generator: torch.Generator, device: torch.device | str = "cpu",
                dtype: torch.dtype = torch.float32) -> Tensor:
    """n draws of Beta(alpha, alpha) on ``device``: X / (X + Y) for X, Y ~ Gamma(alpha), i.e.
    sigmoid(log X − log Y), computed in float64. ``alpha`` <= 0 gives ones (no mixing)."""
    device = torch.device(device)
    if alpha <= 0:
        return torch.ones(n, device=device, dtype=dtype)
    g = _gamma_log(float(alpha), 2 * n, generator, device)
    return torch.sigmoid(g[:n] - g[n:]).to(dtype)


def _boxes(lam: Tensor, h: int, w: int, generator: torch.Generator) -> Tensor:
    """timm ``rand_bbox``: side ratio sqrt(1 - lam), centre uniform, clipped. (n, 4) y0,y1,x0,x1."""
    cut = torch.sqrt(1.0 - lam)
    ch, cw = (h * cut).long(), (w * cut).long()
    cy = torch.randint(0, h, lam.shape, generator=generator, device=lam.device)
    cx = torch.randint(0, w, lam.shape, generator=generator, device=lam.device)
    return torch.stack([(cy - ch // 2).clamp(0, h), (cy + ch // 2).clamp(0, h),
                        (cx - cw // 2).clamp(0, w), (cx + cw // 2).clamp(0, w)], -1)


def mix_batch(x: Tensor, target: Tensor, generator: torch.Generator, *, mixup_alpha: float = 0.0,
              cutmix_alpha: float = 0.0, switch_prob: float = 0.5, mix_prob: float = 1.0,
              mode: str = "batch") -> tuple[Tensor, Tensor, Tensor]:
    """Mixup / CutMix against the reversed batch (timm ``Mixup``); returns (x, target, lam (B,)).

    ``mode="batch"``: one coin, one lam and one box for the batch; ``"elem"``: per sample.
    Cutmix's lam is corrected to the clipped box's area. ``target`` is soft (B, K).
    Every draw is made on ``x``'s device.
    """
    b, _, h, w = x.shape
    dev = x.device
    n = 1 if mode == "batch" else b
    coin = torch.rand(n, generator=generator, device=dev)
    if mixup_alpha > 0 and cutmix_alpha > 0:
        use_cut = coin < switch_prob
    else:
        use_cut = torch.full((n,), cutmix_alpha > 0, device=dev)
    lam = torch.where(use_cut, sample_beta(cutmix_alpha, n, generator, dev),
                      sample_beta(mixup_alpha, n, generator, dev))
    lam = torch.where(torch.rand(n, generator=generator, device=dev) < mix_prob, lam, torch.ones_like(lam))
    boxes = _boxes(lam, h, w, generator)
    area = (boxes[:, 1] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 2])
    lam = torch.where(use_cut, 1.0 - area / (h * w), lam)
    if mode == "batch":
        lam, use_cut, boxes = lam.expand(b), use_cut.expand(b), boxes.expand(b, 4)
    lam_t = lam.to(x.dtype)
    xf = x.flip(0)
    ar_h, ar_w = torch.arange(h, device=dev), torch.arange(w, device=dev)
    inside = (((ar_h >= boxes[:, 0:1]) & (ar_h < boxes[:, 1:2]))[:, :, None]
              & ((ar_w >= boxes[:, 2:3]) & (ar_w < boxes[:, 3:4]))[:, None, :])  # (B, H, W)
    mixed = torch.where(inside[:, None] & use_cut.view(-1, 1, 1, 1), xf, x)
    blend = lam_t.view(-1, 1, 1, 1) * x + (1 - lam_t.view(-1, 1, 1, 1)) * xf
    out = torch.where(use_cut.view(-1, 1, 1, 1), mixed, blend)
    tgt = lam_t.view(-1, 1) * target + (1 - lam_t.view(-1, 1)) * target.flip(0)
    return out, tgt, lam_t


def erasing_masks(b: int, h: int, w: int, prob: float, generator: torch.Generator, *, min_area: float = 0.02,
                  max_area: float = 1 / 3, min_aspect: float = 0.3, attempts: int = 10,
                  device: torch.device | str | None = None) -> Tensor:
    """Per-sample erasing rectangles (B, H, W) bool, timm ``RandomErasing`` geometry, drawn on
    ``device`` (default: the generator's).

    Each erased sample takes the first of ``attempts`` (area, aspect) draws that fits.
    """
    dev = torch.device(device) if device is not None else generator.device
    area = (min_area + (max_area - min_area) * torch.rand(b, attempts, generator=generator, device=dev)) * h * w
    la, lb = math.log(min_aspect), math.log(1 / min_aspect)
    aspect = torch.exp(la + (lb - la) * torch.rand(b, attempts, generator=generator, device=dev))
    eh = torch.sqrt(area * aspect).round().long()
    ew = torch.sqrt(area / aspect).round().long()
    ok = (eh < h) & (ew < w) & (eh > 0) & (ew > 0)
    first = ok.long().argmax(1)
    fits = ok.any(1) & (torch.rand(b, generator=generator, device=dev) < prob)
    eh = eh.gather(1, first[:, None]).squeeze(1)
    ew = ew.gather(1, first[:, None]).squeeze(1)
    top = (torch.rand(b, generator=generator, device=dev) * (h - eh + 1)).long().clamp(max=h - 1)
    left = (torch.rand(b, generator=generator, device=dev) * (w - ew + 1)).long().clamp(max=w - 1)
    r, c = torch.arange(h, device=dev), torch.arange(w, device=dev)
    rows = (r >= top[:, None]) & (r < (top + eh)[:, None])
    cols = (c >= left[:, None]) & (c < (left + ew)[:, None])
    return rows[:, :, None] & cols[:, None, :] & fits.view(-1, 1, 1)


def random_erasing(x: Tensor, prob: float, generator: torch.Generator, value: float | None = None) -> Tensor:
    """Erase one rectangle per selected sample of a *normalised* batch with N(0, 1) noise
    (timm "pixel" mode), or with the constant ``value``."""
    b, c, h, w = x.shape
    mask = erasing_masks(b, h, w, prob, generator, device=x.device)[:, None]
    if value is None:
        fill = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    else:
        fill = torch.full_like(x, value)
    return torch.where(mask, fill, x)


class Augment:
    """The configured augmentation as one callable: ``aug(x_uint8, y, generator) -> (x, y)``.

    ``x`` comes back float, normalised; ``y`` is int64 (B,) or soft targets (B, K) when
    mixup / cutmix / label smoothing is on (``self.soft_targets``).
    """

    def __init__(self, cfg: AugmentConfig, num_classes: int, mean: Sequence[float], std: Sequence[float]):
        self.cfg = cfg
        self.num_classes = num_classes
        self.mean, self.std = tuple(mean), tuple(std)
        fill = float(np.mean(self.mean) * 255)  # geometric ops fill with the mean: 0 after normalising
        self.policy = None
        if cfg.autoaugment != "none":
            self.policy = AutoAugment(cfg.autoaugment, fill=fill)
        elif cfg.randaugment:
            self.policy = RandAugment(cfg.randaugment, fill=fill)
        if cfg.soft_targets and num_classes <= 0:
            raise ValueError("soft targets (mixup/cutmix/label smoothing) need num_classes > 0")

    @property
    def soft_targets(self) -> bool:
        return self.cfg.soft_targets

    def __call__(self, x: Tensor, y: Tensor, generator: torch.Generator, mean: Sequence[float] | None = None,
                 std: Sequence[float] | None = None) -> tuple[Tensor, Tensor]:
        c = self.cfg
        host = x.device.type == "cpu" and x.dtype == torch.uint8 and c.crop_padding and not c.random_resized_crop
        if host:
            x = crop_flip_host(x, c.crop_padding, c.hflip, generator)  # the same batch, several times faster
        elif c.crop_padding:  # geometry on the uint8 batch: a quarter of the memory traffic
            x = random_crop(x, c.crop_padding, generator)
        if c.random_resized_crop:
            x = random_resized_crop(x, generator, scale=c.rrc_scale, ratio=c.rrc_ratio)
        if c.hflip and not host:
            x = random_hflip(x, generator)
        x = x.float()
        if self.policy is not None:
            x = self.policy(x, generator)
        x = normalize(x, self.mean if mean is None else mean, self.std if std is None else std)
        if c.random_erasing > 0:
            x = random_erasing(x, c.random_erasing, generator)
        if c.soft_targets:
            t = one_hot(y, self.num_classes, c.label_smoothing)
            if c.mixup > 0 or c.cutmix > 0:
                x, t, _ = mix_batch(x, t, generator, mixup_alpha=c.mixup, cutmix_alpha=c.cutmix,
                                    switch_prob=c.mix_switch_prob, mix_prob=c.mix_prob, mode=c.mix_mode)
            y = t
        return x, y

    def __repr__(self) -> str:
        return f"Augment({asdict(self.cfg)}, num_classes={self.num_classes})"


def build_augment(cfg: AugmentConfig | Mapping[str, Any] | None, info: Any = None, *,
                  num_classes: int | None = None, mean: Sequence[float] | None = None,
                  std: Sequence[float] | None = None) -> Augment:
    """Build the batch augmentation for a dataset (``info``: a ``DatasetInfo``, for K/mean/std).

    ``cfg`` may be an ``AugmentConfig``, a dict of its fields (unknown keys are an error) or None.
    """
    if cfg is None:
        cfg = AugmentConfig()
    elif isinstance(cfg, Mapping):
        valid = {f.name for f in fields(AugmentConfig)}
        unknown = set(cfg) - valid
        if unknown:
            raise KeyError(f"unknown augment keys {sorted(unknown)}; valid: {sorted(valid)}")
        cfg = AugmentConfig(**cfg)
    k = num_classes if num_classes is not None else getattr(info, "num_classes", 0)
    m = mean if mean is not None else getattr(info, "mean", None)
    s = std if std is not None else getattr(info, "std", None)
    if m is None or s is None:
        raise ValueError("build_augment needs mean/std: pass a DatasetInfo or mean= and std=")
    return Augment(cfg, k, m, s)
