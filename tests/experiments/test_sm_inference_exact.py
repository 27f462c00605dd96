"""sm-inference (Scaling MLPs Table 4) and the timing pieces it shares with mixer-cost
(``specs/timing.py``) field by field: the one interleaved run a plan asks for, the rows, table
and notes read from its results, and each of the three claims on timings chosen here (the
expected verdicts are ``verdicts.deterministic``/``paired_ratio``/``all_of`` of the groups Table 4
names, whose rules are tested in test_verdict_*.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments import expand
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.plots import Bars
from mlplab.experiments.specs import sm_inference as spec
from mlplab.experiments.specs import timing
from mlplab.experiments.specs.timing import Timing
from mlplab.experiments.verdicts import all_of, deterministic, paired_ratio

MLP = "B-12/Wi-768"
REFS = ("ResNet-152", "ViT-B/4", "Mixer-B/4")
CPU = {"cpu": "Test CPU", "machine_tag": "test-avx2", "cpu_flags": ["avx2", "fma"], "torch": "2.x", "threads": 1,
       "loadavg": [1.25, 1.0, 1.0], "device": "cpu", "gpu": None, "clock": "cpu"}


# ----------------------------------------------------------------------------------- timing.py


def test_timed_model_and_the_plan_of_one_interleaved_run():
    assert timing.timed_model("a", "mlp", width=3) == {"label": "a", "model": "mlp", "kwargs": {"width": 3}}
    models = [timing.timed_model("a", "mlp"), timing.timed_model("b", "vit_base", depth=2)]
    plan = timing.timing_plan("t4", models, Timing(reps=5, latency_reps=3, search_reps=2, batches=(1, 8),
                                                    max_call_s=2.5), {"x": 1})
    (sweep,) = plan.sweeps
    assert (sweep.name, sweep.task, sweep.name_keys, sweep.seed_keys) == ("t4", "inference", ["seed"], ("seed",))
    assert sweep.description == "params / FLOPs / latency / throughput, every model timed interleaved"
    (run,) = expand(sweep)
    assert run.name == "seed=0"
    assert run.overrides == {"models": models, "reps": 5, "latency_reps": 3, "search_reps": 2, "batches": [1, 8],
                             "max_call_s": 2.5, "threads": 1, "clock": "cpu", "run.device": "auto", "seed": 0}
    assert plan.settings == {"x": 1, "batches searched": [1, 8], "timed passes": 5, "threads": 1, "clock": "cpu"}
    assert plan.notes[0] == "random weights (speed does not depend on them); synthetic normal images"
    assert [n.split(" ")[0] for n in plan.notes] == ["random", "FLOPs:", "the"]
    assert plan.notes[1] == ("FLOPs: matmul FLOPs with multiply-add = 2 (models.counting.count_flops); the papers "
                             "count MACs (fvcore), shown as GMACs = FLOPs / 2")
    assert plan.notes[2] == ("the hardware differs from the papers': only ratios between models compare, not "
                             "absolute speeds")
    gpu = timing.timing_plan("t", models, Timing(1, 1, 1, (1,), None, threads=None, clock="wall"), {})
    assert (gpu.settings["threads"], gpu.settings["clock"]) == ("all", "wall")


def _run(rows, machine=CPU, sweep="table4", done=True) -> RunRecord:
    return RunRecord(sweep, "seed=0", Path("."), {"seed": 0},
                     results={"rows": rows, "machine": machine, "load_after": [2.5, 1.0, 1.0]} if done else None)


def test_timing_results_rows_and_notes():
    rows = [{"label": "a", "params": 10, "flops": 4e9, "latency_s": [0.3, 0.1, 0.2], "best_batch": 8,
             "throughput": [5.0, 7.0, 6.0, 100.0]}, {"label": "b", "params": 1, "flops": 2, "latency_s": [],
                                                     "best_batch": 1, "throughput": [1.0]}]
    res, by = timing.timing_results([_run([], done=False), _run(rows), _run([{"label": "c"}])])
    assert res["rows"] == rows and by == {"a": rows[0], "b": rows[1]}
    with pytest.raises(ValueError, match="^the inference run has no results yet$"):
        timing.timing_results([_run(rows, done=False)])
    assert timing.timing_row("a", rows[0]) == {"model": "a", "params": 10, "GMACs": 2.0, "FLOPs": 4e9,
                                               "latency_ms": pytest.approx(200.0), "best_batch": 8,
                                               "images_per_s": 6.5, "throughput_reps": 4}
    assert timing.timing_row("b", rows[1])["latency_ms"] is None
    notes = timing.timing_notes(res)
    assert notes == ["measured on CPU Test CPU (test-avx2; avx2, fma), 1 thread(s); no GPU measured; timed by process "
                     "CPU time (time spent waiting for a core left out); torch 2.x; load average before / after: "
                     "1.25 / 2.50",
                     "the papers timed GPUs/TPUs: a claim about their absolute speeds is not testable here, the ratios "
                     "are"]
    gpu = {**CPU, "gpu": "H100"}
    del gpu["clock"]  # an older record: the GPU's wall clock
    assert timing.timing_notes({"machine": gpu, "load_after": [0.5]})[0] == (
        "measured on GPU H100; timed by wall-clock time; torch 2.x; load average before / after: 1.25 / 0.50")


# ------------------------------------------------------------------------------- sm_inference


def _rows(mlp_rate=5000.0, mlp_latency=0.01, params=None, n=20, built=None):
    """Table 4's models: the references at 100 images/s and 0.5 s, the MLP at ``mlp_rate`` and
    ``mlp_latency``; each round's timings tilted together (the ratios vary a little per round)."""
    params = params or {k: round(p[0] * 1e6) for k, p in spec.SM_PUBLISHED.items()}
    flops = {MLP: 2e8, "ResNet-152": 3e10, "ViT-B/4": 5e10, "Mixer-B/4": 4e10}
    out = []
    for i, m in enumerate(built or spec.TABLE4_MODELS):
        k = m["label"]
        rate, lat = (mlp_rate, mlp_latency) if k == MLP else (100.0, 0.5)
        jitter = [1 + 0.01 * ((j * (i + 2)) % 5 - 2) for j in range(n)]
        out.append({**m, "params": params[k], "flops": flops[k], "best_batch": 64 if k == MLP else 4,
                    "latency_s": [lat * x for x in jitter], "throughput": [rate / x for x in jitter]})
    return out


def test_sm_inference_analysis_rows_published_figure_and_claims(monkeypatch):
    drawn = []
    monkeypatch.setattr(spec, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    rows = _rows()
    an = spec._analyse_sm_inference([_run(rows)], {})
    by = {r["label"]: r for r in rows}
    labels = [MLP, *REFS]
    assert an.table == [timing.timing_row(k, by[k]) for k in labels] and an.columns is None
    thr = {k: float(np.median(by[k]["throughput"])) for k in labels}
    lat = {k: float(np.median(by[k]["latency_s"])) for k in labels}
    assert an.published == [
        {"model": k, "published params (M)": p[0], "ours params (M)": round(by[k]["params"] / 1e6, 2),
         "published GFLOPs (MACs)": p[3], "ours GMACs": round(by[k]["flops"] / 2e9, 4),
         "published latency ms (A5000)": p[1], "ours latency ms (cpu)": round(1e3 * lat[k], 2),
         "published images/s (A5000)": p[2], "ours images/s (cpu)": round(thr[k], 1),
         "published images/s ratio MLP/x": round(16063 / p[2], 1), "ours ratio MLP/x": round(thr[MLP] / thr[k], 1)}
        for k, p in spec.SM_PUBLISHED.items()]
    assert an.published[1]["ours ratio MLP/x"] == 50.0 and an.published[1]["published images/s ratio MLP/x"] == 31.7
    assert an.figures == {"sm_inference": "fig"}
    assert drawn == [([Bars("throughput at the best batch (cpu)", "images / s", labels,
                            pytest.approx([thr[k] for k in labels]), yscale="log"),
                       Bars("latency, batch 1 (cpu)", "ms", labels, pytest.approx([1e3 * lat[k] for k in labels]),
                            yscale="log"),
                       Bars("forward FLOPs per image", "GMACs", labels, [0.1, 15.0, 25.0, 20.0], yscale="log")],
                      "Scaling MLPs Table 4: inference cost at 64×64")]
    assert an.notes == timing.timing_notes({"machine": CPU, "load_after": [2.5, 1.0, 1.0]})
    # the claims: the parameter identity, the MLP / reference throughputs, the reference / MLP latencies
    params, throughput, latency = an.claims
    want = deterministic(0.0, expected=0.0, tol=0.005, what="largest |ours − published| parameters", unit="M",
                         detail="B-12/Wi-768 66.89M, ResNet-152 60.19M, ViT-B/4 86.06M, Mixer-B/4 63.82M")
    assert (params.key, params.verdict, params.stats.statistic, params.stats.detail, params.stats.unit) == (
        "params", "HELD", want.statistic, want.detail, "M")
    assert [(c.need.quantity, c.value) for c in params.checks] == [("table4_models", 1.0)]
    for c, key, a, b, what in ((throughput, "throughput", MLP, None, "MLP / {} images/s"),
                               (latency, "latency", None, MLP, "{} / MLP latency")):
        field = "throughput" if key == "throughput" else "latency_s"
        w = all_of({k: paired_ratio(by[a or k][field], by[b or k][field], above=10.0, what=what.format(k))
                    for k in REFS}, what="every reference")
        text = (spec.THROUGHPUT if key == "throughput" else spec.LATENCY).text
        assert (c.key, c.verdict, c.claim) == (key, "HELD", f"cpu: {text}")
        assert (c.stats.statistic, c.stats.detail, c.stats.effect, c.stats.extra["parts"]) == (
            w.statistic, w.detail, w.effect, 3)
    assert throughput.detail == ("published on an RTX A5000: ≥ 32×; FLOP ratio ResNet-152 / MLP 150×; "
                                 "FLOP ratio ViT-B/4 / MLP 250×; FLOP ratio Mixer-B/4 / MLP 200×")
    assert latency.detail == "published on an RTX A5000: ≥ 19×"
    assert throughput.stats.effect == pytest.approx(50.0, rel=0.05) and latency.stats.effect == pytest.approx(
        50.0, rel=0.05)


def test_sm_inference_claims_fail_on_the_slowest_reference_and_the_largest_parameter_gap(monkeypatch):
    """Only one reference 5× slower than the MLP (the others 50×) fails each timing claim; one
    model 0.006M off (the others exact) fails the identity; another model set is NOT TESTABLE."""
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    rows = _rows()
    for r in rows:
        if r["label"] == "ViT-B/4":
            r["throughput"] = [x * 10 for x in r["throughput"]]
            r["latency_s"] = [x / 10 for x in r["latency_s"]]
            r["params"] += 6000
    an = spec._analyse_sm_inference([_run(rows)], {})
    assert [c.verdict for c in an.claims] == ["DID NOT HOLD"] * 3
    assert an.claims[0].stats.effect == pytest.approx(0.006)
    assert [c.stats.extra["deciding"] for c in an.claims[1:]] == ["ViT-B/4", "ViT-B/4"]
    rows = _rows()
    rows[2]["params"] += 4000  # within the table's 0.01M rounding: still Table 4's count
    assert spec._analyse_sm_inference([_run(rows)], {}).claims[0].verdict == "HELD"
    other = [dict(m, kwargs={**m["kwargs"], "num_classes": 10}) for m in spec.TABLE4_MODELS]
    an = spec._analyse_sm_inference([_run(_rows(built=other))], {})
    assert an.claims[0].verdict == "NOT TESTABLE" and an.claims[0].checks[0].value == 0.0


def test_sm_inference_parameters_in_millions_to_a_hundredth(monkeypatch):
    """ResNet-152 with 60 195 040 parameters: 60.19504M, shown as 60.20M and 60.2 (to 0.01M),
    0.00504M off Table 4's 60.19M: above the identity's 0.005M, so it DID NOT HOLD."""
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    params = {k: round(p[0] * 1e6) for k, p in spec.SM_PUBLISHED.items()}
    an = spec._analyse_sm_inference([_run(_rows(params={**params, "ResNet-152": 60_195_040}))], {})
    assert an.published[1]["model"] == "ResNet-152" and an.published[1]["ours params (M)"] == 60.2
    assert an.claims[0].stats.detail == "B-12/Wi-768 66.89M, ResNet-152 60.20M, ViT-B/4 86.06M, Mixer-B/4 63.82M"
    assert an.claims[0].verdict == "DID NOT HOLD" and an.claims[0].stats.effect == pytest.approx(0.00504)


def test_sm_inference_published_rows_keep_their_precision(monkeypatch):
    """Ours beside Table 4 on timings with more decimals: the MLP's median latency 12.345678 ms
    shown as 12.35, its median 4321.2345 images/s as 4321.2, its ratio to a reference at 100
    images/s as 43.2 (not 43, not 43.21), 24 691 300 002 FLOPs (12.345650001 GMACs) as 12.3457."""
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    rows = _rows(n=3)
    mlp, resnet = rows[0], rows[1]
    assert (mlp["label"], resnet["label"]) == (MLP, "ResNet-152")
    mlp.update(latency_s=[0.02, 0.012345678, 0.01], throughput=[5000.0, 4321.2345, 4000.0], flops=24_691_300_002)
    resnet["throughput"] = [100.0] * 3
    pub = {p["model"]: p for p in spec._analyse_sm_inference([_run(rows)], {}).published}
    assert pub[MLP]["ours latency ms (cpu)"] == 12.35 and pub[MLP]["ours images/s (cpu)"] == 4321.2
    assert pub[MLP]["ours GMACs"] == 12.3457 and pub["ResNet-152"]["ours ratio MLP/x"] == 43.2


def test_sm_inference_without_the_mlp_has_no_claims(monkeypatch):
    monkeypatch.setattr(spec, "draw", lambda panels, title: "fig")
    rows = [r for r in _rows() if r["label"] != MLP]
    an = spec._analyse_sm_inference([_run(rows, machine={**CPU, "device": "cuda"})], {})
    assert an.claims == [] and [p["model"] for p in an.published] == list(REFS)
    assert "ours images/s (cuda)" in an.published[0] and {p["ours ratio MLP/x"] for p in an.published} == {"–"}
