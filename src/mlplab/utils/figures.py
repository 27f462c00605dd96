"""Saving matplotlib figures: the one helper, used by the weight pictures and the reports.

matplotlib is imported only when a figure is saved, so importing this module costs nothing.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from .io import atomic_save

__all__ = ["save_figure"]


def save_figure(fig: Any, path: str | os.PathLike, formats: Sequence[str] = ("png", "pdf"),
                dpi: int = 150, tight: bool = True) -> list[Path]:
    """Save the matplotlib ``Figure`` as ``path`` with each suffix in ``formats`` (``runs/fig6`` ->
    ``runs/fig6.png``, ``runs/fig6.pdf``; a suffix already in ``formats`` is dropped first), each
    file written to a temp file and renamed. A figure without a canvas gets an Agg one (headless).
    ``tight``: crop to the drawn content (draws the figure twice; a figure laid out by hand, as
    every run's curves are, saves in half the time without it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    base = Path(path)
    if base.suffix.lstrip(".") in formats:
        base = base.with_suffix("")
    if fig.canvas is None or not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    written = []
    for fmt in formats:
        target = base.with_name(base.name + "." + fmt)
        atomic_save(target, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=dpi,
                                                             bbox_inches="tight" if tight else None))
        written.append(target)
    return written
