"""AutoAugment and RandAugment on whole batches, with per-sample random choices.

Every op works on a float batch in [0, 255] (B, ch, H, W) and takes a per-sample argument
tensor (B,), so a batch is processed with one call per *op* (the samples that drew it), never
one call per sample. Results are rounded to integers after each op, as PIL does on uint8.

Magnitudes:
* AutoAugment (Cubuk et al. 2019) policies use 10 magnitude bins 0..9 spanning each op's range
  (``level / 9``, torchvision's reading of the paper); signed ops get a random sign.
* RandAugment follows timm (``rand-m9-mstd0.5-inc1``): level in [0, 10] (``level / 10``), each
  op applied with probability 0.5, magnitude noise ``N(m, mstd)`` clipped to [0, mmax], ops drawn
  with replacement; ``inc1`` uses the variants whose strength increases with the magnitude.
Geometric ops fill uncovered pixels with ``fill`` (the dataset mean, i.e. 0 after normalisation).

Random draws are made on the batch's device from the generator passed in (which lives there).
On the CPU each op runs on the samples that drew it (a gather and a scatter per op); on an
accelerator that selection would need the count of selected samples on the host (a sync per op),
so there each op runs on the whole batch and ``torch.where`` keeps it for the samples that drew
it — the same result per sample (tested), with no host sync.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

__all__ = ["OPS", "AUTOAUGMENT_POLICIES", "AutoAugment", "RandAugment", "RandAugmentConfig",
           "parse_randaugment", "apply_op"]

Tensor = torch.Tensor


def _v(a: Tensor) -> Tensor:
    return a.view(-1, 1, 1, 1)


def _gray(x: Tensor) -> Tensor:
    if x.shape[1] == 1:
        return x
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3])


def _blend(degenerate: Tensor, x: Tensor, factor: Tensor) -> Tensor:
    return (degenerate + _v(factor) * (x - degenerate)).clamp_(0, 255)


def brightness(x: Tensor, f: Tensor, fill: float = 0.0) -> Tensor:
    return (x * _v(f)).clamp_(0, 255)


def color(x: Tensor, f: Tensor, fill: float = 0.0) -> Tensor:
    return _blend(_gray(x), x, f)


def contrast(x: Tensor, f: Tensor, fill: float = 0.0) -> Tensor:
    mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True).round()
    return _blend(mean, x, f)


def sharpness(x: Tensor, f: Tensor, fill: float = 0.0) -> Tensor:
    """PIL's SHARPNESS: blend with the SMOOTH-filtered image (borders unchanged)."""
    c = x.shape[1]
    k = torch.ones(3, 3, device=x.device, dtype=x.dtype)
    k[1, 1] = 5.0
    k = k / 13
    smooth = F.conv2d(x, k.expand(c, 1, 3, 3), groups=c).round_()
    degenerate = x.clone()
    degenerate[..., 1:-1, 1:-1] = smooth
    return _blend(degenerate, x, f)


def posterize(x: Tensor, bits: Tensor, fill: float = 0.0) -> Tensor:
    q = _v(torch.pow(2.0, 8 - bits.clamp(0, 8).to(x.dtype)))
    return torch.floor(x / q) * q


def solarize(x: Tensor, threshold: Tensor, fill: float = 0.0) -> Tensor:
    return torch.where(x >= _v(threshold), 255 - x, x)


def solarize_add(x: Tensor, add: Tensor, fill: float = 0.0) -> Tensor:
    return torch.where(x < 128, (x + _v(add)).clamp(max=255), x)


def invert(x: Tensor, _: Tensor, fill: float = 0.0) -> Tensor:
    return 255 - x


def autocontrast(x: Tensor, _: Tensor, fill: float = 0.0) -> Tensor:
    xd = x.double()  # PIL builds its lookup table in double precision: int(i * scale + offset)
    lo = xd.amin(dim=(2, 3), keepdim=True)
    hi = xd.amax(dim=(2, 3), keepdim=True)
    scale = 255.0 / (hi - lo).clamp(min=1)
    out = (xd * scale - lo * scale).floor_().clamp_(0, 255)
    return torch.where(hi > lo, out, xd).to(x.dtype)


def equalize(x: Tensor, _: Tensor, fill: float = 0.0) -> Tensor:
    """PIL's histogram equalisation per image and channel, via batched histograms."""
    b, c, h, w = x.shape
    xi = x.reshape(b * c, h * w).long().clamp_(0, 255)
    hist = torch.zeros(b * c, 256, device=x.device, dtype=torch.long)
    hist.scatter_add_(1, xi, torch.ones_like(xi))
    last_idx = 255 - (hist.flip(1) > 0).long().argmax(1)
    last = hist.gather(1, last_idx[:, None]).squeeze(1)
    step = (h * w - last) // 255
    lut = (hist.cumsum(1) + (step // 2)[:, None]) // step.clamp(min=1)[:, None]
    lut = torch.cat([torch.zeros_like(lut[:, :1]), lut[:, :-1]], 1).clamp_(0, 255)
    out = torch.where(step[:, None] == 0, xi, lut.gather(1, xi))
    return out.reshape(b, c, h, w).to(x.dtype)


def _affine(x: Tensor, theta: Tensor, fill: float) -> Tensor:
    """Warp each sample by its (2, 3) matrix (output -> input, normalised coords), nearest."""
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x - fill, grid, mode="nearest", padding_mode="zeros", align_corners=False) + fill


def _eye(n: int, device) -> Tensor:
    return torch.eye(2, 3, device=device).repeat(n, 1, 1)


def shear_x(x: Tensor, s: Tensor, fill: float = 0.0) -> Tensor:
    t = _eye(len(x), x.device)
    t[:, 0, 1] = s * x.shape[2] / x.shape[3]
    return _affine(x, t, fill)


def shear_y(x: Tensor, s: Tensor, fill: float = 0.0) -> Tensor:
    t = _eye(len(x), x.device)
    t[:, 1, 0] = s * x.shape[3] / x.shape[2]
    return _affine(x, t, fill)


def translate_x(x: Tensor, frac: Tensor, fill: float = 0.0) -> Tensor:
    """Shift by ``frac`` of the width (rounded to whole pixels)."""
    w = x.shape[3]
    t = _eye(len(x), x.device)
    t[:, 0, 2] = 2 * torch.round(frac * w) / w
    return _affine(x, t, fill)


def translate_y(x: Tensor, frac: Tensor, fill: float = 0.0) -> Tensor:
    h = x.shape[2]
    t = _eye(len(x), x.device)
    t[:, 1, 2] = 2 * torch.round(frac * h) / h
    return _affine(x, t, fill)


def rotate(x: Tensor, degrees: Tensor, fill: float = 0.0) -> Tensor:
    a = degrees * (math.pi / 180)
    h, w = x.shape[2], x.shape[3]
    cos, sin = torch.cos(a), torch.sin(a)
    t = torch.stack([torch.stack([cos, -sin * h / w, torch.zeros_like(a)], 1),
                     torch.stack([sin * w / h, cos, torch.zeros_like(a)], 1)], 1)
    return _affine(x, t, fill)


@dataclass(frozen=True)
class _Op:
    fn: Callable[..., Tensor]
    arg: Callable[[Tensor, Tensor], Tensor]  # (r = level / denom in [0, 1+], sign +-1) -> argument


_NONE = lambda r, s: r  # noqa: E731
_ENH = lambda r, s: 1.0 + 0.9 * r * s  # noqa: E731  torchvision / timm "increasing" enhance

#: Op name -> function and magnitude mapping. Names follow timm / the AutoAugment paper.
OPS: dict[str, _Op] = {
    "AutoContrast": _Op(autocontrast, _NONE),
    "Equalize": _Op(equalize, _NONE),
    "Invert": _Op(invert, _NONE),
    "Rotate": _Op(rotate, lambda r, s: 30.0 * r * s),
    "ShearX": _Op(shear_x, lambda r, s: 0.3 * r * s),
    "ShearY": _Op(shear_y, lambda r, s: 0.3 * r * s),
    # AutoAugment: 150 px of 331 (paper) as a fraction of the size; timm's TranslateRel 0.45
    "TranslateX": _Op(translate_x, lambda r, s: (150 / 331) * r * s),
    "TranslateY": _Op(translate_y, lambda r, s: (150 / 331) * r * s),
    "TranslateXRel": _Op(translate_x, lambda r, s: 0.45 * r * s),
    "TranslateYRel": _Op(translate_y, lambda r, s: 0.45 * r * s),
    # AutoAugment (torchvision): bits 8 - round(4 r); threshold 255 (1 - r); factor 1 +- 0.9 r
    "Posterize": _Op(posterize, lambda r, s: 8 - torch.round(4 * r)),
    "Solarize": _Op(solarize, lambda r, s: 255.0 * (1 - r)),
    "Color": _Op(color, _ENH),
    "Contrast": _Op(contrast, _ENH),
    "Brightness": _Op(brightness, _ENH),
    "Sharpness": _Op(sharpness, _ENH),
    # timm RandAugment (non-increasing): keep int(4 r) bits, threshold int(256 r), factor 1.8 r + 0.1
    "PosterizeRA": _Op(posterize, lambda r, s: torch.floor(4 * r)),
    "SolarizeRA": _Op(solarize, lambda r, s: torch.floor(256 * r)),
    "SolarizeAdd": _Op(solarize_add, lambda r, s: torch.floor(110 * r)),
    "ColorRA": _Op(color, lambda r, s: 1.8 * r + 0.1),
    "ContrastRA": _Op(contrast, lambda r, s: 1.8 * r + 0.1),
    "BrightnessRA": _Op(brightness, lambda r, s: 1.8 * r + 0.1),
    "SharpnessRA": _Op(sharpness, lambda r, s: 1.8 * r + 0.1),
    # timm "increasing" variants
    "PosterizeIncreasing": _Op(posterize, lambda r, s: 4 - torch.floor(4 * r)),
    "SolarizeIncreasing": _Op(solarize, lambda r, s: 256 - torch.floor(256 * r)),
    "ColorIncreasing": _Op(color, _ENH),
    "ContrastIncreasing": _Op(contrast, _ENH),
    "BrightnessIncreasing": _Op(brightness, _ENH),
    "SharpnessIncreasing": _Op(sharpness, _ENH),
}

# AutoAugment policies (Cubuk et al. 2019, appendix): 25 sub-policies of (op, prob, magnitude bin 0-9).
AUTOAUGMENT_POLICIES: dict[str, tuple] = {
    "imagenet": (
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 0)),
        (("Equalize", 0.8, 0), ("Equalize", 0.6, 0)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, 0), ("Solarize", 0.2, 4)), (("Equalize", 0.4, 0), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, 0)), (("Posterize", 0.8, 5), ("Equalize", 1.0, 0)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, 0), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, 0)),
        (("Equalize", 0.0, 0), ("Equalize", 0.8, 0)), (("Invert", 0.6, 0), ("Equalize", 1.0, 0)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, 0)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, 0)), (("Color", 0.4, 0), ("Equalize", 0.6, 0)),
        (("Equalize", 0.4, 0), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 0)),
        (("Invert", 0.6, 0), ("Equalize", 1.0, 0)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, 0), ("Equalize", 0.6, 0)),
    ),
    "cifar10": (
        (("Invert", 0.1, 0), ("Contrast", 0.2, 6)), (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)), (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, 0), ("Equalize", 0.9, 0)), (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)), (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, 0), ("Equalize", 0.5, 0)), (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)), (("Equalize", 0.3, 0), ("AutoContrast", 0.4, 0)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)), (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, 0)), (("Equalize", 0.2, 0), ("AutoContrast", 0.6, 0)),
        (("Equalize", 0.2, 0), ("Equalize", 0.6, 0)), (("Color", 0.9, 9), ("Equalize", 0.6, 0)),
        (("AutoContrast", 0.8, 0), ("Solarize", 0.2, 8)), (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, 0)), (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, 0), ("Solarize", 0.2, 3)), (("Equalize", 0.8, 0), ("Invert", 0.1, 0)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, 0)),
    ),
}

_RA_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeRA", "SolarizeRA", "SolarizeAdd",
           "ColorRA", "ContrastRA", "BrightnessRA", "SharpnessRA", "ShearX", "ShearY",
           "TranslateXRel", "TranslateYRel")
_RA_OPS_INC = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
               "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
               "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")


def apply_op(x: Tensor, name: str, level: Tensor, sign: Tensor | None = None, denom: float = 10.0,
             fill: float = 128.0) -> Tensor:
    """Apply op ``name`` to every sample with per-sample ``level`` (B,) and ``sign`` (B,)."""
    op = OPS[name]
    if sign is None:
        sign = torch.ones_like(level)
    arg = op.arg(level / denom, sign)
    return op.fn(x, arg.to(x.device, x.dtype), fill).round_()


def _apply_grouped(x: Tensor, names: tuple[str, ...], op_idx: Tensor, active: Tensor, level: Tensor,
                   sign: Tensor, denom: float, fill: float, *, select: bool | None = None) -> Tensor:
    """For each op, apply it to the samples that drew it (and are active): one call per op.

    ``select`` (default: on the CPU) gathers those samples first; otherwise the op runs on the
    whole batch and ``torch.where`` keeps it where drawn (no host sync; see the module docstring)."""
    if select is None:
        select = x.device.type == "cpu"
    for k, name in enumerate(names):
        drawn = (op_idx == k) & active
        if select:
            sel = drawn.nonzero().squeeze(1)
            if sel.numel():
                x[sel] = apply_op(x[sel], name, level[sel], sign[sel], denom, fill)
        else:
            x = torch.where(drawn.view(-1, 1, 1, 1), apply_op(x, name, level, sign, denom, fill), x)
    return x


class AutoAugment:
    """AutoAugment with a learned policy ("cifar10" or "imagenet"); each sample draws its own
    sub-policy, coin flips and signs."""

    def __init__(self, policy: str = "imagenet", fill: float = 128.0):
        if policy not in AUTOAUGMENT_POLICIES:
            raise ValueError(f"unknown AutoAugment policy {policy!r}; choose from {sorted(AUTOAUGMENT_POLICIES)}")
        self.policy = AUTOAUGMENT_POLICIES[policy]
        self.fill = fill
        self.names = tuple(sorted({op for sub in self.policy for op, _, _ in sub}))
        idx = {n: i for i, n in enumerate(self.names)}
        self._tables: dict[str, tuple[Tensor, Tensor, Tensor]] = {}  # device -> (op, prob, magnitude), (P, 2) each
        self._rows = ([[idx[op] for op, _, _ in sub] for sub in self.policy],
                      [[p for _, p, _ in sub] for sub in self.policy],
                      [[float(m) for _, _, m in sub] for sub in self.policy])

    def _policy_on(self, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """The policy table on ``device``, copied there once."""
        key = str(device)
        if key not in self._tables:
            ops, probs, mags = self._rows
            self._tables[key] = (torch.tensor(ops).to(device), torch.tensor(probs).to(device),
                                 torch.tensor(mags).to(device))
        return self._tables[key]

    def __call__(self, x: Tensor, generator: torch.Generator, *, select: bool | None = None) -> Tensor:
        """x: float (B, ch, H, W) in [0, 255]; returns the augmented batch (in place on the CPU)."""
        b, dev = len(x), x.device
        op_t, p_t, m_t = self._policy_on(dev)
        sub = torch.randint(len(self.policy), (b,), generator=generator, device=dev)
        coins = torch.rand(b, 2, generator=generator, device=dev)
        signs = torch.randint(2, (b, 2), generator=generator, device=dev).float() * 2 - 1
        for stage in range(2):
            x = _apply_grouped(x, self.names, op_t[sub, stage], coins[:, stage] < p_t[sub, stage],
                               m_t[sub, stage], signs[:, stage], 9.0, self.fill, select=select)
        return x


@dataclass(frozen=True)
class RandAugmentConfig:
    num_ops: int = 2
    magnitude: float = 9.0
    magnitude_std: float = 0.0
    magnitude_max: float = 10.0
    prob: float = 0.5
    increasing: bool = False


def parse_randaugment(spec: str) -> RandAugmentConfig:
    """Parse a timm RandAugment string, e.g. ``rand-m9-mstd0.5-inc1`` or ``rand-n3-m15``.

    Keys: ``m`` magnitude, ``n`` ops per image, ``mstd`` magnitude std (``inf`` = uniform in
    [0, m]), ``mmax`` magnitude cap, ``p`` op probability, ``inc`` increasing variants (0/1).
    """
    parts = spec.strip().split("-")
    if not parts or parts[0] != "rand":
        raise ValueError(f"RandAugment spec must start with 'rand', got {spec!r}")
    kw: dict = {}
    keys = (("mstd", "magnitude_std", float), ("mmax", "magnitude_max", float), ("inc", "increasing", int),
            ("m", "magnitude", float), ("n", "num_ops", int), ("p", "prob", float))
    for part in parts[1:]:
        for key, field, typ in keys:
            if part.startswith(key):
                try:
                    kw[field] = typ(part[len(key):])
                except ValueError:
                    raise ValueError(f"bad value in RandAugment spec {spec!r}: {part!r}") from None
                break
        else:
            raise ValueError(f"unknown key {part!r} in RandAugment spec {spec!r} (known: m, n, mstd, mmax, p, inc)")
    if "increasing" in kw:
        kw["increasing"] = bool(kw["increasing"])
    return RandAugmentConfig(**kw)


class RandAugment:
    """timm-style RandAugment: ``num_ops`` ops per sample, drawn with replacement, each applied
    with probability ``prob`` at magnitude ``N(m, mstd)`` clipped to [0, mmax] (per sample)."""

    def __init__(self, cfg: RandAugmentConfig | str, fill: float = 128.0):
        self.cfg = parse_randaugment(cfg) if isinstance(cfg, str) else cfg
        self.fill = fill
        self.names = _RA_OPS_INC if self.cfg.increasing else _RA_OPS

    def __call__(self, x: Tensor, generator: torch.Generator, *, select: bool | None = None) -> Tensor:
        b, c, dev = len(x), self.cfg, x.device
        for _ in range(c.num_ops):
            op_idx = torch.randint(len(self.names), (b,), generator=generator, device=dev)
            active = torch.rand(b, generator=generator, device=dev) < c.prob
            if math.isinf(c.magnitude_std):
                level = torch.rand(b, generator=generator, device=dev) * c.magnitude
            elif c.magnitude_std > 0:
                level = c.magnitude + c.magnitude_std * torch.randn(b, generator=generator, device=dev)
            else:
                level = torch.full((b,), float(c.magnitude), device=dev)
            level = level.clamp(0, c.magnitude_max)
            sign = torch.randint(2, (b,), generator=generator, device=dev).float() * 2 - 1
            x = _apply_grouped(x, self.names, op_idx, active, level, sign, 10.0, self.fill, select=select)
        return x
