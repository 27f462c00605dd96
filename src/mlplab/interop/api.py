"""``create_model(pretrained=)`` / ``load_pretrained`` / ``save_pretrained`` / ``push_to_hub`` /
``convert`` / ``to_timm``: checkpoints in and out, local or on the Hugging Face Hub."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..models import registry
from ..version import __version__
from . import flax, hub, native, scaling_mlps, timm
from .common import Imported, describe_names
from .files import read_tensors, write_tensors

__all__ = ["FORMATS", "detect_format", "read_checkpoint", "create_model", "load_pretrained", "build_pretrained",
           "save_pretrained", "push_to_hub", "convert", "to_timm"]

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
    """The checkpoint at ``path`` (a file, a run or Hub-layout folder, or ``hf-hub:ORG/NAME``) in
    mlplab's terms (model name, inferred config, state dict)."""
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"unknown checkpoint format {format!r}; choose auto, {', '.join(FORMATS)}")
    config: dict[str, Any] = {}
    published: dict[str, Any] = {}  # a registered tag's settings, for timm's Hub repositories
    if hub.is_hub_source(path):
        repo = hub.hub_repo(str(path))[0]
        path, config = hub.download(str(path))
        tag = next((n for n in registry.list_models(pretrained=True)
                    if registry.get_pretrained(n)["hf_hub_id"] == repo), None)
        if tag is not None:
            published = registry.get_pretrained(tag)
            config.setdefault("architecture", tag.partition(".")[0])
    elif (Path(path) / "config.json").is_file() and not (Path(path) / "checkpoint").is_dir():  # a Hub-layout folder
        config = _json_or_empty(Path(path) / "config.json")
    elif (Path(path) / "config.json").is_file():  # a run folder: the inputs its dataset was normalised with
        published = _dataset_inputs(_json_or_empty(Path(path) / "config.json"))
    imp = _read_file(path, format, overrides)
    arch = config.get("architecture")
    if imp.source_format == "timm" and isinstance(arch, str) and arch in registry.list_models():
        imp.model_name = arch  # timm's name for the same architecture (mixer_b16_224)
    saved = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
    imp.pretrained_cfg = {k: v for d in (published, saved, imp.pretrained_cfg) for k, v in d.items() if v is not None}
    return imp


def _dataset_inputs(run_config: dict[str, Any]) -> dict[str, Any]:
    """``{"mean", "std"}`` of the dataset a run trained on, from the dataset table ({} for an
    unknown dataset, and for synthetic data, whose statistics depend on how it was generated)."""
    from ..data.table import DATASETS

    data = run_config.get("data")
    info = DATASETS.get(data.get("dataset")) if isinstance(data, dict) else None
    if info is None or info.format == "synthetic" or not info.mean:
        return {}
    return {"mean": tuple(info.mean), "std": tuple(info.std)}


def _json_or_empty(p: Path) -> dict[str, Any]:
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def _read_file(path: str | os.PathLike, format: str, overrides: dict[str, Any]) -> Imported:
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
    return build_pretrained(read_checkpoint(path, format, **overrides), source=str(path), **overrides)


def build_pretrained(imp: Imported, source: str | None = None, **overrides: Any) -> nn.Module:
    """The model of a checkpoint already read (:func:`read_checkpoint`), with its weights loaded:
    :func:`load_pretrained` without reading the file again. ``source`` goes to ``pretrained_cfg``."""
    model = registry.create_model(imp.model_name, **{**imp.kwargs, **overrides})
    return _load_into(model, imp, overrides, source or f"a {imp.source_format} checkpoint")


def create_model(name: str, pretrained: bool | str | os.PathLike = False, **overrides: Any) -> nn.Module:
    """Build a registered model (``mlplab.create_model``), with weights when ``pretrained`` is

    * ``True``: the published weights of ``name`` (``ARCH.TAG``, or ARCH's default tag) from the
      Hugging Face Hub — ``create_model("mixer_b16_224.goog_in21k_ft_in1k", pretrained=True)``;
    * ``"hf-hub:ORG/NAME"``: that Hub repository;
    * a path: a checkpoint file or folder in any format :func:`load_pretrained` reads.

    ``overrides`` are the architecture's config fields; ``num_classes`` different from the
    checkpoint's gives a new head (zero-initialised for Mixers); a shape the weights do not fit
    is an error naming the tensor. Without ``pretrained`` this is :func:`mlplab.models.create_model`.
    """
    if pretrained is False or pretrained is None:
        return registry.create_model(name, **overrides)
    if pretrained is True:
        name = registry.default_pretrained_tag(name)
        source = hub.HUB_PREFIX + registry.get_pretrained(name)["hf_hub_id"]
    elif isinstance(pretrained, (str, os.PathLike)):
        source = str(pretrained)
    else:
        raise TypeError(f"pretrained is True, a path or 'hf-hub:ORG/NAME', not {pretrained!r}")
    imp = read_checkpoint(source)
    # the checkpoint's class count, LayerNorm eps and activation, unless given
    kept = {k: imp.kwargs[k] for k in ("num_classes", "norm_eps", "act") if k in imp.kwargs}
    fields = {f.name for f in dataclasses.fields(registry.get_model_entry(name).config_cls)}
    model = registry.create_model(name, **{**{k: v for k, v in kept.items() if k in fields}, **overrides})
    return _load_into(model, imp, overrides, source)


def _load_into(model: nn.Module, imp: Imported, overrides: dict[str, Any], source: str) -> nn.Module:
    """Load ``imp``'s weights into ``model`` (a new head when the class counts differ) and record
    where they came from in ``model.pretrained_cfg``."""
    new_head = "head.weight" not in imp.state or model.config.num_classes != imp.state["head.weight"].shape[0]
    state = {k: v for k, v in imp.state.items() if not (new_head and k in _HEAD)}
    _check_shapes(model, state, imp, overrides)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (new_head and k in _HEAD)]
    if missing or unexpected:
        raise ValueError(f"the {imp.source_format} checkpoint does not fit model {imp.model_name!r}: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    keep = ("mean", "std", "interpolation", "crop_pct", "tag", "hf_hub_id", "license")
    model.pretrained_cfg.update({k: (tuple(v) if isinstance(v, list) else v) for k, v in imp.pretrained_cfg.items()
                                 if k in keep and v is not None})
    model.pretrained_cfg["source"] = source
    return model


def _check_shapes(model: nn.Module, state: dict[str, torch.Tensor], imp: Imported, overrides: dict) -> None:
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


def save_pretrained(model: nn.Module, path: str | os.PathLike, hub_layout: bool = False) -> Path:
    """Write ``model`` (built by ``create_model``) as a self-describing safetensors file that
    :func:`load_pretrained` reads back exactly (crash-safe: temp file + rename).

    ``hub_layout=True``: ``path`` is a folder laid out as a Hugging Face Hub repository —
    ``model.safetensors``, ``config.json`` (timm's keys: ``architecture``, ``num_classes``,
    ``pretrained_cfg``) and a model card — ready for ``huggingface_hub`` uploads
    (:func:`push_to_hub`); ``load_pretrained(folder)`` reads it back. A Mixer that timm's
    ``MlpMixer`` builds exactly is written in timm's tensor names with timm's ``architecture`` and
    ``model_args``, so ``timm.create_model("hf-hub:ORG/NAME", pretrained=True)`` loads it too."""
    meta = native.model_metadata(model)
    if not meta:
        raise ValueError("save_pretrained needs a model built by mlplab.create_model (it records the model's "
                         "name and config); for other modules save model.state_dict()")
    if hub_layout:
        config, tensors = _hub_config(model), model.state_dict()
        if (args := timm.timm_model_args(model)) is not None:  # a Mixer timm builds: timm's names, so timm loads it
            config.update(architecture=args[0], model_args=args[1])
            tensors, meta = to_timm(model), {**meta, "format": "pt", "mlplab_layout": "timm"}
        return hub.write_hub_folder(path, lambda p: write_tensors(p, tensors, metadata=meta), config,
                                    _model_card(model))
    if Path(path).suffix != ".safetensors":
        raise ValueError(f"save_pretrained writes safetensors; name the file *.safetensors, not {Path(path).name!r} "
                         "(or pass hub_layout=True to write a Hub folder)")
    return write_tensors(path, model.state_dict(), metadata=meta)


def _hub_config(model: nn.Module) -> dict[str, Any]:
    cfg = dict(getattr(model, "pretrained_cfg", None) or {})
    head = model.head
    return {"architecture": model.model_name, "num_classes": model.config.num_classes,
            "num_features": head.in_features if isinstance(head, nn.Linear) else None, "global_pool": "avg",
            "library_name": "mlplab", "mlplab_version": __version__,
            "model_config": dataclasses.asdict(model.config),
            "pretrained_cfg": {k: v for k, v in cfg.items() if k != "source"}}


def _model_card(model: nn.Module) -> str:
    return (f"---\nlibrary_name: mlplab\ntags:\n- image-classification\n- mlplab\n---\n\n"
            f"# {model.model_name}\n\nAn mlplab `{model.model_name}` "
            f"({sum(p.numel() for p in model.parameters()):,} parameters). Load it with\n\n"
            f"```python\nimport mlplab\nmodel = mlplab.load_pretrained(\"hf-hub:ORG/NAME\")\n```\n\n"
            f"`config.json` holds the architecture and its input settings (`pretrained_cfg`).\n")


def push_to_hub(model: nn.Module, repo_id: str, *, private: bool = False, token: str | None = None,
                commit_message: str = "Upload mlplab model", revision: str | None = None) -> str:
    """Upload ``model`` to the Hugging Face Hub repository ``repo_id`` (created if needed) in the
    layout of ``save_pretrained(..., hub_layout=True)``; returns the commit URL. ``token``: else
    ``HF_TOKEN`` or the login of ``hf auth login``. Anyone then loads it with
    ``mlplab.load_pretrained("hf-hub:" + repo_id)``."""
    hub.hub_repo(hub.HUB_PREFIX + repo_id)  # a clear error for a malformed id, before any work
    with hub.temporary_folder() as tmp:
        folder = save_pretrained(model, Path(tmp) / "repo", hub_layout=True)
        return hub.upload_folder(folder, repo_id, private=private, token=token, commit_message=commit_message,
                                 revision=revision)


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
    return write_tensors(dst, to_timm(model), metadata={"format": "pt"})  # metadata: safetensors only
