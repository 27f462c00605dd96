"""The connection budget Ω and the widths it allows (docs/science.md §3, Hayase & Karakida 2024, §4).

Ω is the average number of connections (nonzero weights) per layer:

    MLP-Mixer:  Ω = γ (C·S² + C²·S) / 2        (S-Mixer: γ = 1)                    (§3, eq. Ω)
    SW-MLP:     Ω = p · γ · m²

A Mixer at (S, C) is an MLP of effective width m = S·C (Prop. 3.2). At fixed Ω and γ, solving the
quadratic γ(C·S² + C²·S) = 2Ω for S gives

    S(C) = (sqrt(C² + 8Ω/(γC)) − C) / 2                                            (§3, eq. S)

and, by symmetry, C(S). m = S·C is single-peaked in C with its maximum at
C* = S* = (Ω/γ)^{1/3}, m* = (Ω/γ)^{2/3}; there the equivalent SW-MLP density p = Ω/(γm²) is
smallest. Bounds: (sqrt(1 + 8Ω/γ) − 1)/2 ≤ m ≤ (Ω/γ)^{2/3} (lower end at C = 1). An SW-MLP of
density p has width m = sqrt(Ω/(γp)) ≥ sqrt(Ω/γ). At a fixed width m = S·C the expansion that
spends the budget is γ = 2Ω/(m(C + m/C)), largest at C = S = √m where γ_max = Ω/m^{3/2}.

Integers: S (or C when tokens are enumerated) is rounded to the nearest integer, halves up, and
SW-MLP widths likewise; this reproduces every pair listed in the paper (see tests/theory).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Iterable, Literal, Sequence

__all__ = [
    "FAMILIES",
    "omega_mixer",
    "omega_sw_mlp",
    "tokens_for",
    "channels_for",
    "optimal_size",
    "max_width",
    "width_bounds",
    "sw_mlp_width",
    "sw_mlp_density",
    "gamma_for_width",
    "gamma_max",
    "min_omega",
    "round_half_up",
    "parse_omega",
    "PlanRow",
    "Optimum",
    "BudgetPlan",
    "plan_budget",
]

Family = Literal["s_mixer", "mlp_mixer", "sw_mlp"]
FAMILIES: tuple[str, ...] = ("s_mixer", "mlp_mixer", "sw_mlp")


# ----------------------------------------------------------------------------- checks


def _check_omega(omega: float) -> float:
    if isinstance(omega, bool) or not isinstance(omega, (int, float)) or not math.isfinite(omega):
        raise ValueError(f"omega must be a finite number of connections, got {omega!r}")
    if omega <= 0:
        raise ValueError(f"omega (connections per layer) must be > 0, got {omega}; e.g. omega=2^18")
    if omega > 2**62:  # far beyond any model; the arithmetic would overflow floats further on
        raise ValueError(f"omega={omega:.3g} is too large; use at most 2^62 connections per layer")
    return float(omega)


def _check_gamma(gamma: float) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma):
        raise ValueError(f"gamma (expansion factor) must be a finite number, got {gamma!r}")
    if gamma <= 0:
        raise ValueError(f"gamma (expansion factor) must be > 0, got {gamma}; the S-Mixer uses gamma=1")
    return float(gamma)


def _check_size(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a number >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    return float(value)


def _check_density(p: float) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p):
        raise ValueError(f"density p must be a number in (0, 1], got {p!r}")
    if not 0.0 < p <= 1.0:
        raise ValueError(
            f"density p must be in (0, 1] (p = 1 is a dense MLP), got {p}; "
            f"a sparsity of 1-p = 0.9 is density p = 0.1"
        )
    return float(p)


def round_half_up(x: float) -> int:
    """Nearest integer, halves rounded up (not Python's banker's rounding)."""
    return int(math.floor(x + 0.5))


# ----------------------------------------------------------------------------- formulas


def omega_mixer(tokens: float, channels: float, gamma: float = 1.0) -> float:
    """Ω = γ(C·S² + C²·S)/2 (docs/science.md §3): mean connections per layer of an MLP-Mixer / S-Mixer."""
    S, C = _check_size(tokens, "tokens S"), _check_size(channels, "channels C")
    return _check_gamma(gamma) * (C * S * S + C * C * S) / 2.0


def omega_sw_mlp(width: float, density: float, gamma: float = 1.0) -> float:
    """Ω = p·γ·m² (docs/science.md §3): mean connections per layer of a static sparse-weight MLP."""
    return _check_density(density) * _check_gamma(gamma) * _check_size(width, "width m") ** 2


def min_omega(gamma: float = 1.0, channels: float | None = None, tokens: float | None = None) -> float:
    """Smallest Ω for which a pair exists: γ(C + C²)/2 for a given C (with S = 1), likewise for a
    given S, and γ (S = C = 1) when neither is fixed."""
    g = _check_gamma(gamma)
    if channels is not None and tokens is not None:
        raise ValueError("give channels or tokens, not both")
    n = channels if channels is not None else tokens
    if n is None:
        return g
    n = _check_size(n, "channels C" if channels is not None else "tokens S")
    return g * (n + n * n) / 2.0


def tokens_for(omega: float, channels: float, gamma: float = 1.0) -> float:
    """S(C) = (sqrt(C² + 8Ω/(γC)) − C)/2, the real root of γ(C·S² + C²·S)/2 = Ω (docs/science.md §3)."""
    om, g, C = _check_omega(omega), _check_gamma(gamma), _check_size(channels, "channels C")
    return (math.sqrt(C * C + 8.0 * om / (g * C)) - C) / 2.0


def channels_for(omega: float, tokens: float, gamma: float = 1.0) -> float:
    """C(S) = (sqrt(S² + 8Ω/(γS)) − S)/2: Ω is symmetric in S and C (docs/science.md §3)."""
    om, g, S = _check_omega(omega), _check_gamma(gamma), _check_size(tokens, "tokens S")
    return (math.sqrt(S * S + 8.0 * om / (g * S)) - S) / 2.0


def optimal_size(omega: float, gamma: float = 1.0) -> float:
    """C* = S* = (Ω/γ)^{1/3}, where the effective width m = S·C peaks (docs/science.md §3)."""
    return (_check_omega(omega) / _check_gamma(gamma)) ** (1.0 / 3.0)


def max_width(omega: float, gamma: float = 1.0) -> float:
    """m* = (Ω/γ)^{2/3}, the largest effective width of a Mixer at budget Ω (docs/science.md §3)."""
    return (_check_omega(omega) / _check_gamma(gamma)) ** (2.0 / 3.0)


def width_bounds(omega: float, gamma: float = 1.0) -> tuple[float, float]:
    """(sqrt(1 + 8Ω/γ) − 1)/2 ≤ m ≤ (Ω/γ)^{2/3} for a Mixer (lower end: C = 1 or S = 1)."""
    om, g = _check_omega(omega), _check_gamma(gamma)
    return (math.sqrt(1.0 + 8.0 * om / g) - 1.0) / 2.0, (om / g) ** (2.0 / 3.0)


def sw_mlp_width(omega: float, density: float, gamma: float = 1.0) -> float:
    """m = sqrt(Ω/(γp)) (docs/science.md §3); at least sqrt(Ω/γ) (the dense MLP, p = 1)."""
    return math.sqrt(_check_omega(omega) / (_check_gamma(gamma) * _check_density(density)))


def sw_mlp_density(omega: float, width: float, gamma: float = 1.0) -> float:
    """p = Ω/(γm²): the density of the SW-MLP with the same budget and width (docs/science.md §3).

    Not clipped: a value > 1 means no SW-MLP of that width fits the budget."""
    return _check_omega(omega) / (_check_gamma(gamma) * _check_size(width, "width m") ** 2)


def gamma_for_width(omega: float, width: float, channels: float) -> float:
    """γ = 2Ω/(m(C + m/C)): the expansion that spends Ω at fixed m = S·C (docs/science.md §3)."""
    om, m, C = _check_omega(omega), _check_size(width, "width m"), _check_size(channels, "channels C")
    return 2.0 * om / (m * (C + m / C))


def gamma_max(omega: float, width: float) -> float:
    """γ_max = Ω/m^{3/2}, reached at C = S = √m (docs/science.md §3)."""
    return _check_omega(omega) / _check_size(width, "width m") ** 1.5


_POW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:\^|\*\*)\s*(\d+(?:\.\d+)?)\s*$")


def parse_omega(text: str | int | float) -> int:
    """Ω from ``"2^18"``, ``"2**18"``, ``"262144"``, ``"2.9e8"`` (must be a whole number)."""
    if isinstance(text, bool):
        raise ValueError(f"omega must be a number, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = str(text).strip().replace("_", "").replace(",", "")
        match = _POW.match(s)
        try:
            value = float(match.group(1)) ** float(match.group(2)) if match else float(s)
        except (ValueError, OverflowError):
            raise ValueError(f"cannot read omega {text!r}; write e.g. 2^18 or 262144") from None
    if not math.isfinite(value) or value != math.floor(value):
        raise ValueError(f"omega must be a whole number of connections, got {text!r}")
    value_int = int(value)
    _check_omega(value_int)
    return value_int


# ----------------------------------------------------------------------------- the plan


@dataclass
class PlanRow:
    """One model of the plan.

    family: ``"mixer"`` (an S-Mixer / MLP-Mixer pair) or ``"sw_mlp"``.
    channels, tokens: C and S (None for an SW-MLP).
    width: effective width m (S·C for a Mixer, the layer width for an SW-MLP).
    density_token, density_channel: densities 1/C and 1/S of the Mixer's effective token- and
        channel-mixing weights (Prop. 3.2).
    density: the SW-MLP density p = Ω/(γm²) with the same budget and width (for a Mixer row:
        the SW-MLP it is compared with; > 1 means none fits).
    connections: actual mean connections per layer after rounding (for an MLP-Mixer with the
        integer hidden widths D_S = round(γS), D_C = round(γC) as the model builds them, halves
        to even: S·C·(D_S + D_C)/2; for an SW-MLP
        the expected p·γ·m²).
    rel_error: (connections − Ω)/Ω.
    solved_for: which size was computed from the other (``"S"``, ``"C"``, ``"swap"`` for a
        symmetric pair, ``"m"`` for an SW-MLP).
    """

    family: str
    channels: int | None
    tokens: int | None
    width: int
    density_token: float | None
    density_channel: float | None
    density: float
    connections: float
    rel_error: float
    solved_for: str


@dataclass
class Optimum:
    """C* = S* = (Ω/γ)^{1/3}, m* = (Ω/γ)^{2/3}, p_min = Ω/(γ m*²), and the nearest integer pair."""

    size: float
    width: float
    density: float
    channels: int
    tokens: int
    int_width: int
    connections: float
    rel_error: float


@dataclass
class BudgetPlan:
    omega: int | float
    gamma: float
    family: str
    rows: list[PlanRow] = field(default_factory=list)
    optimum: Optimum | None = None
    width_bounds: tuple[float, float] | None = None

    def pairs(self) -> list[tuple[int, int]]:
        """(C, S) of the Mixer rows, in table order."""
        return [(r.channels, r.tokens) for r in self.rows if r.family == "mixer"]

    def widths(self) -> list[int]:
        return [r.width for r in self.rows]

    def to_dict(self) -> dict:
        return {
            "omega": self.omega,
            "gamma": self.gamma,
            "family": self.family,
            "rows": [asdict(r) for r in self.rows],
            "optimum": None if self.optimum is None else asdict(self.optimum),
            "width_bounds": None if self.width_bounds is None else list(self.width_bounds),
        }

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def optimum_line(self) -> str:
        if self.optimum is None:
            lo = math.sqrt(self.omega / self.gamma)
            return (f"SW-MLP: m = sqrt(Ω/(γp)) grows without bound as p -> 0; "
                    f"smallest width (dense, p = 1): m = {lo:.1f}")
        o = self.optimum
        lo, hi = self.width_bounds
        return (
            f"optimum: C* = S* = (Ω/γ)^(1/3) = {o.size:.2f}, max m = (Ω/γ)^(2/3) = {o.width:.1f}, "
            f"min SW-MLP density p = {o.density:.4g}; nearest integers C = S = {o.channels} "
            f"(m = {o.int_width}, {o.rel_error:+.2%} vs Ω); Mixer widths lie in [{lo:.1f}, {hi:.1f}]"
        )

    def format_table(self) -> str:
        head = ["family", "C", "S", "m", "1/C", "1/S", "p=Ω/(γm²)", "connections", "rel.err"]
        lines = []
        for r in self.rows:
            lines.append([
                r.family if r.family == "sw_mlp" else self.family,
                "-" if r.channels is None else str(r.channels),
                "-" if r.tokens is None else str(r.tokens),
                str(r.width),
                "-" if r.density_token is None else f"{r.density_token:.4g}",
                "-" if r.density_channel is None else f"{r.density_channel:.4g}",
                f"{r.density:.4g}",
                f"{r.connections:.0f}",
                f"{r.rel_error:+.3%}",
            ])
        widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(head)]
        fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
        title = f"budget Ω = {_omega_str(self.omega)} connections per layer, γ = {self.gamma:g}, family = {self.family}"
        out = [title, fmt(head), fmt(["-" * w for w in widths])]
        out += [fmt(l) for l in lines]
        out.append(self.optimum_line())
        return "\n".join(out)


def _omega_str(omega: float) -> str:
    if omega > 0 and float(omega).is_integer():
        k = int(omega).bit_length() - 1
        if 1 << k == int(omega):
            return f"2^{k} = {int(omega)}"
    return f"{omega:g}"


def _as_int_list(values: Iterable, what: str) -> list[int]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != math.floor(float(v)):
            raise ValueError(f"{what} must be whole numbers >= 1, got {v!r}")
        if v < 1:
            raise ValueError(f"{what} must be >= 1, got {v}")
        out.append(int(v))
    if not out:
        raise ValueError(f"{what}: give at least one value")
    return out


def _mixer_connections(S: int, C: int, gamma: float, family: str) -> float:
    """Mean connections per layer as built: S-Mixer S·C·(S + C)/2; MLP-Mixer with the integer
    hidden widths D_S = round(γS), D_C = round(γC) that ``models.mixer`` builds (Python's round,
    halves to even) (four layers: C·S·D_S twice and S·C·D_C twice)."""
    if family == "s_mixer":
        return S * C * (S + C) / 2.0
    return S * C * (round(gamma * S) + round(gamma * C)) / 2.0


def _mixer_row(omega: float, gamma: float, family: str, C: int, S: int, solved_for: str) -> PlanRow:
    m = S * C
    conn = _mixer_connections(S, C, gamma, family)
    return PlanRow(
        family="mixer", channels=C, tokens=S, width=m, density_token=1.0 / C, density_channel=1.0 / S,
        density=omega / (gamma * m * m), connections=conn, rel_error=(conn - omega) / omega,
        solved_for=solved_for,
    )


def _solve_rounded(omega: float, gamma: float, given: int, given_name: str) -> int:
    other = tokens_for(omega, given, gamma) if given_name == "C" else channels_for(omega, given, gamma)
    n = round_half_up(other)
    if n < 1:
        need = min_omega(gamma, **({"channels": given} if given_name == "C" else {"tokens": given}))
        solved = "S" if given_name == "C" else "C"
        raise ValueError(
            f"Ω = {omega:g} is too small for {given_name} = {given} at γ = {gamma:g}: it gives "
            f"{solved} = {other:.3f} < 1; lower {given_name} or raise Ω to at least {math.ceil(need)} "
            f"(= γ({given_name} + {given_name}²)/2)"
        )
    return n


def _default_channels(omega: float, gamma: float) -> list[int]:
    """Powers of two for C whose partner S is at least 4 (and C >= 4); all powers of two with
    S >= 1 when Ω is too small for that."""
    picks, fallback = [], []
    c = 1
    while True:
        s = round_half_up(tokens_for(omega, c, gamma))
        if s < 1:
            break
        fallback.append(c)
        if c >= 4 and s >= 4:
            picks.append(c)
        c *= 2
    return picks or fallback


def plan_budget(
    omega: float | str,
    gamma: float = 1.0,
    family: Family = "s_mixer",
    channels: Sequence[int] | None = None,
    tokens: Sequence[int] | None = None,
    symmetric: bool = False,
    densities: Sequence[float] | None = None,
) -> BudgetPlan:
    """Plan models with Ω connections per layer (docs/science.md §3).

    Mixer families (``s_mixer``: γ = 1; ``mlp_mixer``): for each C in ``channels`` solve
    S = (sqrt(C² + 8Ω/(γC)) − C)/2 and round it (or, with ``tokens``, solve for C); with
    ``symmetric`` add every pair with S and C swapped. With neither given, C runs over powers of
    two. ``densities`` adds SW-MLP rows with m = round(sqrt(Ω/(γp))) for comparison.

    ``sw_mlp``: one row per density p (default p = 2^-n, n = 0..8).

    Mixer rows are sorted by C (by S when ``tokens`` are enumerated), SW-MLP rows by width.
    >>> plan_budget(2**18, channels=[16, 32, 48], symmetric=True).pairs()
    [(16, 173), (32, 113), (48, 83), (83, 48), (113, 32), (173, 16)]
    """
    if isinstance(omega, str):
        omega = parse_omega(omega)
    om = _check_omega(omega)
    g = _check_gamma(gamma)
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    if family == "s_mixer" and g != 1.0:
        raise ValueError(f"the S-Mixer has γ = 1 (got gamma={gamma}); use family='mlp_mixer' for γ != 1")
    if channels is not None and tokens is not None:
        raise ValueError("give channels or tokens, not both (the other is solved from Ω)")
    if om < g:
        raise ValueError(
            f"Ω = {om:g} is too small: the smallest model (S = C = 1) needs Ω >= γ = {g:g}"
        )
    omega_out: int | float = int(om) if om.is_integer() else om
    plan = BudgetPlan(omega=omega_out, gamma=g, family=family)

    dens = None
    if densities is not None:
        dens = [_check_density(p) for p in densities]
        if not dens:
            raise ValueError("densities: give at least one value in (0, 1]")

    if family == "sw_mlp":
        if channels is not None or tokens is not None or symmetric:
            raise ValueError("an SW-MLP has no (S, C) pair; give densities (p) instead of channels/tokens")
        if dens is None:
            dens = [2.0 ** -n for n in range(9)]
        plan.rows = _sw_rows(om, g, dens)
        return plan

    rows: dict[tuple[int, int], PlanRow] = {}
    if tokens is not None:
        for S in _as_int_list(tokens, "tokens"):
            C = _solve_rounded(om, g, S, "S")
            rows.setdefault((C, S), _mixer_row(om, g, family, C, S, "C"))
    else:
        chans = _as_int_list(channels, "channels") if channels is not None else _default_channels(om, g)
        for C in chans:
            S = _solve_rounded(om, g, C, "C")
            rows.setdefault((C, S), _mixer_row(om, g, family, C, S, "S"))
    if symmetric:
        for (C, S) in list(rows):
            rows.setdefault((S, C), _mixer_row(om, g, family, S, C, "swap"))
    by_tokens = tokens is not None
    plan.rows = sorted(rows.values(), key=lambda r: (r.tokens, r.channels) if by_tokens else (r.channels, r.tokens))
    if dens is not None:
        plan.rows += _sw_rows(om, g, dens)

    size = optimal_size(om, g)
    n = max(1, round_half_up(size))
    conn = _mixer_connections(n, n, g, family)
    plan.optimum = Optimum(
        size=size, width=max_width(om, g), density=om / (g * max_width(om, g) ** 2),
        channels=n, tokens=n, int_width=n * n, connections=conn, rel_error=(conn - om) / om,
    )
    plan.width_bounds = width_bounds(om, g)
    return plan


def _sw_rows(omega: float, gamma: float, densities: Sequence[float]) -> list[PlanRow]:
    rows = []
    for p in densities:
        m_real = sw_mlp_width(omega, p, gamma)
        m = round_half_up(m_real)
        if m < 1:
            raise ValueError(f"Ω = {omega:g} is too small for density p = {p:g}: raise Ω to at least {gamma * p:g}")
        conn = p * gamma * m * m
        rows.append(PlanRow(
            family="sw_mlp", channels=None, tokens=None, width=m, density_token=None, density_channel=None,
            density=p, connections=conn, rel_error=(conn - omega) / omega, solved_for="m",
        ))
    return sorted(rows, key=lambda r: r.width)
