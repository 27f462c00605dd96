"""Typed dataclass configs: the one place where values are coerced to and checked against their
annotations (model configs in ``mlplab.models.registry``, run configs in ``mlplab.train.config``).

JSON and the command line give ``int`` where a ``float`` is meant and ``list`` where a ``tuple``
is meant; :func:`coerce` converts exactly those two cases and nothing else, and
:func:`check_types` then refuses any value that still does not fit its annotation.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from typing import Any

from ..errors import BadType

__all__ = ["coerce", "type_ok", "check_types", "describe_fields"]


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


def type_name(tp: Any) -> str:
    """An annotation as a person reads it: ``int | None``, ``auto|cpu|cuda``, ``tuple[float, float]``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return "|".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if tp is type(None):
        return "None"
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    return getattr(tp, "__name__", str(tp))


_FIELD = re.compile(r"^\s+(\w+)\s*:[^#]*?(?:#\s*(.*))?$")
_COMMENT = re.compile(r"^\s+#\s*(.*)$")


def _field_comments(cls: type) -> dict[str, str]:
    """Each field's meaning from the class source: the comment at the end of its line
    (``name: T = v  # meaning``), else the comment lines just above it."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):  # no source (a frozen build): no meanings
        return {}
    out: dict[str, str] = {}
    above: list[str] = []
    for line in lines[1:]:
        if c := _COMMENT.match(line):
            above.append(c.group(1).strip())
        elif m := _FIELD.match(line):
            out[m.group(1)] = (m.group(2) or "").strip() or " ".join(above)
            above = []
        else:
            above = []
    return out


def describe_fields(config: Any, prefix: str = "") -> list[dict[str, str]]:
    """Every field of a (nested) config dataclass, or of an instance (its values shown as the
    defaults), as ``{"key", "type", "default", "meaning"}``: dotted keys, the annotation, the
    default and the comment beside (or above) the field in the source — the schema itself is the
    one description (``mlplab train --list-keys``)."""
    cls = config if isinstance(config, type) else type(config)
    if isinstance(config, type):
        try:
            config = cls()
        except TypeError:  # a required field: show the fields' own defaults
            pass
    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    rows: list[dict[str, str]] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints.get(f.name, Any)
        if not isinstance(config, type):
            default = getattr(config, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            rows += describe_fields(default if dataclasses.is_dataclass(default) else tp, key + ".")
            continue
        shown = "(required)" if default is dataclasses.MISSING else repr(default)
        rows.append({"key": key, "type": type_name(tp), "default": shown, "meaning": comments.get(f.name, "")})
    return rows
