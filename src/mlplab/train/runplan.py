"""A run resolved once: :func:`plan_run` turns a config into a :class:`RunPlan`.

Everything about a run that can be known before its data is loaded or a file is written is
worked out here, once, and then passed along: the validated config, the device and precision,
the dataset's record at the resolution the data is loaded at, the model's constructor keywords
(or, with ``model.init_from``, the checkpoint, read once), the parameter count from a build on
the ``meta`` device, the implementation (``model.impl``, checked on that build), and whether
the training state fits in memory (for image folders and packs, whose image size and classes
are known only once they are opened, the loop asks the plan again with the opened data:
:meth:`RunPlan.check_memory_with`). ``mlplab train`` /
``mlplab finetune`` build one plan and hand it to ``--print-config`` or to
:func:`mlplab.train.loop.train`; ``check_specs`` plans every run of an experiment for another
machine (no device, no memory check) before anything is launched. A refused plan is one
``BadInput`` sentence that says what to change.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from ..data.table import DatasetInfo, get_info, restrict_classes
from ..errors import BadInput
from ..models.impl import Impl
from ..models.registry import create_model, get_model_entry
from ..utils.cpu import cpu_has_native_bf16
from ..utils.units import format_count
from . import config as _config
from .accelerator import native_bf16_cuda
from .backend import apply_impl
from .config import RunConfig
from .distributed import launch_env
from .init import check_pretrained, pretrained_model, read_init_checkpoint
from .memory import STATE_BYTES_PER_PARAM, available_memory, estimate_memory
from .memory import DataChecksPass as _DataChecksPass

__all__ = ["RunPlan", "plan_run", "as_plan", "resolve_device", "resolve_precision", "resolve_model_kwargs",
           "dataset_info", "check_memory", "meta_model", "meta_param_count", "STATE_BYTES_PER_PARAM"]



@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """A run as it will happen on this machine (see the module docstring)."""

    cfg: RunConfig  # validated (a copy: a later change to the caller's config does not reach the plan); config.json
    data_cfg: RunConfig  # cfg with data.image_size at a pretrained model's resolution (= cfg otherwise)
    info: DatasetInfo  # the dataset's record, image_size at the resolution the data is loaded at
    model_kwargs: dict[str, Any] | None  # create_model keywords with the dataset's fields; None: from the images
    checkpoint: Any = None  # model.init_from read once (mlplab.interop Imported), else None
    n_params: int | None = None  # from the meta build or the checkpoint; None: known only from the images
    impl: Impl = Impl.AUTO  # model.impl, checked against the meta build (a checkpoint's model: when built)
    device: torch.device | None = None  # None: planned for another machine (check_specs)
    precision: str | None = None  # "fp32" | "bf16"; None with device None

    def check_memory_with(self, info: DatasetInfo) -> None:
        """The memory check of a run whose model size was known only once its data was opened
        (image folders, packs, streamed or not: their image size, channels and classes): called
        with the opened data's record before the model is built; a no-op where the plan checked."""
        if self.n_params is None and self.checkpoint is None and self.device is not None:
            kwargs = resolve_model_kwargs(self.cfg, info)
            check_memory(meta_param_count(self.cfg.model.name, kwargs), self.device, cfg=self.cfg, info=info,
                         model_kwargs=kwargs, precision=self.precision or "fp32")

    def build_model(self, info: DatasetInfo) -> nn.Module:
        """The run's model on the CPU for the loaded data ``info``: fresh from the registry, or
        from the checkpoint's weights (train.init; the plan keeps them: a second build uses them
        again), computing as ``impl`` says."""
        if self.checkpoint is None:
            kwargs = self.model_kwargs if self.model_kwargs is not None else resolve_model_kwargs(self.cfg, info)
            model = create_model(self.cfg.model.name, **kwargs)
        else:
            model = pretrained_model(self.cfg, info, self.checkpoint)
        return apply_impl(model, self.impl, self.device, self.precision)


def plan_run(cfg: RunConfig, *, here: bool = True, checkpoint: Any = None) -> RunPlan:
    """Resolve ``cfg`` once. ``here=False`` plans a run for another machine (a cluster node):
    no device, precision or memory check, and ``model.impl`` checked against the model alone.
    ``checkpoint``: ``model.init_from`` already read (``mlplab finetune`` reads it to name the
    model), so the file is read once."""
    cfg = _config.validate(copy.deepcopy(cfg))
    device = resolve_device(cfg.run.device, local_rank=_torchrun_local_rank()) if here else None
    precision = resolve_precision(cfg.run.precision, device) if here else None
    impl = Impl(cfg.model.impl)
    info = dataset_info(cfg)  # an unknown dataset -> BadInput naming the known ones
    data_cfg, kwargs, n_params, model = cfg, None, None, None
    if cfg.model.init_from is not None:  # the checkpoint decides the model (train.init)
        if checkpoint is None:
            checkpoint = read_init_checkpoint(cfg)
        data_cfg = check_pretrained(cfg, info.in_chans, checkpoint, info.num_classes)
        info = dataset_info(data_cfg)
        n_params = sum(t.numel() for t in checkpoint.state.values())
    # image folders, packs: size and classes are known once the data is opened
    elif info.image_size != (0, 0) and info.num_classes != 0:
        kwargs = resolve_model_kwargs(cfg, info)
        model = apply_impl(meta_model(cfg.model.name, kwargs), impl, device, precision)
        n_params = sum(p.numel() for p in model.parameters())
    if device is not None and n_params is not None:
        check_memory(n_params, device, cfg=cfg, info=info, model=model, precision=precision)
    return RunPlan(cfg=cfg, data_cfg=data_cfg, info=info, model_kwargs=kwargs, checkpoint=checkpoint,
                   n_params=n_params, impl=impl, device=device, precision=precision)


def as_plan(run: RunConfig | RunPlan | str | os.PathLike) -> RunPlan:
    """A plan for this machine: the one given, or one made from a config, a named config or a
    JSON file (``make_config(name)``), or a plan made for another machine."""
    if isinstance(run, RunPlan):
        return run if run.device is not None else plan_run(run.cfg, checkpoint=run.checkpoint)
    if isinstance(run, (str, os.PathLike)):
        run = _config.make_config(run)
    if not isinstance(run, RunConfig):
        raise BadInput(f"train takes a RunConfig (mlplab.make_config(...)), a named config or a JSON file, "
                       f"not a {type(run).__name__}")
    return plan_run(run)


# ----------------------------------------------------------------------------- the parts

def _torchrun_local_rank() -> int | None:
    """This process's GPU under torchrun (``LOCAL_RANK``) or srun (``SLURM_LOCALID``), read before
    the process group exists so that no CUDA context is made on another rank's device."""
    if "WORLD_SIZE" not in os.environ:  # srun's tasks, or one process
        launch = launch_env()
        return launch.local_rank if launch.world_size > 1 else None
    v = os.environ.get("LOCAL_RANK")
    return int(v) if v is not None and int(os.environ["WORLD_SIZE"]) > 1 else None


def resolve_device(choice: str, dist: Any = None, *, local_rank: int | None = None) -> torch.device:
    """The run's device: CUDA when asked for (or, with ``auto``, present), on this rank's GPU
    (``dist.local_rank`` or ``local_rank``; else the current one), else the CPU."""
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise BadInput("run.device=cuda but CUDA is not available; use run.device=cpu or auto")
        if dist is not None:
            local_rank = dist.local_rank
        return torch.device("cuda", local_rank if local_rank is not None else torch.cuda.current_device())
    return torch.device("cpu")


def resolve_precision(choice: str, device: torch.device) -> str:
    """'fp32' or 'bf16'. auto -> bf16 autocast on GPUs with bf16 tensor cores and on CPUs with native
    bf16 matmuls (AVX512-BF16/AMX); fp32 elsewhere, where emulated bf16 is slower than fp32."""
    if choice != "auto":
        return choice
    if device.type == "cuda":  # not V100/T4, where bf16 is emulated (train.accelerator)
        return "bf16" if native_bf16_cuda(device) else "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def resolve_model_kwargs(cfg: RunConfig, info: Any) -> dict[str, Any]:
    """The model overrides with image_size / in_chans / num_classes filled from the dataset,
    or a clear error when given values contradict the data."""
    fields = {f.name for f in dataclasses.fields(get_model_entry(cfg.model.name).config_cls)}
    h, w = info.image_size
    data_vals = {"image_size": h, "in_chans": info.in_chans, "num_classes": info.num_classes}
    kwargs = dict(cfg.model.kwargs)
    if h != w and "image_size" in fields:
        raise BadInput(f"{cfg.data.dataset} images are {h}x{w}; square models need data.image_size=N to resize")
    for k, v in data_vals.items():
        if k not in fields:
            continue
        if k in kwargs and kwargs[k] != v:
            hint = {"image_size": f"set data.image_size={kwargs[k]} to resize the data, "
                                  "or drop model.kwargs.image_size",
                    "in_chans": "drop model.kwargs.in_chans",
                    "num_classes": "drop model.kwargs.num_classes"}[k]
            raise BadInput(f"model.kwargs.{k}={kwargs[k]} does not match dataset {cfg.data.dataset!r} "
                           f"({k}={v}); {hint}")
        kwargs[k] = v
    return kwargs


def dataset_info(cfg: RunConfig) -> DatasetInfo:
    """The table's record for ``data.dataset``, with the size ``data.image_size`` resizes to and
    the classes ``data.classes`` keeps."""
    info = restrict_classes(get_info(cfg.data.dataset), cfg.data.classes)
    if cfg.data.image_size is not None:
        info = dataclasses.replace(info, image_size=(cfg.data.image_size, cfg.data.image_size))
    return info


#: meta builds by (name, kwargs): the runs of a sweep share a few architectures, and a Mixer's
#: meta build takes ~0.1-1 s (its PK layers' index arithmetic)
_META_MODELS: dict[str, nn.Module] = {}


def _meta_key(name: str, kwargs: dict[str, Any]) -> str:
    return json.dumps([name, kwargs], sort_keys=True, default=repr)


def meta_model(name: str, kwargs: dict[str, Any]) -> nn.Module:
    """``create_model(name, **kwargs)`` built on the meta device (no memory is allocated, so an
    absurd size is refused instead of allocated; the constructor's own checks run too), once."""
    key = _meta_key(name, kwargs)
    if key not in _META_MODELS:
        with torch.device("meta"), _DataChecksPass():
            _META_MODELS[key] = create_model(name, **kwargs)
    return _META_MODELS[key]


def meta_param_count(name: str, kwargs: dict[str, Any]) -> int:
    """The parameter count of ``create_model(name, **kwargs)``, from its meta build."""
    return sum(p.numel() for p in meta_model(name, kwargs).parameters())


def check_memory(n_params: int, device: torch.device, *, cfg: RunConfig | None = None, info: Any = None,
                 model_kwargs: dict[str, Any] | None = None, model: nn.Module | None = None,
                 precision: str = "fp32") -> None:
    """Refuse a run that cannot fit in the memory available now on ``device``: its weights,
    gradients and optimiser state (16 bytes per fp32 parameter with AdamW), and, given the run's
    ``cfg``, dataset ``info`` and model keywords (or its meta build ``model``), one micro-batch's
    activations and augmentation temporaries (:func:`mlplab.train.memory.estimate_memory`, the one estimate)."""
    free = available_memory(device)
    if free is None:
        return
    state = STATE_BYTES_PER_PARAM * n_params
    head = (f"the model has {format_count(n_params)} parameters, needing about {state / 2**30:.1f} GiB for weights, "
            "gradients and optimiser state")
    if state > free:
        raise BadInput(f"{head}; {device.type} has {free / 2**30:.1f} GiB available. Choose a smaller model "
                       "(model.kwargs)")
    image_shape = (info.in_chans, *info.image_size) if info is not None else (0,)
    if cfg is None or 0 in image_shape:  # an image folder's size is known once it is opened
        return
    from ..data.augment import build_augment

    world = max(1, int(os.environ.get("WORLD_SIZE", "1")))
    if model is None and model_kwargs is not None:
        model = meta_model(cfg.model.name, model_kwargs)
    augment = build_augment(cfg.augment, info, num_classes=max(1, info.num_classes))  # classes: the folder's, later
    est = estimate_memory(n_params, model=model, image_shape=image_shape, augment=augment, precision=precision,
                          batch_per_rank=cfg.run.batch_size // world, micro_batches=cfg.run.accumulate_steps)
    if est["total"] > free:
        act = "" if est["activations"] is None else f"{est['activations'] / 2**30:.1f} GiB for the activations and "
        raise BadInput(f"{head}, {act}{est['augment'] / 2**30:.1f} GiB for the augmentation of a micro-batch of "
                       f"{est['micro_batch']} images; {device.type} has {free / 2**30:.1f} GiB available. Raise "
                       f"run.accumulate_steps (fewer images per micro-batch) or lower run.batch_size")
