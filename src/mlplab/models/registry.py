"""The one model registry.

A registered name fills in a table of default hyperparameters and calls its family's builder
(timm's pattern). Every family describes its hyperparameters with a typed dataclass, so an
override that the family does not know, or a value of the wrong type, is refused with a message
that lists what is valid.

Pretrained weights are named as timm names them, ``ARCH.TAG`` (``mixer_b16_224.goog_in21k_ft_in1k``):
:func:`register_pretrained` records each tag's Hub repository and data settings, and every model
built here carries ``model.pretrained_cfg`` (input size, mean/std, classes, source). Loading the
weights is :func:`mlplab.interop.create_model`'s job (``mlplab.create_model(name, pretrained=True)``).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn

from ..errors import did_you_mean
from ..utils.typed import check_types, coerce

__all__ = [
    "ModelEntry",
    "register_model",
    "create_model",
    "list_models",
    "get_model_entry",
    "model_config",
    "register_pretrained",
    "get_pretrained",
    "default_pretrained_tag",
    "make_pretrained_cfg",
]


@dataclass(frozen=True)
class ModelEntry:
    """One registered name: its family's config class, builder and default values."""

    name: str
    family: str
    config_cls: type
    builder: Callable[[Any], nn.Module]
    defaults: dict[str, Any] = field(default_factory=dict)
    description: str = ""


_REGISTRY: dict[str, ModelEntry] = {}
_PRETRAINED: dict[str, dict[str, Any]] = {}  # "arch.tag" -> its pretrained_cfg entries


def register_model(
    name: str,
    *,
    family: str,
    config_cls: type,
    builder: Callable[[Any], nn.Module],
    description: str = "",
    **defaults: Any,
) -> ModelEntry:
    """Register ``name``: ``create_model(name)`` builds ``builder(config_cls(**defaults))``."""
    if name in _REGISTRY:
        raise ValueError(f"model {name!r} is registered twice")
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"config_cls for {name!r} must be a dataclass")
    _check_keys(name, config_cls, defaults)
    entry = ModelEntry(name, family, config_cls, builder, dict(defaults), description)
    _REGISTRY[name] = entry
    return entry


def register_pretrained(name: str, *, hf_hub_id: str, num_classes: int, mean: tuple[float, ...],
                        std: tuple[float, ...], interpolation: str = "bicubic", crop_pct: float = 1.0,
                        license: str | None = None) -> None:
    """Record the weights ``ARCH.TAG`` of a registered architecture: where they live on the
    Hugging Face Hub and how their inputs were prepared (timm's ``pretrained_cfg``)."""
    arch, _, tag = name.partition(".")
    if not tag or arch not in _REGISTRY:
        raise ValueError(f"pretrained weights are named ARCH.TAG of a registered ARCH, not {name!r}")
    if name in _PRETRAINED:
        raise ValueError(f"pretrained weights {name!r} are registered twice")
    _PRETRAINED[name] = {"tag": tag, "hf_hub_id": hf_hub_id, "num_classes": num_classes, "mean": tuple(mean),
                         "std": tuple(std), "interpolation": interpolation, "crop_pct": crop_pct, "license": license}


def list_models(filter: str | typing.Sequence[str] = "", *, family: str | None = None,
                pretrained: bool = False) -> list[str]:
    """Sorted registered names matching ``filter`` (shell wildcards, timm's ``list_models``:
    ``"mixer*"``; a list of patterns matches any), optionally of one ``family``. With
    ``pretrained=True``: the names of published weights, ``ARCH.TAG``, instead."""
    patterns = [filter] if isinstance(filter, str) else list(filter)
    names = _PRETRAINED if pretrained else _REGISTRY
    return sorted(n for n in names
                  if (family is None or _REGISTRY[n.partition(".")[0]].family == family)
                  and (not any(patterns) or any(fnmatch.fnmatchcase(n, p) for p in patterns if p)))


def get_model_entry(name: str) -> ModelEntry:
    try:
        return _REGISTRY[name.partition(".")[0]]
    except KeyError:
        arch = name.partition(".")[0]
        raise ValueError(f"unknown model {name!r}; {did_you_mean(arch, _REGISTRY)}registered models are: "
                         f"{', '.join(list_models())}") from None


def get_pretrained(name: str) -> dict[str, Any]:
    """The registered pretrained weights ``ARCH.TAG`` (a copy), or an error listing the tags of ARCH."""
    get_model_entry(name)
    if name not in _PRETRAINED:
        arch = name.partition(".")[0]
        tags = [n for n in _PRETRAINED if n.startswith(arch + ".")]
        raise ValueError(f"no pretrained weights {name!r}; " + (
            f"{arch} has: {', '.join(tags)}" if tags else
            f"{arch} has none (list_models(pretrained=True) lists the published weights); give a file or "
            "'hf-hub:ORG/NAME' as pretrained="))
    return dict(_PRETRAINED[name])


def default_pretrained_tag(name: str) -> str:
    """``name`` itself when it is ``ARCH.TAG``, else ARCH's first registered weights (timm's default)."""
    if "." in name:
        return name
    get_model_entry(name)
    tags = [n for n in _PRETRAINED if n.startswith(name + ".")]
    if not tags:
        raise ValueError(f"{name} has no published weights (list_models(pretrained=True) lists them); give a "
                         "file or 'hf-hub:ORG/NAME' as pretrained=, or pretrained=False for random weights")
    return tags[0]


def make_pretrained_cfg(name: str, cfg: Any, source: str | None = None, **entries: Any) -> dict[str, Any]:
    """``model.pretrained_cfg``: timm's keys (``input_size``, ``num_classes``, ``mean``, ``std``,
    ``interpolation``, ``crop_pct``, ``hf_hub_id``, ``tag``) plus ``architecture`` and ``source``
    (None for random weights, else the file or ``hf-hub:ORG/NAME`` they were loaded from). Mean and
    std are None where no weights fix them (the data pipeline normalises per dataset)."""
    arch, _, tag = name.partition(".")
    known = _PRETRAINED.get(name, {})
    size = getattr(cfg, "image_size", None)
    out = {"architecture": arch, "tag": tag or None, "hf_hub_id": None, "source": source,
           "input_size": (getattr(cfg, "in_chans", None), size, size) if size else None,
           "num_classes": None, "mean": None, "std": None,
           "interpolation": "bicubic", "crop_pct": 1.0, "license": None}
    out.update({k: v for k, v in known.items() if k != "num_classes"})
    out.update(entries)
    out["num_classes"] = getattr(cfg, "num_classes", out["num_classes"])  # the model's own, else one given
    return out


def _field_names(config_cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(config_cls) if f.init]


def _check_keys(name: str, config_cls: type, values: dict[str, Any]) -> None:
    valid = _field_names(config_cls)
    unknown = sorted(set(values) - set(valid))
    if unknown:
        hint = did_you_mean(unknown[0], valid)
        raise ValueError(
            f"unknown override(s) {unknown} for model {name!r}; {hint}valid overrides are: {', '.join(valid)}"
        )


def model_config(name: str, **overrides: Any) -> Any:
    """The resolved, type-checked config dataclass that ``create_model`` would build from
    (``ARCH.TAG``: with the tag's class count)."""
    entry = get_model_entry(name)
    _check_keys(name, entry.config_cls, overrides)
    tagged = {"num_classes": get_pretrained(name)["num_classes"]} if "." in name else {}
    values = {**entry.defaults, **tagged, **overrides}
    # JSON and the command line give ints for floats and lists for tuples (one coercion path)
    hints = typing.get_type_hints(entry.config_cls)
    values = {k: coerce(v, hints[k]) for k, v in values.items()}  # every key is a checked field
    cfg = entry.config_cls(**values)
    check_types(cfg, f"model {name!r}")
    return cfg


def create_model(name: str, **overrides: Any) -> nn.Module:
    """Build a registered model with random weights. ``overrides`` replace the registered
    defaults; ``ARCH.TAG`` builds ARCH with the class count of those weights (loading them:
    ``mlplab.create_model(name, pretrained=True)``, :func:`mlplab.interop.create_model`).

    >>> m = create_model("s_mixer", image_size=32, num_tokens=64, hidden_dim=64, depth=2)
    """
    cfg = model_config(name, **overrides)
    builder = get_model_entry(name).builder
    seed = getattr(cfg, "seed", None)
    if seed is None:
        model = builder(cfg)
    else:
        # the config's seed fixes the whole model (weights, permutations, masks), without
        # disturbing the caller's global RNG stream
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = builder(cfg)
    model.model_name = name.partition(".")[0]
    model.config = cfg
    model.pretrained_cfg = make_pretrained_cfg(name, cfg)
    return model
