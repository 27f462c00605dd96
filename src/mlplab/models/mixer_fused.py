"""A Mixer's forward_features with fused seams (CPU): the same function as the module path.

Between two sublayers a pre-LN Mixer computes u = x + act(t), h = LN(u). Here each such seam is
one kernel each way (:mod:`mlplab.layers.fused`). Tokens are kept token-major, (S, B, C), so that
token mixing is one GEMM W H on the (S, B·C) matrix and channel mixing one GEMM on the (S·B, C)
one, with no transposes; seams next to RP sublayers gather through J2 and J1 inside the kernel,
and an all-RP Mixer keeps its tokens batch-major, (B, S, C). The residual stays in the
parameters' dtype under autocast (the GEMMs and h run in bf16); under ``torch.compile`` the
kernels are opaque custom ops (``benchmarks/bench_fused_seams.py`` compares them with inductor's
generated seams). Reached only through :meth:`mlplab.models.mixer.Mixer.forward_features` when
``Mixer.fusable`` allows it; tests compare it with the module path in float64
to 1e-12, forward and gradients.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..layers import fused
from ..layers.common import LinearAct, left_linear
from ..layers.pk import PKMixing

__all__ = ["forward_features"]


def forward_features(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The final LN's output (B, S, C), each seam fused. Tokens are kept token-major, (S, B, C),
    unless every sublayer is RP (then batch-major, (B, S, C))."""
    dtype = model.norm.weight.dtype
    layers = [pk for blk in model.blocks for pk in (blk.token_mixing, blk.channel_mixing)]
    # all RP: the sublayers' operands are per-sample vectors, so keep each sample's tokens together
    batch_major = all(pk.arrangement == "gather" for pk in layers)
    z = model.stem(x)  # (B, S0, C)
    z = _residual(z if batch_major else z.transpose(0, 1), dtype)  # (B, S0, C) or (S0, B, C)
    B, C, S = x.shape[0], z.shape[2], model.num_tokens
    shape = (B, S, C) if batch_major else (S, B, C)
    h_dtype = torch.bfloat16 if torch.is_autocast_enabled("cpu") and dtype == torch.float32 else dtype
    h = fused.layer_norm_rows(z, model.blocks[0].norm1, h_dtype, _j1_maps(layers[0]), batch_major)
    for i, blk in enumerate(model.blocks):
        if blk.skip_proj is not None:  # first block, S0 -> S tokens: the skip is W̃ X
            z = blk.skip(z) if batch_major else _on_columns(blk.skip_proj, z.view(-1, B * C)).view(shape)
            z = _residual(z, dtype)
        after = model.blocks[i + 1].norm1 if i + 1 < len(model.blocks) else model.norm
        for j, (pk, norm) in enumerate(((blk.token_mixing, blk.norm2), (blk.channel_mixing, after))):
            nxt = layers[2 * i + j + 1] if 2 * i + j + 1 < len(layers) else None
            t_maps, h_maps = _j2_maps(pk), _j1_maps(nxt)
            t, act, bias = _sublayer(pk, h, B, shape, fold_bias=t_maps is not None or h_maps is None)
            z, h = fused.residual_norm(z, t, norm, act, t_maps, h_maps, batch_major, bias,
                                       "token" if pk.arrangement == "columns" else "column")
    return h if batch_major else h.transpose(0, 1)  # (B, S, C): the final LN's output


def _sublayer(pk: PKMixing, h: torch.Tensor, B: int, out_shape: tuple[int, int, int],
              fold_bias: bool) -> tuple[torch.Tensor, str, torch.Tensor | None]:
    """A PK mixing layer's output before its seam's activation: (t, act, bias). Token mixing
    (columns) multiplies the token-major (S, B·C) matrix from the left, channel mixing (rows) the
    (S·B, C) one from the right; a layer with free permutations (RP) maps the rows of its
    (B·n1, n2) grouped input, which the seam before wrote in J1 order, and leaves t in (B, m)
    grouped order. With ``fold_bias``, a single Linear's bias is left out of the GEMM and returned
    for the seam to add (its broadcast in ``addmm`` costs a pass over t); otherwise bias is None."""
    pre, act = _without_gelu(pk.group_map)
    bias = pre.bias if fold_bias and isinstance(pre, nn.Linear) else None
    if pk.arrangement == "columns":
        hc = h.view(-1, h.shape[1] * h.shape[2])
        t = torch.mm(pre.weight, hc) if bias is not None else _on_columns(pre, hc)
        return t.view(out_shape), act, bias
    on_rows = pre if bias is None else (lambda v: F.linear(v, pre.weight))  # a map of the rows of its input
    if pk.arrangement == "rows":
        return on_rows(h), act, bias
    return on_rows(h.view(B, pk.n1, pk.n2)).reshape(B, -1), act, bias


def _residual(z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """z as the residual stream: ``dtype``, contiguous, in one copy (``.to(dtype).contiguous()``
    of a transposed bf16 view makes two)."""
    return z.to(dtype, memory_format=torch.contiguous_format).contiguous()


def _j1_maps(pk: PKMixing | None):
    """(gather, inverse) that writes a seam's h as ``pk``'s grouped input, or None (token-major)."""
    return None if pk is None or pk.gathers is None else pk.gathers[:2]


def _j2_maps(pk: PKMixing):
    """(gather, inverse) that reads ``pk``'s grouped output in row-major order, or None."""
    return None if pk.gathers is None else pk.gathers[2:]


def _without_gelu(inner: nn.Module) -> tuple[nn.Module, str]:
    """A group map split for a fused seam: (the map without a trailing exact GELU, that GELU or
    "identity"). An S-Mixer's φ(W ·) with φ = exact GELU gives (W, "gelu")."""
    if isinstance(inner, LinearAct) and type(inner[1]) is nn.GELU and inner[1].approximate == "none":
        return inner[0], "gelu"
    return inner, "identity"


def _on_columns(f: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A group map (Linear, LinearAct, Mlp) applied to every column of the matrix x, as left GEMMs."""
    return left_linear(f, x) if isinstance(f, nn.Linear) else f.forward_columns(x)
