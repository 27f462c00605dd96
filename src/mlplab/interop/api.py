"""``load_pretrained`` / ``save_pretrained`` / ``convert`` / ``to_timm``: checkpoints in and out."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..models.registry import create_model
from . import flax, native, scaling_mlps, timm
from .common import Imported, describe_names
from .files import read_tensors, write_tensors

__all__ = ["FORMATS", "detect_format", "read_checkpoint", "load_pretrained", "build_pretrained", "save_pretrained", "convert", "to_timm"]

#: format name -> its module (``matches``, ``to_mlplab``, ``EXPECTED``), in detection order
FORMATS = {"mlplab": native, "timm": timm, "flax": flax, "scaling_mlps": scaling_mlps}

_HEAD = ("head.weight", "head.bias")


def detect_format(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> str:
    """The format whose tensor names these are, or an error naming what was found."""
    metadata = metadata or {}
    if native.matches(tensors, metadata):
        return "mlplab"
    for name in ("timm", "flax", "scaling_mlps"):
        if FORMATS[name].matches(tensors):
            return name
    expected = "; ".join(f"{n}: {m.EXPECTED}" for n, m in FORMATS.items())
    raise ValueError(f"cannot tell the checkpoint's format: it holds {describe_names(list(tensors))}. "
                     f"Expected one of {expected}")


def read_checkpoint(path: str | os.PathLike, format: str = "auto", **overrides: Any) -> Imported:
    """The checkpoint at ``path`` in mlplab's terms (model name, inferred config, state dict)."""
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"unknown checkpoint format {format!r}; choose auto, {', '.join(FORMATS)}")
    tensors, metadata = read_tensors(path)
    fmt = detect_format(tensors, metadata) if format == "auto" else format
    mod = FORMATS[fmt]
    if fmt == "mlplab":
        return native.to_mlplab(tensors, metadata)
    if not mod.matches(tensors):
        raise ValueError(f"{path} is not a {fmt} checkpoint: it holds {describe_names(list(tensors))}; "
                         f"expected {mod.EXPECTED} (format='auto' detects the format)")
    return mod.to_mlplab(tensors, overrides)


def load_pretrained(path: str | os.PathLike, format: str = "auto", **overrides: Any) -> nn.Module:
    """Build the model a checkpoint describes and load its weights.

    ``format``: ``"auto"`` (from the tensor names), ``"timm"`` (``MlpMixer`` state dicts, safetensors
    or .pth/.bin), ``"flax"`` (the Mixer paper's official ``.npz``), ``"scaling_mlps"``
    (``BottleneckMLP``/``MLP``) or ``"mlplab"`` (:func:`save_pretrained` files, run folders).
    The architecture (depth, widths, patch size, classes, image size from the token count) is
    inferred from the tensors; ``overrides`` are ``create_model`` keywords on top of it.
    ``num_classes`` different from the checkpoint's gives a **new head** (zero-initialised for
    Mixers, as in the original); any other override that changes a tensor's shape is an error.
    """
    return build_pretrained(read_checkpoint(path, format, **overrides), **overrides)


def build_pretrained(imp: Imported, **overrides: Any) -> nn.Module:
    """The model of a checkpoint already read (:func:`read_checkpoint`), with its weights loaded:
    :func:`load_pretrained` without reading the file again."""
    kwargs = {**imp.kwargs, **overrides}
    new_head = "head.weight" not in imp.state or kwargs.get("num_classes") != imp.kwargs.get("num_classes")
    model = create_model(imp.model_name, **kwargs)
    state = {k: v for k, v in imp.state.items() if not (new_head and k in _HEAD)}
    _check_shapes(model, state, imp, overrides, new_head)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (new_head and k in _HEAD)]
    if missing or unexpected:
        raise ValueError(f"the {imp.source_format} checkpoint does not fit model {imp.model_name!r}: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model


def _check_shapes(model: nn.Module, state: dict[str, torch.Tensor], imp: Imported, overrides: dict,
                  new_head: bool) -> None:
    own = model.state_dict()
    for k, v in state.items():
        if k in own and own[k].shape != v.shape:
            changed = {o: overrides[o] for o in overrides if imp.kwargs.get(o) != overrides[o]}
            hint = (f"the overrides {changed} change the architecture" if changed else
                    "the inferred architecture does not fit")
            if "image_size" in changed:
                hint += "; to fine-tune at a higher resolution use mlplab.expand_resolution(model, K)"
            raise ValueError(f"tensor {k!r} is {tuple(v.shape)} in the checkpoint but {tuple(own[k].shape)} in "
                             f"the model: {hint}")


def save_pretrained(model: nn.Module, path: str | os.PathLike) -> Path:
    """Write ``model`` (built by ``create_model``) as a self-describing safetensors file that
    :func:`load_pretrained` reads back exactly (crash-safe: temp file + rename)."""
    meta = native.model_metadata(model)
    if not meta:
        raise ValueError("save_pretrained needs a model built by mlplab.create_model (it records the model's "
                         "name and config); for other modules save model.state_dict()")
    if Path(path).suffix != ".safetensors":
        raise ValueError(f"save_pretrained writes safetensors; name the file *.safetensors, not {Path(path).name!r}")
    return write_tensors(path, model.state_dict(), metadata=meta)


def to_timm(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights as the state dict of timm's ``MlpMixer`` of the same size."""
    return timm.from_mlplab(model)


def convert(src: str | os.PathLike, dst: str | os.PathLike, from_format: str = "auto", to: str = "mlplab",
            **overrides: Any) -> Path:
    """Read ``src`` (any format :func:`load_pretrained` reads) and write ``dst`` in mlplab's format
    (safetensors with model metadata) or timm's layout (``.safetensors`` or ``.pth``)."""
    if to not in ("mlplab", "timm"):
        raise ValueError(f"cannot convert to {to!r}; choose mlplab or timm")
    model = load_pretrained(src, from_format, **overrides)
    if to == "mlplab":
        return save_pretrained(model, dst)
    return write_tensors(dst, to_timm(model), metadata={"format": "pt"} if str(dst).endswith(".safetensors") else None)
