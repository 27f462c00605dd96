"""mixer-cost (MLP-Mixer Table 2's throughput column): images/s per core, FLOPs and parameters of
Mixer-S/32 … H/14 and ViT-L/16, measured by the ``inference`` task with every model timed
interleaved in one process (``specs/timing.py``). ViT-L/16 is :mod:`mlplab.models.reference`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..aggregate import RunRecord
from ..claims import Analysis, Claim, ClaimSpec
from ..measures import median
from ..plan import Plan, experiment
from ..plots import Bars, draw
from ..recipes import Scale
from ..verdicts import MIN_PAIRS, all_of, paired_ratio
from .timing import Timing, timed_model, timing_notes, timing_plan, timing_results, timing_row

__all__ = ["MixerCost", "MIXER_COST", "MIXER_PUBLISHED"]


@dataclass(frozen=True)
class MixerCost:
    models: list[dict[str, Any]]  # in the published order of throughput, fastest first
    timing: Timing


MIXER_TABLE2 = [
    timed_model("Mixer-S/32", "mixer_s32", num_classes=1000),
    timed_model("Mixer-B/16", "mixer_b16", num_classes=1000),
    timed_model("Mixer-L/16", "mixer_l16", num_classes=1000),
    timed_model("ViT-L/16", "vit_large", num_classes=1000),
    timed_model("Mixer-H/14", "mixer_h14", num_classes=1000),
]
MIXER_SMOKE = [  # the same kinds, tiny, at 32×32, the S/32 stand-in with the fewest FLOPs
    timed_model("Mixer-S/32", "mixer_s32", image_size=32, patch_size=16, hidden_dim=16, depth=1, token_hidden=8,
           channel_hidden=32, num_classes=10),
    timed_model("Mixer-B/16", "mixer_b16", image_size=32, patch_size=8, hidden_dim=32, depth=2, token_hidden=16,
           channel_hidden=64, num_classes=10),
    timed_model("Mixer-L/16", "mixer_l16", image_size=32, patch_size=8, hidden_dim=48, depth=3, token_hidden=24,
           channel_hidden=96, num_classes=10),
    timed_model("ViT-L/16", "vit_large", image_size=32, patch_size=8, dim=48, depth=3, heads=2, num_classes=10),
    timed_model("Mixer-H/14", "mixer_h14", image_size=32, patch_size=4, hidden_dim=64, depth=4, token_hidden=32,
           channel_hidden=128, num_classes=10),
]

MIXER_COST = {
    "smoke": MixerCost(MIXER_SMOKE, Timing(reps=2, latency_reps=0, search_reps=1, batches=(1, 4), max_call_s=None)),
    # one core at 224×224; Mixer-H/14 and ViT-L/16 take seconds per image on a CPU, so the search
    # stops at passes the cost model puts above 3 s (the big models are timed at batch 1–2)
    "cpu": MixerCost(MIXER_TABLE2, Timing(reps=MIN_PAIRS, latency_reps=0, search_reps=2,
                                          batches=(1, 2, 4, 8, 16, 32, 64), max_call_s=3.0)),
    "paper": MixerCost(MIXER_TABLE2, Timing(reps=MIN_PAIRS, latency_reps=0, search_reps=3,
                                            batches=(1, 16, 64, 256, 1024), max_call_s=None, threads=None,
                                            clock="wall")),
}

# MLP-Mixer (Tolstikhin et al. 2021) Table 2, images/s per core: (TPUv3, V100)
MIXER_PUBLISHED = {"Mixer-S/32": (11489, 5497), "Mixer-B/16": (1384, 516), "Mixer-L/16": (419, 151),
                   "ViT-L/16": (280, 100), "Mixer-H/14": (194, 58)}
MIXER_RATIO_FACTOR = 2.0  # a published ratio agrees with ours when it is within a factor 2 of our interval
MIXER_ANCHOR = "Mixer-B/16"


ORDER = ClaimSpec("order", "per-core throughput falls in the published order Mixer-S/32 > B/16 > L/16 > ViT-L/16 > "
                  "H/14 (TPUv3 and V100 alike)", "measurement",
                  "each neighbour's median interleaved per-round ratio of images/s above 1 by its order-statistic 95% "
                  "interval; all neighbours must hold (``verdicts.all_of``)")
RATIOS = ClaimSpec("ratios", f"each model's throughput relative to {MIXER_ANCHOR} is the published V100 one within a "
                   f"factor {MIXER_RATIO_FACTOR:g}", "measurement",
                   f"per model, the median interleaved ratio to {MIXER_ANCHOR} with its 95% interval inside "
                   f"[published / {MIXER_RATIO_FACTOR:g}, published × {MIXER_RATIO_FACTOR:g}]; all must hold "
                   "(``verdicts.all_of``)")


def _cost_claims(rows: dict[str, dict[str, Any]], device: str) -> list[Claim]:
    order = [k for k in MIXER_PUBLISHED if k in rows]
    pairs = {f"{a} / {b}": paired_ratio(rows[a]["throughput"], rows[b]["throughput"], above=1.0,
                                        what=f"{a} / {b} images/s") for a, b in zip(order, order[1:])}
    parts = {}  # no ratio without the anchor's timings: the claim is then UNDECIDED, as with no parts
    for k in order if MIXER_ANCHOR in rows else []:
        if k == MIXER_ANCHOR:
            continue
        pub = MIXER_PUBLISHED[k][1] / MIXER_PUBLISHED[MIXER_ANCHOR][1]
        what = f"{k} / {MIXER_ANCHOR} images/s (V100 {pub:.3g})"
        a, b = rows[k]["throughput"], rows[MIXER_ANCHOR]["throughput"]
        parts[f"{k} ≥ V100 / {MIXER_RATIO_FACTOR:g}"] = paired_ratio(a, b, above=pub / MIXER_RATIO_FACTOR, what=what)
        parts[f"{k} ≤ V100 × {MIXER_RATIO_FACTOR:g}"] = paired_ratio(a, b, below=pub * MIXER_RATIO_FACTOR, what=what)
    return [ORDER.decide(all_of(pairs, what="the published order") if pairs else None, label=device),
            RATIOS.decide(all_of(parts, what=f"ratios to {MIXER_ANCHOR}") if parts else None, label=device)]


def _analyse_mixer_cost(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    res, rows = timing_results(runs)
    device = res["machine"]["device"]
    threads = res["machine"]["threads"] if device == "cpu" else 1
    claims = _cost_claims(rows, device)
    table = [timing_row(k, r) for k, r in rows.items()]
    a = median(rows[MIXER_ANCHOR]["throughput"]) if MIXER_ANCHOR in rows else float("nan")
    pub = [{"model": k, "published images/s/core TPUv3": p[0], "published images/s/core V100": p[1],
            f"ours images/s/core ({device})": round(median(rows[k]["throughput"]) / threads, 2),
            "published ratio to B/16 (TPUv3 / V100)": f"{p[0] / MIXER_PUBLISHED[MIXER_ANCHOR][0]:.3f} / "
                                                       f"{p[1] / MIXER_PUBLISHED[MIXER_ANCHOR][1]:.3f}",
            "ours ratio to B/16": round(median(rows[k]["throughput"]) / a, 3),
            "ours params (M)": round(rows[k]["params"] / 1e6, 2), "ours GMACs": round(rows[k]["flops"] / 2e9, 2)}
           for k, p in MIXER_PUBLISHED.items() if k in rows]
    labels = list(rows)
    fig = draw([Bars(f"images / s / core ({device})", "images / s / core", labels,
                     [median(rows[k]["throughput"]) / threads for k in labels], yscale="log"),
                Bars("published images / s / core (V100)", "images / s / core", labels,
                     [MIXER_PUBLISHED.get(k, (0, float("nan")))[1] for k in labels], yscale="log"),
                Bars("forward FLOPs per image", "GMACs", labels, [rows[k]["flops"] / 2e9 for k in labels],
                     yscale="log")],
               "MLP-Mixer Table 2: throughput per core at 224×224")
    return Analysis(table, None, {"mixer_cost": fig}, claims, published=pub, notes=timing_notes(res))


@experiment("mixer-cost", "Throughput per core, FLOPs and parameters of Mixer-S/32 … H/14 and ViT-L/16 (Mixer Table 2)",
            analyse=_analyse_mixer_cost, default_dataset="synthetic", needs_plateau=False, claims=(ORDER, RATIOS))
def mixer_cost(sc: Scale) -> Plan:
    """MLP-Mixer Table 2's throughput column: Mixer-S/32, B/16, L/16, H/14 and ViT-L/16 at 224.

    Command: ``mlplab reproduce mixer-cost --scale cpu``.
    Tests: images/s per core at the best batch of a small search (one thread on a CPU), forward
    FLOPs and parameters of the five models at 224×224, 1000 classes, random weights, timed interleaved.
    Published: images/s/core TPUv3 / V100: S/32 11,489 / 5,497; B/16 1,384 / 516; L/16 419 / 151;
    ViT-L/16 280 / 100; H/14 194 / 58.
    Verdict: each neighbour in the published order faster, and each ratio to Mixer-B/16 within a
    factor 2 of the V100 one: medians of interleaved per-round ratios with order-statistic 95%
    intervals (``verdicts.paired_ratio``), all parts must hold (``verdicts.all_of``).
    Time: cpu ≈ 15 min on one core, 20 interleaved rounds (``reproduce --list``); paper one GPU;
    smoke seconds.
    """
    s = sc.settings(MIXER_COST)
    return timing_plan("table2", s.models, s.timing, {"models": [m["label"] for m in s.models], "image side": 224})
