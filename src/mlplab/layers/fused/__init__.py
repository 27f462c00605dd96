"""The seam between two pre-LN residual sublayers, fused into one pass each way (CPU, in C).

A Mixer block's sublayer ends with the skip connection and the next one starts with a
LayerNorm (docs/science.md §2): between two GEMMs the activations go through

    u = x + act(t),    h = LN(u) = (u - mean u) * rstd * gamma + beta

(act = φ for an S-Mixer sublayer, the identity after an MLP's second layer). Separately these
are five passes over the activations forward and seven backward, and at S = C = 64 they take
more time than the GEMMs. :func:`residual_norm` does each direction in one pass over rows of C
(``layers/kernels/residual_norm.c``), and :func:`layer_norm_rows` is the same without a skip (the
first LN). Both are one ``torch.library`` custom op with its backward registered, so autograd and
``torch.compile`` (which calls it as an opaque kernel) work with it.

Two jobs, two modules: :mod:`.build` (the signature table, the generated header, the compiler,
the cache and the ctypes loader; :func:`status` says whether the kernels are loaded and, if not,
why) and :mod:`.ops` (the custom ops, their autograd and the functions callers use).

Dtypes: float64 (exact libm erf/exp: the tests compare it with the unfused modules to 1e-12),
float32, and, under CPU autocast, bfloat16 t and h with the residual kept in float32. The float32
GELU uses a rational erf (absolute error ≤ 4.5e-7 against libm) so that it vectorises; its
gradient an exp polynomial (relative error < 2e-7).
"""
from .build import SIGNATURES, Kernels, available, prototypes, status, unavailable_reason
from .ops import ACTS, layer_norm_rows, residual_norm

__all__ = ["available", "unavailable_reason", "status", "residual_norm", "layer_norm_rows", "ACTS", "SIGNATURES",
           "Kernels", "prototypes"]
