"""The permuted-Kronecker (PK) layer, Definition 5.1 of Hayase & Karakida (2024).

For X ∈ R^{n1×n2} (m = n1·n2), W ∈ R^{n2'×n2} and permutations J1 (m×m), J2 (m'×m'):

    PK-Layer_W(X; J1, J2) = Mat[ J2 (I_{n1} ⊗ W) J1 vec(X) ]                        (Def. 5.1)

Nothing m×m is ever built: permute the m entries (J1), view them as n1 groups of n2, apply W
to every group, permute the m' outputs (J2). The MLP-Mixer's mixing layers are PK layers with
J ∈ {I, J_c, J_cᵀ}; the RP-Mixer draws J1, J2 uniformly at random. In an MLP block
W2 φ(W1 ·) the hidden permutation cancels (J and Jᵀ), so a whole MLP may act on each group:
:class:`PKMixing` takes any module that maps the last dimension n2 -> n2'.

Storage: models keep the matrix X row-major as (B, rows, cols). Permutations are stored as
index arrays in the paper's **vec (column-major) order** (``(J v)[k] = v[p[k]]``); the gathers
that act directly on row-major storage are derived from them (one gather in, one out).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .vec import invert_perm, rowmajor_index_of_vec, vec_index_of_rowmajor

__all__ = ["PKMixing", "PKLayer", "permute_entries", "random_perm"]


class _PermuteEntries(torch.autograd.Function):
    """y = x[:, idx] along dim 1 with a gather (not a scatter-add) in the backward pass."""

    @staticmethod
    def forward(ctx, x, idx, inv_idx):
        ctx.save_for_backward(inv_idx)
        return x.index_select(1, idx)

    @staticmethod
    def backward(ctx, grad):
        (inv_idx,) = ctx.saved_tensors
        return grad.index_select(1, inv_idx), None, None


def permute_entries(x: torch.Tensor, idx: torch.Tensor, inv_idx: torch.Tensor | None = None) -> torch.Tensor:
    """Apply the permutation ``idx`` to dim 1 of a (B, m) tensor: y[:, k] = x[:, idx[k]]."""
    if inv_idx is None:
        inv_idx = invert_perm(idx)
    return _PermuteEntries.apply(x.contiguous(), idx, inv_idx)


def random_perm(m: int, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random permutation of ``range(m)`` drawn from ``generator`` (CPU)."""
    return torch.randperm(m, generator=generator)


class PKMixing(nn.Module):
    """Mat[J2 (I_{n1} ⊗ f) J1 vec(X)] for an arbitrary group map f: R^{n2} -> R^{n2'}.

    Args:
        inner: module acting on the last dimension (n2 -> n2_out), e.g. ``nn.Linear`` (a PK
            layer) or a two-layer MLP (a PK MLP block; its hidden permutation cancels).
        in_shape: (rows, cols) of the input matrix X, m = rows·cols = n1·n2.
        out_shape: (rows', cols') of the output matrix, m' = n1·n2_out.
        n1, n2, n2_out: the grouping of Definition 5.1.
        perm_in, perm_out: J1 and J2 as vec-order index arrays (None = identity).

    The forward pass takes and returns row-major (B, rows, cols) tensors. Two arrangements are
    computed without any gather because they are the normal Mixer's: token mixing
    (J1 = J2 = I, groups are columns -> a transpose) and channel mixing (J1 = J_c, J2 = J_cᵀ,
    groups are rows -> nothing to move). ``mode`` reports which path is used.

    Speed: in ``columns`` mode, when ``inner`` is a plain Linear-activation(-Linear) stack
    (:class:`~mlplab.layers.common.Mlp` without dropout, or ``Sequential(Linear, act)``), the
    group map is applied as W X from the left with one batched GEMM per layer
    (``baddbmm`` with W broadcast over the batch), so neither the input nor the output is
    transposed. Same function, same parameters; ``fast=False`` forces the generic path
    (tests pin the two to float64 round-off; ``benchmarks/bench_mixer_step.py`` times both).
    Under autocast the generic path is kept: measured on AVX2 CPUs, bfloat16 ``bmm`` with a
    broadcast weight is ~2× slower than one large bfloat16 GEMM on the transposed input.
    """

    def __init__(
        self,
        inner: nn.Module,
        in_shape: tuple[int, int],
        out_shape: tuple[int, int],
        n1: int,
        n2: int,
        n2_out: int,
        perm_in: torch.Tensor | None = None,
        perm_out: torch.Tensor | None = None,
        force_gather: bool = False,
        fast: bool = True,
    ):
        super().__init__()
        self.fast = fast
        rows, cols = in_shape
        rows_o, cols_o = out_shape
        m, m_out = rows * cols, rows_o * cols_o
        if n1 * n2 != m or n1 * n2_out != m_out:
            raise ValueError(
                f"PK grouping n1={n1}, n2={n2}, n2'={n2_out} does not fit input {in_shape} "
                f"(m={m}) and output {out_shape} (m'={m_out})"
            )
        self.inner = inner
        self.in_shape = (rows, cols)
        self.out_shape = (rows_o, cols_o)
        self.n1, self.n2, self.n2_out = n1, n2, n2_out
        p_in = torch.arange(m) if perm_in is None else perm_in.long().clone()
        p_out = torch.arange(m_out) if perm_out is None else perm_out.long().clone()
        for name, p, size in (("perm_in", p_in, m), ("perm_out", p_out, m_out)):
            if p.shape != (size,) or not torch.equal(torch.sort(p).values, torch.arange(size)):
                raise ValueError(f"{name} must be a permutation of range({size})")
        # J1, J2 in vec order: the paper's objects, saved in the state dict.
        self.register_buffer("perm_in", p_in)
        self.register_buffer("perm_out", p_out)
        self.force_gather = force_gather
        self._derive()
        self.register_load_state_dict_post_hook(lambda module, keys: module._derive())

    def _derive(self) -> None:
        """Row-major gathers: x_grouped = r[gather_in], r_out = u[gather_out]."""
        rows, cols = self.in_shape
        rows_o, cols_o = self.out_shape
        dev = self.perm_in.device
        gather_in = rowmajor_index_of_vec(rows, cols, dev)[self.perm_in]
        gather_out = self.perm_out[vec_index_of_rowmajor(rows_o, cols_o, dev)]
        m, m_out = rows * cols, rows_o * cols_o
        ident_in = torch.equal(gather_in, torch.arange(m, device=dev))
        ident_out = torch.equal(gather_out, torch.arange(m_out, device=dev))
        # transpose arrangement: groups are the columns of X (token mixing of a normal Mixer),
        # i.e. the grouped order is vec order on both sides
        tr_in = (self.n1, self.n2) == (cols, rows) and torch.equal(
            gather_in, rowmajor_index_of_vec(rows, cols, dev)
        )
        tr_out = (self.n1, self.n2_out) == (cols_o, rows_o) and torch.equal(
            gather_out, vec_index_of_rowmajor(rows_o, cols_o, dev)
        )
        if self.force_gather:
            mode = "gather"
        elif ident_in and ident_out and self.n2 == cols and self.n2_out == cols_o:
            mode = "rows"
        elif tr_in and tr_out:
            mode = "columns"
        else:
            mode = "gather"
        self.mode = mode
        self._gather = None
        if mode == "gather":
            self._gather = (gather_in, invert_perm(gather_in), gather_out, invert_perm(gather_out))

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self._derive()  # keep derived gathers on the same device as the buffers
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, rows, cols)
        if self.mode == "rows":
            return self.inner(x)  # groups are rows: f acts on channels directly
        if self.mode == "columns":
            if self.fast and not torch.is_autocast_enabled(x.device.type):
                layers = _left_matmul_layers(self.inner)
                if layers is not None:
                    return _apply_left(layers, x)  # (B, rows, cols) -> (B, rows', cols)
            y = self.inner(x.transpose(-1, -2))  # (B, cols, rows) -> (B, cols, rows')
            return y.transpose(-1, -2)
        g_in, g_in_inv, g_out, g_out_inv = self._gather
        B = x.shape[0]
        r = permute_entries(x.reshape(B, -1), g_in, g_in_inv)  # (B, m) = J1 vec(X), grouped
        u = self.inner(r.view(B, self.n1, self.n2)).reshape(B, -1)  # (B, n1·n2')
        r_out = permute_entries(u, g_out, g_out_inv)  # row-major storage of Mat[J2 u]
        return r_out.view(B, *self.out_shape)

    def extra_repr(self) -> str:
        return (
            f"in={self.in_shape}, out={self.out_shape}, n1={self.n1}, n2={self.n2}, "
            f"n2'={self.n2_out}, mode={self.mode}"
        )


def _left_matmul_layers(inner: nn.Module) -> list[nn.Module] | None:
    """The Linear / activation sequence of ``inner`` when it is a plain MLP stack, else None.

    Only stacks whose forward is exactly ``fc2(act(fc1(x)))`` or ``act(fc(x))`` qualify; anything
    else (dropout in training, hooks, custom modules) takes the generic path.
    """
    from .common import Mlp

    if inner._forward_hooks or inner._forward_pre_hooks:
        return None
    if isinstance(inner, Mlp):
        if inner.training and not (isinstance(inner.drop1, nn.Identity) and isinstance(inner.drop2, nn.Identity)):
            return None
        mods = [inner.fc1, inner.act, inner.fc2]
    elif isinstance(inner, nn.Sequential) and len(inner) == 2 and isinstance(inner[0], nn.Linear):
        mods = [inner[0], inner[1]]
    elif isinstance(inner, nn.Linear):
        mods = [inner]
    else:
        return None
    for mod in mods:
        if mod._forward_hooks or mod._forward_pre_hooks:
            return None
        if not isinstance(mod, nn.Linear) and type(mod).forward is not _ELEMENTWISE_OK.get(type(mod)):
            return None
    return mods


def _elementwise_types() -> dict[type, object]:
    from .common import ACTIVATIONS

    return {cls: cls.forward for cls in ACTIVATIONS.values()}


_ELEMENTWISE_OK = _elementwise_types()


def _apply_left(layers: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """f applied to every column of x: Linear(n -> n') becomes W x (+ b) on (B, n, cols).

    ``baddbmm`` with W expanded (stride 0) over the batch multiplies from the left without
    copying x into (B, cols, n) order, and an activation is entry-wise, so layout is irrelevant.
    """
    for mod in layers:
        if isinstance(mod, nn.Linear):
            B = x.shape[0]
            W = mod.weight.unsqueeze(0).expand(B, -1, -1)  # (B, n', n), no copy
            if mod.bias is None:
                x = torch.bmm(W, x)
            else:
                x = torch.baddbmm(mod.bias.view(1, -1, 1), W, x)  # (B, n', cols)
        else:
            x = mod(x)
    return x


class PKLayer(PKMixing):
    """The PK layer of Definition 5.1 with a single weight W ∈ R^{n2'×n2} (plus optional bias).

    Works on the vec form directly when ``in_shape``/``out_shape`` are omitted: the input is then
    treated as the (n2 × n1) matrix whose vec is the input vector, and so is the output.
    """

    def __init__(
        self,
        n1: int,
        n2: int,
        n2_out: int,
        perm_in: torch.Tensor | None = None,
        perm_out: torch.Tensor | None = None,
        bias: bool = True,
        in_shape: tuple[int, int] | None = None,
        out_shape: tuple[int, int] | None = None,
    ):
        super().__init__(
            nn.Linear(n2, n2_out, bias=bias),
            in_shape or (n2, n1),
            out_shape or (n2_out, n1),
            n1,
            n2,
            n2_out,
            perm_in,
            perm_out,
        )

    @property
    def weight(self) -> torch.Tensor:
        return self.inner.weight

    def effective_weight(self, dtype=torch.float64) -> torch.Tensor:
        """The dense m'×m matrix J2 (I_{n1} ⊗ W) J1 in vec order (small sizes only)."""
        from .vec import perm_matrix

        W = self.inner.weight.detach().to(dtype)
        eye = torch.eye(self.n1, dtype=dtype, device=W.device)
        return perm_matrix(self.perm_out, dtype) @ torch.kron(eye, W) @ perm_matrix(self.perm_in, dtype)
