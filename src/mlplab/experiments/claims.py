"""Claims: what a published experiment asserts, how it is decided here, and what it needs first.

A :class:`ClaimSpec` is written with the experiment, before anything runs, and is part of its
protocol (:mod:`mlplab.experiments.protocol`): the published statement, its *class*, the rule
that decides it, the preconditions (:class:`Need`) its runs must meet for the rule to apply, and
the published effect in the rule's units where one is known. An experiment's
``analyse(runs, manifest)`` decides each declared claim (:meth:`ClaimSpec.decide`) into a
:class:`Claim`, which carries one of four verdicts (docs/science.md, "What a verdict is"):

- **HELD** / **DID NOT HOLD**: the rule's decision at a two-sided 5% level (:mod:`.verdicts`);
- **NOT TESTABLE**: a precondition is not met — the claim's regime is not reached, its premise is
  absent, or its runs did not converge (:func:`require_convergence`); never DID NOT HOLD;
- **UNDECIDED**: testable, but the evidence is thin; it says why, the smallest effect its runs
  could detect and the seeds that would decide the published (or, lacking one, the observed) effect.

Classes keep what a reproduction found apart from what holds by construction:

- ``trained``: a statistical result about trained models (the findings a reproduction is for);
- ``identity``: exact mathematics, checked to float precision (true by construction);
- ``measurement``: cost, time or size of models, measured.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .verdicts import ALPHA, MIN_SEEDS, POWER, TAIL, Verdict, detectable_effect, seeds_needed

__all__ = ["CLASSES", "Need", "Check", "ClaimSpec", "Claim", "Analysis", "VERDICTS", "PLATEAU_MAX", "LONGER",
           "LONGER_TOL", "LONGER_SUFFIX", "require_convergence", "condition_key", "tally", "converged_need",
           "RULE_WORDS"]

CLASSES = ("trained", "identity", "measurement")
VERDICTS = ("HELD", "DID NOT HOLD", "NOT TESTABLE", "UNDECIDED")

# Convergence of a condition (one model and setting over its seeds), a precondition of every
# `trained` claim: (1) its median run's training loss changed ≤ PLATEAU_MAX % per epoch over the
# last 2 epochs; (2) the same model trained LONGER × as long (one seed, the protocol's first) does
# not reach a test error lower by more than LONGER_TOL points + 5% of the error — a model still
# learning under a decaying schedule shows there, where its last epochs' loss looks flat.
PLATEAU_MAX = 5.0
LONGER = 2.0
LONGER_TOL = 0.5
LONGER_SUFFIX = "-longer"  # the sweep of a training sweep's longer runs

RULE_WORDS = {
    "test": (f"HELD when the claimed direction is significant at {TAIL:g} one-sided (two-sided {ALPHA:g}) across "
             f"≥ {MIN_SEEDS} seeds; DID NOT HOLD when the opposite is; otherwise UNDECIDED. The interval shown is "
             "the one that matches the decision"),
    "interval": ("HELD when the whole 95% interval lies on the claimed side of the bound; DID NOT HOLD when it lies on "
                 "the other side; UNDECIDED when it holds the bound"),
    "deterministic": "an exact computation: HELD within the stated tolerance, DID NOT HOLD outside it",
}

_OPS: dict[str, Callable[[float, float], bool]] = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
                                                   ">": lambda a, b: a > b, "<": lambda a, b: a < b}


@dataclass(frozen=True)
class Need:
    """A precondition written with a claim before it runs: the analysis measures ``quantity``,
    which must satisfy ``op bound`` for the claim to be testable; ``why`` says where the bound
    comes from. ``kind``: ``regime`` (width, γm, data size reached), ``premise`` (the effect the
    claim explains occurs) or ``convergence``."""

    quantity: str
    op: str
    bound: float
    why: str
    kind: str = "regime"

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"Need {self.quantity!r}: op must be one of {', '.join(_OPS)}, not {self.op!r}")
        if self.kind not in ("regime", "premise", "convergence"):
            raise ValueError(f"Need {self.quantity!r}: kind must be regime, premise or convergence, not {self.kind!r}")

    def check(self, measured: Mapping[str, float]) -> "Check":
        v = measured.get(self.quantity)
        if v is None or not math.isfinite(float(v)):
            return Check(self, None, None)
        return Check(self, float(v), bool(_OPS[self.op](float(v), self.bound)))

    def to_dict(self) -> dict[str, Any]:
        return {"quantity": self.quantity, "op": self.op, "bound": self.bound, "why": self.why, "kind": self.kind}


@dataclass(frozen=True)
class Check:
    """A :class:`Need` evaluated on the runs: ``met`` None when the quantity could not be measured."""

    need: Need
    value: float | None
    met: bool | None
    detail: str = ""

    def text(self) -> str:
        n = self.need
        got = "not measured" if self.value is None else f"{self.value:.4g}"
        word = {True: "met", False: "NOT met", None: "unknown"}[self.met]
        return (f"{n.kind} {word}: {n.quantity} {n.op} {n.bound:g} (ours {got}; {n.why})"
                + (f" — {self.detail}" if self.detail else ""))

    def to_dict(self) -> dict[str, Any]:
        return {**self.need.to_dict(), "value": self.value, "met": self.met, "detail": self.detail}


@dataclass(frozen=True)
class ClaimSpec:
    """A published claim as this experiment tests it, declared before it runs (see the module
    docstring). ``effect``: the published effect in the units of the rule's test (e.g. points of
    test error per doubling of width), for the seeds an UNDECIDED would need; None when the paper
    gives none in comparable units (then the observed effect is used, and said so)."""

    key: str
    text: str
    cls: str
    rule: str
    needs: tuple[Need, ...] = ()
    effect: float | None = None
    effect_source: str = ""

    def __post_init__(self) -> None:
        if self.cls not in CLASSES:
            raise ValueError(f"claim {self.key!r}: class must be one of {', '.join(CLASSES)}, not {self.cls!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "text": self.text, "class": self.cls, "rule": self.rule,
                "needs": [n.to_dict() for n in self.needs], "effect": self.effect, "effect_source": self.effect_source}

    def decide(self, v: Verdict | None, *, label: str = "", measured: Mapping[str, float] | None = None,
               detail: str = "", runs: Sequence[Any] = ()) -> "Claim":
        """This claim decided by the verdict ``v`` (None: no rule could run, e.g. no finished runs),
        its preconditions checked on ``measured``; ``label`` tells instances apart (e.g. "Ω = 2^14");
        ``runs``: the training runs it rests on, whose convergence :func:`require_convergence` checks."""
        text = f"{label}: {self.text}" if label else self.text
        rule = self.rule + (f". {RULE_WORDS[v.kind]}" if v is not None else "")
        checks = [n.check(measured or {}) for n in self.needs]
        return Claim(text, rule, v.held if v is not None else None, detail, v, self.cls, checks, self.key,
                     self.effect, self.effect_source, list(runs))


@dataclass
class Claim:
    """A declared claim decided on this run's data: the rule's outcome (``held``), its evidence
    (``stats``), its class and its evaluated preconditions (``checks``)."""

    claim: str
    rule: str
    held: bool | None
    detail: str = ""
    stats: Verdict | None = None
    cls: str = "trained"
    checks: list[Check] = field(default_factory=list)
    key: str = ""
    effect: float | None = None  # the published effect (rule units), for the seeds needed
    effect_source: str = ""
    runs: list[Any] = field(default_factory=list)  # the training runs the claim rests on

    @property
    def verdict(self) -> str:
        """HELD, DID NOT HOLD, NOT TESTABLE or UNDECIDED."""
        if any(c.met is False for c in self.checks):
            return "NOT TESTABLE"
        if any(c.met is None for c in self.checks) or self.held is None:
            return "UNDECIDED"
        return "HELD" if self.held else "DID NOT HOLD"

    def power(self) -> dict[str, Any] | None:
        """For a t-based verdict: the effect its seeds detect at 80% power, and the seeds needed for
        the published effect (else the observed one)."""
        v = self.stats
        if v is None or v.kind != "test" or not (math.isfinite(v.spread) and v.spread > 0) or v.n < 2:
            return None
        target, source = (self.effect, "published") if self.effect is not None else (v.effect, "observed")
        margin, of = v.extra.get("margin"), "effect"
        if margin is not None and target is not None:  # a margin rule tests the distance to its margin
            target = margin - (abs(target) if v.extra.get("equivalence") else target)
            of = "distance to the margin"
        return {"detectable": detectable_effect(v.spread, v.n), "n": v.n, "spread": v.spread,
                "target": target, "target_source": source, "target_of": of,
                "seeds_needed": seeds_needed(target, v.spread), "unit": v.unit}

    def reason(self) -> str:
        """One line: why the verdict is what it is (for NOT TESTABLE and UNDECIDED: which
        precondition or rule, and what would decide it)."""
        failed = [c for c in self.checks if c.met is False]
        if failed:
            return "; ".join(c.text() for c in failed)
        unknown = [c for c in self.checks if c.met is None]
        if unknown:
            return "precondition not checked: " + "; ".join(c.text() for c in unknown)
        v = self.stats
        if self.held is not None or v is None:
            return "" if v is not None else (self.detail or "no rule could run")
        if v.kind != "test":
            return v.detail or "the interval holds the bound"
        pw = self.power()
        if v.n < MIN_SEEDS or pw is None:
            return v.detail or f"fewer than {MIN_SEEDS} seeds"
        u = f" {pw['unit']}" if pw["unit"] else ""
        need = pw["seeds_needed"]
        return (f"not significant (p = {v.p_claim:.2g}, needs < {TAIL:g}); with {pw['n']} seeds the smallest effect "
                f"detectable at {POWER:.0%} power is ±{pw['detectable']:.3g}{u}; the {pw['target_source']} "
                f"{pw['target_of']} {pw['target']:+.3g}{u} needs "
                + (f"{need} seeds" if need else "more seeds than can be run"))

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "claim": self.claim, "class": self.cls, "rule": self.rule, "held": self.held,
                "verdict": self.verdict, "reason": self.reason(), "detail": self.detail,
                "stats": self.stats.to_dict() if self.stats else None,
                "checks": [c.to_dict() for c in self.checks], "power": self.power(),
                "conditions": sorted({condition_key(r) for r in self.runs})}


def converged_need() -> Need:
    return Need("converged", ">=", 1, f"every condition's loss changed ≤ {PLATEAU_MAX:g}%/epoch at the end, and a "
                f"{LONGER:g}× longer run is not better by more than {LONGER_TOL:g} points + 5%", kind="convergence")


def condition_key(run: Any) -> str:
    """A condition: the run's sweep (a longer run's counts as its base sweep) and name without its
    seeds (``seed=``, ``run.seed=``, ``model.kwargs.seed=`` …) — the runs of one condition differ
    only in the seed."""
    sweep = str(getattr(run, "sweep", "")).removesuffix(LONGER_SUFFIX)
    parts = [p for p in str(getattr(run, "name", "")).split(",")
             if not (p.partition("=")[0] == "seed" or p.partition("=")[0].endswith((".seed", "_seed")))]
    return f"{sweep}/{','.join(parts)}"


def _plateau(runs: Sequence[Any], loss_change: Callable[[Any], float]) -> dict[str, float]:
    """condition → the median over its runs of |training-loss change| (% per epoch, last 2 epochs)."""
    by: dict[str, list[float]] = {}
    for r in runs:
        x = loss_change(r)
        if math.isfinite(x):
            by.setdefault(condition_key(r), []).append(abs(x))
    return {k: statistics.median(v) for k, v in by.items()}


def require_convergence(claims: Sequence[Claim], runs: Sequence[Any], longer: Sequence[Any],
                        loss_change: Callable[[Any], float], test_error: Callable[[Any], float]) -> list[str]:
    """Add the convergence precondition to every ``trained`` claim, per condition of the runs it
    rests on (all ``runs`` when it names none): each condition's median loss change ≤
    ``PLATEAU_MAX``, and its ``longer`` run (the same name in the sweep + ``LONGER_SUFFIX``: one
    seed, LONGER × the training) not better than the condition's run of that seed by more than
    ``LONGER_TOL`` + 5% of its error. A condition with no longer run passes (2) unchecked and is
    named. Returns the report's notes."""
    plateau = _plateau(runs, loss_change)
    by_name = {(r.sweep, r.name): r for r in runs}
    gain: dict[str, tuple[float, float]] = {}  # condition → (test error of its run, of the longer run), same seed
    for r in longer:
        base = by_name.get((r.sweep.removesuffix(LONGER_SUFFIX), r.name))
        if base is not None:
            gain[condition_key(base)] = (test_error(base), test_error(r))
    notes = []
    for c in claims:
        if c.cls != "trained" or c.verdict == "NOT TESTABLE":
            continue
        conds = sorted({condition_key(r) for r in (c.runs or runs)})
        bad = [f"{k} {plateau[k]:.1f}%/epoch" for k in conds if k in plateau and plateau[k] > PLATEAU_MAX]
        slow = [f"{k} {gain[k][0]:.2f} → {gain[k][1]:.2f}% ({LONGER:g}× longer)" for k in conds
                if k in gain and gain[k][0] - gain[k][1] > LONGER_TOL + 0.05 * gain[k][0]]
        unchecked = [k for k in conds if k not in gain]
        detail = "; ".join(filter(None, [
            ("still falling: " + ", ".join(bad)) if bad else "",
            ("still learning: " + ", ".join(slow)) if slow else "",
            (f"{len(unchecked)} condition(s) without a longer run") if unchecked and longer else ""]))
        met = not bad and not slow
        c.checks.append(Check(converged_need(), 1.0 if met else 0.0, met, detail))
        if not met:
            notes.append(f"{c.claim}: not converged ({detail})")
    return notes


def tally(claims: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """class → verdict → count, over claim dicts (``Claim.to_dict`` or ``verdicts.json`` rows)."""
    out = {cls: {v: 0 for v in VERDICTS} for cls in CLASSES}
    for c in claims:
        out[c.get("class", "trained")][c.get("verdict", "UNDECIDED")] += 1
    return out


@dataclass
class Analysis:
    table: list[dict[str, Any]]  # the main results table -> results.csv
    columns: list[str] | None = None
    figures: dict[str, Any] = field(default_factory=dict)  # file stem -> matplotlib figure
    claims: list[Claim] = field(default_factory=list)
    published: list[dict[str, Any]] = field(default_factory=list)  # published numbers beside ours
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # extra CSVs
    notes: list[str] = field(default_factory=list)
