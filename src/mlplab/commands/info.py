"""``mlplab info``: this machine's setup, for a bug report or before a long run.

    mlplab info                    # torch, CPU and bf16, threads, torch.compile, kernels, GPUs, data
    mlplab info --json             # the same as JSON
    mlplab info --no-compile-check # skip the compile test (it takes 10-60 s)
"""
from __future__ import annotations

import argparse
import json
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--no-compile-check", action="store_true",
                        help="do not test torch.compile (a tiny compile in a subprocess, 10-60 s)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds the compile test may take (default 180)")


def format_info(info: dict[str, Any]) -> str:
    """The text form of :func:`mlplab.train.machine.machine_info`."""
    cpu, comp, fk = info["cpu"], info["compile"], info["fused_kernels"]
    bf16 = ("native (" + ", ".join(cpu["bf16"]) + ")") if cpu["native_bf16"] else \
        "emulated (no avx512_bf16/amx: bf16 matmuls are slower than fp32; runs use fp32)"
    if comp is None:
        compile_line = "not tested (--no-compile-check)"
    elif comp["works"]:
        compile_line = f"works (a tiny compile took {comp['seconds']:.1f} s)"
    else:
        compile_line = f"does not work: {comp['reason']} (after {comp['seconds']:.1f} s)"
    kernels = f"on ({fk['library']})" if fk["available"] else f"off: {fk['reason']} (Mixers take the module path)"
    gpus = "; ".join(f"{d['index']}: {d['name']}, capability {d['capability']}, {d['memory_gib']} GiB"
                     for d in info["cuda"]) or "none"
    rows = [
        ("mlplab", f"{info['mlplab']} (Python {info['python']}, {info['platform']})"),
        ("torch", info["torch"]),
        ("CPU", f"{cpu['model']} ({cpu['machine']}), {cpu['cores']} cores available"),
        ("bf16", bf16),
        ("threads", f"{info['threads']} (torch.get_num_threads; run.threads sets it per run)"),
        ("torch.compile", compile_line),
        ("C++ compiler", info["cpp_compiler"] or "none (torch.compile on CPU needs one; runs stay eager)"),
        ("fused kernels", kernels),
        ("CUDA", gpus),
        ("data cache", info["folders"]["data_cache"] + " ($MLPLAB_DATA)"),
        ("kernel cache", info["folders"]["kernel_cache"] + " ($MLPLAB_KERNEL_CACHE)"),
        ("Hub cache", info["folders"]["hub_cache"] + " ($HF_HUB_CACHE)"),
        ("  weights", ", ".join(info["cached_weights"]) or
         "none of the published Mixers yet (create_model(NAME, pretrained=True) downloads them)"),
        ("datasets", ""),
    ]
    rows += [(f"  {name}", where or "not here (data.download=true fetches it)")
             for name, where in info["datasets"].items()]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:{width}}  {v}".rstrip() for k, v in rows)


def run(args: argparse.Namespace) -> int:
    from ..train.machine import machine_info

    if args.timeout <= 0:
        raise ValueError(f"--timeout must be positive seconds, got {args.timeout}")
    info = machine_info(compile_check=not args.no_compile_check, timeout=args.timeout)
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0
