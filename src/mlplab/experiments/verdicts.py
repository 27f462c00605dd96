"""The statistical rules that decide a published claim from the runs of several seeds.

Pure functions on result tables (per-seed numbers in, a :class:`Verdict` out); no I/O, no
knowledge of experiments. Every rule decides at a **two-sided 5% level**: the claimed direction
and its opposite are each tested one-sided at ``TAIL`` = 2.5% (docs/science.md, "What a verdict
is"), so under the null a rule is decisive in at most 5% of cases (``tests/experiments/
test_verdict_null.py`` simulates it), and the interval a verdict prints is the one that matches
its decision: a HELD "a < b" has a 95% interval entirely below 0, an UNDECIDED one may hold 0.

- fewer than ``MIN_SEEDS`` seeds (paired across the points compared) → UNDECIDED without a test;
- the claimed direction significant at ``TAIL`` → HELD;
- the opposite direction significant at ``TAIL`` → DID NOT HOLD;
- otherwise → UNDECIDED (the data cannot tell, whichever way the means lean).

A claim made of several parts that must all hold (the target lowest of several groups; a minimum
between two bounds) is an *intersection–union* test: HELD when every part rejects at ``TAIL``,
which needs no correction; its opposite (some part reversed) is a union, Bonferroni-corrected
over the k parts (each reverse test at ``TAIL / k``, its interval at 1 − ``ALPHA`` / k).

Rules:

- :func:`compare`: "a < b" — paired t-test on the per-seed differences a − b.
- :func:`trend`: "y falls (or rises) with x" — a t-test on the per-seed least-squares slopes.
- :func:`noninferior`: "a − b < margin" (a not worse by more than a margin; also "a gain below a
  margin": non-superiority); :func:`equivalent` (TOST): "|a − b| < margin".
- :func:`lowest_of` / :func:`worst_of`: "the target is the lowest (highest) of several groups".
- :func:`optimum_within`: "the minimum (maximum) of y lies between lo and hi" — per seed a
  parabola in x, its slopes at lo and at hi.
- :func:`exponent_vs_foil`: "the exponent is on the published side of the foil the paper argues
  against" — a bootstrap interval that excludes the foil.
- :func:`paired_ratio`: "time A / time B is above (below) a bound" — interleaved pairs, the
  median ratio with a distribution-free interval from order statistics.
- :func:`deterministic`: an exact computation against a tolerance (identities, no seeds).

Power (:func:`detectable_effect`, :func:`seeds_needed`): every verdict from a t-test keeps the
spread of the quantity it tested, from which an UNDECIDED says the smallest effect its seeds could
have detected at 80% power and the seeds that would detect a given effect.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from typing import Mapping, Sequence

import numpy as np

__all__ = ["ALPHA", "TAIL", "MIN_SEEDS", "MIN_PAIRS", "POWER", "Verdict", "paired_t", "benjamini_hochberg",
           "compare", "trend", "noninferior", "equivalent", "lowest_of", "worst_of", "optimum_within",
           "exponent_vs_foil", "paired_ratio", "median_interval", "all_of", "deterministic", "detectable_effect",
           "seeds_needed", "verdict_word", "KINDS"]

ALPHA = 0.05  # two-sided level of every decision
TAIL = ALPHA / 2  # each direction's one-sided level
MIN_SEEDS = 3  # fewer paired seeds than this: UNDECIDED without a test
MIN_PAIRS = 20  # interleaved timing pairs a ratio needs before it decides
RATIO = "×"  # the unit of a ratio effect: printed unsigned, with the unit once
POWER = 0.80  # the power at which an UNDECIDED states its detectable effect
BOOTSTRAP = 2000  # resamples for a bootstrap interval

WORDS = {True: "HELD", False: "DID NOT HOLD", None: "UNDECIDED"}
KINDS = ("test", "interval", "deterministic")  # a test across seeds; an interval of measurements; an exact computation


def verdict_word(held: bool | None) -> str:
    return WORDS[held]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A decision with its evidence: the statistic, the one-sided p-values of the claim and of its
    opposite, the effect (in the units of the metric, e.g. points of test error) with the
    interval that matches the decision (``level``), the seeds, and the spread of the per-seed
    quantity tested (for power)."""

    held: bool | None
    statistic: str = ""  # e.g. "paired t (df = 2)"
    value: float = float("nan")  # the statistic
    p_claim: float = float("nan")  # one-sided p of the claimed direction (the largest over the parts of an IUT)
    p_against: float = float("nan")  # one-sided p of the opposite (Bonferroni-adjusted over parts)
    effect: float = float("nan")
    effect_name: str = ""
    interval: tuple[float, float] | None = None
    level: float = 1 - ALPHA  # confidence of ``interval``
    n: int = 0  # seeds (or measurements, ``n_of``)
    spread: float = float("nan")  # sd of the per-seed quantity the deciding test is on
    detail: str = ""
    extra: dict = field(default_factory=dict)
    unit: str = ""  # of the effect and its interval, e.g. "points of test error", "×"
    kind: str = "test"  # one of KINDS
    n_of: str = "seed"  # what n counts (seeds; interleaved pairs; runs of a bootstrap)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Verdict kind must be one of {', '.join(KINDS)}, not {self.kind!r}")

    @property
    def word(self) -> str:
        return verdict_word(self.held)

    @property
    def p(self) -> float:
        """The one-sided p that decided: the claim's, or the opposite's for DID NOT HOLD."""
        return self.p_against if self.held is False else self.p_claim

    @property
    def p_two_sided(self) -> float:
        """The smallest two-sided level at which this verdict would be decisive either way."""
        ps = [p for p in (self.p_claim, self.p_against) if math.isfinite(p)]
        return min(1.0, 2 * min(ps)) if ps else float("nan")

    def summary(self) -> str:
        """One line: statistic, p, effect [interval], n, and the detail."""
        parts = []
        u = f" {self.unit}" if self.unit else ""
        if self.statistic and self.kind == "test":
            parts.append(f"{self.statistic} = {_g(self.value)}")
        elif self.statistic:
            parts.append(self.statistic)
        if math.isfinite(self.p):
            parts.append(f"p = {_p(self.p)} one-sided (decides at {TAIL:g} each way)")
        if self.effect_name and self.unit == RATIO:  # a ratio: unsigned, the unit once ("244× [95% CI 238, 248]")
            e = f"{self.effect_name} {_g(self.effect, signed=False)}{RATIO}"
            if self.interval is not None:
                lo, hi = (_g(x, signed=False) for x in self.interval)
                e += f" [{100 * self.level:.3g}% CI {lo}, {hi}]"
            parts.append(e)
        elif self.effect_name:
            e = f"{self.effect_name} {_g(self.effect)}{u}"
            if self.interval is not None:
                e += f" [{100 * self.level:.3g}% CI {_g(self.interval[0])}, {_g(self.interval[1])}]{u}"
            parts.append(e)
        if self.kind == "deterministic":
            parts.append("deterministic computation: no seeds needed")
        else:
            parts.append(f"n = {self.n} {self.n_of}{'s' if self.n != 1 else ''}")
        s = "; ".join(parts)
        return s + (f" — {self.detail}" if self.detail else "")

    def to_dict(self) -> dict:
        return {"held": self.held, "verdict": self.word, "statistic": self.statistic, "value": _num(self.value),
                "p": _num(self.p), "p_claim": _num(self.p_claim), "p_against": _num(self.p_against),
                "p_two_sided": _num(self.p_two_sided), "effect": _num(self.effect), "effect_name": self.effect_name,
                "interval": list(self.interval) if self.interval else None, "level": self.level, "n": self.n,
                "spread": _num(self.spread), "detail": self.detail, "unit": self.unit, "kind": self.kind,
                **{k: v for k, v in self.extra.items()}}


def _num(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _g(x: float, signed: bool = True) -> str:
    """A statistic in 3 significant digits (4 from 1000 up), signed unless ``signed`` is False."""
    if not math.isfinite(x):
        return "–" if math.isnan(x) else ("+∞" if x > 0 else "−∞")
    sign = "+" if signed else ""
    return f"{x:{sign}.3g}" if abs(x) < 1000 else f"{x:{sign}.4g}"


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else "< 1e-4"


def _decide(p_claim: float, p_against: float) -> bool | None:
    """HELD when the claim rejects at TAIL, DID NOT HOLD when its opposite does (each already
    adjusted by the caller where several parts decide), else UNDECIDED."""
    if p_claim < TAIL:
        return True
    if p_against < TAIL:
        return False
    return None


def _mean(d: Sequence[float]) -> float:
    return float(np.mean(d)) if len(d) else float("nan")


def _sd(d: Sequence[float]) -> float:
    return float(np.std(d, ddof=1)) if len(d) > 1 else float("nan")


# ----------------------------------------------------------------------------------- the tests


def paired_t(d: Sequence[float], level: float = 1 - ALPHA) -> tuple[float, float, float, tuple[float, float]]:
    """One-sample t-test of the per-seed differences ``d`` against 0.

    Returns (t, p_less, p_greater, the two-sided ``level`` interval of the mean). Zero spread:
    t = ±inf (p 0 or 1) for a nonzero mean, t = 0 (p = 1 both ways) for a zero mean."""
    from scipy.stats import t as student

    d = np.asarray(d, dtype=float)
    n = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if sd == 0.0:
        if mean == 0.0:
            return 0.0, 1.0, 1.0, (0.0, 0.0)
        t = math.copysign(math.inf, mean)
        return t, float(mean > 0), float(mean < 0), (mean, mean)
    se = sd / math.sqrt(n)
    t = mean / se
    q = float(student.ppf(1 - (1 - level) / 2, n - 1))
    return t, float(student.cdf(t, n - 1)), float(student.sf(t, n - 1)), (mean - q * se, mean + q * se)


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (same order as given): rejecting where adjusted < q
    controls the false discovery rate at q over the family (the summary across experiments)."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p)
    ranked = p[order] * m / np.arange(1, m + 1)
    ranked = np.minimum.accumulate(ranked[::-1])[::-1]
    adj = np.empty_like(p)
    adj[order] = np.minimum(ranked, 1.0)
    return [float(x) for x in adj]


def _paired(a: Mapping[int, float], b: Mapping[int, float]) -> list[int]:
    """Seeds with a finite value on both sides, sorted."""
    return sorted(s for s in a if s in b and math.isfinite(a[s]) and math.isfinite(b[s]))


def _untested(what: str, d: Sequence[float], n: int, unit: str, why: str = "") -> Verdict:
    return Verdict(held=None, effect=_mean(d), effect_name=what, n=n, spread=_sd(d),
                   detail=why or f"fewer than {MIN_SEEDS} paired seeds: no test", unit=unit)


def compare(a: Mapping[int, float], b: Mapping[int, float], *, what: str = "a − b", unit: str = "") -> Verdict:
    """Claim "a < b" (e.g. the wide Mixer's error below the narrow one's), seed-paired.

    ``a``, ``b``: seed → value. Paired t-test on a − b: HELD if mean(a − b) < 0 at ``TAIL``, DID
    NOT HOLD if > 0 at ``TAIL``, else UNDECIDED; the 95% interval of mean(a − b) lies below 0
    exactly when HELD and above 0 exactly when DID NOT HOLD."""
    seeds = _paired(a, b)
    d = [a[s] - b[s] for s in seeds]
    if len(seeds) < MIN_SEEDS:
        return _untested(f"mean {what}", d, len(seeds), unit)
    t, p_less, p_greater, ci = paired_t(d)
    return Verdict(held=_decide(p_less, p_greater), statistic=f"paired t (df = {len(seeds) - 1})", value=t,
                   p_claim=p_less, p_against=p_greater, effect=_mean(d), effect_name=f"mean {what}", interval=ci,
                   n=len(seeds), spread=_sd(d), unit=unit)


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc * xc).sum())


def trend(x: Sequence[float], y_by_seed: Mapping[int, Sequence[float]], *, sign: int = -1,
          log_x: bool = True, what: str = "slope", unit: str = "") -> Verdict:
    """Claim "y falls with x" (``sign=-1``) or "rises" (``sign=+1``), across seeds.

    ``x``: the points (≥ 3 distinct); ``y_by_seed``: seed → the values at those points (NaN for a
    missing run; a seed needs ≥ 3 finite points). Per seed: the least-squares slope of y against
    log2 x (x when ``log_x`` is false) and Spearman's ρ. A t-test on the slopes: HELD if
    sign·slope > 0 at ``TAIL``, DID NOT HOLD if sign·slope < 0 at ``TAIL``, else UNDECIDED."""
    from scipy.stats import spearmanr

    xa = np.asarray(x, dtype=float)
    if log_x:
        xa = np.log2(xa)
    slopes, rhos = [], []
    for s in sorted(y_by_seed):
        y = np.asarray(y_by_seed[s], dtype=float)
        ok = np.isfinite(y)
        if ok.sum() < 3 or len(set(xa[ok])) < 3:
            continue
        slopes.append(_slope(xa[ok], y[ok]))
        rhos.append(float(spearmanr(xa[ok], y[ok]).statistic) if np.ptp(y[ok]) > 0 else 0.0)
    name = f"mean {what} per doubling" if log_x else f"mean {what}"
    rho_txt = f"Spearman ρ per seed {', '.join(f'{r:+.2f}' for r in rhos)}" if rhos else "no seed with ≥ 3 points"
    if len(slopes) < MIN_SEEDS:
        return _untested(name, slopes, len(slopes), unit,
                         f"fewer than {MIN_SEEDS} seeds with ≥ 3 points: no test; {rho_txt}")
    t, p_less, p_greater, ci = paired_t(slopes)
    p_claim, p_against = (p_less, p_greater) if sign < 0 else (p_greater, p_less)
    return Verdict(held=_decide(p_claim, p_against), statistic=f"t of per-seed slopes (df = {len(slopes) - 1})",
                   value=t, p_claim=p_claim, p_against=p_against, effect=_mean(slopes), effect_name=name, interval=ci,
                   n=len(slopes), spread=_sd(slopes), detail=rho_txt, extra={"rho_mean": _mean(rhos)}, unit=unit)


def noninferior(a: Mapping[int, float], b: Mapping[int, float] | float, margin: float, *,
                what: str = "a − b", unit: str = "") -> Verdict:
    """Claim "a − b < margin", seed-paired: a is not worse (higher) than b by more than
    ``margin`` — or, for a score where higher is better, a does not gain more than ``margin``
    over b (non-superiority: "did not help").

    ``b`` may be a constant (e.g. the predicted c_γ). A paired t-test of the per-seed a − b
    against ``margin``: HELD if mean(a − b) < margin at ``TAIL`` (the 95% interval ends below the
    margin), DID NOT HOLD if mean(a − b) > margin at ``TAIL``, else UNDECIDED."""
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ValueError(f"noninferior needs a finite margin ≥ 0, got {margin!r}")
    bb = {s: float(b) for s in a} if isinstance(b, (int, float)) else b
    seeds = _paired(a, bb)
    d = [a[s] - bb[s] for s in seeds]
    name = f"mean {what} (margin {margin:g})"
    if len(seeds) < MIN_SEEDS:
        return _untested(name, d, len(seeds), unit)
    t, p_less, p_greater, _ = paired_t([x - margin for x in d])
    ci = paired_t(d)[3]
    return Verdict(held=_decide(p_less, p_greater), statistic=f"paired t of {what} − margin (df = {len(seeds) - 1})",
                   value=t, p_claim=p_less, p_against=p_greater, effect=_mean(d), effect_name=name, interval=ci,
                   n=len(seeds), spread=_sd(d), extra={"margin": margin}, unit=unit)


def equivalent(a: Mapping[int, float], b: Mapping[int, float], margin: float, *, what: str = "a − b",
               unit: str = "") -> Verdict:
    """Claim "|a − b| < margin", seed-paired: two one-sided tests (TOST) at ``TAIL`` each, i.e.
    HELD exactly when the 95% interval of mean(a − b) lies inside ±margin (an intersection–union
    test: no correction); DID NOT HOLD when the interval lies wholly beyond +margin or below
    −margin; else UNDECIDED (in particular: too few seeds, or an interval wider than the margin)."""
    up = noninferior(a, b, margin, what=what, unit=unit)  # a − b < +margin
    down = noninferior(b, a, margin, what=what, unit=unit)  # b − a < +margin
    name = f"mean {what} (equivalence margin ±{margin:g})"
    if up.n < MIN_SEEDS:
        return Verdict(held=None, effect=up.effect, effect_name=name, n=up.n, spread=up.spread,
                       detail=f"fewer than {MIN_SEEDS} paired seeds: no test", unit=unit)
    p_claim = max(up.p_claim, down.p_claim)
    p_against = min(up.p_against, down.p_against)  # only one of the two can be true: no correction
    return Verdict(held=_decide(p_claim, p_against), statistic=f"TOST, two paired t-tests (df = {up.n - 1})",
                   value=up.value if up.p_claim >= down.p_claim else down.value, p_claim=p_claim, p_against=p_against,
                   effect=up.effect, effect_name=name, interval=up.interval, n=up.n, spread=up.spread,
                   detail=f"p(a − b < +{margin:g}) = {_p(up.p_claim)}, p(a − b > −{margin:g}) = {_p(down.p_claim)}",
                   extra={"margin": margin, "equivalence": True}, unit=unit)


def _all_parts(parts: Mapping[str, tuple[Sequence[float], str, float]], *, statistic: str, what: str,
               unit: str) -> Verdict:
    """The intersection–union decision over named parts: each part is (per-seed values whose mean
    the claim says is < 0, its label, the sign that shows it — e.g. −1 to show an advantage).
    HELD when every part rejects at ``TAIL``; DID NOT HOLD when some part's opposite rejects at
    ``TAIL / k``; the effect and interval shown are the weakest part's, at 95% (HELD, UNDECIDED),
    or the reversed part's at 1 − ALPHA / k (DID NOT HOLD)."""
    k = len(parts)
    tests = {name: paired_t(d) for name, (d, _, _) in parts.items()}
    weakest = max(tests, key=lambda name: tests[name][1])  # largest p of the claim side
    reversed_ = min(tests, key=lambda name: tests[name][2])
    p_claim = tests[weakest][1]
    p_against = min(1.0, k * tests[reversed_][2])
    held = _decide(p_claim, p_against)
    name = reversed_ if held is False else weakest
    d, label, sg = parts[name]
    level = 1 - ALPHA / k if held is False else 1 - ALPHA
    t, _, _, ci = paired_t(d, level)
    interval = (ci[0], ci[1]) if sg > 0 else (-ci[1], -ci[0])
    detail = "; ".join(f"{lab}: {g * _mean(dd):+.3g} (p {_p(tests[n][1])}, reverse {_p(tests[n][2])})"
                       for n, (dd, lab, g) in parts.items())
    return Verdict(held=held, statistic=f"{statistic}, deciding: {label} (df = {len(d) - 1})", value=sg * t,
                   p_claim=p_claim, p_against=p_against, effect=sg * _mean(d), effect_name=f"{what}, {label}",
                   interval=interval, level=level, n=len(d), spread=_sd(d), detail=detail,
                   extra={"deciding": name, "parts": k}, unit=unit)


def lowest_of(groups: Mapping[str, Mapping[int, float]], target: str, *, higher: bool = False,
              unit: str = "") -> Verdict:
    """Claim "group ``target`` is the lowest of ``groups``" (``higher``: the highest), seed-paired.

    ``groups``: name → {seed → value}. A paired t-test of the target against every other group,
    an intersection–union test: HELD when the target beats each one at ``TAIL``; DID NOT HOLD when
    some group beats the target at ``TAIL / k`` (Bonferroni over the k others); else UNDECIDED;
    fewer than 3 paired seeds in any comparison: UNDECIDED. The effect is the target's margin over
    the group it beats least (positive when the target is the better)."""
    if target not in groups:
        raise ValueError(f"lowest_of: target {target!r} is not one of the groups {', '.join(map(str, groups))}")
    t0 = groups[target]
    others = [k for k in groups if k != target]
    if not others:
        raise ValueError("lowest_of needs at least one group besides the target")
    sign = -1.0 if higher else 1.0  # the claim: sign·(target − other) < 0 for every other group
    n = min(len(_paired(t0, groups[k])) for k in others)
    if n < MIN_SEEDS:
        return Verdict(held=None, n=n, detail=f"fewer than {MIN_SEEDS} paired seeds for some comparison: no test",
                       unit=unit)
    parts = {k: ([sign * (t0[s] - groups[k][s]) for s in _paired(t0, groups[k])], f"vs {k}", -1.0) for k in others}
    word = "highest" if higher else "lowest"
    return _all_parts(parts, statistic=f"{target} the {word}: paired t against each other group",
                      what=f"margin of {target}", unit=unit)


def worst_of(target: Mapping[int, float], others: Mapping[str, Mapping[int, float]], *, name: str = "target",
             unit: str = "") -> Verdict:
    """Claim "``target`` (called ``name``) is higher than every one of ``others``" (e.g. RP at
    block 0 hurts most): :func:`lowest_of` read the other way (``higher=True``)."""
    if name in others:
        raise ValueError(f"worst_of: the target's name {name!r} is also one of the others")
    return lowest_of({name: target, **others}, name, higher=True, unit=unit)


def _parabola_slopes(x: np.ndarray, y: np.ndarray, at: Sequence[float]) -> list[float]:
    c2, c1, _ = np.polyfit(x, y, 2)
    return [float(c1 + 2 * c2 * a) for a in at]


def _vertex(x: np.ndarray, y: np.ndarray) -> float:
    """x at the extremum of the least-squares parabola through (x, y); NaN for a line, i.e. when
    the curvature over x's range is at rounding level beside y's size (the fit's c2 of a line is
    ~1e-16, not 0, and would put the vertex at ~1e15)."""
    mid, half = (x.max() + x.min()) / 2, (x.max() - x.min()) / 2
    c2, c1, _ = np.polyfit((x - mid) / half, y, 2)  # x scaled to [-1, 1]
    if not abs(c2) > 1e-9 * np.abs(y).max():
        return float("nan")
    return float(mid - half * c1 / (2 * c2))


def optimum_within(x: Sequence[float], y_by_seed: Mapping[int, Sequence[float]], lo: float, hi: float, *,
                   maximum: bool = False, what: str = "optimum", unit: str = "", x_name: str = "x") -> Verdict:
    """Claim "the minimum of y (``maximum``: the maximum) lies between ``lo`` and ``hi``" — with lo
    and hi the ends of the sweep: an interior optimum; with a window around a point: the optimum
    near that point.

    ``x``: the points, in the coordinate the optimum is sought in (e.g. log(S/C)), ≥ 3 distinct;
    ``y_by_seed``: seed → values (NaN: missing; a seed needs ≥ 3 finite points). Per seed, a
    least-squares parabola y ≈ c0 + c1·x + c2·x² and its slopes at lo and hi. For a minimum the
    claim is slope(lo) < 0 and slope(hi) > 0 (the curve falls into the window and rises out of
    it): an intersection–union test of two t-tests at ``TAIL``. DID NOT HOLD: the slope at lo is
    significantly positive (the optimum lies below lo) or at hi significantly negative (above
    hi), each at ``TAIL / 2``. The seed-mean parabola's vertex is shown, not tested."""
    xa = np.asarray(x, dtype=float)
    if len(set(np.round(xa, 12))) < 3:
        return Verdict(held=None, n=0, detail="fewer than 3 distinct points: no parabola", unit=unit)
    if not (xa.min() - 1e-12 <= lo < hi <= xa.max() + 1e-12):
        raise ValueError(f"optimum_within: need min x ≤ lo < hi ≤ max x, got lo={lo}, hi={hi} for x in "
                         f"[{xa.min()}, {xa.max()}]")
    s_lo, s_hi, seeds = [], [], []
    for s in sorted(y_by_seed):
        y = np.asarray(y_by_seed[s], dtype=float)
        ok = np.isfinite(y)
        if ok.sum() < 3 or len(set(xa[ok])) < 3:
            continue
        a, b = _parabola_slopes(xa[ok], y[ok], (lo, hi))
        s_lo.append(a)
        s_hi.append(b)
        seeds.append(s)
    Y = np.array([list(y_by_seed[s]) for s in seeds], dtype=float) if seeds else np.full((1, xa.size), np.nan)
    mean_curve = np.nanmean(Y, axis=0)
    ok = np.isfinite(mean_curve)
    vertex = _vertex(xa[ok], mean_curve[ok]) if ok.sum() >= 3 else float("nan")
    where = f"{x_name} in [{lo:.3g}, {hi:.3g}]; the seed-mean parabola's vertex at {x_name} = {vertex:.3g}"
    if len(seeds) < MIN_SEEDS:
        return Verdict(held=None, n=len(seeds),
                       detail=f"fewer than {MIN_SEEDS} seeds with ≥ 3 points: no test; {where}", unit=unit,
                       extra={"vertex": _num(vertex)})
    # each part as per-seed values whose mean the claim says is < 0, and the sign that shows the slope
    up = -1.0 if maximum else 1.0  # a minimum: slope(lo) < 0 and slope(hi) > 0; a maximum: the reverse
    sides = {"lo": (up, s_lo, lo, "<" if not maximum else ">"), "hi": (-up, s_hi, hi, ">" if not maximum else "<")}
    parts = {k: ([sg * v for v in sl], f"slope at {x_name} = {at:.3g} (claim {op} 0)", sg)
             for k, (sg, sl, at, op) in sides.items()}
    kind = "maximum" if maximum else "minimum"
    v = _all_parts(parts, statistic=f"{kind} between the bounds: t-tests of the per-seed parabola's slopes",
                   what=what, unit=unit)
    return _replace(v, detail=f"{where}; {v.detail}", extra={**v.extra, "vertex": _num(vertex), "lo": lo, "hi": hi})


def exponent_vs_foil(estimate: float, interval: tuple[float, float], published: float, foil: float, *,
                     what: str, runs: int, of: str = "run") -> Verdict:
    """Decide "the exponent lies on the published value's side of ``foil``" — the value of the law
    the paper argues against (e.g. 0.5, an equal split of compute between parameters and
    examples) — from a point estimate and its bootstrap 95% interval over ``runs``: HELD when the
    interval excludes the foil on the published side, DID NOT HOLD when it excludes it on the
    other side, UNDECIDED when it holds the foil. Whether the published value lies inside the
    interval is reported, not tested."""
    lo, hi = interval
    if published == foil:
        raise ValueError("exponent_vs_foil: the published value and the foil must differ")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Verdict(held=None, effect=estimate, effect_name=what, n=runs,
                       detail=f"no bootstrap interval from {runs} {of}s", kind="interval", n_of=of)
    below = published < foil
    if (hi < foil) if below else (lo > foil):
        held: bool | None = True
    elif (lo > foil) if below else (hi < foil):
        held = False
    else:
        held = None
    side = "below" if below else "above"
    detail = (f"claim: {side} the foil {foil:g}; the interval {'excludes' if held is not None else 'holds'} it; "
              f"published {published:g} {'inside' if lo <= published <= hi else 'outside'} the interval; bootstrap "
              f"over {runs} {of}s")
    return Verdict(held=held, statistic=f"bootstrap over {of}s", effect=estimate, effect_name=what, interval=(lo, hi),
                   n=runs, detail=detail, kind="interval", n_of=of, extra={"foil": foil, "published": published})


def median_interval(x: Sequence[float], level: float = 1 - ALPHA) -> tuple[float, float]:
    """A distribution-free interval for the median of ``x`` from its order statistics: [x_(k),
    x_(n−k+1)] with k the largest rank whose binomial tail P(Bin(n, ½) < k) ≤ (1 − level)/2
    (coverage ≥ ``level``). (−inf, +inf) when n is too small for any such k."""
    from scipy.stats import binom

    xs = np.sort(np.asarray([v for v in x if math.isfinite(v)], dtype=float))
    n = xs.size
    tail = (1 - level) / 2
    k = 0
    while k + 1 <= n // 2 and binom.cdf(k, n, 0.5) <= tail:  # P(Bin < k + 1) = cdf(k)
        k += 1
    if k == 0:
        return -math.inf, math.inf
    return float(xs[k - 1]), float(xs[n - k])


def paired_ratio(a: Sequence[float], b: Sequence[float], *, above: float | None = None, below: float | None = None,
                 what: str = "a / b", unit: str = RATIO) -> Verdict:
    """Claim "a / b is above ``above``" (or "below ``below``"; give one) for timings taken
    interleaved (a_i and b_i measured one after the other, i = 1 … n), e.g. the SW-MLP's time per
    step over the Mixer's above 2.

    The effect is the median of the per-pair ratios a_i / b_i — each pair saw the same machine
    load — and its 95% interval comes from the ratios' order statistics (distribution-free, valid
    for a median of few values). HELD when the interval lies on the claimed side of the bound, DID
    NOT HOLD when on the other side, else UNDECIDED; fewer than ``MIN_PAIRS`` pairs: UNDECIDED."""
    if (above is None) == (below is None):
        raise ValueError("paired_ratio needs exactly one of above= or below=")
    if len(a) != len(b):
        raise ValueError(f"paired_ratio needs interleaved pairs: {len(a)} and {len(b)} measurements")
    r = [x / y for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y) and y > 0]
    bound = above if above is not None else below
    name = f"median {what} (claim {'>' if above is not None else '<'} {bound:g})"
    est = float(np.median(r)) if r else float("nan")
    if len(r) < MIN_PAIRS:
        return Verdict(held=None, effect=est, effect_name=name, n=len(r), unit=unit, kind="interval", n_of="pair",
                       detail=f"fewer than {MIN_PAIRS} interleaved pairs: no interval")
    lo, hi = median_interval(r)
    if above is not None:
        held = True if lo > above else (False if hi < above else None)
    else:
        held = True if hi < below else (False if lo > below else None)
    return Verdict(held=held, statistic="median of interleaved ratios, order-statistic interval", value=est, effect=est,
                   effect_name=name, interval=(lo, hi), n=len(r), unit=unit, kind="interval", n_of="pair",
                   detail=f"{len(r)} interleaved pairs; ratios {min(r):.3g}–{max(r):.3g}",
                   extra={"bound": bound, "side": "above" if above is not None else "below", "ratios": r})


def deterministic(value: float, *, expected: float | None = None, at_least: float | None = None,
                  tol: float = 0.0, what: str = "value", unit: str = "", detail: str = "") -> Verdict:
    """An exact computation checked against a tolerance (no seeds, no test): ``|value −
    expected| ≤ tol`` (or ``value ≥ at_least − tol``; give one) → HELD, else DID NOT HOLD; a value
    that is not a finite number → UNDECIDED."""
    if (expected is None) == (at_least is None):
        raise ValueError("deterministic needs exactly one of expected= or at_least=")
    if not math.isfinite(value):
        return Verdict(held=None, statistic=f"{what}: no finite value", effect=value, detail=detail, unit=unit,
                       kind="deterministic")
    if expected is not None:
        held, rule = abs(value - expected) <= tol, f"needs |{what} − {expected:g}| ≤ {tol:.3g}"
    else:
        held, rule = value >= at_least - tol, f"needs {what} ≥ {at_least:g} − {tol:.3g}"
    u = f" {unit}" if unit else ""
    return Verdict(held=bool(held), statistic=f"{what} = {value:.6g}{u}; {rule}", value=value, effect=value,
                   detail=detail, extra={"tol": tol}, unit=unit, kind="deterministic")


# ----------------------------------------------------------------------------------- power


def _power(n: int, effect: float, spread: float) -> float:
    """Power of a two-sided t-test at ``ALPHA`` with n seeds against a true mean ``effect``."""
    from scipy.stats import nct
    from scipy.stats import t as student

    if n < 2 or not spread > 0:
        return float("nan")
    crit = float(student.ppf(1 - TAIL, n - 1))
    nc = abs(effect) * math.sqrt(n) / spread
    if nc > crit + 40:  # the noncentral t's tail is numerically 1 here (scipy returns NaN far out)
        return 1.0
    upper, lower = float(nct.sf(crit, n - 1, nc)), float(nct.cdf(-crit, n - 1, nc))
    if not (math.isfinite(upper) and math.isfinite(lower)):
        # scipy's noncentral t fails for some (df, nc), often in one tail only (the far lower
        # tail at df = 1): the normal approximation for the failed tail alone
        from scipy.stats import norm

        upper = upper if math.isfinite(upper) else float(norm.sf(crit - nc))
        lower = lower if math.isfinite(lower) else float(norm.cdf(-crit - nc))
    return upper + lower


def detectable_effect(spread: float, n: int, power: float = POWER) -> float:
    """The smallest |mean| a two-sided t-test at ``ALPHA`` over ``n`` seeds detects with
    probability ``power``, for per-seed values of sd ``spread`` (NaN when n < 2 or no spread)."""
    from scipy.optimize import brentq

    if n < 2 or not (math.isfinite(spread) and spread > 0):
        return float("nan")
    hi = spread
    while _power(n, hi, spread) < power:
        hi *= 2
    return float(brentq(lambda e: _power(n, e, spread) - power, 0.0, hi, xtol=spread * 1e-6))


def seeds_needed(effect: float, spread: float, power: float = POWER, max_n: int = 100_000) -> int | None:
    """The fewest seeds with which a two-sided t-test at ``ALPHA`` detects a true mean ``effect``
    with probability ``power`` (per-seed sd ``spread``); None when no effect or no spread is known,
    or more than ``max_n`` would be needed."""
    if not (math.isfinite(effect) and effect != 0 and math.isfinite(spread) and spread > 0):
        return None
    lo, hi = 2, 2
    while _power(hi, effect, spread) < power:
        lo, hi = hi, hi * 2
        if hi > max_n:
            return None
    while lo < hi:  # the smallest n in [lo, hi] with enough power
        mid = (lo + hi) // 2
        if _power(mid, effect, spread) >= power:
            hi = mid
        else:
            lo = mid + 1
    return int(lo)


# ----------------------------------------------------------------------------------- conjunctions


def _interval_at(v: Verdict, level: float) -> tuple[float, float] | None:
    """``v``'s interval at another ``level``: from the mean, spread and seeds of a t-based verdict,
    from the stored ratios of a :func:`paired_ratio` one."""
    if v.kind == "test" and v.n >= 2 and math.isfinite(v.spread):
        from scipy.stats import t as student

        q = float(student.ppf(1 - (1 - level) / 2, v.n - 1)) * v.spread / math.sqrt(v.n)
        return v.effect - q, v.effect + q
    if "ratios" in v.extra:
        return median_interval(v.extra["ratios"], level)
    return v.interval


def all_of(verdicts: Mapping[str, Verdict], *, what: str = "every part", unit: str = "") -> Verdict:
    """Claim "it holds in every one of ``verdicts``" (per data size, per epoch budget, per
    reference model), an intersection–union test: HELD when every part is HELD at its own level
    (no correction needed); DID NOT HOLD when some part is reversed at ``TAIL / k`` (t-based parts)
    or its interval at 1 − ``ALPHA`` / k lies on the wrong side (interval parts); else UNDECIDED,
    and UNDECIDED without a test when some part had none. The statistics shown are the deciding
    part's: the weakest one's (HELD, UNDECIDED) or the reversed one's, with the matching interval."""
    if not verdicts:
        return Verdict(held=None, detail="nothing to test", unit=unit)
    names, k = list(verdicts), len(verdicts)
    words = "; ".join(f"{n}: {v.effect_name} {_g(v.effect)} {v.word}" for n, v in verdicts.items())
    untested = [n for n, v in verdicts.items() if v.interval is None and not math.isfinite(v.p_claim)]
    if untested:
        return Verdict(held=None, n=min(v.n for v in verdicts.values()), unit=unit,
                       detail=f"no test at {', '.join(untested)}; {words}", kind=verdicts[untested[0]].kind)
    level = 1 - ALPHA / k
    wide = {n: _interval_at(v, level) for n, v in verdicts.items()}
    if all(v.kind == "test" for v in verdicts.values()):
        p_claim = max(v.p_claim for v in verdicts.values())
        p_against = min(1.0, k * min(v.p_against for v in verdicts.values()))
        held = _decide(p_claim, p_against)
        deciding = (min(names, key=lambda n: verdicts[n].p_against) if held is False
                    else max(names, key=lambda n: verdicts[n].p_claim))
    else:
        def reversed_(n: str) -> bool:
            lo, hi = wide[n]
            bound, side = verdicts[n].extra.get("bound"), verdicts[n].extra.get("side")
            return bound is not None and ((hi < bound) if side == "above" else (lo > bound))
        rev = [n for n in names if reversed_(n)]
        held = False if rev else (True if all(verdicts[n].held for n in names) else None)
        p_claim, p_against = float("nan"), float("nan")
        deciding = rev[0] if rev else next((n for n in names if not verdicts[n].held), names[0])
    v = verdicts[deciding]
    interval, lev = (wide[deciding], level) if held is False else (v.interval, v.level)
    return _replace(v, held=held, p_claim=p_claim if math.isfinite(p_claim) else v.p_claim,
                    p_against=p_against if math.isfinite(p_against) else v.p_against, interval=interval, level=lev,
                    statistic=f"{what}: all {k} parts must hold; deciding: {deciding}; {v.statistic}",
                    detail=words, extra={**v.extra, "deciding": deciding, "parts": k})
