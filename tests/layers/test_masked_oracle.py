"""The SW-MLP's sparse layers (mlplab.layers.masked) against numbers computed another way: the
mask's law and its seeded block draw written out here, the initial variance E[w²] = 1/fan_in of
the effective weight, the CSR products against dense float64 matrices, the refusals, and a saved
mask of another size loading into a layer."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mlplab.layers.masked import (
    MaskedLinear,
    SparseLinear,
    _CsrPattern,
    _SparseMatmul,
    bernoulli_mask_indices,
    mask_from_indices,
)
from mlplab.utils.seeds import derive_generator

f64 = torch.float64


def _mask_by_hand(out_f: int, in_f: int, p: float, seed: int) -> np.ndarray:
    """The documented draw: 256 rows at a time, block b from derive_generator(seed, "mask", b),
    an entry kept when its uniform is below p."""
    blocks = []
    for b, r0 in enumerate(range(0, out_f, 256)):
        u = torch.rand(min(256, out_f - r0), in_f, generator=derive_generator(seed, "mask", b))
        blocks.append(u.numpy() < p)
    return np.concatenate(blocks) if blocks else np.zeros((0, in_f), bool)


def test_mask_is_the_seeded_block_draw_row_major():
    idx = bernoulli_mask_indices(520, 7, 0.3, seed=5)
    assert idx.dtype == torch.long and idx.shape[0] == 2
    r, c = np.nonzero(_mask_by_hand(520, 7, 0.3, 5))  # row-major order
    np.testing.assert_array_equal(idx[0].numpy(), r)
    np.testing.assert_array_equal(idx[1].numpy(), c)
    assert torch.equal(mask_from_indices(idx, 520, 7), torch.from_numpy(_mask_by_hand(520, 7, 0.3, 5)))
    assert bernoulli_mask_indices(0, 7, 0.3, seed=5).shape == (2, 0)
    assert mask_from_indices(idx, 520, 7).dtype == torch.bool


def test_an_entry_is_kept_only_when_its_uniform_is_strictly_below_p():
    u = torch.rand(4, 6, generator=derive_generator(2, "mask", 0))
    p = float(u[1, 3])  # a density equal to one of the drawn uniforms: that entry is dropped
    idx = bernoulli_mask_indices(4, 6, p, seed=2)
    assert torch.equal(mask_from_indices(idx, 4, 6), torch.from_numpy(_mask_by_hand(4, 6, p, 2)))
    assert [1, 3] not in idx.T.tolist()


def test_mask_density_is_bernoulli_p_and_its_bounds():
    n_out, n_in, p = 300, 200, 0.1
    nnz = bernoulli_mask_indices(n_out, n_in, p, seed=0).shape[1]
    N = n_out * n_in
    assert abs(nnz - N * p) < 5 * math.sqrt(N * p * (1 - p))  # Binomial(N, p)
    assert bernoulli_mask_indices(3, 4, 1.0, seed=0).shape[1] == 12  # p = 1: every entry
    for bad in (0.0, -0.5, 1.0 + 1e-9, 2.0):
        with pytest.raises(ValueError, match=r"density p must be in \(0, 1\], got"):
            bernoulli_mask_indices(3, 4, bad, seed=0)


@pytest.mark.parametrize("cls", [MaskedLinear, SparseLinear])
@pytest.mark.parametrize("mask_scale", [False, True])
def test_initial_effective_weight_has_variance_one_over_fan_in(cls, mask_scale):
    """E[(scale·M⊙A)²] = p·scale²·std² = 1/in; the nonzero values are N(0, std²) with std² =
    1/(in·p·scale²): 1/(in·p) unscaled, 1/in with scale 1/√p."""
    n_in, n_out, p = 200, 150, 0.25
    layer = cls.random(n_in, n_out, p, seed=3, mask_scale=mask_scale)
    scale = 1 / math.sqrt(p) if mask_scale else 1.0
    assert float(layer.scale) == pytest.approx(scale, rel=1e-7)
    vals = (layer.weight[layer.mask] if cls is MaskedLinear else layer.values).detach().double()
    n = vals.numel()
    var = 1.0 / (n_in * p * scale * scale)
    assert abs(float((vals ** 2).mean()) - var) < 5 * var * math.sqrt(2 / n)  # normal: Var(v²) = 2σ⁴
    assert abs(float(vals.mean())) < 5 * math.sqrt(var / n)
    kurt = float((vals ** 4).mean()) / float((vals ** 2).mean()) ** 2
    assert abs(kurt - 3.0) < 0.5
    W = layer.effective_weight().detach().double()
    assert abs(float((W ** 2).mean()) - 1 / n_in) < 0.1 / n_in
    if cls is MaskedLinear:
        assert float(layer.weight[~layer.mask].abs().max()) == 0.0
    assert torch.all(layer.bias == 0)


def test_both_storages_draw_the_same_values_from_the_seed():
    a = MaskedLinear.random(9, 6, 0.5, seed=2)
    b = SparseLinear.random(9, 6, 0.5, seed=2)
    c = SparseLinear.random(9, 6, 0.5, seed=3)
    idx = bernoulli_mask_indices(6, 9, 0.5, seed=2)
    std = 1 / math.sqrt(9 * 0.5)
    expected = torch.randn(idx.shape[1], generator=derive_generator(2, "values")) * std
    assert torch.equal(b.values.detach(), expected) and torch.equal(a.weight[idx[0], idx[1]].detach(), expected)
    assert torch.equal(b.indices.long(), idx) and not torch.equal(b.values.detach()[:3], c.values.detach()[:3])
    assert b.bias is not None and SparseLinear.random(9, 6, 0.5, seed=2, bias=False).bias is None
    assert MaskedLinear.random(9, 6, 0.5, seed=2, bias=False).bias is None


def test_masked_linear_is_scale_times_mask_times_weight_plus_bias():
    mask = torch.tensor([[1, 0, 1], [0, 0, 1]], dtype=torch.bool)
    layer = MaskedLinear(3, 2, mask, scale=2.0).to(f64)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 5.0, -2.0], [7.0, 3.0, 0.5]]))
        layer.bias.copy_(torch.tensor([0.25, -1.0]))
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=f64)
    # row 0: 2·(1·1 − 2·3) + 0.25 = −9.75; row 1: 2·(0.5·3) − 1 = 2
    torch.testing.assert_close(layer(x), torch.tensor([[-9.75, 2.0]], dtype=f64), rtol=0, atol=0)
    assert layer.nnz == 3 and layer.density == 0.5
    assert layer.extra_repr() == "in=3, out=2, density=0.5, scale=2"
    mask[0, 1] = True  # the layer keeps its own copy of the mask
    assert not layer.mask[0, 1]
    one = MaskedLinear(1, 1, torch.ones(1, 1, dtype=torch.bool), bias=False)
    assert one.density == 1.0 and one.bias is None
    assert MaskedLinear(1, 1, torch.tensor([[1]])).mask.dtype == torch.bool
    assert float(MaskedLinear(1, 1, torch.tensor([[1]])).scale) == 1.0  # unscaled by default
    with pytest.raises(ValueError, match=r"mask has shape \(3, 2\), expected \(2, 3\)"):
        MaskedLinear(3, 2, torch.ones(3, 2, dtype=torch.bool))


def test_sparse_linear_stores_sorted_int32_indices_and_applies_scale():
    idx = torch.tensor([[1, 0, 1], [2, 1, 0]])  # unsorted: (1, 2), (0, 1), (1, 0)
    layer = SparseLinear(3, 2, idx, scale=3.0).to(f64)
    assert layer.indices.dtype == torch.int32
    assert layer.indices.tolist() == [[0, 1, 1], [1, 0, 2]]  # row-major
    assert layer.nnz == 3 and layer.density == 0.5
    with torch.no_grad():
        layer.values.copy_(torch.tensor([1.0, 2.0, 4.0], dtype=f64))  # at (0,1), (1,0), (1,2)
        layer.bias.copy_(torch.tensor([0.5, -0.5], dtype=f64))
    dense = torch.tensor([[0.0, 3.0, 0.0], [6.0, 0.0, 12.0]], dtype=f64)
    torch.testing.assert_close(layer.effective_weight(), dense, rtol=0, atol=0)
    x = torch.tensor([[1.0, -1.0, 2.0], [0.0, 1.0, 0.0]], dtype=f64)
    torch.testing.assert_close(layer(x), x @ dense.T + layer.bias, rtol=0, atol=1e-12)
    assert layer.extra_repr() == "in=3, out=2, nnz=3, scale=3"
    assert float(SparseLinear(3, 2, idx).scale) == 1.0  # unscaled by default
    nobias = SparseLinear(3, 2, idx, bias=False)
    assert nobias.bias is None and nobias(torch.ones(1, 3)).shape == (1, 2)
    assert SparseLinear(1, 1, torch.zeros(2, 0, dtype=torch.long)).density == 0.0
    assert SparseLinear(0, 0, torch.zeros(2, 0, dtype=torch.long)).density == 0.0


def test_sparse_linear_indices_widen_to_int64_only_past_int32():
    meta = torch.zeros(2, 4, dtype=torch.long, device="meta")  # a parameter count: no values checked
    assert SparseLinear(2**31 - 1, 1, meta, bias=False).indices.dtype == torch.int32
    assert SparseLinear(2**31, 1, meta, bias=False).indices.dtype == torch.long
    assert SparseLinear(1, 2**31, meta, bias=False).indices.dtype == torch.long


def test_sparse_linear_refusals():
    with pytest.raises(ValueError, match=r"indices must have shape \(2, nnz\), got \(3, 1\)"):
        SparseLinear(3, 2, torch.zeros(3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"indices must have shape \(2, nnz\), got \(2,\)"):
        SparseLinear(3, 2, torch.zeros(2, dtype=torch.long))
    for bad in ([[2], [0]], [[0], [3]], [[-1], [0]], [[0], [-1]]):
        with pytest.raises(ValueError, match=r"indices out of range for a \(2, 3\) weight"):
            SparseLinear(3, 2, torch.tensor(bad))
    with pytest.raises(ValueError, match="^indices contain duplicate positions$"):
        SparseLinear(3, 2, torch.tensor([[1, 0, 1], [2, 0, 2]]))
    SparseLinear(3, 2, torch.tensor([[1], [2]]))  # the last row and column are in range


def test_csr_pattern_of_w_and_its_transpose():
    idx = torch.tensor([[0, 0, 2, 2], [1, 3, 0, 3]])  # row 1 and the trailing row 3 are empty
    pat = _CsrPattern(idx, 4, 4)
    assert pat.crow.tolist() == [0, 2, 2, 4, 4] and pat.col.tolist() == [1, 3, 0, 3]
    assert pat.crow_t.tolist() == [0, 1, 2, 2, 4] and pat.col_t.tolist() == [2, 0, 0, 2]
    v = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=f64)
    W = torch.zeros(4, 4, dtype=f64)
    W[idx[0], idx[1]] = v
    torch.testing.assert_close(pat.w(v).to_dense(), W, rtol=0, atol=0)
    torch.testing.assert_close(pat.w_t(v).to_dense(), W.T, rtol=0, atol=0)
    empty_last = _CsrPattern(torch.tensor([[0, 1], [0, 1]]), 3, 4)  # the last row and column hold nothing
    assert empty_last.w(v[:2]).shape == (3, 4) and empty_last.w_t(v[:2]).shape == (4, 3)
    rect = _CsrPattern(torch.tensor([[0, 1], [4, 0]]), 2, 5)
    assert rect.shape == (2, 5) and rect.w_t(v[:2]).shape == (5, 2)
    torch.testing.assert_close(rect.w_t(v[:2]).to_dense(), torch.tensor(
        [[0, 2], [0, 0], [0, 0], [0, 0], [1, 0]], dtype=f64), rtol=0, atol=0)


def test_sparse_product_gradients_are_the_dense_ones_each_on_its_own():
    layer = SparseLinear.random(5, 4, 0.6, seed=1).to(f64)
    W = layer.effective_weight().detach()
    x = torch.randn(3, 5, dtype=f64)
    g = torch.randn(3, 4, dtype=f64)
    vals = layer.values.detach().clone().requires_grad_()
    (gv,) = torch.autograd.grad(_SparseMatmul.apply(x, vals, layer._pattern()), (vals,), g)
    idx = layer.indices.long()
    torch.testing.assert_close(gv, (g.T @ x)[idx[0], idx[1]], rtol=0, atol=1e-12)  # dL/dW at the nonzeros
    xr = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(_SparseMatmul.apply(xr, layer.values.detach() * 1.0, layer._pattern()), (xr,), g)
    torch.testing.assert_close(gx, g @ W, rtol=0, atol=1e-12)


def test_sparse_layer_under_autocast_runs_in_float32():
    layer = SparseLinear.random(8, 6, 0.5, seed=0)
    x = torch.randn(2, 3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x.bfloat16())
    assert y.dtype == torch.float32 and y.shape == (2, 3, 6)
    torch.testing.assert_close(y, x.bfloat16().float() @ layer.effective_weight().detach().T + layer.bias.detach(),
                               rtol=1e-6, atol=1e-6)


def test_pattern_is_cached_and_rebuilt_when_the_indices_change():
    layer = SparseLinear(3, 2, torch.tensor([[0, 1], [0, 1]]))
    p = layer._pattern()
    assert layer._pattern() is p
    with torch.no_grad():
        layer.indices[1, 1] = 2  # in place: a new version
    q = layer._pattern()
    assert q is not p and q.col.tolist() == [0, 2]


def test_from_masked_keeps_bias_scale_dtype_and_no_bias():
    a = MaskedLinear.random(6, 4, 0.5, seed=1, mask_scale=True).to(f64)
    with torch.no_grad():
        a.bias.normal_()
    s = SparseLinear.from_masked(a)
    assert s.values.dtype == f64 and float(s.scale) == float(a.scale) and torch.equal(s.bias, a.bias)
    torch.testing.assert_close(s.effective_weight(), a.effective_weight(), rtol=0, atol=0)
    nb = MaskedLinear.random(6, 4, 0.5, seed=1, bias=False)
    assert SparseLinear.from_masked(nb).bias is None


def test_a_saved_mask_of_another_size_loads_and_keeps_requires_grad():
    src = SparseLinear.random(10, 8, 0.5, seed=1)
    dst = SparseLinear.random(10, 8, 0.5, seed=2)
    assert src.nnz != dst.nnz
    dst.values.requires_grad_(False)
    dst.load_state_dict(src.state_dict())
    assert dst.nnz == src.nnz and torch.equal(dst.indices, src.indices) and torch.equal(dst.values, src.values)
    assert dst.values.requires_grad is False and dst.indices.dtype == torch.int32
    x = torch.randn(2, 10)
    torch.testing.assert_close(dst(x), src(x))
    # the same size loads in place; a wrong shape still fails with torch's size mismatch
    same = SparseLinear.random(10, 8, 0.5, seed=1)
    values = same.values
    same.load_state_dict(src.state_dict())
    assert same.values is values
    bad = dict(src.state_dict(), values=torch.zeros(src.nnz + 1))
    with pytest.raises(RuntimeError, match="size mismatch"):
        dst.load_state_dict(bad)
    bad = dict(src.state_dict(), indices=torch.zeros(3, src.nnz, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="size mismatch"):
        dst.load_state_dict(bad)


def test_the_draws_stay_on_the_cpu_under_another_default_device():
    """The mask and the values come from CPU generators whatever the default device, so a model
    built under ``torch.device(...)`` draws the same weights as on the CPU."""
    want = bernoulli_mask_indices(5, 4, 0.5, seed=1)
    assert want.dtype == torch.long and bernoulli_mask_indices(0, 4, 0.5, seed=1).dtype == torch.long
    with torch.device("meta"):
        got = bernoulli_mask_indices(5, 4, 0.5, seed=1)
        values = SparseLinear.random(4, 5, 0.5, seed=1).values
    assert got.device.type == "cpu" and torch.equal(got, want)
    assert values.device.type == "meta"  # the parameter lives on the default device
    assert mask_from_indices(want.to("meta"), 5, 4).device.type == "meta"


def test_one_by_one_layers_have_density_one():
    assert SparseLinear(1, 1, torch.tensor([[0], [0]])).density == 1.0
    assert MaskedLinear(1, 1, torch.ones(1, 1, dtype=torch.bool)).density == 1.0


def test_a_resized_mask_is_made_on_the_layers_device():
    src = SparseLinear.random(10, 8, 0.5, seed=1)
    dst = SparseLinear.random(10, 8, 0.5, seed=2).to("meta")
    with pytest.warns(UserWarning, match="no-op"):
        dst.load_state_dict(src.state_dict())
    assert dst.nnz == src.nnz and dst.indices.device.type == "meta" and dst.values.device.type == "meta"
    assert dst.indices.dtype == torch.int32 and dst.values.dtype == torch.float32


def test_csr_structures_are_trusted_not_revalidated_each_step(monkeypatch):
    """The pattern is checked once (_checked_row_major); the per-step CSR tensors skip torch's
    invariant check (a pass over every nonzero)."""
    seen = []
    csr = torch.sparse_csr_tensor
    monkeypatch.setattr(torch, "sparse_csr_tensor", lambda *a, **k: seen.append(k) or csr(*a, **k))
    layer = SparseLinear.random(6, 4, 0.5, seed=0)
    x = torch.randn(2, 6, requires_grad=True)
    layer(x).sum().backward()
    assert len(seen) == 3 and all(k == {"check_invariants": False} for k in seen)  # W, Wᵀ, the sampled product


def test_the_value_draw_is_on_the_cpu_under_another_default_device():
    from mlplab.layers.masked import _random_values

    want = _random_values(5, 2.0, 3)
    with torch.device("meta"):
        got = _random_values(5, 2.0, 3)
    assert got.device.type == "cpu" and torch.equal(got, want)


def test_effective_weight_and_from_masked_follow_the_weights_device_and_dtype():
    assert SparseLinear.random(4, 3, 0.5, seed=0).to("meta").effective_weight().device.type == "meta"
    a = MaskedLinear.random(4, 3, 0.5, seed=0)
    a.weight = torch.nn.Parameter(a.weight.detach().to("meta", f64))  # the mask stays where it can be read
    a.bias = torch.nn.Parameter(a.bias.detach().to("meta", f64))
    s = SparseLinear.from_masked(a)
    assert s.values.device.type == "meta" and s.values.dtype == f64 and s.bias.device.type == "meta"


def test_a_resized_mask_keeps_the_layers_dtype():
    src = SparseLinear.random(10, 8, 0.5, seed=1)
    dst = SparseLinear.random(10, 8, 0.5, seed=2).to(f64)
    dst.load_state_dict(src.state_dict())
    assert dst.values.dtype == f64 and torch.equal(dst.values, src.values.double())


def test_loading_reports_missing_and_unexpected_keys():
    src = SparseLinear.random(10, 8, 0.5, seed=1)
    dst = SparseLinear.random(10, 8, 0.5, seed=2)
    extra = dict(src.state_dict(), extra=torch.zeros(1))
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "extra"'):
        dst.load_state_dict(extra)
    partial = {k: v for k, v in src.state_dict().items() if k != "bias"}
    result = dst.load_state_dict(dict(partial, extra=torch.zeros(1)), strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]
    assert torch.equal(dst.indices, src.indices)
