"""MaskedLinear / SparseLinear (same function, both train), MonarchLinear and KroneckerLinear
(forward = the dense matrix, never formed), in float64."""
import math

import pytest
import torch

from mlplab.layers import KroneckerLinear, MaskedLinear, MonarchLinear, SparseLinear
from mlplab.layers.masked import bernoulli_mask_indices
from mlplab.layers.vec import commutation_matrix, commutation_perm, perm_matrix, unvec, vec

f64 = torch.float64


def _pair(n_in=30, n_out=20, p=0.3, seed=1, mask_scale=False):
    a = MaskedLinear.random(n_in, n_out, p, seed, mask_scale=mask_scale).to(f64)
    b = SparseLinear.random(n_in, n_out, p, seed, mask_scale=mask_scale).to(f64)
    with torch.no_grad():
        a.bias.normal_()
        b.bias.copy_(a.bias)
    return a, b


@pytest.mark.parametrize("mask_scale", [False, True])
def test_masked_and_sparse_compute_the_same_function_and_gradients(mask_scale):
    a, b = _pair(mask_scale=mask_scale)
    assert torch.equal(a.effective_weight(), b.effective_weight())
    x = torch.randn(7, 30, dtype=f64, requires_grad=True)
    ya, yb = a(x), b(x)
    torch.testing.assert_close(ya, yb, rtol=0, atol=1e-12)
    g = torch.randn_like(ya)
    gxa, gwa, gba = torch.autograd.grad(ya, (x, a.weight, a.bias), g)
    gxb, gvb, gbb = torch.autograd.grad(yb, (x, b.values, b.bias), g)
    torch.testing.assert_close(gxa, gxb, rtol=0, atol=1e-12)
    torch.testing.assert_close(gwa[a.mask], gvb, rtol=0, atol=1e-12)
    torch.testing.assert_close(gba, gbb)
    assert gwa[~a.mask].abs().max() == 0  # off-mask weights get no gradient: they stay zero


def test_sparse_gradcheck_and_batched_input():
    _, b = _pair(n_in=6, n_out=5, p=0.5)
    x = torch.randn(3, 6, dtype=f64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: b(x), (x,))
    v = b.values.detach().clone().requires_grad_()
    from mlplab.layers.masked import _SparseMatmul
    assert torch.autograd.gradcheck(lambda x, v: _SparseMatmul.apply(x, v, b._pattern()), (x, v))
    x3 = torch.randn(2, 3, 6, dtype=f64)
    torch.testing.assert_close(b(x3), x3 @ b.effective_weight().T + b.bias)


def test_from_masked_and_mask_statistics():
    a, _ = _pair(n_in=200, n_out=100, p=0.2, mask_scale=True)
    c = SparseLinear.from_masked(a)
    x = torch.randn(4, 200, dtype=f64)
    torch.testing.assert_close(a(x), c(x))
    assert abs(a.density - 0.2) < 0.02
    assert float(a.scale) == pytest.approx(1 / math.sqrt(0.2))
    assert c.nnz == a.nnz == int(a.mask.sum())


def test_mask_is_seeded_and_block_drawn():
    i1 = bernoulli_mask_indices(600, 50, 0.1, seed=3)
    i2 = bernoulli_mask_indices(600, 50, 0.1, seed=3)
    i3 = bernoulli_mask_indices(600, 50, 0.1, seed=4)
    assert torch.equal(i1, i2) and not torch.equal(i1, i3)
    assert i1[0].max() >= 512  # rows beyond the first generator block are drawn
    with pytest.raises(ValueError, match=r"density p must be in \(0, 1\]"):
        bernoulli_mask_indices(4, 4, 0.0, seed=0)


def test_sparse_storage_scales_with_nnz():
    def nbytes(mod):
        return sum(t.numel() * t.element_size() for t in list(mod.parameters()) + list(mod.buffers()))

    a = MaskedLinear.random(256, 256, 0.05, 0)
    b = SparseLinear.from_masked(a)
    assert nbytes(b) < nbytes(a) / 3  # 12 bytes per nonzero vs 5 per entry


def test_sparse_rejects_bad_indices():
    with pytest.raises(ValueError, match="out of range"):
        SparseLinear(3, 2, torch.tensor([[0, 2], [0, 1]]))
    with pytest.raises(ValueError, match="duplicate"):
        SparseLinear(3, 2, torch.tensor([[0, 0], [1, 1]]))


def test_monarch_square_equals_jc_l_jc_r():
    torch.manual_seed(0)
    mon = MonarchLinear(16, 16).to(f64)  # n = 16: 4 blocks of 4x4
    assert (mon.nblocks, mon.block_in, mon.mid_block, mon.block_out) == (4, 4, 4, 4)
    L, R = mon.block_matrices()
    Jc = commutation_matrix(4, 4)
    assert torch.equal(Jc, perm_matrix(commutation_perm(4, 4)))
    torch.testing.assert_close(mon.dense(), Jc.T @ L @ Jc @ R, rtol=0, atol=1e-12)
    x = torch.randn(5, 16, dtype=f64)
    torch.testing.assert_close(mon(x), x @ mon.dense().T + mon.bias, rtol=0, atol=1e-12)
    # the middle step is the transpose of the (4x4) matrix whose vec is R x
    u = (x @ R.T)[0]
    torch.testing.assert_close(Jc @ u, vec(unvec(u, 4, 4).T))


def test_monarch_rectangular():
    torch.manual_seed(1)
    mon = MonarchLinear(12, 15, nblocks=3, mid_block=5).to(f64)  # k=3, b=4, q=5, l=3
    L, R = mon.block_matrices()
    assert L.shape == (15, 15) and R.shape == (15, 12)
    M = commutation_matrix(mon.block_out, mon.mid_block) @ L @ commutation_matrix(mon.mid_block, mon.nblocks) @ R
    torch.testing.assert_close(mon.dense(), M, rtol=0, atol=1e-12)
    x = torch.randn(2, 4, 12, dtype=f64)
    torch.testing.assert_close(mon(x), x @ M.T + mon.bias, rtol=0, atol=1e-12)
    assert mon.flops_per_example() == 2 * (3 * 5 * 4 + 5 * 3 * 3)
    with pytest.raises(ValueError, match="divide in_features"):
        MonarchLinear(12, 12, nblocks=5)
    with pytest.raises(ValueError, match="multiple of mid_block"):
        MonarchLinear(12, 14, nblocks=3)


def test_kronecker_equals_v_kron_w():
    torch.manual_seed(2)
    kr = KroneckerLinear(12, 20, in_shape=(3, 4), out_shape=(5, 4)).to(f64)
    x = torch.randn(6, 12, dtype=f64)
    torch.testing.assert_close(kr(x), x @ kr.dense().T + kr.bias, rtol=0, atol=1e-12)
    # vec(W X Vᵀ) with X = unvec(x) (column-major, docs/science.md §1)
    X = x[0].reshape(4, 3).T  # (a, b) = (3, 4): vec(X) = x[0]
    torch.testing.assert_close(kr(x[:1])[0] - kr.bias, vec(kr.W @ X @ kr.V.T), rtol=0, atol=1e-12)
    assert KroneckerLinear(784, 784).in_shape == (28, 28)
    with pytest.raises(ValueError, match="factors of 12"):
        KroneckerLinear(12, 12, in_shape=(5, 3))
