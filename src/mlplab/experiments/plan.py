"""What an experiment is: a :class:`Plan` of sweeps per scale, and the :class:`Experiment` record
that the ``@experiment`` decorator registers.

A leaf module: it knows sweeps and scales, never the specs, the registry or the report, so
``specs`` → ``plan`` and ``registry`` → ``specs`` import one way.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .claims import ClaimSpec
from .recipes import SCALES, Scale
from .sweep import Sweep

__all__ = ["Plan", "Experiment", "experiment", "EXPERIMENTS", "ALIASES"]


@dataclass
class Plan:
    """What an experiment runs at one scale: stages of sweeps (a stage starts when the one
    before has finished, e.g. CKA after training), plus notes for the report."""

    stages: list[list[Sweep]]
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # the key numbers, for the report

    @property
    def sweeps(self) -> list[Sweep]:
        return [s for st in self.stages for s in st]


@dataclass
class Experiment:
    """One published experiment: ``plan(scale) -> Plan`` and ``analyse(runs, manifest) -> Analysis``."""

    id: str
    title: str
    plan: Callable[[Scale], Plan]
    analyse: Callable[..., Any]
    default_dataset: str = "cifar10"
    aliases: tuple[str, ...] = ()
    doc: str = ""
    needs_plateau: bool = True  # its trained claims need converged runs (claims.require_convergence), and at
    # cpu scale each training condition gets a longer run; False for experiments that train nothing
    scales: tuple[str, ...] = SCALES  # the scales it can be planned at (ImageNet ids: smoke and paper)
    claims: tuple[ClaimSpec, ...] = ()  # the published claims it decides, declared before it runs (the protocol)

    def claim(self, key: str) -> ClaimSpec:
        """The declared claim ``key``."""
        for c in self.claims:
            if c.key == key:
                return c
        raise KeyError(f"{self.id} declares no claim {key!r} (it declares {', '.join(c.key for c in self.claims)})")


# Filled by ``@experiment`` as the spec modules are imported (``mlplab.experiments.specs``);
# the registry orders them by ``specs.ORDER``.
EXPERIMENTS: dict[str, Experiment] = {}
ALIASES: dict[str, str] = {}  # lower-case id or alias -> id


def experiment(id: str, title: str, *, analyse: Callable[..., Any], default_dataset: str = "cifar10",
               aliases: Sequence[str] = (), needs_plateau: bool = True, scales: Sequence[str] = SCALES,
               claims: Sequence[ClaimSpec] = ()):
    """Register ``plan(scale) -> Plan`` as experiment ``id`` (decorator), with the ``claims`` it decides."""

    def deco(fn: Callable[[Scale], Plan]) -> Callable[[Scale], Plan]:
        if id in EXPERIMENTS:
            raise ValueError(f"experiment {id!r} is registered twice")
        keys = [c.key for c in claims]
        if len(set(keys)) != len(keys):
            raise ValueError(f"experiment {id!r} declares a claim key twice: {keys}")
        EXPERIMENTS[id] = Experiment(id, title, fn, analyse, default_dataset, tuple(aliases),
                                     inspect.cleandoc(fn.__doc__ or ""), needs_plateau, tuple(scales), tuple(claims))
        for a in (id, *aliases):
            ALIASES[a.lower()] = id
        return fn

    return deco
