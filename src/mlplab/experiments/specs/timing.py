"""How sm-inference and mixer-cost time their models: the ``inference`` task's settings
(:class:`Timing`), its one interleaved run as a plan (:func:`timing_plan`), and the pieces both
analyses read from its results. FLOPs are the one analytic counter's
(:func:`mlplab.models.counting.count_flops`, multiply-add = 2); the papers count a multiply-add
as one FLOP (fvcore's convention), so the reports show GMACs = FLOPs / 2 beside them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..aggregate import RunRecord, select
from ..measures import median
from ..plan import Plan
from ..sweep import Sweep

__all__ = ["Timing", "timed_model", "timing_plan", "timing_results", "timing_row", "timing_notes"]


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


def timed_model(label: str, model: str, **kwargs: Any) -> dict[str, Any]:
    """One entry of the task's ``models``: a label, a registered or reference model and its kwargs."""
    return {"label": label, "model": model, "kwargs": kwargs}


def timing_plan(name: str, models: list[dict[str, Any]], t: Timing, settings: dict[str, Any]) -> Plan:
    """One ``inference`` run (sweep ``name``) that times every one of ``models`` interleaved."""
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


def timing_results(runs: list[RunRecord]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The finished ``inference`` run's results and its rows by label."""
    done = [r for r in select(runs, None) if r.results is not None]
    if not done:
        raise ValueError("the inference run has no results yet")
    res = done[0].results
    return res, {r["label"]: r for r in res["rows"]}


def timing_row(label: str, r: dict[str, Any]) -> dict[str, Any]:
    """A model's row of the report's table."""
    return {"model": label, "params": r["params"], "GMACs": r["flops"] / 2e9, "FLOPs": r["flops"],
            "latency_ms": 1e3 * median(r["latency_s"]) if r["latency_s"] else None, "best_batch": r["best_batch"],
            "images_per_s": median(r["throughput"]), "throughput_reps": len(r["throughput"])}


def timing_notes(res: dict[str, Any]) -> list[str]:
    """Where and how the models were timed: machine, clock, torch, load."""
    m = res["machine"]
    where = (f"GPU {m['gpu']}" if m.get("gpu") else
             f"CPU {m['cpu']} ({m['machine_tag']}; {', '.join(m['cpu_flags'])}), {m['threads']} thread(s); "
             "no GPU measured")
    clock = {"cpu": "process CPU time (time spent waiting for a core left out)", "wall": "wall-clock time"}
    where += f"; timed by {clock[m.get('clock', 'wall')]}"
    return [f"measured on {where}; torch {m['torch']}; load average before / after: "
            f"{m['loadavg'][0]:.2f} / {res['load_after'][0]:.2f}",
            "the papers timed GPUs/TPUs: a claim about their absolute speeds is not testable here, the ratios are"]
