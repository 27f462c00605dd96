"""The one model registry.

A registered name fills in a table of default hyperparameters and calls its family's builder
(timm's pattern). Every family describes its hyperparameters with a typed dataclass, so an
override that the family does not know, or a value of the wrong type, is refused with a message
that lists what is valid.
"""
from __future__ import annotations

import dataclasses
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


def list_models(family: str | None = None) -> list[str]:
    """Sorted registered names, optionally only those of one family."""
    return sorted(n for n, e in _REGISTRY.items() if family is None or e.family == family)


def get_model_entry(name: str) -> ModelEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; {did_you_mean(name, _REGISTRY)}registered models are: "
                         f"{', '.join(list_models())}") from None


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
    """The resolved, type-checked config dataclass that ``create_model`` would build from."""
    entry = get_model_entry(name)
    _check_keys(name, entry.config_cls, overrides)
    values = {**entry.defaults, **overrides}
    # JSON and the command line give ints for floats and lists for tuples (one coercion path)
    hints = typing.get_type_hints(entry.config_cls)
    values = {k: coerce(v, hints.get(k, Any)) for k, v in values.items()}
    cfg = entry.config_cls(**values)
    check_types(cfg, f"model {name!r}")
    return cfg


def create_model(name: str, **overrides: Any) -> nn.Module:
    """Build a registered model. ``overrides`` replace the registered defaults.

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
    model.model_name = name
    model.config = cfg
    return model
