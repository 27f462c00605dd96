"""``mlplab demo``: plan a budget, build Mixers at its pairs, check that each equals its
effective wide MLP (Prop. 3.2) and print a table. Runs in seconds on a CPU.

    mlplab demo                                  # Ω = 2^18, C ∈ {16, 64}, 2 blocks
    mlplab demo --omega 2^15 --channels 8,32 --depth 1
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from ..models.registry import create_model, get_model_entry, list_models
from ..theory.budget import plan_budget
from ..theory.effective import effective_mlp
from .plan import _int_list, _omega

MIXERS = ("s_mixer", "rp_s_mixer")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--omega", type=_omega, default=2**18, help="connections per layer Ω (default 2^18)")
    parser.add_argument("--channels", type=_int_list, default=[16, 64], metavar="C,C,...",
                        help="channel counts of the pairs to build (default 16,64)")
    parser.add_argument("--depth", type=int, default=2, help="blocks per model (default 2)")
    parser.add_argument("--no-sw-mlp", action="store_true", help="skip the SW-MLP rows (they take longest to build)")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--patch-size", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4, help="random images per check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summary", action="store_true", help="also print the layers of the first effective MLP")


def _params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _fields(name: str) -> set[str]:
    return {f.name for f in dataclasses.fields(get_model_entry(name).config_cls)}


def _sw_mlp_row(row, args, x: torch.Tensor) -> list[str]:
    """An SW-MLP with the Mixer's width m = S·C and the density that spends the same Ω."""
    m, p = row.width, row.density
    if p > 1:
        return ["sw_mlp", "-", "-", str(m), "-", "-", "-", f"skipped: p = {p:.3g} > 1"]
    want = {"width": m, "density": float(p), "depth": args.depth, "image_size": args.image_size,
            "patch_size": args.patch_size, "seed": args.seed, "num_classes": 10, "in_chans": 3,
            "storage": "sparse"}  # memory ∝ nnz, not m²
    fields = _fields("sw_mlp")
    t0 = time.perf_counter()
    try:
        model = create_model("sw_mlp", **{k: v for k, v in want.items() if k in fields}).double().eval()
        with torch.no_grad():
            model(x)
    except (ValueError, TypeError, RuntimeError) as e:
        return ["sw_mlp", "-", "-", str(m), "-", "-", "-", f"skipped: {e}"[:60]]
    dt = time.perf_counter() - t0
    return ["sw_mlp", "-", "-", str(m), f"{_params(model):,}", f"p={p:.3g}", "(is an MLP)", f"{dt:.2f}"]


def run(args: argparse.Namespace) -> int:
    if args.depth < 1 or args.batch < 1:
        raise ValueError("--depth and --batch must be >= 1")
    t_start, cpu_start = time.perf_counter(), time.process_time()
    plan = plan_budget(args.omega, channels=args.channels)
    print(plan.format_table())
    print()
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=gen, dtype=torch.float64)
    have_sw = "sw_mlp" in list_models() and not args.no_sw_mlp
    head = ["model", "S", "C", "m=S*C", "params", "eff. nnz | p", "max|diff|", "time_s"]
    rows: list[list[str]] = []
    worst = 0.0
    for prow in plan.rows:
        S, C = prow.tokens, prow.channels
        for name in MIXERS:
            t0 = time.perf_counter()
            torch.manual_seed(args.seed)
            model = create_model(
                name, num_tokens=S, hidden_dim=C, depth=args.depth, image_size=args.image_size,
                patch_size=args.patch_size, seed=args.seed, zero_head=False,  # a random head, so a wrong
            ).double().eval()                                                # effective MLP shows up
            eff = effective_mlp(model)
            with torch.no_grad():
                diff = (model(x) - eff(x)).abs().max().item()
            dt = time.perf_counter() - t0
            worst = max(worst, diff)
            rows.append([name, str(S), str(C), str(S * C), f"{_params(model):,}", f"{eff.nnz:,}",
                         f"{diff:.1e}", f"{dt:.2f}"])
            if args.summary and len(rows) == 1:
                print(eff.summary())
                print()
        if have_sw:
            rows.append(_sw_mlp_row(prow, args, x))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    print(f"Mixer vs its effective wide MLP (Prop. 3.2), {args.depth} block(s), {args.batch} random "
          f"{args.image_size}x{args.image_size} images, float64")
    print(fmt(head))
    print(fmt(["-" * w for w in widths]))
    for r in rows:
        print(fmt(r))
    if "sw_mlp" not in list_models():
        print("(sw_mlp is not registered: no SW-MLP rows)")
    ok = worst <= 1e-10
    print(f"largest |model(x) - effective(x)| = {worst:.1e} -> {'equal' if ok else 'MISMATCH'} "
          f"(tolerance 1e-10); total {time.perf_counter() - t_start:.1f} s "
          f"({time.process_time() - cpu_start:.1f} s CPU)")
    return 0 if ok else 1
