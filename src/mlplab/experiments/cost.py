"""What a plan costs: the one estimate formula behind ``mlplab reproduce --list`` and the
``cost`` of ``experiment.json``.

A training run on the 2-core CPU machine (scales ``cpu``, ``quick``, ``smoke``) takes

    run_s = epochs · N · t(F)  +  evals · N_test · t(F) / 3  +  overhead
    t(F)  = (3F / R + τ) · slowdown(model)

with N training examples per epoch, N_test test examples (an evaluation is a forward pass: a
third of a training step; ``evals`` = 1, the one at the end, plus one every ``run.eval_every``
epochs where a run asks for periodic evaluations, e.g. figS6-S8's loss curves), F the model's forward matmul FLOPs per example from
the analytic counter (:func:`mlplab.analysis.cost.config_flops`; 3F = forward + backward, as in
nanoGPT's ``estimate_mfu``), R the rate at which the training step's matmuls run, and τ the time
per example of everything that is not a matmul (layer norms, activations, transposes, the
augmentation, the optimiser step and the Python per step, shared by the batch). Small Mixers
(F ≲ 1 MFLOP) are dominated by τ, so their effective rate 3F/t(F) lies far below R; wide models
approach R. ``overhead`` is the process start, imports and data load of one run.

A plan's wall time: runs are dealt in order to ``jobs`` workers as the local executor does (each
takes the next run when its last one ends); stages run one after another. The estimate is for
``--jobs 2`` on 2 cores: two single-thread runs side by side, which is how the constants were
measured. Analysis-only tasks (CKA, spectra, timings) and the paper scale (V100-class guesses)
keep their sweep's hand-set ``est_epoch_s``.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

from .plan import Plan
from .sweep import RunSpec, Sweep, expand, nest_overrides

__all__ = ["RATE", "TAU_S", "RUN_OVERHEAD_S", "RP_SLOWDOWN", "CPU_JOBS", "CALIBRATION", "TRAIN_SIZES",
           "TEST_SIZES", "example_s", "run_s", "run_flops", "spec_s", "makespan", "estimate_cost", "planned_epochs"]

# ---------------------------------------------------------------------------------- constants
# Measured on the project's 2-core AMD EPYC (AVX2 only, no native bf16), torch 2.13.0, fp32,
# eager, batch 256, 1 thread per run with a second job on the other core (load ~2-3); fitted
# by least squares of seconds per example against 3F over CALIBRATION (fit_constants).
RATE = 20.0e9  # R: FLOP/s of the training step's matmuls at one thread
TAU_S = 60e-6  # τ: seconds per example outside the matmuls
# Random-permuted blocks gather their activations twice forward and twice backward. Not in the
# calibration runs: README "Mixer training step" measured RP/normal = 1.33–1.46 per step for an
# S-Mixer S = C = 64 (fp32 eager, 1 thread); the upper end is used, scaled by the share of RP blocks.
RP_SLOWDOWN = 1.46
# per run: process start, imports, data load, model build (smoke runs in-process: seconds)
RUN_OVERHEAD_S = {"smoke": 2.0, "quick": 8.0, "cpu": 8.0}
CPU_JOBS = 2  # runs side by side on the 2-core machine (``--jobs 2``), one thread each

# Finished reproduce folders read by ``benchmarks/calibrate_cost.py --runs`` (2026-11-24, AVX2 EPYC,
# fp32, --jobs 2, load 2-5 from nice-19 jobs): median seconds per training example and the whole
# experiments' wall minutes against this module's estimate. One (R, τ) does not fit both families
# (its least-squares fit over the 63 runs, R = 40.7 GFLOP/s and τ = 36 µs, puts the Mixers 25-50%
# low), so RATE and TAU_S are kept: they overestimate every measured experiment, which keeps the
# "≤ 30 minutes" of ``reproduce --list`` on the safe side.
CALIBRATION: list[dict[str, Any]] = [
    {"what": "fig6 S-Mixer S=124 C=8, L=4", "flops": 1.01e6, "s_per_example": 217e-6, "source": "fig6 cpu, 2026-11-24"},
    {"what": "fig6 S-Mixer S=41 C=40, L=4", "flops": 1.31e6, "s_per_example": 192e-6, "source": "fig6 cpu, 2026-11-24"},
    {"what": "fig6 S-Mixer S=8 C=124, L=4", "flops": 1.42e6, "s_per_example": 183e-6, "source": "fig6 cpu, 2026-11-24"},
    {"what": "bottleneck MLP B-2/Wi-16", "flops": 0.03e6, "s_per_example": 15e-6, "source": "scaling cpu, 2026-11-24"},
    {"what": "bottleneck MLP B-2/Wi-64", "flops": 0.23e6, "s_per_example": 26e-6, "source": "scaling cpu, 2026-11-24"},
    {"what": "bottleneck MLP B-2/Wi-256", "flops": 2.50e6, "s_per_example": 124e-6, "source": "scaling cpu, 2026-11-24"},
    {"what": "experiment wall minutes (measured / estimated)", "fig6 cpu": (20.3, 24.1), "fig6 quick": (8.1, 10.4),
     "scaling cpu": (3.4, 7.6), "source": "reproduce --jobs 2, 2026-11-24"},
]

# training/test-set sizes for runs that do not name a subset
TRAIN_SIZES = {"fashion_mnist": 60000, "mnist": 60000, "cifar10": 50000, "cifar100": 50000, "stl10": 5000,
               "tiny_imagenet": 100000, "imagefolder": 1281167, "synthetic": 1024}
TEST_SIZES = {"fashion_mnist": 10000, "mnist": 10000, "cifar10": 10000, "cifar100": 10000, "stl10": 8000,
              "tiny_imagenet": 10000, "imagefolder": 50000, "synthetic": 256}


# ---------------------------------------------------------------------------------- the formula


def example_s(flops: float, slowdown: float = 1.0) -> float:
    """t(F): seconds per training example of a model with ``flops`` forward FLOPs per example."""
    return (3.0 * flops / RATE + TAU_S) * slowdown


def run_s(flops: float, examples: float, epochs: float, test_examples: float = 0.0, slowdown: float = 1.0,
          overhead: float = RUN_OVERHEAD_S["cpu"]) -> float:
    """Seconds of one training run (see the module docstring)."""
    t = example_s(flops, slowdown)
    return epochs * examples * t + test_examples * t / 3.0 + overhead


@functools.lru_cache(maxsize=None)
def _model_counts(name: str, kwargs: tuple) -> tuple[int, int]:
    from ..analysis.cost import config_activations, config_flops

    kw = dict(kwargs)
    return config_flops(name, **kw), config_activations(name, **kw)


def _model_kwargs(o: dict[str, Any]) -> dict[str, Any]:
    """The run's model kwargs with the image shape and classes its dataset gives it."""
    from ..data.table import get_info

    info = get_info(str(o.get("data.dataset", "cifar10")))
    kw = dict(nest_overrides(o).get("model.kwargs", {}))
    side = o.get("data.image_size") or info.image_size[0]
    kw.update(image_size=int(side), in_chans=info.in_chans, num_classes=info.num_classes)
    return kw


def _rp_share(name: str, kw: dict[str, Any]) -> float:
    """Fraction of a Mixer's blocks that are random-permuted."""
    rb = kw.get("rp_blocks")
    if name.startswith("rp_"):
        return 1.0
    if rb in (None, "none"):
        return 0.0
    depth = max(1, int(kw.get("depth", 1)))
    return 1.0 if rb == "all" else len(list(rb)) / depth


def planned_epochs(o: dict[str, Any]) -> float:
    """Epochs of a training run: ``schedule.epochs``, or steps × batch (or examples) over the
    training-set size when the duration is given in ``schedule.steps``/``examples``."""
    if o.get("schedule.epochs") is not None:
        return float(o["schedule.epochs"])
    n = _train_examples(o)
    if o.get("schedule.steps") is not None:
        return float(o["schedule.steps"]) * float(o.get("run.batch_size") or 128) / n
    if o.get("schedule.examples") is not None:
        return float(o["schedule.examples"]) / n
    return 1.0


def _train_examples(o: dict[str, Any]) -> float:
    n = o.get("data.train_subset") or TRAIN_SIZES.get(str(o.get("data.dataset")), 50000)
    return float(n) * (1.0 - float(o.get("data.val_fraction") or 0.0))


def run_counts(o: dict[str, Any]) -> tuple[int, int, float]:
    """Forward FLOPs F and activation elements A per example of a planned training run and the
    share of its blocks that are random-permuted: the model facts the estimate uses (also for
    calibration)."""
    kw = _model_kwargs(o)
    name = str(o["model.name"])
    flops, acts = _model_counts(name, tuple(sorted((k, _hashable(v)) for k, v in kw.items())))
    return flops, acts, _rp_share(name, kw)


def spec_s(spec: RunSpec, scale: str, est_epoch_s: float = 0.0, epochs: float = 1.0) -> float:
    """Estimated seconds of one run: the formula for training runs on the CPU machine, else the
    sweep's ``est_epoch_s`` × ``epochs`` (paper scale, analysis tasks)."""
    o = spec.overrides
    if spec.task != "train" or scale == "paper":
        return est_epoch_s * epochs + (60.0 if scale == "paper" and spec.task == "train" else 0.0)
    flops, rp_share = run_flops(o)
    slow = 1.0 + (RP_SLOWDOWN - 1.0) * rp_share
    ds = str(o.get("data.dataset"))
    epochs = planned_epochs(o)
    every = int(o.get("run.eval_every") or 0)
    evals = 1 + (int(epochs // every) if every > 0 else 0)
    return run_s(flops, _train_examples(o), epochs, evals * (o.get("data.test_subset") or TEST_SIZES.get(ds, 10000)),
                 slow, RUN_OVERHEAD_S.get(scale, RUN_OVERHEAD_S["cpu"]))


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def makespan(seconds: Sequence[float], jobs: int) -> float:
    """Wall time of runs taken in order by ``jobs`` workers, each starting the next run as soon as
    it is free (the local executor)."""
    free = [0.0] * max(1, int(jobs))
    for s in seconds:
        i = free.index(min(free))
        free[i] += s
    return max(free)


def estimate_cost(plan: Plan, scale: str = "cpu", jobs: int | None = None) -> dict[str, float]:
    """runs, run-epochs and estimated wall seconds of a plan at ``scale`` with ``jobs`` workers
    (default: ``CPU_JOBS`` on the CPU machine, 1 GPU at paper scale)."""
    jobs = jobs or (1 if scale == "paper" else CPU_JOBS)
    runs = epochs = wall = 0.0
    for stage in plan.stages:
        secs = []
        for sw in stage:
            specs = expand(sw)
            runs += len(specs)
            epochs += len(specs) * sw.epochs
            secs += [spec_s(s, scale, sw.est_epoch_s, sw.epochs) for s in specs]
        wall += makespan(secs, jobs)
    return {"runs": int(runs), "run_epochs": epochs, "est_s": wall, "jobs": jobs}


def sweep_epochs(sw: Sweep) -> float:
    """Epochs per run of a training sweep from its overrides (after ``--set``)."""
    return planned_epochs(sw.base_dict()) if sw.task == "train" else sw.epochs
