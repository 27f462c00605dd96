"""The run's model: fresh from the registry, or initialised from a pretrained checkpoint.

Fine-tuning (``model.init_from``; ``mlplab finetune CHECKPOINT CONFIG``): the checkpoint (any format
``mlplab.load_pretrained`` reads) decides the architecture; ``model.kwargs`` are overrides on top
(e.g. ``drop_path_rate``). Then

* ``model.expand = K`` applies :func:`mlplab.expand_resolution` (Mixers; docs/science.md §7), and
* the head is replaced when the dataset's class count differs (``model.new_head=auto``) or always
  (``new_head=true``),

and the data is resized to the model's resolution (``data.image_size`` is filled in; Scaling-MLPs
upscale CIFAR to 64×64 the same way). With ``optim.head_lr`` (Scaling-MLPs: SGD, 0.01 head /
0.001 body) and ``optim.freeze=body`` (linear probe: LION 1e-5) the optimiser treats head and
body apart (:func:`mlplab.train.optim.param_groups`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch.nn as nn

from ..errors import BadInput
from ..models.registry import get_model_entry
from .config import RunConfig

__all__ = ["read_init_checkpoint", "with_model_resolution", "check_pretrained", "pretrained_model", "reset_head"]


def read_init_checkpoint(cfg: RunConfig) -> Any:
    """``model.init_from`` read into mlplab's terms (``mlplab.interop.Imported``: model name,
    inferred config, state dict). A run reads its checkpoint once (``train.runplan``) and passes
    it to the functions below."""
    from ..interop import read_checkpoint

    return read_checkpoint(cfg.model.init_from, cfg.model.init_format)


def with_model_resolution(cfg: RunConfig, checkpoint: Any = None) -> RunConfig:
    """``cfg`` with ``data.image_size`` set to the pretrained model's resolution × ``model.expand``
    (unchanged without ``init_from``); a given ``data.image_size`` must agree. ``checkpoint``:
    :func:`read_init_checkpoint` of ``cfg`` (read here when not given)."""
    if cfg.model.init_from is None:
        return cfg
    imp = checkpoint if checkpoint is not None else read_init_checkpoint(cfg)
    name, kwargs = imp.model_name, imp.kwargs
    if name != cfg.model.name:
        raise BadInput(f"model.name={cfg.model.name!r} but {cfg.model.init_from} holds a {name!r}; set "
                       f"model.name={name} (mlplab finetune does this)")
    if "image_size" not in kwargs:
        return cfg
    if cfg.model.expand != 1 and get_model_entry(name).family != "mlp_mixer":
        raise BadInput(f"model.expand={cfg.model.expand} works on Mixers (expand_resolution, docs/science.md §7) but "
                       f"{cfg.model.init_from} holds a {name!r}; drop model.expand")
    size = kwargs["image_size"] * cfg.model.expand
    if cfg.data.image_size is not None and cfg.data.image_size != size:
        raise BadInput(f"data.image_size={cfg.data.image_size} but the pretrained model takes {size}x{size} "
                       f"images (image_size {kwargs['image_size']} x model.expand {cfg.model.expand}); drop "
                       "data.image_size, the data is resized to the model's resolution")
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, image_size=size))


def check_pretrained(cfg: RunConfig, in_chans: int, checkpoint: Any, num_classes: int | None = None) -> RunConfig:
    """Everything about ``model.init_from`` (read as ``checkpoint``) that can be checked before a
    file is written: its model is ``model.name``, ``model.expand`` applies, its resolution agrees
    with ``data.image_size``, its channels with the dataset's ``in_chans`` and, under
    ``model.new_head=false``, its classes with the dataset's ``num_classes``. Returns
    :func:`with_model_resolution` of ``cfg``."""
    resized = with_model_resolution(cfg, checkpoint)
    chans = checkpoint.kwargs.get("in_chans", in_chans)
    if chans != in_chans:
        raise BadInput(f"the pretrained model takes {chans}-channel images but {cfg.data.dataset} has "
                       f"{in_chans}; fine-tune on data with {chans} channels")
    classes = checkpoint.kwargs.get("num_classes")
    # num_classes 0: an image folder, counted later
    if cfg.model.new_head is False and num_classes and classes is not None and classes != num_classes:
        raise BadInput(f"model.new_head=false keeps the checkpoint's {classes}-class head, but {cfg.data.dataset} has "
                       f"{num_classes} classes; drop model.new_head (a new head is made when the counts differ) or "
                       f"fine-tune on data with {classes} classes")
    return resized


def pretrained_model(cfg: RunConfig, info: Any, checkpoint: Any) -> nn.Module:
    """The model of ``model.init_from`` (read as ``checkpoint``) for a run on data described by
    ``info`` (a ``DatasetInfo``): loaded, expanded by ``model.expand``, with a new head where asked."""
    from ..interop import build_pretrained
    from ..models.expand import expand_resolution

    fields = {f.name for f in dataclasses.fields(get_model_entry(cfg.model.name).config_cls)}
    overrides = dict(cfg.model.kwargs)
    if "num_classes" in fields:
        overrides["num_classes"] = info.num_classes
    model = build_pretrained(checkpoint, **overrides)
    if cfg.model.expand != 1:
        model = expand_resolution(model, cfg.model.expand)
    if cfg.model.new_head is True:
        reset_head(model)
    return model


def reset_head(model: nn.Module) -> None:
    """A fresh classifier head: zeros where the family zero-initialises it (Mixers), else the
    default ``nn.Linear`` initialisation."""
    head = model.head
    if getattr(model.config, "zero_head", False):
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
    else:
        head.reset_parameters()
