"""The run config: one typed dataclass per section, strict overrides (nanoGPT's configurator).

A run is fully described by a :class:`RunConfig`; it is saved as ``config.json`` in the run folder
and a resumed run must match it. ``make_config(base, overrides)`` builds one from a named config
(``mlplab.train.presets``), a JSON, YAML or TOML file (``mlplab.utils.configfile``), a dict or
another ``RunConfig``, then applies dotted overrides (``"optim.lr=0.1"`` from the command line, or
``{"optim.lr": 0.1}``). An unknown key is
an error that lists the valid ones; a value of the wrong type is an error that names the key.

Durations follow big_vision: the training length is given in exactly one of ``epochs``,
``steps`` or ``examples``; giving two is refused rather than silently picking one.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import hashlib
import json
import math
import re
import typing
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, Sequence

from ..data.augment import AugmentConfig
from ..errors import BadInput, BadType, did_you_mean
from ..models.registry import get_model_entry, model_config
from ..utils.configfile import CONFIG_SUFFIXES, read_config_file
from ..utils.typed import check_types, coerce

__all__ = [
    "ModelSection",
    "DataSection",
    "AugmentConfig",
    "OptimSection",
    "ScheduleSection",
    "RunSection",
    "RunConfig",
    "make_config",
    "validate",
    "not_semantic",
    "NON_SEMANTIC",
    "load_config",
    "parse_overrides",
    "run_name",
    "data_name",
    "ROOTED_DATASETS",
    "config_diff",
    "flatten",
    "Durations",
    "durations",
    "eval_batch_size",
]


def not_semantic(default: Any) -> Any:
    """A field that does not change what a run computes (where files go, how it logs): left out
    of derived run names and of the check that a resumed run has the same config (NON_SEMANTIC)."""
    return field(default=default, metadata={"semantic": False})


@dataclass
class ModelSection:
    name: str = "s_mixer"  # a registered model (``mlplab models`` lists them)
    # create_model overrides; image_size / in_chans / num_classes come from the dataset unless given
    kwargs: dict = field(default_factory=dict)
    # fine-tuning (mlplab.train.init): start from a checkpoint (file or run folder; timm, Flax,
    # Scaling-MLPs or mlplab) instead of a fresh model; the data is resized to the model's resolution
    init_from: str | None = None
    init_format: Literal["auto", "mlplab", "timm", "flax", "scaling_mlps"] = "auto"
    expand: int = 1  # Mixers: expand_resolution(model, expand) after loading (K x the resolution)
    new_head: bool | Literal["auto"] = "auto"  # auto: a new head when the class count differs
    # how the model computes (docs/kernels.md)
    impl: Literal["auto", "module", "fused", "definition"] = not_semantic("auto")


@dataclass
class DataSection:
    dataset: str = "synthetic"  # a key of mlplab.data.DATASETS
    root: str | None = not_semantic(None)  # dataset folder; None -> the data module's default cache
    download: bool = not_semantic(False)
    image_size: int | None = None  # resize to this (square) on load; None -> native size
    val_fraction: float = 0.0  # held out of train (seeded); 0 -> periodic evals use the test split
    train_subset: int | None = None  # use only N training examples (quick runs)
    test_subset: int | None = None  # use only N test examples
    subset: Literal["first", "random"] = "first"  # which N: the first N, or a seeded random N
    # keep only these classes (train, val, test), relabelled 0..k-1 in this order; None -> all
    classes: list[int] | None = None
    on_device: bool | Literal["auto"] = "auto"  # keep the uint8 dataset on the run device
    # streamed image folders: decoding processes (0: in the run's process); packs: reader threads (0: 2)
    num_workers: int = not_semantic(0)
    # image folders / packs: read from disk each epoch instead of holding them in memory
    # (auto: above 1 GiB decoded)
    stream: bool | Literal["auto"] = "auto"


@dataclass
class OptimSection:
    name: Literal["sgd", "adamw", "lion"] = "sgd"
    lr: float = 0.02  # peak lr per step of the global batch (scaled only when lr_batch is set)
    lr_batch: int | None = None  # the global batch optim.lr was tuned for; None -> no batch scaling
    lr_scaling: Literal["linear", "sqrt"] = "linear"  # peak lr ∝ B (SGD rule) or √B (Adam rule)
    momentum: float = 0.9  # SGD only
    nesterov: bool = True  # SGD only
    weight_decay: float = 0.0  # applied to matrices only (ndim >= 2), never to biases/LN
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW / LION
    eps: float = 1e-8  # AdamW
    grad_clip: float | None = None  # max global grad norm; None -> no clipping
    head_lr: float | None = None  # peak lr of the classifier head (same schedule); None -> optim.lr
    freeze: Literal["none", "body"] = "none"  # body: train the head only (linear probe)


@dataclass
class ScheduleSection:
    # the training length: exactly one of these three
    epochs: float | None = None  # passes over the training split
    steps: int | None = None  # optimiser steps
    examples: int | None = None  # training examples seen (rounded up to whole steps)
    warmup_epochs: float | None = None  # linear warmup length, in epochs ...
    warmup_steps: int | None = None  # ... or in steps (not both)
    warmup_start_lr: float = 0.0  # lr at step 0 of the warmup
    min_lr: float = 0.0  # floor of the cosine
    schedule: Literal["cosine", "constant"] = "cosine"


@dataclass
class RunSection:
    batch_size: int = 128  # global: split over processes under torchrun
    accumulate_steps: int = 1  # K micro-batches per optimiser step (the batch above stays the global one)
    ema_decay: float | None = None  # D: EMA of the weights, θ_ema ← D θ_ema + (1 − D) θ per step; null: none
    eval_batch_size: int | None = None  # None -> 4 x batch_size (capped at 1024)
    seed: int = 0  # model init, data order, augmentation
    device: Literal["auto", "cpu", "cuda"] = not_semantic("auto")
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: bf16 autocast where native
    compile: bool | Literal["auto"] = "auto"  # torch.compile; auto: CUDA, or long bf16 CPU runs (train.backend)
    eval_every: int = 1  # epochs between evaluations; 0 -> only the final test
    checkpoint_every: int = 1  # epochs between checkpoints; 0 -> only at the end
    nan_check_every: int = not_semantic(50)  # steps between reads of the non-finite flag (one host sync each)
    # N: a "step" record (loss, acc, lr, img/s, MFU) every N steps; 0: epochs only
    log_every_steps: int = not_semantic(0)
    out_dir: str = not_semantic("runs")
    name: str | None = not_semantic(None)  # run folder name; None -> derived from the overrides
    log: Literal["auto", "bar", "lines", "none"] = not_semantic("auto")  # auto: a bar on a TTY, else lines
    # stop when the training loss exceeds this x ln(classes); null: never
    divergence_factor: float | None = not_semantic(100.0)
    tensorboard: bool = not_semantic(False)  # also log to TensorBoard (<run>/tb; the "tensorboard" extra)
    # also log to Weights & Biases, offline unless WANDB_MODE says otherwise (<run>/wandb)
    wandb: bool = not_semantic(False)
    wandb_project: str = not_semantic("mlplab")
    threads: int | None = not_semantic(None)  # torch CPU threads; None -> torch's default


@dataclass
class RunConfig:
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    optim: OptimSection = field(default_factory=OptimSection)
    schedule: ScheduleSection = field(default_factory=lambda: ScheduleSection(epochs=1))
    run: RunSection = field(default_factory=RunSection)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        return from_dict(d)

    def validate(self) -> "RunConfig":
        return validate(self)


_SECTION_CLS: dict[str, type] = typing.get_type_hints(RunConfig)

#: keys that do not change what a run computes (fields made with :func:`not_semantic`): left out
#: of derived names and resume checks
NON_SEMANTIC = frozenset(f"{sec}.{f.name}" for sec, cls in _SECTION_CLS.items() for f in dataclasses.fields(cls)
                         if not f.metadata.get("semantic", True))


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain JSON types (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def from_dict(d: dict[str, Any]) -> RunConfig:
    """Inverse of :func:`to_dict`; missing keys take defaults, unknown ones are refused."""
    if not isinstance(d, dict):
        raise BadType(f"a run config must be a dict, got {type(d).__name__}")
    return validate(_apply_dict(RunConfig(), d))


def _apply_dict(cfg: RunConfig, d: dict[str, Any]) -> RunConfig:
    for sec, values in d.items():
        if sec not in _SECTION_CLS:
            raise ValueError(f"unknown config section {sec!r}; {did_you_mean(sec, _SECTION_CLS)}valid sections are: "
                             f"{', '.join(_SECTION_CLS)}")
        if not isinstance(values, dict):
            raise BadType(f"config section {sec!r} must be a dict, got {type(values).__name__}")
        if sec == "schedule" and values:
            cfg.schedule = ScheduleSection()  # the dict states its own duration
        for k, v in values.items():
            _set(cfg, f"{sec}.{k}", v)
    return cfg


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}`` (model.kwargs entries flattened too)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and (not prefix or key == "model.kwargs"):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_diff(a: RunConfig, b: RunConfig, ignore: frozenset[str] = NON_SEMANTIC) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ: ``{key: (a_value, b_value)}``."""
    fa, fb = flatten(to_dict(a)), flatten(to_dict(b))
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb))
            if k not in ignore and fa.get(k) != fb.get(k)}


# ----------------------------------------------------------------------------- overrides

def _set(cfg: RunConfig, key: str, value: Any) -> None:
    parts = key.split(".")
    sec = parts[0]
    if sec not in _SECTION_CLS:
        raise ValueError(f"unknown config key {key!r}: {did_you_mean(sec, _SECTION_CLS)}valid sections are "
                         f"{', '.join(_SECTION_CLS)}")
    section = getattr(cfg, sec)
    if len(parts) == 1:
        raise ValueError(f"config key {key!r} names a whole section; set one of its fields, "
                         f"e.g. {sec}.{_field_names(type(section))[0]}=...")
    name = parts[1]
    valid = _field_names(type(section))
    if name not in valid:
        hint = ""
        if sec == "model":
            hint = f" (model hyperparameters go under model.kwargs, e.g. model.kwargs.{name}=...)"
        raise ValueError(f"unknown config key {key!r}; {did_you_mean(key, [f'{sec}.{v}' for v in valid])}"
                         f"valid keys in section {sec!r}: "
                         f"{', '.join(f'{sec}.{v}' for v in valid)}{hint}")
    if sec == "model" and name == "kwargs" and len(parts) > 2:
        section.kwargs = {**section.kwargs, ".".join(parts[2:]): value}
        return
    if len(parts) > 2:
        raise ValueError(f"unknown config key {key!r}: {sec}.{name} has no sub-keys")
    tp = typing.get_type_hints(type(section))[name]
    setattr(section, name, coerce(value, tp))
    try:
        check_types(section, f"config section {sec!r}")
    except BadType as e:
        raise BadType(f"config key {key!r}: {e}") from None


def parse_value(text: str) -> Any:
    """A command-line value: JSON first (``0.1``, ``true``, ``null``, ``[1,2]``), then a Python
    literal (``True``, ``None``, ``(0.9, 0.95)``), else the string itself (``adamw``)."""
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return text


def parse_overrides(overrides: dict[str, Any] | list[str] | tuple[str, ...] | None,
                    what: str = "override", example: str = "optim.lr=0.1") -> dict[str, Any]:
    """``["key=value", ...]`` -> ``{key: parse_value(value)}`` (a dict passes through): the one
    parser of command-line ``KEY=VALUE`` items (run-config overrides, ``--set``, ``--slurm``,
    ``convert`` model overrides). ``what`` and ``example`` word the error for a malformed item."""
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"{what} {item!r} is not of the form KEY=VALUE (e.g. {example})")
        k, v = item.split("=", 1)
        out[k.strip()] = parse_value(v.strip())
    return out


# ----------------------------------------------------------------------------- validation

def _count_set(*values: Any) -> int:
    return sum(v is not None for v in values)


def _check_finite(cfg: RunConfig) -> None:
    """Every number in the config (``model.kwargs`` and lists such as ``optim.betas`` included) is
    finite: a NaN slips past every ``<``/``>`` range check below."""
    for key, v in flatten(to_dict(cfg)).items():
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, float) and not math.isfinite(x):
                raise ValueError(f"config key {key!r} is {x}; give a finite number")


def validate(cfg: RunConfig) -> RunConfig:
    """Type checks every section and refuses inconsistent combinations."""
    for sec in _SECTION_CLS:
        check_types(getattr(cfg, sec), f"config section {sec!r}")
    _check_finite(cfg)
    _check_optim(cfg.optim)
    _check_schedule(cfg.schedule, cfg.optim)
    _check_model(cfg.model)
    _check_run(cfg.run)
    _check_data(cfg.data)
    AugmentConfig(**dataclasses.asdict(cfg.augment))  # its own range checks (__post_init__)
    # model name and kwargs are checked by the registry (unknown name / key / type -> error)
    get_model_entry(cfg.model.name)
    model_config(cfg.model.name, **cfg.model.kwargs)
    return cfg


def _check_at_least_zero(pairs: Sequence[tuple[str, Any]]) -> None:
    for name, v in pairs:
        if v is not None and v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")


def _check_schedule(s: ScheduleSection, o: OptimSection) -> None:
    if _count_set(s.epochs, s.steps, s.examples) != 1:
        raise ValueError(
            "schedule: give exactly one training length of schedule.epochs, schedule.steps, "
            f"schedule.examples (got epochs={s.epochs}, steps={s.steps}, examples={s.examples}); "
            "to switch units, null the other, e.g. schedule.epochs=null schedule.steps=500")
    if _count_set(s.warmup_epochs, s.warmup_steps) > 1:
        raise ValueError(f"schedule: give warmup in epochs or steps, not both "
                         f"(warmup_epochs={s.warmup_epochs}, warmup_steps={s.warmup_steps})")
    for name, v in (("schedule.epochs", s.epochs), ("schedule.steps", s.steps), ("schedule.examples", s.examples)):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be > 0, got {v}")
    _check_at_least_zero((("schedule.warmup_epochs", s.warmup_epochs), ("schedule.warmup_steps", s.warmup_steps),
                          ("schedule.min_lr", s.min_lr), ("schedule.warmup_start_lr", s.warmup_start_lr)))
    if s.min_lr > o.lr:
        raise ValueError(f"schedule.min_lr={s.min_lr} is above optim.lr={o.lr}")


def _check_optim(o: OptimSection) -> None:
    _check_at_least_zero((("optim.weight_decay", o.weight_decay),))
    if not (o.lr > 0 and math.isfinite(o.lr)):
        raise ValueError(f"optim.lr must be a finite number > 0, got {o.lr}")
    if o.lr_batch is not None and o.lr_batch < 1:
        raise ValueError(f"optim.lr_batch must be a batch size >= 1 (or null for no scaling), got {o.lr_batch}")
    if o.head_lr is not None and not (o.head_lr > 0 and math.isfinite(o.head_lr)):
        raise ValueError(f"optim.head_lr must be a finite number > 0 or null, got {o.head_lr}")
    if o.grad_clip is not None and o.grad_clip <= 0:
        raise ValueError(f"optim.grad_clip must be > 0 or null, got {o.grad_clip}")
    if o.name in ("adamw", "lion") and not all(0.0 <= b < 1.0 for b in o.betas):
        raise ValueError(f"optim.betas must both be in [0, 1), got {list(o.betas)}; e.g. optim.betas=[0.9,0.999]")


def _check_model(m: ModelSection) -> None:
    if m.expand < 1:
        raise ValueError(f"model.expand must be >= 1 (the resolution factor K), got {m.expand}")
    if m.init_from is None and (m.expand != 1 or m.new_head is True):
        raise ValueError("model.expand and model.new_head act on a pretrained model; set model.init_from too")


def _check_run(r: RunSection) -> None:
    _check_at_least_zero((("run.eval_every", r.eval_every), ("run.checkpoint_every", r.checkpoint_every),
                          ("run.log_every_steps", r.log_every_steps)))
    if r.batch_size < 1 or (r.eval_batch_size is not None and r.eval_batch_size < 1):
        raise ValueError("run.batch_size and run.eval_batch_size must be >= 1")
    if r.divergence_factor is not None and not r.divergence_factor > 0:
        raise ValueError(f"run.divergence_factor must be > 0 or null, got {r.divergence_factor}")
    if r.nan_check_every < 1:
        raise ValueError(f"run.nan_check_every must be >= 1, got {r.nan_check_every}")
    if r.accumulate_steps < 1:
        raise ValueError(f"run.accumulate_steps must be >= 1 (micro-batches per optimiser step), "
                         f"got {r.accumulate_steps}")
    if r.ema_decay is not None and not 0.0 < r.ema_decay < 1.0:
        raise ValueError(f"run.ema_decay must be in (0, 1) (e.g. 0.9999) or null, got {r.ema_decay}")
    if r.threads is not None and r.threads < 1:
        raise ValueError(f"run.threads must be >= 1 or null, got {r.threads}")
    if r.name is not None and (not r.name or "/" in r.name or r.name in (".", "..")
                               or not r.name.isprintable()):
        raise ValueError(f"run.name {r.name!r} must be a plain folder name (no '/', newline or control character)")


def _check_data(d: DataSection) -> None:
    _check_at_least_zero((("data.num_workers", d.num_workers),))
    if not 0.0 <= d.val_fraction < 1.0:
        raise ValueError(f"data.val_fraction must be in [0, 1), got {d.val_fraction}")
    if d.classes is not None and (not d.classes or len(set(d.classes)) != len(d.classes) or min(d.classes) < 0):
        raise ValueError(f"data.classes must be a non-empty list of distinct class indices >= 0 "
                         f"(e.g. data.classes=[0,1,2,3,4]), got {d.classes}")
    for name, v in (("data.train_subset", d.train_subset), ("data.test_subset", d.test_subset),
                    ("data.image_size", d.image_size)):
        if v is not None and v < 1:
            raise ValueError(f"{name} must be >= 1 or null, got {v}")


# ----------------------------------------------------------------------------- durations

@dataclass(frozen=True)
class Durations:
    """A run's length in optimiser steps, resolved from ``schedule`` and the data (big_vision's
    durations: epochs, steps or examples, one of them)."""

    batch_per_rank: int  # run.batch_size split over the processes
    eval_batch_per_rank: int
    steps_per_epoch: int  # full batches per epoch (the last partial batch is dropped)
    total_steps: int
    total_epochs: int  # epochs started; the last one may be partial
    warmup_steps: int  # never more than total_steps
    peak_lr: float  # optim.lr scaled to run.batch_size (see peak_lr)


def peak_lr(cfg: RunConfig) -> float:
    """The peak learning rate for ``run.batch_size``: ``optim.lr`` as is, or, when ``optim.lr_batch``
    names the batch it was tuned for, scaled by B/B_ref (``linear``: Goyal et al. 2017, for SGD) or
    √(B/B_ref) (``sqrt``: Malladi et al. 2022, for Adam-type optimisers)."""
    o = cfg.optim
    if o.lr_batch is None:
        return o.lr
    ratio = cfg.run.batch_size / o.lr_batch
    return o.lr * (ratio if o.lr_scaling == "linear" else math.sqrt(ratio))


def eval_batch_size(r: RunSection) -> int:
    """The global evaluation batch: ``run.eval_batch_size``, else 4 x ``run.batch_size`` capped at 1024."""
    return r.eval_batch_size or min(1024, 4 * r.batch_size)


def _epochs_in_steps(epochs: float, steps_per_epoch: int) -> Fraction:
    """``epochs`` in steps, exactly: the decimal the config holds (its shortest repr, 1.1) times
    the steps per epoch. In floats 1.1 × 50 is 55.00000000000001, which ``ceil`` makes 56 steps,
    and 0.7 × 45 is 31.499999999999996, which ``round`` makes 31 (31.5 rounds to even: 32)."""
    return Fraction(repr(float(epochs))) * steps_per_epoch


def durations(cfg: RunConfig, n_train: int, world_size: int = 1) -> Durations:
    """The step arithmetic of a run with ``n_train`` training examples on ``world_size`` processes.

    epochs -> ceil(epochs * steps_per_epoch); examples -> ceil(examples / batch_size); a partial
    final epoch runs only its remaining steps."""
    r, s = cfg.run, cfg.schedule
    if r.batch_size % world_size:
        raise BadInput(f"run.batch_size={r.batch_size} must be divisible by the {world_size} processes")
    bs = r.batch_size // world_size
    if bs % r.accumulate_steps:
        raise BadInput(f"run.batch_size={r.batch_size} over {world_size} process(es) is {bs} per process, which "
                       f"run.accumulate_steps={r.accumulate_steps} does not divide; choose a divisor of {bs}")
    eval_bs = max(1, eval_batch_size(r) // world_size)
    steps_per_epoch = (n_train // world_size) // bs
    if steps_per_epoch < 1:
        raise BadInput(f"the training split has {n_train} examples, fewer than one batch of "
                         f"{r.batch_size}; lower run.batch_size")
    if s.epochs is not None:
        total_steps = max(1, math.ceil(_epochs_in_steps(s.epochs, steps_per_epoch)))
    elif s.steps is not None:
        total_steps = s.steps
    else:
        total_steps = max(1, math.ceil(s.examples / r.batch_size))
    warmup = round(_epochs_in_steps(s.warmup_epochs, steps_per_epoch)) if s.warmup_epochs is not None \
        else (s.warmup_steps or 0)
    return Durations(batch_per_rank=bs, eval_batch_per_rank=eval_bs, steps_per_epoch=steps_per_epoch,
                     total_steps=total_steps, total_epochs=math.ceil(total_steps / steps_per_epoch),
                     warmup_steps=min(warmup, total_steps), peak_lr=peak_lr(cfg))


# ----------------------------------------------------------------------------- names

def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.3g}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5) else f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "-".join(_fmt(x) for x in v) or "none"
    if isinstance(v, dict):
        return "-".join(f"{k}{_fmt(x)}" for k, x in sorted(v.items()))
    return str(v)


def run_name(overrides: dict[str, Any], keys: Sequence[str] | None = None, label: str | None = None) -> str:
    """The one run-folder name (scaling_mlps' ``config_to_name``): ``label`` then ``key=value`` of
    ``keys`` with short key names (the last dotted part, the full key where two would clash),
    joined by ``,`` and made path-safe. ``keys=None`` names every override that changes the
    computation (not :data:`NON_SEMANTIC`), sorted. ``mlplab train`` names its runs with it
    (``cifar10_s_mixer`` + ``{"optim.lr": 0.1, "model.kwargs.depth": 4}`` ->
    ``cifar10_s_mixer,depth=4,lr=0.1``), and so do sweeps (``lr=0.1,seed=0``, the keys that vary).
    Names longer than 150 characters are cut and end with a hash of the full name."""
    if keys is None:
        keys = sorted(k for k in overrides if k not in NON_SEMANTIC)
    shorts = [k.rsplit(".", 1)[-1] for k in keys]
    dup = {s for s in shorts if shorts.count(s) > 1}
    parts = [label] if label else []
    parts += [f"{k if s in dup else s}={_fmt(overrides[k])}" for k, s in zip(keys, shorts)]
    name = re.sub(r"[^A-Za-z0-9._=,+-]", "-", ",".join(parts) or "run")
    if len(name) > 150:
        name = name[:140] + "~" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


#: datasets whose content ``data.root`` decides (the table's other datasets are checksummed files)
ROOTED_DATASETS = ("imagefolder", "packed")


def data_name(dataset: str, root: str | None) -> dict[str, str]:
    """The part of a derived run name that tells apart runs on different data where the config
    alone does not: ``{"data": "<folder>-<6 hex>"}`` for an image folder or a pack (its folder's
    name and a hash of its resolved path), ``{}`` for every dataset whose name says what it
    holds, so that their run names stay as they were."""
    if dataset not in ROOTED_DATASETS or root is None:
        return {}
    path = Path(root).expanduser().resolve()
    return {"data": f"{path.name}-{hashlib.sha256(str(path).encode()).hexdigest()[:6]}"}


# ----------------------------------------------------------------------------- building

def load_config(base: str | Path) -> tuple[dict[str, Any], str]:
    """A named config (``mlplab.train.presets.CONFIGS``) or a config file (JSON, YAML or TOML:
    ``mlplab.utils.configfile``) -> (dict, label)."""
    from .presets import CONFIGS

    if isinstance(base, str) and base in CONFIGS:
        return copy.deepcopy(CONFIGS[base]), base
    path = Path(base)
    if path.suffix.lower() in CONFIG_SUFFIXES or path.exists():
        return read_config_file(path), path.stem
    raise ValueError(f"unknown config {str(base)!r}: not a named config and not a config file (.json, .yaml, "
                     f".toml); {did_you_mean(base, CONFIGS)}named configs: {', '.join(sorted(CONFIGS))}")


def make_config(base: dict | str | Path | RunConfig | None = None,
                overrides: dict[str, Any] | list[str] | None = None) -> RunConfig:
    """The resolved config: ``base`` (named config, config file path, dict or RunConfig; None -> defaults)
    with dotted ``overrides`` applied in order. ``run.name`` is derived when not given."""
    label = None
    if base is None:
        d: dict[str, Any] = {}
    elif isinstance(base, RunConfig):
        d = to_dict(base)
    elif isinstance(base, dict):
        d = copy.deepcopy(base)
    else:
        d, label = load_config(base)
    ov = parse_overrides(overrides)
    # apply the base without validating in between, then the overrides, then validate once
    cfg = _apply_dict(RunConfig(), d)
    for k, v in ov.items():
        _set(cfg, k, v)
    if cfg.run.name is None:
        label = label or f"{cfg.data.dataset}_{cfg.model.name}"
        cfg.run.name = run_name({**ov, **data_name(cfg.data.dataset, cfg.data.root)}, label=label)
    return validate(cfg)
