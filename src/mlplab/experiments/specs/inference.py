"""sm-inference (Scaling MLPs Table 4) and mixer-cost (MLP-Mixer Table 2's throughput column):
parameters, FLOPs, latency and throughput of MLPs beside CNNs, ViTs and Mixers, measured by the
``inference`` task (:func:`mlplab.analysis.throughput.measure_inference`) with every model timed
interleaved in one process, so the ratios face the same machine load.

The reference ResNet-152 and ViTs are :mod:`mlplab.models.reference` (written here, not timm);
the MLP and the Mixers are registered models. FLOPs are the one analytic counter's
(:func:`mlplab.models.counting.count_flops`, multiply-add = 2); the papers count a multiply-add
as one FLOP (fvcore's convention), so the reports show GMACs = FLOPs / 2 beside them.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..aggregate import RunRecord, select
from ..claims import Analysis, Claim, decided
from ..plan import Plan, experiment
from ..plots import Bars, draw
from ..recipes import Scale
from ..sweep import Sweep
from ..tasks import task
from ..verdicts import Verdict, all_hold, deterministic, ratio_interval

__all__ = ["Timing", "SMInference", "MixerCost", "SM_INFERENCE", "MIXER_COST", "SM_PUBLISHED", "MIXER_PUBLISHED",
           "inference_task", "build_model"]


@dataclass(frozen=True)
class Timing:
    """How the ``inference`` task times: ``latency_reps`` passes of one image (0: no latency),
    ``search_reps`` passes at each candidate batch of ``batches`` (those estimated at ≤
    ``max_call_s`` per pass on a CPU, :func:`~mlplab.analysis.throughput.candidate_batches`; all on
    a GPU), ``reps`` passes at the best batch; ``threads`` torch threads (1: images/s per core);
    ``clock`` ``cpu`` (process CPU time: one thread on a shared CPU) or ``wall`` (a GPU's)."""

    reps: int
    latency_reps: int
    search_reps: int
    batches: tuple[int, ...]
    max_call_s: float | None
    threads: int | None = 1
    clock: str = "cpu"


def _model(label: str, model: str, **kwargs: Any) -> dict[str, Any]:
    return {"label": label, "model": model, "kwargs": kwargs}


# ------------------------------------------------------------------------------- sm-inference


@dataclass(frozen=True)
class SMInference:
    models: list[dict[str, Any]]  # the MLP first, then the references
    timing: Timing


# Table 4's four models at 64×64, 1000 classes. Mixer-B/4's token-mixing width is 1024 (= 4·S at
# S = 256 tokens): with the registered B's 384 it would have 59.88M parameters and 16.3 GMACs; 1024
# gives Table 4's 63.82M and 19.34 GMACs (19.36G with fvcore's layer-norm FLOPs).
TABLE4_MODELS = [
    _model("B-12/Wi-768", "bottleneck_mlp", image_size=64, width=768, depth=12, num_classes=1000),
    _model("ResNet-152", "resnet152", image_size=64, stem_stride=1, maxpool=False, num_classes=1000),
    _model("ViT-B/4", "vit_base", image_size=64, patch_size=4, num_classes=1000),
    _model("Mixer-B/4", "mixer_b16", image_size=64, patch_size=4, token_hidden=1024, num_classes=1000),
]
SMOKE_MODELS = [  # the same four kinds, tiny, at 16×16
    _model("B-12/Wi-768", "bottleneck_mlp", image_size=16, width=32, depth=2, num_classes=10),
    _model("ResNet-152", "resnet152", image_size=16, layers=[1, 1, 1, 1], width=4, stem_stride=1, maxpool=False,
           num_classes=10),
    _model("ViT-B/4", "vit_base", image_size=16, patch_size=4, dim=32, depth=2, heads=2, num_classes=10),
    _model("Mixer-B/4", "mixer_b16", image_size=16, patch_size=4, hidden_dim=32, depth=2, token_hidden=16,
           channel_hidden=64, num_classes=10),
]

SM_INFERENCE = {
    # two timed passes each: fewer than 3 measurements, so the timing claims stay UNDECIDED by rule
    "smoke": SMInference(SMOKE_MODELS, Timing(reps=2, latency_reps=2, search_reps=1, batches=(1, 4), max_call_s=None)),
    # one core (images/s per core); batches whose pass the cost model puts above 3 s are not searched
    # (the references stop at 4 images, the MLP goes to 1024: bigger batches no longer help on a CPU)
    "cpu": SMInference(TABLE4_MODELS, Timing(reps=7, latency_reps=7, search_reps=2, batches=(1, 4, 16, 64, 256, 1024),
                                             max_call_s=3.0)),
    # the paper's GPU: every batch searched, all threads
    "paper": SMInference(TABLE4_MODELS, Timing(reps=20, latency_reps=20, search_reps=3,
                                               batches=(1, 16, 64, 256, 1024, 4096), max_call_s=None, threads=None,
                                               clock="wall")),
}

# Table 4 (one RTX A5000): params (M), latency (ms), throughput (images/s), FLOPs (fvcore: G MACs)
SM_PUBLISHED = {"B-12/Wi-768": (66.89, 21.2, 16063, 0.0668), "ResNet-152": (60.19, 423, 506, 13.07),
                "ViT-B/4": (86.06, 424, 222, 23.08), "Mixer-B/4": (63.82, 400, 319, 19.36)}
SM_FASTER = 10.0  # "far cheaper": an order of magnitude (Table 4's smallest ratios: throughput 32×, latency 19×)


def _sm_claims(rows: dict[str, dict[str, Any]], published_sizes: bool, device: str) -> list[Claim]:
    """The parameter claim (decided only when the run built Table 4's models), then per reference
    the throughput and latency claims."""
    mlp = "B-12/Wi-768"
    claims = []
    if published_sizes:
        off = {k: abs(r["params"] / 1e6 - SM_PUBLISHED[k][0]) for k, r in rows.items() if k in SM_PUBLISHED}
        v = deterministic(max(off.values()), expected=0.0, tol=0.005, what="largest |ours − published| parameters",
                          unit="M", detail=", ".join(f"{k} {rows[k]['params'] / 1e6:.2f}M" for k in off))
    else:
        v = Verdict(held=None, kind="deterministic", detail="not testable: the run built other models than Table 4's")
    claims.append(decided("the four models have Table 4's parameter counts (66.89M / 60.19M / 86.06M / 63.82M)",
                          "ours rounded to 0.01M equal the published", v, trained=False))
    for ref in (k for k in rows if k != mlp):
        claims.append(decided(
            f"the MLP's throughput at its best batch is ≥ {SM_FASTER:g}× {ref}'s on {device} "
            f"(published {SM_PUBLISHED[mlp][2] / SM_PUBLISHED[ref][2]:.0f}× on an RTX A5000)",
            f"ratio of median images/s > {SM_FASTER:g}",
            ratio_interval(rows[mlp]["throughput"], rows[ref]["throughput"], above=SM_FASTER,
                           what=f"MLP / {ref} images/s"), trained=False))
        claims.append(decided(
            f"the MLP's latency (batch 1) is ≤ 1/{SM_FASTER:g} of {ref}'s on {device} "
            f"(published {SM_PUBLISHED[ref][1] / SM_PUBLISHED[mlp][1]:.0f}×)",
            f"ratio of median seconds {ref} / MLP > {SM_FASTER:g}",
            ratio_interval(rows[ref]["latency_s"], rows[mlp]["latency_s"], above=SM_FASTER,
                           what=f"{ref} / MLP latency"), trained=False))
    return claims


def _analyse_sm_inference(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    res, rows = _results(runs)
    device = res["machine"]["device"]
    built = [{"label": r["label"], "model": r["model"], "kwargs": r["kwargs"]} for r in res["rows"]]
    claims = _sm_claims(rows, built == TABLE4_MODELS, device)
    table = [_row(k, r) for k, r in rows.items()]
    pub = [{"model": k, "published params (M)": p[0], "ours params (M)": round(rows[k]["params"] / 1e6, 2),
            "published GFLOPs (MACs)": p[3], "ours GMACs": round(rows[k]["flops"] / 2e9, 4),
            "published latency ms (A5000)": p[1], f"ours latency ms ({device})": round(1e3 * _med(rows[k]["latency_s"]), 2),
            "published images/s (A5000)": p[2], f"ours images/s ({device})": round(_med(rows[k]["throughput"]), 1),
            "published images/s ratio MLP/x": round(SM_PUBLISHED["B-12/Wi-768"][2] / p[2], 1),
            "ours ratio MLP/x": round(_med(rows["B-12/Wi-768"]["throughput"]) / _med(rows[k]["throughput"]), 1)}
           for k, p in SM_PUBLISHED.items() if k in rows]
    labels = list(rows)
    fig = draw([Bars(f"throughput at the best batch ({device})", "images / s", labels,
                     [_med(rows[k]["throughput"]) for k in labels], yscale="log"),
                Bars(f"latency, batch 1 ({device})", "ms", labels, [1e3 * _med(rows[k]["latency_s"]) for k in labels],
                     yscale="log"),
                Bars("forward FLOPs per image", "GMACs", labels, [rows[k]["flops"] / 2e9 for k in labels], yscale="log")],
               "Scaling MLPs Table 4: inference cost at 64×64")
    return Analysis(table, None, {"sm_inference": fig}, claims, published=pub, notes=_notes(res))


@experiment("sm-inference", "Inference cost: B-12/Wi-768 MLP vs ResNet-152, ViT-B/4, Mixer-B/4 (Scaling MLPs Table 4)",
            analyse=_analyse_sm_inference, default_dataset="synthetic", needs_plateau=False)
def sm_inference(sc: Scale) -> Plan:
    """Scaling MLPs Table 4: at 64×64 an MLP is far cheaper at inference than a CNN, ViT or Mixer.

    Command: ``mlplab reproduce sm-inference --scale cpu``.
    Tests: B-12/Wi-768 inverted-bottleneck MLP, ResNet-152 (first stride removed, no max-pool),
    ViT-B/4 and Mixer-B/4 at 64×64, 1000 classes, random weights: parameters, forward FLOPs,
    latency (batch 1) and throughput at the best batch of a small search, timed interleaved.
    Published: (RTX A5000) 66.89M / 60.19M / 86.06M / 63.82M parameters; 21.2 / 423 / 424 / 400 ms;
    16,063 / 506 / 222 / 319 images/s; 66.8M / 13.07G / 23.08G / 19.36G FLOPs (MACs).
    Verdict: parameters equal at 0.01M; per reference, MLP / reference median images/s and
    reference / MLP median latency above 10, bootstrap 95% interval (``verdicts.ratio_interval``).
    Time: cpu ≈ 3 min on one core (``reproduce --list``); paper the same models on one GPU;
    smoke seconds.
    """
    s = sc.settings(SM_INFERENCE)
    return _plan("table4", s.models, s.timing, {"models": [m["label"] for m in s.models], "image side": 64})


# ------------------------------------------------------------------------------- mixer-cost


@dataclass(frozen=True)
class MixerCost:
    models: list[dict[str, Any]]  # in the published order of throughput, fastest first
    timing: Timing


MIXER_TABLE2 = [
    _model("Mixer-S/32", "mixer_s32", num_classes=1000),
    _model("Mixer-B/16", "mixer_b16", num_classes=1000),
    _model("Mixer-L/16", "mixer_l16", num_classes=1000),
    _model("ViT-L/16", "vit_large", num_classes=1000),
    _model("Mixer-H/14", "mixer_h14", num_classes=1000),
]
MIXER_SMOKE = [  # the same kinds, tiny, at 32×32, the S/32 stand-in with the fewest FLOPs
    _model("Mixer-S/32", "mixer_s32", image_size=32, patch_size=16, hidden_dim=16, depth=1, token_hidden=8,
           channel_hidden=32, num_classes=10),
    _model("Mixer-B/16", "mixer_b16", image_size=32, patch_size=8, hidden_dim=32, depth=2, token_hidden=16,
           channel_hidden=64, num_classes=10),
    _model("Mixer-L/16", "mixer_l16", image_size=32, patch_size=8, hidden_dim=48, depth=3, token_hidden=24,
           channel_hidden=96, num_classes=10),
    _model("ViT-L/16", "vit_large", image_size=32, patch_size=8, dim=48, depth=3, heads=2, num_classes=10),
    _model("Mixer-H/14", "mixer_h14", image_size=32, patch_size=4, hidden_dim=64, depth=4, token_hidden=32,
           channel_hidden=128, num_classes=10),
]

MIXER_COST = {
    "smoke": MixerCost(MIXER_SMOKE, Timing(reps=2, latency_reps=0, search_reps=1, batches=(1, 4), max_call_s=None)),
    # one core at 224×224; Mixer-H/14 and ViT-L/16 take seconds per image on a CPU, so the search
    # stops at passes the cost model puts above 3 s (the big models are timed at batch 1–2)
    "cpu": MixerCost(MIXER_TABLE2, Timing(reps=5, latency_reps=0, search_reps=2, batches=(1, 2, 4, 8, 16, 32, 64),
                                          max_call_s=3.0)),
    "paper": MixerCost(MIXER_TABLE2, Timing(reps=20, latency_reps=0, search_reps=3, batches=(1, 16, 64, 256, 1024),
                                            max_call_s=None, threads=None, clock="wall")),
}

# MLP-Mixer (Tolstikhin et al. 2021) Table 2, images/s per core: (TPUv3, V100)
MIXER_PUBLISHED = {"Mixer-S/32": (11489, 5497), "Mixer-B/16": (1384, 516), "Mixer-L/16": (419, 151),
                   "ViT-L/16": (280, 100), "Mixer-H/14": (194, 58)}
MIXER_RATIO_FACTOR = 2.0  # a published ratio agrees with ours when it is within a factor 2 of our interval
MIXER_ANCHOR = "Mixer-B/16"


def _cost_claims(rows: dict[str, dict[str, Any]], device: str) -> list[Claim]:
    order = [k for k in MIXER_PUBLISHED if k in rows]
    pairs = [ratio_interval(rows[a]["throughput"], rows[b]["throughput"], above=1.0, what=f"{a} / {b} images/s")
             for a, b in zip(order, order[1:])]
    claims = [decided(f"per-core throughput on {device} falls in the published order {' > '.join(order)} "
                      "(TPUv3 and V100 alike)", "each neighbour's ratio of median images/s > 1",
                      all_hold(pairs, "throughput order"), trained=False)]
    parts = []
    for k in order:
        if k == MIXER_ANCHOR:
            continue
        pub = MIXER_PUBLISHED[k][1] / MIXER_PUBLISHED[MIXER_ANCHOR][1]
        what = f"{k} / {MIXER_ANCHOR} images/s (V100 {pub:.3g})"
        parts += [ratio_interval(rows[k]["throughput"], rows[MIXER_ANCHOR]["throughput"], above=pub / MIXER_RATIO_FACTOR,
                                 what=what),
                  ratio_interval(rows[k]["throughput"], rows[MIXER_ANCHOR]["throughput"], below=pub * MIXER_RATIO_FACTOR,
                                 what=what)]
    claims.append(decided(f"each model's throughput relative to {MIXER_ANCHOR} is the published V100 one within a "
                          f"factor {MIXER_RATIO_FACTOR:g}", f"ratio of median images/s inside [published / "
                          f"{MIXER_RATIO_FACTOR:g}, published × {MIXER_RATIO_FACTOR:g}]",
                          all_hold(parts, f"ratios to {MIXER_ANCHOR}"), trained=False))
    return claims


def _analyse_mixer_cost(runs: list[RunRecord], manifest: dict[str, Any]) -> Analysis:
    res, rows = _results(runs)
    device = res["machine"]["device"]
    threads = res["machine"]["threads"] if device == "cpu" else 1
    claims = _cost_claims(rows, device)
    table = [_row(k, r) for k, r in rows.items()]
    a = _med(rows[MIXER_ANCHOR]["throughput"]) if MIXER_ANCHOR in rows else float("nan")
    pub = [{"model": k, "published images/s/core TPUv3": p[0], "published images/s/core V100": p[1],
            f"ours images/s/core ({device})": round(_med(rows[k]["throughput"]) / threads, 2),
            "published ratio to B/16 (TPUv3 / V100)": f"{p[0] / MIXER_PUBLISHED[MIXER_ANCHOR][0]:.3f} / "
                                                       f"{p[1] / MIXER_PUBLISHED[MIXER_ANCHOR][1]:.3f}",
            "ours ratio to B/16": round(_med(rows[k]["throughput"]) / a, 3),
            "ours params (M)": round(rows[k]["params"] / 1e6, 2), "ours GMACs": round(rows[k]["flops"] / 2e9, 2)}
           for k, p in MIXER_PUBLISHED.items() if k in rows]
    labels = list(rows)
    fig = draw([Bars(f"images / s / core ({device})", "images / s / core", labels,
                     [_med(rows[k]["throughput"]) / threads for k in labels], yscale="log"),
                Bars("published images / s / core (V100)", "images / s / core", labels,
                     [MIXER_PUBLISHED.get(k, (0, float("nan")))[1] for k in labels], yscale="log"),
                Bars("forward FLOPs per image", "GMACs", labels, [rows[k]["flops"] / 2e9 for k in labels], yscale="log")],
               "MLP-Mixer Table 2: throughput per core at 224×224")
    return Analysis(table, None, {"mixer_cost": fig}, claims, published=pub, notes=_notes(res))


@experiment("mixer-cost", "Throughput per core, FLOPs and parameters of Mixer-S/32 … H/14 and ViT-L/16 (Mixer Table 2)",
            analyse=_analyse_mixer_cost, default_dataset="synthetic", needs_plateau=False)
def mixer_cost(sc: Scale) -> Plan:
    """MLP-Mixer Table 2's throughput column: Mixer-S/32, B/16, L/16, H/14 and ViT-L/16 at 224.

    Command: ``mlplab reproduce mixer-cost --scale cpu``.
    Tests: images/s per core at the best batch of a small search (one thread on a CPU), forward
    FLOPs and parameters of the five models at 224×224, 1000 classes, random weights, timed interleaved.
    Published: images/s/core TPUv3 / V100: S/32 11,489 / 5,497; B/16 1,384 / 516; L/16 419 / 151;
    ViT-L/16 280 / 100; H/14 194 / 58.
    Verdict: each neighbour in the published order faster (bootstrap interval of the median ratio
    > 1), and each ratio to Mixer-B/16 within a factor 2 of the V100 one.
    Time: cpu ≈ 4 min on one core (``reproduce --list``); paper one GPU; smoke seconds.
    """
    s = sc.settings(MIXER_COST)
    return _plan("table2", s.models, s.timing, {"models": [m["label"] for m in s.models], "image side": 224})


# ------------------------------------------------------------------------------- shared


def _plan(name: str, models: list[dict[str, Any]], t: Timing, settings: dict[str, Any]) -> Plan:
    base = {"models": models, "reps": t.reps, "latency_reps": t.latency_reps, "search_reps": t.search_reps,
            "batches": list(t.batches), "max_call_s": t.max_call_s, "threads": t.threads, "clock": t.clock,
            "run.device": "auto"}
    sweep = Sweep(name, base, seeds=[0], seed_keys=("seed",), task="inference", name_keys=["seed"],
                  description="params / FLOPs / latency / throughput, every model timed interleaved")
    notes = ["random weights (speed does not depend on them); synthetic normal images",
             "FLOPs: matmul FLOPs with multiply-add = 2 (models.counting.count_flops); the papers count MACs (fvcore), "
             "shown as GMACs = FLOPs / 2",
             "the hardware differs from the papers': only ratios between models compare, not absolute speeds"]
    return Plan([[sweep]], notes=notes, settings={**settings, "batches searched": list(t.batches),
                                                  "timed passes": t.reps, "threads": t.threads or "all",
                                                  "clock": t.clock})


def _med(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def _results(runs: list[RunRecord]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    done = [r for r in select(runs, None) if r.results is not None]
    if not done:
        raise ValueError("the inference run has no results yet")
    res = done[0].results
    return res, {r["label"]: r for r in res["rows"]}


def _row(label: str, r: dict[str, Any]) -> dict[str, Any]:
    return {"model": label, "params": r["params"], "GMACs": r["flops"] / 2e9, "FLOPs": r["flops"],
            "latency_ms": 1e3 * _med(r["latency_s"]) if r["latency_s"] else None, "best_batch": r["best_batch"],
            "images_per_s": _med(r["throughput"]), "throughput_reps": len(r["throughput"])}


def _notes(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    where = (f"GPU {m['gpu']}" if m.get("gpu") else
             f"CPU {m['cpu']} ({m['machine_tag']}; {', '.join(m['cpu_flags'])}), {m['threads']} thread(s); no GPU measured")
    clock = {"cpu": "process CPU time (time spent waiting for a core left out)", "wall": "wall-clock time"}
    where += f"; timed by {clock[m.get('clock', 'wall')]}"
    return [f"measured on {where}; torch {m['torch']}; load average before / after: "
            f"{m['loadavg'][0]:.2f} / {res['load_after'][0]:.2f}",
            "the papers timed GPUs/TPUs: a claim about their absolute speeds is not testable here, the ratios are"]


# ------------------------------------------------------------------------------- the task


def build_model(spec: dict[str, Any]):
    """The model of one ``{"model", "kwargs"}`` entry: a reference model by its name in
    ``models.reference.REFERENCE_MODELS``, else a registered one."""
    from ...models.reference import create_reference_model, is_reference_model
    from ...models.registry import create_model

    name, kw = str(spec["model"]), dict(spec.get("kwargs", {}))
    return create_reference_model(name, **kw) if is_reference_model(name) else create_model(name, **kw)


@task("inference")
def inference_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Params, forward FLOPs, latency and throughput of every model in ``models`` (a list of
    ``{"label", "model", "kwargs"}``), timed interleaved by
    :func:`~mlplab.analysis.throughput.measure_inference` with ``reps``, ``latency_reps``,
    ``search_reps``, ``batches``, ``max_call_s`` (on a CPU), ``threads`` and ``clock`` (``cpu``
    on a CPU only; a GPU is always timed by the wall clock); ``run.device`` ``auto`` (CUDA when
    there is one), ``cuda`` or ``cpu``."""
    import os
    import time

    import torch

    from ...analysis.throughput import candidate_batches, machine_record, measure_inference
    from ...models.counting import count_flops, count_params
    from ..cost import cpu_machine

    want = str(o.get("run.device", "auto"))
    device = torch.device("cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu")
    clock = str(o.get("clock", "wall")) if device.type == "cpu" else "wall"
    cpu0 = time.process_time()
    threads_before = torch.get_num_threads()
    if o.get("threads") and device.type == "cpu":
        torch.set_num_threads(int(o["threads"]))
    try:
        models, shapes, batches, rows = {}, {}, {}, {}
        for spec in o["models"]:
            torch.manual_seed(int(o.get("seed", 0)))
            m = build_model(spec).to(device)
            cfg, label = m.config, spec["label"]
            flops = count_flops(m)
            models[label], shapes[label] = m, (cfg.in_chans, cfg.image_size, cfg.image_size)
            est = cpu_machine().example_s(flops, 0.0) / 3  # a forward pass: a third of a training step
            batches[label] = candidate_batches(o["batches"], est, o.get("max_call_s") if device.type == "cpu" else None)
            rows[label] = {"label": label, "model": spec["model"], "kwargs": spec.get("kwargs", {}),
                           "params": count_params(m), "flops": flops, "batches_searched": batches[label]}
        machine = {**machine_record(device), "clock": clock}
        timed = measure_inference(models, shapes, batches, reps=int(o["reps"]), latency_reps=int(o["latency_reps"]),
                                  search_reps=int(o["search_reps"]), device=device, seed=int(o.get("seed", 0)),
                                  clock=clock)
        for k, t in timed.items():
            rows[k].update(t)
        return {"rows": list(rows.values()), "machine": machine, "load_after": list(os.getloadavg()),
                "cpu_s": time.process_time() - cpu0}  # this process's CPU seconds (the estimate's unit on a CPU)
    finally:
        torch.set_num_threads(threads_before)
