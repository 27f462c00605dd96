"""Scaling-law fits (docs/science.md §7) recover known parameters from synthetic runs."""
import numpy as np
import pytest

from mlplab.analysis.scaling import (
    PUBLISHED_EXPONENTS,
    compute_budget,
    compute_optimal_frontier,
    fit_frontier_exponents,
    fit_power,
    fit_scaling_law,
    scaling_law,
)


def test_compute_budget():
    assert compute_budget(2e6, 50_000, 100) == pytest.approx(2e6 * 3 * 50_000 * 100)
    np.testing.assert_allclose(compute_budget([1, 2], 10, [1, 3]), [30, 180])


@pytest.mark.parametrize("a,b,alpha,e_inf", [(5e3, 1e12, 0.3, 0.1), (1e2, 0.0, 0.15, 0.2)])
def test_fit_recovers_parameters(a, b, alpha, e_inf):
    rng = np.random.default_rng(0)
    C = np.logspace(10, 18, 30)
    E = scaling_law(C, a, b, alpha, e_inf) * np.exp(0.005 * rng.standard_normal(C.size))
    order = rng.permutation(C.size)  # run order does not matter
    fit = fit_scaling_law(C[order], E[order])
    assert fit.alpha == pytest.approx(alpha, abs=0.02)
    assert fit.e_inf == pytest.approx(e_inf, abs=0.01)
    assert fit.rmse_log < 0.01
    np.testing.assert_allclose(fit.predict(C), scaling_law(C, a, b, alpha, e_inf), rtol=0.02)


def test_fit_exact_data_and_bad_input():
    C = np.logspace(8, 16, 12)
    E = scaling_law(C, 40.0, 3e9, 0.25, 0.05)
    fit = fit_scaling_law(C, E, p0={"a": 30.0, "b": 1e9, "alpha": 0.3, "e_inf": 0.04})
    assert fit.alpha == pytest.approx(0.25, rel=1e-3) and fit.b == pytest.approx(3e9, rel=0.05)
    pure = fit_scaling_law(C, scaling_law(C, 40.0, 0.0, 0.25, 0.05), fix_b_zero=True)
    assert pure.b == 0.0 and pure.alpha == pytest.approx(0.25, rel=1e-4)
    with pytest.raises(ValueError, match="at least 4"):
        fit_scaling_law([1, 2, 3], [0.5, 0.4, 0.3])


def test_frontier_methods_on_a_small_example():
    C = np.array([1, 2, 2, 3, 4, 5, 8], dtype=float)
    E = np.array([0.9, 0.8, 0.85, 0.82, 0.5, 0.6, 0.45])
    assert compute_optimal_frontier(C, E).tolist() == [0, 1, 4, 6]
    hull = compute_optimal_frontier(C, E, "hull").tolist()
    assert set(hull) <= {0, 1, 4, 6} and hull[0] == 0 and hull[-1] == 6
    # log C bins [0, .69), [.69, 1.39), [1.39, 2.08]: best of {1}, {2, 2, 3}, {4, 5, 8}
    assert compute_optimal_frontier(C, E, "bucket", num_buckets=3).tolist() == [0, 1, 6]
    with pytest.raises(ValueError, match="unknown frontier"):
        compute_optimal_frontier(C, E, "nope")


def test_frontier_exponents_recover_allocation():
    """E = A P^-a + B D^-b + E0 with C ∝ P·D has P* ∝ C^(b/(a+b)): choose 0.35 / 0.65."""
    P, D = np.logspace(3, 8, 26), np.logspace(5, 12, 36)
    PP, DD = (g.ravel() for g in np.meshgrid(P, D))
    C = 6 * PP * DD
    E = 400 * PP ** -0.65 + 400 * DD ** -0.35 + 0.05
    p_opt = (0.65 / 0.35) ** 1.0 * (C / 6) ** 0.35  # (aA/(bB))^(1/(a+b)) (C/6)^(b/(a+b))
    inside = (p_opt > P[2]) & (p_opt < P[-3]) & (C / 6 / p_opt > D[2]) & (C / 6 / p_opt < D[-3])
    for method in ("pareto", "hull"):
        res = fit_frontier_exponents(C[inside], E[inside], PP[inside], DD[inside], method=method)
        assert res["beta_P"] == pytest.approx(PUBLISHED_EXPONENTS["beta_P"], abs=0.03)
        assert res["beta_N"] == pytest.approx(PUBLISHED_EXPONENTS["beta_N"], abs=0.03)
        assert res["beta_P_minus_published"] == pytest.approx(res["beta_P"] - 0.35)
    # the frontier itself follows E(C): its exponent is a·b/(a+b) = 0.2275
    front = compute_optimal_frontier(C[inside], E[inside])
    fit = fit_scaling_law(C[inside][front], E[inside][front])
    assert fit.alpha == pytest.approx(0.65 * 0.35, abs=0.03)
    assert fit_power([1, 10, 100], [2, 20, 200]) == pytest.approx((1.0, 2.0))
