"""mlplab's own format: a safetensors file whose metadata names the registered model and its
resolved config, so that the file alone rebuilds the model (``mlplab_model``, ``mlplab_config``).
Run checkpoints (``<run>/checkpoint/model.safetensors``) carry the same metadata."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import torch
import torch.nn as nn

from .common import Imported

__all__ = ["model_metadata", "matches", "to_mlplab", "EXPECTED"]

EXPECTED = "an mlplab safetensors file (metadata 'mlplab_model' and 'mlplab_config', as written by save_pretrained)"


def model_metadata(model: nn.Module) -> dict[str, str]:
    """``{"mlplab_model": name, "mlplab_config": json, "mlplab_pretrained_cfg": json}`` of a model
    built by ``create_model`` (empty for other modules)."""
    name, cfg = getattr(model, "model_name", None), getattr(model, "config", None)
    if name is None or cfg is None or not dataclasses.is_dataclass(cfg):
        return {}
    meta = {"mlplab_model": name, "mlplab_config": json.dumps(dataclasses.asdict(cfg))}
    pcfg = {k: v for k, v in (getattr(model, "pretrained_cfg", None) or {}).items() if k != "source"}
    if pcfg:  # input settings (mean/std, ...) travel with the weights
        meta["mlplab_pretrained_cfg"] = json.dumps(pcfg)
    return meta


def matches(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bool:
    return "mlplab_model" in metadata and "mlplab_config" in metadata


def to_mlplab(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Imported:
    if not matches(tensors, metadata):
        raise ValueError("this safetensors file has no 'mlplab_model'/'mlplab_config' metadata; it was not "
                         "written by mlplab.save_pretrained (or a run checkpoint); pass its format explicitly")
    try:
        kwargs: dict[str, Any] = json.loads(metadata["mlplab_config"])
    except json.JSONDecodeError as e:
        raise ValueError(f"the file's 'mlplab_config' metadata is not JSON ({e})") from None
    # files from mlplab 0.1.0 carry a Mixer's "impl" (how it computes, never what: not a model field now)
    kwargs.pop("impl", None)
    try:
        pcfg = json.loads(metadata.get("mlplab_pretrained_cfg", "{}"))
    except json.JSONDecodeError:
        pcfg = {}
    state = dict(tensors)
    if metadata.get("mlplab_layout") == "timm":  # a Hub folder that timm loads too: timm's tensor names
        from .timm import to_mlplab as timm_to_mlplab

        state = timm_to_mlplab(state).state
    return Imported(metadata["mlplab_model"], kwargs, state, "mlplab",
                    pretrained_cfg=pcfg if isinstance(pcfg, dict) else {})
