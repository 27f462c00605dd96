#!/usr/bin/env python
"""Generate the result tables of README.md and docs/ from the committed result files.

    python scripts/gen_docs.py            # rewrite the generated blocks in place
    python scripts/gen_docs.py --check    # exit 1 naming every block that differs (tests/test_docs.py)
    python scripts/gen_docs.py --add runs/experiments/fig5-cpu   # commit a finished reproduction

Sources (one file per measurement, named by what and where it was measured):

- ``docs/results/<id>-<scale>-<machine>/``: a confirmatory reproduction (``mlplab reproduce --all
  --confirm``): ``verdicts.json``, ``report.md``, tables, figure, ``protocol.json`` and every run's
  results under ``runs/``; ``docs/results/explore/...``: exploratory ones (seeds 0–2);
  ``docs/results/recovered/...``: a ``verdicts.json`` alone, what an earlier report said (``source``).
- ``benchmarks/results/<what>-pt<torch>-<machine>.json``: what ``benchmarks/`` wrote (or recorded
  from an earlier report), each with its ``tables``.
- ``src/mlplab/experiments/data/cost_calibration.json``: its ``lockstep`` table, the factors
  ``reproduce --lockstep auto`` decides by (``benchmarks/calibrate_cost.py --lockstep``).

A generated block sits between ``<!-- gen_docs: NAME -->`` and ``<!-- /gen_docs -->``; the text
around it is written by hand.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
BENCH = REPO / "benchmarks" / "results"
CALIBRATION = REPO / "src" / "mlplab" / "experiments" / "data" / "cost_calibration.json"
#: the files with generated blocks, relative to the repository
TARGETS = ("README.md", "docs/experiments.md", "docs/performance.md")
SCALE_RANK = {"paper": 3, "cpu": 2, "quick": 1, "smoke": 0}
BLOCK = re.compile(r"(<!-- gen_docs: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /gen_docs -->)", re.S)
VERDICTS = ("HELD", "DID NOT HOLD", "NOT TESTABLE", "UNDECIDED")


# ----------------------------------------------------------------------------------- reproductions

CLASSES = ("trained", "identity", "measurement")
BH_Q = 0.05  # the false discovery rate of the summary across experiments


def load_result(folder: Path) -> dict[str, Any]:
    """One committed reproduction: id, scale, machine, date, minutes, role, seeds, claims and the file to link."""
    v = json.loads((folder / "verdicts.json").read_text())
    manifest = json.loads((folder / "experiment.json").read_text()) if (folder / "experiment.json").exists() else {}
    exp = v["experiment"]
    scale = v.get("scale") or manifest.get("scale", {}).get("scale")
    machine = v.get("machine") or folder.name.removeprefix(f"{exp}-{scale}-")
    minutes = v.get("minutes")
    if minutes is None and manifest.get("wall_s") is not None:
        minutes = round(manifest["wall_s"] / 60, 1)
    link = folder / ("report.md" if (folder / "report.md").exists() else "verdicts.json")
    run_walls = [json.loads(f.read_text()).get("wall_s") for f in sorted(folder.glob("runs/*/*/results.json"))]
    run_minutes = round(sum(w for w in run_walls if w) / 60, 1) if run_walls else None
    where = json.loads((folder / "machine.json").read_text()) if (folder / "machine.json").exists() else {}
    protocol = v.get("protocol") or {}
    recovered = "source" in v
    claims = [{"claim": c["claim"], "verdict": c["verdict"],
               "class": c.get("class") or ("trained" if c.get("trained", True) else "measurement"),
               "reason": c.get("reason", ""), "p_two_sided": (c.get("stats") or {}).get("p_two_sided")}
              for c in v["verdicts"]]
    return {"id": exp, "scale": scale, "machine": machine, "minutes": minutes, "run_minutes": run_minutes,
            "load": v.get("loadavg") or where.get("loadavg"),
            "measured": v.get("measured") or manifest.get("finished", "")[:10], "claims": claims,
            "verdicts": [c["verdict"] for c in claims], "link": link.relative_to(REPO).as_posix(),
            "recovered": recovered,
            "role": "recovered" if recovered else protocol.get("role", "exploratory"), "seeds": protocol.get("seeds"),
            "hash": protocol.get("hash")}


def load_results(root: Path = RESULTS) -> list[dict[str, Any]]:
    """Every committed reproduction: confirmed ones in ``root``, exploratory ones in ``root/explore``,
    those recovered from an earlier report's prose (no run data) in ``root/recovered``."""
    if not root.exists():
        return []
    out = []
    for where, role in ((root, None), (root / "explore", "exploratory"), (root / "recovered", "recovered")):
        for f in sorted(where.iterdir()) if where.exists() else []:
            if (f / "verdicts.json").exists():
                r = load_result(f)
                out.append({**r, "role": role or r["role"]})
    return out


def campaigns_under_way(root: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """Per id, a confirmatory folder whose runs are being committed but whose report is not yet:
    ``{"runs": committed, "of": the frozen protocol's run count, "seeds", "link"}``."""
    sys.path.insert(0, str(REPO / "src"))
    from mlplab.experiments.protocol import frozen_protocol

    out: dict[str, dict[str, Any]] = {}
    for f in sorted(root.glob("*/protocol.json")) if root.exists() else []:
        rec = json.loads(f.read_text())
        folder = f.parent
        if rec.get("role") != "confirmatory" or (folder / "verdicts.json").exists():
            continue
        for id in experiment_titles():
            scale = folder.name.removeprefix(f"{id}-").split("-")[0]
            if folder.name.startswith(f"{id}-") and (frozen_protocol(id, scale) or {}).get("hash") == rec.get("hash"):
                runs = len(list((folder / "runs").glob("*/*/results.json")))
                total = len(frozen_protocol(id, scale)["content"].get("runs", []))
                out[id] = {"runs": runs, "of": total, "seeds": rec.get("seeds"),
                           "link": folder.relative_to(REPO).as_posix()}
    return out


def latest(results: list[dict[str, Any]], role: str = "confirmatory") -> dict[str, dict[str, Any]]:
    """Per id the most recent result of ``role``; on the same day the larger scale."""
    best: dict[str, dict[str, Any]] = {}
    for r in results:
        if r["role"] != role:
            continue
        key = (r["measured"], SCALE_RANK.get(r["scale"], 0))
        if r["id"] not in best or key > best[r["id"]]["_key"]:
            best[r["id"]] = {**r, "_key": key}
    return best


def verdict_summary(verdicts: list[str]) -> str:
    """``**HELD** ×3`` or ``**HELD** ×2, **DID NOT HOLD** ×1`` (claims in the order of the report)."""
    if not verdicts:
        return "–"
    parts = [(w, verdicts.count(w)) for w in VERDICTS if w in verdicts]
    return ", ".join(f"**{w}**" + (f" ×{n}" if n > 1 or len(parts) > 1 else "") for w, n in parts)


def by_class(claims: list[dict[str, Any]]) -> str:
    """``trained: **HELD** ×2; identity: **HELD**`` — the verdicts of each class apart."""
    parts = [f"{cls}: {verdict_summary([c['verdict'] for c in claims if c['class'] == cls])}" for cls in CLASSES
             if any(c["class"] == cls for c in claims)]
    return "; ".join(parts) or "–"


def _seeds(seeds: list[int] | None) -> str:
    if not seeds:
        return "–"
    return f"{len(seeds)} ({seeds[0]}–{seeds[-1]})" if seeds == list(range(seeds[0], seeds[-1] + 1)) else str(seeds)


def experiments_table(results: list[dict[str, Any]], titles: dict[str, str], link_prefix: str = "",
                      under_way: dict[str, dict[str, Any]] | None = None) -> str:
    """The README's table: every registered id, what it tests, its confirmatory verdicts by class,
    seeds and report (or how far its confirmatory run has got: ``under_way``); then the totals over
    all ids with Benjamini–Hochberg over the trained claims."""
    best = latest(results)
    explored = latest(results, "exploratory")
    lines = ["| id | what it tests | confirmed verdicts, by class | seeds | report |", "|---|---|---|---|---|"]
    for id, title in titles.items():
        r = best.get(id)
        if r is None:
            e, u = explored.get(id), (under_way or {}).get(id)
            where = f"[exploratory only]({link_prefix}{e['link']})" if e else "–"
            state = f"under way: {u['runs']} of {u['of']} runs committed" if u else "not confirmed yet"
            lines.append(f"| `{id}` | {title} | {state} | {_seeds(u['seeds']) if u else '–'} | {where} |")
            continue
        lines.append(f"| `{id}` | {title} | {by_class(r['claims'])} | {_seeds(r['seeds'])} | "
                     f"[{Path(r['link']).parent.name}]({link_prefix}{r['link']}) |")
    return "\n".join(lines) + "\n\n" + summary_line(best) + "\n"


def summary_line(best: dict[str, dict[str, Any]]) -> str:
    """The totals of the confirmed verdicts by class, and the trained claims' decisions that
    survive Benjamini–Hochberg at ``BH_Q`` across every id."""
    claims = [c for r in best.values() for c in r["claims"]]
    if not claims:
        return "**Totals:** no experiment is confirmed yet."
    parts = []
    for cls in CLASSES:
        mine = [c["verdict"] for c in claims if c["class"] == cls]
        if mine:
            parts.append(f"{cls} {len(mine)}: " + ", ".join(f"{mine.count(w)} {w}" for w in VERDICTS if w in mine))
    trained = [c for c in claims if c["class"] == "trained" and c["verdict"] in ("HELD", "DID NOT HOLD")
               and c.get("p_two_sided") is not None]
    tested = [c for c in claims if c["class"] == "trained" and c.get("p_two_sided") is not None
              and c["verdict"] != "NOT TESTABLE"]
    adj = bh(sorted(c["p_two_sided"] for c in tested))
    cut = max((p for p, a in zip(sorted(c["p_two_sided"] for c in tested), adj) if a < BH_Q), default=-1.0)
    kept = [c for c in trained if c["p_two_sided"] <= cut]
    return (f"**Totals over {len(best)} confirmed ids:** " + "; ".join(parts) + f". Benjamini–Hochberg at "
            f"{BH_Q:g} over the {len(tested)} tested trained claims keeps {len(kept)} of the {len(trained)} decided "
            f"({sum(c['verdict'] == 'HELD' for c in kept)} HELD, {sum(c['verdict'] == 'DID NOT HOLD' for c in kept)} "
            "DID NOT HOLD).")


def bh(p_sorted: list[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values of ascending ``p_sorted``: the one rule,
    ``mlplab.experiments.verdicts.benjamini_hochberg``."""
    sys.path.insert(0, str(REPO / "src"))
    from mlplab.experiments.verdicts import benjamini_hochberg

    return benjamini_hochberg(p_sorted)


def all_results_table(results: list[dict[str, Any]]) -> str:
    """docs/experiments.md: every committed reproduction, one row each."""
    lines = ["| id | scale | machine | role | seeds | verdicts, by class | last invocation, min (load) | "
             "training, run-min | files |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r["id"], -SCALE_RANK.get(r["scale"], 0), r["role"], r["machine"])):
        minutes = "–" if r["minutes"] is None else f"{r['minutes']:g}" + (f" ({r['load']})" if r.get("load") else "")
        kind = "recorded from an earlier report, no run data" if r["recovered"] else "report, figure, per-run data"
        trained = "–" if r.get("run_minutes") is None else f"{r['run_minutes']:g}"
        lines.append(f"| `{r['id']}` | {r['scale']} | {r['machine']} | {r['role']} | {_seeds(r['seeds'])} | "
                     f"{by_class(r['claims'])} | {minutes} | {trained} | [{kind}]({r['link'].removeprefix('docs/')}) |")
    return "\n".join(lines) + "\n"


def open_claims_table(results: list[dict[str, Any]]) -> str:
    """docs/experiments.md: every confirmed claim that is UNDECIDED or NOT TESTABLE, with its reason."""
    lines = ["| id | claim | verdict | why |", "|---|---|---|---|"]
    for id, r in sorted(latest(results).items()):
        for c in r["claims"]:
            if c["verdict"] in ("UNDECIDED", "NOT TESTABLE"):
                lines.append(f"| `{id}` | {c['claim']} | {c['verdict']} | {c['reason'] or '–'} |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else "No confirmed claim is UNDECIDED or NOT TESTABLE.\n"


def add_run(run_dir: Path, machine: str | None = None, load: str | None = None) -> Path:
    """Copy a finished exploratory ``mlplab reproduce`` folder's report files to
    ``docs/results/explore/<id>-<scale>-<machine>/`` (confirmed ones are committed by the campaign),
    with ``machine.json`` (the machine tag, the CPU and the load average while it ran, when given)."""
    sys.path.insert(0, str(REPO / "src"))
    from mlplab.utils.cpu import cpu_has_native_bf16, cpu_info, machine_tag

    manifest = json.loads((run_dir / "experiment.json").read_text())
    exp, scale = manifest["experiment"], manifest["scale"]["scale"]
    dest = RESULTS / "explore" / f"{exp}-{scale}-{machine or machine_tag()}"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for f in sorted(run_dir.iterdir()):
        if f.is_file() and (f.name in ("report.md", "verdicts.json", "experiment.json")
                            or f.suffix in (".csv", ".png")):
            shutil.copy2(f, dest / f.name)
    where = {"machine": machine or machine_tag(), "cpu": cpu_info().get("model name"),
             "native_bf16": cpu_has_native_bf16(), "loadavg": load}
    (dest / "machine.json").write_text(json.dumps(where, indent=2) + "\n")
    return dest


# ------------------------------------------------------------------------------------- benchmarks

def _md_table(t: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(map(str, t["columns"])) + " |", "|" + "---|" * len(t["columns"])]
    lines += ["| " + " | ".join("–" if c is None else str(c) for c in row) + " |" for row in t["rows"]]
    return "\n".join(lines) + "\n"


def benchmark_sections(root: Path = BENCH) -> str:
    """docs/performance.md: every benchmark result file as a section with its command and tables."""
    out = []
    for f in sorted(root.glob("*.json")) if root.exists() else []:
        d = json.loads(f.read_text())
        title = d.get("title") or d.get("benchmark") or f.stem
        out.append(f"### {title} — {d.get('machine', '?')}\n")
        env = d.get("environment") or d.get("env") or {}
        facts = [f"CPU: {d.get('cpu') or env.get('processor', '?')}",
                 f"torch {d.get('torch') or env.get('torch', '?')}"]
        load = d.get("loadavg") or env.get("loadavg")
        if load:
            facts.append(f"load {load if isinstance(load, str) else '/'.join(f'{x:.1f}' for x in load)}")
        if "source" in d:
            facts.append("recorded from an earlier report")
        out.append(f"`{d.get('command', '?')}` ({'; '.join(facts)}; file: "
                   f"[{f.name}](../{f.relative_to(REPO).as_posix()}))\n")
        for t in d.get("tables", []):
            if t.get("caption"):
                out.append(f"{t['caption']}:\n")
            out.append(_md_table(t))
        for n in d.get("notes", []):
            out.append(f"- {n}")
        if d.get("notes"):
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def _ratio(r: dict[str, float]) -> str:
    return f"{r['median']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]"


def lockstep_section(calibration: Path = CALIBRATION) -> str:
    """docs/performance.md, seeds in lockstep: per model, what ``reproduce --lockstep auto`` reads
    (the calibration's ``lockstep`` table) and does with it (stacks where the factor is below 1)."""
    t = json.loads(calibration.read_text()).get("lockstep")
    if not t:
        return "Not measured: `reproduce --lockstep auto` trains every seed alone.\n"
    rows, pays, not_ = [], [], []
    for model, x in sorted(t["measured"].items()):
        f = t["factor"][model]
        (pays if f < 1 else not_).append(f"`{model}` ({f:.3f}×)")
        rows.append([f"`{model}`", f"`{x['recipe']}`", x["seeds"], f"{x['epochs']} ({x['recipe_epochs']:g})",
                     _ratio(x["cpu"]), _ratio(x["wall"]), f"{x['cpu_at_recipe_epochs']:.2f}",
                     f"{x['wall_at_recipe_epochs']:.2f}",
                     "in lockstep" if f < 1 else "one after another"])
    columns = ["model", "recipe", "seeds", "epochs timed (recipe's)", "lockstep / sequential, CPU s [95% CI]",
               "wall [95% CI]", "at the recipe's epochs: CPU s", "wall", "`--lockstep auto`"]
    verdict = (f"On `{t['machine']}`, `--lockstep auto` stacks the seeds of {', '.join(pays) or 'no model'} and "
               f"trains those of {', '.join(not_) or 'every other model'} one after another (the factor: CPU seconds "
               "of the seeds in lockstep over one after another, at the recipe's epochs; below 1 it stacks).")
    files = sorted({x["source"] for x in t["measured"].values()})
    load = t["loadavg"]
    return (verdict + "\n\n" + _md_table({"columns": columns, "rows": rows}) + "\n"
            f"Load {load[0]:.1f}–{load[1]:.1f}; files: "
            + ", ".join(f"[{Path(f).name}](../{f})" for f in files) + ".\n")


def cost_fit_section(calibration: Path = CALIBRATION) -> str:
    """docs/experiments.md, the cost model: per CPU kind, the constants fitted to its committed runs'
    CPU seconds (the calibration's ``machines`` table) and how far each run lies from them."""
    kinds = json.loads(calibration.read_text()).get("machines") or {}
    if not kinds:
        return "No CPU kind has fitted constants: every estimate uses the fallback constants.\n"
    rows = [[f"`{tag}`", f["runs"], f"{f['rate'] / 1e9:.1f}", f"{f['kappa'] * 1e9:.2f}", f"{f['tau'] * 1e6:.1f}",
             f"{f.get('step_s', 0.0) * 1e3:.2f}", f"{f['overhead_s']:.1f}", f"{f['rp_slowdown']:.2f}",
             "{median:.2f} ({min:.2f}–{max:.2f})".format(**f["measured_over_estimated"])]
            for tag, f in sorted(kinds.items())]
    columns = ["CPU kind", "runs", "R, GFLOP/s", "κ, ns per activation", "τ0, µs per example", "τs, ms per step",
               "start-up, s", "RP slowdown", "measured / estimated CPU s per run: median (range)"]
    return _md_table({"columns": columns, "rows": rows})


# ---------------------------------------------------------------------------------------- blocks

def experiment_titles() -> dict[str, str]:
    sys.path.insert(0, str(REPO / "src"))
    from mlplab.experiments.registry import get_experiment, list_experiments

    return {id: get_experiment(id).title for id in list_experiments()}


def render(name: str) -> str:
    """The text of generated block ``name``."""
    if name == "experiments":
        return experiments_table(load_results(), experiment_titles(), under_way=campaigns_under_way())
    if name == "all-results":
        return all_results_table(load_results())
    if name == "open-claims":
        return open_claims_table(load_results())
    if name == "benchmarks":
        return benchmark_sections()
    if name == "lockstep":
        return lockstep_section()
    if name == "cost-fit":
        return cost_fit_section()
    raise KeyError(f"unknown generated block {name!r}: expected experiments, all-results, open-claims, benchmarks, "
                   "lockstep or cost-fit")


def regenerate(text: str) -> str:
    """``text`` with every generated block rendered afresh."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def stale(targets=TARGETS, repo: Path = REPO) -> list[str]:
    """The files whose generated blocks differ from what the result files give."""
    return [t for t in targets if (repo / t).exists() and regenerate((repo / t).read_text()) != (repo / t).read_text()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a generated block is stale")
    p.add_argument("--add", type=Path, metavar="RUN_DIR", help="first copy a finished reproduction into docs/results/")
    p.add_argument("--machine", default=None, help="with --add: the machine tag (default: this CPU's)")
    p.add_argument("--load", default=None, help="with --add: the load average while it ran, e.g. '7-11'")
    a = p.parse_args(argv)
    if a.add:
        print(f"added {add_run(a.add, a.machine, a.load).relative_to(REPO)}")
    if a.check:
        bad = stale()
        for t in bad:
            print(f"{t}: generated tables differ from the result files; run python scripts/gen_docs.py",
                  file=sys.stderr)
        return 1 if bad else 0
    for t in TARGETS:
        path = REPO / t
        if path.exists():
            new = regenerate(path.read_text())
            if new != path.read_text():
                path.write_text(new)
                print(f"rewrote {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
