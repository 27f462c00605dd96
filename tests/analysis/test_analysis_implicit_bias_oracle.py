"""Prop. 3.3's numeric check (mlplab.analysis.implicit_bias) against independent numbers: the
regression's Kronecker structure recovered by least squares, weak duality of the Lasso dual bound
at any point and its value by hand, the lemma's quantities by numpy, the factored solver's
stationarity, and the refusal of data of another width."""
from __future__ import annotations

import math

import numpy as np
import pytest

from mlplab.analysis.implicit_bias import (
    check_implicit_regularisation,
    l1_dual_bound,
    l1_objective,
    lemma_b1,
    make_bilinear_regression,
    solve_factored,
    solve_l1,
)


def test_the_regression_is_a_kronecker_map_v_kron_w():
    S, C, n = 2, 3, 40
    X, Y = make_bilinear_regression(S, C, n, noise=0.0, seed=3)
    assert X.shape == Y.shape == (n, S * C)
    B = np.linalg.lstsq(X, Y, rcond=None)[0].T  # y = B x exactly
    # V ⊗ W with V (C×C), W (S×S): B[a·S + i, b·S + j] = V[a, b] W[i, j], a rank-one rearrangement
    R = B.reshape(C, S, C, S).transpose(0, 2, 1, 3).reshape(C * C, S * S)
    sv = np.linalg.svd(R, compute_uv=False)
    assert sv[1] < 1e-10 * sv[0]
    noisy = make_bilinear_regression(S, C, n, noise=0.5, seed=3)[1]
    assert np.std(noisy - Y) == pytest.approx(0.5, rel=0.15)
    assert not np.array_equal(make_bilinear_regression(S, C, n, seed=4)[0], X)
    np.testing.assert_array_equal(make_bilinear_regression(S, C, n, noise=0.0, seed=3)[1], Y)


def test_the_dual_bound_is_below_the_objective_everywhere_and_by_hand():
    S, C = 2, 2
    X, Y = make_bilinear_regression(S, C, 30, seed=1)
    lam = 0.4
    mu = lam / (C * S)
    rng = np.random.default_rng(0)
    for _ in range(5):  # weak duality at any B
        B = rng.standard_normal((4, 4))
        assert l1_dual_bound(B, X, Y, lam, S, C) <= l1_objective(B, X, Y, lam, S, C) + 1e-12
    B = np.zeros((4, 4))  # Θ = Y/n scaled into ‖XᵀΘ‖_max ≤ μ
    theta = Y / 30
    corr = np.abs(X.T @ theta).max()
    assert corr > mu
    theta = theta * mu / corr
    assert l1_dual_bound(B, X, Y, lam, S, C) == pytest.approx(np.sum(theta * Y) - 15 * np.sum(theta ** 2), rel=1e-12)
    big = 1e6  # μ large: Θ = R/n unscaled, the bound ⟨R, Y⟩/n − ‖R‖²/(2n)
    R = Y - X @ B.T
    assert l1_dual_bound(B, X, Y, big, S, C) == pytest.approx(np.sum(R * Y) / 30 - np.sum(R ** 2) / 60, rel=1e-12)


def test_solve_l1_certifies_its_minimum_and_counts_its_steps():
    S, C = 2, 2
    X, Y = make_bilinear_regression(S, C, 30, seed=2)
    B, obj, gap, steps = solve_l1(X, Y, S, C, 0.3)
    assert 0 <= gap < 1e-11 and steps % 50 == 0 and obj == pytest.approx(l1_objective(B, X, Y, 0.3, S, C), rel=1e-15)
    assert gap == pytest.approx(obj - l1_dual_bound(B, X, Y, 0.3, S, C), abs=1e-15)
    _, _, gap3, steps3 = solve_l1(X, Y, S, C, 0.3, max_steps=3)  # stopped early: its gap is reported
    assert steps3 == 3 and gap3 > 1e-11
    _, _, loose, fewer = solve_l1(X, Y, S, C, 0.3, tol=1e-2)
    assert fewer < steps and loose < 1e-2


def test_solve_factored_ends_at_a_stationary_point_from_its_seeded_start():
    S, C, lam = 2, 2, 0.2
    X, Y = make_bilinear_regression(S, C, 30, seed=5)
    V, W, f, steps = solve_factored(X, Y, S, C, lam, seed=1)
    from mlplab.analysis.implicit_bias import _factored_grads, factored_objective

    gV, gW = _factored_grads(V, W, X, Y, lam)
    assert math.sqrt(np.sum(gV ** 2) + np.sum(gW ** 2)) < 1e-6
    assert f == pytest.approx(factored_objective(V, W, X, Y, lam), rel=1e-15) and 1 < steps < 20000
    V0, W0, f0, s0 = solve_factored(X, Y, S, C, lam, seed=1, max_steps=1)
    assert s0 == 1 and f0 > f
    _, _, f_same, _ = solve_factored(X, Y, S, C, lam, seed=1)
    assert f_same == f
    Vz, Wz, fz, _ = solve_factored(X, Y, S, C, lam, seed=1, init_scale=0.0, max_steps=5)  # V = W = 0: a saddle
    assert not Vz.any() and not Wz.any() and fz == pytest.approx(0.5 * np.sum(Y ** 2) / 30, rel=1e-12)


def test_lemma_b1_by_numpy():
    rng = np.random.default_rng(3)
    V, W, lam = rng.standard_normal((3, 3)), 4.0 * rng.standard_normal((2, 2)), 0.3
    lem = lemma_b1(V, W, lam)
    beta = np.kron(V, W)
    nV, nW = np.linalg.norm(V), np.linalg.norm(W)
    assert lem["penalty_split"] == pytest.approx(lam / 2 * (nV ** 2 + nW ** 2), rel=1e-12)
    assert lem["penalty_inf"] == pytest.approx(lam * nV * nW, rel=1e-12)
    assert lem["penalty_balanced"] == pytest.approx(lam * nV * nW, rel=1e-12)  # ‖tV‖ = ‖W/t‖ = √(‖V‖‖W‖)
    assert lem["l1"] == pytest.approx(np.abs(beta).sum(), rel=1e-12) and lem["sqrt_mn"] == 6.0
    assert lem["sqrt_mn_l2"] == pytest.approx(6 * np.linalg.norm(beta), rel=1e-12)
    assert lem["l1_penalty"] == pytest.approx(lam / 6 * np.abs(beta).sum(), rel=1e-12)
    assert lem["split_holds"] and lem["norm_holds"] and lem["balanced_same_beta"]
    zero = lemma_b1(np.zeros((2, 2)), W, lam)  # β = 0: the split t = 1
    assert zero["penalty_balanced"] == zero["penalty_split"] == pytest.approx(lam / 2 * nW ** 2)
    assert zero["l2"] == 0.0 and zero["split_holds"] and zero["norm_holds"]
    flat = np.ones((2, 2))  # ‖β‖₁ = √(mn)‖β‖_F exactly when every |β| is equal: the bound holds with equality
    eq = lemma_b1(flat, flat, lam)
    assert eq["l1"] == pytest.approx(eq["sqrt_mn_l2"], rel=1e-15) and eq["norm_holds"]
    assert eq["penalty_split"] == pytest.approx(eq["penalty_inf"], rel=1e-15) and eq["split_holds"]


def test_check_uses_given_data_and_refuses_another_width():
    X, Y = make_bilinear_regression(2, 2, 24, seed=6)
    r = check_implicit_regularisation(S=2, C=2, lam=0.2, seed=3, data=(X.tolist(), Y))
    B, rhs, gap, _ = solve_l1(X, Y, 2, 2, 0.2)
    V, W, lhs, _ = solve_factored(X, Y, 2, 2, 0.2, seed=3)
    assert (r.S, r.C, r.lam, r.seed) == (2, 2, 0.2, 3)
    assert r.rhs == rhs and r.lhs == lhs and r.rhs_lower_bound == rhs - gap and r.holds == (lhs >= rhs)
    assert r.rhs_at_lhs_solution == l1_objective(np.kron(V, W), X, Y, 0.2, 2, 2)
    assert r.to_dict()["lemma"] == lemma_b1(V, W, 0.2)
    with pytest.raises(ValueError, match="X and Y need S·C = 6 columns, got 4 and 4"):
        check_implicit_regularisation(S=2, C=3, data=(X, Y))
    with pytest.raises(ValueError, match="X and Y need S·C = 4 columns, got 4 and 3"):
        check_implicit_regularisation(S=2, C=2, data=(X, Y[:, :3]))
