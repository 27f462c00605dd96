"""Collect the runs of an experiment folder and average them over seeds.

A run folder holds ``spec.json`` (what the sweep asked for), ``config.json`` (the resolved run
config, written by the trainer), ``results.json`` (when finished) and ``error.txt`` (when failed).
A file that cannot be read (cut by a kill or a full disk) is skipped and named in
``RunRecord.problem``; a run without readable results counts as unfinished, and ``reproduce`` runs
it again.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import UnreadableFile
from ..train.config import flatten
from ..utils.io import read_json

__all__ = ["RunRecord", "load_runs", "mean_std", "group_runs", "test_error", "rows_to_csv",
           "spearman", "select", "flat_results", "test_error_sd"]


def union_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every key of ``rows`` in first-seen order."""
    columns: list[str] = []
    for r in rows:
        for k in r:
            if k not in columns:
                columns.append(k)
    return columns


@dataclass
class RunRecord:
    """One run: ``get(key)`` looks in the overrides, then the resolved config, then the results."""

    sweep: str
    name: str
    run_dir: Path
    overrides: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)  # flat dotted keys
    results: dict[str, Any] | None = None
    error: str = ""
    problem: str = ""  # a file of the run that could not be read (the run then counts as unfinished)

    @property
    def status(self) -> str:
        if self.results is not None:
            return "done"
        return "failed" if self.error else "unfinished"

    def get(self, key: str, default: Any = None) -> Any:
        for src in (self.overrides, self.config, self.results or {}):
            if key in src:
                return src[key]
        return default


def _read_json(p: Path, problems: list[str]) -> Any:
    """The JSON in ``p``; None when missing, and when unreadable also a line in ``problems``."""
    try:
        return read_json(p, p.name)
    except FileNotFoundError:
        return None
    except (OSError, UnreadableFile) as e:
        problems.append(f"{p.name} {getattr(e, 'reason', e)}")
        return None


def load_runs(out_dir: str | Path, sweeps: Sequence[str] | None = None) -> list[RunRecord]:
    """Every run folder (one with ``spec.json``) under ``out_dir``, sorted by sweep and name."""
    out_dir = Path(out_dir)
    recs = []
    for spec_path in sorted(out_dir.glob("*/*/spec.json")) + sorted(out_dir.glob("*/spec.json")):
        d = spec_path.parent
        problems: list[str] = []
        spec = _read_json(spec_path, problems) or {}
        sweep = spec.get("sweep", "")
        if sweeps is not None and sweep not in sweeps:
            continue
        cfg = _read_json(d / "config.json", problems)
        flat = flatten(cfg) if isinstance(cfg, dict) else {}
        res = _read_json(d / "results.json", problems)
        err = ""
        if res is None and (d / "error.txt").exists():
            lines = [ln for ln in (d / "error.txt").read_text(errors="replace").splitlines() if ln.strip()]
            err = lines[-1] if lines else "failed"
        recs.append(RunRecord(sweep, spec.get("name", d.name), d, dict(spec.get("overrides", {})), flat,
                              res if isinstance(res, dict) else None, err, "; ".join(problems)))
    return recs


def select(runs: Iterable[RunRecord], sweep: str | None = None, done: bool = True, **where: Any) -> list[RunRecord]:
    """Runs of ``sweep`` (finished only, by default) whose ``get(k) == v`` for each ``k=v``
    (dots in keys written as ``__``)."""
    out = []
    for r in runs:
        if sweep is not None and r.sweep != sweep:
            continue
        if done and r.results is None:
            continue
        if all(r.get(k.replace("__", ".")) == v for k, v in where.items()):
            out.append(r)
    return out


def test_error(r: RunRecord) -> float:
    """Test error in % from ``results.test_acc`` (a fraction or a percentage)."""
    acc = (r.results or {}).get("test_acc")
    if acc is None:
        return float("nan")
    acc = float(acc)
    return 100.0 * (1.0 - acc) if acc <= 1.0 else 100.0 - acc


def test_error_sd(r: RunRecord, default_n: int = 10000) -> float:
    """The sampling sd (points) of one run's test error over its test images: binomial,
    100·sqrt(e(1 − e)/N) — the noise a different draw of test images would add, beside the seeds'."""
    acc = (r.results or {}).get("test_acc")
    n = (r.results or {}).get("test_examples") or r.get("data.test_subset") or default_n
    if acc is None or not n:
        return float("nan")
    e = 1.0 - (float(acc) if float(acc) <= 1.0 else float(acc) / 100.0)
    return 100.0 * math.sqrt(e * (1.0 - e) / float(n))


def loss_change(r: RunRecord, last: int = 2) -> float:
    """Relative change (%) of the training loss per epoch over the last ``last`` epochs: near 0
    when training has plateaued, e.g. −0.5 means the loss still fell 0.5% per epoch at the end."""
    h = [e.get("train_loss") for e in (r.results or {}).get("history", []) if e.get("train_loss") is not None]
    if len(h) < 2:
        return float("nan")
    k = min(last, len(h) - 1)
    return 100.0 * ((h[-1] / h[-1 - k]) ** (1.0 / k) - 1.0) if h[-1 - k] > 0 else float("nan")


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """Mean, sample std (0 for one value) and count of the finite values."""
    v = np.array([x for x in values if x is not None and math.isfinite(float(x))], dtype=float)
    if v.size == 0:
        return float("nan"), float("nan"), 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def group_runs(
    runs: Iterable[RunRecord],
    by: Sequence[str] | dict[str, Callable[[RunRecord], Any]],
    metrics: dict[str, Callable[[RunRecord], float]],
) -> list[dict[str, Any]]:
    """One row per distinct value of ``by`` (keys, or name → function), with
    ``<metric>``, ``<metric>_std`` and ``n`` (the seeds), in first-seen order."""
    if not isinstance(by, dict):
        by = {k.rsplit(".", 1)[-1]: (lambda r, k=k: r.get(k)) for k in by}
    groups: dict[tuple, list[RunRecord]] = {}
    for r in runs:
        key = tuple(json.dumps(f(r), sort_keys=True, default=str) for f in by.values())
        groups.setdefault(key, []).append(r)
    rows = []
    for key, rs in groups.items():
        row: dict[str, Any] = {name: json.loads(k) for name, k in zip(by, key)}
        for mname, f in metrics.items():
            m, s, n = mean_std(f(r) for r in rs)
            row[mname], row[f"{mname}_std"] = m, s
            row.setdefault("n", n)  # the seeds behind the first metric (the test error), not a later NaN column's
        rows.append(row)
    return rows


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (NaN with fewer than 3 finite pairs or no variation)."""
    pairs = [(a, b) for a, b in zip(x, y) if a is not None and b is not None
             and math.isfinite(float(a)) and math.isfinite(float(b))]
    if len(pairs) < 3:
        return float("nan")
    from scipy.stats import spearmanr

    a, b = zip(*pairs)
    if len(set(a)) < 2 or len(set(b)) < 2:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def flat_results(results: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A run's results with nested dicts flattened to dotted keys (``few_shot.5.mean``,
    ``probe.acc``) and lists kept whole (a CSV cell holds them as JSON): every per-run number a
    statistic reads, one column each. The per-epoch ``history`` stays in ``metrics.jsonl``."""
    out: dict[str, Any] = {}
    for k, v in results.items():
        if not prefix and k == "history":
            continue
        if isinstance(v, dict):
            out.update(flat_results(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def rows_to_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """CSV text of ``rows`` (columns: given, or the union in first-seen order)."""
    if columns is None:
        columns = union_columns(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in columns])
    return buf.getvalue()


def _cell(v: Any) -> Any:
    if isinstance(v, float):  # the shortest text that reads back to the same float: statistics recompute exactly
        return "" if not math.isfinite(v) else repr(v)
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return "" if v is None else v
