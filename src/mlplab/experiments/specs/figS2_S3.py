"""figS2-S3: the width result for MLP-Mixers (γ = 4, Fig. S.2), and the expansion γ traded
against S and C at a fixed width m (Fig. S.3)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...theory.budget import gamma_for_width
from ..aggregate import RunRecord, select
from ..claims import Analysis, ClaimSpec
from ..derived import derive
from ..plan import Plan, experiment
from ..plots import Panel, Series, draw
from ..recipes import Scale
from ..sweep import Sweep, product
from .budget import (
    BY,
    NAME_KEYS,
    NEAR,
    NEAR_RULE,
    SPANS_WINDOW,
    TREND_RULE,
    budget,
    dataset_title,
    near_claim,
    width_claim,
)
from .common import TRAIN_COLUMNS, TRAIN_METRICS, err_rows, log2, mixer, trained


@dataclass(frozen=True)
class FigS2S3:
    omegas: list[int]  # S.2: budgets Ω
    channels: dict[int, list[int]]  # S.2: C of the planner's pairs per Ω (S from Ω)
    swapped_pairs: bool  # S.2: each (S, C) with its swap (same m)
    width: int  # S.3: the fixed m = S·C
    omega_s3: int  # S.3: the budget γ is chosen to spend
    tokens_s3: list[int]  # S.3: S (C = m / S)
    depth: int  # MLP-Mixer blocks L (not given in the paper; L = 8 as fig5 at paper scale)
    seeds: int
    epochs: int


SETTINGS = {
    "smoke": FigS2S3(omegas=[2**10], channels={2**10: [4]}, swapped_pairs=False, width=64, omega_s3=2**10,
                     tokens_s3=[4, 16], depth=2, seeds=1, epochs=1),
    # one S.2 budget (Ω = 2^16 costs twice Ω = 2^14), no swapped pairs (same m as their twins);
    # 16 epochs: the loss falls ~5 % per epoch at the end
    "cpu": FigS2S3(omegas=[2**14], channels={2**14: [4, 8, 12]}, swapped_pairs=False, width=256, omega_s3=2**14,
                   tokens_s3=[4, 8, 16, 32, 64], depth=4, seeds=3, epochs=16),
    "paper": FigS2S3(omegas=[2**18, 2**20], channels={2**18: [8, 16, 24], 2**20: [16, 24, 32]}, swapped_pairs=True,
                     width=4096, omega_s3=2**20, tokens_s3=[16, 32, 64, 128, 256], depth=8, seeds=3, epochs=200),
}


def expansion_models(s: FigS2S3, patch: int) -> list[dict[str, Any]]:
    """S.3: one MLP-Mixer per S at width m, with the γ = 2Ω/(m(S + C)) that spends Ω."""
    rows = []
    for S in s.tokens_s3:
        C = s.width // S
        gamma = round(gamma_for_width(s.omega_s3, s.width, C), 4)
        rows.append({**mixer(S, C, s.depth, patch, block="mlp", gamma=gamma), "meta.S": S, "meta.C": C,
                     "meta.m": s.width, "meta.omega": s.omega_s3, "meta.family": "mlp_mixer", "meta.gamma": gamma})
    return rows


WIDTH = ClaimSpec("width", "MLP-Mixer (γ = 4): test error falls as the width m = S·C grows at fixed Ω", "trained",
                  TREND_RULE)
NEAR_C = ClaimSpec("near-s-eq-c", f"at fixed width m, the best Mixer is near S = C (S/C within a factor {NEAR:g}), "
                   "where the expansion γ that spends Ω is largest", "trained", NEAR_RULE, needs=(SPANS_WINDOW,))


def _analyse_figS2(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    width_runs, exp_runs = select(runs, "width"), select(runs, "expansion")
    rows = sorted(err_rows(width_runs, None, BY, TRAIN_METRICS), key=lambda r: (r["omega"], r["m"]))
    by3 = {**BY, "gamma": lambda r: r.get("meta.gamma")}
    rs3 = sorted(err_rows(exp_runs, None, by3, TRAIN_METRICS), key=lambda r: r["C"])
    panels, claims = [], []
    series = []
    for om in sorted({r["omega"] for r in rows}):
        rs = [r for r in rows if r["omega"] == om]
        series.append(Series(f"Ω = {log2(om)}", [r["m"] for r in rs], [r["test_error"] for r in rs],
                             [r["test_error_std"] for r in rs]))
        claims.append(WIDTH.decide(width_claim(width_runs, rs), label=f"Ω = {log2(om)}",
                                   runs=select(width_runs, None, meta__omega=om)))
    panels.append(Panel(f"{dataset_title(manifest)}: width sweep (Fig. S.2)", "width m = S·C", "test error (%)",
                        series, xscale="log"))
    if rs3:
        panels.append(Panel(f"fixed m = {rs3[0]['m']} (Fig. S.3)", "expansion γ (C shown in table)", "test error (%)",
                            [Series("MLP-Mixer", [r["gamma"] for r in rs3], [r["test_error"] for r in rs3],
                                    [r["test_error_std"] for r in rs3], style="o")]))
        v, measured = near_claim(exp_runs, rs3)
        claims.append(NEAR_C.decide(v, label=f"m = {rs3[0]['m']}", measured=measured, runs=exp_runs))
    return Analysis(rows + rs3, ["omega", "S", "C", "m", "gamma", *TRAIN_COLUMNS],
                    {"figS2-S3": draw(panels, "Figs. S.2/S.3: MLP-Mixer width and expansion sweeps")}, claims)


@experiment("figS2-S3", "MLP-Mixer width sweep (γ = 4) and expansion sweep at fixed m", analyse=_analyse_figS2,
            default_dataset="cifar10", aliases=("figS2/S3", "figS2", "figS3", "figS2S3"), claims=(WIDTH, NEAR_C))
def figS2_S3(sc: Scale) -> Plan:
    """Figs. S.2/S.3: the width result holds for MLP-Mixers, and γ trades against S, C.

    Command: ``mlplab reproduce figS2-S3 --scale cpu``.
    Tests: S.2: MLP-Mixers with γ = 4 at Ω ∈ {2^18, 2^20} over planner pairs (SGD lr 0.1);
    S.3: fixed m = S·C = 4096, pairs (16,256) … (256,16), γ = 2Ω/(m(S + C)) at Ω = 2^20.
    Depth is not given in the paper; we use L = 8 (as fig5) at paper scale.
    Published: error falls with width at both budgets; at fixed m the error is lowest near S = C.
    Verdicts: S.2 per-seed slopes of error against log2(m) (``trend``); S.3 the minimum of a
    per-seed parabola in log(S/C) within a factor 2 of S = C (``optimum_within``).
    Time: paper ≈ 17 runs × 3 seeds × 200 epochs; cpu 24 runs (S.2 at Ω = 2^14, S.3 at m = 256)
    on Fashion-MNIST (``reproduce --list``); smoke seconds.
    """
    s = sc.settings(SETTINGS)
    patch = sc.patch_for_tokens(4)
    base = sc.recipe(epochs=s.epochs, cpu_epochs=s.epochs, optim="sgd", lr=0.1)
    models = budget(depth=s.depth, patch=patch, channels=s.channels, gamma=4.0, block="mlp", s0=sc.s0(patch),
                    symmetric=s.swapped_pairs)
    width = Sweep("width", base, [product(("meta.omega", s.omegas), ("meta.family", ["mlp_mixer"]))],
                  seeds=sc.seeds(s.seeds), derived=[models, *trained(sc)], name_keys=NAME_KEYS,
                  epochs=base["schedule.epochs"], description="MLP-Mixer γ=4 over planner pairs")
    exp = Sweep("expansion", base, [("meta.S", s.tokens_s3)], seeds=sc.seeds(s.seeds),
                derived=[derive("match", keys=["meta.S"], rows=expansion_models(s, patch)), *trained(sc)],
                name_keys=["meta.S", "meta.C", "meta.gamma", "run.seed"], epochs=base["schedule.epochs"],
                description=f"fixed m={s.width}, Ω={log2(s.omega_s3)}, γ from the budget")
    return Plan([[width, exp]], settings={"Ω (S.2)": [log2(o) for o in s.omegas], "m (S.3)": s.width,
                                          "Ω (S.3)": log2(s.omega_s3), "depth": s.depth})
