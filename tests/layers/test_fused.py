"""The fused seam kernels (mlplab.layers.fused) against the modules they replace.

float64: exact (libm erf/exp) to 1e-12, forward and every gradient; float32 and bfloat16 (the
vectorised erf/exp, bf16 rounding) to their precision; NaN passes through; the build is cached
and a machine without a compiler reports why; the C prototypes come from one signature table."""
import ctypes
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mlplab.layers import fused
from mlplab.layers.fused import build, ops

pytestmark = pytest.mark.skipif(not fused.available(),
                                reason=f"fused kernels unavailable: {fused.unavailable_reason()}")


@pytest.fixture(params=["eager", "custom_op"])
def route(request, monkeypatch):
    """Both ways to the kernels: the autograd.Function eager callers take, and the custom ops a
    compiled graph calls (taken here by pretending to compile)."""
    if request.param == "custom_op":
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    return request.param


def _norm(C, dtype=torch.float64):
    torch.manual_seed(1)
    ln = nn.LayerNorm(C, eps=1e-5).to(dtype)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    return ln


def _reference(x, t, ln, act):
    u = x + (F.gelu(t) if act == "gelu" else t)
    return u, ln(u)


@pytest.mark.parametrize("act", ["identity", "gelu"])
@pytest.mark.parametrize("uses", ["both", "h", "u"])
def test_residual_norm_is_exact_in_float64(act, uses, route):
    """Values and gradients (x, t, gamma, beta) for every way the outputs are used downstream."""
    ln = _norm(12)
    x = torch.randn(3, 5, 12, dtype=torch.float64, requires_grad=True)
    t = (3 * torch.randn(3, 5, 12, dtype=torch.float64)).requires_grad_()
    gu, gh = torch.randn(3, 5, 12, dtype=torch.float64), torch.randn(3, 5, 12, dtype=torch.float64)
    grads = []
    for fn in (fused.residual_norm, _reference):
        u, h = fn(x, t, ln, act)
        loss = (u * gu).sum() * (uses != "h") + (h * gh).sum() * (uses != "u")
        grads.append((u, h) + torch.autograd.grad(loss, [x, t, ln.weight, ln.bias]))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("act", ["identity", "gelu"])
@pytest.mark.parametrize("per", ["column", "token"])
def test_a_bias_folded_into_the_seam_is_exact_in_float64(act, per, route):
    """t + b with one b per column (C) or per token of a token-major (S, B, C) residual (S):
    values and gradients of x, t, gamma, beta and b against adding b before the modules."""
    S, B, C = 7, 40, 12  # 21 rows of 12 per chunk: chunks straddle the tokens' row groups
    ln = _norm(C)
    x = torch.randn(S, B, C, dtype=torch.float64, requires_grad=True)
    t = (2 * torch.randn(S, B, C, dtype=torch.float64)).requires_grad_()
    b = torch.randn(C if per == "column" else S, dtype=torch.float64, requires_grad=True)
    gu, gh = torch.randn(S, B, C, dtype=torch.float64), torch.randn(S, B, C, dtype=torch.float64)
    u1, h1 = fused.residual_norm(x, t, ln, act, t_bias=b, t_bias_per=per)
    u2, h2 = _reference(x, t + (b if per == "column" else b.view(S, 1, 1)), ln, act)
    wrt = [x, t, ln.weight, ln.bias, b]
    for v, w in zip((u1, h1) + torch.autograd.grad((u1 * gu).sum() + (h1 * gh).sum(), wrt),
                    (u2, h2) + torch.autograd.grad((u2 * gu).sum() + (h2 * gh).sum(), wrt)):
        torch.testing.assert_close(v, w, rtol=0, atol=1e-12)


def test_a_bias_that_does_not_fit_is_refused():
    ln = _norm(4)
    x, t = torch.randn(3, 2, 4, dtype=torch.float64), torch.randn(3, 2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="one bias per token"):
        fused.residual_norm(x, t, ln, t_bias=torch.zeros(2, dtype=torch.float64), t_bias_per="token")
    with pytest.raises(ValueError, match="token-major"):
        fused.residual_norm(x, t, ln, batch_major=True, t_bias=torch.zeros(3, dtype=torch.float64), t_bias_per="token")
    maps = (torch.arange(24), torch.arange(24))  # (S, B, C) = (3, 2, 4): m = S*C = 12 per sample
    with pytest.raises(ValueError, match="t must be gathered"):
        fused.residual_norm(x, t, ln, h_maps=maps, t_bias=torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="does not divide"):
        fused.residual_norm(x, torch.randn(2, 12, dtype=torch.float64), ln, t_maps=maps,
                            t_bias=torch.zeros(5, dtype=torch.float64))


def test_layer_norm_rows_is_exact_in_float64(route):
    ln = _norm(7)
    x = torch.randn(4, 6, 7, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 6, 7, dtype=torch.float64)
    h1, h2 = fused.layer_norm_rows(x, ln), ln(x)
    torch.testing.assert_close(h1, h2, rtol=0, atol=1e-12)
    for a, b in zip(torch.autograd.grad((h1 * g).sum(), [x, ln.weight, ln.bias]),
                    torch.autograd.grad((h2 * g).sum(), [x, ln.weight, ln.bias])):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_eager_calls_skip_the_custom_ops(monkeypatch):
    """Eager mode reaches the kernels through autograd.Function, without the custom ops' dispatch."""
    def refuse(*args, **kwargs):
        raise AssertionError("custom op called in eager mode")

    for op in ("_residual_norm", "_residual_norm_backward"):
        monkeypatch.setattr(ops, op, refuse)
    ln = _norm(6)
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    u, h = fused.residual_norm(x, x.detach() ** 2, ln, "gelu")
    (u.sum() + h.sum() + fused.layer_norm_rows(x, ln).sum()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("act", ["identity", "gelu"])
@pytest.mark.parametrize("unused", ["u", "h"])
def test_an_output_left_unused_is_exact_in_float64(act, unused, route):
    """Only u (the last seam: the head reads the residual) or only h used downstream: the eager
    Function passes the unused output's gradient as None (the custom op as zeros), and the
    kernels take None as zero."""
    ln = _norm(12)
    x = torch.randn(3, 5, 12, dtype=torch.float64, requires_grad=True)
    t = (3 * torch.randn(3, 5, 12, dtype=torch.float64)).requires_grad_()
    g = torch.randn(3, 5, 12, dtype=torch.float64)
    wrt = [x, t] if unused == "h" else [x, t, ln.weight, ln.bias]  # without h, the LayerNorm takes no part
    grads = []
    for fn in (fused.residual_norm, _reference):
        u, h = fn(x, t, ln, act)
        grads.append(torch.autograd.grad(((h if unused == "u" else u) * g).sum(), wrt))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_layer_norm_rows_gathers_a_token_major_residual_by_default(route):
    S, B, C = 5, 3, 4
    ln = _norm(C)
    p = torch.randperm(S * C, generator=torch.Generator().manual_seed(0))
    x = torch.randn(S, B, C, dtype=torch.float64, requires_grad=True)
    h1 = fused.layer_norm_rows(x, ln, h_maps=(p, torch.argsort(p)))
    h2 = ln(x).transpose(0, 1).reshape(B, S * C)[:, p]
    g = torch.randn(B, S * C, dtype=torch.float64)
    for a, b in zip((h1,) + torch.autograd.grad((h1 * g).sum(), [x, ln.weight, ln.bias]),
                    (h2,) + torch.autograd.grad((h2 * g).sum(), [x, ln.weight, ln.bias])):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_the_eager_function_is_the_custom_op_without_its_dispatch(monkeypatch):
    """_eager_function makes an autograd.Function of the op's implementation, setup and gradient:
    the same values and gradients as the custom op, mean and rstd not differentiable, an unused
    output's gradient None (not a tensor of zeros, which the op materializes), and the backward
    straight to the kernels; a seam without t (the first LN) is the same op."""
    ln = _norm(6)
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    t = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    gh = torch.randn(4, 6, dtype=torch.float64)
    seam = ops.Seam(x, t, ln.weight, ln.bias, 1e-5, 1, torch.float64)
    rows = ops.Seam(x, None, ln.weight, ln.bias, 1e-5, 0, torch.float64)
    wrt = [x, t, ln.weight, ln.bias]
    op_seam = ops._residual_norm(*seam)
    op_seam_grads = torch.autograd.grad((op_seam[1] * gh).sum(), wrt)
    op_rows = ops._residual_norm(*rows)
    op_rows_grads = torch.autograd.grad((op_rows[1] * gh).sum(), [x, ln.weight, ln.bias])
    assert op_rows[0].numel() == 0  # no t: no u

    def refuse(*args, **kwargs):
        raise AssertionError("custom op called by the eager Function")

    for op in ("_residual_norm", "_residual_norm_backward"):
        monkeypatch.setattr(ops, op, refuse)
    seen = []

    def recorded(grad):
        def wrapped(ctx, *grads):
            seen.append([g is None for g in grads])
            return grad(ctx, *grads)
        return wrapped

    Seam = ops._eager_function("Seam", lambda *inputs: ops._forward(ops.Seam(*inputs)), ops._setup,
                               recorded(ops._grad))
    assert Seam.__name__ == "Seam" and issubclass(Seam, torch.autograd.Function)
    out = Seam.apply(*seam)
    assert [o.requires_grad for o in out] == [True, True, False, False]
    for a, b in zip(out + torch.autograd.grad((out[1] * gh).sum(), wrt), op_seam + op_seam_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    out = Seam.apply(*rows)
    for a, b in zip(out[1:] + torch.autograd.grad((out[1] * gh).sum(), [x, ln.weight, ln.bias]),
                    op_rows[1:] + op_rows_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert seen == [[True, False, True, True], [True, False, True, True]]  # u, mean, rstd unused: None


def test_compiled_graphs_reach_the_kernels_through_the_custom_ops(monkeypatch):
    """Under torch.compile (pretended here) both seams and their backward are the custom ops,
    which AOTAutograd can trace, rather than the eager Function's ctypes calls."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    calls = []
    for name in ("_residual_norm", "_residual_norm_backward"):
        def spy(*args, _op=getattr(ops, name), _name=name):
            calls.append(_name)
            return _op(*args)
        monkeypatch.setattr(ops, name, spy)
    ln = _norm(6)
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    u, h = fused.residual_norm(x, x.detach() ** 2, ln, "gelu")
    (u.sum() + h.sum()).backward()
    assert calls == ["_residual_norm", "_residual_norm_backward"]
    fused.layer_norm_rows(x, ln).sum().backward()
    assert calls[2:] == ["_residual_norm", "_residual_norm_backward"]


def test_float32_and_bfloat16_agree_with_the_modules():
    """float32: the rational erf (|error| <= 4.5e-7) and the exp polynomial; bf16 t/h: one
    rounding of h (relative 2^-8) on top, the residual kept in float32."""
    ln = _norm(64, torch.float32)
    x = torch.randn(256, 64)
    t32 = 3 * torch.randn(256, 64)
    u, h = fused.residual_norm(x, t32, ln, "gelu")
    u_ref, h_ref = _reference(x, t32, ln, "gelu")
    torch.testing.assert_close(u, u_ref, rtol=0, atol=2e-6)
    torch.testing.assert_close(h, h_ref, rtol=0, atol=2e-5)
    tb = t32.bfloat16()
    u, h = fused.residual_norm(x, tb, ln, "gelu")
    u_ref, h_ref = _reference(x, tb.float(), ln, "gelu")
    assert u.dtype == torch.float32 and h.dtype == torch.bfloat16
    torch.testing.assert_close(u, u_ref, rtol=0, atol=2e-6)
    torch.testing.assert_close(h.float(), h_ref, rtol=2 ** -8, atol=1e-6)
    # gradient of t through GELU' (exp polynomial) in float32
    t = t32.clone().requires_grad_()
    g = torch.randn(256, 64)
    (gt,) = torch.autograd.grad((fused.residual_norm(x, t, ln, "gelu")[0] * g).sum(), [t])
    (gt_ref,) = torch.autograd.grad((_reference(x, t, ln, "gelu")[0] * g).sum(), [t])
    torch.testing.assert_close(gt, gt_ref, rtol=0, atol=2e-6)


def test_nan_propagates():
    ln = _norm(8, torch.float32)
    t = torch.randn(4, 8)
    t[1, 3] = float("nan")
    for tt in (t, t.bfloat16()):
        u, h = fused.residual_norm(torch.randn(4, 8), tt, ln, "gelu")
        assert torch.isnan(u[1, 3]) and torch.isnan(h[1].float()).all()
        assert torch.isfinite(h[[0, 2, 3]].float()).all()


def test_unsupported_inputs_are_refused():
    ln = _norm(8, torch.float32)
    with pytest.raises(TypeError, match="no kernel"):
        fused.residual_norm(torch.randn(2, 8), torch.randn(2, 8, dtype=torch.float64), ln)
    with pytest.raises(ValueError, match="weight and bias of the residual's dtype"):
        fused.residual_norm(torch.randn(2, 8, dtype=torch.float64), torch.randn(2, 8, dtype=torch.float64), ln)
    with pytest.raises(ValueError, match="CPU tensors"):
        fused.residual_norm(torch.randn(2, 8, device="meta"), torch.randn(2, 8, device="meta"), ln)


def test_status_names_the_library():
    assert fused.status() == {"available": True, "reason": None, "library": str(build._library()[0].path)}


def test_a_signature_that_disagrees_with_the_c_source_fails_the_build_once(tmp_path, monkeypatch):
    """The build writes the prototypes from SIGNATURES: an argument typed differently there than
    in the C definition is a compile error, not a corrupted call; the failure is remembered for
    the cache key, so the next process does not run the compiler again."""
    monkeypatch.setenv("MLPLAB_KERNEL_CACHE", str(tmp_path))
    sig = dict(fused.SIGNATURES)
    sig["residual_norm_forward"] = sig["residual_norm_forward"].replace("int act", "double act")
    monkeypatch.setattr(build, "SIGNATURES", sig)
    path, why = build._build()
    assert path is None and "conflicting types" in why, why
    assert [p.suffix for p in tmp_path.iterdir()] == [".failed"]
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the failed build was retried"))
    path, again = build._build()
    assert path is None and again.startswith(why) and "delete" in again


def test_calls_are_checked_against_the_signatures():
    path = build._library()[0].path
    kernels = fused.Kernels(path)  # a second handle on the built library
    assert kernels.path == path
    fn = kernels.function("residual_norm_forward", "f32")
    assert fn.restype is ctypes.c_int and len(fn.argtypes) == len(build._arguments("residual_norm_forward", "f32"))
    e = torch.empty(0)
    args = dict(R=0, C=8, x=e, t=e, tb=None, div=0, act=0, gamma=e, beta=e, eps=1e-5, u_out=e, h=e, mean=e, rstd=e,
                nthreads=1)
    kernels("residual_norm_forward", "f32", **args)
    with pytest.raises(TypeError, match="missing argument 'eps'"):
        kernels("residual_norm_forward", "f32", **{k: v for k, v in args.items() if k != "eps"})
    with pytest.raises(TypeError, match="unknown argument"):
        kernels("residual_norm_forward", "f32", **args, bias=e)
    with pytest.raises(TypeError, match="x must be a contiguous torch.float32 tensor, got torch.float64"):
        kernels("residual_norm_forward", "f32", **{**args, "x": e.double()})
    with pytest.raises(TypeError) as err:
        kernels("residual_norm_forward", "f32", **{**args, "x": torch.empty(4, 2).t()})
    assert str(err.value) == ("residual_norm_forward_f32: x must be a contiguous torch.float32 tensor, got a "
                              "non-contiguous torch.float32")
    # a buffer the kernel cannot allocate (a 2**40-entry row) is an exception, not a crash
    with pytest.raises(MemoryError, match="could not allocate"):
        kernels("residual_norm_forward", "f32", **{**args, "C": 2 ** 40})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_the_kernels_run_on_torchs_openmp_runtime():
    """One OpenMP runtime in the process: the kernels' libgomp.so.1 is torch's copy."""
    build._library()
    with open("/proc/self/maps") as f:
        runtimes = {os.path.realpath(line.split()[-1]) for line in f
                    if re.search(r"/lib(g|i)?omp[^/]*\.so", line.split()[-1])}
    assert len(runtimes) == 1, runtimes


def test_the_build_is_cached_per_source_and_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("MLPLAB_KERNEL_CACHE", str(tmp_path))
    path, why = build._build()
    assert why == "" and path.parent == tmp_path and path.exists()
    mtime = path.stat().st_mtime_ns
    assert build._build()[0] == path and path.stat().st_mtime_ns == mtime  # reused, not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind


@pytest.mark.parametrize("prefers", [False, True])
def test_512_bit_vectors_for_rows_of_two_whole_vectors_where_the_cpu_prefers_them(monkeypatch, prefers):
    monkeypatch.setattr(build, "cpu_prefers_512_bit_vectors", lambda: prefers)
    assert "-mprefer-vector-width=512" in build._flags(True) and "-mprefer-vector-width=512" not in build._flags()
    assert [build.wide_rows(C) for C in (8, 16, 32, 64, 124, 128)] == [False, False, prefers, prefers, False, prefers]
    assert build.kernels_for(64) is (build._library(True) if prefers else build._library())[0]
    assert build.kernels_for(8) is build._library()[0]


@pytest.mark.parametrize("C", [16, 64])
def test_both_builds_compute_the_same_seam(monkeypatch, C):
    """The wide build (512-bit vectors) against the default one on rows they both take, float32
    and bf16, forward and backward: the same function up to the order of float32 sums (and so,
    in bf16, up to one rounding step of the bf16 outputs h and gt)."""
    ln = _norm(C, torch.float32)
    x, t = torch.randn(64, C, requires_grad=True), (2 * torch.randn(64, C)).requires_grad_()
    gh = torch.randn(64, C)  # dL/dh does not depend on h: a rounding step of h stays out of the gradients
    results = []
    for wide in (False, True):
        monkeypatch.setattr(build, "wide_rows", lambda C, wide=wide: wide)
        for tt in (t, t.bfloat16()):
            u, h = fused.residual_norm(x, tt, ln, "gelu")
            results.append([u, h.float()] + list(torch.autograd.grad((u.sum() + (h.float() * gh).sum()), [x, t])))
    for a, b, tol in zip(results[:2], results[2:], (1e-5, 2 ** -7)):
        for v, w in zip(a, b):
            torch.testing.assert_close(v, w, rtol=tol, atol=1e-5)
    ln64, x64, t64 = _norm(C), x.detach().double().requires_grad_(), t.detach().double().requires_grad_()
    exact = [fn(x64, t64, ln64, "gelu") for fn in (fused.residual_norm, _reference)]  # the wide build
    for v, w in zip(*exact):
        torch.testing.assert_close(v, w, rtol=0, atol=1e-12)


def test_no_compiler_is_reported(monkeypatch):
    monkeypatch.setattr(build, "_c_compiler", lambda: None)
    path, why = build._build()
    assert (path, why) == (None, "no C compiler (cc/gcc/clang, or $CC) found")


@pytest.mark.parametrize("batch_major", [False, True])
@pytest.mark.parametrize("maps, bias", [("t", False), ("h", False), ("both", False), ("t", True), ("both", True)])
@pytest.mark.parametrize("act", ["identity", "gelu"])
@pytest.mark.parametrize("S, B, C, n2", [(5, 3, 4, 10), (11, 2, 32, 16)])
def test_gathered_seams_are_exact_in_float64(batch_major, maps, bias, act, S, B, C, n2, route):
    """RP seams: t read through J2 (t_b[map[k]]) and h written through J1 (h_b[j] = LN(u)_b[map[j]])
    per sample, with a token-major or batch-major residual, and the PK layer's bias (one per
    column of its grouped (B·n1, n2') output) added to the gathered t; values and gradients.
    With C = 32 the kernels take a sample's 11 rows in chunks of 8 (and 3)."""
    m = S * C
    ln = _norm(C)
    g = torch.Generator().manual_seed(0)
    p_t, p_h = torch.randperm(m, generator=g), torch.randperm(m, generator=g)
    t_maps = (p_t, torch.argsort(p_t)) if maps in ("t", "both") else None
    h_maps = (p_h, torch.argsort(p_h)) if maps in ("h", "both") else None
    x = torch.randn((B, S, C) if batch_major else (S, B, C), dtype=torch.float64, requires_grad=True)
    t = torch.randn((B, m) if t_maps else x.shape, dtype=torch.float64, requires_grad=True)
    b = torch.randn(n2, dtype=torch.float64, requires_grad=True) if bias else None
    f = F.gelu if act == "gelu" else (lambda v: v)

    def per_sample(v):  # (B, S, C) view of a residual-shaped tensor
        return v if batch_major else v.transpose(0, 1)

    def reference():
        tb = (t.view(B, -1, n2) + b).view(B, m) if bias else t
        tt = tb[:, p_t].view(B, S, C) if t_maps else per_sample(tb)
        u = per_sample(x) + f(tt)
        h = ln(u)
        return (u if batch_major else u.transpose(0, 1)), (h.reshape(B, m)[:, p_h] if h_maps else per_sample(h))

    u1, h1 = fused.residual_norm(x, t, ln, act, t_maps, h_maps, batch_major, t_bias=b)
    u2, h2 = reference()
    gu, gh = torch.randn_like(u2), torch.randn_like(h2)
    wrt = [x, t, ln.weight, ln.bias] + ([b] if bias else [])
    for v, w in zip((u1, h1) + torch.autograd.grad((u1 * gu).sum() + (h1 * gh).sum(), wrt),
                    (u2, h2) + torch.autograd.grad((u2 * gu).sum() + (h2 * gh).sum(), wrt)):
        torch.testing.assert_close(v, w, rtol=0, atol=1e-12)


@pytest.mark.parametrize("batch_major", [False, True])
@pytest.mark.parametrize("maps", ["t", "h", "both"])
def test_paired_bf16_gathers_equal_one_sample_at_a_time(batch_major, maps):
    """Under bf16 the RP seams gather two samples' entries with one 32-bit word per entry; a batch
    of 5 (two pairs and a single sample) gives bit for bit what each sample gives alone (the
    one-sample route): u, h and the gradients of x and t. The LayerNorm's and the bias's gradients
    are sums over the samples, equal up to the order of summation."""
    S, B, C, n2 = 11, 5, 32, 16
    m = S * C
    ln = _norm(C, torch.float32)
    g = torch.Generator().manual_seed(0)
    p_t, p_h = torch.randperm(m, generator=g), torch.randperm(m, generator=g)
    t_maps = (p_t, torch.argsort(p_t)) if maps in ("t", "both") else None
    h_maps = (p_h, torch.argsort(p_h)) if maps in ("h", "both") else None
    x = torch.randn((B, S, C) if batch_major else (S, B, C), generator=g)
    t = (2 * torch.randn((B, m) if t_maps else x.shape, generator=g)).bfloat16()
    bias = torch.randn(n2, generator=g) if t_maps else None
    gu = torch.randn(x.shape, generator=g)
    gh = torch.randn((B, m) if h_maps else x.shape, generator=g).bfloat16()
    sample_dim = 0 if batch_major else 1  # of x, u and of t, h in the residual's layout

    def seam(xs, ts, ghs, gus):
        xs, ts = xs.clone().requires_grad_(), ts.clone().requires_grad_()
        bs = bias.clone().requires_grad_() if bias is not None else None
        u, h = fused.residual_norm(xs, ts, ln, "gelu", t_maps, h_maps, batch_major, t_bias=bs)
        wrt = [xs, ts, ln.weight, ln.bias] + ([bs] if bs is not None else [])
        return [u, h] + list(torch.autograd.grad((u * gus).sum() + (h.float() * ghs.float()).sum(), wrt))

    whole = seam(x, t, gh, gu)
    alone = []
    for b in range(B):
        pick = lambda v, mapped: v[b:b + 1] if mapped else v.narrow(sample_dim, b, 1).contiguous()  # noqa: E731
        alone.append(seam(pick(x, False), pick(t, t_maps is not None), pick(gh, h_maps is not None), pick(gu, False)))
    for i, mapped in ((0, False), (1, h_maps is not None), (2, False), (3, t_maps is not None)):  # u, h, dx, dt
        dim = 0 if mapped else sample_dim
        assert torch.equal(whole[i], torch.cat([a[i] for a in alone], dim)), i
    for i in range(4, len(whole)):  # dgamma, dbeta, dbias
        torch.testing.assert_close(whole[i], sum(a[i] for a in alone), rtol=1e-5, atol=1e-5)


def test_the_kernels_take_a_stack_of_models_under_vmap():
    """Several seeds' S-Mixers stacked (torch.func.vmap over functional_call, train.lockstep): each
    seed's slice goes through the kernels on its own weights; float64 logits and every gradient
    equal each model's module path."""
    from torch.func import functional_call, stack_module_state, vmap

    from mlplab import create_model

    torch.manual_seed(0)
    models = [create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=8, num_tokens=12, depth=2).double()
              for _ in range(3)]
    for m in models:
        nn.init.normal_(m.head.weight)
    x, y = torch.randn(3, 4, 3, 8, 8, dtype=torch.float64), torch.randint(0, 10, (3, 4))
    params, buffers = stack_module_state(models)
    params = {k: v.detach().requires_grad_() for k, v in params.items()}
    template = models[0]
    assert template.fusable().ok, template.fusable().why
    logits = vmap(lambda p, b, xk: functional_call(template, (p, b), (xk,)))(params, buffers, x)
    vmap(F.cross_entropy)(logits, y).sum().backward()
    for k, m in enumerate(models):
        m.impl = "module"
        F.cross_entropy(ref := m(x[k]), y[k]).backward()
        assert torch.allclose(logits[k], ref, rtol=0, atol=1e-12)
        for name, p in m.named_parameters():
            assert torch.allclose(params[name].grad[k], p.grad, rtol=0, atol=1e-12), name


def test_the_eager_functions_vmap_rule_runs_each_slice_through_the_kernels():
    """The vmap rule of a Function that _eager_function makes (built here, as _ResidualNorm is at
    import): k seams stacked along any dimension (x along 1, t and gamma along 0) or shared (beta,
    eps, act, the dtype: in_dims None) give each slice's own seam, stacked along dimension 0, and
    gradients through the stack; against each slice written with F.layer_norm in float64."""
    Seam = ops._eager_function("Seam", lambda *inputs: ops._forward(ops.Seam(*inputs)), ops._setup, ops._grad)
    k, R, C, eps = 3, 5, 6, 1e-5
    g = torch.Generator().manual_seed(0)
    x = torch.randn(R, k, C, dtype=torch.float64, generator=g).requires_grad_()
    t = (2 * torch.randn(k, R, C, dtype=torch.float64, generator=g)).requires_grad_()
    gamma = torch.randn(k, C, dtype=torch.float64, generator=g).requires_grad_()
    beta = torch.randn(C, dtype=torch.float64, generator=g).requires_grad_()
    gu, gh = torch.randn(k, R, C, dtype=torch.float64, generator=g), torch.randn(k, R, C, dtype=torch.float64,
                                                                                  generator=g)

    def seam(xk, tk, gk):  # contiguous slices, as residual_norm makes them (the kernels take no strides)
        return Seam.apply(xk.contiguous(), tk.contiguous(), gk, beta, eps, ops.ACTS["gelu"], torch.float64)

    u, h, mean, rstd = torch.func.vmap(seam, in_dims=(1, 0, 0))(x, t, gamma)
    assert (u.shape, h.shape, mean.shape, rstd.shape) == ((k, R, C), (k, R, C), (k, R), (k, R))
    u_ref = torch.stack([x[:, i] + F.gelu(t[i]) for i in range(k)])
    h_ref = torch.stack([F.layer_norm(u_ref[i], (C,), gamma[i], beta, eps) for i in range(k)])
    torch.testing.assert_close(mean, u_ref.mean(-1), rtol=0, atol=1e-12)
    torch.testing.assert_close(rstd, (u_ref.var(-1, unbiased=False) + eps).rsqrt(), rtol=0, atol=1e-12)
    wrt = [x, t, gamma, beta]
    for a, b in zip((u, h) + torch.autograd.grad((u * gu).sum() + (h * gh).sum(), wrt),
                    (u_ref, h_ref) + torch.autograd.grad((u_ref * gu).sum() + (h_ref * gh).sum(), wrt)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
