"""The statistical verdict rules on synthetic results whose answer is known."""
import math

import numpy as np
import pytest

from mlplab.experiments.verdicts import (ALPHA, Verdict, best_is_interior, compare, deterministic, holm, holm_decision,
                                         interior_optimum, lowest_of, noninferior, paired_t, quadratic_minimum,
                                         ratio_interval, trend, worst_of)

# fig6-like sweep: pairs sorted by C, S ≈ C in the middle (twins 41/40 and 40/41)
S = [124, 83, 41, 40, 16, 8]
C = [8, 16, 40, 41, 83, 124]
X = np.log(np.array(S) / np.array(C))


def seeds_of(curve, n=3, noise=0.1, rng=0):
    g = np.random.default_rng(rng)
    return {s: list(np.asarray(curve, float) + noise * g.standard_normal(len(curve))) for s in range(n)}


def test_paired_t_matches_scipy():
    from scipy.stats import ttest_1samp

    d = [-1.0, -0.4, -0.9, 0.2]
    t, p_less, p_greater, (lo, hi) = paired_t(d)
    ref = ttest_1samp(d, 0.0, alternative="less")
    assert t == pytest.approx(ref.statistic, rel=1e-12)
    assert p_less == pytest.approx(ref.pvalue, rel=1e-12)
    assert p_greater == pytest.approx(1 - ref.pvalue, rel=1e-12)
    ci = ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert (lo, hi) == (pytest.approx(ci.low, rel=1e-12), pytest.approx(ci.high, rel=1e-12))


def test_paired_t_without_spread():
    assert paired_t([-1.0, -1.0, -1.0])[1:3] == (0.0, 1.0)
    assert paired_t([0.0, 0.0, 0.0])[1:3] == (1.0, 1.0)


def test_holm_adjusts_in_step_down_order():
    assert holm([0.01, 0.04]) == pytest.approx([0.02, 0.04])
    assert holm([0.04, 0.01]) == pytest.approx([0.04, 0.02])
    assert holm([0.03, 0.03, 0.5]) == pytest.approx([0.09, 0.09, 0.5])


# ---------------------------------------------------------------------- interior optimum (fig6)


def test_clear_minimum_at_s_equals_c_holds():
    v = interior_optimum(S, C, seeds_of(20 + 2 * X ** 2))
    assert v.held is True and v.n == 3 and v.p < ALPHA
    assert v.effect > 0 and v.interval[0] > 0
    lo, hi = v.extra["argmin_interval"]
    assert lo <= 1.0 <= hi and abs(math.log(v.extra["argmin_S_over_C"])) < 0.3


def test_monotone_curve_did_not_hold():
    v = interior_optimum(S, C, seeds_of(20 + 2 * X, n=5))
    assert v.held is False and v.p < ALPHA
    assert "no interior minimum" in v.detail  # the parabola's minimum sits at an end


def test_interior_parabola_minimum_is_not_called_an_end():
    assert "no interior minimum" not in interior_optimum(S, C, seeds_of(20 + 2 * X ** 2)).detail


def test_flat_side_like_the_issue_table_is_not_held():
    # issue 8's measured means (2 seeds there; here 3 seeds with its spread of ~0.5 points)
    means = [42.18, 34.94, 29.87, 28.13, 29.12, 28.26]
    v = interior_optimum(S, C, seeds_of(means, noise=0.5, rng=1))
    assert v.held is not True


def test_pure_noise_is_undecided():
    v = interior_optimum(S, C, seeds_of([30.0] * 6, n=4, noise=1.0, rng=2))
    assert v.held is None


def test_fewer_than_three_seeds_is_undecided_even_with_a_clear_minimum():
    v = interior_optimum(S, C, seeds_of(20 + 5 * X ** 2, n=2, noise=0.01))
    assert v.held is None and v.n == 2 and "fewer than 3 seeds" in v.detail


def test_missing_runs_drop_the_seed():
    ys = seeds_of(20 + 2 * X ** 2, n=4)
    ys[3][0] = float("nan")  # seed 3 lost an end point
    assert interior_optimum(S, C, ys).n == 3


def test_interior_needs_a_centre_inside_the_sweep():
    assert interior_optimum([8, 16, 32], [32, 16, 8][::-1], seeds_of([1, 2, 3])).held is None
    assert interior_optimum([16, 16], [8, 16], seeds_of([1, 2])).held is None


def test_quadratic_minimum_finds_the_vertex_and_clips():
    x = np.linspace(-2, 2, 5)
    est, (lo, hi) = quadratic_minimum(x, {0: list((x - 0.5) ** 2), 1: list((x - 0.5) ** 2 + 1)})
    assert est == pytest.approx(0.5) and lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
    est, _ = quadratic_minimum(x, {0: list(-x)})  # decreasing: the minimum at the right end
    assert est == pytest.approx(2.0)


# ---------------------------------------------------------------------- trend (fig5, fig4, fig7, figS2)

M = [64, 128, 256, 512]


def test_falling_trend_holds_and_rising_did_not_hold():
    falling = seeds_of([40, 35, 31, 28])
    v = trend(M, falling, sign=-1)
    assert v.held is True and v.effect < 0 and v.interval[1] < 0 and v.n == 3
    assert trend(M, falling, sign=+1).held is False
    assert trend(M, seeds_of([28, 31, 35, 40]), sign=-1).held is False


def test_trend_of_noise_is_undecided():
    assert trend(M, seeds_of([30, 30, 30, 30], n=4, noise=1.0, rng=3), sign=-1).held is None


def test_trend_slope_is_per_doubling():
    v = trend(M, {s: [10.0 - 2 * k for k in range(4)] for s in range(3)}, sign=-1)
    assert v.effect == pytest.approx(-2.0) and v.held is True


def test_trend_needs_three_seeds_and_three_points():
    assert trend(M, seeds_of([40, 35, 31, 28], n=2), sign=-1).held is None
    assert trend([1, 2], seeds_of([2, 1]), sign=-1).held is None


# ---------------------------------------------------------------------- compare (table1, fig4)


def test_compare_both_directions_and_noise():
    a = {0: 10.0, 1: 10.5, 2: 9.8}
    b = {0: 12.0, 1: 12.2, 2: 11.9}
    v = compare(a, b)
    assert v.held is True and v.effect == pytest.approx(np.mean([-2.0, -1.7, -2.1]))
    assert compare(b, a).held is False
    g = np.random.default_rng(4)
    noise = {s: float(g.normal()) for s in range(4)}
    assert compare(noise, {s: 0.0 for s in range(4)}).held is None


def test_compare_pairs_by_seed_and_needs_three():
    assert compare({0: 1.0, 1: 1.0}, {0: 2.0, 1: 2.0}).held is None
    assert compare({0: 1.0, 1: 1.1, 2: 0.9, 5: 0.0}, {0: 2.0, 1: 2.1, 2: 1.8}).n == 3


# ---------------------------------------------------------------------- worst_of (figS4)


def test_worst_of():
    target = {0: 20.0, 1: 20.5, 2: 19.8}
    others = {"block 1": {0: 15.0, 1: 15.2, 2: 15.1}, "block 2": {0: 14.0, 1: 14.3, 2: 14.2}}
    assert worst_of(target, others).held is True
    # block 2 is as bad as block 0: not all comparisons hold
    assert worst_of(target, {**others, "block 2": {0: 20.1, 1: 20.3, 2: 19.9}}).held is not True
    # block 1 clearly worse than block 0
    assert worst_of(target, {"block 1": {0: 25.0, 1: 25.5, 2: 25.2}}).held is False
    assert worst_of({0: 1.0}, {"b": {0: 0.0}}).held is None


# ---------------------------------------------------------------------- noninferior (fig2d, fig4 λ_max)


def test_noninferior_within_beyond_and_noise():
    monarch = {0: 12.0, 1: 12.4, 2: 11.8, 3: 12.1, 4: 12.2}
    close = {s: v + 0.2 + 0.05 * (s % 2) for s, v in monarch.items()}  # 0.2 points worse: inside a 1-point margin
    v = noninferior(close, monarch, 1.0, unit="points")
    assert v.held is True and v.p < ALPHA and v.effect == pytest.approx(0.22) and v.interval[1] < 1.0
    assert "points" in v.summary()
    far = {s: v + 3.0 + 0.1 * (s % 2) for s, v in monarch.items()}  # 3 points worse
    assert noninferior(far, monarch, 1.0).held is False
    g = np.random.default_rng(5)  # pure noise of sd 3 around a difference at the margin: cannot tell
    noisy = {s: monarch[s] + 1.0 + 3.0 * float(g.normal()) for s in monarch}
    assert noninferior(noisy, monarch, 1.0).held is None


def test_noninferior_against_a_constant_and_needs_three_seeds():
    lam = {0: 2.43, 1: 2.45, 2: 2.41}
    c = 1 + math.sqrt(2)
    assert noninferior(lam, c, 0.1).held is True
    assert noninferior({s: x + 1.0 for s, x in lam.items()}, c, 0.1).held is False
    assert noninferior({0: 2.4, 1: 2.4}, c, 0.1).held is None
    with pytest.raises(ValueError, match="margin"):
        noninferior(lam, c, -1.0)


# ---------------------------------------------------------------------- lowest_of / best_is_interior (figS5, fig2b)


def patches(curve, n=5, noise=0.2, rng=0):
    g = np.random.default_rng(rng)
    return {k: {s: y + noise * float(g.normal()) for s in range(n)} for k, y in curve.items()}


def test_lowest_of_holds_fails_and_is_undecided():
    groups = patches({"P=1": 20.0, "P=2": 15.0, "P=4": 12.0, "P=7": 13.5, "P=14": 18.0})
    v = lowest_of(groups, "P=4", unit="points")
    assert v.held is True and v.extra["closest"] == "P=7" and v.effect == pytest.approx(1.5, abs=0.4)
    assert lowest_of(groups, "P=14").held is False  # P=4 is significantly lower than P=14
    noise = patches({k: 15.0 for k in ("a", "b", "c")}, noise=1.0, rng=2)
    assert lowest_of(noise, "a").held is None
    assert lowest_of(patches({"a": 1.0, "b": 2.0}, n=2), "a").held is None  # 2 seeds
    with pytest.raises(ValueError, match="target"):
        lowest_of(groups, "P=3")


def test_worst_of_is_lowest_of_read_upwards():
    groups = patches({"block 0": 20.0, "block 1": 15.0, "block 2": 14.0}, n=3)
    a = worst_of(groups["block 0"], {k: v for k, v in groups.items() if k != "block 0"})
    b = lowest_of(groups, "block 0", higher=True)
    assert a.held is b.held is True and a.p == pytest.approx(b.p)


def test_best_is_interior():
    order = ["P=1", "P=2", "P=4", "P=7", "P=14"]
    inner = patches({"P=1": 20.0, "P=2": 15.0, "P=4": 12.0, "P=7": 13.5, "P=14": 18.0})
    v = best_is_interior(order, inner)
    assert v.held is True and v.extra["best"] == "P=4" and "inner point" in v.detail
    monotone = patches({"P=1": 10.0, "P=2": 12.0, "P=4": 14.0, "P=7": 16.0, "P=14": 18.0})
    v = best_is_interior(order, monotone)
    assert v.held is False and v.extra["best"] == "P=1"
    flat = patches({k: 15.0 for k in order}, noise=1.0, rng=7)
    assert best_is_interior(order, flat).held is None
    assert best_is_interior(order, patches({"P=1": 20.0, "P=2": 15.0, "P=4": 12.0, "P=7": 13.5, "P=14": 18.0},
                                           n=2)).held is None
    # CKA peaks: the highest inner point
    cka = patches({"p=1": 0.4, "p=1/4": 0.6, "p=1/16": 0.7, "p=1/256": 0.5}, noise=0.02)
    assert best_is_interior(list(cka), cka, higher=True).held is True


# ---------------------------------------------------------------------- ratio_interval (tableS3)


def test_ratio_interval_above_below_and_straddling():
    g = np.random.default_rng(0)
    mixer = list(6.0 + 0.1 * g.standard_normal(9))
    sw = list(28.0 + 0.5 * g.standard_normal(9))
    rp = list(6.3 + 0.1 * g.standard_normal(9))
    v = ratio_interval(sw, mixer, above=2.0, unit="×")
    assert v.held is True and v.effect == pytest.approx(28 / 6, rel=0.05) and v.interval[0] > 2.0
    assert v.kind == "interval" and "9 measurements" in v.summary()
    assert ratio_interval(rp, mixer, below=1.10).held is True
    assert ratio_interval(sw, mixer, below=1.10).held is False
    assert ratio_interval(mixer, sw, above=2.0).held is False
    noisy = list(6.6 + 1.5 * g.standard_normal(9))  # ratio near 1.10 with a wide spread
    assert ratio_interval(noisy, mixer, below=1.10).held is None
    assert ratio_interval(sw[:2], mixer[:2], above=2.0).held is None
    with pytest.raises(ValueError, match="exactly one"):
        ratio_interval(sw, mixer)


# ---------------------------------------------------------------------- deterministic (figS9, implicit-bias)


def test_deterministic_is_a_tolerance_check_without_seeds():
    v = deterministic(0.125, expected=1 / 8, tol=1e-12, what="density")
    assert v.held is True and v.kind == "deterministic" and "no seeds needed" in v.summary()
    assert deterministic(0.13, expected=1 / 8, tol=1e-3).held is False
    assert deterministic(-1e-9, at_least=0.0, tol=1e-6).held is True
    assert deterministic(-0.1, at_least=0.0, tol=1e-6).held is False
    assert deterministic(float("nan"), at_least=0.0).held is None
    with pytest.raises(ValueError):
        deterministic(1.0)


def test_verdict_prints_its_unit_and_refuses_an_unknown_kind():
    v = compare({0: 10.0, 1: 10.5, 2: 9.8}, {0: 12.0, 1: 12.2, 2: 11.9}, unit="points of test error")
    assert "points of test error" in v.summary() and v.to_dict()["unit"] == "points of test error"
    t = trend(M, seeds_of([40, 35, 31, 28]), sign=-1, what="Δ error", unit="points")
    assert t.unit == "points" and t.effect_name == "mean Δ error per doubling"
    with pytest.raises(ValueError, match="kind"):
        Verdict(held=None, kind="guess")
    with pytest.raises(TypeError):  # keyword-only: eleven positional numbers and strings are easy to swap
        Verdict(True, "paired t", 1.0, 0.01)


def test_holm_decision_held_refuted_undecided():
    """Holm over two tests: adjusted p's 2·min, then max(that, the other); HELD needs every claim
    test to reject, a single reverse test rejecting refutes."""
    claim, against, held, p = holm_decision([0.01, 0.02], [0.99, 0.98])
    assert claim == [0.02, 0.02] and held is True and p == 0.02
    claim, against, held, p = holm_decision([0.01, 0.6], [0.99, 0.01])
    assert against == [0.99, 0.02] and held is False and p == 0.02
    _, _, held, p = holm_decision([0.01, 0.6], [0.99, 0.4])
    assert held is None and p == 0.6
