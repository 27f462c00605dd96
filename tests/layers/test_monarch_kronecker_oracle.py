"""Monarch and Kronecker layers (mlplab.layers.monarch / kronecker) against independent numbers:
the factor rule by brute force, each factor's initial law against its stated scheme (Monarch: R
and L blocks U(±1/√fan_in) on their own fan-in, as nn.Linear; Kronecker: W ~ U(±√(3/a)), V ~
U(±1/√b), so the entries of V ⊗ W have nn.Linear's Var = 1/(3·a·b)), the products written as
explicit sums, and every refusal."""
from __future__ import annotations

import math

import pytest
import torch

from mlplab.layers.kronecker import KroneckerLinear
from mlplab.layers.monarch import MonarchLinear, closest_factor

f64 = torch.float64


def uniform_law(w: torch.Tensor, bound: float, what: str) -> None:
    """Entries i.i.d. U(−bound, bound): mean 0, mean square bound²/3 (Var of w² = 4/45·bound⁴),
    within the bound and filling it."""
    w = w.detach().double().flatten()
    n = w.numel()
    var = bound ** 2 / 3
    ms = float((w ** 2).mean())
    assert abs(ms - var) < 5 * math.sqrt(4 / 45 / n) * bound ** 2, f"{what}: mean square {ms:.5g} vs {var:.5g}"
    assert abs(float(w.mean())) < 5 * math.sqrt(var / n), what
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > (1 - 8 / n) * bound, what


def test_closest_factor_is_the_largest_divisor_not_above_the_root():
    for n in range(1, 400):
        expected = max(d for d in range(1, n + 1) if n % d == 0 and d * d <= n)
        assert closest_factor(n) == expected, n
    assert (closest_factor(784), closest_factor(3072), closest_factor(997)) == (28, 48, 1)
    for bad in (0, -4):
        with pytest.raises(ValueError, match=f"cannot factor n={bad}; it must be >= 1"):
            closest_factor(bad)


def test_monarch_initial_blocks_follow_nn_linear_on_their_own_fan_in():
    torch.manual_seed(0)
    mon = MonarchLinear(512, 320, nblocks=8, mid_block=16)  # k = 8, b = 64, q = 16, l = 20
    assert (mon.nblocks, mon.block_in, mon.mid_block, mon.block_out) == (8, 64, 16, 20)
    assert mon.R.shape == (8, 16, 64) and mon.L.shape == (16, 20, 8)
    uniform_law(mon.R, 1 / math.sqrt(64), "R")
    uniform_law(mon.L, 1 / math.sqrt(8), "L")
    uniform_law(mon.bias, 1 / math.sqrt(512), "bias")
    torch.manual_seed(1)
    square = MonarchLinear(1024, 1024)  # default: k = 32 blocks of 32
    uniform_law(square.R, 1 / math.sqrt(32), "square R")
    uniform_law(square.L, 1 / math.sqrt(32), "square L")


def test_monarch_forward_is_the_block_sum_written_out():
    """y[r·q + i] = Σ_j L[i, r, j] · Σ_c R[j, i, c] x[j·b + c] + bias (module docstring)."""
    torch.manual_seed(3)
    k, b, q, l_ = 2, 3, 4, 5
    mon = MonarchLinear(k * b, q * l_, nblocks=k, mid_block=q).to(f64)
    x = torch.randn(2, k * b, dtype=f64)
    y = torch.zeros(2, q * l_, dtype=f64)
    for n in range(2):
        for r in range(l_):
            for i in range(q):
                y[n, r * q + i] = sum(mon.L[i, r, j] * sum(mon.R[j, i, c] * x[n, j * b + c] for c in range(b))
                                      for j in range(k)) + mon.bias[r * q + i]
    torch.testing.assert_close(mon(x), y, rtol=0, atol=1e-12)
    torch.testing.assert_close(mon(x[:, None]), y[:, None], rtol=0, atol=1e-12)  # leading dims kept
    M = torch.zeros(q * l_, k * b, dtype=f64)  # M[r·q + i, j·b + c] = L[i, r, j] R[j, i, c]
    for r in range(l_):
        for i in range(q):
            for j in range(k):
                for c in range(b):
                    M[r * q + i, j * b + c] = mon.L[i, r, j] * mon.R[j, i, c]
    torch.testing.assert_close(mon.dense(), M, rtol=0, atol=1e-12)
    L, R = mon.block_matrices()
    assert L.shape == (q * l_, q * k) and R.shape == (k * q, k * b)
    assert torch.equal(R[q:2 * q, b:2 * b], mon.R[1]) and torch.equal(L[l_:2 * l_, k:2 * k], mon.L[1])
    nobias = MonarchLinear(6, 20, nblocks=2, mid_block=4, bias=False)
    assert nobias.bias is None
    torch.testing.assert_close(nobias(x.float()), x.float() @ nobias.dense().T, rtol=1e-5, atol=1e-6)
    assert mon.flops_per_example() == 2 * (k * q * b + q * l_ * k) == 2 * (2 * 4 * 3 + 4 * 5 * 2)
    assert mon.extra_repr() == "in=6, out=20, R: 2x(4x3), L: 4x(5x2)"
    assert MonarchLinear(6, 9).mid_block == 3  # q defaults to b = n_in / k (k = 2 for 6)


def test_monarch_refusals():
    with pytest.raises(ValueError, match="nblocks=5 must be >= 1 and divide in_features=12"):
        MonarchLinear(12, 12, nblocks=5)
    with pytest.raises(ValueError, match="nblocks=0 must be >= 1"):
        MonarchLinear(12, 12, nblocks=0)
    with pytest.raises(ValueError, match="nblocks=-3 must be >= 1"):
        MonarchLinear(12, 12, nblocks=-3)
    with pytest.raises(ValueError, match=r"out_features=14 must be a multiple of mid_block q=4 "
                                         r"\(q blocks of L\); choose out_features divisible by 4 or set mid_block"):
        MonarchLinear(12, 14, nblocks=3)
    with pytest.raises(ValueError, match="mid_block q=0"):
        MonarchLinear(12, 12, nblocks=3, mid_block=0)
    with pytest.raises(ValueError, match="mid_block q=-4"):
        MonarchLinear(12, 12, nblocks=3, mid_block=-4)
    MonarchLinear(12, 12, nblocks=1, mid_block=1)  # the smallest blocks are allowed


def test_kronecker_initial_factors_and_their_product():
    torch.manual_seed(0)
    kr = KroneckerLinear(24 * 40, 30 * 50, in_shape=(24, 40), out_shape=(30, 50))  # a = 24, b = 40
    assert kr.W.shape == (30, 24) and kr.V.shape == (50, 40)
    uniform_law(kr.W, math.sqrt(3 / 24), "W")
    uniform_law(kr.V, 1 / math.sqrt(40), "V")
    uniform_law(kr.bias, 1 / math.sqrt(24 * 40), "bias")
    ms = float((kr.dense().double() ** 2).mean())  # entries of V ⊗ W: Var = 1/(3 a b)
    assert ms == pytest.approx(1 / (3 * 24 * 40), rel=0.05)


def test_kronecker_forward_is_the_double_sum_written_out():
    """y[e·c + i] = Σ_{s,t} V[e, t] W[i, s] x[t·a + s] + bias: (V ⊗ W) vec(X), X = unvec(x) ∈ R^{a×b}."""
    torch.manual_seed(4)
    a, b, c, d = 2, 3, 4, 2
    kr = KroneckerLinear(a * b, c * d, in_shape=(a, b), out_shape=(c, d)).to(f64)
    x = torch.randn(3, a * b, dtype=f64)
    y = torch.zeros(3, c * d, dtype=f64)
    for n in range(3):
        for e in range(d):
            for i in range(c):
                y[n, e * c + i] = sum(kr.V[e, t] * kr.W[i, s] * x[n, t * a + s]
                                      for s in range(a) for t in range(b)) + kr.bias[e * c + i]
    torch.testing.assert_close(kr(x), y, rtol=0, atol=1e-12)
    torch.testing.assert_close(kr(x.reshape(3, 1, a * b)), y.reshape(3, 1, c * d), rtol=0, atol=1e-12)
    torch.testing.assert_close(kr.dense(), torch.kron(kr.V, kr.W), rtol=0, atol=0)
    assert kr.flops_per_example() == 2 * (d * b * a + d * a * c) == 2 * (2 * 3 * 2 + 2 * 2 * 4)
    assert kr.extra_repr() == "in=6 as (2, 3), out=8 as (4, 2)"
    nobias = KroneckerLinear(6, 8, in_shape=(2, 3), out_shape=(4, 2), bias=False).to(f64)
    assert nobias.bias is None
    torch.testing.assert_close(nobias(x), x @ nobias.dense().T, rtol=0, atol=1e-12)


def test_kronecker_shapes_and_refusals():
    k = KroneckerLinear(12, 30)
    assert k.in_shape == (3, 4) and k.out_shape == (5, 6)  # a = the divisor closest to √n, not above
    assert type(k.in_shape[0]) is int
    assert KroneckerLinear(12, 12, in_shape=(1, 12), out_shape=(12, 1)).out_shape == (12, 1)
    for bad in ((5, 3), (3, 4, 1), (12,), (0, 12), (-3, -4), (-1, 12), (12, 0), (12, -1)):
        with pytest.raises(ValueError, match="in shape .* must be two positive factors of 12"):
            KroneckerLinear(12, 12, in_shape=bad)
    for bad in ((0, 5), (5, 0)):  # a zero factor is refused even where the product (0) matches
        with pytest.raises(ValueError, match="in shape .* must be two positive factors of 0"):
            KroneckerLinear(0, 4, in_shape=bad)
    with pytest.raises(ValueError, match="out shape .* must be two positive factors of 6"):
        KroneckerLinear(12, 6, out_shape=(4, 2))


def test_dense_matrices_are_built_where_the_factors_live():
    mon = MonarchLinear(6, 8, nblocks=2, mid_block=4)
    assert mon.to(f64).dense().dtype == f64
    assert mon.to("meta").dense().device.type == "meta" and mon.dense().shape == (8, 6)
    kr = KroneckerLinear(6, 8).to("meta")
    assert kr.dense().device.type == "meta" and kr.dense().shape == (8, 6)
    cpu = MonarchLinear(6, 8, nblocks=2, mid_block=4).to(f64)
    want = cpu.dense()
    with torch.device("meta"):  # another default device: the identity is still made beside the factors
        got = cpu.dense()
    assert got.device.type == "cpu" and torch.equal(got, want)
