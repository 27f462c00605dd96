"""Every field of every verdict rule against an oracle written here: the t-tests, slopes,
parabolas, binomial ranks and power computed independently (numpy / scipy / math in float64, or
by hand for one seed, two seeds, ties, zero spread, ±inf and values exactly at a bound), and the
sentences a verdict prints spelled out. ``check`` compares ALL fields of a :class:`Verdict`, so a
field a rule forgets, or sets where it should not, fails here (test_verdict_rules.py checks the
decisions; these the evidence)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from mlplab.experiments import verdicts as V

NAN, INF = float("nan"), float("inf")
DEFAULT = V.Verdict(held=None)


def seeds(values, start=0):
    return {start + i: float(v) for i, v in enumerate(values)}


def same(got, want) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        if got is None or want is None:
            return got is want
        if math.isnan(want):
            return math.isnan(got)
        return got == pytest.approx(want, rel=1e-9, abs=1e-12)
    if isinstance(want, (tuple, list)):
        return (type(got) is type(want) and len(got) == len(want)
                and all(same(g, w) for g, w in zip(got, want)))
    if isinstance(want, dict):
        return (isinstance(got, dict) and set(got) == set(want)
                and all(same(got[k], want[k]) for k in want))
    return type(got) is type(want) and got == want


def check(v: V.Verdict, **want) -> None:
    """Every field of ``v``: as given in ``want``, else the dataclass default."""
    assert isinstance(v, V.Verdict)
    for f in dataclasses.fields(V.Verdict):
        exp = want.pop(f.name) if f.name in want else getattr(DEFAULT, f.name)
        assert same(getattr(v, f.name), exp), f"{f.name}: {getattr(v, f.name)!r} != {exp!r}"
    assert not want, f"unknown fields {want}"


def t_test(d, level=0.95):
    d = np.asarray(d, float)
    n, m, sd = d.size, d.mean(), d.std(ddof=1)
    se = sd / math.sqrt(n)
    q = stats.t.ppf(1 - (1 - level) / 2, n - 1)
    t = m / se
    return t, stats.t.cdf(t, n - 1), stats.t.sf(t, n - 1), (m - q * se, m + q * se)


def decide(p_claim, p_against):
    return True if p_claim < 0.025 else (False if p_against < 0.025 else None)


def sd1(d):
    return float(np.std(np.asarray(d, float), ddof=1))


def p_txt(p):
    return f"{p:.2g}" if p >= 1e-4 else "< 1e-4"


# ------------------------------------------------------------------------------ paired_t


def test_paired_t_one_value_and_constant_differences():
    # one seed: no spread, the sign of the mean decides the p-values
    assert V.paired_t([2.0]) == (INF, 1.0, 0.0, (2.0, 2.0))
    assert V.paired_t([-3.0]) == (-INF, 0.0, 1.0, (-3.0, -3.0))
    # constant positive mean below 1: p(greater) is 0 (mean > 0), p(less) is 1
    assert V.paired_t([0.5, 0.5, 0.5]) == (INF, 1.0, 0.0, (0.5, 0.5))
    assert V.paired_t([0.0, 0.0]) == (0.0, 1.0, 1.0, (0.0, 0.0))
    t, pl, pg, ci = V.paired_t([1.0, 2.0, 4.0], level=0.9)
    et, epl, epg, eci = t_test([1.0, 2.0, 4.0], 0.9)
    assert (t, pl, pg) == pytest.approx((et, epl, epg)) and ci == pytest.approx(eci)


# ------------------------------------------------------------------------------ compare


def test_compare_untested_and_tested_every_field():
    v = V.compare({0: 1.0, 1: 2.0, 2: NAN}, {0: 3.0, 1: 1.0, 2: 0.0, 3: 5.0}, unit="pts")
    check(v, effect=-0.5, effect_name="mean a − b", n=2, spread=sd1([-2.0, 1.0]), unit="pts",
          detail="fewer than 3 paired seeds: no test")
    a, b = seeds([1.0, 1.5, 0.7]), seeds([2.0, 2.5, 2.1])
    d = [a[s] - b[s] for s in a]
    t, pl, pg, ci = t_test(d)
    check(V.compare(a, b), held=True, statistic="paired t (df = 2)", value=t, p_claim=pl, p_against=pg,
          effect=float(np.mean(d)), effect_name="mean a − b", interval=ci, n=3, spread=sd1(d))
    assert V.compare({}, {}).effect_name == "mean a − b"


# ------------------------------------------------------------------------------ trend


def test_trend_every_field_with_ties_missing_and_flat_seeds():
    x = [1, 2, 4, 8]
    lx = np.log2(x)
    ys = {0: [4.0, 3.0, 2.5, 1.0], 1: [3.9, 3.5, 2.0, 1.2], 2: [5.0, 5.0, 5.0, 5.0], 3: [4.0, 3.8, 3.85, 3.1],
          4: [1.0, None, NAN, 7.0],  # two finite points: skipped (None is a missing run too)
          }
    slopes, rhos = [], []
    for s in (0, 1, 2, 3):
        y = np.array(ys[s], float)
        slopes.append(float(np.polyfit(lx, y, 1)[0]))
        rhos.append(0.0 if s == 2 else float(stats.spearmanr(lx, y).statistic))
    t, pl, pg, ci = t_test(slopes)
    rho_txt = "Spearman ρ per seed " + ", ".join(f"{r:+.2f}" for r in rhos)
    assert rho_txt == "Spearman ρ per seed -1.00, -1.00, +0.00, -0.80"
    v = V.trend(x, ys, unit="pts")
    check(v, held=decide(pl, pg), statistic="t of per-seed slopes (df = 3)", value=t, p_claim=pl, p_against=pg,
          effect=float(np.mean(slopes)), effect_name="mean slope per doubling", interval=ci, n=4, spread=sd1(slopes),
          detail=rho_txt, extra={"rho_mean": float(np.mean(rhos))}, unit="pts")
    w = V.trend(x, ys, sign=+1, log_x=False, what="gain")
    slopes_lin = [float(np.polyfit(np.array(x, float), np.array(ys[s], float), 1)[0]) for s in (0, 1, 2, 3)]
    t, pl, pg, ci = t_test(slopes_lin)
    check(w, held=decide(pg, pl), statistic="t of per-seed slopes (df = 3)", value=t, p_claim=pg, p_against=pl,
          effect=float(np.mean(slopes_lin)), effect_name="mean gain", interval=ci, n=4, spread=sd1(slopes_lin),
          detail=rho_txt, extra={"rho_mean": float(np.mean(rhos))})


def test_trend_a_small_nonconstant_range_still_has_its_rank_correlation():
    ys = {s: [0.3, 0.2 + 0.01 * s, 0.1] for s in range(3)}
    v = V.trend([1, 2, 4], ys)
    assert v.detail == "Spearman ρ per seed -1.00, -1.00, -1.00" and v.extra == {"rho_mean": -1.0}


def test_trend_needs_three_distinct_points_per_seed_and_three_seeds():
    x = [1, 2, 4, 4]  # a seed missing at x = 2 has 3 finite points but only 2 distinct x
    ys = {0: [3.0, NAN, 2.0, 1.0], 1: [3.0, 2.0, 1.5, 1.0], 2: [3.0, 2.5, 1.0, 0.5]}
    v = V.trend(x, ys, unit="u")
    sl = [float(np.polyfit(np.log2(x), np.array(ys[s]), 1)[0]) for s in (1, 2)]
    rh = [float(stats.spearmanr(np.log2(x), ys[s]).statistic) for s in (1, 2)]
    check(v, effect=float(np.mean(sl)), effect_name="mean slope per doubling", n=2, spread=sd1(sl), unit="u",
          detail="fewer than 3 seeds with ≥ 3 points: no test; Spearman ρ per seed "
                 + ", ".join(f"{r:+.2f}" for r in rh))
    check(V.trend([1, 2, 4], {}), effect_name="mean slope per doubling",
          detail="fewer than 3 seeds with ≥ 3 points: no test; no seed with ≥ 3 points")


# ------------------------------------------------------------------------------ noninferior / equivalent


def test_noninferior_every_field_against_a_constant_and_a_zero_margin():
    a = seeds([1.0, 1.3, 0.8])
    d = [a[s] - 1.5 for s in a]
    t, pl, pg, _ = t_test([x - 0.25 for x in d])
    ci = t_test(d)[3]
    check(V.noninferior(a, 1.5, 0.25, unit="pts"), held=decide(pl, pg),
          statistic="paired t of a − b − margin (df = 2)", value=t, p_claim=pl, p_against=pg,
          effect=float(np.mean(d)), effect_name="mean a − b (margin 0.25)", interval=ci, n=3, spread=sd1(d),
          extra={"margin": 0.25}, unit="pts")
    t0, pl0, pg0, ci0 = t_test(d)
    check(V.noninferior(a, 1.5, 0), held=decide(pl0, pg0), statistic="paired t of a − b − margin (df = 2)", value=t0,
          p_claim=pl0, p_against=pg0, effect=float(np.mean(d)), effect_name="mean a − b (margin 0)", interval=ci0,
          n=3, spread=sd1(d), extra={"margin": 0})
    check(V.noninferior({0: 1.0, 1: 2.0}, 0.5, 0.1, unit="u"), effect=1.0, effect_name="mean a − b (margin 0.1)",
          n=2, spread=sd1([0.5, 1.5]), unit="u", detail="fewer than 3 paired seeds: no test")
    for bad in (-0.1, NAN, INF, "1"):
        with pytest.raises(ValueError, match=r"^noninferior needs a finite margin ≥ 0, got "):
            V.noninferior(a, 1.0, bad)


def test_equivalent_every_field():
    a, b = seeds([1.0, 1.1, 0.95, 1.05]), seeds([1.02, 1.04, 1.0, 1.0])
    d = [a[s] - b[s] for s in a]
    tu, plu, pgu, ci = t_test([x - 0.2 for x in d])  # a − b < +0.2
    td, pld, pgd, _ = t_test([-x - 0.2 for x in d])  # b − a < +0.2
    v = V.equivalent(a, b, 0.2, unit="pts")
    check(v, held=True, statistic="TOST, two paired t-tests (df = 3)", value=tu if plu >= pld else td,
          p_claim=max(plu, pld), p_against=min(pgu, pgd), effect=float(np.mean(d)),
          effect_name="mean a − b (equivalence margin ±0.2)", interval=t_test(d)[3], n=4, spread=sd1(d),
          detail=f"p(a − b < +0.2) = {p_txt(plu)}, p(a − b > −0.2) = {p_txt(pld)}",
          extra={"margin": 0.2, "equivalence": True}, unit="pts")
    assert plu != pld
    # the other side weaker: the value shown is the weaker test's
    w = V.equivalent(b, a, 0.2)
    assert w.value == pytest.approx(-td if pld >= plu else -tu) or w.value == pytest.approx(td if pld >= plu else tu)
    tb = t_test([-x - 0.2 for x in d])  # b − a − margin for the reversed call's "up"
    ta = t_test([x - 0.2 for x in d])
    assert w.value == pytest.approx(tb[0] if tb[1] >= ta[1] else ta[0])
    check(V.equivalent({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.0}, 0.5, unit="u"), effect=1.5,
          effect_name="mean a − b (equivalence margin ±0.5)", n=2, spread=sd1([1.0, 2.0]), unit="u",
          detail="fewer than 3 paired seeds: no test")
    # exactly three seeds is a test
    assert V.equivalent(seeds([1.0, 1.1, 0.9]), seeds([1.0, 1.0, 1.0]), 0.5).statistic.startswith("TOST")


# ------------------------------------------------------------------------------ lowest_of / _all_parts


def iut(parts):
    """The intersection–union decision written out: parts name → (values, label, sign)."""
    k = len(parts)
    tt = {n: t_test(d) for n, (d, _, _) in parts.items()}
    weakest = max(tt, key=lambda n: tt[n][1])
    rev = min(tt, key=lambda n: tt[n][2])
    p_claim, p_against = tt[weakest][1], min(1.0, k * tt[rev][2])
    held = True if p_claim < 0.025 else (False if p_against < 0.025 else None)
    name = rev if held is False else weakest
    level = 1 - 0.05 / k if held is False else 0.95
    d, label, sg = parts[name]
    t, _, _, ci = t_test(d, level)
    interval = ci if sg > 0 else (-ci[1], -ci[0])
    detail = "; ".join(f"{lab}: {g * np.mean(dd):+.3g} (p {p_txt(tt[n][1])}, reverse {p_txt(tt[n][2])})"
                       for n, (dd, lab, g) in parts.items())
    return dict(held=held, value=sg * t, p_claim=p_claim, p_against=p_against, effect=sg * float(np.mean(d)),
                interval=tuple(float(x) for x in interval), level=level, n=len(d), spread=sd1(d), detail=detail,
                extra={"deciding": name, "parts": k}), label


@pytest.mark.parametrize("shift", [0.0, -1.0, 1.2])
def test_lowest_of_every_field(shift):
    g = {"t": seeds([1.0, 1.2, 0.9, 1.1]), "u": seeds([2.0, 2.3, 1.7, 2.05]), "w": seeds([1.5, 1.9, 1.3, 1.6])}
    g["t"] = {s: v + shift for s, v in g["t"].items()}
    parts = {k: ([g["t"][s] - g[k][s] for s in range(4)], f"vs {k}", -1.0) for k in ("u", "w")}
    want, label = iut(parts)
    check(V.lowest_of(g, "t", unit="pts"), statistic=f"t the lowest: paired t against each other group, deciding: "
          f"{label} (df = 3)", effect_name=f"margin of t, {label}", unit="pts", **want)
    # the highest: the signs turn
    parts = {k: ([-(g["t"][s] - g[k][s]) for s in range(4)], f"vs {k}", -1.0) for k in ("u", "w")}
    want, label = iut(parts)
    check(V.worst_of(g["t"], {"u": g["u"], "w": g["w"]}, name="t"),
          statistic=f"t the highest: paired t against each other group, deciding: {label} (df = 3)",
          effect_name=f"margin of t, {label}", **want)


def test_lowest_of_too_few_seeds_and_bad_input():
    g = {"t": seeds([1.0, 2.0, 3.0]), "u": seeds([2.0, 3.0]), "w": seeds([5.0, 6.0, 7.0])}
    check(V.lowest_of(g, "t", unit="u"), n=2, unit="u",
          detail="fewer than 3 paired seeds for some comparison: no test")
    with pytest.raises(ValueError, match=r"^lowest_of: target 'x' is not one of the groups t, u, w$"):
        V.lowest_of(g, "x")
    with pytest.raises(ValueError, match=r"^lowest_of needs at least one group besides the target$"):
        V.lowest_of({"t": g["t"]}, "t")
    with pytest.raises(ValueError, match=r"^worst_of: the target's name 'u' is also one of the others$"):
        V.worst_of(g["t"], {"u": g["u"]}, name="u")


# ------------------------------------------------------------------------------ optimum_within


def parabolas(x, vertices, curv=1.0):
    return {s: [curv * (xi - v) ** 2 + 0.1 * s for xi in x] for s, v in enumerate(vertices)}


@pytest.mark.parametrize("vertices,maximum", [([0.1, -0.2, 0.3], False), ([1.4, 1.7, 1.6], False),
                                              ([0.0, 0.2, -0.1, 0.05], True), ([0.2, 0.3, 0.1], False),
                                              ([-0.8, -1.1, -0.6], False), ([-1.6, -1.4, -1.8], False),
                                              ([-0.7, -0.9, -0.75], True)])
def test_optimum_within_every_field(vertices, maximum):
    x, lo, hi = [-2.0, -1.0, 0.0, 1.0, 2.0], -1.0, 1.0
    curv = -1.0 if maximum else 1.0
    ys = parabolas(x, vertices, curv)
    # (seed -1, the first) too few points: neither a slope nor part of the mean curve
    ys[-1] = [5.0, NAN, NAN, NAN, -7.0]
    s_lo = [2 * curv * (lo - v) for v in vertices]  # slope of c·(x − v)² at lo
    s_hi = [2 * curv * (hi - v) for v in vertices]
    up = -1.0 if maximum else 1.0
    parts = {"lo": ([up * s for s in s_lo], f"slope at x = {lo:.3g} (claim {'>' if maximum else '<'} 0)", up),
             "hi": ([-up * s for s in s_hi], f"slope at x = {hi:.3g} (claim {'<' if maximum else '>'} 0)", -up)}
    want, label = iut(parts)
    vertex = float(np.mean(vertices))  # the mean of parabolas of one curvature has the mean vertex
    kind = "maximum" if maximum else "minimum"
    where = f"x in [{lo:.3g}, {hi:.3g}]; the seed-mean parabola's vertex at x = {vertex:.3g}"
    want["detail"] = f"{where}; {want['detail']}"
    want["extra"].update(vertex=vertex, lo=lo, hi=hi)
    v = V.optimum_within(x, ys, lo, hi, maximum=maximum, unit="pts")
    check(v, statistic=f"{kind} between the bounds: t-tests of the per-seed parabola's slopes, deciding: {label} "
          f"(df = {len(vertices) - 1})", effect_name=f"optimum, {label}", unit="pts", **want)


def test_optimum_within_edges():
    x = [0.0, 1.0, 2.0, 3.0]
    check(V.optimum_within([0.0, 0.0, 1.0, 1.0], {}, 0.0, 1.0, unit="u"), n=0, unit="u",
          detail="fewer than 3 distinct points: no parabola")
    ys = parabolas(x, [1.5, 1.0])
    ys[5] = [1.0, NAN, NAN, 2.0]
    v = V.optimum_within(x, ys, 0.0, 3.0, unit="u", x_name="log r")
    check(v, n=2, unit="u", extra={"vertex": 1.25},
          detail="fewer than 3 seeds with ≥ 3 points: no test; log r in [0, 3]; the seed-mean parabola's vertex at "
                 "log r = 1.25")
    check(V.optimum_within(x, {}, 0.0, 3.0), n=0, extra={"vertex": None},
          detail="fewer than 3 seeds with ≥ 3 points: no test; x in [0, 3]; the seed-mean parabola's vertex at x = nan")
    # the bounds may be the ends of the sweep exactly; lo must be below hi
    assert V.optimum_within(x, parabolas(x, [1.5, 1.4, 1.6]), 0.0, 3.0).held is True
    for xs, lo, hi in ((x, 1.0, 1.0), (x, -0.1, 2.0), (x, 1.0, 3.1), (x, 2.0, 1.0), ([0.0, 1.0, None, 3.0], 0.0, 3.0)):
        with pytest.raises(ValueError, match=r"^optimum_within: need min x ≤ lo < hi ≤ max x, got lo="):
            V.optimum_within(xs, {}, lo, hi)  # a missing point (None: NaN) has no place in the sweep


def test_optimum_within_on_three_points_with_ties_and_missing_values():
    """Three distinct x (a repeated point), a seed with exactly 3 finite points (one None), and one
    with 3 finite points on only 2 distinct x (skipped: neither a slope nor in the mean curve)."""
    x = [0.0, 1.0, 2.0, 2.0]
    ys = {0: [1.0, 0.2, 0.9, 1.1], 1: [1.2, 0.3, None, 0.5], 2: [0.8, 0.1, 1.4, 1.0], 3: [1.0, 0.0, 0.9, 0.95],
          4: [NAN, 3.0, 9.0, -9.0]}
    xs = np.array(x)
    s_lo, s_hi, used = [], [], []
    for s in (0, 1, 2, 3):
        y = np.array(ys[s], float)
        ok = np.isfinite(y)
        c2, c1, _ = np.polyfit(xs[ok], y[ok], 2)
        s_lo.append(c1 + 2 * c2 * 0.0)
        s_hi.append(c1 + 2 * c2 * 2.0)
        used.append(y)
    parts = {"lo": (s_lo, "slope at x = 0 (claim < 0)", 1.0),
             "hi": ([-v for v in s_hi], "slope at x = 2 (claim > 0)", -1.0)}
    want, label = iut(parts)
    mean_curve = np.nanmean(np.array(used), axis=0)
    c2, c1, _ = np.polyfit(xs, mean_curve, 2)
    vertex = float(-c1 / (2 * c2))
    want["detail"] = f"x in [0, 2]; the seed-mean parabola's vertex at x = {vertex:.3g}; {want['detail']}"
    want["extra"].update(vertex=vertex, lo=0.0, hi=2.0)
    check(V.optimum_within(x, ys, 0.0, 2.0), statistic="minimum between the bounds: t-tests of the per-seed "
          f"parabola's slopes, deciding: {label} (df = 3)", effect_name=f"optimum, {label}", **want)
    # the bounds may sit 1e-12 outside the ends of the sweep (rounding), not more
    assert V.optimum_within(x, ys, -1e-12, 2.0 + 1e-12).n == 4
    assert V.optimum_within([1, 2, 3], {}, 1, 3).extra == {"vertex": None}


def test_optimum_within_a_line_has_no_vertex():
    x = [0.0, 1.0, 2.0]
    assert V._vertex(np.array(x), np.array([1.0, 2.0, 3.0])) != V._vertex(np.array(x), np.array([1.0, 2.0, 3.5]))
    assert math.isnan(V._vertex(np.array(x), np.array([0.0, 0.0, 0.0])))
    assert V._vertex(np.array([-1.0, 0.0, 1.0, 2.0]), np.array([4.0, 1.0, 0.0, 1.0])) == pytest.approx(1.0)


# ------------------------------------------------------------------------------ exponent_vs_foil


@pytest.mark.parametrize("interval,published,held", [
    ((0.6, 0.8), 0.7, True), ((0.3, 0.45), 0.7, False), ((0.4, 0.8), 0.9, None), ((0.5, 0.8), 0.7, None),
    ((0.2, 0.4), 0.3, True), ((0.55, 0.7), 0.3, False), ((0.2, 0.5), 0.3, None), ((0.7, 0.8), 0.7, True),
    ((0.3, 0.5), 0.3, None), ((0.5, 0.8), 0.3, None), ((0.2, 0.5), 0.7, None), ((0.55, 0.7), 0.7, True)])
def test_exponent_vs_foil_every_field(interval, published, held):
    lo, hi = interval
    side = "below" if published < 0.5 else "above"
    inside = "inside" if lo <= published <= hi else "outside"
    v = V.exponent_vs_foil(0.66, interval, published, 0.5, what="a_N", runs=7, of="size")
    check(v, held=held, statistic="bootstrap over sizes", effect=0.66, effect_name="a_N", interval=interval, n=7,
          detail=f"claim: {side} the foil 0.5; the interval {'holds' if held is None else 'excludes'} it; published "
                 f"{published:g} {inside} the interval; bootstrap over 7 sizes",
          kind="interval", n_of="size", extra={"foil": 0.5, "published": published})


def test_exponent_vs_foil_without_an_interval_and_bad_input():
    for iv in ((NAN, 0.5), (0.1, INF), (-INF, 0.2)):
        check(V.exponent_vs_foil(0.4, iv, 0.7, 0.5, what="a", runs=3), effect=0.4, effect_name="a", n=3,
              detail="no bootstrap interval from 3 runs", kind="interval", n_of="run")
    with pytest.raises(ValueError, match=r"^exponent_vs_foil: the published value and the foil must differ$"):
        V.exponent_vs_foil(0.4, (0.1, 0.2), 0.5, 0.5, what="a", runs=3)


# ------------------------------------------------------------------------------ median_interval / paired_ratio


def order_interval(x, level=0.95):
    """The order-statistic interval by hand: the largest k with P(Bin(n, ½) ≤ k − 1) ≤ (1 − level)/2."""
    xs = sorted(v for v in x if math.isfinite(v))
    n = len(xs)
    tail = (1 - level) / 2
    best = 0
    for k in range(1, n // 2 + 1):
        if sum(math.comb(n, i) for i in range(k)) / 2 ** n <= tail:
            best = k
    return (-INF, INF) if best == 0 else (xs[best - 1], xs[n - best])


@pytest.mark.parametrize("n", [1, 2, 5, 6, 7, 8, 9, 10, 17, 20, 21, 40])
@pytest.mark.parametrize("level", [0.95, 0.9, 0.99, 0.975])
def test_median_interval_against_binomial_ranks(n, level):
    x = [float((7 * i) % n) + 0.5 * (i % 3) for i in range(n)] + [NAN, INF]
    assert V.median_interval(x, level) == order_interval(x, level)
    assert V.median_interval([3, 1, 2, 5, 4, 7, 6, 9, 8]) == (2.0, 8.0)
    assert type(V.median_interval([3, 1, 2, 5, 4, 7, 6, 9, 8])[0]) is float


def test_median_interval_exactly_at_the_tail():
    # n = 6 at level 1 − 2/64: P(Bin(6, ½) ≤ 0) = 1/64 equals the tail exactly, so k = 1 is allowed
    x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert V.median_interval(x, 1 - 2 / 64) == (1.0, 6.0)
    assert V.median_interval(x, 1 - 2 / 64 + 1e-9) == (-INF, INF)


def ratio_case(n, r0=2.5):
    a = [r0 * (1 + 0.02 * ((5 * i) % 7 - 3) + 0.0013 * i) * (1 + 0.1 * i) for i in range(n)]
    b = [1 + 0.1 * i for i in range(n)]
    return a, b


@pytest.mark.parametrize("bound,above", [(2.0, True), (3.0, True), (2.5, True), (3.0, False), (2.0, False),
                                         (2.5, False)])
def test_paired_ratio_every_field(bound, above):
    a, b = ratio_case(20)
    a += [NAN, 1.0, 2.0]
    b += [1.0, 0.0, INF]
    r = [x / y for x, y in zip(a[:20], b[:20])]
    lo, hi = order_interval(r)
    if above:
        held = True if lo > bound else (False if hi < bound else None)
    else:
        held = True if hi < bound else (False if lo > bound else None)
    kw = {"above": bound} if above else {"below": bound}
    v = V.paired_ratio(a, b, what="sw / mixer", **kw)
    med = float(np.median(r))
    check(v, held=held, statistic="median of interleaved ratios, order-statistic interval", value=med, effect=med,
          effect_name=f"median sw / mixer (claim {'>' if above else '<'} {bound:g})", interval=(lo, hi), n=20,
          unit="×", kind="interval", n_of="pair", detail=f"20 interleaved pairs; ratios {min(r):.3g}–{max(r):.3g}",
          extra={"bound": bound, "side": "above" if above else "below", "ratios": r})


def test_paired_ratio_at_the_interval_ends_and_too_few_pairs():
    a, b = ratio_case(20)
    r = [x / y for x, y in zip(a, b)]
    lo, hi = order_interval(r)
    assert V.paired_ratio(a, b, above=lo).held is None and V.paired_ratio(a, b, above=hi).held is None
    assert V.paired_ratio(a, b, below=lo).held is None and V.paired_ratio(a, b, below=hi).held is None
    a19, b19 = ratio_case(19)
    r19 = [x / y for x, y in zip(a19, b19)]
    check(V.paired_ratio(a19, b19, below=3.0, unit="x"), effect=float(np.median(r19)),
          effect_name="median a / b (claim < 3)", n=19, unit="x", kind="interval", n_of="pair",
          detail="fewer than 20 interleaved pairs: no interval")
    check(V.paired_ratio([], [], above=1.0), effect=NAN, effect_name="median a / b (claim > 1)", unit="×",
          kind="interval", n_of="pair", detail="fewer than 20 interleaved pairs: no interval")
    for kw in ({}, {"above": 1.0, "below": 2.0}):
        with pytest.raises(ValueError, match=r"^paired_ratio needs exactly one of above= or below=$"):
            V.paired_ratio(a, b, **kw)
    with pytest.raises(ValueError, match=r"^paired_ratio needs interleaved pairs: 20 and 19 measurements$"):
        V.paired_ratio(a, b[:19], above=1.0)


# ------------------------------------------------------------------------------ deterministic


def test_deterministic_every_field_and_exactly_at_the_tolerance():
    check(V.deterministic(1.25, expected=1.0, tol=0.25, what="c", unit="pts", detail="eq. 3"), held=True,
          statistic="c = 1.25 pts; needs |c − 1| ≤ 0.25", value=1.25, effect=1.25, detail="eq. 3",
          extra={"tol": 0.25}, unit="pts", kind="deterministic")
    check(V.deterministic(0.75, expected=1.0, tol=0.25), held=True, statistic="value = 0.75; needs |value − 1| ≤ 0.25",
          value=0.75, effect=0.75, extra={"tol": 0.25}, kind="deterministic")
    check(V.deterministic(1.2500001, expected=1.0, tol=0.25), held=False,
          statistic="value = 1.25; needs |value − 1| ≤ 0.25", value=1.2500001, effect=1.2500001, extra={"tol": 0.25},
          kind="deterministic")
    check(V.deterministic(2.0, expected=2.0), held=True, statistic="value = 2; needs |value − 2| ≤ 0",
          value=2.0, effect=2.0, extra={"tol": 0.0}, kind="deterministic")
    check(V.deterministic(0.9, at_least=1.0, tol=0.1, what="r"), held=True, statistic="r = 0.9; needs r ≥ 1 − 0.1",
          value=0.9, effect=0.9, extra={"tol": 0.1}, kind="deterministic")
    check(V.deterministic(0.89, at_least=1.0, tol=0.1), held=False, statistic="value = 0.89; needs value ≥ 1 − 0.1",
          value=0.89, effect=0.89, extra={"tol": 0.1}, kind="deterministic")
    check(V.deterministic(1.0, at_least=1.0), held=True, statistic="value = 1; needs value ≥ 1 − 0",
          value=1.0, effect=1.0, extra={"tol": 0.0}, kind="deterministic")
    for bad in (NAN, INF, -INF):
        check(V.deterministic(bad, expected=1.0, what="w", unit="u", detail="d"), statistic="w: no finite value",
              effect=bad, detail="d", unit="u", kind="deterministic")
    check(V.deterministic(NAN, at_least=1.0), statistic="value: no finite value", effect=NAN, kind="deterministic")
    assert type(V.deterministic(1.0, expected=1.0).held) is bool
    for kw in ({}, {"expected": 1.0, "at_least": 1.0}):
        with pytest.raises(ValueError, match=r"^deterministic needs exactly one of expected= or at_least=$"):
            V.deterministic(1.0, **kw)


# ------------------------------------------------------------------------------ all_of / _interval_at


def tverdict(d, **kw):
    return V.compare(seeds(d), seeds([0.0] * len(d)), **kw)


def test_interval_at_recomputes_a_t_interval_and_a_ratio_interval():
    d = [-1.0, -1.5, -0.7, -1.2]
    v = tverdict(d)
    assert V._interval_at(v, 0.975) == pytest.approx(t_test(d, 0.975)[3])
    a, b = ratio_case(20)
    r = V.paired_ratio(a, b, above=2.0)
    assert V._interval_at(r, 0.99) == order_interval(r.extra["ratios"], 0.99)
    x = V.exponent_vs_foil(0.6, (0.55, 0.7), 0.7, 0.5, what="a", runs=4)
    assert V._interval_at(x, 0.99) == (0.55, 0.7)
    # a t-verdict with one seed or no spread keeps its own interval
    assert V._interval_at(dataclasses.replace(v, n=1), 0.99) == v.interval
    assert V._interval_at(dataclasses.replace(v, spread=NAN), 0.99) == v.interval
    two = dataclasses.replace(v, n=2)
    q = stats.t.ppf(1 - 0.01 / 2, 1) * v.spread / math.sqrt(2)
    assert V._interval_at(two, 0.99) == pytest.approx((v.effect - q, v.effect + q))
    # an interval verdict with a spread is not a t-interval
    assert V._interval_at(dataclasses.replace(x, n=5, spread=1.0), 0.99) == (0.55, 0.7)


@pytest.mark.parametrize("ds", [([-1.0, -1.5, -0.7, -1.2], [-0.5, -0.9, -0.2, -0.6]),
                                ([-1.0, -1.5, -0.7, -1.2], [0.8, 1.0, 0.6, 0.95]),
                                ([-1.0, -1.5, -0.7, -1.2], [-0.5, 0.9, -0.2, 0.6]),
                                ([0.5, 0.9, 0.2, 0.6], [0.8, 1.0, 0.6, 0.95])])
def test_all_of_t_parts_every_field(ds):
    parts = {"s1": tverdict(ds[0], unit="pts"), "s2": tverdict(ds[1], unit="pts")}
    k = 2
    p_claim = max(v.p_claim for v in parts.values())
    p_against = min(1.0, k * min(v.p_against for v in parts.values()))
    held = decide(p_claim, p_against)
    dec = (min(parts, key=lambda n: parts[n].p_against) if held is False
           else max(parts, key=lambda n: parts[n].p_claim))
    v0 = parts[dec]
    d = ds[0] if dec == "s1" else ds[1]
    interval, level = (t_test(d, 1 - 0.05 / k)[3], 1 - 0.05 / k) if held is False else (v0.interval, 0.95)
    words = "; ".join(f"{n}: mean a − b {V._g(v.effect)} {v.word}" for n, v in parts.items())
    check(V.all_of(parts, what="per size"), held=held, statistic=f"per size: all 2 parts must hold; deciding: {dec}; "
          f"{v0.statistic}", value=v0.value, p_claim=p_claim, p_against=p_against, effect=v0.effect,
          effect_name=v0.effect_name, interval=tuple(interval), level=level, n=4, spread=v0.spread, detail=words,
          unit="pts", extra={"deciding": dec, "parts": 2})
    assert V.all_of(parts).statistic.startswith("every part: all 2 parts")


def test_all_of_caps_the_corrected_reverse_p_at_one():
    parts = {"a": tverdict([-0.1, -0.2, 0.05]), "b": tverdict([-0.2, -0.3, 0.1]), "c": tverdict([-0.1, 0.3, -0.3])}
    assert 3 * min(v.p_against for v in parts.values()) > 1
    assert V.all_of(parts).p_against == 1.0


def test_all_of_untested_and_empty():
    parts = {"a": tverdict([-1.0, -2.0, -1.5], unit="pts"), "b": tverdict([-1.0, -2.0]),
             "c": V.paired_ratio([1.0], [1.0], above=2.0)}
    words = "; ".join(f"{n}: {v.effect_name} {V._g(v.effect)} {v.word}" for n, v in parts.items())
    check(V.all_of(parts, unit="pts"), n=1, unit="pts", detail=f"no test at b, c; {words}")
    check(V.all_of({"c": parts["c"], "b": parts["b"]}), n=1, detail="no test at c, b; " + "; ".join(
        f"{n}: {v.effect_name} {V._g(v.effect)} {v.word}" for n, v in (("c", parts["c"]), ("b", parts["b"]))),
        kind="interval")
    check(V.all_of({}, unit="pts"), detail="nothing to test", unit="pts")
    check(V.all_of({}), detail="nothing to test")


def ratio_verdict(r0, **kw):
    a, b = ratio_case(20, r0)
    return V.paired_ratio(a, b, **kw)


@pytest.mark.parametrize("r0s,held,dec", [((2.5, 2.6), True, "x"), ((2.0, 1.5), False, "y"), ((2.5, 2.0), None, "y"),
                                          ((2.5, 1.5), False, "y"), ((1.5, 2.5), False, "x"), ((2.0, 2.5), None, "x")])
def test_all_of_interval_parts_every_field(r0s, held, dec):
    parts = {"x": ratio_verdict(r0s[0], above=2.0), "y": ratio_verdict(r0s[1], above=2.0)}
    v0 = parts[dec]
    level = 1 - 0.05 / 2
    interval, lev = ((order_interval(v0.extra["ratios"], level), level) if held is False
                     else (v0.interval, v0.level))
    words = "; ".join(f"{n}: {v.effect_name} {V._g(v.effect)} {v.word}" for n, v in parts.items())
    check(V.all_of(parts), held=held, statistic=f"every part: all 2 parts must hold; deciding: {dec}; {v0.statistic}",
          value=v0.value, effect=v0.effect, effect_name=v0.effect_name, interval=tuple(interval), level=lev, n=20,
          detail=words, unit="×", kind="interval", n_of="pair", extra={**v0.extra, "deciding": dec, "parts": 2})


def test_all_of_interval_parts_reversed_exactly_at_the_bound():
    """A wide interval whose end touches the bound is not reversed (strict), on either side."""
    lo_end = ratio_verdict(1.5, above=2.0)
    w = order_interval(lo_end.extra["ratios"], 1 - 0.05 / 2)
    at_hi = V.paired_ratio(*ratio_case(20, 1.5), above=w[1])
    assert V.all_of({"x": at_hi, "y": ratio_verdict(1.5, above=0.5)}).held is None
    at_lo = V.paired_ratio(*ratio_case(20, 1.5), below=w[0])
    assert V.all_of({"x": at_lo, "y": ratio_verdict(1.5, below=5.0)}).held is None
    below = V.paired_ratio(*ratio_case(20, 1.5), below=1.0)
    assert V.all_of({"x": ratio_verdict(1.5, below=5.0), "y": below}).held is False
    # a part without a bound (an exponent) is never reversed; the first unheld part decides
    x = V.exponent_vs_foil(0.4, (0.3, 0.45), 0.7, 0.5, what="a", runs=4)
    v = V.all_of({"r": ratio_verdict(2.5, above=2.0), "e": x})
    assert v.held is None and v.extra["deciding"] == "e"


# ------------------------------------------------------------------------------ power


def power_oracle(n, effect, spread):
    """Both tails of the noncentral t; a tail scipy cannot evaluate (NaN, far out at df = 1) from
    the normal approximation."""
    crit = stats.t.ppf(0.975, n - 1)
    nc = abs(effect) * math.sqrt(n) / spread
    upper, lower = stats.nct.sf(crit, n - 1, nc), stats.nct.cdf(-crit, n - 1, nc)
    upper = upper if math.isfinite(upper) else stats.norm.sf(crit - nc)
    lower = lower if math.isfinite(lower) else stats.norm.cdf(-crit - nc)
    return upper + lower


@pytest.mark.parametrize("n,effect,spread", [(3, 1.0, 1.0), (5, -0.7, 0.5), (10, 0.3, 2.0), (2, 4.0, 1.0),
                                             (4, 0.0, 1.0)])
def test_power_against_the_noncentral_t(n, effect, spread):
    assert V._power(n, effect, spread) == pytest.approx(power_oracle(n, effect, spread), rel=1e-9)


def test_power_edges():
    assert math.isnan(V._power(1, 1.0, 1.0)) and math.isnan(V._power(3, 1.0, 0.0))
    assert math.isnan(V._power(3, 1.0, -1.0)) and math.isnan(V._power(3, 1.0, NAN))
    assert V._power(4, 1e6, 1.0) == 1.0
    crit = stats.t.ppf(0.975, 3)
    # just at the switch to "numerically 1": nc = crit + 40 still uses the noncentral t
    eff = (crit + 40) / math.sqrt(4)
    assert V._power(4, eff, 1.0) == pytest.approx(power_oracle(4, eff, 1.0)) or math.isnan(power_oracle(4, eff, 1.0))
    assert V._power(4, eff, 1.0) <= 1.0


def test_power_falls_back_to_the_normal_when_scipy_fails(monkeypatch):
    import scipy.stats as ss
    from scipy.stats import norm

    class Broken:
        @staticmethod
        def sf(*a):
            return NAN

        @staticmethod
        def cdf(*a):
            return NAN

    monkeypatch.setattr(ss, "nct", Broken)
    crit = stats.t.ppf(0.975, 5)
    nc = 0.8 * math.sqrt(6) / 0.5
    assert V._power(6, 0.8, 0.5) == pytest.approx(norm.sf(crit - nc) + norm.cdf(-crit - nc), rel=1e-12)


@pytest.mark.parametrize("spread,n,power", [(1.0, 3, 0.8), (0.5, 10, 0.8), (2.0, 5, 0.9), (1.0, 2, 0.5)])
def test_detectable_effect_has_the_asked_power(spread, n, power):
    e = V.detectable_effect(spread, n, power)
    assert power_oracle(n, e, spread) == pytest.approx(power, abs=1e-6)


def test_detectable_effect_edges():
    for spread, n in ((1.0, 1), (0.0, 5), (-1.0, 5), (NAN, 5), (INF, 5)):
        assert math.isnan(V.detectable_effect(spread, n))
    # n = 2 is tested (one degree of freedom)
    assert V.detectable_effect(1.0, 2) > 0


def seeds_oracle(effect, spread, power=0.8):
    n = 2
    while power_oracle(n, effect, spread) < power:
        n += 1
    return n


@pytest.mark.parametrize("effect,spread,power", [(1.0, 1.0, 0.8), (0.5, 1.0, 0.8), (-0.3, 0.5, 0.9), (3.0, 0.5, 0.8),
                                                 (1.0, 1.0, 0.5), (0.25, 1.0, 0.8), (50.0, 1.0, 0.8)])
def test_seeds_needed_is_the_smallest_n_with_the_power(effect, spread, power):
    assert V.seeds_needed(effect, spread, power) == seeds_oracle(effect, spread, power)


def test_seeds_needed_edges():
    for e, s in ((0.0, 1.0), (NAN, 1.0), (1.0, 0.0), (1.0, NAN), (INF, 1.0)):
        assert V.seeds_needed(e, s) is None
    n = seeds_oracle(0.5, 1.0)
    assert V.seeds_needed(0.5, 1.0, max_n=64) == n and n <= 64
    assert V.seeds_needed(0.5, 1.0, max_n=n - 1 if n > 33 else 16) is None
    assert V.seeds_needed(1.0, 1.0) == seeds_oracle(1.0, 1.0)
    assert type(V.seeds_needed(1.0, 1.0)) is int
    # exactly at the power: the n whose power is the target counts
    n1 = seeds_oracle(1.0, 1.0)
    assert V.seeds_needed(1.0, 1.0, power=power_oracle(n1, 1.0, 1.0)) == n1


# ------------------------------------------------------------------------------ printing


def test_g_formats_three_digits_signed_and_the_infinities():
    assert V._g(NAN) == "–" and V._g(INF) == "+∞" and V._g(-INF) == "−∞"
    assert V._g(999.4) == "+999" and V._g(1000.0) == "+1000" and V._g(1000.4) == "+1000" and V._g(-1234.5) == "-1234"
    assert V._g(999.96) == "+1e+03" and V._g(0.012345, signed=False) == "0.0123"


def test_summary_spells_out_every_part():
    v = V.Verdict(held=True, statistic="paired t (df = 2)", value=-5.0, p_claim=0.01, p_against=0.99, effect=-1.5,
                  effect_name="mean a − b", interval=(-2.0, -1.0), n=3, unit="pts", detail="note")
    assert v.summary() == ("paired t (df = 2) = -5; p = 0.01 one-sided (decides at 0.025 each way); "
                           "mean a − b -1.5 pts [95% CI -2, -1] pts; n = 3 seeds — note")
    r = V.Verdict(held=None, statistic="median", value=2.0, effect=244.0, effect_name="median r",
                  interval=(238.0, 1200.0), level=0.975, n=1, unit="×", kind="interval", n_of="pair")
    assert r.summary() == "median; median r 244× [97.5% CI 238, 1200]; n = 1 pair"
    r2 = dataclasses.replace(r, interval=None, effect=-INF, p_against=0.001)
    assert r2.summary() == "median; median r −∞×; n = 1 pair"
    d = V.Verdict(held=False, statistic="x = 1", p_against=0.00001, effect=INF, effect_name="e", kind="deterministic")
    assert d.summary() == "x = 1; p = < 1e-4 one-sided (decides at 0.025 each way); e +∞; deterministic computation: " \
                          "no seeds needed"
    assert V.Verdict(held=None).summary() == "n = 0 seeds"
    assert V.Verdict(held=None, effect_name="e", effect=NAN, interval=(NAN, 1.0), n=2).summary() == \
        "e –; [95% CI –, +1]".replace("; [", " [") + "; n = 2 seeds"


def test_p_and_to_dict_every_key():
    v = V.Verdict(held=False, statistic="s", value=2.0, p_claim=0.9, p_against=0.01, effect=1.0, effect_name="e",
                  interval=(0.5, 1.5), level=0.975, n=4, spread=0.3, detail="d", extra={"k": 1}, unit="u")
    assert v.p == 0.01 and v.p_two_sided == 0.02 and v.word == "DID NOT HOLD"
    want = {"held": False, "verdict": "DID NOT HOLD", "statistic": "s", "value": 2.0, "p": 0.01, "p_claim": 0.9,
            "p_against": 0.01, "p_two_sided": 0.02, "effect": 1.0, "effect_name": "e", "interval": [0.5, 1.5],
            "level": 0.975, "n": 4, "spread": 0.3, "detail": "d", "unit": "u", "kind": "test", "k": 1}
    assert v.to_dict() == want and list(v.to_dict()) == list(want)
    e = V.Verdict(held=None)
    assert e.to_dict() == {"held": None, "verdict": "UNDECIDED", "statistic": "", "value": None, "p": None,
                           "p_claim": None, "p_against": None, "p_two_sided": None, "effect": None, "effect_name": "",
                           "interval": None, "level": 0.95, "n": 0, "spread": None, "detail": "", "unit": "",
                           "kind": "test"}
    assert V.Verdict(held=True, p_claim=0.7, p_against=INF).p_two_sided == 1.0
    assert V.Verdict(held=True, p_claim=0.3).p == 0.3 and V.Verdict(held=None, p_claim=0.3, p_against=0.1).p == 0.3
    with pytest.raises(ValueError, match=r"^Verdict kind must be one of test, interval, deterministic, not 'x'$"):
        V.Verdict(held=None, kind="x")


def test_power_at_one_degree_of_freedom_keeps_the_tail_scipy_can_compute():
    """At n = 2 scipy's noncentral t returns NaN for the far lower tail only; the upper tail (the
    whole power, practically) is still exact. (The power used to switch both tails to the normal
    approximation here: 1e-5 instead of 0.49, and a detectable effect at n = 2 off by a jump.)"""
    crit, nc = stats.t.ppf(0.975, 1), 3.0 * math.sqrt(2) / 0.5
    assert math.isnan(stats.nct.cdf(-crit, 1, nc))  # the failure this guards (scipy's, today)
    assert V._power(2, 3.0, 0.5) == pytest.approx(stats.nct.sf(crit, 1, nc) + stats.norm.cdf(-crit - nc), rel=1e-12)
    assert V._power(2, 3.0, 0.5) > 0.49
    e = V.detectable_effect(1.0, 2, 0.5)
    assert power_oracle(2, e, 1.0) == pytest.approx(0.5, abs=1e-6)


def test_paired_t_two_values():
    t, pl, pg, ci = V.paired_t([1.0, 3.0])
    et, epl, epg, eci = t_test([1.0, 3.0])
    assert (t, pl, pg) == pytest.approx((et, epl, epg)) and ci == pytest.approx(eci)


def test_median_interval_at_low_levels_reaches_the_middle():
    for n, level in ((4, 0.2), (5, 0.0), (6, 0.3), (7, 0.0), (8, 0.1)):
        x = [float(v) for v in range(n)]
        assert V.median_interval(x, level) == order_interval(x, level), (n, level)


def test_decisions_exactly_at_the_tail_do_not_decide():
    def tv(pc, pa):
        return V.Verdict(held=None, statistic="s", value=1.0, p_claim=pc, p_against=pa, effect=-1.0, effect_name="e",
                         interval=(-2.0, 0.0), n=4, spread=1.0)
    assert V.all_of({"a": tv(0.025, 0.5), "b": tv(0.001, 0.9)}).held is None
    assert V.all_of({"a": tv(0.9, 0.0125), "b": tv(0.8, 0.3)}).held is None
    assert V.all_of({"a": tv(0.9, 0.0124), "b": tv(0.8, 0.3)}).held is False


def test_all_of_deciding_part_when_p_values_do_not_mirror():
    def tv(pc, pa):
        return V.Verdict(held=None, statistic="s", value=1.0, p_claim=pc, p_against=pa, effect=-1.0, effect_name="e",
                         interval=(-2.0, 0.0), n=4, spread=1.0)
    held = V.all_of({"a": tv(0.02, 0.9), "b": tv(0.01, 0.5)})
    assert held.held is True and held.extra["deciding"] == "a" and held.p_claim == 0.02 and held.p_against == 1.0
    rev = V.all_of({"b": tv(0.95, 0.05), "a": tv(0.9, 0.001)})
    assert rev.held is False and rev.extra["deciding"] == "a" and rev.p_claim == 0.95 and rev.p_against == 0.002
    none = V.all_of({"a": tv(0.3, 0.2), "b": tv(0.2, 0.1)})
    assert none.held is None and none.extra["deciding"] == "a" and none.p_against == 0.2


def test_all_of_mixed_parts_keep_the_deciding_t_parts_p_values():
    t = tverdict([-1.0, 0.5, -0.2])
    v = V.all_of({"t": t, "r": ratio_verdict(2.5, above=2.0)})
    assert v.held is None and v.extra["deciding"] == "t"
    assert v.p_claim == t.p_claim and v.p_against == t.p_against


def test_lowest_of_a_tied_group_is_the_weakest_part():
    """A group equal to the target on every seed (zero spread, zero mean: p = 1 both ways) is the
    part the claim is weakest on, though another part is nearer to reversing."""
    t = seeds([1.0, 2.0, 3.0])
    g = {"t": t, "u": dict(t), "w": {s: v - d for (s, v), d in zip(t.items(), (0.1, 0.3, 0.2))}}
    v = V.lowest_of(g, "t")
    assert v.held is None and v.extra["deciding"] == "u" and v.p_claim == 1.0


def test_defaults_name_and_unit():
    a, b = seeds([1.0, 1.1, 0.9]), seeds([1.0, 1.05, 0.95])
    assert V.equivalent(a, b, 0.5).unit == "" and V.lowest_of({"t": a, "u": b}, "t").unit == ""
    w = V.worst_of(a, {"u": b})
    assert w.statistic.startswith("target the highest: ") and w.unit == ""
    assert V.worst_of(a, {"u": b}, unit="pts").unit == "pts"


def test_optimum_within_vertex_of_a_three_point_mean_curve():
    x = [0.0, 1.0, 2.0]
    ys = {s: [(xi - v) ** 2 for xi in x] for s, v in enumerate((0.8, 1.1, 1.0))}
    v = V.optimum_within(x, ys, 0.0, 2.0)
    assert v.extra["vertex"] == pytest.approx(np.mean([0.8, 1.1, 1.0]))


def test_power_with_only_the_upper_tail_failing_keeps_the_lower(monkeypatch):
    import scipy.stats as ss

    real = ss.nct

    class UpperBroken:
        @staticmethod
        def sf(*a):
            return NAN

        cdf = staticmethod(real.cdf)

    monkeypatch.setattr(ss, "nct", UpperBroken)
    crit, nc = stats.t.ppf(0.975, 4), 0.3 * math.sqrt(5) / 1.0
    want = stats.norm.sf(crit - nc) + real.cdf(-crit, 4, nc)
    assert V._power(5, 0.3, 1.0) == pytest.approx(want, rel=1e-12)


def test_benjamini_hochberg_of_one_and_of_ints():
    assert V.benjamini_hochberg([0.3]) == [0.3] and V.benjamini_hochberg([]) == []
    assert V.benjamini_hochberg([1, 0]) == [1.0, 0.0]


def test_p_at_the_print_threshold():
    assert V._p(1e-4) == "0.0001" and V._p(9.9e-5) == "< 1e-4"


@pytest.mark.parametrize("x", [[-1.0, 0.0, 1.0], [0.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0], [10.0, 10.5, 12.0, 13.0]])
def test_the_vertex_is_the_parabolas_and_a_line_has_none(x):
    """The vertex x* of a(x − x*)² + c is x* (anywhere, either sign of a); a line or a constant has
    none (NaN), though its least-squares c2 is ~1e-16 rather than 0."""
    xa = np.array(x)
    for a, star in ((1.0, 0.3), (-2.5, 11.2), (1e-3, 2.0)):
        assert V._vertex(xa, a * (xa - star) ** 2 + 4.0) == pytest.approx(star, rel=1e-9, abs=1e-9)
    for slope in (1.0, 2.0, -3e-4, 0.0):
        assert math.isnan(V._vertex(xa, slope * xa + 7.0))


@pytest.mark.parametrize("k, vertex", [(2e-6, True), (0.5e-6, False)])
def test_the_vertex_needs_curvature_above_1e9_of_the_largest_value_over_x_scaled_to_its_range(k, vertex):
    """y = 1000 + k x² on x ∈ {−1, 0, 1} (x already spans [−1, 1]): a vertex (at 0) when k exceeds
    1e-9 · max|y| = 1e-6, NaN below it."""
    x = np.array([-1.0, 0.0, 1.0])
    got = V._vertex(x, 1000.0 + k * x ** 2)
    assert (got == pytest.approx(0.0, abs=1e-6)) if vertex else math.isnan(got)
    scaled = V._vertex(10 * x + 5, 1000.0 + k * x ** 2)  # the same curve over x' = 10x + 5: the same decision
    assert (scaled == pytest.approx(5.0, abs=1e-5)) if vertex else math.isnan(scaled)
