"""``mlplab models``: every registered model with its family, default parameter count, forward
FLOPs per example and description.

    mlplab models
    mlplab models --family mlp_mixer
    mlplab models --json
    mlplab models --pretrained      # published weights (ARCH.TAG) and their Hub repositories

FLOPs are analytic (``mlplab.models.counting.count_flops``: matmul FLOPs, multiply-add = 2) and
models are built without initialisation, so the whole table takes seconds.
"""
from __future__ import annotations

import argparse
import json

from ..analysis.cost import models_table
from ..models.registry import get_pretrained, list_models
from ..utils.units import format_count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--family", default=None,
                        help="only models of this family (e.g. mlp_mixer, sw_mlp, mlp, shallow)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.add_argument("--pretrained", action="store_true",
                        help="list the published weights (create_model(NAME, pretrained=True)) instead")
    parser.add_argument("pattern", nargs="?", default="", help="only names matching this shell pattern, e.g. 'mixer*'")


def run(args: argparse.Namespace) -> int:
    if args.family is not None and not list_models(family=args.family):
        families = sorted({r["family"] for r in models_table()})
        raise ValueError(f"unknown family {args.family!r}; choose one of {', '.join(families)}")
    if args.pretrained:
        rows = [{"name": n, **get_pretrained(n)}
                for n in list_models(args.pattern, family=args.family, pretrained=True)]
        if args.json:
            print(json.dumps(rows, indent=2))
        for r in [] if args.json else rows:
            print(f"{r['name']:36s} hf-hub:{r['hf_hub_id']:44s} {r['num_classes']:6d} classes, mean {r['mean']}, "
                  f"std {r['std']}, {r['interpolation']}, crop {r['crop_pct']}")
        return 0
    names = set(list_models(args.pattern, family=args.family))
    rows = [r for r in models_table(args.family) if r["name"] in names]
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
