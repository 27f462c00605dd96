"""Static sparse linear layers for the SW-MLP (docs/science.md §2): weight M ⊙ A with a frozen mask M.

Two storages compute the same function y = (M ⊙ A) x + b:

* :class:`MaskedLinear` keeps a dense weight A and a dense boolean mask M (memory ∝ out·in).
  Simple and fast on dense hardware; the weight's off-mask entries are zero and stay zero
  (their gradient is masked out).
* :class:`SparseLinear` keeps only the nonzeros: ``values`` (nnz,) and their (row, col)
  ``indices`` (2, nnz) int32 (memory ∝ nnz: 12 bytes per nonzero against 5 bytes per entry,
  float32 + bool, for the masked storage; sparse wins below p ≈ 0.4). Forward and
  input-gradient are CSR × dense products (the CSR structures of W and Wᵀ are derived once per
  mask); the value-gradient is a sampled dense-dense product (gᵀx at the nonzeros only), so no
  dense out×in tensor is ever formed.

The mask is Bernoulli(p), drawn from seeded generators one block of rows at a time
(:func:`bernoulli_mask_indices`), so a mask never needs an out×in float tensor and both
storages draw the identical mask and identical nonzero values from the same seed. For the
spectral analysis the mask's ones may be scaled (``scale = 1/√p``): the effective weight is then
``scale · M ⊙ A``.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.seeds import derive_generator

__all__ = ["bernoulli_mask_indices", "mask_from_indices", "MaskedLinear", "SparseLinear"]

_MASK_BLOCK_ROWS = 256  # rows per generator stream; fixed so the mask never depends on storage


def bernoulli_mask_indices(out_features: int, in_features: int, density: float, seed: int) -> torch.Tensor:
    """(2, nnz) int64 (row, col) positions of a Bernoulli(``density``) mask, row-major sorted.

    Rows are drawn ``_MASK_BLOCK_ROWS`` at a time, each block from its own generator seeded by
    (seed, block), so peak memory is one block, not the whole out×in matrix.
    """
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density p must be in (0, 1], got {density}")
    rows, cols = [], []
    for r0 in range(0, out_features, _MASK_BLOCK_ROWS):
        n = min(_MASK_BLOCK_ROWS, out_features - r0)
        g = derive_generator(seed, "mask", r0 // _MASK_BLOCK_ROWS)
        keep = torch.rand(n, in_features, generator=g, device="cpu") < density  # (n, in)
        r, c = keep.nonzero(as_tuple=True)
        rows.append(r + r0)
        cols.append(c)
    if not rows:
        return torch.zeros(2, 0, dtype=torch.long)
    return torch.stack([torch.cat(rows), torch.cat(cols)])


def mask_from_indices(indices: torch.Tensor, out_features: int, in_features: int) -> torch.Tensor:
    """Dense boolean (out, in) mask with ones at ``indices``."""
    mask = torch.zeros(out_features, in_features, dtype=torch.bool, device=indices.device)
    mask[indices[0], indices[1]] = True
    return mask


def _init_std(in_features: int, density: float, scale: float) -> float:
    """Std of the nonzero values so that each output has variance ≈ (input variance):
    E[(scale·M⊙A)_ij²] = p·scale²·std² = 1/in. With scale = 1/√p this is A ~ N(0, 1/in)."""
    return 1.0 / math.sqrt(in_features * density * scale * scale)


def _random_values(nnz: int, std: float, seed: int) -> torch.Tensor:
    g = derive_generator(seed, "values")
    return torch.randn(nnz, generator=g, device="cpu") * std


class MaskedLinear(nn.Module):
    """y = (scale · M ⊙ A) x + b with a dense weight A and a frozen boolean mask M (a buffer).

    Args:
        in_features, out_features: sizes.
        mask: boolean (out, in) tensor M.
        bias: add a learned bias (zero-initialised).
        scale: value of the mask's ones (1, or 1/√p for the spectral analysis).
    """

    def __init__(self, in_features: int, out_features: int, mask: torch.Tensor, bias: bool = True, scale: float = 1.0):
        super().__init__()
        if mask.shape != (out_features, in_features):
            raise ValueError(f"mask has shape {tuple(mask.shape)}, expected ({out_features}, {in_features})")
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.zeros(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.register_buffer("mask", mask.to(torch.bool).clone())
        self.register_buffer("scale", torch.tensor(float(scale)))

    @classmethod
    def random(cls, in_features: int, out_features: int, density: float, seed: int, bias: bool = True,
               mask_scale: bool = False) -> "MaskedLinear":
        """Bernoulli(density) mask and N(0, std²) nonzero values, both drawn from ``seed``."""
        idx = bernoulli_mask_indices(out_features, in_features, density, seed)
        scale = 1.0 / math.sqrt(density) if mask_scale else 1.0
        layer = cls(in_features, out_features, mask_from_indices(idx, out_features, in_features), bias, scale)
        with torch.no_grad():
            vals = _random_values(idx.shape[1], _init_std(in_features, density, scale), seed)
            layer.weight[idx[0], idx[1]] = vals.to(layer.weight.dtype)
        return layer

    @property
    def nnz(self) -> int:
        return int(self.mask.sum())

    @property
    def density(self) -> float:
        return self.nnz / max(1, self.mask.numel())

    def effective_weight(self) -> torch.Tensor:
        """scale · M ⊙ A (dense)."""
        return self.weight * self.mask * self.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.effective_weight(), self.bias)

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, density={self.density:.4g}, "
                f"scale={float(self.scale):.4g}")


@torch.compiler.disable
def _sparse_product(layer: "SparseLinear", x2: torch.Tensor) -> torch.Tensor:
    """x2 Wᵀ outside autocast and outside torch.compile's traced region: dynamo cannot trace
    sparse tensors (``sparse_csr_tensor``), the pattern's ``bincount`` (a data-dependent size) or
    its cache key (``data_ptr``), and a graph break inside the model's block loop would make it
    skip the whole loop. Disabled here, the product runs eagerly between compiled graphs: one
    graph break per sparse layer, every other op of the model compiled (``train.backend.dynamo_counts``)."""
    with torch.autocast(x2.device.type, enabled=False):
        return _SparseMatmul.apply(x2, layer.values * layer.scale, layer._pattern())


class _CsrPattern:
    """The CSR structure of W (out×in) and of Wᵀ for a fixed, row-major sorted (row, col) list,
    derived once per mask (not per step): ``crow``/``col`` for W, and for Wᵀ ``crow_t``/``col_t``
    plus ``order_t`` (values of Wᵀ = values[order_t])."""

    def __init__(self, indices: torch.Tensor, out_f: int, in_f: int):
        rows, cols = indices.long()
        self.key = (indices.data_ptr(), indices._version, indices.device, out_f, in_f)
        self.crow = _crow(rows, out_f)
        self.col = cols
        self.order_t = torch.argsort(cols * out_f + rows)
        self.crow_t = _crow(cols[self.order_t], in_f)
        self.col_t = rows[self.order_t]
        self.shape = (out_f, in_f)

    def w(self, values: torch.Tensor) -> torch.Tensor:
        return torch.sparse_csr_tensor(self.crow, self.col, values, self.shape, check_invariants=False)

    def w_t(self, values: torch.Tensor) -> torch.Tensor:
        return torch.sparse_csr_tensor(self.crow_t, self.col_t, values[self.order_t], self.shape[::-1],
                                       check_invariants=False)


def _crow(sorted_rows: torch.Tensor, n_rows: int) -> torch.Tensor:
    counts = torch.bincount(sorted_rows, minlength=n_rows)
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


class _SparseMatmul(torch.autograd.Function):
    """y = x Wᵀ for a CSR weight given by its pattern and values; nothing out×in is formed.

    Forward and input gradient are CSR × dense products (MKL's sparse BLAS where torch has it);
    the value gradient gv[k] = Σ_b g[b, row_k] x[b, col_k] is a sampled dense-dense product
    (``torch.sparse.sampled_addmm``: gᵀx evaluated only at the nonzeros). No COO matmuls, no
    per-step ``coalesce`` (a sort of all nonzeros), no ``index_select`` gathers: the SW-MLP step of
    ``benchmarks/bench_memory.py`` costs ~2–3× the Mixer's (docs/performance.md).
    """

    @staticmethod
    def forward(ctx, x, values, pattern):
        ctx.save_for_backward(x, values)
        ctx.pattern = pattern
        return (pattern.w(values) @ x.t()).t()  # (B, out)

    @staticmethod
    def backward(ctx, g):
        x, values = ctx.saved_tensors
        pattern = ctx.pattern
        gx = gv = None
        if ctx.needs_input_grad[0]:
            gx = (pattern.w_t(values) @ g.t()).t()  # (B, in)
        if ctx.needs_input_grad[1]:
            zeros = pattern.w(torch.zeros_like(values))
            gv = torch.sparse.sampled_addmm(zeros, g.t().contiguous(), x.contiguous(), beta=0.0).values()
        return gx, gv, None


def _checked_row_major(indices: torch.Tensor, out_features: int, in_features: int) -> torch.Tensor:
    """(row, col) pairs sorted row-major, or a ValueError for one out of range or repeated."""
    if indices.numel() and (indices[0].max() >= out_features or indices[1].max() >= in_features or indices.min() < 0):
        raise ValueError(f"indices out of range for a ({out_features}, {in_features}) weight")
    key = indices[0] * in_features + indices[1]
    order = torch.argsort(key)
    if indices.shape[1] > 1 and bool((key[order][1:] == key[order][:-1]).any()):
        raise ValueError("indices contain duplicate positions")
    return indices[:, order]


class SparseLinear(nn.Module):
    """y = (scale · W) x + b with W stored as nonzeros only: memory ∝ nnz, not out·in.

    ``indices`` (2, nnz) are (row, col) pairs in row-major order (persistent buffer, so the
    mask travels with the state dict); ``values`` (nnz,) is the parameter.
    """

    def __init__(self, in_features: int, out_features: int, indices: torch.Tensor, bias: bool = True,
                 scale: float = 1.0):
        super().__init__()
        indices = indices.long()
        if indices.ndim != 2 or indices.shape[0] != 2:
            raise ValueError(f"indices must have shape (2, nnz), got {tuple(indices.shape)}")
        if not indices.is_meta:  # a meta tensor has no values to check or sort (a parameter count)
            indices = _checked_row_major(indices, out_features, in_features)
        self.in_features, self.out_features = in_features, out_features
        self.values = nn.Parameter(torch.zeros(indices.shape[1]))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        # int32 halves the index memory (12 bytes per nonzero with the float32 value)
        dtype = torch.int32 if max(in_features, out_features) < 2**31 else torch.long
        self.register_buffer("indices", indices.to(dtype))
        self.register_buffer("scale", torch.tensor(float(scale)))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """A saved mask may have a different number of nonzeros than this layer's own draw
        (another seed): adopt its size, so masks load like permutations do. Shapes other
        than (2, nnz) / (nnz,) still fail with torch's size-mismatch message. Create optimisers
        after loading: the resized ``values`` is a new Parameter."""
        idx, val = state_dict.get(prefix + "indices"), state_dict.get(prefix + "values")
        if (idx is not None and val is not None and idx.ndim == 2 and idx.shape[0] == 2 and val.ndim == 1
                and idx.shape[1] == val.shape[0] and idx.shape[1] != self.nnz):
            self.indices = torch.empty(idx.shape, dtype=self.indices.dtype, device=self.indices.device)
            self.values = nn.Parameter(torch.empty(val.shape, dtype=self.values.dtype, device=self.values.device),
                                       requires_grad=self.values.requires_grad)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    @classmethod
    def random(cls, in_features: int, out_features: int, density: float, seed: int, bias: bool = True,
               mask_scale: bool = False) -> "SparseLinear":
        """Same mask and values as :meth:`MaskedLinear.random` with the same arguments."""
        idx = bernoulli_mask_indices(out_features, in_features, density, seed)
        scale = 1.0 / math.sqrt(density) if mask_scale else 1.0
        layer = cls(in_features, out_features, idx, bias, scale)
        with torch.no_grad():
            layer.values.copy_(_random_values(idx.shape[1], _init_std(in_features, density, scale), seed))
        return layer

    @classmethod
    def from_masked(cls, layer: MaskedLinear) -> "SparseLinear":
        """The same function as ``layer``, storing only the mask's nonzeros."""
        idx = torch.stack(layer.mask.nonzero(as_tuple=True))
        out = cls(layer.in_features, layer.out_features, idx, layer.bias is not None, float(layer.scale))
        out = out.to(device=layer.weight.device, dtype=layer.weight.dtype)
        with torch.no_grad():
            out.values.copy_(layer.weight[idx[0], idx[1]])
            if layer.bias is not None:
                out.bias.copy_(layer.bias)
        return out

    @property
    def nnz(self) -> int:
        return self.indices.shape[1]

    @property
    def density(self) -> float:
        return self.nnz / max(1, self.in_features * self.out_features)

    def effective_weight(self) -> torch.Tensor:
        """The dense (out, in) matrix (small sizes / tests only)."""
        W = torch.zeros(self.out_features, self.in_features, dtype=self.values.dtype, device=self.values.device)
        idx = self.indices.long()
        W[idx[0], idx[1]] = self.values * self.scale
        return W

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Under autocast the sparse products still run in the weights' dtype (float32): sparse
        BLAS has no bf16 CSR kernels (MKL on CPU), so the layer takes its input out of autocast;
        the layers around it keep autocasting."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).to(self.values.dtype)  # (B, in)
        y = _sparse_product(self, x2)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def _pattern(self) -> _CsrPattern:
        """The CSR structure of the mask, rebuilt only when ``indices`` changed (load, move)."""
        p = getattr(self, "_csr", None)
        idx = self.indices
        if p is None or p.key != (idx.data_ptr(), idx._version, idx.device, self.out_features, self.in_features):
            p = self._csr = _CsrPattern(idx, self.out_features, self.in_features)
        return p

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, nnz={self.nnz}, scale={float(self.scale):.4g}"
