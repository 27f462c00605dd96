"""What first-layer and token-mixing units learn: the weight statistics behind the MLP-Mixer
supplement's Figs. 1–2 (``mixer-weights``: token-mixing units paired with their inverses, the
embedding units' spatial frequency) and Scaling MLPs' Figs. 10–11 (``sm-weights``: how localised
the first layer's units are, r½)."""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["INVERSE_TAU", "mean_frequency", "inverse_partners", "paired_units", "weight_stats", "stem_unit_images",
           "initial_model", "half_energy_radius", "uniform_half_energy_radius", "unit_picture"]

# ------------------------------------------------------------ token-mixing and embedding units (Mixer)

# cosine a unit's most negatively aligned partner must reach for "paired with an inverse". At
# S = 49 tokens (the cpu scale's smaller patch) random units rarely reach it — the least of ~100
# cosines of sd 1/√S is ≈ −0.36 — at S = 16 they often do, so the claims use the smaller patch
INVERSE_TAU = 0.5


def mean_frequency(images: np.ndarray) -> np.ndarray:
    """Power-weighted mean radial spatial frequency (cycles per pixel) of each image:
    f = Σ_k |X̂_k|² ‖k‖ / Σ_k |X̂_k|², over the 2-D DFT of the image (DC included, so a constant
    image has f = 0; a checkerboard has f = √2/2). ``images``: (n, h, w) or (n, h, w, ch) — the
    channels' power is summed. An all-zero image gets NaN."""
    x = np.asarray(images, dtype=np.float64)
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise ValueError(f"images must be (n, h, w) or (n, h, w, ch), got shape {x.shape}")
    power = (np.abs(np.fft.fft2(x, axes=(1, 2))) ** 2).sum(-1)  # (n, h, w)
    r = np.hypot(np.fft.fftfreq(x.shape[1])[:, None], np.fft.fftfreq(x.shape[2])[None, :])
    total = power.sum((1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (power * r).sum((1, 2)) / total, np.nan)


def inverse_partners(W: np.ndarray, tau: float = INVERSE_TAU) -> dict[str, Any]:
    """How the units (rows of W, e.g. a token-mixing fc1 weight D_S × S) pair with inverses.

    With K the cosine similarity of the rows (diagonal excluded): each unit's closest inverse is
    argmin_v K[u, v]; ``frac_inverse`` is the fraction of units with min_v K[u, v] ≤ −τ;
    ``frac_closest_is_inverse`` the fraction whose most aligned partner (argmax_v |K[u, v]|) is
    anti-aligned (K < 0) — 1/2 in expectation for random weights, whatever the scale of K, so it
    separates "paired with an inverse" from "more structure of any sign". Zero rows are left out."""
    W = np.asarray(W, dtype=np.float64)
    norms = np.linalg.norm(W, axis=1)
    keep = np.flatnonzero(norms > 0)
    if keep.size < 2:
        raise ValueError("inverse_partners needs at least two nonzero units")
    U = W[keep] / norms[keep, None]
    K = U @ U.T
    np.fill_diagonal(K, np.nan)
    partner = np.nanargmin(K, axis=1)
    min_cos = K[np.arange(len(K)), partner]
    closest = np.nanargmax(np.abs(K), axis=1)
    closest_cos = K[np.arange(len(K)), closest]
    return {"units": int(keep.size), "frac_inverse": float(np.mean(min_cos <= -tau)),
            "mean_min_cos": float(np.mean(min_cos)), "frac_closest_is_inverse": float(np.mean(closest_cos < 0)),
            "partner": keep[partner], "min_cos": min_cos, "kept": keep}


def paired_units(images: np.ndarray, partner: np.ndarray, units: int) -> np.ndarray:
    """Supplement Fig. 1's layout: the units sorted by :func:`mean_frequency` (low first), each
    followed by its closest inverse (``partner`` from :func:`inverse_partners`; a unit already
    shown as a partner is not shown again), the first ``units`` pairs, each image scaled to
    max |w| = 1. Returns (2·pairs, h, w), pairs ≤ ``units``."""
    f = mean_frequency(images)
    shown: list[int] = []
    for u in np.argsort(np.nan_to_num(f, nan=np.inf), kind="stable"):
        if len(shown) >= 2 * units:
            break
        if int(u) not in shown:
            shown += [int(u), int(partner[u])]
    out = np.stack([images[i] for i in shown])
    scale = np.abs(out).reshape(len(out), -1).max(1)
    return out / np.where(scale > 0, scale, 1.0)[:, None, None]


def weight_stats(model, blocks: int, tau: float) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Inverse-pair statistics over the first ``blocks`` token-mixing fc1 weights (pooled units)
    and the embedding units' mean frequency; and the arrays the figure shows."""
    import torch

    from .pictures import stem_filter_images, token_mixing_unit_images, token_mixing_weight

    stats: dict[str, float] = {}
    arrays: dict[str, np.ndarray] = {}
    pooled = {"units": 0, "frac_inverse": 0.0, "mean_min_cos": 0.0, "frac_closest_is_inverse": 0.0}
    for b in range(blocks):
        W = token_mixing_weight(model, b).double().cpu().numpy()
        ip = inverse_partners(W, tau)
        n = ip["units"]
        for k in ("frac_inverse", "mean_min_cos", "frac_closest_is_inverse"):
            stats[f"block{b}_{k}"] = ip[k]
            pooled[k] += n * ip[k]
        pooled["units"] += n
        imgs = token_mixing_unit_images(torch.from_numpy(W[ip["kept"]]))  # the nonzero units only
        local = np.searchsorted(ip["kept"], ip["partner"])  # each partner's place among them
        arrays[f"token_units_block{b}"] = paired_units(imgs, local, min(16, n))
        stats[f"block{b}_token_frequency"] = float(np.nanmean(mean_frequency(imgs)))
    for k in ("frac_inverse", "mean_min_cos", "frac_closest_is_inverse"):
        stats[k] = pooled[k] / pooled["units"]
    emb = stem_filter_images(model)  # (C, P, P, ch)
    f = mean_frequency(emb)
    stats["embedding_frequency"] = float(np.nanmean(f))
    emb = emb[np.argsort(np.nan_to_num(f, nan=np.inf), kind="stable")[:32]].mean(-1)  # (≤ 32, P, P)
    scale = np.abs(emb).reshape(len(emb), -1).max(1)
    arrays["embedding_units"] = emb / np.where(scale > 0, scale, 1.0)[:, None, None]
    return stats, arrays


# ------------------------------------------------------------ first-layer units of a flattening MLP


def stem_unit_images(model) -> np.ndarray:
    """The first layer W^(1) ∈ R^{m × ch·H·W} of a flattening MLP as one image per unit,
    (m, H, W, ch): row u reshaped in the flattening's (ch, H, W) order, channels moved last."""
    W = model.stem.weight.detach().double().cpu().numpy()  # (m, ch·H·W)
    cfg = model.cfg
    side, ch = int(cfg.image_size), int(cfg.in_chans)
    return W.reshape(W.shape[0], ch, side, side).transpose(0, 2, 3, 1)


def initial_model(model, seed: int):
    """The model as the trainer built it before its first step: the same class and config, built
    right after ``torch.manual_seed(run.seed)`` (``train.loop``: the model's weights are the first
    draws after seeding). The global random state is left as it was."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(int(seed))
        return type(model)(model.cfg)


def half_energy_radius(images: np.ndarray) -> np.ndarray:
    """Per unit, how localised it is: the radius (pixels) of the smallest disc about the unit's
    energy centre of mass that holds at least half of its energy.

    ``images``: (units, H, W[, ch]); the energy of a pixel is Σ_ch w². With e(p) ≥ 0 the pixel
    energies and c = Σ_p e(p)·p / Σ_p e(p), r½ = min{r : Σ_{|p − c| ≤ r} e(p) ≥ ½ Σ_p e(p)}, taken
    over the pixel distances |p − c|. A single pixel gives 0; energy spread evenly over an n×n image
    gives :func:`uniform_half_energy_radius`. A unit with no energy gives NaN."""
    x = np.asarray(images, dtype=np.float64)
    e = (x ** 2).sum(-1) if x.ndim == 4 else x ** 2  # (U, H, W)
    U, H, W = e.shape
    tot = e.sum((1, 2))
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        cy = (e * yy).sum((1, 2)) / tot
        cx = (e * xx).sum((1, 2)) / tot
    d = np.sqrt((yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2).reshape(U, -1)
    order = np.argsort(d, axis=1, kind="stable")
    d_sorted = np.take_along_axis(d, order, 1)
    cum = np.cumsum(np.take_along_axis(e.reshape(U, -1), order, 1), axis=1)
    first = np.argmax(cum >= 0.5 * tot[:, None] * (1 - 1e-12), axis=1)
    r = d_sorted[np.arange(U), first]
    return np.where(tot > 0, r, np.nan)


def uniform_half_energy_radius(side: int) -> float:
    """r½ of a unit whose energy is spread evenly over a side×side image: the reference of no
    localisation (an untrained layer's units are near it)."""
    return float(half_energy_radius(np.ones((1, side, side)))[0])


def unit_picture(units: np.ndarray) -> tuple[np.ndarray, bool]:
    """One grid image of first-layer units (n, H, W, ch) for a figure, and whether it is shown on a
    symmetric colour scale: colour units each min–max scaled to [0, 1] (not symmetric), grey units
    (channel 0) each on its own symmetric scale."""
    from .pictures import image_grid

    im = units
    if im.shape[-1] == 3:  # colour units: each min–max scaled to [0, 1]
        lo = im.reshape(len(im), -1).min(1)[:, None, None, None]
        hi = im.reshape(len(im), -1).max(1)[:, None, None, None]
        return image_grid((im - lo) / np.where(hi > lo, hi - lo, 1.0), fill=1.0), False
    # grey units (channel 0): each on its own symmetric scale
    im = im[..., 0] / np.maximum(np.abs(im[..., 0]).reshape(len(im), -1).max(1), 1e-12)[:, None, None]
    return image_grid(im), True
