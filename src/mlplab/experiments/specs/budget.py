"""What the experiments at a fixed connection budget Ω share (fig4, fig5, fig6, figS1, figS2-S3,
table1): the ``budget_models`` derived key that turns "this family at this Ω" into the planner's
runs, the run labels and the rules their verdicts state.

Every sweep labels its runs with ``meta.*`` keys (Ω, family, S, C, m, p); the models come from
the budget planner (:func:`mlplab.theory.budget.plan_budget`) through ``budget_models``, so a
sweep is data: "these families × these budgets × seeds, all pairs the planner gives".
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from ...errors import BadInput
from ..aggregate import RunRecord
from ..claims import Need
from ..derived import Derive, derive, derived_key
from ..verdicts import Verdict, optimum_within, trend
from .common import fair_width, mixer, pairs_for, per_seed, seed_table, sw_mlp, sw_widths

__all__ = ["budget_models", "budget", "NEAR_RULE", "TREND_RULE", "BY", "NAME_KEYS", "point", "row_point",
           "width_claim", "near_claim", "dataset_title", "IMAGENET", "refuse_imagenet", "NEAR", "SPANS_WINDOW"]

TREND_RULE = ("per seed, the least-squares slope of test error against log2(width); a t-test of the per-seed "
              "slopes < 0 (``verdicts.trend``)")
NEAR = 2.0  # "near S = C": S/C within a factor 2
NEAR_RULE = (f"per seed, a parabola of test error in log(S/C) and its slopes at S/C = 1/{NEAR:g} and {NEAR:g}: the "
             "minimum lies between them when the slope at the lower bound is < 0 and at the upper > 0, both by "
             "t-tests over seeds (``verdicts.optimum_within``)")

BY = {"omega": lambda r: r.get("meta.omega"), "family": lambda r: r.get("meta.family"),
      "S": lambda r: r.get("meta.S"), "C": lambda r: r.get("meta.C"), "m": lambda r: r.get("meta.m"),
      "p": lambda r: r.get("meta.p")}
NAME_KEYS = ["meta.omega", "meta.family", "meta.S", "meta.C", "meta.m", "meta.p", "run.seed"]


def point(r: RunRecord) -> tuple:
    """A run's point of the budget sweep: (Ω, family, S, C, m)."""
    return (r.get("meta.omega"), r.get("meta.family"), r.get("meta.S"), r.get("meta.C"), r.get("meta.m"))


def row_point(row: dict[str, Any]) -> tuple:
    """The same point of a row of the error table."""
    return (row["omega"], row["family"], row.get("S"), row.get("C"), row["m"])


def width_claim(runs: list[RunRecord], rows: list[dict[str, Any]]) -> Any:
    """"Error falls as the effective width grows" over ``rows`` (one family, one Ω)."""
    tab = seed_table(runs, point)
    return trend([r["m"] for r in rows], per_seed(tab, [row_point(r) for r in rows]), sign=-1,
                 what="Δ test error", unit="points")


def near_claim(runs: list[RunRecord], rows: list[dict[str, Any]]) -> tuple[Any, dict[str, float]]:
    """"Error is lowest near S = C" over ``rows`` (one Ω): the minimum of a per-seed parabola in
    log(S/C) between S/C = 1/NEAR and NEAR; and ``spans_window`` (1 when the sweep reaches past
    both bounds, the claim's regime: a window at the sweep's edge says nothing about an optimum)."""
    x = [math.log(r["S"] / r["C"]) for r in rows]
    lo, hi = -math.log(NEAR), math.log(NEAR)
    spans = float(bool(x) and min(x) < lo and max(x) > hi)
    if not spans:
        return (Verdict(held=None, detail=f"the sweep's S/C does not reach past 1/{NEAR:g} and {NEAR:g}"),
                {"spans_window": 0.0})
    tab = seed_table(runs, point)
    v = optimum_within(x, per_seed(tab, [row_point(r) for r in rows]), lo, hi, what="test error", unit="points",
                       x_name="log(S/C)")
    return v, {"spans_window": spans}


SPANS_WINDOW = Need("spans_window", ">=", 1, f"the sweep's S/C reaches past 1/{NEAR:g} and {NEAR:g}: an optimum "
                    "between two bounds needs points beyond both")


def dataset_title(manifest: dict[str, Any]) -> str:
    return manifest.get("scale", {}).get("dataset", "?")


@derived_key("budget_models")
def budget_models(o: dict[str, Any], *, depth: int, patch: int, channels: dict[int, Sequence[int] | None],
                  densities: dict[int, Sequence[float]], gamma: float = 1.0, block: str = "s",
                  tokens: dict[int, Sequence[int]] | None = None, s0: int = 64,
                  symmetric: bool = True) -> list[dict[str, Any]]:
    """Derived fan-out: (meta.omega, meta.family) → one run per planned (S, C) pair or SW-MLP width.

    ``channels`` (per Ω) picks the planner's pairs by C, ``tokens`` (per Ω) by S instead; with
    ``symmetric`` each pair (S, C) comes with its swap (C, S) (same width m). SW-MLPs take the
    widths of ``densities`` (per Ω), or with ``tokens`` the Mixer pairs' widths; each width is
    rounded to a multiple of the S0 patches (:func:`fair_width`) and the density follows from Ω
    (p = Ω/(γm²)), so every SW-MLP has the Mixer's per-patch stem and the same Ω."""
    om, fam = int(o["meta.omega"]), o["meta.family"]
    if fam == "sw_mlp":
        out = []
        if tokens is not None:  # same widths as the Mixer pairs (fig4)
            for C, S in pairs_for(om, gamma, tokens=tokens[om], symmetric=False):
                m = fair_width(S * C, s0)
                p = min(1.0, om / (gamma * m * m))
                out.append({**sw_mlp(m, p, 2 * depth, patch, gamma), "meta.m": m, "meta.p": p,
                            "meta.S": S, "meta.C": C})
            return out
        for m, _ in sw_widths(om, densities.get(om, ()), gamma):
            m = fair_width(m, s0)
            p = min(1.0, om / (gamma * m * m))
            out.append({**sw_mlp(m, p, 2 * depth, patch, gamma), "meta.m": m, "meta.p": p})
        return out
    rp = fam.startswith("rp_")
    if tokens is None and om not in channels:  # this family is not planned at this Ω
        return []
    if tokens is not None:
        pairs = pairs_for(om, gamma, tokens=tokens[om], symmetric=False)
    else:
        pairs = pairs_for(om, gamma, channels=channels[om], symmetric=symmetric)
    return [{**mixer(S, C, depth, patch, block=block, gamma=gamma if block == "mlp" else None, rp=rp),
             "meta.S": S, "meta.C": C, "meta.m": S * C, "meta.p": om / (gamma * (S * C) ** 2)}
            for C, S in pairs]


def budget(**params: Any) -> Derive:
    """``derive("budget_models", **params)`` with the defaults filled in, so the record shows them."""
    return derive("budget_models", **{"channels": {}, "densities": {}, **params})


IMAGENET = ("imagefolder", "imagenet")  # dataset names of ImageNet


def refuse_imagenet(sc: Any, id: str) -> None:
    """ImageNet versions are their own ids (``<id>-imagenet``): a CIFAR-style spec asked for
    ImageNet says so instead of planning the wrong models."""
    if sc.dataset in IMAGENET:
        raise BadInput(f"{id} on ImageNet is its own experiment: run `mlplab reproduce {id}-imagenet --scale paper`")
