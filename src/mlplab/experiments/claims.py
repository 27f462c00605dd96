"""Claims and analyses: what an experiment's ``analyse(runs, manifest)`` returns.

A :class:`Claim` is a published statement, the rule that decides it here, and the outcome —
with the statistics behind it (:class:`mlplab.experiments.verdicts.Verdict`) when seeds are
involved. A leaf module: the specs build claims, the report prints them.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from .verdicts import ALPHA, MIN_SEEDS, Verdict, verdict_word

__all__ = ["Claim", "Analysis", "decided", "STAT_RULE", "KIND_RULE", "PLATEAU_MAX", "require_plateau"]

# A statistical verdict is a claim about trained models: when the training loss of the median run
# still falls faster than this (% per epoch over its last 2 epochs, ``aggregate.loss_change``),
# the models have not plateaued at their scale and HELD / DID NOT HOLD become UNDECIDED.
PLATEAU_MAX = 5.0

STAT_RULE = (f"HELD needs the claimed direction at one-sided α = {ALPHA} across ≥ {MIN_SEEDS} seeds; the "
             f"opposite direction at that level is DID NOT HOLD; anything else is UNDECIDED")
# What decides a claim, by the kind of its verdict (verdicts.KINDS)
KIND_RULE = {
    "test": STAT_RULE,
    "interval": (f"HELD needs the whole 95% interval on the claimed side (≥ {MIN_SEEDS} measurements); the whole "
                 "interval on the other side is DID NOT HOLD; an interval that holds the bound is UNDECIDED"),
    "deterministic": ("an exact computation, not a random experiment: no seeds; HELD within the stated tolerance, "
                      "DID NOT HOLD outside it"),
}


@dataclass
class Claim:
    """A published claim, the rule that decides it here, and the outcome (None: undecided)."""

    claim: str
    rule: str
    held: bool | None
    detail: str = ""
    stats: Verdict | None = None
    trained: bool = True  # about trained models (False: random weights), so subject to the plateau rule

    @property
    def verdict(self) -> str:
        """**HELD**, **DID NOT HOLD** or **UNDECIDED** (without the asterisks)."""
        return verdict_word(self.held)

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "rule": self.rule, "held": self.held, "verdict": self.verdict,
                "detail": self.detail, "stats": self.stats.to_dict() if self.stats else None, "trained": self.trained}


def decided(claim: str, rule: str, v: Verdict, detail: str = "", trained: bool = True) -> Claim:
    """A claim decided by a rule of :mod:`verdicts`: its outcome and evidence are the verdict's; the
    rule is followed by what decides a verdict of that kind (test, interval, deterministic).
    ``trained=False`` marks a claim about untrained (random) weights, which the plateau rule leaves alone."""
    return Claim(claim, f"{rule}. {KIND_RULE[v.kind]}", v.held, detail, v, trained)


@dataclass
class Analysis:
    table: list[dict[str, Any]]  # the main results table -> results.csv
    columns: list[str] | None = None
    figures: dict[str, Any] = field(default_factory=dict)  # file stem -> matplotlib figure
    claims: list[Claim] = field(default_factory=list)
    published: list[dict[str, Any]] = field(default_factory=list)  # published numbers beside ours
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # extra CSVs
    notes: list[str] = field(default_factory=list)


def require_plateau(claims: list[Claim], loss_changes: list[float]) -> str | None:
    """Turn the statistical verdicts of the ``claims`` about trained models into UNDECIDED (in
    place) when the runs have not plateaued: the median |loss change| per epoch over the training
    runs above PLATEAU_MAX. Claims about random weights (``trained=False``) and exact
    computations keep their verdicts. Returns the report's note, or None when the runs have
    plateaued (or none trained)."""
    finite = [abs(x) for x in loss_changes if math.isfinite(x)]
    if not finite:
        return None
    median = statistics.median(finite)
    if median <= PLATEAU_MAX:
        return None
    why = (f"not plateaued: the median run's training loss still changed {median:.1f}% per epoch over its last "
           f"2 epochs (a verdict needs ≤ {PLATEAU_MAX:g}%)")
    for c in claims:
        if c.trained and c.stats is not None and c.held is not None and c.stats.kind != "deterministic":
            c.detail = f"{c.detail}; " if c.detail else ""
            c.detail += f"the statistics said {c.verdict}, but {why}"
            c.held = None
    return (f"{why}: every statistical verdict about the trained models is UNDECIDED; train longer "
            "(schedule.epochs) to decide")
