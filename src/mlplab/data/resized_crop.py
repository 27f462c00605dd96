"""Batched RandomResizedCrop (Inception / DeiT / timm geometry) on the data's device.

Per sample, a box of area ``s · H·W`` and aspect ``r = w / h`` is drawn with
``s ~ U(scale)`` and ``log r ~ U(log ratio)``, so ``w = round(sqrt(s·H·W·r))``,
``h = round(sqrt(s·H·W / r))``; the first of ``attempts`` draws that fits inside the image is
used (timm ``RandomResizedCrop.get_params``), otherwise the central crop of the largest box
whose aspect lies in ``ratio``. The top-left corner is uniform over the positions that fit.

Every box is resampled to ``size`` × ``size`` by one ``grid_sample`` over the batch (bilinear,
pixel centres aligned as in ``F.interpolate(align_corners=False)``), so a batch costs one kernel
and no per-sample Python. All draws are made with ``generator`` on *its* device: with a generator
on the data's device no tensor is created on the host and nothing waits for the device.
Unlike torchvision there is no antialiasing when a box is shrunk (boxes are usually enlarged:
the data is stored at the training resolution).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = ["resized_crop_boxes", "resized_crop", "random_resized_crop"]

Tensor = torch.Tensor


def resized_crop_boxes(b: int, h: int, w: int, generator: torch.Generator, *,
                       scale: Sequence[float] = (0.08, 1.0), ratio: Sequence[float] = (3 / 4, 4 / 3),
                       attempts: int = 10) -> Tensor:
    """(B, 4) int64 boxes ``(top, left, height, width)`` on ``generator.device`` (module docstring)."""
    dev = generator.device
    area = h * w * (scale[0] + (scale[1] - scale[0]) * torch.rand(b, attempts, generator=generator, device=dev))
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(lo + (hi - lo) * torch.rand(b, attempts, generator=generator, device=dev))
    bw = torch.sqrt(area * aspect).round().long()
    bh = torch.sqrt(area / aspect).round().long()
    ok = (bw > 0) & (bw <= w) & (bh > 0) & (bh <= h)
    first = ok.long().argmax(1, keepdim=True)  # first fitting attempt (0 when none fits)
    bw, bh, fits = bw.gather(1, first)[:, 0], bh.gather(1, first)[:, 0], ok.any(1)
    # fallback (timm): the whole image, its aspect clamped into ``ratio``, centred
    in_ratio = w / h
    if in_ratio < ratio[0]:
        fw, fh = w, round(w / ratio[0])
    elif in_ratio > ratio[1]:
        fw, fh = round(h * ratio[1]), h
    else:
        fw, fh = w, h
    fw, fh = min(fw, w), min(fh, h)
    bw = torch.where(fits, bw, torch.full_like(bw, fw))
    bh = torch.where(fits, bh, torch.full_like(bh, fh))
    u = torch.rand(b, 2, generator=generator, device=dev)
    top = torch.where(fits, (u[:, 0] * (h - bh + 1)).long().clamp(max=h - 1), torch.full_like(bh, (h - fh) // 2))
    left = torch.where(fits, (u[:, 1] * (w - bw + 1)).long().clamp(max=w - 1), torch.full_like(bw, (w - fw) // 2))
    return torch.stack([top, left, bh, bw], 1)


def resized_crop(x: Tensor, boxes: Tensor, size: int | Sequence[int]) -> Tensor:
    """Resample each sample's box ``(top, left, height, width)`` of float (B, ch, H, W) to ``size``:
    the same numbers as cropping the box and ``F.interpolate(mode="bilinear", align_corners=False)``.

    Output pixel ``v`` (of ``out_w``) reads the input at ``left + (v + 1/2)·width/out_w``
    (pixel centres at k + 1/2), clamped to the box's first and last pixel centres as the
    interpolation of a crop clamps at its edge; in ``grid_sample``'s normalised coordinates
    (align_corners=False) a position p of an axis of length W is ``2p/W − 1``.
    """
    b, c, h, w = x.shape
    oh, ow = (size, size) if isinstance(size, int) else tuple(size)
    bx = boxes.to(x.device, x.dtype)
    top, left, bh, bw = (t[:, None] for t in bx.unbind(1))  # (B, 1) each

    def axis(start: Tensor, length: Tensor, n_out: int, n_in: int) -> Tensor:  # (B, n_out)
        v = torch.arange(n_out, device=x.device, dtype=x.dtype) + 0.5
        p = torch.minimum(torch.maximum(start + v * length / n_out, start + 0.5), start + length - 0.5)
        return 2 * p / n_in - 1

    gx, gy = axis(left, bw, ow, w), axis(top, bh, oh, h)
    grid = torch.stack([gx[:, None, :].expand(b, oh, ow), gy[:, :, None].expand(b, oh, ow)], -1)  # (B, oh, ow, 2)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def random_resized_crop(x: Tensor, generator: torch.Generator, size: int | Sequence[int] | None = None, *,
                        scale: Sequence[float] = (0.08, 1.0), ratio: Sequence[float] = (3 / 4, 4 / 3)) -> Tensor:
    """RandomResizedCrop of a batch (uint8 or float (B, ch, H, W)) to ``size`` (default: H × W);
    returns float in the input's value range."""
    b, _, h, w = x.shape
    boxes = resized_crop_boxes(b, h, w, generator, scale=scale, ratio=ratio)
    return resized_crop(x if x.is_floating_point() else x.float(), boxes, (h, w) if size is None else size)
