"""Protocols: everything that decides an experiment's verdicts, frozen under a hash before its
confirmatory run (docs/experiments.md, "Protocols").

A protocol is the expanded runs (every run's overrides, the seeds among them), the claims with
their classes, rules and preconditions (:class:`~mlplab.experiments.claims.ClaimSpec`), and the
decision constants (the level, the convergence bounds). Its hash is the SHA-256 of its canonical
JSON. ``mlplab reproduce ID --scale S --protocol`` prints both.

Seeds 0–2 explore a proxy (role ``exploratory``); a reported verdict comes from a run on fresh
seeds (``confirmatory``: seeds ``CONFIRM_FIRST`` onwards, at least ``CONFIRM_SEEDS``) of a protocol
frozen — committed under ``experiments/data/protocols/`` — before that run. Each id's file there also
holds its *protocol history*: every earlier protocol, what it gave and why it changed, shown in
its report.
"""
from __future__ import annotations

import hashlib
import json
from importlib import resources
from typing import Any, Sequence

from .claims import LONGER, LONGER_TOL, PLATEAU_MAX
from .verdicts import ALPHA, MIN_PAIRS, MIN_SEEDS

__all__ = ["ROLES", "CONFIRM_FIRST", "CONFIRM_SEEDS", "protocol_content", "protocol_hash", "protocol_file",
           "frozen_protocol", "protocol_history", "canonical"]

ROLES = ("exploratory", "confirmatory")
EXPLORE_SEEDS = (0, 1, 2)  # seeds for exploring a proxy; never confirmatory
CONFIRM_FIRST = 3  # the first confirmatory seed
CONFIRM_SEEDS = 5  # the fewest seeds a confirmatory run has


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, non-JSON values by their repr."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=repr, ensure_ascii=False)


def protocol_content(exp: Any, scale: Any, runs: Sequence[Any], role: str) -> dict[str, Any]:
    """The protocol of experiment ``exp`` at ``scale`` (a :class:`~mlplab.experiments.recipes.Scale`)
    with its expanded ``runs`` (:class:`~mlplab.experiments.sweep.RunSpec`), as JSON-ready data."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    rows = sorted(({"sweep": s.sweep, "name": s.name, "task": s.task,
                    "overrides": json.loads(canonical(s.overrides))} for s in runs),
                  key=lambda r: (r["sweep"], r["name"]))
    seeds = sorted({int(v) for s in runs for k, v in s.overrides.items() if k in ("run.seed", "seed")})
    return {"experiment": exp.id, "scale": scale.name, "dataset": scale.dataset, "role": role, "seeds": seeds,
            "train_subset": scale.train_subset, "test_subset": scale.test_subset, "runs": rows,
            "claims": [c.to_dict() for c in exp.claims],
            "rules": {"alpha_two_sided": ALPHA, "min_seeds": MIN_SEEDS, "min_timing_pairs": MIN_PAIRS,
                      "plateau_max_pct_per_epoch": PLATEAU_MAX, "longer_factor": LONGER,
                      "longer_tol_points": LONGER_TOL}}


def protocol_hash(content: dict[str, Any]) -> str:
    """The protocol's hash: the first 16 hex digits of the SHA-256 of its canonical JSON."""
    return hashlib.sha256(canonical(content).encode()).hexdigest()[:16]


def protocol_file(id: str) -> Any:
    """The committed protocol file of experiment ``id`` (a package resource; may not exist)."""
    return resources.files(__package__).joinpath("data", "protocols", f"{id}.json")


def _read(id: str) -> dict[str, Any]:
    f = protocol_file(id)
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}


def frozen_protocol(id: str, scale: str) -> dict[str, Any] | None:
    """The frozen confirmatory protocol of ``id`` at ``scale``: ``{"hash", "frozen", "reason",
    "content"}``, or None when none is committed."""
    return _read(id).get("frozen", {}).get(scale)


def protocol_history(id: str) -> list[dict[str, Any]]:
    """Every earlier protocol of ``id`` (oldest first): ``{"scale", "when", "commit", "role",
    "seeds", "protocol", "gave", "changed"}`` — what it was, what it gave, why it changed."""
    return list(_read(id).get("history", []))
