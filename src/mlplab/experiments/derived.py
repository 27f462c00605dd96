"""Derived keys by name: what a sweep computes from each of its points.

A sweep's ``derived`` entries are :class:`Derive` records, ``derive(name, **params)``: the name of
a function registered with :func:`derived_key` and the parameters it is called with,
``fn(point, **params) -> overrides`` (a dict, or a list of dicts for a fan-out: every run of the
list becomes its own run). A spec states its runs as data this way — "the model of this row",
"every (S, C) pair the budget planner gives" — and the record prints what it does.

Two generic keys live here: ``lookup`` (the entry of a table at a point's key) and ``match`` (the
row of a table that agrees with the point on some keys); the specs register their own
(``model_seed``, ``family_lr``, ``budget_models``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

__all__ = ["DERIVED", "Derive", "derive", "derived_key"]

DerivedFn = Callable[..., "dict[str, Any] | list[dict[str, Any]]"]

# name -> fn(point, **params); filled by ``@derived_key`` as the modules that define them are imported
DERIVED: dict[str, DerivedFn] = {}


def derived_key(name: str) -> Callable[[DerivedFn], DerivedFn]:
    """Register ``fn(point, **params)`` as the derived key ``name`` (decorator)."""

    def deco(fn: DerivedFn) -> DerivedFn:
        if name in DERIVED and DERIVED[name] is not fn:
            raise ValueError(f"derived key {name!r} is registered twice")
        DERIVED[name] = fn
        return fn

    return deco


@dataclass(frozen=True, eq=False)
class Derive:
    """One derived entry of a sweep: the registered function ``name`` with ``params``."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, point: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
        return DERIVED[self.name](point, **self.params)

    def __repr__(self) -> str:
        return f"derive({self.name!r}{''.join(f', {k}=…' for k in self.params)})"


def derive(name: str, **params: Any) -> Derive:
    """The derived key ``name`` with ``params``; an unknown name is an error that lists the known ones."""
    if name not in DERIVED:
        raise ValueError(f"unknown derived key {name!r}; registered: {', '.join(sorted(DERIVED))}")
    return Derive(name, params)


@derived_key("lookup")
def lookup(point: dict[str, Any], key: str, table: Mapping[Any, dict[str, Any]] | Sequence[dict[str, Any]]
           ) -> dict[str, Any]:
    """``table[point[key]]``: the overrides filed under the point's value of ``key`` (a dict by
    value, or a list by position)."""
    return table[point[key]]


@derived_key("match")
def match(point: dict[str, Any], keys: Sequence[str], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first of ``rows`` whose values at ``keys`` equal the point's (a row per axis point,
    e.g. one model per patch size)."""
    for row in rows:
        if all(row.get(k) == point.get(k) for k in keys):
            return row
    raise KeyError(f"no row with {', '.join(f'{k}={point.get(k)!r}' for k in keys)}")


@derived_key("longer")
def longer(point: dict[str, Any], factor: float) -> dict[str, Any]:
    """The same run trained ``factor`` × as long (its duration key scaled — epochs, steps or
    examples, whichever it has), labelled ``meta.longer``: the convergence check's longer run
    (:func:`mlplab.experiments.claims.require_convergence`)."""
    out: dict[str, Any] = {"meta.longer": factor}
    for k in ("schedule.epochs", "schedule.steps", "schedule.examples"):
        v = point.get(k)
        if v is not None:
            out[k] = int(round(v * factor)) if isinstance(v, int) else float(v) * factor
            return out
    raise ValueError("a longer run needs its duration in schedule.epochs, schedule.steps or schedule.examples")
