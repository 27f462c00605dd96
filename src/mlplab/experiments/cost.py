"""What a plan costs: the one estimate formula behind ``mlplab reproduce --list`` and the
``cost`` of ``experiment.json``.

A training run on the 2-core CPU machine (scales ``cpu``, ``quick``, ``smoke``) takes

    run_s   = epochs · N · t(F, A)  +  evals · N_test · t(F, A) / 3  +  overhead
    t(F, A) = (3F / R + κ·A + τ0) · slowdown(model)

with N training examples per epoch, N_test test examples (an evaluation is a forward pass: a
third of a training step; ``evals`` = 1, the one at the end, plus one every ``run.eval_every``
epochs where a run asks for periodic evaluations, e.g. figS6-S8's loss curves). t(F, A) is a
two-term roofline (compute plus memory traffic) model of a training example:

* 3F / R, the matmuls: F the model's forward matmul FLOPs per example from the analytic counter
  (:func:`mlplab.analysis.cost.config_flops`; 3F = forward + backward, as in nanoGPT's
  ``estimate_mfu``), R the rate at which the training step's GEMMs run;
* κ·A, the memory-bound elementwise work: A the activation elements the forward pass writes per
  example (:func:`mlplab.analysis.cost.config_activations`: every leaf module's output: layer
  norms, activations, the Linears' outputs), κ the seconds per element of writing it, reading it
  back in the backward pass and the residual adds and transposes that go with it;
* τ0, the rest per example: the augmentation, the optimiser step and the Python per step, shared
  by the batch.

Small Mixers (F ≈ 1 MFLOP, A ≈ 40k) are dominated by κ·A, not by their FLOPs; wide models by 3F/R.
``slowdown`` is 1 + (RP_SLOWDOWN − 1) × the share of random-permuted blocks. ``overhead`` is the
process start, imports and data load of one run. Against the whole experiments measured on the
machine (``CALIBRATION``) the estimate is never low: measured/estimated is 0.99 for fig6 cpu,
table1 and fig2d (a 0.5 % margin), 0.91 for fig6 quick, 0.76–0.78 for scaling, figS4 and fig7
(RP_SLOWDOWN is the upper end of its range) and 0.65 for tableS3 (its analysis tasks' hand-set
times). Per example, the timed models are met within 31 % (see ``CALIBRATION``).

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

__all__ = ["RATE", "KAPPA_S", "TAU_S", "RUN_OVERHEAD_S", "RP_SLOWDOWN", "CPU_JOBS", "CALIBRATION", "TRAIN_SIZES",
           "TEST_SIZES", "example_s", "run_s", "run_counts", "spec_s", "makespan", "estimate_cost", "planned_epochs"]

# ---------------------------------------------------------------------------------- constants
# Measured on the project's 2-core AMD EPYC (AVX2 only, no native bf16), torch 2.13.0, fp32,
# eager, batch 256, 1 thread per run with a second job on the other core (load ~2-3). Chosen from
# CALIBRATION as described there: the least overestimate of every measured experiment.
RATE = 67.5e9  # R: FLOP/s of the training step's matmuls at one thread
KAPPA_S = 3.6e-9  # κ: seconds per activation element written by the forward pass (and its backward)
TAU_S = 15e-6  # τ0: seconds per example outside the matmuls and the activations
# Random-permuted blocks gather their activations twice forward and twice backward. Not in the
# calibration runs: an upper bound of the RP/normal step-time ratios of an S-Mixer S = C = 64
# (docs/performance.md, "Mixer training step"), scaled by the share of RP blocks.
RP_SLOWDOWN = 1.46
# per run: process start, imports, data load, model build (smoke runs in-process: seconds)
RUN_OVERHEAD_S = {"smoke": 2.0, "quick": 8.0, "cpu": 8.0}
CPU_JOBS = 2  # runs side by side on the 2-core machine (``--jobs 2``), one thread each

# Finished reproduce folders of 2026-11-24 (AVX2 EPYC, fp32, --jobs 2, load 2-5 from nice-19 jobs):
# median seconds per training example of the runs (``benchmarks/calibrate_cost.py --runs``) with
# F and A from the analytic counters, and the whole experiments' wall minutes. Non-negative least
# squares of s_per_example against (3F, A, 1) over the rows (``benchmarks/calibrate_cost.py
# --calibration``, fit_constants; the table1 pair as one row of their mean) gives R = 63.2 GFLOP/s,
# κ = 3.43 ns, τ0 = 10.3 µs, which puts fig6 cpu (20.3 measured / 19.8 estimated min) and fig2d
# (4.4 / 4.0) low. The constants kept are
# the ones on a grid about that fit (R by 2.5 GFLOP/s, κ by 0.1 ns, τ0 by 1 µs) with the least
# total overestimate of the measured experiments among those that overestimate every one:
# R = 67.5 GFLOP/s, κ = 3.6 ns, τ0 = 15 µs. The rows are then met within 31 % (the S = 124, C = 8
# S-Mixer, whose token maps run as GEMMs of only 8 columns, 30 % low; the others +15–22 %; the
# table1 pair −2 % on its mean, −8 % / +5 % each against that mean). The last row: minutes measured / estimated now (ratio): fig6 cpu 0.99, fig6 quick 0.91,
# scaling 0.76, table1 0.99, figS4 0.76, fig7 0.78, fig2d 0.99, tableS3 0.65; before (R = 20
# GFLOP/s, τ = 60 µs, no κ·A) they were 0.84, 0.78, 0.45, 0.55, 0.69, 0.75, 0.44, 0.65.
CALIBRATION: list[dict[str, Any]] = [
    {"what": "fig6 S-Mixer S=124 C=8, L=4", "flops": 1.01e6, "activations": 25594, "s_per_example": 217e-6,
     "source": "fig6 cpu, 2026-11-24"},
    {"what": "fig6 S-Mixer S=41 C=40, L=4", "flops": 1.31e6, "activations": 44930, "s_per_example": 192e-6,
     "source": "fig6 cpu, 2026-11-24"},
    {"what": "fig6 S-Mixer S=8 C=124, L=4", "flops": 1.42e6, "activations": 36962, "s_per_example": 183e-6,
     "source": "fig6 cpu, 2026-11-24"},
    {"what": "bottleneck MLP B-2/Wi-16", "flops": 0.03e6, "activations": 346, "s_per_example": 15e-6,
     "source": "scaling cpu, 2026-11-24"},
    {"what": "bottleneck MLP B-2/Wi-64", "flops": 0.23e6, "activations": 1354, "s_per_example": 26e-6,
     "source": "scaling cpu, 2026-11-24"},
    {"what": "bottleneck MLP B-2/Wi-256", "flops": 2.50e6, "activations": 5386, "s_per_example": 124e-6,
     "source": "scaling cpu, 2026-11-24"},
    # The two table1 models (L = 2, γ = 4, 28×28) are timed together: 6 runs of 5 epochs took 12.8 min
    # on 2 workers, 3 runs each in sequence, so 256 s per run = 5 · 60000 · t + 10000 · t / 3 + 8 s
    # start-up: t = 818 µs, the mean over the two models. The model is linear in (F, A), so the mean
    # time is the time of the mean F and A; each row carries the pair's mean time.
    {"what": "table1 MLP-Mixer narrow P=7 S=16 C=128", "flops": 9.64e6, "activations": 86026,
     "s_per_example": 818e-6, "pair_mean": True, "source": "derived from the table1 cpu wall time, 2026-11-24"},
    {"what": "table1 MLP-Mixer wide P=4 S=64 C=43", "flops": 9.43e6, "activations": 117056,
     "s_per_example": 818e-6, "pair_mean": True, "source": "derived from the table1 cpu wall time, 2026-11-24"},
    # (measured, estimated, epochs of the plan that was timed; None: the plan's own). fig6 cpu and
    # table1 were timed at 10 and 5 epochs, fig6 quick and fig2d at 6 and 10; their plans have since
    # grown to 12, 11, 12 and 25.
    {"what": "experiment wall minutes (measured / estimated)", "fig6 cpu": (20.3, 20.4, 10),
     "fig6 quick": (8.1, 8.9, 6), "scaling cpu": (3.4, 4.5, None), "table1 cpu": (12.8, 12.9, 5),
     "figS4 cpu": (13.1, 17.2, None), "fig7 cpu": (16.4, 21.1, None), "fig2d cpu": (4.4, 4.4, 10),
     "tableS3 cpu": (1.3, 2.0, None), "source": "reproduce --jobs 2, 2026-11-24"},
]

# training/test-set sizes for runs that do not name a subset
TRAIN_SIZES = {"fashion_mnist": 60000, "mnist": 60000, "cifar10": 50000, "cifar100": 50000, "stl10": 5000,
               "tiny_imagenet": 100000, "imagefolder": 1281167, "synthetic": 1024}
TEST_SIZES = {"fashion_mnist": 10000, "mnist": 10000, "cifar10": 10000, "cifar100": 10000, "stl10": 8000,
              "tiny_imagenet": 10000, "imagefolder": 50000, "synthetic": 256}


# ---------------------------------------------------------------------------------- the formula


def example_s(flops: float, activations: float, slowdown: float = 1.0) -> float:
    """t(F, A) = (3F/R + κ·A + τ0)·slowdown: seconds per training example of a model with ``flops``
    forward matmul FLOPs and ``activations`` activation elements written per example."""
    return (3.0 * flops / RATE + KAPPA_S * activations + TAU_S) * slowdown


def run_s(flops: float, activations: float, examples: float, epochs: float, test_examples: float = 0.0,
          slowdown: float = 1.0, overhead: float = RUN_OVERHEAD_S["cpu"]) -> float:
    """Seconds of one training run (see the module docstring)."""
    t = example_s(flops, activations, slowdown)
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
    flops, acts, rp_share = run_counts(o)
    slow = 1.0 + (RP_SLOWDOWN - 1.0) * rp_share
    ds = str(o.get("data.dataset"))
    epochs = planned_epochs(o)
    every = int(o.get("run.eval_every") or 0)
    evals = 1 + (int(epochs // every) if every > 0 else 0)
    return run_s(flops, acts, _train_examples(o), epochs, evals * (o.get("data.test_subset") or TEST_SIZES.get(ds, 10000)),
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
