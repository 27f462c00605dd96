"""Implicit regularisation of the linear S-Mixer (docs/science.md §5, Prop. 3.3 / Lemma B.1), float64."""
import numpy as np
import pytest

from mlplab.analysis.implicit_bias import (
    _factored_grads,
    check_implicit_regularisation,
    factored_objective,
    l1_objective,
    lemma_b1,
    make_bilinear_regression,
    mse_loss,
    solve_l1,
)


@pytest.mark.parametrize("seed,lam", [(0, 0.05), (1, 0.1), (2, 0.3)])
def test_proposition_3_3_holds(seed, lam):
    r = check_implicit_regularisation(S=3, C=2, n=48, lam=lam, seed=seed)
    assert r.holds and r.lhs >= r.rhs
    # the chain: lhs ≥ L(β) + λ‖β‖_F ≥ L(β) + λ/(CS)‖β‖₁ ≥ min_B (certified by the dual bound)
    assert r.lhs >= r.rhs_at_lhs_solution - 1e-12
    assert r.rhs_at_lhs_solution >= r.rhs - 1e-9
    assert r.rhs - r.rhs_lower_bound < 1e-8
    lem = r.lemma
    assert lem["split_holds"] and lem["norm_holds"] and lem["balanced_same_beta"]
    assert lem["penalty_balanced"] == pytest.approx(lem["penalty_inf"], rel=1e-12)
    # at a stationary point of the factored problem the split is balanced: penalty = λ‖β‖_F
    assert lem["penalty_split"] == pytest.approx(lem["penalty_inf"], rel=1e-6)
    assert lem["l1_penalty"] <= lem["penalty_inf"] + 1e-15
    assert lem["sqrt_mn"] == 6.0


def test_lemma_b1_on_unbalanced_split():
    rng = np.random.default_rng(0)
    V, W = 5.0 * rng.standard_normal((3, 3)), 0.1 * rng.standard_normal((2, 2))
    lem = lemma_b1(V, W, lam=0.7)
    assert lem["penalty_split"] > 1.5 * lem["penalty_inf"]
    assert lem["penalty_balanced"] == pytest.approx(lem["penalty_inf"], rel=1e-12)
    assert lem["l1"] <= lem["sqrt_mn_l2"]
    assert lem["l2"] == pytest.approx(np.linalg.norm(V) * np.linalg.norm(W), rel=1e-12)


def test_factored_gradient_matches_finite_differences():
    X, Y = make_bilinear_regression(S=2, C=3, n=20, seed=4)
    rng = np.random.default_rng(1)
    V, W, lam = rng.standard_normal((3, 3)), rng.standard_normal((2, 2)), 0.2
    gV, gW = _factored_grads(V, W, X, Y, lam)
    eps = 1e-6
    for M, G, which in ((V, gV, 0), (W, gW, 1)):
        for idx in [(0, 0), (1, 0), (1, 1)]:
            P = M.copy()
            P[idx] += eps
            Mm = M.copy()
            Mm[idx] -= eps
            args_p = (P, W) if which == 0 else (V, P)
            args_m = (Mm, W) if which == 0 else (V, Mm)
            fd = (factored_objective(*args_p, X, Y, lam) - factored_objective(*args_m, X, Y, lam)) / (2 * eps)
            assert G[idx] == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_l1_solver_reduces_to_least_squares_and_is_optimal():
    X, Y = make_bilinear_regression(S=2, C=2, n=30, seed=5)
    B, obj, gap, _ = solve_l1(X, Y, 2, 2, lam=0.0)
    ls = np.linalg.lstsq(X, Y, rcond=None)[0].T
    assert np.allclose(B, ls, atol=1e-6)
    B, obj, gap, _ = solve_l1(X, Y, 2, 2, lam=0.5)
    assert gap < 1e-8 and obj == pytest.approx(l1_objective(B, X, Y, 0.5, 2, 2))
    rng = np.random.default_rng(2)
    for _ in range(5):  # no nearby point is better
        assert l1_objective(B + 1e-3 * rng.standard_normal(B.shape), X, Y, 0.5, 2, 2) >= obj
    assert mse_loss(np.zeros((4, 4)), X, Y) == pytest.approx(0.5 * (Y ** 2).sum() / 30)
