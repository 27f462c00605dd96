"""Pictures of weights: effective wide-MLP weights, token-mixing units, stem filters.

Each picture has two halves: an *array builder* that returns exactly the matrices or images
shown (tested on its own), and a *plot* function that draws them on a matplotlib ``Figure``
(Agg canvas, no pyplot global state) and optionally saves PNG + PDF atomically.

* Paper Fig. S.9 (docs/science.md §7 figS9): the SW-MLP weight M ⊙ A, the Mixer's effective token-mixing
  weight I_C ⊗ W and the RP-Mixer's J1 (I_C ⊗ W) J2, at S = C = 8 (m = 64). All three have
  density 1/C; only the first is unstructured.
* Learned token-mixing units: row u of the first token-mixing weight holds one weight per
  token; tokens are patches in row-major image order (``mlplab.layers.stem.patchify``), so the
  row reshaped to √S×√S is a spatial receptive field.
* Stem filters: row c of the per-patch FC E ∈ R^{C×C0} is a (ch, P, P) patch (C0 = ch·P²).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..layers.vec import perm_matrix
from ..utils.figures import save_figure

__all__ = [
    "closest_factorisation",
    "effective_weight_arrays",
    "token_mixing_weight",
    "token_mixing_unit_images",
    "stem_weight",
    "stem_filter_images",
    "image_grid",
    "plot_effective_weights",
    "plot_token_mixing_units",
    "plot_stem_filters",
    "save_figure",
]


# --------------------------------------------------------------------------- helpers
def closest_factorisation(n: int) -> tuple[int, int]:
    """(h, w) with h·w = n, h ≤ w and h as close to √n as possible (64 -> (8, 8), 48 -> (6, 8))."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    h = int(math.isqrt(n))
    while n % h:
        h -= 1
    return h, n // h


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _finish(fig: Figure, path) -> Figure:
    if path is not None:
        save_figure(fig, path)
    return fig


def image_grid(images: np.ndarray, ncols: int | None = None, pad: int = 1, fill: float = np.nan) -> np.ndarray:
    """Tile images (n, h, w) or (n, h, w, 3) into one float64 array with ``pad`` pixels of ``fill``."""
    images = np.asarray(images, dtype=np.float64)
    n, h, w = images.shape[:3]
    ncols = ncols or int(math.ceil(math.sqrt(n)))
    nrows = int(math.ceil(n / ncols))
    extra = images.shape[3:]
    grid = np.full((nrows * (h + pad) - pad, ncols * (w + pad) - pad) + extra, fill, dtype=np.float64)
    for k in range(n):
        r, c = divmod(k, ncols)
        grid[r * (h + pad): r * (h + pad) + h, c * (w + pad): c * (w + pad) + w] = images[k]
    return grid


# --------------------------------------------------------------------------- Fig. S.9
def effective_weight_arrays(S: int = 8, C: int = 8, density: float | None = None, seed: int = 0,
                            W: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """The three m×m (m = S·C) matrices of paper Fig. S.9, float64 numpy arrays.

    * ``"sw"``: M ⊙ A, M ~ Bernoulli(p) (default p = 1/C, the Mixer's density), A ~ N(0, 1/m)
      with the mask's ones scaled by 1/√p (docs/science.md §4).
    * ``"mixer"``: I_C ⊗ W, the effective token-mixing weight (docs/science.md §1, Prop. 3.2), W ∈ R^{S×S}
      (given, or N(0, 1/S)).
    * ``"rp_mixer"``: J1 (I_C ⊗ W) J2 with independent uniformly random permutations J1, J2.

    Also returns ``"W"`` (the S×S weight) and the index arrays ``"perm_1"``, ``"perm_2"``. The
    draws come from one ``torch.Generator`` seeded with ``seed``, in this order and in float64:
    W's normals (when W is not given), the mask's m×m uniforms (entry kept where u < p), A's
    normals, then the permutations J1 and J2.
    """
    m = S * C
    p = 1.0 / C if density is None else density
    g = torch.Generator().manual_seed(seed)
    if W is None:
        W = torch.randn(S, S, generator=g, dtype=torch.float64) / math.sqrt(S)
    W = torch.as_tensor(W, dtype=torch.float64)
    if W.shape != (S, S):
        raise ValueError(f"W must be {S}x{S}, got {tuple(W.shape)}")
    mask = (torch.rand(m, m, generator=g, dtype=torch.float64) < p).double() / math.sqrt(p)
    A = torch.randn(m, m, generator=g, dtype=torch.float64) / math.sqrt(m)
    kron = torch.kron(torch.eye(C, dtype=torch.float64), W)
    p1, p2 = torch.randperm(m, generator=g), torch.randperm(m, generator=g)
    rp = perm_matrix(p1) @ kron @ perm_matrix(p2)
    return {"sw": (mask * A).numpy(), "mixer": kron.numpy(), "rp_mixer": rp.numpy(),
            "W": W.numpy(), "perm_1": p1.numpy(), "perm_2": p2.numpy()}


def plot_effective_weights(arrays: dict[str, np.ndarray] | None = None, path=None, **kwargs) -> Figure:
    """Fig. S.9: the three effective weights side by side (nonzeros coloured, zeros white).
    ``arrays`` from :func:`effective_weight_arrays` (built with ``kwargs`` when omitted)."""
    arrays = arrays if arrays is not None else effective_weight_arrays(**kwargs)
    panels = [("sw", "SW-MLP  M ⊙ A"), ("mixer", "Mixer  I_C ⊗ W"), ("rp_mixer", "RP-Mixer  J₁(I_C ⊗ W)J₂")]
    fig = _new_figure(4.0 * len(panels), 4.2)
    vmax = max(float(np.abs(arrays[k]).max()) for k, _ in panels) or 1.0
    for i, (key, title) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        a = np.where(arrays[key] == 0, np.nan, arrays[key])
        ax.imshow(a, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
        density = float(np.count_nonzero(arrays[key])) / arrays[key].size
        ax.set_title(f"{title}\ndensity {density:.3f}", fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    return _finish(fig, path)


# --------------------------------------------------------------------------- token-mixing units
def _first_linear(mod: nn.Module) -> nn.Linear:
    for sub in mod.modules():
        if isinstance(sub, nn.Linear):
            return sub
    raise ValueError(f"{type(mod).__name__} contains no nn.Linear")


def token_mixing_weight(model: nn.Module, block: int = 0) -> torch.Tensor:
    """First linear weight of block ``block``'s token mixing (units × S_in): W1 for the MLP-Mixer,
    W for the S-Mixer (``blocks[i].token_mixing.inner``)."""
    try:
        inner = model.blocks[block].token_mixing.inner
    except (AttributeError, IndexError) as e:
        raise ValueError(f"model has no blocks[{block}].token_mixing.inner (a Mixer is needed)") from e
    return _first_linear(inner).weight.detach()


def token_mixing_unit_images(weight_or_model, block: int = 0, max_units: int | None = None,
                             shape: tuple[int, int] | None = None) -> np.ndarray:
    """Each token-mixing unit's S weights as an image: (units, h, w), h·w = S.

    ``shape`` defaults to :func:`closest_factorisation` of S (√S×√S for square patch grids, where
    it is the unit's receptive field over the image). Units are the rows of the weight.
    """
    W = weight_or_model if isinstance(weight_or_model, torch.Tensor) else token_mixing_weight(weight_or_model, block)
    W = torch.as_tensor(W).detach().double().cpu()
    if max_units is not None:
        W = W[:max_units]
    h, w = shape or closest_factorisation(W.shape[1])
    if h * w != W.shape[1]:
        raise ValueError(f"shape {(h, w)} does not hold S={W.shape[1]} weights")
    return W.reshape(W.shape[0], h, w).numpy()  # row-major over tokens = over the patch grid


def plot_token_mixing_units(weight_or_model, block: int = 0, max_units: int = 64, path=None,
                            ncols: int | None = None) -> Figure:
    """Grid of learned token-mixing units (each on its own symmetric colour scale)."""
    imgs = token_mixing_unit_images(weight_or_model, block, max_units)
    scale = np.abs(imgs).reshape(len(imgs), -1).max(1)
    imgs = imgs / np.where(scale == 0, 1.0, scale)[:, None, None]
    grid = image_grid(imgs, ncols)
    fig = _new_figure(6.0, 6.0 * grid.shape[0] / grid.shape[1] + 0.4)
    ax = fig.add_subplot(1, 1, 1)
    ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_title(f"token-mixing units, block {block} ({imgs.shape[1]}×{imgs.shape[2]} tokens)", fontsize=10)
    ax.axis("off")
    return _finish(fig, path)


# --------------------------------------------------------------------------- stem filters
def stem_weight(model: nn.Module) -> tuple[torch.Tensor, int, int]:
    """(E, patch_size, in_chans) of a model's per-patch FC stem (``model.stem.proj``)."""
    stem = getattr(model, "stem", None)
    proj = getattr(stem, "proj", None)
    if not isinstance(proj, nn.Linear):
        raise ValueError("model has no per-patch FC stem (model.stem.proj); pass the weight instead")
    return proj.weight.detach(), int(stem.patch_size), int(stem.in_chans)


def stem_filter_images(weight_or_model, patch_size: int | None = None, in_chans: int | None = None,
                       max_filters: int | None = None, normalise: bool = False) -> np.ndarray:
    """Per-patch FC rows as images (filters, P, P, ch), undoing ``patchify``'s (ch, P, P) order.

    ``normalise=True`` maps each filter to [0, 1] (min–max), as needed to show RGB filters.
    """
    if isinstance(weight_or_model, nn.Module):
        E, patch_size, in_chans = stem_weight(weight_or_model)
    else:
        E = torch.as_tensor(weight_or_model)
        if patch_size is None or in_chans is None:
            raise ValueError("patch_size and in_chans are needed with a bare weight")
    E = E.detach().double().cpu()
    if E.shape[1] != in_chans * patch_size ** 2:
        raise ValueError(f"weight has {E.shape[1]} inputs, expected ch·P² = {in_chans * patch_size ** 2}")
    if max_filters is not None:
        E = E[:max_filters]
    imgs = E.reshape(E.shape[0], in_chans, patch_size, patch_size).permute(0, 2, 3, 1).numpy()
    if normalise:
        lo = imgs.reshape(len(imgs), -1).min(1)[:, None, None, None]
        hi = imgs.reshape(len(imgs), -1).max(1)[:, None, None, None]
        imgs = (imgs - lo) / np.where(hi > lo, hi - lo, 1.0)
    return imgs


def plot_stem_filters(weight_or_model, patch_size: int | None = None, in_chans: int | None = None,
                      max_filters: int = 64, path=None, ncols: int | None = None) -> Figure:
    """Grid of stem filters: RGB for 3 channels, a diverging map for 1 channel (others: channel 0)."""
    imgs = stem_filter_images(weight_or_model, patch_size, in_chans, max_filters, normalise=True)
    rgb = imgs.shape[-1] == 3
    grid = image_grid(imgs if rgb else imgs[..., 0], ncols, fill=1.0)
    fig = _new_figure(6.0, 6.0 * grid.shape[0] / grid.shape[1] + 0.4)
    ax = fig.add_subplot(1, 1, 1)
    if rgb:
        ax.imshow(grid, interpolation="nearest")  # min–max normalised: already in [0, 1]
    else:
        ax.imshow(grid, cmap="RdBu_r", vmin=0, vmax=1, interpolation="nearest")
    ax.set_title(f"stem filters ({imgs.shape[1]}×{imgs.shape[2]}×{imgs.shape[3]})", fontsize=10)
    ax.axis("off")
    return _finish(fig, path)
