"""Prop. 3.3's numeric check (mlplab.analysis.implicit_bias) against independent numbers: the
regression's Kronecker structure recovered by least squares, weak duality of the Lasso dual bound
at any point and its value by hand, the lemma's quantities by numpy, the factored solver's
stationarity, and the refusal of data of another width."""
from __future__ import annotations

import math

import numpy as np
import pytest

import mlplab.analysis.implicit_bias as ib
from mlplab.analysis.implicit_bias import (
    _factored_grads,
    check_implicit_regularisation,
    factored_objective,
    l1_dual_bound,
    l1_objective,
    lemma_b1,
    make_bilinear_regression,
    solve_factored,
    solve_l1,
)
from mlplab.utils.seeds import derive_seed


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


# ----------------------------------------------------------------------------- the solvers written out

def test_the_regression_draws_its_factors_and_noise_by_its_law():
    S, C, n = 4, 8, 150
    ratios = []
    for seed in range(4):
        X, Y = make_bilinear_regression(S, C, n, noise=0.0, seed=seed)
        B = np.linalg.lstsq(X, Y, rcond=None)[0].T
        ratios.append(np.sum(B ** 2) / (C * S))  # E‖V ⊗ W‖² = E‖V‖² E‖W‖² = (C²/C)(S²/S)
    assert 0.6 < np.mean(ratios) < 1.6  # a factor √C or √S away is at least 2 off
    X, Y = make_bilinear_regression(S, C, n, noise=0.3, seed=0)
    R = Y - X @ np.linalg.lstsq(X, Y, rcond=None)[0]
    assert np.sqrt(np.sum(R ** 2) / (n - S * C) / (S * C)) == pytest.approx(0.3, rel=0.05)
    Xd, Yd = make_bilinear_regression()  # S = C = 3, n = 64, noise 0.1, seed 0
    np.testing.assert_array_equal(Xd, make_bilinear_regression(3, 3, 64, 0.1, 0)[0])
    np.testing.assert_array_equal(Yd, make_bilinear_regression(3, 3, 64, 0.1, 0)[1])


def _start(seed, S, C, scale):
    rng = np.random.default_rng(derive_seed(seed, "solve_factored"))
    return scale * rng.standard_normal((C, C)) / math.sqrt(C), scale * rng.standard_normal((S, S)) / math.sqrt(S)


def _armijo(V, W, X, Y, lam, steps):
    """Gradient descent with the docstring's backtracking, written out."""
    f, lr = factored_objective(V, W, X, Y, lam), 1.0
    for _ in range(steps):
        gV, gW = _factored_grads(V, W, X, Y, lam)
        g2 = np.sum(gV ** 2) + np.sum(gW ** 2)
        lr = min(2 * lr, 1000.0)
        while factored_objective(V - lr * gV, W - lr * gW, X, Y, lam) > f - lr * g2 / 2 and lr >= 1e-12:
            lr /= 2
        V, W = V - lr * gV, W - lr * gW
        f = factored_objective(V, W, X, Y, lam)
    return V, W, f


def test_solve_factored_is_its_backtracking_loop_from_its_seeded_start():
    S, C, lam = 2, 3, 0.15
    X, Y = make_bilinear_regression(S, C, 25, seed=7)
    V0, W0 = _start(4, S, C, 0.7)
    V, W, f, steps = solve_factored(X, Y, S, C, lam, seed=4, max_steps=0, init_scale=0.7)
    assert steps == 0 and np.array_equal(V, V0) and np.array_equal(W, W0)
    assert f == factored_objective(V0, W0, X, Y, lam)
    V, W, f, steps = solve_factored(X, Y, S, C, lam, seed=4, max_steps=6, init_scale=0.7)
    Vw, Ww, fw = _armijo(V0, W0, X, Y, lam, 6)
    assert steps == 6
    np.testing.assert_allclose(V, Vw, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(W, Ww, rtol=1e-12, atol=1e-14)
    assert f == pytest.approx(fw, rel=1e-13)
    Vs, Ws = _start(4, S, C, 0.5)  # the default scale
    np.testing.assert_array_equal(solve_factored(X, Y, S, C, lam, seed=4, max_steps=0)[0], Vs)


def test_solve_factored_step_sizes_and_step_limit_on_a_stub_objective(monkeypatch):
    """Every trial point lowers the stub objective by 1 and the gradient is constant (norm 2.8e-7,
    above the default tol 1e-8): each step is taken at lr = min(2^k, 1000), for the default 20000 steps."""
    X, Y = make_bilinear_regression(2, 2, 10, seed=1)
    calls = []

    def falling(V, W, X, Y, lam):
        calls.append(1)
        return -float(len(calls))

    monkeypatch.setattr(ib, "factored_objective", falling)
    monkeypatch.setattr(ib, "_factored_grads", lambda V, W, X, Y, lam: (np.full((2, 2), 1e-7), np.full((2, 2), 1e-7)))
    V, W, f, steps = solve_factored(X, Y, 2, 2, 0.1, seed=2)
    V0, W0 = _start(2, 2, 2, 0.5)
    total = sum(min(2.0 ** min(k, 10), 1000.0) for k in range(1, 20001))
    assert steps == 20000 and len(calls) == 20001 and f == -20001.0
    np.testing.assert_allclose(V, V0 - 1e-7 * total, rtol=1e-9)
    np.testing.assert_allclose(W, W0 - 1e-7 * total, rtol=1e-9)
    calls.clear()  # an objective that never falls: lr halves from 2 to 2^-40 (< 1e-12 is 2^-41), then stop
    monkeypatch.setattr(ib, "factored_objective", lambda *a: calls.append(1) or 0.0)
    V, W, f, steps = solve_factored(X, Y, 2, 2, 0.1, seed=2)
    assert steps == 1 and len(calls) == 1 + 42 and np.array_equal(V, V0) and f == 0.0


def test_solve_l1_step_limit_and_gap_reads_on_stub_bounds(monkeypatch):
    X, Y = make_bilinear_regression(2, 2, 10, seed=1)
    reads = []
    monkeypatch.setattr(ib, "l1_objective", lambda *a: reads.append(1) or 1.0)
    monkeypatch.setattr(ib, "l1_dual_bound", lambda *a: 0.0)  # the gap stays 1: never below tol
    B, obj, gap, steps = solve_l1(X, Y, 2, 2, 0.1)
    assert steps == 20000 and gap == 1.0 and len(reads) == 20000 // 50 + 2  # every 50 steps, then gap and objective
    B0, _, _, steps0 = solve_l1(X, Y, 2, 2, 0.1, max_steps=0)
    assert steps0 == 0 and not B0.any()


def test_solve_factored_stops_below_tol_only():
    S, C, lam = 2, 2, 0.2
    X, Y = make_bilinear_regression(S, C, 20, seed=8)
    V0, W0 = _start(0, S, C, 0.5)
    gV, gW = _factored_grads(V0, W0, X, Y, lam)
    g0 = math.sqrt(float(np.sum(gV * gV) + np.sum(gW * gW)))
    V, W, _, steps = solve_factored(X, Y, S, C, lam, tol=g0 * (1 + 1e-12), max_steps=5)
    assert steps == 1 and np.array_equal(V, V0)  # the first gradient is below tol: no step taken
    V, W, _, steps = solve_factored(X, Y, S, C, lam, tol=g0, max_steps=1)  # not below: it steps
    assert steps == 1 and not np.array_equal(V, V0)


def _fista(X, Y, S, C, lam, steps):
    n, m = X.shape
    mu, L = lam / (C * S), np.linalg.eigvalsh(X.T @ X / n).max()
    B, Z, t = np.zeros((m, m)), np.zeros((m, m)), 1.0
    for _ in range(steps):
        G = Z - ((X @ Z.T - Y).T @ X / n) / L
        B_new = np.sign(G) * np.maximum(np.abs(G) - mu / L, 0.0)
        t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
        Z, B, t = B_new + (t - 1) / t_new * (B_new - B), B_new, t_new
    return B


def test_solve_l1_is_fista_written_out():
    S, C, lam = 2, 3, 0.6
    X, Y = make_bilinear_regression(S, C, 30, seed=9)
    for k in (1, 2, 7):
        B, obj, gap, steps = solve_l1(X, Y, S, C, lam, max_steps=k)
        np.testing.assert_allclose(B, _fista(X, Y, S, C, lam, k), rtol=1e-12, atol=1e-15)
        assert steps == k and obj == pytest.approx(l1_objective(B, X, Y, lam, S, C), rel=1e-15)
    B50, _, gap50, _ = solve_l1(X, Y, S, C, lam, max_steps=50)
    np.testing.assert_allclose(B50, _fista(X, Y, S, C, lam, 50), rtol=1e-12, atol=1e-15)
    assert gap50 == pytest.approx(l1_objective(B50, X, Y, lam, S, C) - l1_dual_bound(B50, X, Y, lam, S, C), abs=1e-15)
    assert solve_l1(X, Y, S, C, lam, tol=gap50 * (1 + 1e-9))[3] == 50  # the gap is read at step 50
    assert solve_l1(X, Y, S, C, lam, tol=gap50)[3] == 100  # below tol, not at it: next read at 100
    B, _, gap, steps = solve_l1(X, Y, S, C, lam, max_steps=49, tol=1e3)
    assert steps == 49 and gap > 0  # not read before step 50


def test_check_defaults_and_what_it_passes_on():
    r = check_implicit_regularisation()  # S = C = 3, n = 64, λ = 0.1, noise 0.1, seed 0
    X, Y = make_bilinear_regression(3, 3, 64, 0.1, 0)
    V, W, lhs, lhs_steps = solve_factored(X, Y, 3, 3, 0.1, 0)
    assert (r.S, r.C, r.lam, r.seed) == (3, 3, 0.1, 0) and (r.lhs, r.lhs_steps) == (lhs, lhs_steps)
    assert r.rhs == solve_l1(X, Y, 3, 3, 0.1)[1] and r.lemma == lemma_b1(V, W, 0.1)
    r = check_implicit_regularisation(S=2, C=3, n=20, lam=0.3, noise=0.7, seed=5)
    X, Y = make_bilinear_regression(2, 3, 20, 0.7, 5)
    B, rhs, gap, rhs_steps = solve_l1(X, Y, 2, 3, 0.3)
    assert (r.rhs, r.rhs_lower_bound, r.rhs_steps) == (rhs, rhs - gap, rhs_steps)
    assert r.lhs == solve_factored(X, Y, 2, 3, 0.3, 5)[2]


def test_lemma_b1_with_a_zero_factor_either_side():
    V = np.random.default_rng(4).standard_normal((2, 2))
    for Vz, Wz in ((np.zeros((2, 2)), V), (V, np.zeros((3, 3)))):  # β = 0: the split stays (t = 1)
        lem = lemma_b1(Vz, Wz, 0.4)
        assert lem["penalty_balanced"] == pytest.approx(0.2 * np.sum(V ** 2), rel=1e-14)
        assert lem["penalty_split"] == pytest.approx(0.2 * np.sum(V ** 2), rel=1e-14)
        assert lem["penalty_inf"] == 0.0 and lem["balanced_same_beta"] and lem["split_holds"] and lem["norm_holds"]


def test_lemma_b1_balances_factors_of_norm_below_one():
    rng = np.random.default_rng(6)
    V, W = 0.05 * rng.standard_normal((2, 2)), 3.0 * rng.standard_normal((3, 3))  # ‖V‖ < 1 < ‖W‖
    lem = lemma_b1(V, W, 0.5)
    assert np.linalg.norm(V) < 1
    assert lem["penalty_balanced"] == pytest.approx(0.5 * np.linalg.norm(V) * np.linalg.norm(W), rel=1e-12)
    assert lem["penalty_split"] > 2 * lem["penalty_balanced"]


def test_check_reads_float32_data_as_float64():
    X, Y = make_bilinear_regression(2, 2, 24, seed=6)
    X32 = X.astype(np.float32)
    got = check_implicit_regularisation(S=2, C=2, lam=0.2, data=(X32, Y))
    assert got == check_implicit_regularisation(S=2, C=2, lam=0.2, data=(X32.astype(np.float64), Y))


def test_lemma_b1_at_zero_holds_with_equality():
    lem = lemma_b1(np.zeros((2, 2)), np.zeros((3, 3)), 0.3)  # 0 ≥ 0 and 0 ≤ 0
    assert lem["penalty_split"] == lem["penalty_inf"] == lem["l1"] == lem["sqrt_mn_l2"] == 0.0
    assert lem["split_holds"] and lem["norm_holds"]


def test_a_step_that_lowers_the_objective_by_exactly_the_armijo_amount_is_taken(monkeypatch):
    """Zero gradient and tol 0: the first trial lowers a constant objective by 0 = ½·lr·‖g‖², which
    the sufficient-decrease test accepts at once (f1 ≤ f); then no descent is left and the run stops."""
    X, Y = make_bilinear_regression(2, 2, 10, seed=1)
    calls = []
    monkeypatch.setattr(ib, "factored_objective", lambda *a: calls.append(1) or 5.0)
    monkeypatch.setattr(ib, "_factored_grads", lambda V, W, X, Y, lam: (np.zeros((2, 2)), np.zeros((2, 2))))
    _, _, f, steps = solve_factored(X, Y, 2, 2, 0.1, tol=0.0)
    assert (steps, len(calls), f) == (1, 2, 5.0)


def test_the_dual_bound_of_no_examples_or_no_features_is_zero():
    X, Y = make_bilinear_regression(2, 2, 10, seed=1)
    assert l1_dual_bound(np.zeros((4, 4)), X[:0], Y[:0], 0.3, 2, 2) == 0.0  # D(Θ) of an empty Θ
    assert l1_dual_bound(np.zeros((0, 0)), X[:, :0], Y[:, :0], 0.3, 1, 1) == 0.0  # ... and of no features


@pytest.mark.parametrize("shapes", [((2, 3), (3, 3)), ((3, 3), (2, 4)), ((3,), (3, 3)), ((2, 2), (2, 2, 2))])
def test_lemma_b1_refuses_factors_that_are_not_square(shapes):
    """Lemma B.1 is about V ∈ R^{C×C}, W ∈ R^{S×S}: √(mn) = CS only then."""
    V, W = (np.ones(s) for s in shapes)
    with pytest.raises(ValueError, match=r"lemma_b1 takes square factors, V \(C×C\) and W \(S×S\); got"):
        ib.lemma_b1(V, W, 0.1)
