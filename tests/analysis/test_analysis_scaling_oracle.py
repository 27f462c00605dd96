"""Scaling fits (mlplab.analysis.scaling) against scipy and loops written here: the fit of E(C) on
noisy runs is at least as good, in log-E least squares, as scipy's least_squares started from the
truth; the bootstrap is its resampling loop written out; bad input is refused in one sentence."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import least_squares

from mlplab.analysis.scaling import (
    PUBLISHED_EXPONENTS,
    ScalingBootstrap,
    bootstrap_scaling,
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
