"""The verdict rules on made-up numbers with known answers, each statistic against an independent
computation written here (numpy / scipy): the decision, the p-values of both directions, the
effect and the interval that matches the decision, the seeds, and the spread power is computed
from. (Under the null the rules are simulated in test_verdict_null.py.)"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mlplab.experiments import verdicts as V

NAN = float("nan")


def seeds(values, start=0):
    return {start + i: float(v) for i, v in enumerate(values)}


def t_test(d, level=0.95):
    """The paired t-test written out: t, p(mean < 0), p(mean > 0), the two-sided interval."""
    d = np.asarray(d, float)
    n, m, sd = d.size, d.mean(), d.std(ddof=1)
    se = sd / math.sqrt(n)
    q = stats.t.ppf(1 - (1 - level) / 2, n - 1)
    return m / se, stats.t.cdf(m / se, n - 1), stats.t.sf(m / se, n - 1), (m - q * se, m + q * se)


# ------------------------------------------------------------------------------ the level


def test_the_level_is_two_sided_five_percent():
    assert V.ALPHA == 0.05 and V.TAIL == 0.025 and V.MIN_SEEDS == 3 and V.MIN_PAIRS == 20 and V.POWER == 0.8


# ------------------------------------------------------------------------------ compare


def test_compare_fields_against_scipy():
    a, b = seeds([1.0, 1.4, 0.9, 1.2, 1.1]), seeds([2.0, 2.1, 2.4, 1.9, 2.3])
    d = [a[s] - b[s] for s in a]
    t, pl, pg, ci = t_test(d)
    v = V.compare(a, b, what="a − b", unit="points")
    assert v.held is True and v.word == "HELD"
    assert v.value == pytest.approx(t) and v.p_claim == pytest.approx(pl) and v.p_against == pytest.approx(pg)
    assert v.p == v.p_claim and v.p_two_sided == pytest.approx(2 * pl)
    assert v.interval == pytest.approx(ci) and v.level == 0.95 and v.interval[1] < 0
    assert v.effect == pytest.approx(np.mean(d)) and v.spread == pytest.approx(np.std(d, ddof=1))
    assert v.n == 5 and v.statistic == "paired t (df = 4)" and v.effect_name == "mean a − b" and v.unit == "points"
    w = V.compare(b, a)
    assert w.held is False and w.p == w.p_against == pytest.approx(pl) and w.interval[0] > 0


def test_compare_decides_exactly_at_the_tail():
    """p just below 2.5% one-sided decides, at 5% (the old level) it does not."""
    d = np.array([-1.0, -0.2, -0.5, -1.3])
    for target, decided in ((0.024, True), (0.026, None), (0.049, None)):
        # shift d so that its one-sided p equals the target
        n, sd = d.size, d.std(ddof=1)
        mean = stats.t.ppf(target, n - 1) * sd / math.sqrt(n)
        x = d - d.mean() + mean
        v = V.compare(seeds(x), seeds([0.0] * n))
        assert v.p_claim == pytest.approx(target) and v.held is decided


def test_compare_needs_three_paired_finite_seeds():
    v = V.compare({0: 1.0, 1: 2.0, 2: NAN, 5: 0.0}, {0: 3.0, 1: 4.0, 2: 1.0, 3: 0.0})
    assert v.held is None and v.n == 2 and v.effect == -2.0 and "fewer than 3 paired seeds" in v.detail
    assert math.isnan(v.p_claim) and v.interval is None and math.isnan(V.compare({}, {}).effect)


def test_zero_spread():
    t, pl, pg, ci = V.paired_t([1.0, 1.0, 1.0])
    assert t == math.inf and (pl, pg) == (1.0, 0.0) and ci == (1.0, 1.0)
    assert V.paired_t([0.0, 0.0, 0.0]) == (0.0, 1.0, 1.0, (0.0, 0.0))
    assert V.compare(seeds([1, 1, 1]), seeds([2, 2, 2])).held is True


# ------------------------------------------------------------------------------ trend


def test_trend_is_a_t_test_of_per_seed_slopes_against_log2_x():
    x = [1, 2, 4, 8]
    ys = {0: [10, 9, 8.5, 7], 1: [11, 9.5, 9, 7.5], 2: [10, 9.8, 8, 7.1]}
    slopes = [np.polyfit(np.log2(x), y, 1)[0] for y in ys.values()]
    t, pl, pg, ci = t_test(slopes)
    v = V.trend(x, ys, sign=-1, what="Δ error", unit="points")
    assert v.held is True and v.value == pytest.approx(t) and v.p_claim == pytest.approx(pl)
    assert v.effect == pytest.approx(np.mean(slopes)) and v.interval == pytest.approx(ci)
    assert v.effect_name == "mean Δ error per doubling" and v.extra["rho_mean"] == -1.0
    up = V.trend(x, ys, sign=+1)
    assert up.held is False and up.p_claim == pytest.approx(pg) and up.p_against == pytest.approx(pl)
    lin = V.trend([0.5, 1.0, 1.5], {s: [1 + s, 2 + s, 3.1 + s] for s in range(3)}, sign=+1, log_x=False)
    assert lin.effect_name == "mean slope" and lin.effect == pytest.approx(np.polyfit([0.5, 1, 1.5], [1, 2, 3.1], 1)[0])


def test_trend_skips_seeds_with_fewer_than_three_finite_points():
    v = V.trend([1, 2, 4], {0: [3, 2, 1], 1: [3, NAN, 1], 2: [3, 2, 1.5]})
    assert v.held is None and v.n == 2 and "fewer than 3 seeds with ≥ 3 points" in v.detail


# ------------------------------------------------------------------------------ margins


def test_noninferior_tests_against_the_margin_and_shows_the_plain_interval():
    a, b = seeds([1.2, 0.8, 1.1, 0.9, 1.0]), seeds([1.0] * 5)
    d = [a[s] - b[s] for s in a]
    t, pl, pg, _ = t_test([x - 0.5 for x in d])
    v = V.noninferior(a, b, 0.5, what="K − M", unit="points")
    assert v.held is True and v.p_claim == pytest.approx(pl) and v.value == pytest.approx(t)
    assert v.interval == pytest.approx(t_test(d)[3]) and v.interval[1] < 0.5 and v.extra["margin"] == 0.5
    assert V.noninferior(seeds([3.0, 3.1, 2.9, 3.05]), 0.0, 1.0).held is False  # a constant b
    for bad in (-1.0, NAN, "1"):
        with pytest.raises(ValueError, match="finite margin"):
            V.noninferior(a, b, bad)


def test_equivalence_is_the_95_interval_inside_the_margins():
    b = seeds([0.0] * 6)
    inside = V.equivalent(seeds([0.1, -0.2, 0.05, 0.15, -0.1, 0.0]), b, 1.0)
    assert inside.held is True and -1 < inside.interval[0] and inside.interval[1] < 1
    beyond = V.equivalent(seeds([3.0, 3.2, 2.9, 3.1, 3.05, 2.95]), b, 1.0)
    assert beyond.held is False and beyond.interval[0] > 1
    below = V.equivalent(seeds([-3.0, -3.2, -2.9, -3.1, -3.05, -2.95]), b, 1.0)
    assert below.held is False and below.interval[1] < -1
    wide = V.equivalent(seeds([2.0, -2.0, 1.5, -1.0, 0.5, 0.0]), b, 1.0)
    assert wide.held is None
    assert V.equivalent(seeds([0.0, 0.1]), seeds([0.0, 0.0]), 1.0).n == 2
    # the margin travels with the verdict (the power of a margin rule is sized on the distance to it)
    assert inside.extra == {"margin": 1.0, "equivalence": True}
    assert V.noninferior(seeds([0.1, -0.2, 0.05, 0.15, -0.1, 0.0]), b, 1.0).extra == {"margin": 1.0}


# ------------------------------------------------------------------------------ several parts


def test_lowest_of_is_an_intersection_union_test():
    """HELD needs every comparison at 2.5% (no correction); the interval is the weakest one's, at 95%."""
    g = {"t": seeds([1.0, 1.1, 0.9, 1.0, 1.05]), "a": seeds([2.0, 2.2, 1.9, 2.1, 2.0]),
         "b": seeds([1.6, 1.5, 1.7, 1.5, 1.6])}
    v = V.lowest_of(g, "t", unit="points")
    dt = {k: [g["t"][s] - g[k][s] for s in range(5)] for k in ("a", "b")}
    tb = t_test(dt["b"])
    assert v.held is True and v.extra["deciding"] == "b" and v.p_claim == pytest.approx(max(t_test(dt["a"])[1], tb[1]))
    assert v.effect == pytest.approx(-np.mean(dt["b"])) and v.interval == pytest.approx((-tb[3][1], -tb[3][0]))
    assert v.level == 0.95 and v.extra["parts"] == 2


def test_lowest_of_reversed_is_bonferroni_corrected_with_a_wider_interval():
    g = {"t": seeds([3.0, 3.1, 2.9, 3.2]), "a": seeds([1.0, 1.1, 0.9, 1.0]), "b": seeds([3.0, 3.0, 3.1, 3.0]),
         "c": seeds([3.1, 2.9, 3.0, 3.1])}
    v = V.lowest_of(g, "t")
    da = [g["t"][s] - g["a"][s] for s in range(4)]
    ta = t_test(da, level=1 - 0.05 / 3)
    assert v.held is False and v.extra["deciding"] == "a"
    assert v.p_against == pytest.approx(min(1.0, 3 * t_test(da)[1 if False else 2]))
    assert v.level == pytest.approx(1 - 0.05 / 3) and v.interval == pytest.approx((-ta[3][1], -ta[3][0]))


def test_lowest_of_highest_and_worst_of():
    g = {"t": seeds([5.0, 5.1, 4.9]), "a": seeds([1.0, 1.2, 0.9]), "b": seeds([2.0, 2.1, 1.8])}
    assert V.lowest_of(g, "t", higher=True).held is True and V.worst_of(g["t"], {"a": g["a"], "b": g["b"]},
                                                                        name="t").held is True
    with pytest.raises(ValueError, match="not one of the groups"):
        V.lowest_of(g, "zz")
    with pytest.raises(ValueError, match="at least one group"):
        V.lowest_of({"t": g["t"]}, "t")
    with pytest.raises(ValueError, match="also one of the others"):
        V.worst_of(g["t"], {"t": g["a"]}, name="t")
    assert V.lowest_of({"t": seeds([1, 2]), "a": seeds([3, 4])}, "t").held is None


def test_all_of_needs_every_part_and_corrects_the_reverse():
    held = V.compare(seeds([1.0, 1.1, 0.9, 1.0]), seeds([2.0, 2.1, 2.2, 2.0]))
    flat = V.compare(seeds([1.0, 2.0, 1.5, 0.5]), seeds([1.5, 1.0, 1.0, 1.5]))
    rev = V.compare(seeds([3.0, 3.1, 2.9, 3.0]), seeds([1.0, 1.1, 1.2, 1.0]))
    assert V.all_of({"x": held, "y": held}).held is True
    assert V.all_of({"x": held, "y": flat}).held is None
    out = V.all_of({"x": held, "y": rev})
    assert out.held is False and out.extra["deciding"] == "y" and out.p_against == pytest.approx(2 * rev.p_against)
    assert out.level == pytest.approx(0.975) and out.interval[0] > 0
    assert V.all_of({}).held is None
    few = V.all_of({"x": held, "y": V.compare(seeds([1]), seeds([2]))})
    assert few.held is None and "no test at y" in few.detail


def test_all_of_over_interval_parts():
    up = V.paired_ratio([2.0] * 25, [1.0] * 25, above=1.5)
    down = V.paired_ratio([1.0] * 25, [1.0] * 25, above=1.5)
    assert V.all_of({"a": up, "b": up}).held is True
    assert V.all_of({"a": up, "b": down}).held is False
    mid = V.paired_ratio(list(np.linspace(1.2, 1.8, 25)), [1.0] * 25, above=1.5)
    assert mid.held is None and V.all_of({"a": up, "b": mid}).held is None


# ------------------------------------------------------------------------------ optimum_within


def test_optimum_within_a_window_reads_the_parabolas_slopes():
    x = np.log([1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8])
    ys = {s: list(0.5 * (x - 0.1 * s) ** 2 + 10) for s in range(4)}
    lo, hi = math.log(0.5), math.log(2)
    v = V.optimum_within(x, ys, lo, hi, what="error", unit="points", x_name="log(S/C)")
    s_lo = [np.polyval(np.polyder(np.polyfit(x, y, 2)), lo) for y in ys.values()]
    s_hi = [np.polyval(np.polyder(np.polyfit(x, y, 2)), hi) for y in ys.values()]
    assert v.held is True and v.p_claim == pytest.approx(max(t_test(s_lo)[1], t_test(s_hi)[2]))
    weak = v.extra["deciding"]
    assert v.effect == pytest.approx(np.mean(s_lo if weak == "lo" else s_hi))
    assert v.extra["vertex"] == pytest.approx(0.15, abs=1e-6)  # the seed-mean curve's vertex: mean shift 0.1 × 1.5
    right = {s: list(0.5 * (x - 1.5 - 0.01 * s) ** 2) for s in range(4)}  # minimum at S/C = e^1.5 ≈ 4.5
    out = V.optimum_within(x, right, lo, hi)
    assert out.held is False and out.extra["deciding"] == "hi" and out.level == pytest.approx(0.975)
    assert out.interval[1] < 0  # the slope at the upper bound is still negative: the minimum lies beyond


def test_optimum_within_a_maximum_and_its_edges():
    x = [0, 1, 2, 3, 4]
    ys = {s: [-(v - 2) ** 2 + 0.01 * s for v in x] for s in range(3)}
    assert V.optimum_within(x, ys, 0, 4, maximum=True).held is True
    assert V.optimum_within(x, ys, 0, 4).held is False  # read as a minimum it is at an end
    assert V.optimum_within([1, 1, 2], ys, 1, 2).held is None
    with pytest.raises(ValueError, match="lo < hi"):
        V.optimum_within(x, ys, 3, 1)
    with pytest.raises(ValueError, match="min x ≤ lo"):
        V.optimum_within(x, ys, -1, 2)
    v = V.optimum_within(x, {0: ys[0], 1: [NAN] * 5}, 0, 4)
    assert v.held is None and v.n == 1


# ------------------------------------------------------------------------------ intervals


def test_the_median_interval_is_the_order_statistics_with_binomial_coverage():
    x = list(range(20))
    lo, hi = V.median_interval(x)
    k = max(k for k in range(1, 11) if stats.binom.cdf(k - 1, 20, 0.5) <= 0.025)
    assert (lo, hi) == (x[k - 1], x[20 - k]) == (5.0, 14.0)
    assert V.median_interval([1, 2, 3, 4, 5]) == (-math.inf, math.inf)  # 5 values: no 95% interval
    assert V.median_interval([1.0, 2.0, 3.0, 4.0, 5.0] + [NAN] * 20) == (-math.inf, math.inf)  # NaN dropped


def test_paired_ratio_takes_per_round_ratios():
    a = [2.0 + 0.01 * i for i in range(25)]
    b = [1.0 + 0.02 * (i % 3) for i in range(25)]
    r = sorted(x / y for x, y in zip(a, b))
    v = V.paired_ratio(a, b, above=1.5, what="SW / Mixer")
    assert v.held is True and v.effect == pytest.approx(np.median(r)) and v.n == 25
    assert v.interval == pytest.approx(V.median_interval(r)) and v.extra["ratios"] == [x / y for x, y in zip(a, b)]
    assert V.paired_ratio(a, b, below=1.5).held is False and V.paired_ratio(a, b, below=5.0).held is True
    few = V.paired_ratio(a[:19], b[:19], above=1.5)
    assert few.held is None and few.n == 19 and "fewer than 20 interleaved pairs" in few.detail
    with pytest.raises(ValueError, match="exactly one"):
        V.paired_ratio(a, b)
    with pytest.raises(ValueError, match="interleaved pairs"):
        V.paired_ratio(a, b[:3], above=1)


def test_exponent_vs_foil_every_outcome():
    assert V.exponent_vs_foil(0.35, (0.2, 0.45), 0.35, 0.5, what="β_P", runs=40).held is True
    assert V.exponent_vs_foil(0.7, (0.6, 0.8), 0.35, 0.5, what="β_P", runs=40).held is False
    mid = V.exponent_vs_foil(0.45, (0.3, 0.6), 0.35, 0.5, what="β_P", runs=40)
    assert mid.held is None and "holds it" in mid.detail
    assert V.exponent_vs_foil(0.8, (0.6, 0.9), 0.65, 0.5, what="β_N", runs=40).held is True  # published above the foil
    assert V.exponent_vs_foil(0.3, (NAN, 0.4), 0.35, 0.5, what="β", runs=3).held is None
    with pytest.raises(ValueError, match="must differ"):
        V.exponent_vs_foil(0.5, (0.4, 0.6), 0.5, 0.5, what="β", runs=3)


def test_deterministic():
    assert V.deterministic(0.125, expected=1 / 8).held is True
    assert V.deterministic(0.13, expected=1 / 8, tol=1e-3).held is False
    assert V.deterministic(-1e-12, at_least=0.0, tol=1e-10).held is True
    assert V.deterministic(NAN, expected=0).held is None
    with pytest.raises(ValueError, match="exactly one"):
        V.deterministic(1.0)


def test_benjamini_hochberg_against_the_definition():
    p = [0.01, 0.04, 0.03, 0.2, 0.001]
    m = len(p)
    order = np.argsort(p)
    ref = np.empty(m)
    ref[order] = np.minimum.accumulate((np.array(p)[order] * m / np.arange(1, m + 1))[::-1])[::-1]
    assert V.benjamini_hochberg(p) == pytest.approx(list(np.minimum(ref, 1)))
    assert V.benjamini_hochberg([]) == []


def test_a_verdict_summarises_itself_and_serialises():
    v = V.compare(seeds([1.0, 1.1, 0.9]), seeds([2.0, 2.1, 2.2]), what="a − b", unit="points")
    s = v.summary()
    assert "paired t (df = 2)" in s and "95% CI" in s and "n = 3 seeds" in s and "decides at 0.025" in s
    d = v.to_dict()
    assert d["verdict"] == "HELD" and d["p_two_sided"] == pytest.approx(2 * v.p_claim) and d["level"] == 0.95
    with pytest.raises(ValueError, match="kind"):
        V.Verdict(held=None, kind="vibe")


def test_a_ratio_prints_unsigned_with_its_unit_once_a_difference_signed():
    ratio = V.paired_ratio([244.0] * 25, [1.0] * 25, above=10, what="MLP / ResNet")
    s = ratio.summary()
    assert "MLP / ResNet (claim > 10) 244× [95% CI 244, 244]" in s
    assert "+244" not in s and s.count("×") == 1
    big = V.paired_ratio([1234.5] * 25, [1.0] * 25, above=10).summary()
    assert "1234×" in big or "1235×" in big
    diff = V.compare(seeds([1.0, 1.1, 0.9]), seeds([2.0, 2.1, 2.2]), what="a − b", unit="points")
    assert "mean a − b -1.1 points [95% CI -1.53, -0.67] points" in diff.summary()
    up = V.compare(seeds([2.0, 2.1, 2.2]), seeds([1.0, 1.1, 0.9]), what="a − b", unit="points")
    assert "mean a − b +1.1 points [95% CI +0.67, +1.53] points" in up.summary()
