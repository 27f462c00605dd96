"""``mlplab plan``: (S, C) pairs and SW-MLP widths for a connection budget Ω (docs/science.md §3).

    mlplab plan --omega 2^18 --channels 16,32,48 --symmetric
    mlplab plan --omega 2^19 --gamma 2 --family mlp_mixer --tokens 4,8,16,32,64
    mlplab plan --omega 2^18 --family sw_mlp --density 0.9,0.7,0.5,0.3,0.1 --json
"""
from __future__ import annotations

import argparse

from ..theory.budget import FAMILIES, parse_omega, plan_budget


def _int_list(text: str) -> list[int]:
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers, e.g. 16,32,48; got {text!r}") from None


def _float_list(text: str) -> list[float]:
    try:
        return [float(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, e.g. 0.9,0.5; got {text!r}") from None


def _omega(text: str) -> int:
    try:
        return parse_omega(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--omega", type=_omega, required=True,
                        help="connections per layer Ω, e.g. 2^18 or 262144")
    parser.add_argument("--gamma", type=float, default=1.0, help="expansion factor γ (S-Mixer: 1)")
    parser.add_argument("--family", choices=FAMILIES, default="s_mixer",
                        help="s_mixer (γ=1), mlp_mixer, or sw_mlp (widths from densities)")
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--channels", type=_int_list, metavar="C,C,...",
                       help="channel counts C; S is solved from Ω and rounded")
    sizes.add_argument("--tokens", type=_int_list, metavar="S,S,...",
                       help="token counts S; C is solved from Ω and rounded")
    parser.add_argument("--symmetric", action="store_true", help="also list every pair with S and C swapped")
    parser.add_argument("--density", type=_float_list, metavar="p,p,...",
                        help="SW-MLP densities p in (0, 1] (sparsity 1-p); with a Mixer family, added for comparison")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args: argparse.Namespace) -> int:
    plan = plan_budget(
        args.omega, gamma=args.gamma, family=args.family, channels=args.channels, tokens=args.tokens,
        symmetric=args.symmetric, densities=args.density,
    )
    print(plan.to_json() if args.json else plan.format_table())
    return 0
