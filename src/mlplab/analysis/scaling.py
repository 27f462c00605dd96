"""Scaling-law fits in compute (docs/science.md §7, after Bachmann et al. 2023, "Scaling MLPs").

* Compute of a run: C = FLOP(f) · 3 · N · T — forward FLOPs per example, ×3 for forward plus
  backward, N examples, T epochs (:func:`compute_budget`).
* Error against compute: E(C) = a (b + C)^(−α) + E∞, fitted with ``scipy.optimize.curve_fit``
  (:func:`fit_scaling_law`). b bends the curve at small compute, E∞ is the irreducible error.
* Compute-optimal frontier: the runs that reach the lowest error for their compute
  (:func:`compute_optimal_frontier`), and on it P*(C) ∝ C^β_P, N*(C) ∝ C^β_N
  (:func:`fit_frontier_exponents`); Bachmann et al. report β_P ≈ 0.35, β_N ≈ 0.65.
* Uncertainty: a bootstrap over runs gives 95% intervals of α, β_P and β_N
  (:func:`bootstrap_scaling`).

Fitting across 6–10 decades of compute is ill-conditioned in raw units, so C is divided by its
geometric mean C0 before fitting, b is fitted as log10(b/C0), and residuals are taken in log E
(every run then weighs the same whatever its error level). Several starts are tried and the
best kept.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

__all__ = [
    "PUBLISHED_EXPONENTS",
    "compute_budget",
    "scaling_law",
    "ScalingLawFit",
    "fit_scaling_law",
    "compute_optimal_frontier",
    "fit_power",
    "fit_frontier_exponents",
    "ScalingBootstrap",
    "bootstrap_scaling",
]

# Bachmann et al. (2023): compute-optimal parameters and examples grow as C^0.35 and C^0.65.
PUBLISHED_EXPONENTS = {"beta_P": 0.35, "beta_N": 0.65}


def compute_budget(flops_per_example, num_examples, epochs):
    """C = FLOP(f) · 3 · N · T (docs/science.md §7): forward FLOPs per example, ×3 for the backward pass,
    N training examples, T epochs. Broadcasts over arrays."""
    return np.asarray(flops_per_example, dtype=np.float64) * 3.0 * np.asarray(num_examples, dtype=np.float64) \
        * np.asarray(epochs, dtype=np.float64)


def scaling_law(C, a: float, b: float, alpha: float, e_inf: float):
    """E(C) = a (b + C)^(−α) + E∞ (docs/science.md §7)."""
    return a * np.power(b + np.asarray(C, dtype=np.float64), -alpha) + e_inf


@dataclass
class ScalingLawFit:
    """Parameters of E(C) = a (b + C)^(−α) + E∞, with 1-σ errors from curve_fit's covariance
    (in the fitted parametrisation; ``alpha_err`` and ``e_inf_err`` are directly usable)."""

    a: float
    b: float
    alpha: float
    e_inf: float
    alpha_err: float
    e_inf_err: float
    log10_a: float
    rmse_log: float  # root-mean-square residual of log E
    num_points: int

    def predict(self, C) -> np.ndarray:
        x = np.asarray(C, dtype=np.float64)
        return 10.0 ** (self.log10_a - self.alpha * np.log10(self.b + x)) + self.e_inf

    def to_dict(self) -> dict:
        return asdict(self)


def _log_model(x, log_A, log10_b, alpha, e_inf):
    # E = A (b' + x)^(−α) + E∞ in normalised units x = C / C0; log of it for log-space residuals
    return np.log(np.exp(log_A - alpha * np.log(10.0 ** log10_b + x)) + e_inf)


def fit_scaling_law(C: Sequence[float], E: Sequence[float], p0: dict | None = None,
                    fix_b_zero: bool = False, maxfev: int = 20000) -> ScalingLawFit:
    """Fit E(C) = a (b + C)^(−α) + E∞ by least squares on log E (docs/science.md §7).

    ``C``: compute per run (see :func:`compute_budget`), ``E``: error (> 0), at least 4 runs.
    ``p0``: optional initial guesses {a, b, alpha, e_inf} in raw units (tried first).
    ``fix_b_zero=True`` fits the pure power law plus floor (b = 0).
    Bounds: 0 ≤ E∞ ≤ 0.999 min E, 10⁻⁴ ≤ α ≤ 10, 10⁻¹⁰ C0 ≤ b ≤ 10³ max C (b ≤ 10^−9.999999 C0
    with ``fix_b_zero``, reported as 0), |log A| ≤ 200 with A = a C0^(−α).
    Starts, each moved inside the bounds by 10⁻⁹ of their width: ``p0`` (a = 1, b = 0, α = 0.5,
    E∞ = 0 where missing; a ≥ 10⁻³⁰⁰, b ≥ 10⁻¹⁰ C0, E∞ ≤ 0.99 min E); then for E0 = 0, 0.5 and 0.9 × min E the
    line log(E − E0) = log A − α log x (E − E0 ≥ 10⁻¹² min E; α clipped to [10⁻³, 5]) with
    log10(b/C0) = −8, log10 min x and log10 median x. ``maxfev`` evaluations per start; the start
    that ends with the least squared residual is kept.
    """
    C = np.asarray(C, dtype=np.float64).ravel()
    E = np.asarray(E, dtype=np.float64).ravel()
    if C.shape != E.shape:
        raise ValueError(f"C and E must have the same length, got {C.size} and {E.size}")
    ok = np.isfinite(C) & np.isfinite(E) & (C > 0) & (E > 0)
    C, E = C[ok], E[ok]
    if C.size < 4:
        raise ValueError(f"need at least 4 runs with positive finite C and E, got {C.size}")
    C0 = float(np.exp(np.mean(np.log(C))))
    x = C / C0
    y = np.log(E)
    e_min = float(E.min())
    lb_b, ub_b = -10.0, float(np.log10(x.max())) + 3.0
    if fix_b_zero:
        lb_b, ub_b = -10.0, -9.999999
    lower = [-200.0, lb_b, 1e-4, 0.0]
    upper = [200.0, ub_b, 10.0, 0.999 * e_min]

    starts = []
    if p0:
        b0 = max(float(p0.get("b", 0.0)) / C0, 1e-10)
        alpha0 = float(p0.get("alpha", 0.5))
        starts.append([math.log(max(float(p0.get("a", 1.0)), 1e-300)) - alpha0 * math.log(C0),
                       math.log10(b0), alpha0, min(float(p0.get("e_inf", 0.0)), 0.99 * e_min)])
    for frac in (0.0, 0.5, 0.9):
        e0 = frac * e_min
        slope, icpt = np.polyfit(np.log(x), np.log(np.maximum(E - e0, 1e-12 * e_min)), 1)
        alpha0 = float(np.clip(-slope, 1e-3, 5.0))
        for log10_b0 in (-8.0, float(np.log10(x.min())), float(np.log10(np.median(x)))):
            starts.append([float(icpt), log10_b0, alpha0, e0])

    best, best_sse, best_cov = None, math.inf, None
    for s in starts:
        s = [float(np.clip(v, lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))) for v, lo, hi in zip(s, lower, upper)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                warnings.simplefilter("ignore", RuntimeWarning)
                popt, pcov = curve_fit(_log_model, x, y, p0=s, bounds=(lower, upper), maxfev=maxfev)
        except (RuntimeError, ValueError):
            continue
        sse = float(np.sum((_log_model(x, *popt) - y) ** 2))
        if np.isfinite(sse) and sse < best_sse:
            best, best_sse, best_cov = popt, sse, pcov
    if best is None:
        raise RuntimeError("scaling-law fit failed from every starting point")
    log_A, log10_b, alpha, e_inf = (float(v) for v in best)
    err = np.sqrt(np.clip(np.diag(best_cov), 0, np.inf)) if best_cov is not None else np.full(4, np.nan)
    b = 0.0 if fix_b_zero else 10.0 ** log10_b * C0
    # a (b + C)^(−α) = A (b' + C/C0)^(−α)  =>  a = A · C0^α
    log10_a = (log_A + alpha * math.log(C0)) / math.log(10.0)
    return ScalingLawFit(
        a=_pow10(log10_a), b=b, alpha=alpha, e_inf=e_inf,
        alpha_err=float(err[2]), e_inf_err=float(err[3]), log10_a=log10_a,
        rmse_log=math.sqrt(best_sse / C.size), num_points=int(C.size),
    )


def compute_optimal_frontier(C: Sequence[float], E: Sequence[float], method: str = "pareto",
                             num_buckets: int = 10) -> np.ndarray:
    """Indices of the compute-optimal runs, sorted by compute.

    * ``"pareto"``: runs with lower error than every run of less or equal compute (the lower
      envelope "best error reachable with this much compute").
    * ``"hull"``: the Pareto runs on the lower convex hull of (log C, log E).
    * ``"bucket"``: the lowest-error run in each of ``num_buckets`` equal bins of log C.

    A run without a positive finite C or a finite E (a failed run) is on no frontier.
    """
    C = np.asarray(C, dtype=np.float64).ravel()
    E = np.asarray(E, dtype=np.float64).ravel()
    if C.shape != E.shape or C.size == 0:
        raise ValueError("C and E must be non-empty and of the same length")
    valid = np.flatnonzero(np.isfinite(C) & (C > 0) & np.isfinite(E))
    order = valid[np.lexsort((E[valid], C[valid]))]  # by compute, ties by error
    if method in ("pareto", "hull"):
        keep, best = [], math.inf
        for i in order:
            if E[i] < best:
                keep.append(i)
                best = E[i]
        idx = np.asarray(keep, dtype=int)
        if method == "pareto" or idx.size < 3:
            return idx
        px, py = np.log(C[idx]), np.log(E[idx])
        hull: list[int] = []
        for k in range(idx.size):  # monotone chain, lower hull
            while len(hull) >= 2:
                o, a = hull[-2], hull[-1]
                cross = (px[a] - px[o]) * (py[k] - py[o]) - (py[a] - py[o]) * (px[k] - px[o])
                if cross <= 0:
                    hull.pop()
                else:
                    break
            hull.append(k)
        return idx[hull]
    if method == "bucket":
        if not valid.size:
            return valid
        logc = np.log(C[valid])
        edges = np.linspace(logc.min(), logc.max(), num_buckets + 1)
        which = np.clip(np.searchsorted(edges, logc, side="right") - 1, 0, num_buckets - 1)
        keep = []
        for bkt in range(num_buckets):
            members = valid[which == bkt]
            if members.size:
                keep.append(members[np.argmin(E[members])])
        keep = np.asarray(keep, dtype=int)
        return keep[np.argsort(C[keep], kind="stable")]
    raise ValueError(f"unknown frontier method {method!r}; choose pareto, hull or bucket")


def _pow10(x: float) -> float:
    """10^x, ∞ where it exceeds the largest float (x > 308.25)."""
    try:
        return 10.0 ** float(x)
    except OverflowError:
        return math.inf


def fit_power(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(β, k) of y = k x^β by least squares on log y against log x."""
    lx, ly = np.log(np.asarray(x, dtype=np.float64)), np.log(np.asarray(y, dtype=np.float64))
    if lx.size < 2 or np.ptp(lx) == 0:
        raise ValueError("need at least two distinct x values to fit a power law")
    beta, logk = np.polyfit(lx, ly, 1)
    try:
        return float(beta), math.exp(logk)
    except OverflowError:  # k beyond the largest float (log k > 709.78) on a near-vertical frontier
        return float(beta), math.inf


def fit_frontier_exponents(C: Sequence[float], E: Sequence[float], params: Sequence[float] | None = None,
                           examples: Sequence[float] | None = None, method: str = "pareto",
                           num_buckets: int = 10) -> dict:
    """Exponents of the compute-optimal allocation: P*(C) ∝ C^β_P, N*(C) ∝ C^β_N (docs/science.md §7).

    ``params``: parameter count per run; ``examples``: examples seen per run (N·T). The frontier
    comes from :func:`compute_optimal_frontier`. Returns β_P and β_N (those given), the
    frontier indices, the published values (0.35, 0.65) and the differences from them.
    """
    C = np.asarray(C, dtype=np.float64).ravel()
    idx = compute_optimal_frontier(C, E, method, num_buckets)
    out: dict = {"frontier": idx.tolist(), "num_frontier": int(idx.size), "method": method,
                 "published": dict(PUBLISHED_EXPONENTS)}
    for key, vals in (("beta_P", params), ("beta_N", examples)):
        if vals is None:
            continue
        vals = np.asarray(vals, dtype=np.float64).ravel()
        if vals.shape != C.shape:
            raise ValueError(f"{key[5:]} values must match the runs ({C.size}), got {vals.size}")
        beta, k = fit_power(C[idx], vals[idx])
        out[key] = beta
        out[key + "_coef"] = k
        out[key + "_minus_published"] = beta - PUBLISHED_EXPONENTS[key]
    return out


@dataclass
class ScalingBootstrap:
    """95% percentile intervals of α (the fit's exponent) and of β_P, β_N (the frontier's), from
    resampling the runs with replacement; ``*_draws`` counts the resamples that gave a value (a
    resample may have too few distinct runs to fit or a frontier of one run)."""

    alpha: tuple[float, float]
    beta_P: tuple[float, float]
    beta_N: tuple[float, float]
    alpha_draws: int
    frontier_draws: int
    resamples: int

    def to_dict(self) -> dict:
        return asdict(self)


def _interval(values: list[float]) -> tuple[float, float]:
    if not values:
        return (math.nan, math.nan)
    lo, hi = np.percentile(np.asarray(values, dtype=np.float64), [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap_scaling(C: Sequence[float], E: Sequence[float], params: Sequence[float],
                      examples: Sequence[float], resamples: int = 500, seed: int = 0,
                      method: str = "pareto") -> ScalingBootstrap:
    """Bootstrap over runs (case resampling) of α in E(C) = a (b + C)^(−α) + E∞
    (:func:`fit_scaling_law`) and of the frontier exponents β_P, β_N
    (:func:`fit_frontier_exponents`). Each resample draws len(C) runs with replacement and refits
    everything; the intervals are the 2.5% and 97.5% percentiles of the refitted values. By default
    500 resamples from seed 0."""
    C, E = np.asarray(C, dtype=np.float64).ravel(), np.asarray(E, dtype=np.float64).ravel()
    P, NT = np.asarray(params, dtype=np.float64).ravel(), np.asarray(examples, dtype=np.float64).ravel()
    if not (C.shape == E.shape == P.shape == NT.shape) or C.size < 4:
        raise ValueError(f"need C, E, params and examples of one length >= 4, got {C.size}, {E.size}, "
                         f"{P.size}, {NT.size}")
    rng = np.random.default_rng(seed)
    alphas, beta_p, beta_n = [], [], []
    for _ in range(resamples):
        i = rng.integers(0, C.size, C.size)
        if np.unique(C[i]).size >= 4:
            try:
                alphas.append(fit_scaling_law(C[i], E[i], maxfev=2000).alpha)
            except (RuntimeError, ValueError):
                pass
        try:
            fr = fit_frontier_exponents(C[i], E[i], P[i], NT[i], method=method)
        except ValueError:  # a frontier of one compute value: no exponent
            continue
        beta_p.append(fr["beta_P"])
        beta_n.append(fr["beta_N"])
    return ScalingBootstrap(_interval(alphas), _interval(beta_p), _interval(beta_n), len(alphas), len(beta_p),
                            resamples)
