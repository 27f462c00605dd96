"""The fused seams' kernels as a library: signature table, header, compiler, cache, loader.

Build. The C source (``layers/kernels/residual_norm.c``) is compiled on first use with the
system's C compiler ($CC, else cc/gcc/clang; ``-O3 -march=native -fopenmp``; on CPUs that prefer
512-bit vectors a second build with them serves long rows, :func:`wide_rows`) into
``~/.cache/mlplab/kernels`` (``$MLPLAB_KERNEL_CACHE``), one file per source, signature table,
flags, compiler and CPU, written to a temporary name and renamed. A failed build is remembered
there for that key (a ``.failed`` file with the compiler's message; delete it to try again), so
other processes do not retry it. :func:`status` says whether the kernels are loaded and, if not,
why; callers then take their unfused path. Threads: ``torch.get_num_threads()``, on the OpenMP
runtime torch loaded (the kernels' ``libgomp.so.1`` resolves to torch's copy, already in the
process).

Signatures. :data:`SIGNATURES` is the one statement of each exported C function's arguments:
the build writes the C prototypes from it (``residual_norm_api.h``, which the source includes,
so a definition that disagrees with it does not compile), and every call goes through
:class:`Kernels`, which passes the arguments by name in the table's order and checks each
tensor's dtype and layout against it. A kernel returns 1 when it cannot allocate its buffers,
raised here as ``MemoryError``.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from ...utils.cpu import cpu_info, cpu_prefers_512_bit_vectors
from ...utils.io import atomic_write_text

__all__ = ["SIGNATURES", "Kernels", "prototypes", "available", "unavailable_reason", "status", "kernels_for",
           "variant", "WIDE_ROW"]

_KERNELS = Path(__file__).parents[1] / "kernels"
_SOURCES = ("residual_norm.c", "residual_norm.inc")
_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros",
          "-fopenmp", "-fPIC", "-shared"]
#: Each exported kernel's arguments, in C. XT, TT and ACC are a variant's residual, activation
#: (t, h and their gradients) and accumulator types (``_VARIANTS``); every kernel returns an int
#: status (0, or 1: out of memory). Changing a kernel's arguments: edit its line here and its
#: definition in ``kernels/residual_norm.inc``, then the calls in :mod:`.ops` (``_forward`` / ``_backward``).
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


def wide_rows(C: int) -> bool:
    """Whether rows of C entries take the kernels built with 512-bit vectors: on CPUs that prefer
    them (:func:`~mlplab.utils.cpu.cpu_prefers_512_bit_vectors`) when a row is at least two
    whole vectors. Rows of 32-128 such entries run faster with them; short rows and rows with a
    masked remainder (C = 8, 124) slower (``benchmarks/bench_kernel_ab.py`` compares builds)."""
    return C % WIDE_ROW == 0 and C >= 2 * WIDE_ROW and cpu_prefers_512_bit_vectors()


def cache_dir() -> Path:
    """Where the built kernels are kept (``$MLPLAB_KERNEL_CACHE``, else ``~/.cache/mlplab/kernels``)."""
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
    cache = cache_dir()
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


def kernels_for(C: int) -> Kernels:
    """The build for rows of C entries (:func:`wide_rows`; the default build where the wide one fails)."""
    return (wide_rows(C) and _library(True)[0]) or _library()[0]


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


def variant(x: torch.Tensor, h_dtype: torch.dtype) -> str:
    """The kernels' variant for residual ``x`` and activations of ``h_dtype`` (f64, f32, bf16)."""
    try:
        return _VARIANTS[(x.dtype, h_dtype)]
    except KeyError:
        raise TypeError(f"fused residual_norm has no kernel for residual {x.dtype} with {h_dtype} activations; "
                        f"supported: {sorted((str(a), str(b)) for a, b in _VARIANTS)}") from None
