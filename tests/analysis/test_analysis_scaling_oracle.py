"""Scaling fits (mlplab.analysis.scaling) against scipy and loops written here: the fit of E(C) on
noisy runs is at least as good, in log-E least squares, as scipy's least_squares started from the
truth; the bootstrap is its resampling loop written out; bad input is refused in one sentence."""
from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import OptimizeWarning, least_squares
from scipy.optimize import curve_fit as scipy_curve_fit

import mlplab.analysis.scaling as scaling
from mlplab.analysis.scaling import (
    PUBLISHED_EXPONENTS,
    ScalingBootstrap,
    ScalingLawFit,
    bootstrap_scaling,
    compute_budget,
    compute_optimal_frontier,
    fit_frontier_exponents,
    fit_power,
    fit_scaling_law,
    scaling_law,
)


def _runs(n=14, noise=0.05, seed=0, a=300.0, b=5e10, alpha=0.2, e_inf=0.07):
    rng = np.random.default_rng(seed)
    C = np.logspace(9, 17, n)
    return C, scaling_law(C, a, b, alpha, e_inf) * np.exp(noise * rng.standard_normal(n))


def test_the_fit_is_scipys_log_least_squares_minimum():
    C, E = _runs()

    def resid(p):  # parameters (log a, log10 b, α, E∞) in raw units of C
        log_a, log10_b, alpha, e_inf = p
        return np.log(np.exp(log_a) * (10.0 ** log10_b + C) ** -alpha + e_inf) - np.log(E)

    ref = least_squares(resid, [math.log(300.0), math.log10(5e10), 0.2, 0.07], xtol=1e-15, ftol=1e-15, gtol=1e-15,
                        bounds=([-50, 0, 1e-4, 0], [50, 25, 10, 0.999 * E.min()]))
    sse_ref = float(np.sum(ref.fun ** 2))
    fit = fit_scaling_law(C, E)
    sse = float(np.sum((np.log(scaling_law(C, fit.a, fit.b, fit.alpha, fit.e_inf)) - np.log(E)) ** 2))
    assert sse <= sse_ref * (1 + 1e-6)
    assert fit.rmse_log == pytest.approx(math.sqrt(sse / C.size), rel=1e-6)
    assert fit.alpha == pytest.approx(ref.x[2], rel=0.05) and fit.e_inf == pytest.approx(ref.x[3], abs=0.01)
    np.testing.assert_allclose(fit.predict(C), scaling_law(C, fit.a, fit.b, fit.alpha, fit.e_inf), rtol=1e-9)
    assert fit.log10_a == pytest.approx(math.log10(fit.a), rel=1e-12)
    assert 0 < fit.alpha_err < 1 and 0 <= fit.e_inf_err < 1 and fit.num_points == 14
    assert fit.to_dict()["alpha"] == fit.alpha and set(fit.to_dict()) == {
        "a", "b", "alpha", "e_inf", "alpha_err", "e_inf_err", "log10_a", "rmse_log", "num_points"}


def test_runs_without_a_positive_finite_c_and_e_are_left_out():
    C, E = _runs()
    bad_C = np.r_[C[:7], 0.0, -1.0, np.nan, np.inf, 1e12, 1e13, C[7:]]
    bad_E = np.r_[E[:7], 0.5, 0.5, 0.5, 0.5, 0.0, np.nan, E[7:]]
    assert fit_scaling_law(bad_C, bad_E) == fit_scaling_law(C, E)
    with pytest.raises(ValueError, match="C and E must have the same length, got 3 and 2"):
        fit_scaling_law([1.0, 2.0, 3.0], [0.5, 0.4])
    with pytest.raises(ValueError, match="need at least 4 runs with positive finite C and E, got 3"):
        fit_scaling_law([1.0, 2.0, 3.0, 4.0], [0.5, 0.4, 0.3, -0.1])
    assert fit_scaling_law(C[::4], E[::4]).num_points == 4  # four are enough


def test_the_floor_stays_below_the_smallest_error_and_b_zero_when_fixed():
    C, E = _runs(b=0.0, noise=0.01)
    pure = fit_scaling_law(C, E, fix_b_zero=True)
    assert pure.b == 0.0 and pure.e_inf == pytest.approx(0.07, abs=0.01) and pure.alpha == pytest.approx(0.2, abs=0.02)
    flat = fit_scaling_law(C[:12], np.full(12, 0.3) * np.exp(0.01 * np.random.default_rng(1).standard_normal(12)))
    assert 0.0 <= flat.e_inf < 0.999 * 0.3 * math.exp(0.03) and 1e-4 <= flat.alpha <= 10.0


def test_a_start_from_p0_is_tried_first():
    C, E = _runs(noise=0.0, a=40.0, b=3e9, alpha=0.25, e_inf=0.05)
    fit = fit_scaling_law(C, E, p0={"a": 40.0, "b": 3e9, "alpha": 0.25, "e_inf": 0.05}, maxfev=50)
    assert fit.alpha == pytest.approx(0.25, rel=1e-6) and fit.b == pytest.approx(3e9, rel=1e-4)
    assert fit.a == pytest.approx(40.0, rel=1e-5) and fit.rmse_log < 1e-9
    partial = fit_scaling_law(C, E, p0={"alpha": 0.25})  # the rest default
    assert partial.alpha == pytest.approx(0.25, rel=1e-3)


def test_fit_power_refusals_and_overflow():
    with pytest.raises(ValueError, match="need at least two distinct x values to fit a power law"):
        fit_power([2.0], [3.0])
    with pytest.raises(ValueError, match="need at least two distinct x values"):
        fit_power([2.0, 2.0, 2.0], [1.0, 2.0, 3.0])
    beta, k = fit_power([2.0, 3.0], [1e300, 1e-300])  # log k = 690 + 3404·log 2 > 700: k overflows
    assert beta == pytest.approx(-600 * math.log(10) / math.log(1.5)) and k == math.inf
    assert fit_power([1.0, 2.0], [5.0, 5.0]) == pytest.approx((0.0, 5.0), abs=1e-12)


def test_frontier_exponents_by_hand_and_refusals():
    C = np.array([1.0, 2.0, 4.0, 8.0, 3.0])
    E = np.array([0.9, 0.7, 0.5, 0.3, 0.95])  # the last run is off the frontier
    P, N = C ** 0.3 * 2.0, C ** 0.7 * 5.0
    out = fit_frontier_exponents(C, E, params=P, examples=N)
    assert out["frontier"] == [0, 1, 2, 3] and out["num_frontier"] == 4 and out["method"] == "pareto"
    assert out["beta_P"] == pytest.approx(0.3, abs=1e-12) and out["beta_P_coef"] == pytest.approx(2.0, rel=1e-12)
    assert out["beta_N"] == pytest.approx(0.7, abs=1e-12) and out["beta_N_coef"] == pytest.approx(5.0, rel=1e-12)
    assert out["beta_N_minus_published"] == pytest.approx(0.7 - 0.65, abs=1e-12)
    assert out["published"] == PUBLISHED_EXPONENTS and out["published"] is not PUBLISHED_EXPONENTS
    only_p = fit_frontier_exponents(C, E, params=P)
    assert "beta_N" not in only_p and "beta_P" in only_p
    assert fit_frontier_exponents(C, E, P, N, method="bucket", num_buckets=2)["frontier"] == \
        compute_optimal_frontier(C, E, "bucket", num_buckets=2).tolist()
    with pytest.raises(ValueError, match=r"P values must match the runs \(5\), got 4"):
        fit_frontier_exponents(C, E, params=P[:4])
    with pytest.raises(ValueError, match=r"N values must match the runs \(5\), got 6"):
        fit_frontier_exponents(C, E, examples=np.r_[N, 1.0])
    with pytest.raises(ValueError, match="C and E must be non-empty and of the same length"):
        compute_optimal_frontier([], [])
    with pytest.raises(ValueError, match="C and E must be non-empty and of the same length"):
        compute_optimal_frontier([1.0, 2.0], [0.5])
    with pytest.raises(ValueError, match="unknown frontier method 'best'; choose pareto, hull or bucket"):
        compute_optimal_frontier(C, E, "best")


def test_bootstrap_is_its_resampling_loop_written_out():
    C, E = _runs(n=8, noise=0.03, seed=2)
    P, N = C ** 0.35, C ** 0.65 * np.exp(0.05 * np.random.default_rng(3).standard_normal(8))
    boot = bootstrap_scaling(C, E, P, N, resamples=12, seed=5)
    rng = np.random.default_rng(5)
    alphas, bp, bn = [], [], []
    for _ in range(12):
        i = rng.integers(0, 8, 8)
        if np.unique(C[i]).size >= 4:
            try:
                alphas.append(fit_scaling_law(C[i], E[i], maxfev=2000).alpha)
            except (RuntimeError, ValueError):
                pass
        try:
            fr = fit_frontier_exponents(C[i], E[i], P[i], N[i])
        except ValueError:
            continue
        bp.append(fr["beta_P"])
        bn.append(fr["beta_N"])
    assert boot == ScalingBootstrap(tuple(np.percentile(alphas, [2.5, 97.5])), tuple(np.percentile(bp, [2.5, 97.5])),
                                    tuple(np.percentile(bn, [2.5, 97.5])), len(alphas), len(bp), 12)
    assert 0 < boot.alpha_draws <= 12 and boot.to_dict()["resamples"] == 12
    none = bootstrap_scaling(np.full(4, 1e9), E[:4], P[:4], N[:4], resamples=3)  # one compute value: nothing fits
    assert none.alpha_draws == 0 and none.frontier_draws == 0 and all(math.isnan(v) for v in none.alpha + none.beta_P)
    with pytest.raises(ValueError, match="need C, E, params and examples of one length >= 4, got 8, 8, 8, 7"):
        bootstrap_scaling(C, E, P, N[:7])
    with pytest.raises(ValueError, match="of one length >= 4, got 3, 3, 3, 3"):
        bootstrap_scaling(C[:3], E[:3], P[:3], N[:3])


# ----------------------------------------------------------------------------- input types
# Python ints beyond int64 become object arrays in numpy, on which np.log fails; int64 values that
# differ below 2^53 are one float64; float16 overflows at 65504: every input is read as float64.

def test_compute_and_predictions_are_float64_for_any_numeric_input():
    got = compute_budget([10**20, 10**21], [10**20, 1], [1, 10**20])  # beyond uint64 too
    assert got.dtype == np.float64
    np.testing.assert_allclose(np.log10(got), [40 + math.log10(3), 41 + math.log10(3)], rtol=1e-15)
    assert compute_budget(np.float16(30000), 1, 1) == 90000.0  # 3 · 30000 overflows float16
    fit = ScalingLawFit(a=2.0, b=1e19, alpha=0.5, e_inf=0.1, alpha_err=0.0, e_inf_err=0.0,
                        log10_a=math.log10(2.0), rmse_log=0.0, num_points=4)
    np.testing.assert_allclose(fit.predict([10**20, 10**21]),
                               [2.0 / math.sqrt(1.1e20) + 0.1, 2.0 / math.sqrt(1.01e21) + 0.1], rtol=1e-12)
    np.testing.assert_allclose(np.log(scaling_law([10**20, 10**21], 2.0, 1e19, 0.5, 0.1)),
                               np.log([2.0 / math.sqrt(1.1e20) + 0.1, 2.0 / math.sqrt(1.01e21) + 0.1]), rtol=1e-12)
    C, E = _runs(n=8, seed=4)
    big = [int(c) * 10**4 for c in C]  # up to 10^21
    assert fit_scaling_law(big, [Fraction(e) for e in E]) == fit_scaling_law(np.asarray(big, dtype=float), E)
    beta, k = fit_power([10**20, 10**22], [10**30, 10**31])  # y = 10^20 x^0.5
    assert beta == pytest.approx(0.5, rel=1e-12) and k == pytest.approx(1e20, rel=1e-9)


def test_k_is_infinite_only_beyond_the_largest_float():
    beta, k = fit_power([1.0, 2.0], [math.exp(705.0), math.exp(705.0)])  # log k = 705 < log(max float) = 709.78
    assert beta == pytest.approx(0.0, abs=1e-12) and k == pytest.approx(math.exp(705.0), rel=1e-9)
    assert fit_power([2.0, 4.0], [1e300, 1e200])[1] == math.inf  # log k = log 1e300 + log 1e100 = 921
    with pytest.raises(ValueError, match="^need at least two distinct x values to fit a power law$"):
        fit_power([2.0, 2.0], [1.0, 2.0])


def test_frontier_compares_c_and_e_as_float64():
    # 2^53 + 1 and 2^53 are one float64: the tie in C is broken by the lower error (run 0)
    assert compute_optimal_frontier([2**53 + 1, 2**53, 2**54], [0.3, 0.5, 0.2]).tolist() == [0, 2]
    assert compute_optimal_frontier([1.0, 2.0, 4.0], [2**53 + 1, 2**53, 2**52]).tolist() == [0, 2]
    with pytest.raises(ValueError, match="^C and E must be non-empty and of the same length$"):
        compute_optimal_frontier([1.0], [])


def test_failed_runs_are_on_no_frontier():
    # a NaN error is no lowest error of its bin; a NaN or non-positive compute no least compute
    C, E = [1.0, 2.0, 4.0, 8.0], [0.5, math.nan, 0.3, 0.2]
    assert compute_optimal_frontier(C, E, "bucket", num_buckets=2).tolist() == [0, 3]  # bins {1, 2}, {4, 8}
    C, E = [1.0, 2.0, math.nan, -4.0, math.inf, 3.0, 0.0], [0.5, 0.4, 0.1, 0.05, 0.01, math.inf, 0.001]
    for method in ("pareto", "hull", "bucket"):
        assert compute_optimal_frontier(C, E, method, num_buckets=1 if method == "bucket" else 10).tolist() == \
            ([1] if method == "bucket" else [0, 1])


def test_hull_vertices_by_hand():
    # log-log slopes between successive runs -1, -0.52, -0.18: strictly convex, every run a vertex
    C, E = [10.0, 100.0, 1000.0, 10000.0], [1.0, 0.1, 0.03, 0.02]
    assert compute_optimal_frontier(C, E, "hull").tolist() == [0, 1, 2, 3]
    # the second run above the chord of its neighbours (log 0.45 > (log 0.5 + log 0.3)/2)
    assert compute_optimal_frontier([20.0, 40.0, 80.0, 160.0], [0.5, 0.45, 0.3, 0.29], "hull").tolist() == [0, 2, 3]


def test_a_frontier_of_failed_runs_is_empty_and_still_indexes():
    C = np.array([1.0, 2.0, 4.0])
    for method in ("pareto", "hull", "bucket"):
        idx = compute_optimal_frontier(C, [math.nan] * 3, method)
        assert idx.size == 0 and idx.dtype.kind == "i" and C[idx].size == 0
    with pytest.raises(ValueError, match="need at least two distinct x values"):  # not an IndexError
        fit_frontier_exponents(C, [math.nan] * 3, params=[1.0, 2.0, 3.0])


def test_ten_buckets_by_default():
    C, E = 10.0 ** np.arange(12), np.linspace(1.0, 0.1, 12)
    # ten bins of 1.1 decades: decade d in bin ⌊d / 1.1⌋ (11 in the last), the best of each its largest
    want = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]
    assert compute_optimal_frontier(C, E, "bucket").tolist() == want
    assert fit_frontier_exponents(C, E, params=C ** 0.5, method="bucket")["frontier"] == want


def test_bootstrap_defaults_and_what_each_resample_refits(monkeypatch):
    """The resampling loop written out with fit_scaling_law replaced by a recorder (the real one is
    tested above) and the real frontier fits: 500 resamples from seed 0 by default, α refitted
    (with maxfev 2000) when a resample has >= 4 distinct compute values as float64, the frontier
    by the method asked for, and a resample whose frontier is one run skipped, not the rest."""
    C = [2**53, 2**53 + 1, 2**54, 2**55, 2**56, 2**57]  # five distinct float64 values in six runs
    E = [0.2, 0.5, 0.45, 0.3, 0.29, 0.28]  # run 0 alone is the frontier of every resample with it
    P, N = [1.0, 2.0, 3.0, 5.0, 7.0, 11.0], [13.0, 11.0, 7.0, 5.0, 3.0, 2.0]
    calls = []

    def recorder(c, e, **kw):
        calls.append(kw)
        return ScalingLawFit(float(np.sum(c)) / 2**60, 0.0, float(np.sum(c)) / 2**60, 0.0, 0.0, 0.0, 0.0, 0.0, 4)

    monkeypatch.setattr(scaling, "fit_scaling_law", recorder)
    boot = bootstrap_scaling(C, E, P, N, method="hull")
    Cf, Ef, Pf, Nf = (np.asarray(v, dtype=np.float64) for v in (C, E, P, N))
    rng = np.random.default_rng(0)
    alphas, bp, bn, distinct = [], [], [], []
    for _ in range(500):
        i = rng.integers(0, 6, 6)
        distinct.append(np.unique(Cf[i]).size)
        if distinct[-1] >= 4:
            alphas.append(float(np.sum(Cf[i])) / 2**60)
        try:
            fr = fit_frontier_exponents(Cf[i], Ef[i], Pf[i], Nf[i], method="hull")
        except ValueError:
            continue
        bp.append(fr["beta_P"])
        bn.append(fr["beta_N"])
    assert boot == ScalingBootstrap(tuple(np.percentile(alphas, [2.5, 97.5])), tuple(np.percentile(bp, [2.5, 97.5])),
                                    tuple(np.percentile(bn, [2.5, 97.5])), len(alphas), len(bp), 500)
    assert calls == [{"maxfev": 2000}] * len(alphas)
    # the table tells these apart: resamples of exactly 4 distinct values, skipped frontiers in the
    # middle of the loop, and hull frontiers that differ from the Pareto ones
    assert distinct.count(4) > 0 and 0 < 500 - len(bp) and len(bp) > 0
    assert bootstrap_scaling(C, E, P, N).beta_P != boot.beta_P


# ----------------------------------------------------------------------------- the fit's recipe

def _documented_starts(C, E, p0=None, fix_b_zero=False):
    """fit_scaling_law's docstring written out: the bounds and the starts (log A, log10 b', α, E∞)."""
    C0 = math.exp(np.mean(np.log(C)))
    x, emin = C / C0, float(np.min(E))
    lower = [-200.0, -10.0, 1e-4, 0.0]
    upper = [200.0, -9.999999 if fix_b_zero else math.log10(1e3 * np.max(C) / C0), 10.0, 0.999 * emin]
    starts = []
    if p0 is not None:
        alpha = p0.get("alpha", 0.5)
        starts.append([math.log(max(p0.get("a", 1.0), 1e-300) / C0 ** alpha),
                       math.log10(max(p0.get("b", 0.0), 1e-10 * C0) / C0),
                       alpha, min(p0.get("e_inf", 0.0), 0.99 * emin)])
    for e0 in (0.0, 0.5 * emin, 0.9 * emin):
        (slope, icpt), *_ = np.linalg.lstsq(np.c_[np.log(x), np.ones(x.size)],
                                            np.log(np.maximum(E - e0, 1e-12 * emin)), rcond=None)
        for log10_b in (-8.0, math.log10(x.min()), math.log10(np.median(x))):
            starts.append([icpt, log10_b, min(max(-slope, 1e-3), 5.0), e0])
    inside = [[min(max(v, lo + 1e-9 * (hi - lo)), hi - 1e-9 * (hi - lo)) for v, lo, hi in zip(s, lower, upper)]
              for s in starts]
    return inside, lower, upper, C0


def _shaped(errors, C, E):
    """Errors whose start lines leave the clip [10⁻³, 5] of α (rising; falling as C^−6.5), or
    are tiny (10⁻⁸: the floor 10⁻¹² min E of E − E0 is far below 0.1 min E)."""
    x = C / math.exp(np.mean(np.log(C)))
    return {"noisy": E, "rising": 0.2 * x ** 0.05 * np.exp(0.01 * np.sin(np.arange(C.size))),
            "steep": x ** -6.5 * E / E.mean(),
            "tiny": 1e-8 * E}[errors]


@pytest.mark.parametrize("p0,fix_b_zero,unit,errors", [
    (None, False, 1.0, "noisy"), ({"a": 40.0, "b": 3e9, "alpha": 0.25, "e_inf": 0.05}, False, 1.0, "noisy"),
    ({"alpha": 2.0, "e_inf": 9.0}, True, 1.0, "noisy"), ({"a": 0.0}, False, 1e-8, "noisy"),
    (None, False, 1.0, "rising"), (None, False, 1.0, "steep"), (None, False, 1.0, "tiny")])
def test_the_fit_runs_its_documented_starts_and_keeps_the_least_residual(monkeypatch, p0, fix_b_zero, unit, errors):
    C, E = _runs(n=8, noise=0.05, seed=4)
    C = C * unit  # C0 = 10^5 (1 / C0 > 10^-10) or 10^13
    E = _shaped(errors, C, E)
    calls = []
    starts, lower, upper, C0 = _documented_starts(C, E, p0, fix_b_zero)

    def recorder(f, x, y, p0, bounds, maxfev):  # scipy's fit; the first, fifth and last start end where they began
        popt, pcov = scipy_curve_fit(f, x, y, p0=p0, bounds=bounds, maxfev=maxfev)
        if len(calls) in (0, 4, len(starts) - 1):
            popt = np.array(p0)
        calls.append((p0, bounds, maxfev, popt, pcov))
        return popt, pcov

    monkeypatch.setattr(scaling, "curve_fit", recorder)
    fit = fit_scaling_law(C, E, p0=p0, fix_b_zero=fix_b_zero, maxfev=300)
    assert len(calls) == len(starts)
    for (got, bounds, maxfev, _, _), want in zip(calls, starts):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(bounds, (lower, upper), rtol=1e-12)
        assert maxfev == 300

    def sse(p):  # Σ (log E − log(A (b' + C/C0)^(−α) + E∞))²
        log_A, log10_b, alpha, e_inf = p
        return float(np.sum((np.log(np.exp(log_A) * (10.0 ** log10_b + C / C0) ** -alpha + e_inf) - np.log(E)) ** 2))

    kept = [c for c in calls if (c[3][2], c[3][3]) == (fit.alpha, fit.e_inf)]  # the start whose end is returned
    assert kept, "the fit is no start's end"
    _, _, _, best, cov = kept[0]
    assert sse(best) <= min(sse(c[3]) for c in calls) * (1 + 1e-9)  # the least residual (up to rounding)
    assert max(sse(c[3]) for c in calls) > sse(best) * 1.01  # ... which this table tells from the others
    assert fit.b == (0.0 if fix_b_zero else pytest.approx(10.0 ** best[1] * C0, rel=1e-12))
    assert fit.a == pytest.approx(math.exp(best[0]) * C0 ** best[2], rel=1e-9)
    assert fit.rmse_log == pytest.approx(math.sqrt(sse(best) / 8), rel=1e-9)
    assert (fit.alpha_err, fit.e_inf_err) == (math.sqrt(cov[2, 2]), math.sqrt(cov[3, 3]))


def test_a_start_that_fails_is_skipped_and_all_failing_is_refused(monkeypatch):
    C, E = _runs(n=8, noise=0.05, seed=4)
    fits = []

    def first_fails(f, x, y, p0, bounds, maxfev):
        fits.append(p0)
        assert maxfev == 20000  # the default
        if len(fits) == 1:
            raise RuntimeError("Optimal parameters not found")
        if len(fits) == 2:
            raise ValueError("Residuals are not finite in the initial point")
        return scipy_curve_fit(f, x, y, p0=p0, bounds=bounds, maxfev=maxfev)

    monkeypatch.setattr(scaling, "curve_fit", first_fails)
    fit = fit_scaling_law(C, E)
    assert len(fits) == 9 and np.isfinite(fit.alpha)

    def warns(f, x, y, p0, bounds, maxfev):  # the fit's own warnings are silenced, no other
        warnings.warn("covariance not estimated", OptimizeWarning)
        warnings.warn("overflow in exp", RuntimeWarning)
        warnings.warn("something else", UserWarning)
        return scipy_curve_fit(f, x, y, p0=p0, bounds=bounds, maxfev=maxfev)

    ties = []

    def tied(f, x, y, p0, bounds, maxfev):  # every start ends at one point: the first is kept
        ties.append(p0)
        return np.array([0.0, -5.0, 0.3, 0.01]), np.eye(4) * len(ties)

    monkeypatch.setattr(scaling, "curve_fit", tied)
    assert fit_scaling_law(C, E).alpha_err == 1.0
    monkeypatch.setattr(scaling, "curve_fit", lambda *a, **k: (np.array([0.0, -5.0, 0.3, 0.01]), -np.eye(4)))
    assert (fit_scaling_law(C, E).alpha_err, fit_scaling_law(C, E).e_inf_err) == (0.0, 0.0)  # a negative variance: 0

    # a = A·C0^α = 10^350 at C0 = 10^35, α = 10: beyond the largest float, reported as ∞
    monkeypatch.setattr(scaling, "curve_fit", lambda *a, **k: (np.array([0.0, -5.0, 10.0, 0.0]), np.eye(4)))
    huge = fit_scaling_law(np.logspace(30, 40, 8), E)
    assert huge.a == math.inf and huge.log10_a == pytest.approx(350.0, rel=1e-12)

    monkeypatch.setattr(scaling, "curve_fit", warns)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fit_scaling_law(C, E)
    assert [w.category for w in seen] == [UserWarning] * 9

    def fails(*args, **kw):
        raise RuntimeError("Optimal parameters not found")

    monkeypatch.setattr(scaling, "curve_fit", fails)
    with pytest.raises(RuntimeError, match="^scaling-law fit failed from every starting point$"):
        fit_scaling_law(C, E)


def test_a_is_finite_up_to_the_largest_float():
    """The fit's a = 10^log10_a: finite wherever it fits in a float (up to 10^308.25), ∞ beyond."""
    assert scaling._pow10(300.5) == 10.0 ** 300.5 and scaling._pow10(308.25) == 10.0 ** 308.25
    assert scaling._pow10(308.254) == 10.0 ** 308.254 < np.finfo(np.float64).max
    assert scaling._pow10(308.26) == math.inf and scaling._pow10(np.float64(400.0)) == math.inf
    assert scaling._pow10(-400.0) == 0.0 and scaling._pow10(2.0) == 100.0
