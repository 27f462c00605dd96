"""Reports: aggregate an experiment's runs into CSV tables, figures and ``report.md``.

An experiment's ``analyse(runs, manifest) -> Analysis`` decides what the table and figure show
and which published claims to check; each :class:`Claim` carries the rule that decides it,
stated in the report, so "did not hold at this scale" is an explicit, checkable outcome.
"""
from __future__ import annotations

import json
import math
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from ..utils.io import atomic_write_json, atomic_write_text, read_json
from .aggregate import RunRecord, load_runs, loss_change, rows_to_csv, union_columns
from .claims import Analysis, Claim, require_plateau
from .plan import Experiment

__all__ = ["Claim", "Analysis", "write_report", "markdown_table", "load_manifest"]


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    """The ``experiment.json`` that ``reproduce`` wrote in ``out_dir``."""
    p = Path(out_dir) / "experiment.json"
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist: run `mlplab reproduce ID --out {out_dir}` first")
    return read_json(p, "experiment manifest", fix=f"run the same `mlplab reproduce ... --out {out_dir}` again "
                                                    "(it rewrites the manifest; finished runs are skipped)")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return "–"
        a = abs(v)
        if (v.is_integer() and 100 <= a < 1e9) or 1000 <= a < 1e9:  # counts, also means of counts
            return f"{round(v):,}"
        return f"{v:.3g}" if (a != 0 and (a < 0.01 or a >= 1e5)) else f"{v:.4g}" if a < 100 else f"{v:.1f}"
    if v is None:
        return "–"
    if isinstance(v, (list, tuple)) and len(v) > 4 and all(isinstance(x, (int, float)) for x in v):
        return f"{len(v)} values, {_fmt(float(min(v)))}–{_fmt(float(max(v)))}"  # per-trial lists (in results.csv)
    return str(v)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, max_rows: int = 200) -> str:
    """A Markdown table; ``x`` with ``x_std`` beside it is shown as ``mean ± std``."""
    if not rows:
        return "_(no rows)_\n"
    if columns is None:
        columns = union_columns(rows)
    shown = [c for c in columns if not (c.endswith("_std") and c[:-4] in columns)]
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    for r in rows[:max_rows]:
        cells = []
        for c in shown:
            v = r.get(c)
            sd = r.get(f"{c}_std")
            if f"{c}_std" in columns and isinstance(v, (int, float)) and isinstance(sd, (int, float)) \
                    and (r.get("n", 2) or 0) > 1 and (sd > 0 or "n" in r):
                cells.append(f"{_fmt(v)} ± {_fmt(r.get(f'{c}_std'))}")
            else:
                cells.append(_fmt(v))
        lines.append("| " + " | ".join(cells) + " |")
    if len(rows) > max_rows:
        lines.append(f"\n_({len(rows) - max_rows} more rows in the CSV)_")
    return "\n".join(lines) + "\n"


def published_claim(doc: str) -> str:
    """The ``Published:`` paragraph of an experiment's docstring (what the paper reports), on one
    line; empty when the docstring has none."""
    lines, keep = [], False
    for line in doc.splitlines():
        head = line.split(":", 1)[0]
        if keep and (not line.strip() or (head.isalpha() and head[:1].isupper() and ":" in line and " " not in head)):
            break
        if line.startswith("Published:"):
            keep, line = True, line[len("Published:"):]
        if keep:
            lines.append(line.strip())
    return " ".join(lines).strip()


def _verdict_line(claims: Sequence[Claim]) -> str:
    if not claims:
        return "Verdict: no published claim is checked by this experiment (illustration only)."
    counts = [(sum(c.held is h for c in claims), w) for h, w in ((True, "HELD"), (False, "DID NOT HOLD"),
                                                                  (None, "UNDECIDED"))]
    return (f"Verdict: {len(claims)} published claim(s) checked at this scale: "
            + ", ".join(f"{n} **{w}**" for n, w in counts if n) + ".")


def write_report(out_dir: str | Path, exp: Experiment, verbose: bool = False) -> dict[str, Any]:
    """Aggregate ``out_dir`` (made by ``reproduce`` for ``exp``) into ``results.csv``, figures
    (PNG + PDF), ``report.md`` and ``verdicts.json``, deciding every claim again from the runs on
    disk. Returns paths and verdicts."""
    from ..utils.figures import save_figure
    from .plots import draw

    out_dir = Path(out_dir)
    manifest = load_manifest(out_dir)
    runs: list[RunRecord] = load_runs(out_dir)
    skipped = [f"skipped {r.run_dir.relative_to(out_dir)}: {r.problem}; `mlplab reproduce` runs it again"
               for r in runs if r.problem]
    if verbose:
        for line in skipped:
            print(line)
    error = None
    try:
        analysis: Analysis = exp.analyse(runs, manifest)
    except Exception:  # the report still says what ran and that analysis failed
        error = traceback.format_exc()
        analysis = Analysis(table=[], figures={"figure": draw([], title=f"{exp.id}: analysis failed")},
                            claims=[], notes=["analysis failed; traceback below"])
    analysis.notes.extend(skipped)
    if exp.needs_plateau:
        note = require_plateau(analysis.claims, [loss_change(r) for r in runs if r.results])
        if note:
            analysis.notes.append(note)
    files: list[Path] = []
    atomic_write_text(out_dir / "results.csv", rows_to_csv(analysis.table, analysis.columns))
    files.append(out_dir / "results.csv")
    for name, rows in analysis.tables.items():
        atomic_write_text(out_dir / f"{name}.csv", rows_to_csv(rows))
        files.append(out_dir / f"{name}.csv")
    if not analysis.figures:
        analysis.figures = {"figure": draw([], title=exp.id)}
    for stem, fig in analysis.figures.items():
        files += save_figure(fig, out_dir / stem, dpi=130)
    runs_csv = [{"sweep": r.sweep, "run": r.name, "status": r.status, "error": r.error,
                 **{k: v for k, v in (r.results or {}).items() if not isinstance(v, (list, dict))}} for r in runs]
    atomic_write_text(out_dir / "runs.csv", rows_to_csv(runs_csv))
    md = _markdown(exp, manifest, runs, analysis, files, error)
    atomic_write_text(out_dir / "report.md", md)
    verdicts = [c.to_dict() for c in analysis.claims]
    atomic_write_json(out_dir / "verdicts.json", {"experiment": exp.id, "verdicts": verdicts,
                                                 "line": _verdict_line(analysis.claims)})
    if verbose:
        print(f"report: {out_dir / 'report.md'}")
        print(_verdict_line(analysis.claims))
    return {"report": str(out_dir / "report.md"), "files": [str(f) for f in files], "verdicts": verdicts,
            "error": error}


def _markdown(exp, manifest: dict[str, Any], runs: list[RunRecord], a: Analysis, files: list[Path],
              error: str | None) -> str:
    sc = manifest.get("scale", {})
    counts = Counter(r.status for r in runs)
    L = [f"# {exp.id}: {exp.title}", ""]
    claim = published_claim(exp.doc)
    if claim:
        L += [f"**Published claim.** {claim[:1].upper()}{claim[1:]}", ""]
    L += [f"![{f.stem}]({f.name})" for f in files if f.suffix == ".png"][:1] + [""]
    L.append(_verdict_line(a.claims))
    L.append("")
    for c in a.claims:
        L.append(f"- **{c.verdict}** — {c.claim}" + (f": {c.stats.summary()}" if c.stats is not None else ""))
    L.append("")
    L.append("## What was run")
    L.append("")
    L.append(f"- command: `{manifest.get('command', '')}`")
    L.append(f"- scale: **{sc.get('scale')}**; dataset: **{sc.get('dataset')}**"
             + (f" (published: {sc.get('requested_dataset')})" if sc.get("requested_dataset") not in (None, sc.get("dataset")) else ""))
    if sc.get("train_subset") or sc.get("test_subset"):
        L.append(f"- data: {sc.get('train_subset') or 'all'} training / {sc.get('test_subset') or 'all'} test examples")
    for sw in manifest.get("sweeps", []):
        L.append(f"- sweep `{sw['name']}`: {sw['runs']} runs × {sw['epochs']:g} epoch(s), task `{sw['task']}`"
                 + (f" — {sw['description']}" if sw.get("description") else ""))
    if manifest.get("settings"):
        L.append("- settings: " + "; ".join(f"{k} = {v}" for k, v in manifest["settings"].items()))
    L.append("- runs: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f" (of {len(runs)})")
    if manifest.get("wall_s") is not None:
        L.append(f"- wall time: {manifest['wall_s'] / 60:.1f} min with {manifest.get('jobs', 1)} job(s), "
                 f"executor {manifest.get('executor', 'inline')}; estimate was "
                 f"{manifest.get('cost', {}).get('est_s', 0) / 60:.1f} min")
    L.append(f"- report written {time.strftime('%Y-%m-%d %H:%M:%S')}")
    for n in manifest.get("notes", []) + a.notes:
        L.append(f"- note: {n}")
    L.append("")
    L.append("## Published claims and verdicts")
    L.append("")
    if not a.claims:
        L.append("No claim is checked: this experiment is an illustration.")
    for c in a.claims:
        L.append(f"- **{c.verdict}** — {c.claim}")
        L.append(f"  - rule: {c.rule}")
        if c.stats is not None:
            L.append(f"  - statistics: {c.stats.summary()}")
        if c.detail:
            L.append(f"  - ours: {c.detail}")
    L.append("")
    if a.published:
        L.append("## Published numbers beside ours")
        L.append("")
        L.append(markdown_table(a.published))
    L.append("## Results")
    L.append("")
    L.append(markdown_table(a.table, a.columns))
    for name, rows in a.tables.items():
        L.append(f"### {name}")
        L.append("")
        L.append(markdown_table(rows, max_rows=40))
    L.append("## Figures")
    L.append("")
    for f in files:
        if f.suffix == ".png":
            L.append(f"![{f.stem}]({f.name})")
    L.append("")
    L.append("Files: " + ", ".join(f"`{f.name}`" for f in files) + ", `runs.csv`, `verdicts.json`.")
    failed = [r for r in runs if r.status == "failed"]
    if failed:
        L.append("")
        L.append("## Failed runs")
        L.append("")
        for r in failed[:30]:
            L.append(f"- `{r.sweep}/{r.name}`: {r.error} (see `{r.sweep}/{r.name}/error.txt`)")
    if error:
        L.append("")
        L.append("## Analysis error")
        L.append("")
        L.append("```")
        L.append(error.strip())
        L.append("```")
    L.append("")
    L.append("## About this experiment")
    L.append("")
    L.append(exp.doc)
    return "\n".join(L) + "\n"
