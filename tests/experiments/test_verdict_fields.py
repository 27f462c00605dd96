"""Every field of every verdict rule's answer, on small tables worked out here: the statistic's
name, value and p, the effect with its name, unit and interval, n, the detail sentence and the
extras — on the decided path, the too-few-seeds path and the edges (a p exactly at α, a value
exactly at the tolerance, an interval whose end is the bound).

Numbers come from scipy's ``ttest_1samp`` / ``spearmanr`` or from float64 numpy written out
here (the bootstraps re-drawn with the same generator); the rules' own helpers are never the
oracle. Rules must also stay silent: no numpy warning on any of these inputs."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.stats import ttest_1samp

from mlplab.experiments import verdicts as V
from mlplab.experiments.verdicts import (ALPHA, Verdict, best_is_interior, compare, deterministic, exponent_in_interval,
                                         interior_optimum, lowest_of, noninferior, ratio_interval, trend, worst_of)

pytestmark = pytest.mark.filterwarnings("error")

NAN = float("nan")


def same(x, y) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        if x is None or y is None:
            return x is y
        return (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-9, abs=1e-12)
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        return type(x) is type(y) and len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    return type(x) is type(y) and x == y


def check(v: Verdict, **want) -> None:
    """``v`` has exactly these fields (every field of Verdict must be given)."""
    names = [f.name for f in dataclasses.fields(Verdict)]
    assert sorted(want) == sorted(names), set(names) ^ set(want)
    for k in names:
        assert same(getattr(v, k), want[k]), f"{k}: {getattr(v, k)!r} != {want[k]!r}"


def t_test(d):
    """(t, p_less, p_greater, (lo, hi)) of the mean of ``d`` against 0, from scipy."""
    less = ttest_1samp(d, 0.0, alternative="less")
    ci = ttest_1samp(d, 0.0).confidence_interval(0.95)
    return float(less.statistic), float(less.pvalue), float(1 - less.pvalue), (float(ci.low), float(ci.high))


def holm2(p1, p2):
    """Holm's adjusted p for two tests, written out: the smaller doubled, the larger at least that."""
    lo, hi = sorted((p1, p2))
    a_lo, a_hi = min(1.0, 2 * lo), min(1.0, max(min(1.0, 2 * lo), hi))
    return [a_lo, a_hi] if p1 <= p2 else [a_hi, a_lo]


# ------------------------------------------------------------------- the decision at the boundary


def test_a_p_value_equal_to_alpha_is_not_significant():
    assert V._decide(ALPHA, 1.0) is None and V._decide(1.0, ALPHA) is None
    assert V._decide(ALPHA * 0.999, 1.0) is True and V._decide(1.0, ALPHA * 0.999) is False
    assert V._decide(0.01, 0.01) is True  # the claim's test is read first


# ------------------------------------------------------------------- compare


def test_compare_fields_when_decided_against_the_claim():
    a = {0: 3.0, 1: 3.5, 2: 2.8, 3: 3.1}
    b = {0: 1.0, 1: 1.2, 2: 1.1, 3: 0.9}
    d = [a[s] - b[s] for s in range(4)]
    t, pl, pg, ci = t_test(d)
    check(compare(a, b, what="wide − narrow", unit="points"), held=False, statistic="paired t (df = 3)", value=t,
          p=pg, effect=float(np.mean(d)), effect_name="mean wide − narrow", interval=ci, n=4, detail="",
          extra={"p_claim": pl, "p_against": pg}, unit="points", kind="test", n_of="seed")
    held = compare(b, a)
    assert held.held is True and same(held.p, pg) and held.effect_name == "mean a − b" and held.unit == ""


def test_compare_fields_with_too_few_seeds():
    check(compare({0: 1.0, 1: 1.5}, {0: 2.0, 1: 2.25, 2: 0.0}, what="w", unit="u"), held=None, statistic="",
          value=NAN, p=NAN, effect=-0.875, effect_name="mean w", interval=None, n=2,
          detail="fewer than 3 paired seeds: no test", extra={}, unit="u", kind="test", n_of="seed")
    v = compare({}, {})
    assert math.isnan(v.effect) and v.n == 0 and v.effect_name == "mean a − b"


# ------------------------------------------------------------------- noninferior


def test_noninferior_fields_decided_both_ways_and_undecided():
    a = {0: 10.2, 1: 10.5, 2: 10.1, 3: 10.3}
    b = {0: 10.0, 1: 10.1, 2: 10.0, 3: 10.0}
    d = [a[s] - b[s] for s in range(4)]
    t, pl, pg, _ = t_test([x - 1.0 for x in d])
    ci = t_test(d)[3]
    want = dict(held=True, statistic="paired t of a − b − margin (df = 3)", value=t, p=pl, effect=float(np.mean(d)),
                effect_name="mean a − b (margin 1)", interval=ci, n=4, detail="",
                extra={"p_claim": pl, "p_against": pg, "margin": 1.0}, unit="", kind="test", n_of="seed")
    check(noninferior(a, b, 1.0), **want)
    t, pl, pg, _ = t_test([x - 0.0 for x in d])
    check(noninferior(a, b, 0.0, what="λ − c", unit="×"), **{**want, "held": False, "value": t, "p": pg,
          "statistic": "paired t of λ − c − margin (df = 3)", "effect_name": "mean λ − c (margin 0)",
          "extra": {"p_claim": pl, "p_against": pg, "margin": 0.0}, "unit": "×"})
    check(noninferior({0: 1.0, 1: 2.0}, 1.25, 0.5, what="x", unit="u"), held=None, statistic="", value=NAN, p=NAN,
          effect=0.25, effect_name="mean x (margin 0.5)", interval=None, n=2,
          detail="fewer than 3 paired seeds: no test", extra={}, unit="u", kind="test", n_of="seed")
    assert math.isnan(noninferior({}, 1.0, 0.5).effect)
    for bad in (-0.1, NAN, math.inf, "1"):
        with pytest.raises(ValueError, match=r"noninferior needs a finite margin ≥ 0, got"):
            noninferior(a, b, bad)


# ------------------------------------------------------------------- trend


def test_trend_fields_decided_and_undecided():
    x = [1, 2, 4, 8]
    y = {0: [4.0, 3.0, 2.1, 1.0], 1: [4.2, 3.1, 2.0, 0.9], 2: [4.1, 3.3, 1.9, 1.2]}
    lx = np.log2(x)
    slopes = [float(np.polyfit(lx, y[s], 1)[0]) for s in range(3)]
    t, pl, pg, ci = t_test(slopes)
    rho = "Spearman ρ per seed -1.00, -1.00, -1.00"
    check(trend(x, y, what="Δ error", unit="points"), held=True, statistic="t of per-seed slopes (df = 2)", value=t,
          p=pl, effect=float(np.mean(slopes)), effect_name="mean Δ error per doubling", interval=ci, n=3, detail=rho,
          extra={"p_claim": pl, "p_against": pg, "rho_mean": -1.0}, unit="points", kind="test", n_of="seed")
    rising = trend(x, y, sign=+1)
    assert rising.held is False and same(rising.p, pl) and rising.extra["p_claim"] == pytest.approx(pg)
    lin = trend(x, y, log_x=False)
    assert lin.effect_name == "mean slope" and same(lin.effect, np.mean([np.polyfit(x, y[s], 1)[0] for s in range(3)]))
    flat = {s: [1.0, 1.0, 1.0, 1.0] for s in range(3)}  # no spread: ρ is shown as 0
    assert trend(x, flat).detail == "Spearman ρ per seed +0.00, +0.00, +0.00" and trend(x, flat).held is None
    check(trend(x, {0: y[0], 1: [1.0, NAN, NAN, 2.0]}, unit="u"), held=None, statistic="", value=NAN, p=NAN,
          effect=slopes[0], effect_name="mean slope per doubling", interval=None, n=1,
          detail="fewer than 3 seeds with ≥ 3 points: no test; Spearman ρ per seed -1.00", extra={}, unit="u",
          kind="test", n_of="seed")
    v = trend([1, 1, 2, 2], y)  # two distinct x: no seed can have a slope
    assert v.n == 0 and math.isnan(v.effect) and v.detail.endswith("no seed with ≥ 3 points")


# ------------------------------------------------------------------- lowest_of / worst_of


def test_lowest_of_fields():
    g = {"P=4": {0: 10.0, 1: 10.4, 2: 9.9}, "P=2": {0: 12.0, 1: 12.1, 2: 12.3}, "P=7": {0: 11.0, 1: 11.6, 2: 10.7}}
    d2 = [g["P=4"][s] - g["P=2"][s] for s in range(3)]
    d7 = [g["P=4"][s] - g["P=7"][s] for s in range(3)]
    t2, pl2, pg2, _ = t_test(d2)
    t7, pl7, pg7, ci7 = t_test(d7)
    claim, against = holm2(pl2, pl7), holm2(pg2, pg7)
    detail = (f"P=4 the lowest: margin over P=2 {-np.mean(d2):+.3g} (Holm p {claim[0]:.2g}); "
              f"margin over P=7 {-np.mean(d7):+.3g} (Holm p {claim[1]:.2g})")
    held = max(claim) < ALPHA
    check(lowest_of(g, "P=4", unit="points"), held=True if held else None,
          statistic="paired t vs the closest (P=7, df = 2)", value=-t7, p=max(claim), effect=-float(np.mean(d7)),
          effect_name="margin of P=4 over P=7", interval=(-ci7[1], -ci7[0]), n=3, detail=detail,
          extra={"p_claim_holm": claim, "p_against_holm": against, "closest": "P=7"}, unit="points", kind="test",
          n_of="seed")
    assert held  # the table is meant to decide


def test_highest_and_worst_of_fields():
    g = {"b0": {0: 20.0, 1: 20.6, 2: 19.9}, "b1": {0: 15.0, 1: 15.2, 2: 15.1}, "b2": {0: 14.0, 1: 14.3, 2: 14.2}}
    d1 = [g["b1"][s] - g["b0"][s] for s in range(3)]  # sign −1: −(target − other)
    d2 = [g["b2"][s] - g["b0"][s] for s in range(3)]
    t1, pl1, pg1, ci1 = t_test(d1)
    _, pl2, pg2, _ = t_test(d2)
    claim, against = holm2(pl1, pl2), holm2(pg1, pg2)
    want = dict(held=True, statistic="paired t vs the closest (b1, df = 2)", value=-t1, p=max(claim),
                effect=-float(np.mean(d1)), effect_name="margin of b0 over b1", interval=(-ci1[1], -ci1[0]), n=3,
                detail=(f"b0 the highest: margin over b1 {-np.mean(d1):+.3g} (Holm p {claim[0]:.2g}); "
                        f"margin over b2 {-np.mean(d2):+.3g} (Holm p {claim[1]:.2g})"),
                extra={"p_claim_holm": claim, "p_against_holm": against, "closest": "b1"}, unit="pts", kind="test",
                n_of="seed")
    check(lowest_of(g, "b0", higher=True, unit="pts"), **want)
    check(worst_of(g["b0"], {"b1": g["b1"], "b2": g["b2"]}, name="b0", unit="pts"), **want)
    with pytest.raises(ValueError, match="worst_of: the target's name 'b1' is also one of the others"):
        worst_of(g["b0"], {"b1": g["b1"]}, name="b1")


def test_lowest_of_refuses_bad_groups_and_reports_too_few_seeds():
    with pytest.raises(ValueError, match=r"^lowest_of: target 'z' is not one of the groups a, b$"):
        lowest_of({"a": {}, "b": {}}, "z")
    with pytest.raises(ValueError, match=r"^lowest_of needs at least one group besides the target$"):
        lowest_of({"a": {0: 1.0}}, "a")
    check(lowest_of({"a": {0: 1.0, 1: 2.0, 2: 3.0}, "b": {0: 5.0, 1: 6.0}}, "a", unit="u"), held=None, statistic="",
          value=NAN, p=NAN, effect=NAN, effect_name="", interval=None, n=2,
          detail="fewer than 3 paired seeds for some comparison: no test", extra={}, unit="u", kind="test", n_of="seed")


# ------------------------------------------------------------------- best_is_interior


def test_best_is_interior_fields_and_edges():
    g = {"1": {0: 20.0, 1: 20.3, 2: 19.8}, "2": {0: 12.0, 1: 12.2, 2: 11.9}, "3": {0: 15.0, 1: 15.4, 2: 15.1}}
    v = best_is_interior(["1", "2", "3"], g, unit="points")  # exactly 3 points, the best at order[1]
    inner = lowest_of(g, "2", unit="points")
    assert inner.held is True
    check(v, **{**{f.name: getattr(inner, f.name) for f in dataclasses.fields(Verdict)},
                "detail": f"best mean at 2 (an inner point, chosen from the data); {inner.detail}",
                "extra": {**inner.extra, "best": "2", "inner": True}})
    g4 = {**g, "4": {0: 30.0, 1: 30.2, 2: 29.9}}
    assert best_is_interior(["1", "2", "3", "4"], g4).extra["inner"] is True  # best at order[1] of 4
    last = {"1": g["3"], "2": g["1"], "3": g["2"]}  # the best is the last point, significantly
    v = best_is_interior(["1", "2", "3"], last, higher=False)
    assert v.held is False and v.extra == {**lowest_of(last, "3").extra, "best": "3", "inner": False}
    assert v.detail.startswith("best mean at 3 (an end of the sweep, chosen from the data); 3 the lowest: ")
    hi = best_is_interior(["1", "2", "3"], g, higher=True)  # the highest is an end ("1"), significantly
    assert hi.held is False and hi.extra["best"] == "1" and "the highest" in hi.detail
    check(best_is_interior(["1", "2"], g, unit="u"), held=None, statistic="", value=NAN, p=NAN, effect=NAN,
          effect_name="", interval=None, n=0, detail="fewer than 3 points along the sweep: no interior", extra={},
          unit="u", kind="test", n_of="seed")
    missing = {"1": g["1"], "3": {0: NAN}}
    check(best_is_interior(["1", "2", "3"], missing, unit="u"), held=None, statistic="", value=NAN, p=NAN,
          effect=NAN, effect_name="", interval=None, n=0, detail="no finished runs at 2, 3", extra={}, unit="u",
          kind="test", n_of="seed")
    undecided_end = {"1": {0: 10.0, 1: 14.0, 2: 9.0}, "2": {0: 11.0, 1: 12.0, 2: 13.0}, "3": g["3"]}
    w = best_is_interior(["1", "2", "3"], undecided_end)
    assert w.extra["best"] == "1" and lowest_of(undecided_end, "1").held is None and w.held is None


# ------------------------------------------------------------------- ratio_interval


def bootstrap_ratio(a, b, seed=0, resamples=2000):
    """The percentile bootstrap of median(a) / median(b), re-drawn here with the same generator."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ia = rng.choice(a, (resamples, a.size))
    ib = rng.choice(b, (resamples, b.size))
    r = np.median(ia, axis=1) / np.median(ib, axis=1)
    return float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def test_ratio_interval_fields():
    a = [28.0, 27.5, 28.4, 29.0, float("nan")]
    b = [6.0, 6.1, 5.9, float("inf")]
    lo, hi = bootstrap_ratio(a[:4], b[:3])
    est = float(np.median(a[:4]) / np.median(b[:3]))
    check(ratio_interval(a, b, above=2.0, what="SW / Mixer"), held=True, statistic="ratio of medians, bootstrap",
          value=est, p=NAN, effect=est, effect_name="SW / Mixer (claim > 2)", interval=(lo, hi), n=3,
          detail="4 and 3 measurements; 2000 bootstrap resamples", extra={"bound": 2.0, "side": "above"}, unit="×",
          kind="interval", n_of="measurement")
    v = ratio_interval(a, b, below=1.1, unit="s/s", resamples=300, seed=5)
    lo, hi = bootstrap_ratio(a[:4], b[:3], seed=5, resamples=300)
    assert v.held is False and same(v.interval, (lo, hi)) and v.effect_name == "a / b (claim < 1.1)"
    assert v.extra == {"bound": 1.1, "side": "below"} and v.unit == "s/s" and "300 bootstrap resamples" in v.detail
    assert ratio_interval(b[:3], a[:4], below=1.1).held is True and ratio_interval(b[:3], a[:4], above=1.1).held is False


def test_ratio_interval_edges():
    # every resample gives exactly 2: an interval [2, 2] holds the bound 2 either way
    four, two = [4.0, 4.0, 4.0], [2.0, 2.0, 2.0]
    for side in ({"above": 2.0}, {"below": 2.0}):
        v = ratio_interval(four, two, **side)
        assert v.held is None and v.interval == (2.0, 2.0) and v.effect == 2.0
    assert ratio_interval(four, two, above=1.999).held is True and ratio_interval(four, two, below=2.001).held is True
    few = ratio_interval([4.0, 4.0], [2.0, 2.0, 2.0], above=1.0, what="r", unit="u")
    check(few, held=None, statistic="", value=NAN, p=NAN, effect=2.0, effect_name="r (claim > 1)", interval=None, n=2,
          detail="fewer than 3 measurements of each: no interval", extra={}, unit="u", kind="interval",
          n_of="measurement")
    zero = ratio_interval(four, [0.0, 0.0, 1.0], above=1.0)  # median(b) = 0: no ratio
    assert zero.held is None and math.isnan(zero.effect) and zero.n == 3
    assert math.isnan(ratio_interval([], two, above=1.0).effect)
    assert ratio_interval(four, [0.5, 0.5, 0.5], above=1.0).held is True  # a median below 1 is a valid divisor
    with pytest.raises(ValueError, match="^ratio_interval needs exactly one of above= or below=$"):
        ratio_interval(four, two, above=1.0, below=3.0)


# ------------------------------------------------------------------- deterministic


def test_deterministic_fields_and_the_tolerance_edge():
    check(deterministic(1.5, expected=1.0, tol=0.5, what="λ", unit="×", detail="exact"), held=True,
          statistic="λ = 1.5 ×; needs |λ − 1| ≤ 0.5", value=1.5, p=NAN, effect=1.5, effect_name="", interval=None,
          n=0, detail="exact", extra={"tol": 0.5}, unit="×", kind="deterministic", n_of="seed")
    check(deterministic(0.5, at_least=1.0, tol=0.5), held=True, statistic="value = 0.5; needs value ≥ 1 − 0.5",
          value=0.5, p=NAN, effect=0.5, effect_name="", interval=None, n=0, detail="", extra={"tol": 0.5}, unit="",
          kind="deterministic", n_of="seed")
    assert deterministic(1.5000001, expected=1.0, tol=0.5).held is False
    assert deterministic(0.4999999, at_least=1.0, tol=0.5).held is False
    check(deterministic(math.inf, expected=0.0, what="ρ", unit="u", detail="d"), held=None,
          statistic="ρ: no finite value", value=NAN, p=NAN, effect=math.inf, effect_name="", interval=None, n=0,
          detail="d", extra={}, unit="u", kind="deterministic", n_of="seed")
    with pytest.raises(ValueError, match="^deterministic needs exactly one of expected= or at_least=$"):
        deterministic(1.0, expected=1.0, at_least=0.0)


# ------------------------------------------------------------------- exponent_in_interval


def test_exponent_in_interval_every_outcome():
    check(exponent_in_interval(0.36, (0.30, 0.41), 0.35, [0.0, 1.0], what="β_P", runs=12), held=True,
          statistic="bootstrap over runs", value=NAN, p=NAN, effect=0.36, effect_name="β_P", interval=(0.30, 0.41),
          n=12, detail="published 0.35 inside the interval; it excludes 0, 1; bootstrap over 12 runs", extra={},
          unit="", kind="interval", n_of="run")
    check(exponent_in_interval(0.5, (0.0, 0.8), 0.35, [0.0, 1.0], what="β", runs=5, of="configuration"), held=None,
          statistic="bootstrap over configurations", value=NAN, p=NAN, effect=0.5, effect_name="β",
          interval=(0.0, 0.8), n=5,
          detail="published 0.35 inside the interval; the interval also holds 0; bootstrap over 5 configurations",
          extra={}, unit="", kind="interval", n_of="configuration")
    out = exponent_in_interval(0.9, (0.8, 1.0), 0.35, [0.0, 1.0], what="β", runs=5)
    assert out.held is False and out.detail == ("published 0.35 outside the interval; the interval also holds 1; "
                                                "bootstrap over 5 runs")
    # the interval's ends belong to it
    assert exponent_in_interval(0.4, (0.35, 0.5), 0.35, [0.0], what="β", runs=3).held is True
    assert exponent_in_interval(0.3, (0.2, 0.35), 0.35, [0.0], what="β", runs=3).held is True
    assert exponent_in_interval(0.3, (0.2, 0.35), 0.3, [0.2], what="β", runs=3).held is None
    assert exponent_in_interval(0.3, (0.2, 0.35), 0.3, [0.35], what="β", runs=3).held is None
    for bad in ((NAN, 0.5), (0.1, math.inf)):
        check(exponent_in_interval(0.3, bad, 0.35, [0.0], what="β", runs=2, of="seed"), held=None, statistic="",
              value=NAN, p=NAN, effect=0.3, effect_name="β", interval=None, n=2,
              detail="no bootstrap interval from 2 runs", extra={}, unit="", kind="interval", n_of="seed")


# ------------------------------------------------------------------- interior_optimum


def parabola_argmin(x, y):
    c2, c1, _ = np.polyfit(x, y, 2)
    if c2 > 0:
        return float(np.clip(-c1 / (2 * c2), x.min(), x.max()))
    return float(x.min() if c2 * x.min() ** 2 + c1 * x.min() <= c2 * x.max() ** 2 + c1 * x.max() else x.max())


def test_interior_optimum_fields():
    S, C = [64, 32, 16, 8, 4], [4, 8, 16, 32, 64]
    err = {0: [14.0, 12.0, 10.0, 11.0, 12.5], 1: [14.5, 12.2, 10.3, 11.5, 12.1], 2: [13.8, 11.9, 9.9, 10.8, 12.4]}
    x = np.log(np.array(S, np.float64) / np.array(C, np.float64))
    Y = np.array([err[s] for s in range(3)])
    d_lo = Y[:, 2] - Y[:, 4]  # the lowest log(S/C) is the last point (S=4, C=64)
    d_hi = Y[:, 2] - Y[:, 0]
    t_lo, pl_lo, pg_lo, ci_lo = t_test(d_lo)
    t_hi, pl_hi, pg_hi, ci_hi = t_test(d_hi)
    claim, against = holm2(pl_lo, pl_hi), holm2(pg_lo, pg_hi)
    assert -d_lo.mean() < -d_hi.mean()  # the (S=4, C=64) end is the weaker one
    xm = parabola_argmin(x, Y.mean(0))
    rng = np.random.default_rng(0)
    boots = [parabola_argmin(x, Y[rng.integers(0, 3, 3)].mean(0)) for _ in range(2000)]
    xl, xh = np.percentile(boots, 2.5), np.percentile(boots, 97.5)
    detail = ("centre (S=16, C=16) vs ends (S=4, C=64), (S=64, C=4); "
              f"centre − end (S=4, C=64): {d_lo.mean():+.2f} [95% CI {ci_lo[0]:+.2f}, {ci_lo[1]:+.2f}] "
              f"(Holm p {claim[0]:.2g}); centre − end (S=64, C=4): {d_hi.mean():+.2f} "
              f"[95% CI {ci_hi[0]:+.2f}, {ci_hi[1]:+.2f}] (Holm p {claim[1]:.2g}); parabola in log(S/C): minimum "
              f"at S/C = {math.exp(xm):.3g} [bootstrap 95% {math.exp(xl):.3g}, {math.exp(xh):.3g}]")
    check(interior_optimum(S, C, err), held=True, statistic="paired t, weaker end (df = 2)", value=t_lo,
          p=max(claim), effect=-float(d_lo.mean()), effect_name="advantage of the centre over the weaker end",
          interval=(-ci_lo[1], -ci_lo[0]), n=3, detail=detail,
          extra={"p_claim_holm": claim, "p_against_holm": against, "argmin_S_over_C": math.exp(xm),
                 "argmin_interval": [math.exp(xl), math.exp(xh)]}, unit="points", kind="test", n_of="seed")


def test_interior_optimum_edges():
    check(interior_optimum([4, 8, 4], [8, 4, 8], {0: [1.0, 2.0, 3.0]}), held=None, statistic="", value=NAN, p=NAN,
          effect=NAN, effect_name="", interval=None, n=0, detail="fewer than 3 distinct S/C ratios", extra={}, unit="",
          kind="test", n_of="seed")
    end = interior_optimum([16, 8, 4], [16, 32, 64], {0: [1.0, 2.0, 3.0]})
    assert (end.held, end.n, end.detail) == (None, 0, "the point closest to S = C is an end of the sweep: no "
                                                      "interior to test")
    # three distinct ratios are enough; twins at the centre are averaged per seed
    S, C = [64, 41, 40, 4], [4, 40, 41, 64]
    err = {0: [14.0, 10.0, 10.4, 12.5], 1: [14.5, 10.3, 10.1, 12.1], 2: [13.8, 9.9, 10.0, 12.4]}
    v = interior_optimum(S, C, err)
    centre = [(e[1] + e[2]) / 2 for e in err.values()]
    d_lo = [c - e[3] for c, e in zip(centre, err.values())]
    assert v.held is True and same(v.effect, -float(np.mean(d_lo)))
    assert v.detail.startswith("centre (S=41, C=40)/(S=40, C=41) vs ends (S=4, C=64), (S=64, C=4)")
    few = interior_optimum(S, C, {0: err[0], 1: [NAN, 10.0, 10.0, 12.0], 2: err[2]})
    assert few.held is None and few.n == 2 and few.unit == "points"
    assert few.effect_name == "min advantage of the centre"
    assert few.detail == ("fewer than 3 seeds: no test; centre (S=41, C=40)/(S=40, C=41) vs ends (S=4, C=64), "
                          "(S=64, C=4)")
    none = interior_optimum(S, C, {0: [NAN, 1.0, 1.0, 1.0]})
    assert none.n == 0 and math.isnan(none.effect)
    flat_end = interior_optimum([64, 16, 4], [4, 16, 64], {0: [11.0, 10.0, 12.0], 1: [12.0, 10.0, 11.0],
                                                            2: [11.5, 10.0, 11.5]})
    assert "no interior minimum" not in flat_end.detail


# ------------------------------------------------------------------- Verdict's summary and dict


def test_summary_and_dict_of_each_kind():
    v = Verdict(held=True, statistic="paired t (df = 2)", value=11.5, p=0.0037, effect=2.0, effect_name="mean a − b",
                interval=(1.25, 2.75), n=3, detail="why", unit="points")
    assert v.summary() == ("paired t (df = 2) = +11.5; p = 0.0037 (α = 0.05); mean a − b +2 points "
                           "[95% CI +1.25, +2.75] points; n = 3 seeds — why")
    assert v.to_dict() == {"held": True, "verdict": "HELD", "statistic": "paired t (df = 2)", "value": 11.5,
                           "p": 0.0037, "effect": 2.0, "effect_name": "mean a − b", "interval": [1.25, 2.75], "n": 3,
                           "detail": "why", "unit": "points", "kind": "test"}
    one = Verdict(held=None, effect=NAN, effect_name="e", n=1, value=math.inf, p=5e-5, statistic="s",
                  extra={"closest": "b"})
    assert one.summary() == "s = +∞; p = < 1e-4 (α = 0.05); e –; n = 1 seed"
    assert one.to_dict() == {"held": None, "verdict": "UNDECIDED", "statistic": "s", "value": None, "p": 5e-05,
                             "effect": None, "effect_name": "e", "interval": None, "n": 1, "detail": "", "unit": "",
                             "kind": "test", "closest": "b"}
    assert Verdict(held=False, value=-math.inf, statistic="s", p=1e-4).summary() == \
        "s = −∞; p = 0.0001 (α = 0.05); n = 0 seeds"
    big = Verdict(held=False, statistic="ratio", kind="interval", effect=1000.0, effect_name="r", n=2,
                  n_of="measurement", interval=(999.5, 12345.6))
    assert big.summary() == "ratio; r +1000 [95% CI +1e+03, +1.235e+04]; n = 2 measurements"
    assert big.to_dict()["verdict"] == "DID NOT HOLD" and big.to_dict()["p"] is None
    exact = Verdict(held=True, statistic="λ = 1", kind="deterministic")
    assert exact.summary() == "λ = 1; deterministic computation: no seeds needed"
    assert Verdict(held=None).summary() == "n = 0 seeds"
    assert V._num(None) is None and V._num(2) == 2.0 and isinstance(V._num(2), float)


# ------------------------------------------------------------------- the t-test and Holm's step-down


def test_paired_t_without_spread_returns_every_part():
    assert V.paired_t([2.0, 2.0, 2.0]) == (math.inf, 1.0, 0.0, (2.0, 2.0))
    assert V.paired_t([-1.5, -1.5]) == (-math.inf, 0.0, 1.0, (-1.5, -1.5))
    assert V.paired_t([0.0, 0.0, 0.0]) == (0.0, 1.0, 1.0, (0.0, 0.0))
    assert V.paired_t([3.0]) == (math.inf, 1.0, 0.0, (3.0, 3.0))  # one value: no spread to estimate
    t, pl, pg, ci = V.paired_t([1, 2, 4])  # integers are numbers too
    assert same((t, pl, pg, ci), t_test([1.0, 2.0, 4.0]))


def test_holm_caps_at_one_and_keeps_the_order_given():
    assert V.holm([0.6, 0.7, 0.01]) == [1.0, 1.0, 0.03]
    assert V.holm([0.2, 0.01, 0.04]) == pytest.approx([0.2, 0.03, 0.08])
    assert V.holm([0.5]) == [0.5] and all(isinstance(p, float) for p in V.holm([1, 0]))


def test_seeds_pair_only_where_both_sides_are_finite():
    assert V._paired({3: 1.0, 1: 2.0, 2: 0.5, 5: 1.0}, {1: 0.0, 2: math.inf, 3: 4.0, 4: 0.0}) == [1, 3]
    v = compare({0: 1.0, 1: 1.1, 2: 0.9, 3: 1.0}, {0: 2.0, 1: NAN, 2: 2.1, 3: 2.2})
    assert v.n == 3 and same(v.effect, np.mean([-1.0, -1.2, -1.2]))


def test_ratio_interval_bootstrap_is_the_seeded_percentile_interval():
    """With many distinct measurements the interval moves with the generator's seed and the
    percentiles: it must be the 2.5–97.5 % interval of the seed-0 draws."""
    g = np.random.default_rng(11)
    a, b = list(12.0 + g.standard_normal(15)), list(6.0 + 0.5 * g.standard_normal(15))
    v = ratio_interval(a, b, above=1.5)
    assert same(v.interval, bootstrap_ratio(a, b))
    assert not same(v.interval, bootstrap_ratio(a, b, seed=1))
    assert same(ratio_interval(a, b, above=1.5, seed=1).interval, bootstrap_ratio(a, b, seed=1))
    few = ratio_interval([1.0, 2.0], [0.5, 0.5, 0.6], below=1.0)
    assert few.held is None and few.effect == 3.0  # a median below 1 still divides


def test_defaults_of_the_rules():
    assert deterministic(1.0 + 1e-9, expected=1.0).held is False  # tol = 0 unless given
    assert deterministic(1.0, expected=1.0).held is True
    g = {"b1": {0: 15.0, 1: 15.2, 2: 15.1}}
    v = worst_of({0: 20.0, 1: 20.6, 2: 19.9}, g)
    assert v.effect_name == "margin of target over b1" and v.unit == "" and v.detail.startswith("target the highest")
    assert lowest_of({"t": {0: 1.0, 1: 1.1, 2: 1.2}, **g}, "t").unit == ""
    assert best_is_interior(["a"], {}).unit == ""


def test_exponent_in_interval_details_at_the_ends():
    at_lo = exponent_in_interval(0.4, (0.35, 0.5), 0.35, [0.0, 0.1], what="β", runs=3)
    assert at_lo.detail == "published 0.35 inside the interval; it excludes 0, 0.1; bootstrap over 3 runs"
    at_hi = exponent_in_interval(0.3, (0.2, 0.35), 0.35, [0.0], what="β", runs=3)
    assert at_hi.detail.startswith("published 0.35 inside the interval")
    two = exponent_in_interval(0.3, (-0.1, 1.0), 0.35, [0.0, 1.0], what="β", runs=3, of="configuration")
    assert two.held is None and two.detail == ("published 0.35 inside the interval; the interval also holds 0, 1; "
                                               "bootstrap over 3 configurations") and two.n_of == "configuration"
    bad = exponent_in_interval(0.3, (NAN, 1.0), 0.35, [0.0], what="β", runs=3, of="configuration")
    assert bad.n_of == "configuration" and bad.kind == "interval"


def test_trend_edges():
    x3 = [1, 2, 4]  # three points are enough for a seed
    y3 = {0: [3.0, 2.0, 1.0], 1: [3.1, 2.2, 0.9], 2: [2.9, 2.1, 1.2]}
    v = trend(x3, y3)
    assert v.n == 3 and v.held is True and v.unit == ""
    slopes = [float(np.polyfit(np.log2(x3), y3[s], 1)[0]) for s in range(3)]
    assert same(v.effect, float(np.mean(slopes)))
    small = {s: [0.3 + 0.01 * s, 0.2, 0.1, 0.0] for s in range(3)}  # a range below 1 still has a ρ
    assert trend([1, 2, 4, 8], small).detail == "Spearman ρ per seed -1.00, -1.00, -1.00"
    # a missing run may come as None (a JSON null) as well as NaN
    with_none = {0: [4.0, None, 2.1, 1.0], 1: [4.2, 3.1, 2.0, 0.9], 2: [4.1, 3.3, None, 1.2]}
    w = trend([1, 2, 4, 8], with_none)
    assert w.n == 3 and same(w.effect, float(np.mean([np.polyfit(np.log2([1, 4, 8]), [4.0, 2.1, 1.0], 1)[0],
                                                      np.polyfit(np.log2([1, 2, 4, 8]), with_none[1], 1)[0],
                                                      np.polyfit(np.log2([1, 2, 8]), [4.1, 3.3, 1.2], 1)[0]])))


def test_interior_optimum_centre_is_only_the_closest_ratio():
    """S/C = 2 and 1/2 are near the centre (|log| = 0.69) but are not it: only S = C is."""
    S, C = [64, 32, 16, 8, 4], [4, 16, 16, 16, 64]
    err = {0: [14.0, 12.0, 10.0, 11.0, 12.5], 1: [14.5, 12.2, 10.3, 11.5, 12.1], 2: [13.8, 11.9, 9.9, 10.8, 12.4]}
    v = interior_optimum(S, C, err)
    assert v.detail.startswith("centre (S=16, C=16) vs ends (S=4, C=64), (S=64, C=4)")
    assert same(v.effect, -float(np.mean([e[2] - e[4] for e in err.values()])))


def test_interior_optimum_notes_and_ties():
    # a minimum at the high end of log(S/C) is an end too; one well inside a narrow sweep is not
    S, C = [64, 16, 4], [4, 16, 64]
    falling = {s: [10.0 + 0.1 * s, 12.0, 14.0 - 0.1 * s] for s in range(3)}
    v = interior_optimum(S, C, falling)
    assert v.held is False and v.detail.endswith("] (at an end of the sweep: the fitted curve has no interior minimum)")
    narrow = interior_optimum([32, 16, 8], [16, 16, 16], {s: [11.0 + 0.1 * s, 10.0, 11.2 - 0.1 * s] for s in range(3)})
    assert narrow.detail.endswith("]") and "no interior minimum" not in narrow.detail
    # both ends beaten by the same mean margin (2 points): the low end (smallest S/C) is reported
    tie = {0: [12.0, 10.0, 11.5], 1: [13.0, 10.0, 12.5], 2: [11.0, 10.0, 12.0]}  # ends (S=64) and (S=4)
    d_lo = [10.0 - tie[s][2] for s in range(3)]
    assert np.mean(d_lo) == np.mean([10.0 - tie[s][0] for s in range(3)]) == -2.0
    w = interior_optimum(S, C, tie)
    assert same(w.value, t_test(d_lo)[0]) and same(w.interval, (-t_test(d_lo)[3][1], -t_test(d_lo)[3][0]))
    # a missing run may come as None (a JSON null): that seed is dropped
    missing = {**tie, 3: [None, 10.0, 11.0]}
    m = interior_optimum(S, C, missing)
    assert m.n == 3 and same(m.value, w.value)


def test_a_concave_fit_puts_the_minimum_at_the_lower_end():
    """Points exactly on a downward parabola: its minimum over the sweep is the end where the data are lower."""
    for xs, c1 in (([-2.0, 0.0, 1.0], -0.5), ([-3.0, -1.0, 2.0], -3.0), ([1.0, 2.0, 4.0], 0.5)):
        x = np.array(xs)
        y = -x * x + c1 * x + 1.0
        assert V._quad_argmin(x, y) == (x[0] if y[0] < y[-1] else x[-1]), (xs, c1)


def test_quadratic_minimum_bootstrap_is_seeded():
    x = np.linspace(-2.0, 2.0, 5)
    g = np.random.default_rng(3)
    y = {s: list(10.0 + (x - 0.3) ** 2 + 0.8 * g.standard_normal(5)) for s in range(8)}
    Y = np.array([y[s] for s in range(8)])

    def boot(seed):
        rng = np.random.default_rng(seed)
        b = [parabola_argmin(x, Y[rng.integers(0, 8, 8)].mean(0)) for _ in range(400)]
        return float(np.percentile(b, 2.5)), float(np.percentile(b, 97.5))

    est, ci = V.quadratic_minimum(x, y, resamples=400)
    assert same(est, parabola_argmin(x, Y.mean(0))) and same(ci, boot(0)) and not same(ci, boot(1))


def test_holm_decision_at_exactly_alpha_is_undecided():
    claim, against, held, p = V.holm_decision([0.05, 0.01], [0.9, 0.9])  # adjusted: 0.05 and 0.02
    assert claim == [0.05, 0.02] and held is None and p == 0.05
    _, against, held, p = V.holm_decision([0.9, 0.9], [0.025, 0.9])  # adjusted: 0.05 and 0.9
    assert against == [0.05, 0.9] and held is None and p == 1.0


def test_quadratic_minimum_reads_none_as_a_missing_run():
    x = [-2.0, -1.0, 0.0, 1.0, 2.0]
    y = {0: [14.0, 11.0, 10.0, 11.0, 14.0], 1: [14.2, None, 10.1, 11.2, 13.8]}
    est, _ = V.quadratic_minimum(x, y, resamples=1, seed=1)  # seed 1 draws both seeds: no empty column
    means = np.array([14.1, 11.0, 10.05, 11.1, 13.9])  # seed means over the finite values
    assert same(est, parabola_argmin(np.array(x), means))


def test_paired_t_small_samples_and_the_kind_check():
    assert V.paired_t([0.5, 0.5, 0.5]) == (math.inf, 1.0, 0.0, (0.5, 0.5))  # a mean between 0 and 1
    assert V.paired_t([-0.5, -0.5]) == (-math.inf, 0.0, 1.0, (-0.5, -0.5))
    assert same(V.paired_t([1.0, 2.0]), t_test([1.0, 2.0]))  # two values have a spread
    with pytest.raises(ValueError, match=r"^Verdict kind must be one of test, interval, deterministic, not 'guess'$"):
        Verdict(held=None, kind="guess")
