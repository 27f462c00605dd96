"""``mlplab models``: every registered model with its family, default parameter count, forward
FLOPs per example and description.

    mlplab models
    mlplab models --family mlp_mixer
    mlplab models --json

FLOPs are analytic (``mlplab.models.counting.count_flops``: matmul FLOPs, multiply-add = 2) and
models are built without initialisation, so the whole table takes seconds.
"""
from __future__ import annotations

import argparse
import json

from ..analysis.cost import models_table
from ..models.registry import list_models
from ..utils.units import format_count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", default=None, help="only models of this family (e.g. mlp_mixer, sw_mlp, mlp, shallow)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def run(args: argparse.Namespace) -> int:
    if args.family is not None and not list_models(family=args.family):
        families = sorted({r["family"] for r in models_table()})
        raise ValueError(f"unknown family {args.family!r}; choose one of {', '.join(families)}")
    rows = models_table(args.family)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("model", "family", "params", "FLOPs/ex", "width", "description")
    table = [(r["name"], r["family"], format_count(r["params"]), format_count(r["flops"]),
              str(r["effective_width"] or "-"), r["description"]) for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header[:-1])]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(widths)) + "  {}"
    print(fmt.format(*header))
    for t in table:
        print(fmt.format(*t))
    return 0
