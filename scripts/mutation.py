"""Mutation testing of the science core with mutmut: ``scripts/mutation.sh [MODULE...]``.

For each module of ``scripts/mutation_targets.toml`` (default: all of them, one at a time) this
builds a workspace ``mutation-work/<module>/`` (links to ``src/`` and ``tests/`` and a
``pyproject.toml`` whose ``[tool.mutmut]`` names the module and its fast tests), runs
``mutmut run`` there, and writes ``mutation-report/<module>.md`` (the survivors' diffs) and
``mutation-report/summary.{md,json}`` (killed / timeout / equivalent / survived per module).

A survivor that no test can kill (it changes nothing observable) is written down ONCE in
``tests/mutation_equivalent.toml`` with the reason, keyed by module, function and the changed
line before and after (mutmut's numbering shifts when the code changes; these do not), and is
then counted as equivalent, not survived.

Not part of CI: a module takes minutes. See docs/testing.md, "Mutation testing".
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ROOT / "scripts" / "mutation_targets.toml"
EQUIVALENT = ROOT / "tests" / "mutation_equivalent.toml"
WORK = ROOT / "mutation-work"
REPORT = ROOT / "mutation-report"
PACKAGE = "mlplab"

# mutmut's exit codes, grouped the way the report counts them (mutmut.stats.status_by_exit_code)
KILLED = {1, 3}
TIMEOUT = {36, -24, 24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}  # no selected test calls the function: a survivor
# the tests' process died of SIGILL, SIGABRT, SIGBUS, SIGFPE or SIGSEGV (a mutant that hands the C
# kernels a wrong size or pointer): detected, by a crash rather than an assertion
CRASHED = {-4, -6, -7, -8, -11}


@dataclass
class Target:
    name: str  # file or folder under src/mlplab/, as given on the command line
    files: list[str]  # under src/mlplab/
    tests: list[str]
    functions: list[str] = field(default_factory=list)  # globs on "f" / "Class.method"; empty: all
    deselect: list[str] = field(default_factory=list)  # pytest node ids left out under mutmut

    @property
    def slug(self) -> str:
        return self.name.removesuffix(".py").replace("/", "-")


@dataclass
class Mutant:
    key: str  # mutmut's name, e.g. mlplab.experiments.verdicts.x_compare__mutmut_7
    file: str  # under src/mlplab/
    function: str  # "compare", "Verdict.summary"
    status: str  # killed, timeout, crashed, survived, no tests, other (suspicious, not checked)
    diff: str = ""
    before: str = ""
    after: str = ""
    reason: str = ""  # why it is equivalent (from the equivalents file)


def load_targets(path: Path = TARGETS) -> dict[str, Target]:
    table = tomllib.loads(path.read_text())["modules"]
    out = {}
    for name, t in table.items():
        src = ROOT / "src" / PACKAGE / name
        files = t.get("files") or ([name] if name.endswith(".py") else
                                   sorted(str(p.relative_to(ROOT / "src" / PACKAGE)) for p in src.glob("*.py")))
        out[name] = Target(name, files, list(t["tests"]), list(t.get("functions", [])),
                           list(t.get("deselect", [])))
    return out


def load_equivalents(path: Path = EQUIVALENT) -> list[dict]:
    if not path.exists():
        return []
    entries = tomllib.loads(path.read_text()).get("equivalent", [])
    for e in entries:
        missing = {"module", "function", "before", "after", "reason"} - set(e)
        if missing:
            raise SystemExit(f"{path.name}: an [[equivalent]] entry lacks {', '.join(sorted(missing))}: {e}")
    return entries


def dotted(file: str) -> str:
    return f"{PACKAGE}." + file.removesuffix(".py").replace("/", ".")


def function_of(key: str, file: str) -> str:
    """mutmut's mangled name → "f" or "Class.method"."""
    local = key[len(dotted(file)) + 1:].rsplit("__mutmut_", 1)[0]
    if local.startswith("xǁ"):
        return ".".join(local[2:].split("ǁ"))
    return local.removeprefix("x_")


def key_globs(target: Target) -> list[str]:
    """mutmut run's name filters for ``functions`` (empty: every mutant)."""
    globs = []
    for f in target.files:
        for fn in target.functions:
            cls, _, meth = fn.rpartition(".")
            local = f"xǁ{cls}ǁ{meth}" if cls else f"x_{fn}"
            globs.append(f"{dotted(f)}.{local}__mutmut_*")
    return globs


def mutmut_config(target: Target) -> str:
    def arr(xs):
        return "[" + ", ".join(json.dumps(x) for x in xs) + "]"
    deselect = [arg for node in target.deselect for arg in ("--deselect", node)]
    return ("\n[tool.mutmut]\n"
            'source_paths = ["src"]\n'
            f"only_mutate = {arr(f'src/{PACKAGE}/{f}' for f in target.files)}\n"
            f"pytest_add_cli_args_test_selection = {arr(target.tests)}\n"
            f"pytest_add_cli_args = {arr(['-p', 'no:cacheprovider', *deselect])}\n"
            "use_git_change_detection = false\n")


def prepare(target: Target, fresh: bool) -> Path:
    """The module's workspace: links to src/ and tests/, the project's pyproject.toml (its pytest
    settings) with a [tool.mutmut] table for this module. ``fresh`` drops earlier results."""
    ws = WORK / target.slug
    if fresh and ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True, exist_ok=True)
    for name in ("src", "tests"):
        link = ws / name
        if not link.exists():
            link.symlink_to(ROOT / name, target_is_directory=True)
    (ws / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + mutmut_config(target))
    drop_stale_copies(target, ws)
    return ws


def drop_stale_copies(target: Target, ws: Path) -> None:
    """mutmut copies the unmutated files into mutants/src once; drop the copies whose source has
    changed since (copies keep the source's mtime), so that a --survivors run sees today's code."""
    copies = ws / "mutants" / "src"
    mutated = {f"{PACKAGE}/{f}" for f in target.files}
    for copy in copies.rglob("*.py") if copies.is_dir() else []:
        rel = copy.relative_to(copies).as_posix()
        source = ROOT / "src" / rel
        if rel not in mutated and (not source.exists() or source.stat().st_mtime != copy.stat().st_mtime):
            copy.unlink()


def run_mutmut(target: Target, ws: Path, jobs: int, names: list[str]) -> tuple[float, float]:
    """Run mutmut in the workspace; returns (wall seconds, CPU seconds of mutmut and its children).
    The CPU time does not depend on what else the machine runs: CPU / cores ≈ the wall time on a
    quiet machine."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutmut puts mutants/src first
    env.setdefault("OMP_NUM_THREADS", "1")
    mutmut = shutil.which("mutmut", path=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    if mutmut is None:
        raise SystemExit("mutmut is not installed in this environment: pip install -e '.[dev]'")
    cmd = [mutmut, "run", "--max-children", str(jobs), *names]
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(ws / "mutmut.log", "w") as log:
        rc = subprocess.call(cmd, cwd=ws, env=env, stdout=log, stderr=subprocess.STDOUT)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        tail = (ws / "mutmut.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"mutmut failed on {target.name} (exit {rc}); the end of {ws / 'mutmut.log'}:\n{tail}")
    return time.monotonic() - t0, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def status_of(code: int | None) -> str:
    if code in KILLED:
        return "killed"
    if code in TIMEOUT:
        return "timeout"
    if code in CRASHED:
        return "crashed"
    if code in SURVIVED:
        return "survived"
    if code in NO_TESTS:
        return "no tests"
    return "other"


def changed_lines(diff: str) -> tuple[str, str]:
    """The removed and the added lines of a diff, each stripped, joined by " / "."""
    lines = diff.splitlines()
    minus = [ln[1:].strip() for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln[1:].strip() for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    return " / ".join(x for x in minus if x), " / ".join(x for x in plus if x)


def collect(target: Target, ws: Path) -> list[Mutant]:
    """The module's mutants and their outcomes, read from mutmut's files in the workspace; the
    diffs of those not killed, from mutmut itself (run in the workspace)."""
    mutants = []
    globs = key_globs(target)
    for f in target.files:
        meta = ws / "mutants" / "src" / PACKAGE / (f + ".meta")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        for key, code in sorted(codes.items(), key=lambda kv: (kv[0].rsplit("__mutmut_", 1)[0],
                                                                int(kv[0].rsplit("_", 1)[1]))):
            if globs and not any(fnmatch.fnmatchcase(key, g) for g in globs):
                continue
            mutants.append(Mutant(key, f, function_of(key, f), status_of(code)))
    todo = [m for m in mutants if m.status not in ("killed", "timeout", "crashed")]
    if todo:
        for m, diff in zip(todo, diffs(ws, [(m.key, f"src/{PACKAGE}/{m.file}") for m in todo])):
            m.diff = diff
            m.before, m.after = changed_lines(diff)
    return mutants


def diffs(ws: Path, keys: list[tuple[str, str]]) -> list[str]:
    """mutmut's diff of each (mutant, source path), computed in one child process in the workspace."""
    code = ("import json, sys\n"
            "from mutmut.mutation.diff_apply import get_diff_for_mutant\n"
            "print(json.dumps([get_diff_for_mutant(k, path=p) for k, p in json.load(sys.stdin)]))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ws, input=json.dumps(keys), capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def mark_equivalent(target: Target, mutants: list[Mutant], entries: list[dict]) -> list[dict]:
    """Mark the survivors that the equivalents file lists; returns this module's entries that
    matched no survivor (stale: the code or the mutant changed, or a test kills it now)."""
    mine = [e for e in entries if e["module"] == target.name]
    used = set()
    for m in mutants:
        if m.status not in ("survived", "no tests"):
            continue
        for i, e in enumerate(mine):
            if (e["function"], e["before"].strip(), e["after"].strip()) == (m.function, m.before, m.after):
                m.status, m.reason = "equivalent", e["reason"]
                used.add(i)
                break
    return [e for i, e in enumerate(mine) if i not in used]


def counts(mutants: list[Mutant]) -> dict[str, int | float | None]:
    c = {s: sum(m.status == s for m in mutants) for s in ("killed", "timeout", "crashed", "equivalent", "survived",
                                                           "no tests", "other")}
    live = len(mutants) - c["equivalent"]
    detected = c["killed"] + c["timeout"] + c["crashed"]
    return {"mutants": len(mutants), **c, "kill_rate": round(100 * detected / live, 1) if live else None}


def module_report(target: Target, mutants: list[Mutant], stale: list[dict], c: dict, wall: float) -> str:
    lines = [f"# Mutation report: {target.name}", "",
             f"files: {', '.join(target.files)}; tests: {', '.join(target.tests)}"
             + (f"; functions: {', '.join(target.functions)}" if target.functions else ""), "",
             f"{c['mutants']} mutants: {c['killed']} killed, {c['timeout']} timeout, {c['crashed']} crashed, "
             f"{c['equivalent']} equivalent, "
             f"{c['survived']} survived, {c['no tests']} without a covering test, {c['other']} other; "
             f"kill rate {c['kill_rate']}% of the non-equivalent; mutmut wall time {wall:.0f} s", ""]
    for title, keep in (("Survivors", ("survived", "no tests", "other")), ("Equivalent", ("equivalent",))):
        chosen = [m for m in mutants if m.status in keep]
        lines += [f"## {title} ({len(chosen)})", ""]
        for m in chosen:
            lines += [f"### {m.key} ({m.status}{': ' + m.reason if m.reason else ''})", ""]
            if not m.reason:  # ready to paste into the equivalents file, should it be one
                lines += ["```toml", "[[equivalent]]", f"module = {json.dumps(target.name)}",
                          f"function = {json.dumps(m.function, ensure_ascii=False)}",
                          f"before = {json.dumps(m.before, ensure_ascii=False)}",
                          f"after = {json.dumps(m.after, ensure_ascii=False)}", 'reason = ""', "```", ""]
            lines += ["```diff", m.diff.strip(), "```", ""]
    if stale:
        lines += ["## Stale equivalents (match no survivor: delete them or update them)", ""]
        lines += [f"- {e['function']}: `{e['before']}` → `{e['after']}`" for e in stale] + [""]
    return "\n".join(lines)


def minutes(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 60:.1f} min"


def num(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def summary_table(rows: dict[str, dict]) -> str:
    head = "| module | mutants | killed | timeout | crashed | equivalent | survived | kill rate | wall (load) | CPU |"
    lines = [head, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for name, r in rows.items():
        survived = r["survived"] + r["no tests"] + r["other"]
        rate = "–" if r["kill_rate"] is None else f"{r['kill_rate']:.1f} %"
        lines.append(f"| `{name}` | {r['mutants']} | {r['killed']} | {r['timeout']} | {r.get('crashed', 0)} | "
                     f"{r['equivalent']} | "
                     f"{survived} | {rate} | {minutes(r['wall_s'])} ({num(r.get('load'))}) | {minutes(r.get('cpu_s'))} |")
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    targets = load_targets()
    ap = argparse.ArgumentParser(prog="scripts/mutation.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE",
                    help=f"modules of {TARGETS.name} (default: all): {', '.join(targets)}")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    ap.add_argument("--survivors", action="store_true",
                    help="keep the workspace and retest only the last run's survivors (after adding tests)")
    ap.add_argument("--report-only", action="store_true", help="rewrite the report from the last run")
    args = ap.parse_args(argv)
    unknown = [m for m in args.modules if m not in targets]
    if unknown:
        print(f"unknown module {', '.join(unknown)}: give one of {', '.join(targets)}", file=sys.stderr)
        return 2
    entries = load_equivalents()
    REPORT.mkdir(exist_ok=True)
    summary_path = REPORT / "summary.json"

    def read_rows() -> dict[str, dict]:  # re-read before each write: another module's run may have written
        return json.loads(summary_path.read_text()) if summary_path.exists() else {}

    for name in args.modules or list(targets):
        rows = read_rows()
        t = targets[name]
        wall = rows.get(name, {}).get("wall_s", 0.0)
        cpu = rows.get(name, {}).get("cpu_s")
        load = rows.get(name, {}).get("load")
        if not args.report_only:
            ws = prepare(t, fresh=not args.survivors)
            names = key_globs(t)
            if args.survivors:
                last = json.loads((ws / "survivors.json").read_text()) if (ws / "survivors.json").exists() else []
                if not last:
                    print(f"{name}: no survivors from a last run to retest")
                    continue
                names = last
            print(f"{name}: mutmut over {', '.join(t.files)} with {len(t.tests)} test files ...", flush=True)
            took, used = run_mutmut(t, ws, args.jobs, names)
            if not args.survivors:  # the table keeps the full run's times
                wall, cpu, load = took, used, os.getloadavg()[1]
        ws = WORK / t.slug
        mutants = collect(t, ws)
        stale = mark_equivalent(t, mutants, entries)
        write_atomic(ws / "survivors.json",
                     json.dumps([m.key for m in mutants if m.status in ("survived", "no tests", "other")]))
        c = counts(mutants)
        rows = read_rows()
        rows[name] = {**c, "wall_s": round(wall, 1), "cpu_s": None if cpu is None else round(cpu, 1), "load": load}
        write_atomic(summary_path, json.dumps(rows, indent=1) + "\n")
        write_atomic(REPORT / "summary.md", summary_table(rows))
        write_atomic(REPORT / f"{t.slug}.md", module_report(t, mutants, stale, c, wall))
        print(f"{name}: {c['mutants']} mutants, {c['killed']} killed, {c['timeout']} timeout, {c['crashed']} crashed, "
              f"{c['equivalent']} equivalent, {c['survived'] + c['no tests'] + c['other']} survived "
              f"({c['kill_rate']}% killed); {minutes(wall)} wall, {minutes(cpu)} CPU; report {REPORT / (t.slug + '.md')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
