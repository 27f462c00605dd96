"""Typed dataclass configs: the one place where values are coerced to and checked against their
annotations (model configs in ``mlplab.models.registry``, run configs in ``mlplab.train.config``).

JSON and the command line give ``int`` where a ``float`` is meant and ``list`` where a ``tuple``
is meant; :func:`coerce` converts exactly those two cases and nothing else, and
:func:`check_types` then refuses any value that still does not fit its annotation.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from ..errors import BadType

__all__ = ["coerce", "type_ok", "check_types"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def coerce(value: Any, tp: Any) -> Any:
    """int -> float where a float is expected; list -> tuple where a tuple is expected."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is float and _is_int(value):
        return float(value)
    if origin is tuple and isinstance(value, list):
        inner = [a for a in args if a is not Ellipsis]
        if len(inner) == len(value):
            return tuple(coerce(v, a) for v, a in zip(value, inner))
        if inner:
            return tuple(coerce(v, inner[0]) for v in value)
        return tuple(value)
    if origin in (typing.Union, types.UnionType) and value is not None:
        if float in args and int not in args and _is_int(value):
            return float(value)
        for a in args:
            if typing.get_origin(a) is tuple and isinstance(value, list):
                return coerce(value, a)
    return value


def type_ok(value: Any, tp: Any) -> bool:
    """A small runtime check for the annotations used in model and run configs."""
    if tp is Any:
        return True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(type_ok(value, a) for a in args)
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
            return all(type_ok(v, args[0]) for v in value)
        if origin is list:
            return all(type_ok(v, args[0]) for v in value)
        return len(args) == len(value) and all(type_ok(v, a) for v, a in zip(value, args))
    if origin is dict:
        return isinstance(value, dict)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return _is_int(value)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def check_types(obj: Any, where: str) -> None:
    """Raise :class:`~mlplab.errors.BadType` naming the field when a dataclass holds a value of
    the wrong type."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        tp = hints.get(f.name, Any)
        if not type_ok(value, tp):
            raise BadType(f"{where}: {f.name}={value!r} has type {type(value).__name__}, expected {tp}")
