"""``specs/mixer_cost.py`` field by field: which timings each part of the two claims compares, with
which bound (MLP-Mixer Table 2's V100 numbers written out here), the parts' names and order (the
verdict functions replaced by recorders; ``verdicts.py`` is tested on its own), then the verdicts
on interleaved timings chosen here, the published rows with medians from numpy and the panels (the
drawing replaced by a recorder). test_inference.py drives the report end to end."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.plots import Bars
from mlplab.experiments.specs import mixer_cost as mc
from mlplab.experiments.verdicts import MIN_PAIRS, Verdict

# MLP-Mixer Table 2, images/s per core: TPUv3, V100
TABLE2 = {"Mixer-S/32": (11489, 5497), "Mixer-B/16": (1384, 516), "Mixer-L/16": (419, 151),
          "ViT-L/16": (280, 100), "Mixer-H/14": (194, 58)}
ORDER = list(TABLE2)


def test_the_published_numbers_and_bounds():
    assert mc.MIXER_PUBLISHED == TABLE2
    assert (mc.MIXER_ANCHOR, mc.MIXER_RATIO_FACTOR) == ("Mixer-B/16", 2.0)


def _rows(rates: dict[str, float], n: int = 12, jitter: float = 0.02) -> dict[str, dict]:
    """Each model's interleaved throughputs: its rate × (1 + jitter·(round − n/2)/n)."""
    rows = {}
    for i, (k, rate) in enumerate(rates.items()):
        thr = [rate * (1 + jitter * (j - n / 2) / n * (1 + 0.1 * i)) for j in range(n)]
        rows[k] = {"label": k, "params": 1e6 * (i + 1), "flops": 2e9 * (i + 2), "throughput": thr,
                   "latency_s": [0.01 * (i + 1)] * 3 if i % 2 else [], "best_batch": 2 ** i}
    return rows


class Recorder:
    def __init__(self):
        self.ratios, self.all = [], []

    def paired_ratio(self, a, b, *, above=None, below=None, what=""):
        self.ratios.append((list(a), list(b), above, below, what))
        return ("ratio", len(self.ratios) - 1)

    def all_of(self, verdicts, *, what=""):
        self.all.append((dict(verdicts), what))
        return Verdict(held=True, effect=float(len(self.all)))


def test_cost_claims_compare_each_neighbour_and_each_ratio_to_b16(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(mc, "paired_ratio", rec.paired_ratio)
    monkeypatch.setattr(mc, "all_of", rec.all_of)
    rows = _rows({k: v[1] for k, v in reversed(TABLE2.items())})  # any order of the rows: the published one decides
    order, ratios = mc._cost_claims(rows, "cpu")
    thr = {k: r["throughput"] for k, r in rows.items()}
    neighbours = [(thr[a], thr[b], 1.0, None, f"{a} / {b} images/s") for a, b in zip(ORDER, ORDER[1:])]
    parts = []
    for k in ORDER:
        if k == "Mixer-B/16":
            continue
        pub = TABLE2[k][1] / 516
        what = f"{k} / Mixer-B/16 images/s (V100 {pub:.3g})"
        parts += [(thr[k], thr["Mixer-B/16"], pub / 2, None, what), (thr[k], thr["Mixer-B/16"], None, pub * 2, what)]
    assert rec.ratios == neighbours + parts
    (pairs, w1), (checks, w2) = rec.all
    assert (w1, w2) == ("the published order", "ratios to Mixer-B/16")
    assert list(pairs) == [f"{a} / {b}" for a, b in zip(ORDER, ORDER[1:])]
    assert list(pairs.values()) == [("ratio", i) for i in range(4)]
    assert list(checks) == [f"{k} {s}" for k in ORDER if k != "Mixer-B/16" for s in ("≥ V100 / 2", "≤ V100 × 2")]
    assert list(checks.values()) == [("ratio", i) for i in range(4, 12)]
    assert (order.key, order.claim.split(":")[0], order.stats.effect) == ("order", "cpu", 1.0)
    assert (ratios.key, ratios.claim.split(":")[0], ratios.stats.effect) == ("ratios", "cpu", 2.0)


def test_cost_claims_with_one_model_or_without_the_anchor_decide_nothing():
    order, ratios = mc._cost_claims(_rows({"Mixer-S/32": 10.0}), "cuda")
    assert (order.verdict, ratios.verdict, order.stats, ratios.stats) == ("UNDECIDED", "UNDECIDED", None, None)
    assert order.claim.startswith("cuda: ")
    order, ratios = mc._cost_claims(_rows({"Mixer-B/16": 10.0, "Mixer-H/14": 1.0}), "cpu")
    assert order.stats is not None and ratios.verdict == "UNDECIDED"
    # without the anchor: the order decided, no ratio to B/16 (as the published rows' NaN ratios)
    order, ratios = mc._cost_claims(_rows({"Mixer-S/32": 10.0, "Mixer-L/16": 1.0}, n=MIN_PAIRS), "cpu")
    assert (order.verdict, ratios.verdict, ratios.stats) == ("HELD", "UNDECIDED", None)


@pytest.mark.parametrize("rates, words", [
    ({k: v[1] / 40 for k, v in TABLE2.items()}, ("HELD", "HELD")),
    # H/14 faster than ViT-L/16, and S/32 30× B/16 (published 10.7×): the order and a ratio reversed
    ({**{k: v[1] / 40 for k, v in TABLE2.items()}, "Mixer-H/14": 4.0, "Mixer-S/32": 30 * 516 / 40},
     ("DID NOT HOLD", "DID NOT HOLD")),
    # each ratio 1.9× the published (inside the factor 2), order kept
    ({k: v[1] / 40 * (1.9 if k != "Mixer-B/16" else 1.0) for k, v in TABLE2.items()}, ("HELD", "HELD")),
    # L/16 3× its published ratio to B/16: still ordered (L/16 below B/16), the ratio out of bounds
    ({**{k: v[1] / 40 for k, v in TABLE2.items()}, "Mixer-L/16": 3 * 151 / 40}, ("HELD", "DID NOT HOLD"))])
def test_cost_claims_verdicts_on_interleaved_timings(rates, words):
    order, ratios = mc._cost_claims(_rows(rates, n=20, jitter=0.01), "cpu")
    assert (order.verdict, ratios.verdict) == words


def _run(rows: dict[str, dict], device: str = "cpu", threads: int = 4) -> RunRecord:
    machine = {"cpu": "EPYC", "machine_tag": "x86", "cpu_flags": ["avx512"], "torch": "2.x", "threads": threads,
               "loadavg": [1.5, 1.0, 1.0], "device": device, "clock": "cpu"}
    return RunRecord("table2", "seed=0", Path("."), {"seed": 0},
                     results={"rows": list(rows.values()), "machine": machine, "load_after": [2.5, 1.0, 1.0]})


@pytest.mark.parametrize("device, threads, per_core", [("cpu", 4, 4), ("cuda", 4, 1)])
def test_analysis_table_published_rows_and_panels(monkeypatch, device, threads, per_core):
    drawn = []
    monkeypatch.setattr(mc, "draw", lambda panels, title: drawn.append((panels, title)) or "figure")
    extra = {"label": "Other", "params": 5e5, "flops": 1e9, "throughput": [7.0] * 12, "latency_s": [],
             "best_batch": 1}
    rows = {**_rows({k: v[1] / 40 for k, v in TABLE2.items()}), "Other": extra}
    # S/32's counts just above a rounding boundary: 1.2350004 M parameters, 2.3450000005 GMACs
    rows["Mixer-S/32"].update(params=1_235_000.4, flops=4_690_000_001.0)
    an = mc._analyse_mixer_cost([_run(rows, device, threads)], {})
    med = {k: float(np.median(r["throughput"])) for k, r in rows.items()}
    assert [r["model"] for r in an.table] == ORDER + ["Other"]
    assert an.table[0] == {"model": "Mixer-S/32", "params": 1_235_000.4, "GMACs": 2.3450000005,
                           "FLOPs": 4_690_000_001.0, "latency_ms": None,
                           "best_batch": 1, "images_per_s": pytest.approx(med["Mixer-S/32"]), "throughput_reps": 12}
    assert an.published == [
        {"model": k, "published images/s/core TPUv3": TABLE2[k][0], "published images/s/core V100": TABLE2[k][1],
         f"ours images/s/core ({device})": round(med[k] / per_core, 2),
         "published ratio to B/16 (TPUv3 / V100)": f"{TABLE2[k][0] / 1384:.3f} / {TABLE2[k][1] / 516:.3f}",
         "ours ratio to B/16": round(med[k] / med["Mixer-B/16"], 3),
         "ours params (M)": round(rows[k]["params"] / 1e6, 2),
         "ours GMACs": round(rows[k]["flops"] / 2e9, 2)} for k in ORDER]
    assert (an.published[0]["ours params (M)"], an.published[0]["ours GMACs"]) == (1.24, 2.35)
    assert [c.key for c in an.claims] == ["order", "ratios"] and all(c.claim.startswith(device) for c in an.claims)
    ((panels, title),) = drawn
    assert title == "MLP-Mixer Table 2: throughput per core at 224×224" and an.figures == {"mixer_cost": "figure"}
    labels = ORDER + ["Other"]
    ours, pub, flops = panels
    assert (ours.title, ours.ylabel, list(ours.labels), ours.yscale) == \
        (f"images / s / core ({device})", "images / s / core", labels, "log")
    np.testing.assert_allclose(ours.values, [med[k] / per_core for k in labels], rtol=1e-12)
    assert (pub.title, pub.ylabel, list(pub.labels), pub.yscale) == \
        ("published images / s / core (V100)", "images / s / core", labels, "log")
    assert pub.values[:5] == [TABLE2[k][1] for k in ORDER] and math.isnan(pub.values[5])
    assert flops == Bars("forward FLOPs per image", "GMACs", labels, [rows[k]["flops"] / 2e9 for k in labels],
                         yscale="log")
    assert len(an.notes) == 2 and an.notes[0].startswith("measured on CPU EPYC (x86; avx512), 4 thread(s)")


def test_analysis_without_the_anchor_reads_nan_ratios(monkeypatch):
    monkeypatch.setattr(mc, "draw", lambda panels, title: "figure")
    rows = _rows({"Mixer-S/32": 100.0, "Mixer-L/16": 10.0})
    an = mc._analyse_mixer_cost([_run(rows, threads=1)], {})
    assert [p["model"] for p in an.published] == ["Mixer-S/32", "Mixer-L/16"]
    assert all(math.isnan(p["ours ratio to B/16"]) for p in an.published)
    assert an.published[1]["ours images/s/core (cpu)"] == pytest.approx(round(float(np.median(rows["Mixer-L/16"]
                                                                                              ["throughput"])), 2))


def test_paper_plan_times_table2s_models_in_one_interleaved_run():
    """Paper scale: the five models of Table 2 in its order, 1000 classes at 224×224, each Mixer the
    registered one of MLP-Mixer Table 1's size (P, C, L, D_S, D_C)."""
    from mlplab.experiments import expand, plan_experiment
    from mlplab.models.registry import get_model_entry

    _, _, plan = plan_experiment("mixer-cost", "paper", check_available=False)
    (sweep,) = plan.sweeps
    (run,) = expand(sweep)
    models = run.overrides["models"]
    assert [(m["label"], m["kwargs"]) for m in models] == [(k, {"num_classes": 1000}) for k in ORDER]
    sizes = {"Mixer-S/32": (32, 512, 8, 256, 2048), "Mixer-B/16": (16, 768, 12, 384, 3072),
             "Mixer-L/16": (16, 1024, 24, 512, 4096), "Mixer-H/14": (14, 1280, 32, 640, 5120)}
    for m in models:
        if m["label"] in sizes:
            d = get_model_entry(m["model"]).defaults
            assert (d["patch_size"], d["hidden_dim"], d["depth"], d["token_hidden"], d["channel_hidden"],
                    d["image_size"]) == (*sizes[m["label"]], 224)
    assert models[3]["model"] == "vit_large"
    assert run.overrides["batches"] == [1, 16, 64, 256, 1024] and run.overrides["clock"] == "wall"
