"""What a CUDA device can do, decided from its compute capability: native bf16, torch.compile,
and the float32 matmul policy. One table, read by ``resolve_precision`` and ``resolve_compile``.

* **bf16**: ``torch.cuda.is_bf16_supported()`` is true on V100 (7.0) and T4 (7.5), where bf16 is
  emulated and slower than fp32; tensor cores compute bf16 from Ampere (8.0) on. ``precision=auto``
  therefore picks bf16 only from 8.0.
* **compile**: inductor generates Triton kernels, which need compute capability 7.0 and the
  ``triton`` package; below that, or without it, ``compile=auto`` trains eagerly and says why.
* **TF32**: ``precision=fp32`` means IEEE float32 everywhere (PyTorch's matmul default; cuDNN's
  convolution default, TF32, is switched off too), so fp32 runs are comparable across GPUs; the
  fast path on Ampere and later is ``precision=bf16``/``auto``.
"""
from __future__ import annotations

import importlib.util
import re

import torch

__all__ = ["BF16_MIN_CAPABILITY", "COMPILE_MIN_CAPABILITY", "cuda_capability", "native_bf16_cuda",
           "compile_unavailable_reason", "set_fp32_matmul_policy", "DATASHEET_BF16_TFLOPS", "datasheet_bf16_tflops"]

#: First compute capability with bf16 tensor cores (Ampere: A100 8.0, A10/RTX 30 8.6, H100 9.0).
BF16_MIN_CAPABILITY = (8, 0)
#: Triton's (and so inductor's) minimum compute capability.
COMPILE_MIN_CAPABILITY = (7, 0)


def cuda_capability(device: torch.device | int | None = None) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def native_bf16_cuda(device: torch.device | int | None = None) -> bool:
    """Whether the GPU computes bf16 natively (not only emulates it)."""
    return cuda_capability(device) >= BF16_MIN_CAPABILITY and torch.cuda.is_bf16_supported()


def compile_unavailable_reason(device: torch.device | int | None = None) -> str | None:
    """None when ``torch.compile`` can generate kernels for this GPU, else why not (one phrase)."""
    cap = cuda_capability(device)
    if cap < COMPILE_MIN_CAPABILITY:
        return (f"compute capability {cap[0]}.{cap[1]} is below Triton's minimum "
                f"{COMPILE_MIN_CAPABILITY[0]}.{COMPILE_MIN_CAPABILITY[1]}")
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    return None


def set_fp32_matmul_policy() -> None:
    """IEEE float32 for fp32 matmuls and convolutions on CUDA (see the module docstring)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


#: Dense bf16 tensor-core TFLOP/s from NVIDIA's datasheets (half the "with sparsity" figure), by
#: the words of ``torch.cuda.get_device_name``; the first row whose words all appear wins, so a
#: variant comes before its family. MFU against a datasheet peak is a ceiling no GEMM reaches
#: (the measured GEMM rate is the fair denominator); a GPU not listed gets only the measured one.
DATASHEET_BF16_TFLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("gh200",), 989.5),
    (("h200", "nvl"), 835.5),
    (("h200",), 989.5),  # SXM
    (("h100", "pcie"), 756.5),
    (("h100", "nvl"), 835.5),
    (("h100",), 989.5),  # SXM5 ("NVIDIA H100 80GB HBM3")
    (("h800", "pcie"), 756.5),
    (("h800",), 989.5),
    (("a100",), 312.0),  # SXM4 and PCIe, 40 and 80 GB
    (("a800",), 312.0),
    (("l40s",), 362.05),
    (("l40",), 181.05),
    (("l4",), 121.0),
    (("a40",), 149.7),
    (("a30",), 165.0),
    (("a10",), 125.0),
    (("rtx", "6000", "ada"), 364.2),
    (("rtx", "4090"), 165.2),
)


def datasheet_bf16_tflops(name: str) -> float | None:
    """The dense bf16 datasheet peak of the GPU called ``name`` (:data:`DATASHEET_BF16_TFLOPS`),
    or None for a GPU not in the table."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    for need, tflops in DATASHEET_BF16_TFLOPS:
        if set(need) <= words:
            return tflops
    return None
