"""What a plan costs: the one estimate formula behind ``mlplab reproduce --list`` and the
``cost`` of ``experiment.json``.

A training run takes

    run_s   = epochs · N · t(F, A)  +  steps · τs  +  evals · N_test · t(F, A) / 3  +  overhead
    t(F, A) = (3F / R + κ·A + τ0) · slowdown(model)

with N training examples per epoch, N_test test examples (an evaluation is a forward pass: a
third of a training step; ``evals`` = 1, the one at the end, plus one every ``run.eval_every``
epochs). t(F, A) is a two-term roofline model of a training example: 3F / R the matmuls (F the
forward matmul FLOPs per example, :func:`mlplab.analysis.cost.config_flops`; 3F = forward +
backward, as nanoGPT's ``estimate_mfu``), κ·A the memory-bound elementwise work (A the activation
elements the forward pass writes, :func:`mlplab.analysis.cost.config_activations`), τ0 the rest
per example (augmentation, Python), τs the rest per optimiser step (the step's dispatch and
optimiser update: what makes a small batch slow per example; ``steps`` = epochs · ⌈N / batch⌉).
``slowdown`` is 1 + (RP slowdown − 1) × the share of random-permuted blocks; ``overhead`` the
start-up of one run (the machine's ``startup_s``; in-process at the smoke scale).

Two machines carry constants: the CPU machine of the ``cpu``, ``quick`` and ``smoke`` scales (2
cores, ``--jobs 2``, one thread per run; R, κ, τ0, τs and the start-up fitted to each CPU kind's
committed runs, ``data/cost_calibration.json`` ``machines``; elsewhere the module constants, fitted
to timed runs and whole experiments, ``rows``: every measured experiment is estimated at or above its
time), and the ``paper`` scale's one V100, whose R, τ0 and RP slowdown follow from the paper's own
Table S.3 timings (``paper_machine``: the SW-MLP and the MLP-Mixer write the same activations, so
their difference gives R and the Mixer then τ0; κ is not identified and taken as 0).

Analysis tasks (spectra, CKA, pictures, timings) count their work (:func:`task_unit_s`; the
timings of ``cost`` are training steps at t(F, A)), plus the start-up of a run. A plan's
wall time: runs are dealt in order to ``jobs`` workers as the local executor does; stages run one
after another.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any, Sequence

from .plan import Plan
from .sweep import RunSpec, Sweep, expand, nest_overrides, seed_groups

__all__ = ["RATE", "KAPPA_S", "TAU_S", "RUN_OVERHEAD_S", "RP_SLOWDOWN", "CPU_JOBS", "Machine", "cpu_machine",
           "paper_machine", "host_tag", "calibration", "TRAIN_SIZES", "TEST_SIZES", "task_unit_s", "TASK_S",
           "example_s", "run_s", "run_counts", "split_examples", "spec_s", "makespan", "longest_first", "estimate_cost",
           "planned_epochs", "lockstep_factor"]

# ---------------------------------------------------------------------------------- constants
# The CPU machine: a 2-core AMD EPYC (AVX2), torch 2.13.0, fp32, eager, batch 256, 1 thread per
# run with a second job on the other core; chosen from ``calibration()["rows"]`` (see its "fit").
RATE = 67.5e9  # R: FLOP/s of the training step's matmuls at one thread
KAPPA_S = 3.6e-9  # κ: seconds per activation element written by the forward pass (and its backward)
TAU_S = 15e-6  # τ0: seconds per example outside the matmuls and the activations
# Random-permuted blocks gather their activations twice forward and twice backward: RP/normal
# per step of an S-Mixer S = C = 64 (fp32 eager, 1 thread) is 1.33–1.46; the upper end, scaled by
# the share of RP blocks.
RP_SLOWDOWN = 1.46
# per run: process start, imports, data load, model build (smoke runs in-process: seconds); "cpu"
# where a CPU kind has no fitted start-up (Machine.startup_s)
RUN_OVERHEAD_S = {"smoke": 2.0, "cpu": 8.0, "paper": 60.0}
CPU_JOBS = 2  # runs side by side on the 2-core machine (``--jobs 2``), one thread each


@dataclass(frozen=True)
class Machine:
    """The constants of t(F, A) on one machine."""

    name: str
    rate: float  # R, FLOP/s
    kappa: float  # κ, s per activation element
    tau: float  # τ0, s per example
    rp_slowdown: float
    startup_s: float = RUN_OVERHEAD_S["cpu"]  # a run's start-up: process, imports, data, model
    step_s: float = 0.0  # τs, s per optimiser step beyond its examples' (0: folded into τ0)

    def example_s(self, flops: float, activations: float, slowdown: float = 1.0) -> float:
        return (3.0 * flops / self.rate + self.kappa * activations + self.tau) * slowdown


@functools.lru_cache(maxsize=None)
def calibration() -> dict[str, Any]:
    """The measurements the constants come from (``data/cost_calibration.json``): timed models
    (``rows``), whole experiments' wall minutes, and the paper's Table S.3 (``paper_machine``)."""
    return json.loads(resources.files(__package__).joinpath("data/cost_calibration.json").read_text())


def task_unit_s(task: str) -> float:
    """Seconds per unit of an analysis task's work on the CPU machine (``calibration()["task_units"]``:
    per (seed, width) of ``spectrum``, per trial, per problem, per test example of ``cka``, per
    matmul weight built by ``cost``)."""
    return float(calibration()["task_units"][task]["s"])


def host_tag() -> str:
    """This machine's CPU kind (``utils.cpu.machine_tag``): which calibration an estimate uses."""
    from ..utils.cpu import machine_tag

    return machine_tag()


def cpu_machine(tag: str | None = None) -> Machine:
    """The 2-core CPU machine of CPU kind ``tag`` (default: this one, :func:`host_tag`): the
    constants fitted to that kind's committed runs (``calibration()["machines"][tag]``, from each
    run's CPU seconds: ``benchmarks/calibrate_cost.py --results``) when there are some, else the
    module constants (a 2-core AVX2 EPYC, fp32), read at call time."""
    tag = tag or host_tag()
    fit = calibration().get("machines", {}).get(tag)
    if fit:
        return Machine(f"2 CPU cores ({tag}: fitted to {fit['runs']} runs)", fit["rate"], fit["kappa"], fit["tau"],
                       fit["rp_slowdown"], fit["overhead_s"], fit.get("step_s", 0.0))
    return Machine("2 CPU cores", RATE, KAPPA_S, TAU_S, RP_SLOWDOWN)


@functools.lru_cache(maxsize=None)
def paper_machine() -> Machine:
    """One V100 as the paper timed it (Table S.3): R from the SW-MLP − MLP-Mixer difference (same
    activations), τ0 from the MLP-Mixer, the RP slowdown from the RP-Mixer over the MLP-Mixer."""
    t = calibration()["paper_machine"]
    per = {k: t[k]["s_per_epoch"] / t["examples"] for k in ("mixer", "rp_mixer", "sw_mlp")}
    rate = 3.0 * (t["sw_mlp"]["flops"] - t["mixer"]["flops"]) / (per["sw_mlp"] - per["mixer"])
    tau = per["mixer"] - 3.0 * t["mixer"]["flops"] / rate
    return Machine("1 V100 (the paper's Table S.3)", rate, 0.0, tau, per["rp_mixer"] / per["mixer"],
                   RUN_OVERHEAD_S["paper"])


# training/test-set sizes for runs that do not name a subset
TRAIN_SIZES = {"fashion_mnist": 60000, "mnist": 60000, "cifar10": 50000, "cifar100": 50000, "stl10": 5000,
               "tiny_imagenet": 100000, "imagefolder": 1281167, "synthetic": 1024}
TEST_SIZES = {"fashion_mnist": 10000, "mnist": 10000, "cifar10": 10000, "cifar100": 10000, "stl10": 8000,
              "tiny_imagenet": 10000, "imagefolder": 50000, "synthetic": 256}


# ---------------------------------------------------------------------------------- the formula


def example_s(flops: float, activations: float, slowdown: float = 1.0, machine: Machine | None = None) -> float:
    """t(F, A) = (3F/R + κ·A + τ0)·slowdown: seconds per training example of a model with ``flops``
    forward matmul FLOPs and ``activations`` activation elements written per example (on the
    CPU machine unless ``machine`` is given)."""
    return (machine or cpu_machine()).example_s(flops, activations, slowdown)


def run_s(flops: float, activations: float, examples: float, epochs: float, test_examples: float = 0.0,
          slowdown: float = 1.0, overhead: float | None = None, machine: Machine | None = None,
          steps: float = 0.0) -> float:
    """Seconds of one training run of ``steps`` optimiser steps (see the module docstring);
    ``overhead``: its start-up, the machine's unless given."""
    machine = machine or cpu_machine()
    t = machine.example_s(flops, activations, slowdown)
    start = machine.startup_s if overhead is None else overhead
    return epochs * examples * t + steps * machine.step_s + test_examples * t / 3.0 + start


@functools.lru_cache(maxsize=None)
def _model_counts(name: str, kwargs: tuple) -> tuple[int, int]:
    from ..analysis.cost import config_activations, config_flops

    kw = dict(kwargs)
    return config_flops(name, **kw), config_activations(name, **kw)


def _model_kwargs(o: dict[str, Any]) -> dict[str, Any]:
    """The run's model kwargs with the image shape and classes its dataset gives it."""
    from ..data.table import get_info, restrict_classes

    info = restrict_classes(get_info(str(o.get("data.dataset", "cifar10"))), o.get("data.classes"))
    kw = dict(nest_overrides(o).get("model.kwargs", {}))
    side = o.get("data.image_size") or info.image_size[0]
    # a dataset whose classes are counted when it loads (a pack, an image folder): the given count, else 1000
    kw.update(image_size=int(side), in_chans=info.in_chans,
              num_classes=info.num_classes or int(kw.get("num_classes") or 1000))
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
        return float(o["schedule.steps"]) * _batch_size(o) / n
    if o.get("schedule.examples") is not None:
        return float(o["schedule.examples"]) / n
    return 1.0


def _batch_size(o: dict[str, Any]) -> int:
    """A run's ``run.batch_size``, or the config's default."""
    from ..train.config import RunSection

    return int(o.get("run.batch_size") or RunSection.batch_size)


def _train_examples(o: dict[str, Any]) -> float:
    return split_examples(o, "train") * (1.0 - float(o.get("data.val_fraction") or 0.0))


def split_examples(o: dict[str, Any], split: str, dataset: str | None = None) -> float:
    """Examples in a run's ``split`` ("train" or "test", before a validation fraction is held out):
    ``data.<split>_subset`` when given, else the split's size (:data:`TRAIN_SIZES`,
    :data:`TEST_SIZES`) times the share of the dataset's classes that ``data.classes`` keeps
    (balanced classes). ``dataset``: when the overrides do not name it (an analysis task's data)."""
    if o.get(f"data.{split}_subset"):
        return float(o[f"data.{split}_subset"])
    ds = dataset or str(o.get("data.dataset"))
    n = float(TRAIN_SIZES.get(ds, 50000) if split == "train" else TEST_SIZES.get(ds, 10000))
    if o.get("data.classes"):
        from ..data.table import get_info

        n *= len(o["data.classes"]) / (get_info(ds).num_classes or len(o["data.classes"]))
    return n


def run_counts(o: dict[str, Any]) -> tuple[int, int, float]:
    """Forward FLOPs F and activation elements A per example of a planned training run and the
    share of its blocks that are random-permuted: the model facts the estimate uses (also for
    calibration)."""
    kw = _model_kwargs(o)
    name = str(o["model.name"])
    flops, acts = _model_counts(name, tuple(sorted((k, _hashable(v)) for k, v in kw.items())))
    return flops, acts, _rp_share(name, kw)


def spec_s(spec: RunSpec, scale: str, est_epoch_s: float = 0.0, epochs: float = 1.0) -> float:
    """Estimated seconds of one run: the formula for training runs (the CPU machine, or the V100
    at paper scale), the registered task's estimate for analysis runs; a task of a user's sweep
    file (``"module:function"``) takes its sweep's ``est_epoch_s`` × ``epochs``."""
    o = spec.overrides
    machine = paper_machine() if scale == "paper" else cpu_machine()
    overhead = RUN_OVERHEAD_S["smoke"] if scale == "smoke" else machine.startup_s
    if spec.task != "train":  # an analysis process: a CPU run's start-up at every scale but smoke
        task_s = TASK_S.get(spec.task)
        return min(overhead, cpu_machine().startup_s) + (task_s(o, machine) if task_s else est_epoch_s * epochs)
    flops, acts, rp_share = run_counts(o)
    slow = 1.0 + (machine.rp_slowdown - 1.0) * rp_share
    epochs = planned_epochs(o)
    every = int(o.get("run.eval_every") or 0)
    evals = 1 + (int(epochs // every) if every > 0 else 0)
    n = _train_examples(o)
    steps = epochs * math.ceil(n / _batch_size(o))
    return run_s(flops, acts, n, epochs, evals * split_examples(o, "test"), slow, overhead, machine, steps)


# ---------------------------------------------------------------------------------- analysis tasks


def spectrum_task_s(o: dict[str, Any], machine: Machine) -> float:
    """``spectrum``: one λ_max per (seed, width)."""
    return task_unit_s("spectrum") * int(o.get("seeds", 1)) * len(o["tokens"])


def normalised_spectrum_task_s(o: dict[str, Any], machine: Machine) -> float:
    """``normalised_spectrum``: one sparse SVD per trial."""
    return task_unit_s("normalised_spectrum") * int(o["trials"])


def cka_task_s(o: dict[str, Any], machine: Machine) -> float:
    """``cka``: ``batches`` × ``batch_size`` test examples through both models."""
    return task_unit_s("cka") * int(o.get("batches", 10)) * int(o.get("batch_size", 256))


def linear_eval_task_s(o: dict[str, Any], machine: Machine) -> float:
    """``linear_eval``: the frozen features of every training and test example of the evaluated
    data and the ridge probe on them (``linear_eval`` per example: :func:`split_examples`, the
    dataset Fashion-MNIST unless named), and one logistic fit per few-shot draw of each k
    (``linear_eval_fit``: ``draws`` × ``len(shots)``)."""
    ds = str(o.get("data.dataset") or "fashion_mnist")
    n = split_examples(o, "train", ds) + split_examples(o, "test", ds)
    fits = int(o.get("draws", 5)) * len(o.get("shots") or [])
    return task_unit_s("linear_eval") * n + task_unit_s("linear_eval_fit") * fits


def pictures_task_s(o: dict[str, Any], machine: Machine) -> float:
    return task_unit_s("pictures")


def implicit_bias_task_s(o: dict[str, Any], machine: Machine) -> float:
    return task_unit_s("implicit_bias")


def echo_task_s(o: dict[str, Any], machine: Machine) -> float:
    return float(o.get("sleep") or 0.0)


def cost_task_s(o: dict[str, Any], machine: Machine) -> float:
    """``cost``: build each model, then ``steps`` + 1 interleaved training steps of ``batch``
    examples of each at t(F, A) (an SW-MLP stored as CSR nonzeros counted as its masked twin:
    counting it would draw its masks)."""
    total = 0.0
    for spec in o["models"]:
        name, kw = str(spec["model"]), {k: v for k, v in spec.get("kwargs", {}).items() if k != "storage"}
        flops, acts = _model_counts(name, tuple(sorted((k, _hashable(v)) for k, v in kw.items())))
        rp = 1.0 + (machine.rp_slowdown - 1.0) * _rp_share(name, kw)
        steps = int(o.get("steps", 20)) + 1
        total += (task_unit_s("cost_build") * flops / 2
                  + steps * (int(o.get("batch", 128)) * machine.example_s(flops, acts, rp) + machine.step_s))
    return total


@functools.lru_cache(maxsize=None)
def _built_counts(name: str, kwargs: tuple) -> tuple[int, int]:
    """(params, forward matmul FLOPs) of a registered or reference model, built without
    initialisation (Mixers from their config)."""
    from ..analysis.cost import mixer_counts, skip_init
    from ..models.counting import count_flops, count_params
    from ..models.mixer import MixerConfig
    from ..models.reference import create_reference_model, is_reference_model
    from ..models.registry import create_model, model_config

    kw = {k: list(v) if isinstance(v, tuple) else v for k, v in kwargs}
    if not is_reference_model(name) and isinstance(model_config(name, **kw), MixerConfig):
        c = mixer_counts(model_config(name, **kw))
        return c["params"], c["flops"]
    with skip_init():
        m = create_reference_model(name, **kw) if is_reference_model(name) else create_model(name, **kw)
    return count_params(m), count_flops(m)


def inference_task_s(o: dict[str, Any], machine: Machine) -> float:
    """``inference``: per model, its build (``cost_build`` per parameter) and its forward passes at
    the matmul rate (a forward pass is a third of a training example's 3F/R + τ0): warm-up and
    latency passes of one image, warm-up and search passes at each candidate batch, warm-up and
    timed passes at the largest candidate (the best batch is not known in advance)."""
    from ..analysis.throughput import candidate_batches

    total = 0.0
    for spec in o["models"]:
        params, flops = _built_counts(str(spec["model"]),
                                      tuple(sorted((k, _hashable(v)) for k, v in spec.get("kwargs", {}).items())))
        e = machine.example_s(flops, 0.0) / 3
        bs = candidate_batches(o["batches"], e, o.get("max_call_s"))
        lat = (1 + int(o["latency_reps"])) * e if int(o["latency_reps"]) else 0.0
        total += (task_unit_s("cost_build") * params + lat + (1 + int(o["search_reps"])) * sum(bs) * e
                  + (1 + int(o["reps"])) * max(bs) * e)
    return total


def finetune_task_s(o: dict[str, Any], machine: Any) -> float:
    """``finetune``: a training run of its overrides (the checkpoint's read is noise beside it)."""
    scale = "paper" if machine == paper_machine() else "cpu"
    ov = {k: v for k, v in o.items() if k != "pretrained"}
    return spec_s(RunSpec("finetune", ov, task="train"), scale)


MIXER_WEIGHTS_S = 2.0  # seconds per analysed run: two models' first blocks, a few small FFTs


def mixer_weights_task_s(o: dict[str, Any], machine: Machine) -> float:
    """``mixer_weights``: a fixed time per analysed run."""
    return MIXER_WEIGHTS_S


# the estimate of each registered task (``mlplab.experiments.tasks.TASKS``), by its name
TASK_S = {"spectrum": spectrum_task_s, "normalised_spectrum": normalised_spectrum_task_s, "cka": cka_task_s,
          "pictures": pictures_task_s, "linear_eval": linear_eval_task_s, "implicit_bias": implicit_bias_task_s,
          "cost": cost_task_s, "echo": echo_task_s, "inference": inference_task_s, "finetune": finetune_task_s,
          "mixer_weights": mixer_weights_task_s}


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def makespan(seconds: Sequence[float], jobs: int) -> float:
    """Wall time of runs taken in the given order by ``jobs`` workers, each starting the next run as
    soon as it is free (the local executor, after :func:`longest_first`)."""
    free = [0.0] * max(1, int(jobs))
    for s in seconds:
        i = free.index(min(free))
        free[i] += s
    return max(free)


def longest_first(seconds: Sequence[float]) -> list[int]:
    """Positions of a stage's jobs in the order the local executor starts them: the longest
    estimate first, ties in the sweep's order (Graham's LPT rule; its makespan is within 4/3 of the
    best, while in sweep order a long run started last keeps one worker busy after the others end)."""
    return sorted(range(len(seconds)), key=lambda i: -seconds[i])


def lockstep_factor(o: dict[str, Any]) -> float | None:
    """Wall time of a sweep point's seeds trained in lockstep (``mlplab.train.lockstep``) over
    their time trained one after another, as measured for the run's model on the CPU machine
    (``calibration()["lockstep"]``, from ``benchmarks/bench_lockstep.py``); None where it was not
    measured. Below 1 lockstep pays; ``reproduce`` then uses it (``executors``)."""
    f = calibration().get("lockstep", {}).get("factor", {}).get(str(o.get("model.name")))
    return None if f is None else float(f)


def _job_seconds(specs: Sequence[RunSpec], scale: str, sw: Sweep, lockstep: str) -> list[float]:
    """Seconds of each job the executor runs, in its order (``executors._jobs``): one run, or a
    sweep point's seeds in lockstep at its first seed's place (their seconds one after another
    times :func:`lockstep_factor`, where it pays)."""
    job: dict[int, float] = {}  # position of the job's first run -> its seconds
    pos = {id(s): i for i, s in enumerate(specs)}
    for group in seed_groups(specs):
        secs = [spec_s(s, scale, sw.est_epoch_s, sw.epochs) for s in group]
        f = lockstep_factor(group[0].overrides) if group[0].task == "train" and len(group) > 1 else None
        where = [pos[id(s)] for s in group]
        if lockstep != "off" and scale != "paper" and f is not None and f < 1:
            job[where[0]] = f * sum(secs)
        else:
            job.update(zip(where, secs))
    return [job[i] for i in sorted(job)]


def estimate_cost(plan: Plan, scale: str = "cpu", jobs: int | None = None,
                  expanded: Sequence[Sequence[Sequence[RunSpec]]] | None = None,
                  lockstep: str = "auto") -> dict[str, float]:
    """runs, run-epochs and estimated wall seconds of a plan at ``scale`` with ``jobs`` workers
    (default: ``CPU_JOBS`` on the CPU machine, 1 GPU at paper scale). ``expanded``: the runs of
    each sweep of each stage, when the caller has expanded them already. ``lockstep``: "auto"
    counts a sweep point's seeds as one job where lockstep was measured to pay on the CPU
    machine (:func:`lockstep_factor`), "off" every run on its own."""
    jobs = jobs or (1 if scale == "paper" else CPU_JOBS)
    runs = epochs = wall = 0.0
    for i, stage in enumerate(plan.stages):
        secs = []
        for j, sw in enumerate(stage):
            specs = expand(sw) if expanded is None else expanded[i][j]
            runs += len(specs)
            epochs += len(specs) * sw.epochs
            secs += _job_seconds(specs, scale, sw, lockstep)
        wall += makespan([secs[i] for i in longest_first(secs)], jobs)
    return {"runs": int(runs), "run_epochs": epochs, "est_s": wall, "jobs": jobs}


def sweep_epochs(sw: Sweep) -> float:
    """Epochs per run of a training sweep from its overrides (after ``--set``)."""
    return planned_epochs(sw.base_dict()) if sw.task == "train" else sw.epochs
