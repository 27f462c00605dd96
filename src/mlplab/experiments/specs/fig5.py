"""fig5: at a fixed budget Ω, test error against the effective width m for S-Mixers, RP S-Mixers
and SW-MLPs (Hayase & Karakida 2024, Fig. 5)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..aggregate import RunRecord, select
from ..claims import Analysis, ClaimSpec
from ..measures import mean
from ..plan import Plan, experiment
from ..plots import Panel, Series, draw
from ..recipes import Scale
from ..sweep import Sweep, product
from .budget import BY, NAME_KEYS, TREND_RULE, budget, dataset_title, width_claim
from .common import FAMILY_LABEL, TRAIN_COLUMNS, TRAIN_METRICS, err_rows, log2, trained


@dataclass(frozen=True)
class Fig5:
    omegas: list[int]  # budgets Ω
    channels: dict[int, list[int]]  # C of the planner's (S, C) pairs, per Ω (S from Ω)
    densities: dict[int, list[float]]  # SW-MLP densities p, per Ω
    depth: int  # Mixer blocks L (SW-MLPs: 2L)
    swapped_pairs: bool  # each (S, C) with its swap (C, S): same m, so it adds nothing to a trend in m
    seeds: int
    epochs: int


SETTINGS = {
    "smoke": Fig5(omegas=[2**10], channels={2**10: [4]}, densities={2**10: [0.5]}, depth=2, swapped_pairs=False,
                  seeds=1, epochs=1),
    # each family over the widest range of m it trains on at cpu cost: the Mixers at Ω = 2^18 from C = 4
    # to C* = 64 (m = 1440 … 4096, 1.5 doublings: C = 2 does not train, and m/m_min ≤ Ω^(1/6)/√(2 C_min)
    # needs Ω ≥ 2^21 for two doublings), the SW-MLPs at Ω = 2^14 from p = 1 to 1/20 (m = 147 … 588, two
    # doublings, multiples of S0 = 49; a masked layer costs m², so the paper trains SW-MLPs at its
    # smallest Ω only too); 2 blocks (SW-MLPs 4) to afford Ω = 2^18; 30 epochs: at 20 a 2× longer
    # S-Mixer run was still 0.9–1.1 points better (the convergence tolerance is ~1.05)
    "cpu": Fig5(omegas=[2**14, 2**18], channels={2**18: [4, 16, 64]}, densities={2**14: [1.0, 1 / 4, 1 / 20]},
                depth=2, swapped_pairs=False, seeds=3, epochs=30),
    # SW-MLPs at the smallest budget only: at Ω = 2^27 a masked SW-MLP of width ≥ 12 000 does not fit
    "paper": Fig5(omegas=[2**18, 2**21, 2**27], channels={2**18: [16, 32, 48], 2**21: [16, 32, 64], 2**27: [128, 256]},
                  densities={2**18: [0.9, 0.7, 0.5, 0.3, 0.1]}, depth=8, swapped_pairs=True, seeds=3, epochs=200),
}


FAMILIES = ("s_mixer", "rp_s_mixer", "sw_mlp")
WIDTH = {f: ClaimSpec(f"width-{f}", f"{FAMILY_LABEL[f]}: test error falls as the effective width m grows at fixed Ω",
                      "trained", TREND_RULE) for f in FAMILIES}


def _analyse_fig5(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    runs = select(runs, "width")
    rows = err_rows(runs, None, BY, TRAIN_METRICS)
    panels, claims = [], []
    omegas = sorted({r["omega"] for r in rows})
    for om in omegas:
        series = []
        for f in FAMILIES:
            rs = sorted([r for r in rows if r["omega"] == om and r["family"] == f], key=lambda r: r["m"])
            if not rs:
                continue
            # symmetric pairs (S, C) and (C, S) share m: the line joins the means per m
            ms = sorted({r["m"] for r in rs})
            e = [mean([r["test_error"] for r in rs if r["m"] == m]) for m in ms]
            series.append(Series(FAMILY_LABEL[f], ms, e))
            mine = select(runs, None, meta__omega=om, meta__family=f)
            claims.append(WIDTH[f].decide(width_claim(runs, rs), label=f"Ω = {log2(om)}", runs=mine))
        panels.append(Panel(f"{dataset_title(manifest)}, Ω = {log2(om)}", "effective width m = S·C (SW-MLP: m)",
                            "test error (%)", series, xscale="log"))
    rows = sorted(rows, key=lambda r: (r["omega"], r["family"], r["m"]))
    return Analysis(rows, ["omega", "family", "S", "C", "m", "p", *TRAIN_COLUMNS],
                    {"fig5": draw(panels, "Fig. 5: test error vs effective width at fixed Ω")}, claims)


@experiment("fig5", "S-Mixer, RP S-Mixer and SW-MLP: test error vs effective width at fixed Ω",
            analyse=_analyse_fig5, default_dataset="cifar10", claims=tuple(WIDTH.values()))
def fig5(sc: Scale) -> Plan:
    """Fig. 5 of Hayase & Karakida (2024): wider effective MLPs are better at a fixed budget.

    Command: ``mlplab reproduce fig5 --scale cpu`` (``--dataset cifar100`` / ``stl10`` for the
    other panels at paper scale).
    Tests: at fixed Ω, S-Mixers, RP S-Mixers over the planner's (S, C) pairs and SW-MLPs over
    densities p: test error against the effective width m = S·C.
    Published: error decreases monotonically with m for all three families, on CIFAR-10/100 and
    STL-10, at Ω = 2^18, 2^21, 2^27; the RP S-Mixer follows the S-Mixer closely.
    Verdict: per family, the per-seed slope of test error against log2(m), one-sample t-test
    (``verdicts.trend``).
    Time: paper ≈ 140 runs × 200 epochs per dataset (GPU days); cpu 9 points × the seeds on
    Fashion-MNIST, the Mixers at Ω = 2^18 (1.5 doublings of m) and the SW-MLPs at 2^14 (two)
    (``reproduce --list``); smoke seconds.
    """
    s = sc.settings(SETTINGS)
    patch = sc.patch_for_tokens(4)
    base = sc.recipe(epochs=s.epochs, cpu_epochs=s.epochs, optim="sgd", lr=0.02)
    models = budget(depth=s.depth, patch=patch, channels=s.channels, densities=s.densities, s0=sc.s0(patch),
                    symmetric=s.swapped_pairs)
    sweep = Sweep("width", base,
                  [product(("meta.omega", s.omegas), ("meta.family", ["s_mixer", "rp_s_mixer", "sw_mlp"]))],
                  seeds=sc.seeds(s.seeds), derived=[models, *trained(sc)], name_keys=NAME_KEYS,
                  epochs=base["schedule.epochs"],
                  description=f"families × Ω ∈ {[log2(o) for o in s.omegas]} × planned pairs/densities, "
                              f"depth {s.depth}")
    return Plan([[sweep]], settings={"Ω": [log2(o) for o in s.omegas], "depth": s.depth, "patch": patch,
                                     "channels (C) per Ω": {log2(k): v for k, v in s.channels.items()}})
