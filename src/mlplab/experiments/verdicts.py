"""The statistical rules that decide a published claim from the runs of several seeds.

Pure functions on result tables (per-seed numbers in, a :class:`Verdict` out); no I/O, no
knowledge of experiments. Every rule follows the same logic:

- fewer than ``MIN_SEEDS`` seeds (paired across the points compared) → UNDECIDED;
- the claim's direction significant at level ``ALPHA`` (one-sided, corrected where several
  tests decide together) → HELD;
- the opposite direction significant → DID NOT HOLD;
- otherwise → UNDECIDED (the data cannot tell, whichever way the means lean).

Rules:

- :func:`compare`: "a < b" — paired one-sided t-test on the per-seed differences a − b.
- :func:`trend`: "y falls (or rises) with x" — per seed, the least-squares slope of y against
  log2 x (and Spearman's ρ, shown); a one-sample t-test on the per-seed slopes.
- :func:`exponent_in_interval`: "the exponent is x" (Scaling MLPs' β_P = 0.35, β_N = 0.65) — a
  bootstrap 95% interval of the fitted exponent: outside it → DID NOT HOLD; inside it and the
  interval narrow enough to exclude the far-off values (``far``) → HELD; inside a wide interval
  that also covers a far-off value → UNDECIDED (thin evidence).
- :func:`interior_optimum`: "lowest near S ≈ C" — the S ≈ C point against each extreme of
  log(S/C), paired one-sided t-tests with Holm's correction (both must hold); also a quadratic fit
  in log(S/C) to the seed-mean curve with a bootstrap (over seeds) interval for its minimum.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

__all__ = ["ALPHA", "MIN_SEEDS", "Verdict", "paired_t", "holm", "holm_decision", "compare", "trend", "interior_optimum",
           "quadratic_minimum", "verdict_word", "worst_of", "exponent_in_interval", "noninferior", "lowest_of",
           "best_is_interior", "ratio_interval", "deterministic", "KINDS"]

ALPHA = 0.05  # one-sided level of every test
MIN_SEEDS = 3  # fewer paired seeds than this: UNDECIDED without a test
BOOTSTRAP = 2000  # resamples of the seeds for the interval of the minimum's location

WORDS = {True: "HELD", False: "DID NOT HOLD", None: "UNDECIDED"}
KINDS = ("test", "interval", "deterministic")  # a test across seeds; a bootstrap interval; an exact computation


def verdict_word(held: bool | None) -> str:
    return WORDS[held]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A decision with its evidence: the test statistic, the p-value that decided, the effect
    (in the units of the metric, e.g. points of test error) with a 95% interval, and the seeds."""

    held: bool | None
    statistic: str = ""  # e.g. "paired t (df = 2)"
    value: float = float("nan")  # the statistic
    p: float = float("nan")  # one-sided p-value (Holm-adjusted where several tests decide)
    effect: float = float("nan")
    effect_name: str = ""
    interval: tuple[float, float] | None = None  # 95% interval of the effect
    n: int = 0  # seeds
    detail: str = ""
    extra: dict = field(default_factory=dict)
    unit: str = ""  # of the effect and its interval, e.g. "points of test error", "s/step"
    kind: str = "test"  # one of KINDS
    n_of: str = "seed"  # what n counts (seeds; timed steps for a timing ratio; runs for a bootstrap over runs)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Verdict kind must be one of {', '.join(KINDS)}, not {self.kind!r}")

    @property
    def word(self) -> str:
        return verdict_word(self.held)

    def summary(self) -> str:
        """One line: statistic, p, effect [interval], n, and the detail."""
        parts = []
        u = f" {self.unit}" if self.unit else ""
        if self.statistic and self.kind == "test":
            parts.append(f"{self.statistic} = {_g(self.value)}")
        elif self.statistic:
            parts.append(self.statistic)
        if math.isfinite(self.p):
            parts.append(f"p = {_p(self.p)} (α = {ALPHA})")
        if self.effect_name:
            e = f"{self.effect_name} {_g(self.effect)}{u}"
            if self.interval is not None:
                e += f" [95% CI {_g(self.interval[0])}, {_g(self.interval[1])}]{u}"
            parts.append(e)
        if self.kind == "deterministic":
            parts.append("deterministic computation: no seeds needed")
        else:
            parts.append(f"n = {self.n} {self.n_of}{'s' if self.n != 1 else ''}")
        s = "; ".join(parts)
        return s + (f" — {self.detail}" if self.detail else "")

    def to_dict(self) -> dict:
        return {"held": self.held, "verdict": self.word, "statistic": self.statistic, "value": _num(self.value),
                "p": _num(self.p), "effect": _num(self.effect), "effect_name": self.effect_name,
                "interval": list(self.interval) if self.interval else None, "n": self.n, "detail": self.detail,
                "unit": self.unit, "kind": self.kind, **{k: v for k, v in self.extra.items()}}


def _num(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _g(x: float) -> str:
    if not math.isfinite(x):
        return "–" if math.isnan(x) else ("+∞" if x > 0 else "−∞")
    return f"{x:+.3g}" if abs(x) < 1000 else f"{x:+.4g}"


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else "< 1e-4"


# ----------------------------------------------------------------------------------- the tests


def paired_t(d: Sequence[float]) -> tuple[float, float, float, tuple[float, float]]:
    """One-sample t-test of the per-seed differences ``d`` against 0.

    Returns (t, p_less, p_greater, 95% interval of the mean). Zero spread: t = ±inf (p 0 or 1)
    for a nonzero mean, t = 0 (p = 1 both ways) for a zero mean."""
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
    q = float(student.ppf(0.975, n - 1))
    return t, float(student.cdf(t, n - 1)), float(student.sf(t, n - 1)), (mean - q * se, mean + q * se)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (same order as given): reject where adjusted < α."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p)
    adj = np.empty_like(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adj[i] = running
    return [float(x) for x in adj]


def holm_decision(p_claim: Sequence[float], p_against: Sequence[float]
                  ) -> tuple[list[float], list[float], bool | None, float]:
    """Several one-sided tests that decide a claim together (one per comparison), each with its
    reverse test. Holm-adjusted: HELD when every claim test rejects at α (the deciding p is the
    largest), DID NOT HOLD when some reverse test rejects (the smallest), else UNDECIDED (the
    largest claim p). Returns (claim p's Holm-adjusted, reverse p's Holm-adjusted, held, p)."""
    claim, against = holm(p_claim), holm(p_against)
    if max(claim) < ALPHA:
        return claim, against, True, max(claim)
    if min(against) < ALPHA:
        return claim, against, False, min(against)
    return claim, against, None, max(claim)


def _paired(a: Mapping[int, float], b: Mapping[int, float]) -> list[int]:
    """Seeds with a finite value on both sides, sorted."""
    return sorted(s for s in a if s in b and math.isfinite(a[s]) and math.isfinite(b[s]))


def _decide(p_claim: float, p_against: float) -> bool | None:
    if p_claim < ALPHA:
        return True
    if p_against < ALPHA:
        return False
    return None


def compare(a: Mapping[int, float], b: Mapping[int, float], *, what: str = "a − b", unit: str = "") -> Verdict:
    """Claim "a < b" (e.g. the wide Mixer's error below the narrow one's), seed-paired.

    ``a``, ``b``: seed → value. Paired one-sided t-test on a − b: HELD if mean(a − b) < 0 at
    level α, DID NOT HOLD if > 0 at level α, else UNDECIDED; fewer than 3 paired seeds: UNDECIDED."""
    seeds = _paired(a, b)
    d = [a[s] - b[s] for s in seeds]
    if len(seeds) < MIN_SEEDS:
        return Verdict(held=None, effect=float(np.mean(d)) if d else float("nan"), effect_name=f"mean {what}",
                       n=len(seeds), detail=f"fewer than {MIN_SEEDS} paired seeds: no test", unit=unit)
    t, p_less, p_greater, ci = paired_t(d)
    held = _decide(p_less, p_greater)
    return Verdict(held=held, statistic=f"paired t (df = {len(seeds) - 1})", value=t,
                   p=p_less if held is not False else p_greater, effect=float(np.mean(d)), effect_name=f"mean {what}",
                   interval=ci, n=len(seeds), extra={"p_claim": p_less, "p_against": p_greater}, unit=unit)


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    xc = x - x.mean()
    return float((xc * (y - y.mean())).sum() / (xc * xc).sum())


def trend(x: Sequence[float], y_by_seed: Mapping[int, Sequence[float]], *, sign: int = -1,
          log_x: bool = True, what: str = "slope", unit: str = "") -> Verdict:
    """Claim "y falls with x" (``sign=-1``) or "rises" (``sign=+1``), across seeds.

    ``x``: the points (≥ 3 distinct); ``y_by_seed``: seed → the values at those points (NaN for a
    missing run; a seed needs ≥ 3 finite points). Per seed: the least-squares slope of y against
    log2 x (x when ``log_x`` is false) and Spearman's ρ. One-sample t-test on the slopes: HELD if
    sign·slope > 0 at level α, DID NOT HOLD if sign·slope < 0 at level α, else UNDECIDED."""
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
    name = f"{what} per doubling" if log_x else what
    rho_txt = f"Spearman ρ per seed {', '.join(f'{r:+.2f}' for r in rhos)}" if rhos else "no seed with ≥ 3 points"
    if len(slopes) < MIN_SEEDS:
        return Verdict(held=None, effect=float(np.mean(slopes)) if slopes else float("nan"), effect_name=f"mean {name}",
                       n=len(slopes), detail=f"fewer than {MIN_SEEDS} seeds with ≥ 3 points: no test; {rho_txt}",
                       unit=unit)
    t, p_less, p_greater, ci = paired_t(slopes)
    p_claim, p_against = (p_less, p_greater) if sign < 0 else (p_greater, p_less)
    held = _decide(p_claim, p_against)
    return Verdict(held=held, statistic=f"t of per-seed slopes (df = {len(slopes) - 1})", value=t,
                   p=p_claim if held is not False else p_against, effect=float(np.mean(slopes)),
                   effect_name=f"mean {name}", interval=ci, n=len(slopes), detail=rho_txt, extra={"p_claim": p_claim, "p_against": p_against,
                                                       "rho_mean": float(np.mean(rhos))}, unit=unit)


def _quad_argmin(x: np.ndarray, y: np.ndarray) -> float:
    """x at the minimum of the least-squares parabola through (x, y), within [min x, max x]."""
    c2, c1, _ = np.polyfit(x, y, 2)
    lo, hi = float(x.min()), float(x.max())
    if c2 > 0:
        return float(min(hi, max(lo, -c1 / (2 * c2))))
    f = lambda v: c2 * v * v + c1 * v  # noqa: E731  concave or linear: the lower end
    return lo if f(lo) <= f(hi) else hi


def quadratic_minimum(x: Sequence[float], y_by_seed: Mapping[int, Sequence[float]], *,
                      resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, tuple[float, float]]:
    """Location of the minimum of a parabola fitted to the seed-mean curve y(x), and a 95%
    percentile bootstrap interval over seeds (resampled with replacement). Clipped to the range of x."""
    xa = np.asarray(x, dtype=float)
    Y = np.array([y_by_seed[s] for s in sorted(y_by_seed)], dtype=float)  # (seeds, points)
    est = _quad_argmin(xa, np.nanmean(Y, axis=0))
    rng = np.random.default_rng(seed)
    boots = [_quad_argmin(xa, np.nanmean(Y[rng.integers(0, len(Y), len(Y))], axis=0)) for _ in range(resamples)]
    return est, (float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5)))


def interior_optimum(S: Sequence[int], C: Sequence[int], err_by_seed: Mapping[int, Sequence[float]]) -> Verdict:
    """Claim "the error is lowest near S ≈ C" over points (S_i, C_i) at one budget.

    The centre is the point(s) with the smallest |log(S/C)| (twins such as (41, 40) and (40, 41)
    averaged per seed); the extremes are the points with the smallest and the largest log(S/C).
    Two paired one-sided t-tests, centre < each extreme, Holm-corrected: HELD if both reject;
    DID NOT HOLD if the centre is significantly *worse* than either extreme (reverse tests, Holm);
    otherwise UNDECIDED — in particular when one side is flat. The effect is the smaller of the
    two mean advantages (points); also shown: the minimum of a parabola in log(S/C) fitted to the
    seed-mean curve, with a 95% bootstrap interval, as S/C."""
    x = np.log(np.asarray(S, dtype=float) / np.asarray(C, dtype=float))
    if len(set(np.round(x, 12))) < 3:
        return Verdict(held=None, n=0, detail="fewer than 3 distinct S/C ratios")
    ad = np.abs(x)
    centre = np.flatnonzero(ad <= ad.min() + 1e-12)
    lo, hi = int(np.argmin(x)), int(np.argmax(x))
    if lo in centre or hi in centre:
        return Verdict(held=None, n=0, detail="the point closest to S = C is an end of the sweep: no interior to test")
    Y = {s: np.asarray(v, dtype=float) for s, v in err_by_seed.items()}
    seeds = sorted(s for s, v in Y.items() if np.isfinite(v[[*centre, lo, hi]]).all())
    cen = {s: float(Y[s][centre].mean()) for s in seeds}
    d_lo = [cen[s] - Y[s][lo] for s in seeds]
    d_hi = [cen[s] - Y[s][hi] for s in seeds]
    ends = f"centre {_sc(S, C, centre)} vs ends {_sc(S, C, [lo])}, {_sc(S, C, [hi])}"
    if len(seeds) < MIN_SEEDS:
        eff = float(min(-np.mean(d_lo), -np.mean(d_hi))) if seeds else float("nan")
        return Verdict(held=None, effect=eff, effect_name="min advantage of the centre", n=len(seeds),
                       detail=f"fewer than {MIN_SEEDS} seeds: no test; {ends}", unit="points")
    t_lo, pl_lo, pg_lo, ci_lo = paired_t(d_lo)
    t_hi, pl_hi, pg_hi, ci_hi = paired_t(d_hi)
    p_claim, p_against, held, p = holm_decision([pl_lo, pl_hi], [pg_lo, pg_hi])
    # the deciding comparison: the weaker advantage (the end the centre beats least)
    weak_lo = -np.mean(d_lo) <= -np.mean(d_hi)
    t, ci, dd = (t_lo, ci_lo, d_lo) if weak_lo else (t_hi, ci_hi, d_hi)
    xm, (xl, xh) = quadratic_minimum(x, {s: Y[s] for s in seeds})
    detail = (f"{ends}; centre − end {_sc(S, C, [lo])}: {np.mean(d_lo):+.2f} [95% CI {ci_lo[0]:+.2f}, {ci_lo[1]:+.2f}]"
              f" (Holm p {p_claim[0]:.2g}); centre − end {_sc(S, C, [hi])}: {np.mean(d_hi):+.2f} "
              f"[95% CI {ci_hi[0]:+.2f}, {ci_hi[1]:+.2f}] (Holm p {p_claim[1]:.2g}); parabola in log(S/C): minimum "
              f"at S/C = {math.exp(xm):.3g} [bootstrap 95% {math.exp(xl):.3g}, {math.exp(xh):.3g}]"
              + (" (at an end of the sweep: the fitted curve has no interior minimum)"
                 if min(abs(xm - x.min()), abs(xm - x.max())) < 1e-9 else ""))
    return Verdict(held=held, statistic=f"paired t, weaker end (df = {len(seeds) - 1})", value=t, p=p,
                   effect=-float(np.mean(dd)), effect_name="advantage of the centre over the weaker end",
                   interval=(-ci[1], -ci[0]), n=len(seeds), detail=detail,
                   extra={"p_claim_holm": p_claim, "p_against_holm": p_against,
                          "argmin_S_over_C": math.exp(xm), "argmin_interval": [math.exp(xl), math.exp(xh)]},
                   unit="points")


def _sc(S: Sequence[int], C: Sequence[int], idx) -> str:
    return "/".join(f"(S={S[i]}, C={C[i]})" for i in idx)


def lowest_of(groups: Mapping[str, Mapping[int, float]], target: str, *, higher: bool = False,
              unit: str = "") -> Verdict:
    """Claim "group ``target`` is the lowest of ``groups``" (``higher``: the highest), seed-paired.

    ``groups``: name → {seed → value}. One paired one-sided t-test of the target against every
    other group, Holm-corrected: HELD if all reject; DID NOT HOLD if some other group is
    significantly lower (``higher``: higher) than the target (reverse tests, Holm); else
    UNDECIDED; fewer than 3 paired seeds in any comparison: UNDECIDED. The effect is the
    target's margin over the closest other group (positive when the target is the better)."""
    if target not in groups:
        raise ValueError(f"lowest_of: target {target!r} is not one of the groups {', '.join(map(str, groups))}")
    t0 = groups[target]
    others = [k for k in groups if k != target]
    if not others:
        raise ValueError("lowest_of needs at least one group besides the target")
    sign = -1.0 if higher else 1.0  # compare sign·(target − other) < 0
    n = min(len(_paired(t0, groups[k])) for k in others)
    word = "highest" if higher else "lowest"
    if n < MIN_SEEDS:
        return Verdict(held=None, n=n, detail=f"fewer than {MIN_SEEDS} paired seeds for some comparison: no test",
                       unit=unit)
    diffs = {k: [sign * (t0[s] - groups[k][s]) for s in _paired(t0, groups[k])] for k in others}
    tests = {k: paired_t(d) for k, d in diffs.items()}
    # the claim: sign·(target − other) < 0 for every other group
    p_claim, p_against, held, p = holm_decision([tests[k][1] for k in others], [tests[k][2] for k in others])
    closest = max(others, key=lambda k: float(np.mean(diffs[k])))
    t, _, _, ci = tests[closest]
    detail = f"{target} the {word}: " + "; ".join(f"margin over {k} {-np.mean(diffs[k]):+.3g} (Holm p {pc:.2g})"
                                                   for k, pc in zip(others, p_claim))
    return Verdict(held=held, statistic=f"paired t vs the closest ({closest}, df = {n - 1})", value=-t, p=p,
                   effect=-float(np.mean(diffs[closest])), effect_name=f"margin of {target} over {closest}",
                   interval=(-ci[1], -ci[0]), n=n, detail=detail,
                   extra={"p_claim_holm": p_claim, "p_against_holm": p_against, "closest": closest}, unit=unit)


def worst_of(target: Mapping[int, float], others: Mapping[str, Mapping[int, float]], *, name: str = "target",
             unit: str = "") -> Verdict:
    """Claim "``target`` (called ``name``) is higher than every one of ``others``" (e.g. RP at
    block 0 hurts most): :func:`lowest_of` read the other way (``higher=True``)."""
    if name in others:
        raise ValueError(f"worst_of: the target's name {name!r} is also one of the others")
    return lowest_of({name: target, **others}, name, higher=True, unit=unit)


def best_is_interior(order: Sequence[str], groups: Mapping[str, Mapping[int, float]], *, higher: bool = False,
                     unit: str = "") -> Verdict:
    """Claim "the best of an ordered sweep is an inner point, not an end" (e.g. the best patch
    size is neither the smallest nor the largest; the CKA peaks at an intermediate sparsity).

    ``order``: the groups along the sweep (≥ 3). The best group by seed mean (lowest; ``higher``:
    highest) is chosen from the data and tested with :func:`lowest_of` against every other. Inner
    best and :func:`lowest_of` HELD → HELD; an end is the best and significantly so → DID NOT
    HOLD; otherwise UNDECIDED. (Choosing the best from the same data favours the claim a little;
    requiring it to beat every other group, Holm-corrected, more than pays for that.)"""
    if len(order) < 3:
        return Verdict(held=None, detail="fewer than 3 points along the sweep: no interior", unit=unit)
    means = {k: float(np.mean([v for v in groups[k].values() if math.isfinite(v)]))
             if any(math.isfinite(v) for v in groups.get(k, {}).values()) else float("nan") for k in order}
    finite = [k for k in order if math.isfinite(means[k])]
    if len(finite) < len(order):
        return Verdict(held=None, detail=f"no finished runs at {', '.join(k for k in order if k not in finite)}", unit=unit)
    best = (max if higher else min)(order, key=lambda k: means[k])
    v = lowest_of({k: groups[k] for k in order}, best, higher=higher, unit=unit)
    inner = best not in (order[0], order[-1])
    where = f"best mean at {best} ({'an inner point' if inner else 'an end of the sweep'}, chosen from the data)"
    held = v.held if inner else (False if v.held else None)
    return dataclasses.replace(v, held=held, detail=f"{where}; {v.detail}",
                               extra={**v.extra, "best": best, "inner": inner})


def noninferior(a: Mapping[int, float], b: Mapping[int, float] | float, margin: float, *,
                what: str = "a − b", unit: str = "") -> Verdict:
    """Claim "a is not worse (higher) than b by more than ``margin``", seed-paired.

    ``b`` may be a constant (e.g. the predicted c_γ). One-sided paired t-tests of the per-seed
    a − b against ``margin``: HELD if mean(a − b) < margin at level α; DID NOT HOLD if
    mean(a − b) > margin at level α; else UNDECIDED; fewer than 3 paired seeds: UNDECIDED."""
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ValueError(f"noninferior needs a finite margin ≥ 0, got {margin!r}")
    bb = {s: float(b) for s in a} if isinstance(b, (int, float)) else b
    seeds = _paired(a, bb)
    d = [a[s] - bb[s] for s in seeds]
    name = f"mean {what} (margin {margin:g})"
    if len(seeds) < MIN_SEEDS:
        return Verdict(held=None, effect=float(np.mean(d)) if d else float("nan"), effect_name=name, n=len(seeds),
                       detail=f"fewer than {MIN_SEEDS} paired seeds: no test", unit=unit)
    t, p_less, p_greater, _ = paired_t([x - margin for x in d])
    _, _, _, ci = paired_t(d)
    held = _decide(p_less, p_greater)
    return Verdict(held=held, statistic=f"paired t of {what} − margin (df = {len(seeds) - 1})", value=t,
                   p=p_less if held is not False else p_greater, effect=float(np.mean(d)), effect_name=name,
                   interval=ci, n=len(seeds), extra={"p_claim": p_less, "p_against": p_greater, "margin": margin}, unit=unit)


def ratio_interval(a: Sequence[float], b: Sequence[float], *, above: float | None = None,
                   below: float | None = None, what: str = "a / b", unit: str = "×", resamples: int = BOOTSTRAP,
                   seed: int = 0) -> Verdict:
    """Claim "median(a) / median(b) is above ``above``" (or "below ``below``"; give one), e.g. the
    SW-MLP's time per step over the Mixer's above 2, the RP-Mixer's below 1.10.

    ``a``, ``b``: repeated measurements (e.g. seconds of timed steps), ≥ 3 each; not paired. The
    95% interval is a percentile bootstrap of the ratio of medians, a and b resampled
    independently. HELD if the interval lies on the claimed side of the bound; DID NOT HOLD if it
    lies on the other side; UNDECIDED if it holds the bound."""
    if (above is None) == (below is None):
        raise ValueError("ratio_interval needs exactly one of above= or below=")
    xa = np.asarray([x for x in a if math.isfinite(x)], dtype=float)
    xb = np.asarray([x for x in b if math.isfinite(x)], dtype=float)
    n = int(min(xa.size, xb.size))
    bound = above if above is not None else below
    side = f"{'>' if above is not None else '<'} {bound:g}"
    name = f"{what} (claim {side})"
    if n < MIN_SEEDS or np.median(xb) <= 0:
        return Verdict(held=None, effect=float(np.median(xa) / np.median(xb)) if n and np.median(xb) > 0 else float("nan"),
                       effect_name=name, n=n, detail=f"fewer than {MIN_SEEDS} measurements of each: no interval",
                       unit=unit, kind="interval", n_of="measurement")
    est = float(np.median(xa) / np.median(xb))
    rng = np.random.default_rng(seed)
    boots = np.median(rng.choice(xa, (resamples, xa.size)), axis=1) / np.median(rng.choice(xb, (resamples, xb.size)), axis=1)
    lo, hi = float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))
    if above is not None:
        held = True if lo > above else (False if hi < above else None)
    else:
        held = True if hi < below else (False if lo > below else None)
    return Verdict(held=held, statistic="ratio of medians, bootstrap", value=est, effect=est, effect_name=name, interval=(lo, hi), n=n,
                   detail=f"{xa.size} and {xb.size} measurements; {resamples} bootstrap resamples",
                   extra={"bound": bound, "side": "above" if above is not None else "below"}, unit=unit,
                   kind="interval", n_of="measurement")


def deterministic(value: float, *, expected: float | None = None, at_least: float | None = None,
                  tol: float = 0.0, what: str = "value", unit: str = "", detail: str = "") -> Verdict:
    """An exact computation checked against a tolerance (no seeds, no test): ``|value −
    expected| ≤ tol`` (or ``value ≥ at_least − tol``; give one) → HELD, else DID NOT HOLD; a value
    that is not a finite number → UNDECIDED."""
    if (expected is None) == (at_least is None):
        raise ValueError("deterministic needs exactly one of expected= or at_least=")
    if not math.isfinite(value):
        return Verdict(held=None, statistic=f"{what}: no finite value", effect=value, detail=detail, unit=unit, kind="deterministic")
    if expected is not None:
        held, rule = abs(value - expected) <= tol, f"needs |{what} − {expected:g}| ≤ {tol:.3g}"
    else:
        held, rule = value >= at_least - tol, f"needs {what} ≥ {at_least:g} − {tol:.3g}"
    u = f" {unit}" if unit else ""
    return Verdict(held=bool(held), statistic=f"{what} = {value:.6g}{u}; {rule}", value=value, effect=value, detail=detail,
                   extra={"tol": tol}, unit=unit, kind="deterministic")


def exponent_in_interval(estimate: float, interval: tuple[float, float], published: float,
                         far: Sequence[float], *, what: str, runs: int, of: str = "run") -> Verdict:
    """Decide "the exponent equals ``published``" from a point estimate and its bootstrap 95%
    interval over ``runs`` runs (or configurations, ``of``). ``far`` are values a different law would give
    (e.g. 0 and 1 for a split of compute between parameters and examples): the claim is HELD only
    when the interval holds ``published`` and none of them."""
    lo, hi = interval
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Verdict(held=None, effect=estimate, effect_name=what, n=runs, detail=f"no bootstrap interval from {runs} runs",
                       kind="interval", n_of=of)
    covered = [f for f in far if lo <= f <= hi]
    if not lo <= published <= hi:
        held: bool | None = False
    else:
        held = None if covered else True
    detail = (f"published {published:g} {'inside' if lo <= published <= hi else 'outside'} the interval; "
              + (f"the interval also holds {', '.join(f'{f:g}' for f in covered)}" if covered else
                 f"it excludes {', '.join(f'{f:g}' for f in far)}") + f"; bootstrap over {runs} {of}s")
    return Verdict(held=held, statistic=f"bootstrap over {of}s", effect=estimate, effect_name=what, interval=(lo, hi), n=runs,
                   detail=detail, kind="interval", n_of=of)


# ---- rules moved from the spec files

__all__ += ["all_of", "holm_over_claims", "equivalent", "all_hold"]


def all_of(verdicts: Mapping[str, Verdict], *, unit: str = "") -> Verdict:
    """Claim "it holds in every one of ``verdicts``" (per data size, per epoch budget): each one
    test (``compare`` / ``trend``, with its one-sided ``p_claim`` and ``p_against``), Holm-corrected
    together (``verdicts.holm_decision``): HELD if every test rejects, DID NOT HOLD if some reverse
    test rejects, else UNDECIDED; any part without a test (fewer than 3 seeds) → UNDECIDED. The
    statistics shown are the deciding part's, with its Holm-adjusted p."""
    if not verdicts:
        return Verdict(held=None, detail="nothing to test", unit=unit)
    untested = [k for k, v in verdicts.items() if "p_claim" not in v.extra]
    parts = "; ".join(f"{k}: {v.effect_name} {v.effect:+.3g}" for k, v in verdicts.items())
    if untested:
        n = min(v.n for v in verdicts.values())
        return Verdict(held=None, n=n, detail=f"no test at {', '.join(untested)} (fewer than {MIN_SEEDS} seeds); {parts}",
                       unit=unit)
    names = list(verdicts)
    pc, pa, held, p = holm_decision([verdicts[k].extra["p_claim"] for k in names],
                                    [verdicts[k].extra["p_against"] for k in names])
    deciding = names[int(np.argmax(pc))] if held is not False else names[int(np.argmin(pa))]
    v = verdicts[deciding]
    detail = "; ".join(f"{k}: {verdicts[k].effect_name} {verdicts[k].effect:+.3g} (Holm p {pc[i]:.2g}, reverse "
                       f"{pa[i]:.2g})" for i, k in enumerate(names))
    return dataclasses.replace(v, held=held, p=p, detail=f"deciding: {deciding}; {detail}",
                               extra={**v.extra, "p_claim_holm": pc, "p_against_holm": pa, "deciding": deciding})


def holm_over_claims(tests: Mapping[str, Sequence[tuple[str, Mapping[int, float], Mapping[int, float]]]], *,
                     unit: str = "points") -> dict[str, Verdict]:
    """Decide several claims at once, each by one or more seed-paired comparisons "a < b".

    ``tests``: claim → [(what, a, b), ...] with ``a``, ``b`` seed → value. Every comparison is a
    paired one-sided t-test (:func:`verdicts.compare`); the claim p-values of *all* comparisons of
    all claims are Holm-adjusted together, and so are the reverse ones. A claim is HELD when every
    one of its comparisons rejects at α after adjustment, DID NOT HOLD when some reverse test does,
    UNDECIDED otherwise — and UNDECIDED without a test when some comparison has fewer than
    ``MIN_SEEDS`` paired seeds. The verdict's statistic and effect are those of the claim's weakest
    comparison (the largest adjusted claim p); ``extra`` holds every comparison's adjusted p."""
    flat = [(claim, what, compare(a, b, what=what, unit=unit)) for claim, cs in tests.items() for what, a, b in cs]
    ok = [v.n >= MIN_SEEDS and "p_claim" in v.extra for _, _, v in flat]
    if any(ok):
        idx = [i for i, o in enumerate(ok) if o]
        pc = holm([flat[i][2].extra["p_claim"] for i in idx])
        pa = holm([flat[i][2].extra["p_against"] for i in idx])
        adj = {i: (c, a) for i, c, a in zip(idx, pc, pa)}
    else:
        adj = {}
    out: dict[str, Verdict] = {}
    for claim in tests:
        mine = [i for i, (c, _, _) in enumerate(flat) if c == claim]
        parts = [f"{flat[i][1]}: {flat[i][2].effect:+.3g} {unit}" + (
            f" (Holm p {adj[i][0]:.2g}, reverse {adj[i][1]:.2g})" if i in adj else " (no test)") for i in mine]
        detail = "; ".join(parts) + f"; Holm over {len(adj)} comparisons of {len(tests)} claims"
        if not all(i in adj for i in mine):
            n = min(flat[i][2].n for i in mine)
            out[claim] = Verdict(held=None, n=n, effect=flat[mine[0]][2].effect, effect_name=flat[mine[0]][2].effect_name,
                                 detail=f"fewer than {MIN_SEEDS} paired seeds for some comparison: no test; {detail}",
                                 unit=unit)
            continue
        p_claim = max(adj[i][0] for i in mine)
        p_against = min(adj[i][1] for i in mine)
        held = True if p_claim < ALPHA else (False if p_against < ALPHA else None)
        weakest = max(mine, key=lambda i: adj[i][0])
        deciding = min(mine, key=lambda i: adj[i][1]) if held is False else weakest
        v = flat[deciding][2]
        out[claim] = dataclasses.replace(
            v, held=held, p=p_claim if held is not False else p_against, detail=detail,
            statistic=f"{v.statistic}, Holm over claims",
            extra={**v.extra, "holm_claim": {flat[i][1]: adj[i][0] for i in mine},
                   "holm_against": {flat[i][1]: adj[i][1] for i in mine}})
    return out


def equivalent(a: Mapping[int, float], b: Mapping[int, float], margin: float, *, what: str = "a − b",
               unit: str = "") -> Verdict:
    """Claim "a ≈ b within ±``margin``", seed-paired: two one-sided tests (TOST), each
    :func:`verdicts.noninferior` at level α — a − b < margin and b − a < margin. HELD if both
    reject (an intersection–union test: no correction needed); DID NOT HOLD if either difference
    is significantly *beyond* the margin; else UNDECIDED (in particular: too few seeds, or an
    interval wider than the margin). The effect is mean(a − b) with its 95% interval."""
    up = noninferior(a, b, margin, what=what, unit=unit)
    down = noninferior(b, a, margin, what=what, unit=unit)
    name = f"mean {what} (equivalence margin ±{margin:g})"
    if up.n < MIN_SEEDS:
        return Verdict(held=None, effect=up.effect, effect_name=name, n=up.n,
                       detail=f"fewer than {MIN_SEEDS} paired seeds: no test", unit=unit)
    p_up, p_down = up.extra["p_claim"], down.extra["p_claim"]
    if up.held and down.held:
        held, p = True, max(p_up, p_down)
    elif up.held is False or down.held is False:
        held, p = False, min(up.extra["p_against"], down.extra["p_against"])
    else:
        held, p = None, max(p_up, p_down)
    return Verdict(held=held, statistic=f"TOST, two paired one-sided t-tests (df = {up.n - 1})", value=up.value, p=p,
                   effect=up.effect, effect_name=name, interval=up.interval, n=up.n,
                   detail=f"p(a − b < +{margin:g}) = {p_up:.2g}, p(a − b > −{margin:g}) = {p_down:.2g}",
                   extra={"p_upper": p_up, "p_lower": p_down, "margin": margin}, unit=unit)


def all_hold(verdicts: Sequence[Verdict], what: str) -> Verdict:
    """One verdict for a conjunction of interval verdicts (``what`` they decide together): HELD when
    every one held, DID NOT HOLD when any did not, UNDECIDED otherwise; each part's ratio, interval
    and word are its detail, their full records in ``extra["parts"]``."""
    held = False if any(v.held is False for v in verdicts) else (True if verdicts and all(v.held for v in verdicts)
                                                                  else None)
    n = min((v.n for v in verdicts), default=0)

    def part(v: Verdict) -> str:
        ci = f" [{v.interval[0]:.3g}, {v.interval[1]:.3g}]" if v.interval else f" ({v.detail})"
        return f"{v.effect_name} {v.effect:.3g}{ci} {v.word}"

    return Verdict(held=held, statistic=f"{len(verdicts)} bootstrap 95% intervals of median ratios, all must hold",
                   n=n, detail="; ".join(part(v) for v in verdicts), kind="interval", n_of="measurement",
                   extra={"parts": [v.to_dict() for v in verdicts], "what": what})
