"""Numeric check of the implicit regularisation of a linear S-Mixer (docs/science.md §5; paper Prop. 3.3,
Lemma B.1).

A linear S-Mixer H = W X Vᵀ (W ∈ R^{S×S}, V ∈ R^{C×C}) is the linear map vec(H) = (V ⊗ W) vec(X)
(docs/science.md §1) of width m = S·C. Weight decay on the two small factors acts on the wide weight
β = V ⊗ W as an L1 penalty that favours sparsity:

    min_{V,W} L(V ⊗ W) + (λ/2)(‖V‖_F² + ‖W‖_F²)  ≥  min_B L(B) + (λ/(CS)) ‖B‖₁      (Prop. 3.3)

with L the MSE. Proof steps (Lemma B.1), both checked numerically by :func:`lemma_b1`:

1. inf over splits V ⊗ W = β of (‖V‖_F² + ‖W‖_F²)/2 is ‖β‖_F (‖V ⊗ W‖_F = ‖V‖_F ‖W‖_F and
   AM–GM; attained at the balanced split ‖V‖_F = ‖W‖_F);
2. ‖β‖₁ ≤ √(mn) ‖β‖₂ for β ∈ R^{m×n}; here β is (SC)×(SC), √(mn) = CS.

:func:`check_implicit_regularisation` trains both sides on a small bilinear regression in
float64: the left by gradient descent on (V, W) (Armijo backtracking), the right by FISTA
(accelerated proximal gradient / ISTA with momentum), certified by a duality gap.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..utils.seeds import derive_seed

__all__ = [
    "make_bilinear_regression",
    "mse_loss",
    "factored_objective",
    "l1_objective",
    "solve_factored",
    "solve_l1",
    "l1_dual_bound",
    "lemma_b1",
    "ImplicitBiasResult",
    "check_implicit_regularisation",
]


def make_bilinear_regression(S: int = 3, C: int = 3, n: int = 64, noise: float = 0.1,
                             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inputs X (n, SC) and targets Y (n, SC) with y = (V* ⊗ W*) x + noise, x ~ N(0, I),
    V* ~ N(0, 1/C) (C×C), W* ~ N(0, 1/S) (S×S), noise ~ N(0, noise²).

    Rows are examples; x and y are vec's of S×C feature matrices (column-major, docs/science.md §1).
    """
    rng = np.random.default_rng(seed)
    m = S * C
    V, W = rng.standard_normal((C, C)) / math.sqrt(C), rng.standard_normal((S, S)) / math.sqrt(S)
    X = rng.standard_normal((n, m))
    Y = X @ np.kron(V, W).T + noise * rng.standard_normal((n, m))
    return X, Y


def mse_loss(B: np.ndarray, X: np.ndarray, Y: np.ndarray) -> float:
    """L(B) = (1/(2n)) Σ_k ‖y_k − B x_k‖²."""
    R = Y - X @ B.T
    return 0.5 * float(np.sum(R * R)) / X.shape[0]


def _grad_B(B: np.ndarray, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    return -(Y - X @ B.T).T @ X / X.shape[0]  # ∂L/∂B, (m, m)


def factored_objective(V: np.ndarray, W: np.ndarray, X: np.ndarray, Y: np.ndarray, lam: float) -> float:
    """L(V ⊗ W) + (λ/2)(‖V‖_F² + ‖W‖_F²): the left side of Prop. 3.3."""
    return mse_loss(np.kron(V, W), X, Y) + 0.5 * lam * (float(np.sum(V * V)) + float(np.sum(W * W)))


def l1_objective(B: np.ndarray, X: np.ndarray, Y: np.ndarray, lam: float, S: int, C: int) -> float:
    """L(B) + (λ/(CS)) ‖B‖₁: the right side of Prop. 3.3."""
    return mse_loss(B, X, Y) + lam / (C * S) * float(np.sum(np.abs(B)))


def _factored_grads(V, W, X, Y, lam):
    C, S = V.shape[0], W.shape[0]
    G = _grad_B(np.kron(V, W), X, Y).reshape(C, S, C, S)  # G[a, i, b, j] = ∂L/∂B[aS+i, bS+j]
    gV = np.einsum("aibj,ij->ab", G, W) + lam * V
    gW = np.einsum("aibj,ab->ij", G, V) + lam * W
    return gV, gW


def solve_factored(X: np.ndarray, Y: np.ndarray, S: int, C: int, lam: float, seed: int = 0,
                   max_steps: int = 20000, tol: float = 1e-8, init_scale: float = 0.5):
    """Gradient descent on (V, W) for the left side of Prop. 3.3, with Armijo backtracking.

    Starts from small random factors (V = W = 0 is a saddle): ``init_scale`` · N(0, 1/C) for V, then
    ``init_scale`` · N(0, 1/S) for W, from ``derive_seed(seed, "solve_factored")``. Each step doubles
    the step size (at most 10³), then halves it until the objective falls by at least ½·lr·‖g‖²
    (or lr < 10⁻¹²). Stops when the gradient norm is below ``tol`` or the step does not decrease
    the objective (float64 resolution). Returns (V, W, objective, steps).
    """
    rng = np.random.default_rng(derive_seed(seed, "solve_factored"))
    V = init_scale * rng.standard_normal((C, C)) / math.sqrt(C)
    W = init_scale * rng.standard_normal((S, S)) / math.sqrt(S)
    f = factored_objective(V, W, X, Y, lam)
    lr = 1.0
    step = 0
    for step in range(1, max_steps + 1):
        gV, gW = _factored_grads(V, W, X, Y, lam)
        g2 = float(np.sum(gV * gV) + np.sum(gW * gW))
        if math.sqrt(g2) < tol:
            break
        lr = min(lr * 2.0, 1e3)
        while True:
            V1, W1 = V - lr * gV, W - lr * gW
            f1 = factored_objective(V1, W1, X, Y, lam)
            if f1 <= f - 0.5 * lr * g2 or lr < 1e-12:
                break
            lr *= 0.5
        if f1 >= f:  # no descent left at float64 resolution: a stationary point
            break
        V, W, f = V1, W1, f1
    return V, W, f, step


def _soft(Z: np.ndarray, t: float) -> np.ndarray:
    return np.sign(Z) * np.maximum(np.abs(Z) - t, 0.0)


def l1_dual_bound(B: np.ndarray, X: np.ndarray, Y: np.ndarray, lam: float, S: int, C: int) -> float:
    """A lower bound on min_B L(B) + μ‖B‖₁ (μ = λ/(CS)) from the Lasso dual:
    D(Θ) = ⟨Θ, Y⟩ − (n/2)‖Θ‖², ‖XᵀΘ‖_max ≤ μ, with Θ the rescaled residual of ``B``."""
    n = X.shape[0]
    mu = lam / (C * S)
    R = Y - X @ B.T
    Theta = R / n
    corr = float(np.max(np.abs(X.T @ Theta))) if Theta.size else 0.0
    if corr > mu:
        Theta = Theta * (mu / corr)
    return float(np.sum(Theta * Y)) - 0.5 * n * float(np.sum(Theta * Theta))


def solve_l1(X: np.ndarray, Y: np.ndarray, S: int, C: int, lam: float, max_steps: int = 20000,
             tol: float = 1e-11):
    """FISTA (proximal gradient with Nesterov momentum) for min_B L(B) + (λ/(CS))‖B‖₁.

    From B = 0, step 1/L_f with L_f = λ_max(XᵀX/n), momentum t_{k+1} = (1 + √(1 + 4t_k²))/2 from
    t = 1; the duality gap is checked every 50 steps and the run stops when it is below ``tol``.
    Returns (B, objective, duality_gap, steps).
    """
    m = X.shape[1]
    mu = lam / (C * S)
    Lf = float(np.linalg.eigvalsh(X.T @ X / X.shape[0])[-1])
    eta = 1.0 / Lf
    B = np.zeros((m, m))
    Z, t = B.copy(), 1.0
    gap = math.inf
    step = 0
    for step in range(1, max_steps + 1):
        B_new = _soft(Z - eta * _grad_B(Z, X, Y), eta * mu)
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        Z = B_new + ((t - 1.0) / t_new) * (B_new - B)
        B, t = B_new, t_new
        if step % 50 == 0:
            gap = l1_objective(B, X, Y, lam, S, C) - l1_dual_bound(B, X, Y, lam, S, C)
            if gap < tol:
                break
    gap = l1_objective(B, X, Y, lam, S, C) - l1_dual_bound(B, X, Y, lam, S, C)
    return B, l1_objective(B, X, Y, lam, S, C), gap, step


def lemma_b1(V: np.ndarray, W: np.ndarray, lam: float) -> dict:
    """The two steps of Lemma B.1 evaluated at β = V ⊗ W (float64).

    * ``penalty_split`` = (λ/2)(‖V‖² + ‖W‖²) ≥ ``penalty_inf`` = λ‖β‖_F, and the balanced split
      (tV, W/t), t = sqrt(‖W‖/‖V‖), attains it (``penalty_balanced``) with the same β.
    * ``l1`` = ‖β‖₁ ≤ ``sqrt_mn_l2`` = √(mn)‖β‖_F, m = n = CS; hence
      ``l1_penalty`` = (λ/(CS))‖β‖₁ ≤ λ‖β‖_F.
    """
    if V.ndim != 2 or W.ndim != 2 or V.shape[0] != V.shape[1] or W.shape[0] != W.shape[1]:
        raise ValueError(f"lemma_b1 takes square factors, V (C×C) and W (S×S); got {V.shape} and {W.shape}")
    C, S = V.shape[0], W.shape[0]
    beta = np.kron(V, W)
    nV, nW = float(np.linalg.norm(V)), float(np.linalg.norm(W))
    l2 = float(np.linalg.norm(beta))
    t = math.sqrt(nW / nV) if nV > 0 and nW > 0 else 1.0
    Vb, Wb = t * V, W / t
    out = {
        "penalty_split": 0.5 * lam * (nV ** 2 + nW ** 2),
        "penalty_inf": lam * l2,
        "penalty_balanced": 0.5 * lam * (float(np.sum(Vb * Vb)) + float(np.sum(Wb * Wb))),
        "balanced_same_beta": bool(np.allclose(np.kron(Vb, Wb), beta, rtol=1e-12, atol=1e-14)),
        "l1": float(np.sum(np.abs(beta))),
        "l2": l2,
        "sqrt_mn": float(C * S),
        "sqrt_mn_l2": C * S * l2,
        "l1_penalty": lam / (C * S) * float(np.sum(np.abs(beta))),
    }
    out["split_holds"] = out["penalty_split"] >= out["penalty_inf"] * (1 - 1e-12)
    out["norm_holds"] = out["l1"] <= out["sqrt_mn_l2"] * (1 + 1e-12)
    return out


@dataclass
class ImplicitBiasResult:
    """Both sides of Prop. 3.3 on one problem, and the lemma steps at the trained β = V ⊗ W."""

    S: int
    C: int
    lam: float
    seed: int
    lhs: float  # min_{V,W} L(V ⊗ W) + (λ/2)(‖V‖² + ‖W‖²), by gradient descent
    rhs: float  # min_B L(B) + (λ/(CS))‖B‖₁, by FISTA
    rhs_lower_bound: float  # dual bound: the true RHS minimum is ≥ this
    rhs_at_lhs_solution: float  # L(β) + (λ/(CS))‖β‖₁ at β = V ⊗ W (≤ lhs, ≥ rhs)
    holds: bool  # lhs ≥ rhs
    lhs_steps: int
    rhs_steps: int
    lemma: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def check_implicit_regularisation(S: int = 3, C: int = 3, n: int = 64, lam: float = 0.1,
                                  noise: float = 0.1, seed: int = 0,
                                  data: tuple[np.ndarray, np.ndarray] | None = None) -> ImplicitBiasResult:
    """Train both sides of Prop. 3.3 on a bilinear regression and compare (docs/science.md §5).

    ``data=(X, Y)`` uses given data (rows: examples, SC columns); otherwise
    :func:`make_bilinear_regression`. The chain checked is
    lhs ≥ L(β) + λ‖β‖_F ≥ rhs_at_lhs_solution ≥ rhs (up to FISTA's certified gap).
    """
    X, Y = data if data is not None else make_bilinear_regression(S, C, n, noise, seed)
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if X.shape[1] != S * C or Y.shape[1] != S * C:
        raise ValueError(f"X and Y need S·C = {S * C} columns, got {X.shape[1]} and {Y.shape[1]}")
    V, W, lhs, lhs_steps = solve_factored(X, Y, S, C, lam, seed)
    B, rhs, gap, rhs_steps = solve_l1(X, Y, S, C, lam)
    beta = np.kron(V, W)
    return ImplicitBiasResult(
        S=S, C=C, lam=lam, seed=seed, lhs=lhs, rhs=rhs, rhs_lower_bound=rhs - gap,
        rhs_at_lhs_solution=l1_objective(beta, X, Y, lam, S, C),
        holds=bool(lhs >= rhs), lhs_steps=lhs_steps, rhs_steps=rhs_steps, lemma=lemma_b1(V, W, lam),
    )
