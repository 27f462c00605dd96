"""Run tasks that are not training: each takes ``(overrides, run_dir)`` and returns a results dict
(written to ``<run_dir>/results.json`` by the executor). They call the analysis library, so
spectra, pictures, costs and CKA are sweeps like any other: resumable, parallel, one folder each.

A sweep names its task by the name it is registered under (``Sweep(..., task="cka")``,
:data:`TASKS`); the estimate of its seconds is ``mlplab.experiments.cost.TASK_S[name]``. A sweep
file may still name a task of its own as ``"module:function"``.
"""
from __future__ import annotations

import importlib
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["TASKS", "task", "get_task", "spectrum_task", "normalised_spectrum_task", "pictures_task",
           "cost_task", "cka_task", "echo_task", "load_trained_model", "implicit_bias_task",
           "finetune_task", "weights_task", "build_model", "inference_task"]

TaskFn = Callable[[dict[str, Any], Path], dict[str, Any]]

# name -> fn(overrides, run_dir); filled by ``@task`` below. Each task's cost estimate is the
# function of the same name in ``cost.TASK_S``.
TASKS: dict[str, TaskFn] = {}


def task(name: str) -> Callable[[TaskFn], TaskFn]:
    """Register ``fn(overrides, run_dir) -> results`` as task ``name`` (decorator)."""

    def deco(fn: TaskFn) -> TaskFn:
        if name in TASKS or name == "train":
            raise ValueError(f"task {name!r} is registered twice")
        TASKS[name] = fn
        return fn

    return deco


def get_task(name: str) -> TaskFn:
    """The task ``name`` (registered), or ``"module:function"`` (a task of a user's sweep file);
    anything else is an error that lists the registered names."""
    if name in TASKS:
        return TASKS[name]
    mod, _, fn = name.partition(":")
    if not fn:
        raise ValueError(f"unknown task {name!r}; registered tasks: train, {', '.join(sorted(TASKS))} "
                         "(or 'module:function')")
    return getattr(importlib.import_module(mod), fn)


@task("echo")
def echo_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Returns its overrides as results; for testing sweeps and executors without training.

    ``fail``: raise; ``interrupt``: raise KeyboardInterrupt (a killed sweep) unless
    ``<run_dir>/checkpoint.txt`` exists, which it writes first (so a resumed run finds it);
    ``sleep``: seconds to wait."""
    run_dir = Path(run_dir)
    if o.get("sleep"):
        time.sleep(float(o["sleep"]))
    if o.get("fail"):
        raise RuntimeError(f"echo_task asked to fail (value={o.get('value')})")
    resumed = (run_dir / "checkpoint.txt").exists()
    if o.get("interrupt") and not resumed:
        (run_dir / "checkpoint.txt").write_text("half done\n")
        raise KeyboardInterrupt
    return {"echo": dict(o), "resumed": resumed, "test_acc": float(o.get("acc", 0.5))}


@task("spectrum")
def spectrum_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """λ_max of Mixer and SW-MLP weights vs width at fixed Ω (paper Fig. 4 right)."""
    from ..analysis.spectra import spectrum_vs_width

    rows = spectrum_vs_width(float(o["omega"]), float(o["gamma"]), s_list=[int(s) for s in o["tokens"]],
                             seeds=range(int(o["seed"]), int(o["seed"]) + int(o.get("seeds", 1))))
    return {"rows": rows}


@task("normalised_spectrum")
def normalised_spectrum_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Normalised singular values of Z = M ⊙ W (paper Fig. S.1): largest vs a."""
    from ..analysis.spectra import normalised_spectrum

    ns = normalised_spectrum(float(o["a"]), float(o["omega"]), int(o["trials"]), int(o.get("seed", 0)))
    sv = ns.singular_values
    nz = sv[sv > 0]
    hist, edges = np.histogram(nz, bins=60) if nz.size else (np.zeros(0), np.zeros(0))
    return {"a": ns.a, "omega": ns.omega, "m": ns.m, "p": ns.p, "trials": int(sv.shape[0]),
            "largest_mean": float(ns.largest.mean()), "largest_std": float(ns.largest.std()),
            "largest": [float(x) for x in ns.largest],
            "hist": hist.tolist(), "edges": edges.tolist()}


@task("pictures")
def pictures_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The three effective weights of paper Fig. S.9, saved as ``weights.npz`` and a figure."""
    from ..analysis.pictures import effective_weight_arrays
    from ..utils.io import atomic_save

    arr = effective_weight_arrays(S=int(o["S"]), C=int(o["C"]), seed=int(o.get("seed", 0)))
    keys = ("sw", "mixer", "rp_mixer")

    def w(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **{k: arr[k] for k in keys})

    atomic_save(Path(run_dir) / "weights.npz", w)
    out: dict[str, Any] = {"S": int(o["S"]), "C": int(o["C"]), "m": int(o["S"]) * int(o["C"])}
    for k in keys:
        a = arr[k]
        out[f"density_{k}"] = float(np.count_nonzero(a)) / a.size
        out[f"sigma_max_{k}"] = float(np.linalg.norm(a, 2))
    return out


@task("cost")
def cost_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Params, FLOPs, weight memory, peak memory (CUDA) and training-step times of several models
    (Table S.3), the steps timed **interleaved** — one step of each model in turn, ``steps`` rounds
    after one warm-up round — so that every round's times saw the same machine load.

    ``models``: a list of ``{"label", "model", "kwargs"}``; ``batch`` examples per step; the time per
    epoch is the median step extrapolated to ``epoch_examples`` images (CIFAR: 50 000). Returns
    ``{"rows": [per model: params, params_nonzero, weight_MB, flops_per_example, step_times (one per
    round), step_s, epoch_s, peak_MB], "machine": machine_record, "load_after"}``."""
    import os

    import torch

    from ..analysis.throughput import device_sync, interleaved_times, machine_record
    from ..models.counting import count_flops, count_params, state_bytes
    from ..models.registry import create_model

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch, epoch_examples = int(o.get("batch", 128)), int(o.get("epoch_examples", 50000))
    torch.manual_seed(int(o.get("seed", 0)))
    rows, steps = {}, {}
    for spec in o["models"]:
        model = create_model(spec["model"], **dict(spec.get("kwargs", {}))).to(device)
        cfg = model.config
        shape = (getattr(cfg, "in_chans", 3), getattr(cfg, "image_size", 32), getattr(cfg, "image_size", 32))
        rows[spec["label"]] = {"label": spec["label"], "model": spec["model"], "params": count_params(model),
                               "params_nonzero": count_params(model, effective=True),  # masked weights by nonzeros
                               "weight_MB": state_bytes(model) / 2**20,
                               "flops_per_example": float(count_flops(model, shape))}
        steps[spec["label"]] = _training_step(model, shape, getattr(cfg, "num_classes", 10), batch, device)
    machine = machine_record(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = interleaved_times(steps, int(o.get("steps", 20)), warmup=1, sync=device_sync(device))
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    for label, ts in times.items():
        med = float(np.median(ts))
        rows[label].update({"step_times": ts, "step_s": med, "epoch_s": med * math.ceil(epoch_examples / batch),
                            "peak_MB": None if peak is None else peak / 2**20})
    return {"rows": list(rows.values()), "machine": machine, "load_after": list(os.getloadavg()), "batch": batch,
            "device": str(device), "threads": machine["threads"]}


def _training_step(model, in_shape: tuple[int, ...], num_classes: int, batch: int, device) -> Callable[[], None]:
    """One training step of ``model`` (forward, backward, SGD with momentum) on a fixed random batch."""
    import torch

    x = torch.randn(batch, *in_shape, device=device)
    y = torch.randint(0, num_classes, (batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    model.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def load_trained_model(run_dir: str | Path):
    """Rebuild a trained model from its run folder: ``config.json`` + ``checkpoint/model.safetensors``."""
    from ..models.registry import create_model
    from ..train.checkpoint import find_checkpoint, load_weights
    from ..train.config import from_dict
    from ..train.runplan import dataset_info, resolve_model_kwargs
    from ..utils.io import read_json

    run_dir = Path(run_dir)
    cfg = from_dict(read_json(run_dir / "config.json", "run config"))
    info = dataset_info(cfg)  # data.image_size and data.classes as the run trained
    model = create_model(cfg.model.name, **resolve_model_kwargs(cfg, info))
    ck = find_checkpoint(run_dir)
    if ck is None:
        raise FileNotFoundError(f"{run_dir} has no checkpoint with model.safetensors")
    load_weights(model, ck / "model.safetensors")
    return model.eval(), cfg


@task("cka")
def cka_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Mini-batch linear CKA between two trained runs (paper Fig. 2a-c) on test images.

    ``a`` / ``b``: run folders relative to the experiment folder (``run_dir/../..``);
    ``batches`` × ``batch_size`` test examples."""
    import torch

    from ..analysis.cka import cka_matrix
    from ..data import load_dataset

    root = Path(run_dir).parent.parent
    ma, cfg_a = load_trained_model(root / o["a"])
    mb, _ = load_trained_model(root / o["b"])
    data = load_dataset(cfg_a.data.dataset, "test", image_size=cfg_a.data.image_size)
    n = min(len(data.labels), int(o.get("batches", 10)) * int(o.get("batch_size", 256)))
    x = data.images[:n].float() / 255.0
    info = data.info
    mean = torch.tensor(info.mean, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(info.std, dtype=torch.float32).view(1, -1, 1, 1)
    x = (x - mean) / std
    bs = int(o.get("batch_size", 256))
    batches = [x[i:i + bs] for i in range(0, n, bs) if len(x[i:i + bs]) >= 4]
    with torch.no_grad():
        res = cka_matrix(ma, mb, batches)
    return {**res.to_dict(), "a": o["a"], "b": o["b"]}


@task("linear_eval")
def linear_eval_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Linear few-shot accuracy and a ridge linear probe of a trained run's frozen pre-logit
    features (docs/science.md §7; :func:`mlplab.experiments.linear_eval.linear_eval`).

    ``run``: the trained run's folder relative to the experiment folder (``run_dir/../..``, as
    ``cka``'s ``a``). The data is the run's own data config with the task's ``data.*`` keys
    replaced, e.g. ``data.classes=[5,6,7,8,9]`` for classes the run never saw (set
    ``data.train_subset=null`` too when the run trained on a subset and the evaluation should
    not). ``shots``: list of k for linear k-shot (mean ± sd over ``draws``, default 5; empty: none);
    ``probe`` (default true): the ridge probe on the whole training split; ``seed`` (default 0)
    draws the shots and the probe's held-out examples. Accuracy is on the test split.
    Returns ``{"run", "features", "train_examples", "test_examples", "few_shot": {"k": {"mean",
    "sd", "accuracies", "l2", "holdout"}}, "probe": {"acc", "l2", "holdout", "train"}}``."""
    from ..train.evaluation import load_for_eval
    from .linear_eval import linear_eval

    data = {k: v for k, v in o.items() if k.startswith("data.")}
    setup = load_for_eval(Path(run_dir).parent.parent / o["run"], data, split="test", head=False)
    res = linear_eval(setup, [int(k) for k in o.get("shots", [])], probe=bool(o.get("probe", True)),
                      draws=int(o.get("draws", 5)), seed=int(o.get("seed", 0)))
    return {"run": o["run"], **res}


@task("implicit_bias")
def implicit_bias_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Both sides of Prop. 3.3 on a small bilinear regression (docs/science.md §5), float64."""
    from ..analysis.implicit_bias import check_implicit_regularisation

    res = check_implicit_regularisation(S=int(o["S"]), C=int(o["C"]), n=int(o.get("n", 64)),
                                        lam=float(o["lam"]), seed=int(o.get("seed", 0)))
    return res.to_dict()


@task("finetune")
def finetune_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Training that starts from the weights of another run of the same experiment.

    ``pretrained``: that run's folder relative to the experiment folder (``run_dir/../..``, as the
    ``cka`` task's ``a``); every other key is a run-config override as in a training sweep
    (``model.new_head=true`` for a fresh head, ``optim.head_lr`` / ``optim.freeze=body``,
    ``data.classes``). The trainer writes the run's files (config, metrics, results, checkpoint)
    into ``run_dir`` and resumes a killed run from its checkpoint."""
    from ..train import make_config, train
    from .sweep import run_dir_overrides

    run_dir = Path(run_dir)
    source = (run_dir.parent.parent / str(o["pretrained"])).resolve()
    overrides = {k: v for k, v in o.items() if k != "pretrained" and not k.startswith("meta.")}
    overrides.update({"model.init_from": str(source), **run_dir_overrides(run_dir)})
    return train(make_config(None, overrides), resume=(run_dir / "config.json").is_file())


@task("mixer_weights")
def weights_task(o: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Supplement Figs. 1–2 of one trained Mixer (``run``: its folder relative to the experiment
    folder, as the ``cka`` task's ``a``) beside the same architecture at initialisation (drawn
    with the run's seed): inverse-pair statistics of the first ``blocks`` token-mixing MLPs'
    units (:func:`~mlplab.analysis.units.inverse_partners`, threshold ``tau``), the mean spatial
    frequency of the embedding units (:func:`~mlplab.analysis.units.mean_frequency`); the pictured
    arrays go to ``weights.npz``."""
    from ..analysis.units import INVERSE_TAU, weight_stats
    from ..utils.io import atomic_save

    root = Path(run_dir).parent.parent
    model, cfg = load_trained_model(root / o["run"])
    blocks, tau = int(o.get("blocks", 2)), float(o.get("tau", INVERSE_TAU))
    trained_stats, arrays = weight_stats(model, blocks, tau)
    init_stats, init_arrays = weight_stats(_model_at_init(cfg, int(cfg.run.seed)), blocks, tau)
    arrays.update({f"init_{k}": v for k, v in init_arrays.items()})

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)

    atomic_save(Path(run_dir) / "weights.npz", write)
    return {"run": o["run"], "patch": int(cfg.model.kwargs.get("patch_size", 0)), "blocks": blocks, "tau": tau,
            "trained": trained_stats, "init": init_stats}


def _model_at_init(cfg, seed: int):
    """The run's architecture at initialisation, drawn with ``torch.manual_seed(seed)``."""
    import dataclasses

    import torch

    from ..data.table import get_info
    from ..models.registry import create_model
    from ..train.loop import resolve_model_kwargs

    info = get_info(cfg.data.dataset)
    if cfg.data.image_size:
        info = dataclasses.replace(info, image_size=(cfg.data.image_size, cfg.data.image_size))
    torch.manual_seed(seed)
    return create_model(cfg.model.name, **resolve_model_kwargs(cfg, info)).eval()


def build_model(spec: dict[str, Any]):
    """The model of one ``{"model", "kwargs"}`` entry: a reference model by its name in
    ``models.reference.REFERENCE_MODELS``, else a registered one."""
    from ..models.reference import create_reference_model, is_reference_model
    from ..models.registry import create_model

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

    from ..analysis.throughput import candidate_batches, machine_record, measure_inference
    from ..models.counting import count_flops, count_params
    from .cost import cpu_machine

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
