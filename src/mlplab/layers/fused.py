"""The seam between two pre-LN residual sublayers, fused into one pass each way (CPU, in C).

A Mixer block's sublayer ends with the skip connection and the next one starts with a
LayerNorm (docs/science.md §2): between two GEMMs the activations go through

    u = x + act(t),    h = LN(u) = (u - mean u) * rstd * gamma + beta

(act = φ for an S-Mixer sublayer, the identity after an MLP's second layer). Separately these
are five passes over the activations forward and seven backward, and at S = C = 64 they take
more time than the GEMMs. :func:`residual_norm` does each direction in one pass over rows of C
(``kernels/residual_norm.c``), and :func:`layer_norm_rows` is the same without a skip (the first
LN). Both are ``torch.library`` custom ops with their backward registered, so autograd and
``torch.compile`` (which calls them as opaque kernels) work with them.

Build. The C source is compiled on first use with the system's C compiler ($CC, else
cc/gcc/clang; ``-O3 -march=native -fopenmp``; on CPUs that prefer 512-bit vectors a second build
with them serves long rows, :func:`_wide`) into ``~/.cache/mlplab/kernels``
(``$MLPLAB_KERNEL_CACHE``), one file per source, signature table, flags, compiler and CPU, written
to a temporary name and renamed. A failed build is remembered there for that key (a
``.failed`` file with the compiler's message; delete it to try again), so other processes do not
retry it. :func:`status` says whether the kernels are loaded and, if not, why; callers then take
their unfused path. Threads: ``torch.get_num_threads()``, on the OpenMP runtime torch loaded
(the kernels' ``libgomp.so.1`` resolves to torch's copy, already in the process).

Signatures. :data:`SIGNATURES` is the one statement of each exported C function's arguments:
the build writes the C prototypes from it (``residual_norm_api.h``, which the source includes,
so a definition that disagrees with it does not compile), and every call goes through
:class:`Kernels`, which passes the arguments by name in the table's order and checks each
tensor's dtype and layout against it. A kernel returns 1 when it cannot allocate its buffers,
raised here as ``MemoryError``.

Dtypes: float64 (exact libm erf/exp: the tests compare it with the unfused modules to 1e-12),
float32, and, under CPU autocast, bfloat16 t and h with the residual kept in float32. The float32
GELU uses a rational erf (absolute error ≤ 4.5e-7 against libm) so that it vectorises; its
gradient an exp polynomial (relative error < 2e-7).
"""
# No `from __future__ import annotations` here: torch.library.custom_op infers the ops' schemas
# from their annotations, and string annotations are evaluated in the globals of the function it
# is given, which for a wrapped function (mutmut's trampolines, scripts/mutation.sh) lack torch.

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from ..utils.cpu import cpu_info, cpu_prefers_512_bit_vectors
from ..utils.io import atomic_write_text

__all__ = ["available", "unavailable_reason", "status", "residual_norm", "layer_norm_rows", "ACTS", "SIGNATURES",
           "Kernels"]

_KERNELS = Path(__file__).with_name("kernels")
_SOURCES = ("residual_norm.c", "residual_norm.inc")
_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros",
          "-fopenmp", "-fPIC", "-shared"]
#: activations the kernels apply to t: the identity and exact GELU
ACTS = {"identity": 0, "gelu": 1}

#: Each exported kernel's arguments, in C. XT, TT and ACC are a variant's residual, activation
#: (t, h and their gradients) and accumulator types (``_VARIANTS``); every kernel returns an int
#: status (0, or 1: out of memory). Changing a kernel's arguments: edit its line here and its
#: definition in ``kernels/residual_norm.inc``, then the calls in ``_forward`` / ``_backward``.
SIGNATURES = {
    "residual_norm_forward":
        "int64_t R, int64_t C, const XT *x, const TT *t, const XT *tb, int64_t div, int act, const XT *gamma, "
        "const XT *beta, double eps, XT *u_out, TT *h, ACC *mean, ACC *rstd, int nthreads",
    "residual_norm_backward":
        "int64_t R, int64_t C, const TT *gh, const XT *gu, const XT *u, const ACC *mean, const ACC *rstd, "
        "const XT *gamma, const TT *t, const XT *tb, int64_t div, int act, XT *gx, TT *gt, ACC *dgamma, "
        "ACC *dbeta, ACC *dtb, int nthreads",
    "residual_norm_gathered_forward":
        "int64_t S, int64_t B, int64_t C, int batch_major, const XT *x, const TT *t, const XT *tb, int64_t period, "
        "int act, const int32_t *t_map, const int32_t *h_map, const XT *gamma, const XT *beta, double eps, "
        "XT *u_out, TT *h, ACC *mean, ACC *rstd, int nthreads",
    "residual_norm_gathered_backward":
        "int64_t S, int64_t B, int64_t C, int batch_major, const TT *gh, const int32_t *h_map_inv, const XT *gu, "
        "const XT *u, const ACC *mean, const ACC *rstd, const XT *gamma, const TT *t, const XT *tb, "
        "int64_t period, int act, const int32_t *t_map_inv, XT *gx, TT *gt, ACC *dgamma, ACC *dbeta, ACC *dtb, "
        "int nthreads",
}
#: (residual dtype, activation dtype) -> variant suffix, and each variant's C types
_VARIANTS = {(torch.float64, torch.float64): "f64", (torch.float32, torch.float32): "f32",
             (torch.float32, torch.bfloat16): "bf16"}
_C_TYPES = {"f64": {"XT": "double", "TT": "double", "ACC": "double"},
            "f32": {"XT": "float", "TT": "float", "ACC": "float"},
            "bf16": {"XT": "float", "TT": "uint16_t", "ACC": "float"}}
_SCALARS = {"int64_t": ctypes.c_int64, "int": ctypes.c_int, "double": ctypes.c_double}
_POINTEES = {"double": torch.float64, "float": torch.float32, "uint16_t": torch.bfloat16, "int32_t": torch.int32}


def _arguments(name: str, variant: str) -> list[tuple[str, str, bool]]:
    """(C type, name, is a pointer) of each argument of a kernel's variant, from :data:`SIGNATURES`."""
    out = []
    for arg in SIGNATURES[name].split(","):
        ctype, _, arg_name = arg.strip().rpartition(" ")
        pointer = arg_name.startswith("*")
        ctype = " ".join(_C_TYPES[variant].get(w, w) for w in ctype.split())
        out.append((ctype + (" *" if pointer else ""), arg_name.lstrip("*"), pointer))
    return out


def prototypes() -> str:
    """The C prototypes of every kernel and variant (the generated ``residual_norm_api.h``)."""
    lines = ["/* generated by mlplab.layers.fused from SIGNATURES: do not edit */", "#include <stdint.h>"]
    for name in SIGNATURES:
        for v in _C_TYPES:
            args = ", ".join(f"{t}{'' if p else ' '}{n}" for t, n, p in _arguments(name, v))
            lines.append(f"int {name}_{v}({args});")
    return "\n".join(lines) + "\n"


class Kernels:
    """A loaded build: ``kernels(name, variant, **arguments)`` calls ``<name>_<variant>`` with the
    arguments :data:`SIGNATURES` names, in its order; a tensor must have the pointee's dtype and be
    contiguous (None passes NULL). Raises TypeError on a missing, unknown or mistyped argument and
    MemoryError when the kernel cannot allocate its buffers."""

    def __init__(self, path: Path):
        self.path = path
        self._lib = ctypes.CDLL(str(path))
        self._calls = {}
        for name in SIGNATURES:
            for v in _C_TYPES:
                fn = getattr(self._lib, f"{name}_{v}")
                args = _arguments(name, v)
                fn.argtypes = [ctypes.c_void_p if p else _SCALARS[t] for t, _, p in args]
                fn.restype = ctypes.c_int
                checks = [(n, _POINTEES[t.replace("const ", "").rstrip(" *")] if p else None) for t, n, p in args]
                self._calls[name, v] = (fn, checks)

    def function(self, name: str, variant: str):
        """The ctypes function of a kernel's variant."""
        return self._calls[name, variant][0]

    def __call__(self, name: str, variant: str, **arguments) -> None:
        fn, checks = self._calls[name, variant]
        values = []
        for arg, dtype in checks:
            try:
                v = arguments.pop(arg)
            except KeyError:
                raise TypeError(f"{name}: missing argument {arg!r} (SIGNATURES)") from None
            if dtype is not None and v is not None:
                if v.dtype != dtype or not v.is_contiguous():
                    raise TypeError(f"{name}_{variant}: {arg} must be a contiguous {dtype} tensor, got "
                                    f"{'a non-contiguous ' if not v.is_contiguous() else ''}{v.dtype}")
                v = v.data_ptr()
            values.append(v)
        if arguments:
            raise TypeError(f"{name}: unknown argument(s) {sorted(arguments)} (SIGNATURES)")
        if fn(*values):
            raise MemoryError(f"the fused {name} kernel could not allocate its per-thread buffers")


def _c_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_signature() -> str:
    """What ``-march=native`` depends on: the CPU's vendor, model and flags."""
    return repr(sorted(cpu_info().items()))


def _flags(wide: bool = False) -> list[str]:
    """The compiler's flags: ``_FLAGS``, with 512-bit vectors for the ``wide`` build."""
    return _FLAGS + (["-mprefer-vector-width=512"] if wide else [])


#: floats per 512-bit vector
WIDE_ROW = 16


def _wide(C: int) -> bool:
    """Whether rows of C entries take the kernels built with 512-bit vectors: on CPUs that prefer
    them (:func:`~mlplab.utils.cpu.cpu_prefers_512_bit_vectors`) when a row is at least two
    whole vectors. Rows of 32-128 such entries run faster with them; short rows and rows with a
    masked remainder (C = 8, 124) slower (``benchmarks/bench_kernel_ab.py`` compares builds)."""
    return C % WIDE_ROW == 0 and C >= 2 * WIDE_ROW and cpu_prefers_512_bit_vectors()


def _cache_dir() -> Path:
    return Path(os.environ.get("MLPLAB_KERNEL_CACHE") or Path.home() / ".cache" / "mlplab" / "kernels")


def _build(wide: bool = False) -> tuple[Path | None, str]:
    """Compile the kernels (once per source, signatures, flags, compiler and CPU); (path, "") or
    (None, why). A compiler failure is remembered beside the library's name (``.failed``)."""
    cc = _c_compiler()
    if cc is None:
        return None, "no C compiler (cc/gcc/clang, or $CC) found"
    header = prototypes()
    key = hashlib.sha256(header.encode())
    for name in _SOURCES:
        key.update((_KERNELS / name).read_bytes())
    flags = _flags(wide)
    key.update(" ".join([cc] + flags).encode())
    key.update(_cpu_signature().encode())
    cache = _cache_dir()
    lib = cache / f"residual_norm-{key.hexdigest()[:16]}.so"
    failed = lib.with_suffix(".failed")
    if lib.exists():
        return lib, ""
    if failed.exists():
        return None, f"{failed.read_text().strip()} (an earlier build; delete {failed} to build again)"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            (Path(tmp) / "residual_norm_api.h").write_text(header)
            out = Path(tmp) / lib.name
            proc = subprocess.run([cc, *flags, "-I", tmp, "-o", str(out), str(_KERNELS / "residual_norm.c"), "-lm"],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                errors = [ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.strip().splitlines()
                why = f"{Path(cc).name} failed: {(errors or [f'exit {proc.returncode}'])[0].strip()}"
                atomic_write_text(failed, why + "\n")
                return None, why
            os.replace(out, lib)  # atomic: another process sees the whole file or none
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"cannot build the kernels in {cache}: {e}"
    return lib, ""


@functools.lru_cache(maxsize=2)
def _library(wide: bool = False) -> tuple[Kernels | None, str]:
    path, why = _build(wide)
    if path is None:
        return None, why
    try:
        return Kernels(path), ""
    except (OSError, AttributeError) as e:
        return None, f"cannot load {path}: {e}"


def _kernels(C: int) -> Kernels:
    """The build for rows of C entries (:func:`_wide`; the default build where the wide one fails)."""
    return (_wide(C) and _library(True)[0]) or _library()[0]


@torch.compiler.assume_constant_result
def available() -> bool:
    """Whether the fused kernels are built and loaded on this machine (builds them on first call;
    a constant for ``torch.compile``)."""
    return _library()[0] is not None


def unavailable_reason() -> str:
    """Why :func:`available` is False ("" when it is True)."""
    return _library()[1]


def status() -> dict:
    """{"available": bool, "reason": why not (None when available), "library": the loaded
    shared library's path (None when unavailable)}; builds the kernels on first call."""
    lib, why = _library()
    return {"available": lib is not None, "reason": why or None, "library": None if lib is None else str(lib.path)}


def _variant(x: torch.Tensor, h_dtype: torch.dtype) -> str:
    try:
        return _VARIANTS[(x.dtype, h_dtype)]
    except KeyError:
        raise TypeError(f"fused residual_norm has no kernel for residual {x.dtype} with {h_dtype} activations; "
                        f"supported: {sorted((str(a), str(b)) for a, b in _VARIANTS)}") from None


def _acc(x: torch.Tensor) -> torch.dtype:
    """The kernels' accumulator (and mean/rstd) dtype for residual ``x``."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _sb(x: torch.Tensor, batch_major: bool) -> tuple[int, int]:
    """(S, B) of a 3-d residual: token-major (S, B, C) or batch-major (B, S, C)."""
    return (x.shape[1], x.shape[0]) if batch_major else (x.shape[0], x.shape[1])


def _bias_len(t_bias: torch.Tensor | None) -> int:
    """Entries of a folded bias (0 without one): C per column, S per token (the kernels' R / div:
    :func:`_bias_div` takes div = B for S = R / B entries), n2' per column of a gathered t."""
    return 0 if t_bias is None else t_bias.numel()


def _forward(x, t, gamma, beta, eps, act, h_dtype, t_map, h_map, batch_major, t_bias=None, bias_div=0):
    C = x.shape[-1]
    kernels = _kernels(C)
    R = x.numel() // C
    u = torch.empty_like(x) if t is not None else None
    h = _h_empty(x, h_dtype, h_map, batch_major)
    mean, rstd = torch.empty(R, dtype=_acc(x)), torch.empty(R, dtype=_acc(x))
    v, nt = _variant(x, h_dtype), torch.get_num_threads()
    common = dict(x=x, t=t, tb=t_bias, act=act, gamma=gamma, beta=beta, eps=eps, u_out=u, h=h, mean=mean, rstd=rstd,
                  nthreads=nt)
    if t_map is None and h_map is None:
        kernels("residual_norm_forward", v, R=R, C=C, div=bias_div, **common)
    else:  # a bias here is one per column of the grouped t (t_map given; residual_norm checks)
        S, B = _sb(x, batch_major)
        kernels("residual_norm_gathered_forward", v, S=S, B=B, C=C, batch_major=int(batch_major),
                period=_bias_len(t_bias), t_map=t_map, h_map=h_map, **common)
    return u, h, mean, rstd


def _h_empty(x, h_dtype, h_map, batch_major):
    """h: the residual's shape, or (B, m) gathered for the next PK layer."""
    if h_map is None:
        return torch.empty(x.shape, dtype=h_dtype, device=x.device)
    S, B = _sb(x, batch_major)
    return x.new_empty((B, S * x.shape[2]), dtype=h_dtype)


# ------------------------------------------------------------------ custom ops (forward)
def _residual_norm_impl(x: torch.Tensor, t: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float, act: int,
                        t_map: torch.Tensor | None, t_map_inv: torch.Tensor | None, h_map: torch.Tensor | None,
                        h_map_inv: torch.Tensor | None, batch_major: bool, t_bias: torch.Tensor | None, bias_div: int
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    u, h, mean, rstd = _forward(x, t, gamma, beta, eps, act, t.dtype, t_map, h_map, batch_major, t_bias, bias_div)
    return u, h, mean, rstd


_residual_norm = torch.library.custom_op("mlplab::residual_norm", mutates_args=())(_residual_norm_impl)


@_residual_norm.register_fake
def _(x, t, gamma, beta, eps, act, t_map, t_map_inv, h_map, h_map_inv, batch_major, t_bias, bias_div):
    R = x.numel() // x.shape[-1]
    return torch.empty_like(x), _h_empty(x, t.dtype, h_map, batch_major), x.new_empty(R, dtype=_acc(x)), \
        x.new_empty(R, dtype=_acc(x))


def _layer_norm_rows_impl(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float,
                          h_dtype: torch.dtype, h_map: torch.Tensor | None, h_map_inv: torch.Tensor | None,
                          batch_major: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _, h, mean, rstd = _forward(x, None, gamma, beta, eps, 0, h_dtype, None, h_map, batch_major)
    return h, mean, rstd


_layer_norm_rows = torch.library.custom_op("mlplab::layer_norm_rows", mutates_args=())(_layer_norm_rows_impl)


@_layer_norm_rows.register_fake
def _(x, gamma, beta, eps, h_dtype, h_map, h_map_inv, batch_major):
    R = x.numel() // x.shape[-1]
    return _h_empty(x, h_dtype, h_map, batch_major), x.new_empty(R, dtype=_acc(x)), x.new_empty(R, dtype=_acc(x))


# ------------------------------------------------------------------ custom op (backward)
def _backward(gh, gu, u, mean, rstd, gamma, t, act, t_map_inv, h_map_inv, batch_major, t_bias, bias_div):
    """Both seams' backward through the kernels: (gx, gt, dgamma, dbeta, dbias); gt is empty
    without t, dbias without a bias."""
    C = u.shape[-1]
    kernels = _kernels(C)
    R = u.numel() // C
    nt = torch.get_num_threads()
    gh = gh.contiguous()
    gu = gu.contiguous() if gu is not None else None
    gx = torch.empty_like(u)
    gt = torch.empty_like(t) if t is not None else u.new_empty(0, dtype=gh.dtype)
    dgamma, dbeta = torch.empty(nt, C, dtype=_acc(u)), torch.empty(nt, C, dtype=_acc(u))
    dbias = torch.empty(nt, _bias_len(t_bias), dtype=_acc(u)) if t_bias is not None else None
    v = _variant(u, gh.dtype)
    common = dict(gh=gh, gu=gu, u=u, mean=mean, rstd=rstd, gamma=gamma, t=t, tb=t_bias, act=act, gx=gx,
                  gt=gt if t is not None else None, dgamma=dgamma, dbeta=dbeta, dtb=dbias, nthreads=nt)
    if t_map_inv is None and h_map_inv is None:
        kernels("residual_norm_backward", v, R=R, C=C, div=bias_div, **common)
    else:
        S, B = _sb(u, batch_major)
        kernels("residual_norm_gathered_backward", v, S=S, B=B, C=C, batch_major=int(batch_major),
                period=_bias_len(t_bias), h_map_inv=h_map_inv, t_map_inv=t_map_inv, **common)
    dbias = dbias.sum(0).to(t_bias.dtype) if t_bias is not None else gamma.new_empty(0)
    return gx, gt, dgamma.sum(0).to(gamma.dtype), dbeta.sum(0).to(gamma.dtype), dbias


@torch.library.custom_op("mlplab::residual_norm_backward", mutates_args=())
def _residual_norm_backward(gh: torch.Tensor, gu: torch.Tensor | None, u: torch.Tensor, mean: torch.Tensor,
                            rstd: torch.Tensor, gamma: torch.Tensor, t: torch.Tensor | None, act: int,
                            t_map_inv: torch.Tensor | None, h_map_inv: torch.Tensor | None, batch_major: bool,
                            t_bias: torch.Tensor | None, bias_div: int
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(gh, gu, u, mean, rstd, gamma, t, act, t_map_inv, h_map_inv, batch_major, t_bias, bias_div)


@_residual_norm_backward.register_fake
def _(gh, gu, u, mean, rstd, gamma, t, act, t_map_inv, h_map_inv, batch_major, t_bias, bias_div):
    C = u.shape[-1]
    gt = torch.empty_like(t) if t is not None else u.new_empty(0, dtype=gh.dtype)
    dbias = torch.empty_like(t_bias) if t_bias is not None else gamma.new_empty(0)
    return torch.empty_like(u), gt, gamma.new_empty(C), gamma.new_empty(C), dbias


def _residual_norm_setup(ctx, inputs, output):
    x, t, gamma, beta, eps, act, t_map, t_map_inv, h_map, h_map_inv, batch_major, t_bias, bias_div = inputs
    u, h, mean, rstd = output
    ctx.save_for_backward(u, mean, rstd, gamma, t, t_map_inv, h_map_inv, t_bias)
    ctx.act, ctx.batch_major, ctx.bias_div = act, batch_major, bias_div
    ctx.h_dtype = h.dtype
    ctx.eager = False


def _backward_of(ctx):
    """The kernels' backward as the custom op where AOTAutograd traces it (it must see an op, not a
    ctypes call), directly in eager mode (:func:`_eager_function`)."""
    return _backward if ctx.eager else _residual_norm_backward


def _residual_norm_grad(ctx, gu, gh, _gmean, _grstd):
    u, mean, rstd, gamma, t, t_map_inv, h_map_inv, t_bias = ctx.saved_tensors
    if gh is None:  # h unused: u passes its gradient to x, and through act' to t
        gh = _h_empty(u, ctx.h_dtype, h_map_inv, ctx.batch_major).zero_()
    gx, gt, dgamma, dbeta, dbias = _backward_of(ctx)(gh, gu, u, mean, rstd, gamma, t, ctx.act, t_map_inv,
                                                     h_map_inv, ctx.batch_major, t_bias, ctx.bias_div)
    return gx, gt, dgamma, dbeta, None, None, None, None, None, None, None, dbias if t_bias is not None else None, None


def _layer_norm_rows_setup(ctx, inputs, output):
    x, gamma, beta, eps, h_dtype, h_map, h_map_inv, batch_major = inputs
    h, mean, rstd = output
    ctx.save_for_backward(x, mean, rstd, gamma, h_map_inv)
    ctx.batch_major = batch_major
    ctx.eager = False


def _layer_norm_rows_grad(ctx, gh, _gmean, _grstd):
    x, mean, rstd, gamma, h_map_inv = ctx.saved_tensors
    gx, _, dgamma, dbeta, _ = _backward_of(ctx)(gh, None, x, mean, rstd, gamma, None, 0, None, h_map_inv,
                                                ctx.batch_major, None, 0)
    return gx, dgamma, dbeta, None, None, None, None, None


_residual_norm.register_autograd(_residual_norm_grad, setup_context=_residual_norm_setup)
_layer_norm_rows.register_autograd(_layer_norm_rows_grad, setup_context=_layer_norm_rows_setup)


# ------------------------------------------------------------------ the same, for eager mode
def _eager_function(name: str, impl, setup, grad) -> type[torch.autograd.Function]:
    """A custom op's implementation, setup and gradient as a ``torch.autograd.Function``, which eager
    callers use: the custom op's dispatch costs ~0.1 ms per call forward and ~0.2 ms backward on
    top of the kernels (a seam is ~1 ms at S = C = 64, batch 256), the Function's a few µs.
    Compiled graphs call the custom ops, which inductor sees as opaque kernels.

    Under ``torch.func.vmap`` (several seeds' Mixers stacked: :mod:`mlplab.train.lockstep`) the
    kernels take the stack: each model's slice is one call of the Function, on its own weights,
    and the slices' outputs are stacked (unbind / stack: one copy of the outputs each way)."""
    def forward(*inputs):
        return impl(*inputs)

    def setup_context(ctx, inputs, output):
        setup(ctx, inputs, output)
        ctx.eager = True
        ctx.mark_non_differentiable(*output[-2:])  # mean, rstd
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


_ResidualNorm = _eager_function("_ResidualNorm", _residual_norm_impl, _residual_norm_setup, _residual_norm_grad)
_LayerNormRows = _eager_function("_LayerNormRows", _layer_norm_rows_impl, _layer_norm_rows_setup,
                                 _layer_norm_rows_grad)


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


def _bias_div(x: torch.Tensor, bias: torch.Tensor | None, per: str, t_map: bool, h_map: bool,
              batch_major: bool) -> int:
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
    div = _bias_div(x, t_bias, t_bias_per, t_map is not None, h_map is not None, batch_major)
    op = _residual_norm if torch.compiler.is_compiling() else _ResidualNorm.apply
    u, h, _, _ = op(x.contiguous(), t.contiguous(), norm.weight, norm.bias, norm.eps, ACTS[act],
                    t_map, t_inv, h_map, h_inv, batch_major, t_bias, div)
    return u, h


def layer_norm_rows(x: torch.Tensor, norm: torch.nn.LayerNorm, h_dtype: torch.dtype | None = None,
                    h_maps: Maps | None = None, batch_major: bool = False) -> torch.Tensor:
    """``norm(x)`` over the last dimension by the same kernel, written as ``h_dtype`` (default x's),
    and gathered by ``h_maps`` as in :func:`residual_norm`."""
    _check(x, norm)
    h_map, h_inv = _maps(h_maps, x)
    op = _layer_norm_rows if torch.compiler.is_compiling() else _LayerNormRows.apply
    h, _, _ = op(x.contiguous(), norm.weight, norm.bias, norm.eps, h_dtype or x.dtype, h_map, h_inv, batch_major)
    return h
