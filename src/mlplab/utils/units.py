"""Numbers for people: the one way counts (parameters, FLOPs) are printed."""
from __future__ import annotations

__all__ = ["format_count"]


def format_count(n: float | None) -> str:
    """A count to three significant digits with an SI prefix: 1234567 -> '1.23M', 12345 -> '12.3k',
    999 -> '999'; None -> '-' (unknown)."""
    if n is None:
        return "-"
    n = float(f"{n:.3g}")  # round first, so 999_600 becomes '1M', not '1e+03k'
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"
