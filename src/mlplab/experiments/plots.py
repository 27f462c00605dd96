"""Figures for the experiment reports (matplotlib, Agg canvas; saved as PNG and PDF by
``mlplab.utils.figures.save_figure``).

Figures are described as data — panels of series — so each experiment only says what to draw:

    Panel("CIFAR-10, Ω = 2^18", xlabel="effective width m", ylabel="test error (%)",
          series=[Series("S-Mixer", xs, ys, errs), ...], xscale="log")
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import matplotlib
import matplotlib.ticker
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["Series", "Panel", "Heatmap", "Bars", "Images", "draw"]


@dataclass
class Series:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    yerr: Sequence[float] | None = None
    style: str = "o-"
    mark: Sequence[int] = ()  # indices to circle (e.g. the S ≈ C pair)


@dataclass
class Panel:
    title: str
    xlabel: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    xscale: str = "linear"
    yscale: str = "linear"
    hlines: list[tuple[float, str]] = field(default_factory=list)  # (y, label)
    vlines: list[tuple[float, str]] = field(default_factory=list)  # (x, label)
    xticks: Sequence[Any] | None = None


@dataclass
class Heatmap:
    title: str
    matrix: np.ndarray
    xlabels: Sequence[str] = ()
    ylabels: Sequence[str] = ()
    xlabel: str = ""
    ylabel: str = ""
    vmin: float | None = 0.0
    vmax: float | None = 1.0
    cmap: str = "magma"


@dataclass
class Bars:
    title: str
    ylabel: str
    labels: Sequence[str]
    values: Sequence[float]
    errors: Sequence[float] | None = None
    groups: Sequence[str] | None = None  # colour per bar group
    yscale: str = "linear"


@dataclass
class Images:
    title: str
    image: np.ndarray
    cmap: str = "RdBu_r"
    symmetric: bool = True


def _finite(v: Sequence[float] | None) -> np.ndarray | None:
    if v is None:
        return None
    return np.array([np.nan if x is None else float(x) for x in v], dtype=float)


def _draw_panel(ax, p: Any) -> None:
    if isinstance(p, Panel):
        for s in p.series:
            x, y, e = _finite(s.x), _finite(s.y), _finite(s.yerr)
            if e is not None and np.isfinite(e).any():
                line = ax.errorbar(x, y, yerr=np.nan_to_num(e), fmt=s.style, label=s.label, capsize=3, ms=4)
                color = line[0].get_color()
            else:
                (ln,) = ax.plot(x, y, s.style, label=s.label, ms=4)
                color = ln.get_color()
            for i in s.mark:
                if 0 <= i < len(x):
                    ax.plot([x[i]], [y[i]], "o", ms=12, mfc="none", mec=color, mew=1.5)
        for yv, lab in p.hlines:
            ax.axhline(yv, ls="--", color="gray", lw=1, label=lab)
        for xv, lab in p.vlines:
            ax.axvline(xv, ls=":", color="gray", lw=1, label=lab)
        ax.set_xscale(p.xscale)
        ax.set_yscale(p.yscale)
        if p.xscale == "log" and p.xticks is None:  # label the data's own x values, not crowded minors
            xs = sorted({float(v) for s in p.series for v in _finite(s.x) if np.isfinite(v) and v > 0})
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            if 0 < len(xs) <= 10:
                ax.set_xticks(xs)
                ax.set_xticklabels([f"{v:g}" for v in xs], fontsize=7, rotation=45)
        if p.xticks is not None:
            ax.set_xticks(list(p.xticks))
            ax.set_xticklabels([str(t) for t in p.xticks])
        ax.set_xlabel(p.xlabel)
        ax.set_ylabel(p.ylabel)
        if p.series or p.hlines or p.vlines:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    elif isinstance(p, Heatmap):
        im = ax.imshow(np.asarray(p.matrix, dtype=float), origin="lower", vmin=p.vmin, vmax=p.vmax,
                       cmap=p.cmap, aspect="auto")
        ax.figure.colorbar(im, ax=ax, fraction=0.046)
        if len(p.xlabels):
            ax.set_xticks(range(len(p.xlabels)))
            ax.set_xticklabels(p.xlabels, rotation=90, fontsize=6)
        if len(p.ylabels):
            ax.set_yticks(range(len(p.ylabels)))
            ax.set_yticklabels(p.ylabels, fontsize=6)
        ax.set_xlabel(p.xlabel)
        ax.set_ylabel(p.ylabel)
    elif isinstance(p, Bars):
        vals = _finite(p.values)
        errs = _finite(p.errors) if p.errors is not None else None
        colors = None
        if p.groups is not None:
            uniq = list(dict.fromkeys(p.groups))
            cyc = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
            colors = [cyc[uniq.index(g) % len(cyc)] for g in p.groups]
        ax.bar(range(len(vals)), np.nan_to_num(vals), yerr=None if errs is None else np.nan_to_num(errs),
               color=colors, capsize=3)
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels(p.labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(p.ylabel)
        ax.set_yscale(p.yscale)
        ax.grid(alpha=0.3, axis="y")
    elif isinstance(p, Images):
        img = np.asarray(p.image, dtype=float)
        if p.symmetric:
            v = float(np.nanmax(np.abs(img))) or 1.0
            ax.imshow(img, cmap=p.cmap, vmin=-v, vmax=v, interpolation="nearest")
        else:
            ax.imshow(img, cmap=p.cmap, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        raise TypeError(f"cannot draw {type(p).__name__}")
    ax.set_title(p.title, fontsize=9)


def draw(panels: Sequence[Any], title: str = "", ncols: int | None = None):
    """A figure with one axis per panel (rows of ``ncols``)."""
    n = max(1, len(panels))
    ncols = ncols or min(n, 3)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.3 * ncols, 3.4 * nrows))  # no pyplot: nothing to close, no global state
    FigureCanvasAgg(fig)  # headless
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, p in zip(axes.flat, panels):
        _draw_panel(ax, p)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if not panels:
        axes.flat[0].text(0.5, 0.5, "no finished runs to plot", ha="center", va="center")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
