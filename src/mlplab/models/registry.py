"""The one model registry.

A registered name fills in a table of default hyperparameters and calls its family's builder
(timm's pattern). Every family describes its hyperparameters with a typed dataclass, so an
override that the family does not know, or a value of the wrong type, is refused with a message
that lists what is valid.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn

__all__ = [
    "ModelEntry",
    "register_model",
    "create_model",
    "list_models",
    "get_model_entry",
    "model_config",
    "check_config_types",
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
        raise ValueError(
            f"unknown model {name!r}; registered models are: {', '.join(list_models())}"
        ) from None


def _field_names(config_cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(config_cls) if f.init]


def _check_keys(name: str, config_cls: type, values: dict[str, Any]) -> None:
    valid = _field_names(config_cls)
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown override(s) {unknown} for model {name!r}; valid overrides are: {', '.join(valid)}"
        )


def _type_ok(value: Any, tp: Any) -> bool:
    """A small runtime check for the annotations used in model and run configs."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(_type_ok(value, a) for a in args)
    if tp is type(None):
        return value is None
    if origin is typing.Literal:
        return value in args
    if origin in (tuple, list):
        if not isinstance(value, (tuple, list)):
            return False
        if not args:
            return True
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return all(_type_ok(v, args[0]) for v in value)
        if origin is list:
            return all(_type_ok(v, args[0]) for v in value)
        return len(args) == len(value) and all(_type_ok(v, a) for v, a in zip(value, args))
    if origin is dict:
        return isinstance(value, dict)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def check_config_types(obj: Any, where: str) -> None:
    """Raise ``TypeError`` naming the field when a dataclass holds a value of the wrong type."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        tp = hints.get(f.name, Any)
        if not _type_ok(value, tp):
            raise TypeError(
                f"{where}: {f.name}={value!r} has type {type(value).__name__}, expected {tp}"
            )


def model_config(name: str, **overrides: Any) -> Any:
    """The resolved, type-checked config dataclass that ``create_model`` would build from."""
    entry = get_model_entry(name)
    _check_keys(name, entry.config_cls, overrides)
    values = {**entry.defaults, **overrides}
    # ints are accepted where floats are expected; normalise so configs compare and save cleanly
    hints = typing.get_type_hints(entry.config_cls)
    for k, v in list(values.items()):
        if hints.get(k) is float and isinstance(v, int) and not isinstance(v, bool):
            values[k] = float(v)
        if isinstance(v, list):  # JSON/CLI give lists; model configs hold tuples
            values[k] = tuple(v)
    cfg = entry.config_cls(**values)
    check_config_types(cfg, f"model {name!r}")
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
