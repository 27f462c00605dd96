"""The custom ops of the fused seams and their autograd: one forward op, one backward op.

A seam is :class:`Seam`, the one record of the forward's arguments (its fields are the op's
schema, in order): ``residual_norm`` is a seam with a sublayer output ``t``, ``layer_norm_rows``
one without (the first LN). The kernels come from :mod:`.build`. Compiled graphs call the custom
ops, which inductor sees as opaque kernels; eager callers an ``autograd.Function`` made from the
same implementation, setup and gradient (:func:`_eager_function`), because the custom op's
dispatch with its registered autograd costs ~0.5-0.8 ms more per seam forward and backward on
this project's CPU (a seam is ~1 ms at S = C = 64, batch 256), the Function's a few µs.
"""
# No `from __future__ import annotations` here: torch.library.custom_op infers the ops' schemas
# from their annotations, and string annotations are evaluated in the globals of the function it
# is given, which for a wrapped function (mutmut's trampolines, scripts/mutation.sh) lack torch.

from typing import NamedTuple

import torch

from . import build

__all__ = ["ACTS", "Seam", "residual_norm", "layer_norm_rows"]

#: activations the kernels apply to t: the identity and exact GELU
ACTS = {"identity": 0, "gelu": 1}


class Seam(NamedTuple):
    """A seam's forward arguments, in the custom op's order: u = x + act(t + b), h = LN(u)."""

    x: torch.Tensor  # the residual (float32, float64)
    t: torch.Tensor | None  # the sublayer's output (None: the first LN, h = LN(x))
    gamma: torch.Tensor  # the LayerNorm's weight and bias
    beta: torch.Tensor
    eps: float
    act: int  # ACTS
    h_dtype: torch.dtype  # t's dtype (bf16 under autocast), x's without t
    t_map: torch.Tensor | None = None  # int32 gather of a grouped t (J2) and its inverse
    t_map_inv: torch.Tensor | None = None
    h_map: torch.Tensor | None = None  # int32 gather writing h grouped (J1) and its inverse
    h_map_inv: torch.Tensor | None = None
    batch_major: bool = False  # a 3-d residual (B, S, C) rather than token-major (S, B, C)
    t_bias: torch.Tensor | None = None  # a bias folded into t
    div: int = 0  # the kernels' div for that bias (0: one per column; B: one per token)


def _acc(x: torch.Tensor) -> torch.dtype:
    """The kernels' accumulator (and mean/rstd) dtype for residual ``x``."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _sb(x: torch.Tensor, batch_major: bool) -> tuple[int, int]:
    """(S, B) of a 3-d residual: token-major (S, B, C) or batch-major (B, S, C)."""
    return (x.shape[1], x.shape[0]) if batch_major else (x.shape[0], x.shape[1])


def _period(t_bias: torch.Tensor | None) -> int:
    """The gathered kernels' ``period``: entries of a bias per column of a grouped t (0 without one)."""
    return 0 if t_bias is None else t_bias.numel()


def _h_empty(x: torch.Tensor, h_dtype: torch.dtype, h_map: torch.Tensor | None, batch_major: bool) -> torch.Tensor:
    """h: the residual's shape, or (B, m) gathered for the next PK layer."""
    if h_map is None:
        return torch.empty(x.shape, dtype=h_dtype, device=x.device)
    S, B = _sb(x, batch_major)
    return x.new_empty((B, S * x.shape[2]), dtype=h_dtype)


def _forward(s: Seam) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(u, h, mean, rstd) through the kernels; u is empty without t."""
    x, C = s.x, s.x.shape[-1]
    R = x.numel() // C
    u = torch.empty_like(x) if s.t is not None else x.new_empty(0)
    h = _h_empty(x, s.h_dtype, s.h_map, s.batch_major)
    mean, rstd = torch.empty(R, dtype=_acc(x)), torch.empty(R, dtype=_acc(x))
    common = dict(x=x, t=s.t, tb=s.t_bias, act=s.act, gamma=s.gamma, beta=s.beta, eps=s.eps,
                  u_out=u if s.t is not None else None, h=h, mean=mean, rstd=rstd, nthreads=torch.get_num_threads())
    kernels, v = build.kernels_for(C), build.variant(x, s.h_dtype)
    if s.t_map is None and s.h_map is None:
        kernels("residual_norm_forward", v, R=R, C=C, div=s.div, **common)
    else:  # a bias here is one per column of the grouped t (t_map given; residual_norm checks)
        S, B = _sb(x, s.batch_major)
        kernels("residual_norm_gathered_forward", v, S=S, B=B, C=C, batch_major=int(s.batch_major),
                period=_period(s.t_bias), t_map=s.t_map, h_map=s.h_map, **common)
    return u, h, mean, rstd


def _backward(gh, gu, u, mean, rstd, gamma, t, act, t_map_inv, h_map_inv, batch_major, t_bias, div):
    """A seam's backward through the kernels: (gx, gt, dgamma, dbeta, dbias); gt is empty
    without t, dbias without a bias."""
    C = u.shape[-1]
    R = u.numel() // C
    nt = torch.get_num_threads()
    gh = gh.contiguous()
    gu = gu.contiguous() if gu is not None else None
    gx = torch.empty_like(u)
    gt = torch.empty_like(t) if t is not None else u.new_empty(0, dtype=gh.dtype)
    dgamma, dbeta = torch.empty(nt, C, dtype=_acc(u)), torch.empty(nt, C, dtype=_acc(u))
    dbias = torch.empty(nt, _period(t_bias), dtype=_acc(u)) if t_bias is not None else None
    common = dict(gh=gh, gu=gu, u=u, mean=mean, rstd=rstd, gamma=gamma, t=t, tb=t_bias, act=act, gx=gx,
                  gt=gt if t is not None else None, dgamma=dgamma, dbeta=dbeta, dtb=dbias, nthreads=nt)
    kernels, v = build.kernels_for(C), build.variant(u, gh.dtype)
    if t_map_inv is None and h_map_inv is None:
        kernels("residual_norm_backward", v, R=R, C=C, div=div, **common)
    else:
        S, B = _sb(u, batch_major)
        kernels("residual_norm_gathered_backward", v, S=S, B=B, C=C, batch_major=int(batch_major),
                period=_period(t_bias), h_map_inv=h_map_inv, t_map_inv=t_map_inv, **common)
    dbias = dbias.sum(0).to(t_bias.dtype) if t_bias is not None else gamma.new_empty(0)
    return gx, gt, dgamma.sum(0).to(gamma.dtype), dbeta.sum(0).to(gamma.dtype), dbias


# ------------------------------------------------------------------ the custom ops (their schemas: Seam's fields)
@torch.library.custom_op("mlplab::residual_norm", mutates_args=())
def _residual_norm(x: torch.Tensor, t: torch.Tensor | None, gamma: torch.Tensor, beta: torch.Tensor, eps: float,
                   act: int, h_dtype: torch.dtype, t_map: torch.Tensor | None, t_map_inv: torch.Tensor | None,
                   h_map: torch.Tensor | None, h_map_inv: torch.Tensor | None, batch_major: bool,
                   t_bias: torch.Tensor | None, div: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _forward(Seam(x, t, gamma, beta, eps, act, h_dtype, t_map, t_map_inv, h_map, h_map_inv, batch_major,
                         t_bias, div))


@_residual_norm.register_fake
def _(*inputs):
    s = Seam(*inputs)
    R = s.x.numel() // s.x.shape[-1]
    u = torch.empty_like(s.x) if s.t is not None else s.x.new_empty(0)
    return u, _h_empty(s.x, s.h_dtype, s.h_map, s.batch_major), s.x.new_empty(R, dtype=_acc(s.x)), \
        s.x.new_empty(R, dtype=_acc(s.x))


@torch.library.custom_op("mlplab::residual_norm_backward", mutates_args=())
def _residual_norm_backward(gh: torch.Tensor, gu: torch.Tensor | None, u: torch.Tensor, mean: torch.Tensor,
                            rstd: torch.Tensor, gamma: torch.Tensor, t: torch.Tensor | None, act: int,
                            t_map_inv: torch.Tensor | None, h_map_inv: torch.Tensor | None, batch_major: bool,
                            t_bias: torch.Tensor | None, div: int
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(gh, gu, u, mean, rstd, gamma, t, act, t_map_inv, h_map_inv, batch_major, t_bias, div)


@_residual_norm_backward.register_fake
def _(gh, gu, u, mean, rstd, gamma, t, act, t_map_inv, h_map_inv, batch_major, t_bias, div):
    C = u.shape[-1]
    gt = torch.empty_like(t) if t is not None else u.new_empty(0, dtype=gh.dtype)
    dbias = torch.empty_like(t_bias) if t_bias is not None else gamma.new_empty(0)
    return torch.empty_like(u), gt, gamma.new_empty(C), gamma.new_empty(C), dbias


def _setup(ctx, inputs, output):
    s = Seam(*inputs)
    u, h, mean, rstd = output
    # the residual the backward differentiates through: u after a skip, x for the first LN
    ctx.save_for_backward(u if s.t is not None else s.x, mean, rstd, s.gamma, s.t, s.t_map_inv, s.h_map_inv,
                          s.t_bias)
    ctx.act, ctx.batch_major, ctx.div, ctx.h_dtype = s.act, s.batch_major, s.div, h.dtype
    ctx.eager = False


def _backward_of(ctx):
    """The kernels' backward as the custom op where AOTAutograd traces it (it must see an op, not a
    ctypes call), directly in eager mode (:func:`_eager_function`)."""
    return _backward if ctx.eager else _residual_norm_backward


def _grad(ctx, gu, gh, _gmean, _grstd) -> tuple:
    u, mean, rstd, gamma, t, t_map_inv, h_map_inv, t_bias = ctx.saved_tensors
    if gh is None:  # h unused: u passes its gradient to x, and through act' to t
        gh = _h_empty(u, ctx.h_dtype, h_map_inv, ctx.batch_major).zero_()
    gx, gt, dgamma, dbeta, dbias = _backward_of(ctx)(gh, gu if t is not None else None, u, mean, rstd, gamma, t,
                                                     ctx.act, t_map_inv, h_map_inv, ctx.batch_major, t_bias, ctx.div)
    return _gradients(x=gx, t=gt if t is not None else None, gamma=dgamma, beta=dbeta,
                      t_bias=dbias if t_bias is not None else None)


_FIELD = {name: i for i, name in enumerate(Seam._fields)}


def _gradients(**grads: torch.Tensor | None) -> tuple:
    """One gradient per forward argument, in Seam's order; None for the arguments not named."""
    out = [None] * len(_FIELD)
    for name, g in grads.items():
        out[_FIELD[name]] = g
    return tuple(out)


_residual_norm.register_autograd(_grad, setup_context=_setup)


# ------------------------------------------------------------------ the same, for eager mode
def _eager_function(name: str, impl, setup, grad) -> type[torch.autograd.Function]:
    """A custom op's implementation, setup and gradient as a ``torch.autograd.Function`` (the
    module docstring says why eager callers take it).

    Under ``torch.func.vmap`` (several seeds' Mixers stacked: :mod:`mlplab.train.lockstep`) the
    kernels take the stack: each model's slice is one call of the Function, on its own weights,
    and the slices' outputs are stacked (unbind / stack: one copy of the outputs each way)."""
    def forward(*inputs):
        return impl(*inputs)

    def setup_context(ctx, inputs, output):
        setup(ctx, inputs, output)
        ctx.eager = True
        ctx.mark_non_differentiable(output[2], output[3])  # mean, rstd
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None (the op makes zeros)

    def backward(ctx, *grads):
        return grad(ctx, *grads)

    def vmap(info, in_dims, *inputs):
        k = info.batch_size
        per = [x.unbind(d) if d is not None else (x,) * k for x, d in zip(inputs, in_dims)]
        outs = [function.apply(*(p[i] for p in per)) for i in range(k)]
        return tuple(torch.stack(o) for o in zip(*outs)), (0,) * len(outs[0])

    function = type(name, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward), "vmap": staticmethod(vmap)})
    return function


_ResidualNorm = _eager_function("_ResidualNorm", lambda *inputs: _forward(Seam(*inputs)), _setup, _grad)


def _apply(s: Seam) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The seam through the custom op while compiling, else through the eager Function."""
    return (_residual_norm if torch.compiler.is_compiling() else _ResidualNorm.apply)(*s)


# ------------------------------------------------------------------ the functions callers use
def _check(x: torch.Tensor, norm: torch.nn.LayerNorm) -> None:
    if x.device.type != "cpu" or norm.weight is None or norm.bias is None or norm.weight.dtype != x.dtype:
        raise ValueError("fused residual_norm takes CPU tensors and a LayerNorm with weight and bias of the "
                         "residual's dtype")


Maps = tuple[torch.Tensor, torch.Tensor]


def _maps(maps: Maps | None, x: torch.Tensor) -> Maps | tuple[None, None]:
    if maps is None:
        return None, None
    if x.ndim != 3 or max(x.shape[0], x.shape[1]) * x.shape[2] >= 2 ** 31:
        raise ValueError("gathered seams take a 3-d residual, (S, B, C) or (B, S, C) with batch_major, of fewer "
                         "than 2**31 entries per sample (int32 maps)")
    return maps[0].to(torch.int32).contiguous(), maps[1].to(torch.int32).contiguous()


def _div(x: torch.Tensor, bias: torch.Tensor | None, per: str, t_map: bool, h_map: bool, batch_major: bool) -> int:
    """The kernels' ``div`` for a bias added to t (0: one per column), or a ValueError."""
    if bias is None:
        return 0
    if bias.dtype != x.dtype or bias.ndim != 1 or (h_map and not t_map):
        raise ValueError("a bias folded into the seam must be a vector of the residual's dtype, and t must be "
                         "gathered (t_maps) when h is")
    if t_map:
        if per == "column" and x.ndim == 3 and (x.numel() // _sb(x, batch_major)[1]) % bias.numel() == 0:
            return 0  # one per column of the (B·n1, n2') grouped t: t_b[i] gets b[i % n2']
        raise ValueError(f"bias of {bias.numel()} entries does not divide the {tuple(x.shape[1:])} sample of "
                         f"a gathered t (one per column of its grouped GEMM output)")
    if per == "column" and bias.numel() == x.shape[-1]:
        return 0
    if per == "token" and x.ndim == 3 and not batch_major and bias.numel() == x.shape[0]:
        return x.shape[1]  # token-major (S, B, C): row r = s*B + b takes b[s]
    raise ValueError(f"bias of {bias.numel()} entries does not fit a residual of shape {tuple(x.shape)} "
                     f"with one bias per {per} (column: C entries; token: S of a token-major (S, B, C))")


def residual_norm(x: torch.Tensor, t: torch.Tensor, norm: torch.nn.LayerNorm, act: str = "identity",
                  t_maps: Maps | None = None, h_maps: Maps | None = None, batch_major: bool = False,
                  t_bias: torch.Tensor | None = None, t_bias_per: str = "column") -> tuple[torch.Tensor, torch.Tensor]:
    """(u, h) = (x + act(t + b), norm(x + act(t + b))) over the last dimension, in one pass each way.

    x: the residual (float32 or float64); t: the sublayer's output, float32/float64 like x or
    bfloat16 (then h is bfloat16 too: CPU autocast). ``norm``'s weight and bias are used.
    With a 3-d residual x, token-major (S, B, C) or batch-major (B, S, C) (``batch_major``),
    per-sample index maps (m = S·C entries, and their inverses) connect RP sublayers:
    ``t_maps = (J2 gather, inverse)`` when t is the (B, m) output of a PK layer with free
    permutations (act(t) at row-major entry k of a sample is act(t_b[map[k]])), ``h_maps =
    (J1 gather, inverse)`` to write h as the next such layer's (B, m) input (h_b[j] =
    LN(u)_b[map[j]]). Without maps t and h have x's layout.

    ``t_bias`` (optional): the sublayer's bias b, added here rather than by its GEMM, whose
    broadcast bias costs a pass over t (``addmm``) and its gradient another (a sum): one per
    column (``t_bias_per="column"``, C entries: the bias of a map of the rows) or one per token
    of a token-major (S, B, C) residual (``"token"``, S entries: of a map of the columns). With
    ``t_maps``, one per column of t's grouped (B·n1, n2') GEMM output (n2' entries: t_b[i] gets
    b[i mod n2']); not with ``h_maps`` alone. Its gradient is summed from act'(t + b) in the
    backward kernel."""
    _check(x, norm)
    t_map, t_inv = _maps(t_maps, x)
    h_map, h_inv = _maps(h_maps, x)
    div = _div(x, t_bias, t_bias_per, t_map is not None, h_map is not None, batch_major)
    t = t.contiguous()
    u, h, _, _ = _apply(Seam(x.contiguous(), t, norm.weight, norm.bias, norm.eps, ACTS[act], t.dtype,
                             t_map, t_inv, h_map, h_inv, batch_major, t_bias, div))
    return u, h


def layer_norm_rows(x: torch.Tensor, norm: torch.nn.LayerNorm, h_dtype: torch.dtype | None = None,
                    h_maps: Maps | None = None, batch_major: bool = False) -> torch.Tensor:
    """``norm(x)`` over the last dimension by the same kernel, written as ``h_dtype`` (default x's),
    and gathered by ``h_maps`` as in :func:`residual_norm`."""
    _check(x, norm)
    h_map, h_inv = _maps(h_maps, x)
    _, h, _, _ = _apply(Seam(x.contiguous(), None, norm.weight, norm.bias, norm.eps, ACTS["identity"],
                             h_dtype or x.dtype, h_map=h_map, h_map_inv=h_inv, batch_major=batch_major))
    return h
