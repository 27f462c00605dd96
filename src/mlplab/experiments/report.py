"""Reports: aggregate an experiment's runs into CSV tables, figures and ``report.md``.

An experiment's ``analyse(runs, manifest) -> Analysis`` decides what the table and figure show
and which published claims to check; each :class:`Claim` carries the rule that decides it,
stated in the report, so "did not hold at this scale" is an explicit, checkable outcome.
"""
from __future__ import annotations

import math
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from ..utils.io import atomic_write_json, atomic_write_text, read_json
from .aggregate import (
    RunRecord,
    flat_results,
    load_runs,
    loss_change,
    rows_to_csv,
    test_error,
    test_error_sd,
    union_columns,
)
from .claims import CLASSES, LONGER_SUFFIX, Analysis, Claim, require_convergence, tally
from .plan import Experiment
from .protocol import frozen_protocol, protocol_history

__all__ = ["Claim", "Analysis", "write_report", "markdown_table", "load_manifest", "verdict_line"]


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


def verdict_line(claims: Sequence[dict[str, Any]]) -> str:
    """One line: the verdicts of ``claims`` (``Claim.to_dict`` rows) counted by class."""
    if not claims:
        return "Verdict: no published claim is checked by this experiment (illustration only)."
    t = tally(claims)
    parts = []
    for cls in CLASSES:
        counts = [f"{n} **{w}**" for w, n in t[cls].items() if n]
        if counts:
            parts.append(f"{cls}: " + ", ".join(counts))
    return f"Verdict: {len(claims)} published claim(s) checked at this scale — " + "; ".join(parts) + "."


def _undecided_for_missing(exp: Experiment, claims: list[Claim]) -> list[Claim]:
    """Every claim the experiment declares that its analysis did not decide, as UNDECIDED."""
    seen = {c.key for c in claims}
    return [spec.decide(None, detail="not decided: too few finished runs or points for its rule")
            for spec in exp.claims if spec.key not in seen]


def _test_noise(claims: Sequence[Claim], runs: Sequence[RunRecord]) -> None:
    """Beside the seeds' spread, the test-set sampling sd of one run's test error (binomial over
    its test images), for every trained claim (in its detail)."""
    for c in claims:
        if c.cls != "trained" or c.stats is None:
            continue
        sds = [x for x in (test_error_sd(r) for r in (c.runs or runs)) if math.isfinite(x)]
        if sds:
            c.detail = (f"{c.detail}; " if c.detail else "") + (
                f"test-set sampling sd of one run's test error ≈ {sorted(sds)[len(sds) // 2]:.2f} points "
                f"(binomial over its test images), beside the seeds' spread")


def write_report(out_dir: str | Path, exp: Experiment, verbose: bool = False) -> dict[str, Any]:
    """Aggregate ``out_dir`` (made by ``reproduce`` for ``exp``) into ``results.csv``, figures
    (PNG + PDF), ``report.md`` and ``verdicts.json``, deciding every claim again from the runs on
    disk. Returns paths and verdicts."""
    from ..utils.figures import save_figure
    from .plots import draw

    out_dir = Path(out_dir)
    manifest = load_manifest(out_dir)
    runs: list[RunRecord] = load_runs(out_dir)
    longer = [r for r in runs if r.sweep.endswith(LONGER_SUFFIX)]
    main = [r for r in runs if not r.sweep.endswith(LONGER_SUFFIX)]
    skipped = [f"skipped {r.run_dir.relative_to(out_dir)}: {r.problem}; `mlplab reproduce` runs it again"
               for r in runs if r.problem]
    if verbose:
        for line in skipped:
            print(line)
    error = None
    try:
        analysis: Analysis = exp.analyse(main, manifest)
    except Exception:  # the report still says what ran and that analysis failed
        error = traceback.format_exc()
        analysis = Analysis(table=[], figures={"figure": draw([], title=f"{exp.id}: analysis failed")},
                            claims=[], notes=["analysis failed; traceback below"])
    analysis.claims += _undecided_for_missing(exp, analysis.claims)
    analysis.notes.extend(skipped)
    if exp.needs_plateau:
        trained = [r for r in main if r.results]
        analysis.notes += require_convergence(analysis.claims, trained, [r for r in longer if r.results],
                                              loss_change, test_error)
    _test_noise(analysis.claims, main)
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
                 "seed": r.get("run.seed"), **flat_results(r.results or {})} for r in runs]
    atomic_write_text(out_dir / "runs.csv", rows_to_csv(runs_csv))
    verdicts = [c.to_dict() for c in analysis.claims]
    protocol = manifest.get("protocol", {})
    exploratory = _read_optional(out_dir / "exploratory.json")
    md = _markdown(exp, manifest, runs, analysis, verdicts, files, error, exploratory)
    atomic_write_text(out_dir / "report.md", md)
    atomic_write_json(out_dir / "verdicts.json", {"experiment": exp.id, "scale": manifest.get("scale", {}).get("scale"),
                                                 "protocol": protocol, "verdicts": verdicts,
                                                 "tally": tally(verdicts), "line": verdict_line(verdicts)})
    if verbose:
        print(f"report: {out_dir / 'report.md'}")
        print(verdict_line(verdicts))
    return {"report": str(out_dir / "report.md"), "files": [str(f) for f in files], "verdicts": verdicts,
            "error": error}


def _read_optional(p: Path) -> dict[str, Any] | None:
    """A verdicts file beside the report (the exploratory run's), or None."""
    try:
        return read_json(p, "exploratory verdicts") if p.is_file() else None
    except Exception:  # an unreadable side file never stops the report; the report says it is missing
        return None


def _claim_lines(verdicts: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for c in verdicts:
        why = f" — {c['reason']}" if c.get("reason") else ""
        out.append(f"- **{c['verdict']}** ({c['class']}) — {c['claim']}{why}")
    return out


def _protocol_lines(exp: Experiment, manifest: dict[str, Any]) -> list[str]:
    p = manifest.get("protocol", {})
    sc = manifest.get("scale", {}).get("scale", "cpu")
    frozen = frozen_protocol(exp.id, sc)
    L = ["## Protocol", ""]
    L.append(f"- this run: role **{p.get('role', 'exploratory')}**, seeds {p.get('seeds', [])}, protocol hash "
             f"`{p.get('hash', '–')}` (`mlplab reproduce {exp.id} --scale {sc} --protocol` prints its content)")
    if frozen:
        same = frozen["hash"] == p.get("hash")
        L.append(f"- frozen {sc} protocol: `{frozen['hash']}` since {frozen['frozen']} ({frozen['reason']})"
                 + ("" if p.get("role") != "confirmatory" else (" — this run used it" if same else
                                                                 " — **this run differs from it**")))
    else:
        L.append(f"- no frozen {sc} protocol yet: these verdicts are exploratory")
    hist = [h for h in protocol_history(exp.id) if h.get("scale") in (sc, None)]
    if hist:
        L += ["", "### Protocol history", "",
              "| when | commit | role, seeds | protocol | what it gave | why it changed |", "|---|---|---|---|---|---|"]
        for h in hist:
            L.append(f"| {h.get('when', '')} | {h.get('commit', '')} | {h.get('role', '')}, {h.get('seeds', '')} | "
                     f"{h.get('protocol', '')} | {h.get('gave', '')} | {h.get('changed', '')} |")
    return L + [""]


def _exploratory_lines(verdicts: Sequence[dict[str, Any]], exploratory: dict[str, Any] | None) -> list[str]:
    if not exploratory:
        return []
    before = {c.get("key") or c.get("claim"): c for c in exploratory.get("verdicts", [])}
    p = exploratory.get("protocol", {})
    L = ["## Exploratory run beside this one", "",
         f"The exploratory run (seeds {p.get('seeds', '0–2')}, protocol `{p.get('hash', '–')}`) explored the proxy "
         "before its protocol was frozen; it decides nothing reported here.", "",
         "| claim | exploratory | this run |", "|---|---|---|"]
    for c in verdicts:
        e = before.get(c.get("key") or c["claim"], {})
        L.append(f"| {c['claim']} | {e.get('verdict', '–')} | {c['verdict']} |")
    return L + [""]


def _markdown(exp, manifest: dict[str, Any], runs: list[RunRecord], a: Analysis, verdicts: Sequence[dict[str, Any]],
              files: list[Path], error: str | None, exploratory: dict[str, Any] | None) -> str:
    sc = manifest.get("scale", {})
    counts = Counter(r.status for r in runs)
    L = [f"# {exp.id}: {exp.title}", ""]
    claim = published_claim(exp.doc)
    if claim:
        L += [f"**Published claim.** {claim[:1].upper()}{claim[1:]}", ""]
    L += [f"![{f.stem}]({f.name})" for f in files if f.suffix == ".png"][:1] + [""]
    L.append(verdict_line(verdicts))
    L.append("")
    L += _claim_lines(verdicts)
    L.append("")
    L.append("## What was run")
    L.append("")
    L.append(f"- command: `{manifest.get('command', '')}`")
    L.append(f"- scale: **{sc.get('scale')}**; dataset: **{sc.get('dataset')}**"
             + (f" (published: {sc.get('requested_dataset')})"
                if sc.get("requested_dataset") not in (None, sc.get("dataset")) else ""))
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
    walls = [r.results.get("wall_s") for r in runs if r.results and r.results.get("wall_s")]
    if walls:
        L.append(f"- training time: {sum(walls) / 60:.1f} run-min summed over {len(walls)} finished runs "
                 "(runs restored from committed results included)")
    L.append(f"- report written {time.strftime('%Y-%m-%d %H:%M:%S')}")
    for n in manifest.get("notes", []) + a.notes:
        L.append(f"- note: {n}")
    L.append("")
    L += _protocol_lines(exp, manifest)
    L += _exploratory_lines(verdicts, exploratory)
    L.append("## Published claims and verdicts")
    L.append("")
    if not a.claims:
        L.append("No claim is checked: this experiment is an illustration.")
    for c, d in zip(a.claims, verdicts):
        L.append(f"- **{d['verdict']}** ({d['class']}) — {c.claim}")
        L.append(f"  - rule: {c.rule}")
        for ch in c.checks:
            L.append(f"  - precondition: {ch.text()}")
        if c.stats is not None:
            L.append(f"  - statistics: {c.stats.summary()}")
        if d.get("reason") and d["verdict"] in ("UNDECIDED", "NOT TESTABLE"):
            L.append(f"  - why {d['verdict']}: {d['reason']}")
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
