"""Analysis numbers against oracles written here.

* Throughput: a simulated clock that a model advances by a chosen time per batch size, so the
  latency, the search, the best batch and the images/s are known exactly.
* CKA between models: the mini-batch CKA of eval-mode features taken here from
  ``forward_intermediates`` (models with dropout, so that training-mode features would differ).
* Scaling: compute-optimal frontiers by brute force from their definitions; the law's four
  parameters recovered in raw units from exact data; power fits against ``np.linalg.lstsq``.
* Implicit bias: with orthonormal inputs (XᵀX/n = I) the L1 problem of Prop. 3.3 is solved by
  soft-thresholding the least-squares solution, entry by entry.
* Pictures: every unit image is its weight row laid out on the patch grid; every tile of a grid.
* Spectra of a model: each layer's λ_max is numpy's largest singular value, c_γ = 1 + √γ.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

import mlplab
import mlplab.analysis.throughput as throughput
from mlplab.analysis.cka import MinibatchCKA, cka_matrix
from mlplab.analysis.implicit_bias import l1_objective, solve_l1
from mlplab.analysis.pictures import image_grid, token_mixing_unit_images
from mlplab.analysis.scaling import compute_optimal_frontier, fit_power, fit_scaling_law, scaling_law
from mlplab.analysis.spectra import model_weight_spectra

# ----------------------------------------------------------------------------- throughput

def test_throughput_arithmetic_on_a_simulated_clock(monkeypatch):
    now = [0.0]
    seconds = {"a": {1: 0.010, 4: 0.020, 16: 0.200}, "b": {1: 0.002, 2: 0.003, 8: 0.008}}

    class Timed(nn.Module):
        def __init__(self, label):
            super().__init__()
            self.label = label

        def forward(self, x):
            now[0] += seconds[self.label][x.shape[0]]
            return x

    monkeypatch.setitem(throughput.CLOCKS, "wall", lambda: now[0])
    out = throughput.measure_inference({k: Timed(k) for k in seconds}, {"a": (1, 2, 2), "b": (3,)},
                                       {k: list(v) for k, v in seconds.items()}, reps=3, latency_reps=2,
                                       search_reps=2, warmup=1)
    assert out["a"]["latency_s"] == pytest.approx([0.010] * 2) and out["b"]["latency_s"] == pytest.approx([0.002] * 2)
    for k in seconds:
        assert set(out[k]["search"]) == {str(b) for b in seconds[k]}
        for b, t in seconds[k].items():
            assert out[k]["search"][str(b)] == pytest.approx([t, t])
    # images/s: a 100, 200, 80 -> batch 4; b 500, 667, 1000 -> batch 8
    assert out["a"]["best_batch"] == 4 and out["b"]["best_batch"] == 8
    assert (out["a"]["throughput"] == pytest.approx([200.0] * 3)
            and out["b"]["throughput"] == pytest.approx([1000.0] * 3))


# ----------------------------------------------------------------------------- CKA

def test_cka_between_models_is_minibatch_cka_of_their_eval_mode_features():
    torch.manual_seed(0)
    a = mlplab.create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=8, depth=2, drop_rate=0.5,
                            drop_path_rate=0.5, zero_head=False).train()
    b = mlplab.create_model("sw_mlp", image_size=8, patch_size=2, width=32, depth=2, density=0.5, drop_rate=0.5)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(n, 3, 8, 8, generator=g) for n in (9, 6, 7)]
    got = cka_matrix(a, b, batches, layers_a=["blocks.1.channel", "stem", "blocks.0.token"])
    assert a.training and b.training
    want = MinibatchCKA(3, 2)
    with torch.no_grad():
        for x in batches:
            fa, fb = a.eval().forward_intermediates(x)[1], b.eval().forward_intermediates(x)[1]
            want.update([fa["blocks.1.channel"], fa["stem"], fa["blocks.0.token"]], [fb["blocks.0"], fb["blocks.1"]])
    np.testing.assert_allclose(got.matrix, want.compute(), rtol=1e-10, atol=1e-12)
    assert got.layers_b == ["blocks.0", "blocks.1"] and got.num_examples == 22
    assert not np.allclose(got.matrix, cka_matrix(a, None, batches, layers_a=got.layers_a,
                                                   layers_b=["blocks.0.token", "blocks.1.channel"]).matrix[:, :2])


# ----------------------------------------------------------------------------- scaling

def _pareto(C, E):
    """i is compute-optimal when every other run of at most its compute has a higher error (of
    runs with equal compute and error, the first)."""
    def beats(j, i):
        return C[j] <= C[i] and (E[j] < E[i] or (E[j] == E[i] and (C[j] < C[i] or j < i)))

    return [i for i in np.argsort(C, kind="stable") if not any(beats(j, i) for j in range(len(C)) if j != i)]


def _lower_hull(C, E, idx):
    """Points of ``idx`` that lie strictly below the chord of every pair of others around them."""
    x, y = np.log(C[idx]), np.log(E[idx])
    keep = []
    for k in range(len(idx)):
        above = any(x[i] < x[k] < x[j] and y[k] >= y[i] + (y[j] - y[i]) * (x[k] - x[i]) / (x[j] - x[i])
                    for i in range(len(idx)) for j in range(len(idx)))
        if not above:
            keep.append(idx[k])
    return keep


def _buckets(C, E, n):
    logc = np.log(C)
    edges = np.linspace(logc.min(), logc.max(), n + 1)
    out = []
    for b in range(n):
        last = b == n - 1
        members = [i for i in range(len(C)) if edges[b] <= logc[i] and (logc[i] < edges[b + 1] or last)]
        if members:
            out.append(min(members, key=lambda i: E[i]))
    return sorted(out, key=lambda i: C[i])


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 10**6), st.integers(3, 25), st.integers(1, 6))
def test_frontiers_are_their_definitions(seed, n, buckets):
    rng = np.random.default_rng(seed)
    C = 10 ** rng.uniform(0, 6, n)
    C[: n // 3] = C[n // 3: 2 * (n // 3)]  # runs with equal compute
    E = rng.integers(1, 9, n) / 8  # and equal errors
    pareto = _pareto(C, E)
    assert compute_optimal_frontier(C, E).tolist() == pareto
    hull = compute_optimal_frontier(C, E, "hull").tolist()
    assert hull == (_lower_hull(C, E, pareto) if len(pareto) >= 3 else pareto)
    assert compute_optimal_frontier(C, E, "bucket", num_buckets=buckets).tolist() == _buckets(C, E, buckets)


def test_frontier_edge_cases_by_hand():
    # exactly collinear in log-log (1, 1), (2, 1/2), (4, 1/4): the middle run is no vertex of the hull
    C, E = np.array([1.0, 2.0, 4.0, 8.0]), np.array([1.0, 0.5, 0.25, 0.2])
    assert compute_optimal_frontier(C, E).tolist() == [0, 1, 2, 3]
    assert compute_optimal_frontier(C, E, "hull").tolist() == [0, 2, 3]
    # log 10 is exactly the edge between the two bins of [log 1, log 100]: it opens the second
    C, E = np.array([1.0, 10.0, 100.0]), np.array([0.5, 0.3, 0.4])
    assert compute_optimal_frontier(C, E, "bucket", num_buckets=2).tolist() == [0, 1]
    # a tie in error at more compute is not optimal; at equal compute the first run is
    assert compute_optimal_frontier(np.array([1.0, 2.0, 2.0]), np.array([0.5, 0.5, 0.4])).tolist() == [0, 2]


def test_the_scaling_law_is_recovered_in_raw_units_from_exact_data():
    C = np.logspace(9, 17, 16)
    a, b, alpha, e_inf = 300.0, 5e10, 0.2, 0.07
    fit = fit_scaling_law(C, scaling_law(C, a, b, alpha, e_inf))
    assert fit.a == pytest.approx(a, rel=1e-3) and fit.b == pytest.approx(b, rel=1e-2)
    assert fit.alpha == pytest.approx(alpha, rel=1e-4) and fit.e_inf == pytest.approx(e_inf, rel=1e-4)
    assert fit.log10_a == pytest.approx(math.log10(a), abs=1e-3) and fit.rmse_log < 1e-6 and fit.num_points == 16


def test_fit_power_is_least_squares_in_log_log():
    rng = np.random.default_rng(0)
    x = 10 ** rng.uniform(0, 5, 30)
    y = 3.0 * x ** 0.6 * np.exp(0.3 * rng.standard_normal(30))
    (slope, icpt), *_ = np.linalg.lstsq(np.c_[np.log(x), np.ones(30)], np.log(y), rcond=None)
    beta, k = fit_power(x, y)
    assert beta == pytest.approx(slope, rel=1e-10) and k == pytest.approx(math.exp(icpt), rel=1e-10)


# ----------------------------------------------------------------------------- implicit bias

@pytest.mark.parametrize("lam", [0.05, 0.4])
def test_the_l1_problem_with_orthonormal_inputs_is_soft_thresholding(lam):
    S, C, n = 2, 3, 36
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((n, S * C)))
    X = q * math.sqrt(n)  # XᵀX / n = I
    Y = np.random.default_rng(1).standard_normal((n, S * C))
    ls = Y.T @ X / n  # the least-squares B
    mu = lam / (C * S)
    want = np.sign(ls) * np.maximum(np.abs(ls) - mu, 0.0)
    assert (want == 0).any() and (want != 0).any()
    B, obj, gap, _ = solve_l1(X, Y, S, C, lam)
    np.testing.assert_allclose(B, want, atol=1e-8)
    R = Y - X @ want.T
    assert obj == pytest.approx(0.5 * (R ** 2).sum() / n + mu * np.abs(want).sum(), rel=1e-9)
    assert l1_objective(want, X, Y, lam, S, C) == pytest.approx(obj, rel=1e-9) and gap < 1e-8


# ----------------------------------------------------------------------------- pictures, spectra

def test_every_unit_image_is_its_weight_row_on_the_patch_grid():
    torch.manual_seed(0)
    model = mlplab.create_model("mlp_mixer", image_size=12, patch_size=2, hidden_dim=4, depth=1)  # 6x6 patches
    W = model.blocks[0].token_mixing.inner.fc1.weight.detach().numpy()
    imgs = token_mixing_unit_images(model)
    for u in range(W.shape[0]):
        for r in range(6):
            for c in range(6):
                assert imgs[u, r, c] == W[u, 6 * r + c]  # patch (r, c) is token 6r + c


def test_every_tile_of_an_image_grid():
    imgs = np.random.default_rng(0).standard_normal((7, 2, 3))
    g = image_grid(imgs, ncols=3, pad=2)
    assert g.shape == (3 * 4 - 2, 3 * 5 - 2)
    for k in range(7):
        r, c = k // 3, k % 3
        np.testing.assert_array_equal(g[4 * r: 4 * r + 2, 5 * c: 5 * c + 3], imgs[k])
    assert np.isnan(g[2:4]).all() and np.isnan(g[:, 3:5]).all() and np.isnan(g[8:, 5:]).all()


def test_model_weight_spectra_are_numpys_largest_singular_values():
    torch.manual_seed(0)
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=6, depth=2, token_hidden=5,
                                channel_hidden=9)
    rows = model_weight_spectra(model, include_other=True)
    mods = dict(model.named_modules())
    assert {r["name"] for r in rows} == {n for n, m in mods.items() if type(m) is nn.Linear}
    for r in rows:
        w = mods[r["name"]].weight.detach().double().numpy()
        assert r["shape"] == w.shape and r["lambda_max"] == pytest.approx(np.linalg.svd(w, compute_uv=False)[0],
                                                                          rel=1e-9)
        assert r["c_gamma"] == pytest.approx(1 + math.sqrt(max(w.shape) / min(w.shape)), rel=1e-12)
