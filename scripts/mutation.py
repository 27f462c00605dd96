"""Mutation testing of the science core and beyond with mutmut: ``scripts/mutation.sh [MODULE...]``.

For each module of ``scripts/mutation_targets.toml`` (default: all of them, one at a time) this
builds a workspace ``mutation-work/<module>/`` (links to ``src/`` and ``tests/`` and a
``pyproject.toml`` whose ``[tool.mutmut]`` names the module and its fast tests), runs
``mutmut run`` there, and writes ``mutation-report/<module>.md`` (the survivors' diffs) and
``mutation-report/summary.{md,json}`` (killed / timeout / equivalent / survived per module).

A survivor that no test can kill (it changes nothing observable) is written down ONCE in
``tests/mutation_equivalent.toml`` with the reason, keyed by its function ("f" or "Class.method")
and the mutated statement before and after, each as ``ast.unparse`` writes it (a compound
statement: its header): mutmut's numbering shifts when the code changes, and neither moving the
function to another file nor re-wrapping or re-quoting its lines changes these keys. It is then
counted as equivalent, not survived. ``module`` in an entry says where the function was when it
was written down (the report lists an entry of a function it mutated and no survivor matched as
stale).

Not part of CI: a module takes minutes. See docs/testing.md, "Mutation testing".
"""
from __future__ import annotations

import argparse
import ast
import copy
import difflib
import fnmatch
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ROOT / "scripts" / "mutation_targets.toml"
EQUIVALENT = ROOT / "tests" / "mutation_equivalent.toml"
WORK = ROOT / "mutation-work"
REPORT = ROOT / "mutation-report"
#: the committed results (each module's last full run), from which docs/testing.md's table is written
RECORD = ROOT / "scripts" / "mutation_results.json"
DOC = ROOT / "docs" / "testing.md"
BLOCK = ("<!-- mutation.py: results -->", "<!-- /mutation.py -->")
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
        """The workspace's and report's name: ``train/loop.py`` → ``train-loop``, a second table of a
        file, ``train/loop.py:_train`` → ``train-loop--_train``."""
        file, sep, part = self.name.partition(":")
        return file.removesuffix(".py").replace("/", "-") + (f"--{part}" if sep else "")


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
    """The module tables. A table named ``FILE:PART`` (``train/loop.py:_train``) is a second table of
    FILE: its own ``functions`` and tests, its own workspace, report and recorded row."""
    table = tomllib.loads(path.read_text())["modules"]
    out = {}
    for name, t in table.items():
        file = name.partition(":")[0]
        src = ROOT / "src" / PACKAGE / file
        files = t.get("files") or ([file] if file.endswith(".py") else
                                   sorted(str(p.relative_to(ROOT / "src" / PACKAGE)) for p in src.glob("*.py")))
        out[name] = Target(name, files, list(t["tests"]), list(t.get("functions", [])),
                           list(t.get("deselect", [])))
    return out


def load_equivalents(path: Path = EQUIVALENT) -> list[dict]:
    if not path.exists():
        return []
    entries = tomllib.loads(path.read_text()).get("equivalent", [])
    for e in entries:
        missing = {"function", "before", "after", "reason"} - set(e)
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


def fingerprint(target: Target) -> str:
    """The code a row was measured on: a hash of the module's files (names and bytes). Tests are
    left out (a test added later can only kill more), so a row goes stale only when the code does."""
    h = hashlib.sha256()
    for f in sorted(target.files):
        h.update(f.encode() + b"\0" + (ROOT / "src" / PACKAGE / f).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def stale_rows(record: dict, targets: dict[str, Target]) -> list[str]:
    """The recorded modules whose code has changed since their run (or whose row predates the
    fingerprint): their counts are of older code."""
    return [name for name, t in targets.items()
            if name in record["rows"] and record["rows"][name].get("source") != fingerprint(t)]


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
    for kept in copies.rglob("*.py") if copies.is_dir() else []:
        rel = kept.relative_to(copies).as_posix()
        source = ROOT / "src" / rel
        if rel not in mutated and (not source.exists() or source.stat().st_mtime != kept.stat().st_mtime):
            kept.unlink()


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


_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _header(node: ast.AST) -> str:
    """A statement as ``ast.unparse`` writes it; a compound statement's header only (its first line:
    ``if x > 0:``, ``def f(a=1):`` with its decorators), without its blocks."""
    if not any(getattr(node, f, None) for f in _BLOCKS):
        return ast.unparse(node)
    head = copy.copy(node)
    for f in _BLOCKS:
        if getattr(head, f, None):
            setattr(head, f, [ast.Pass()] if f in ("body", "orelse", "finalbody") else [])
    lines = ast.unparse(head).splitlines()
    return " / ".join(ln.strip() for ln in lines if ln.strip() not in ("pass", "else:", "finally:"))


def _statements(node: ast.AST) -> list[str]:
    """Every statement under ``node`` (an except clause and a match case count as one), in source
    order, each as :func:`_header` writes it."""
    out = []
    for f in _BLOCKS:
        for child in getattr(node, f, None) or []:
            out.append(_header(child))
            out.extend(_statements(child))
    return out


def statement_change(orig: str, mutant: str) -> tuple[str, str] | None:
    """The first statement that differs between a function's source and its mutant's, normalised
    (:func:`_header`): the key of an equivalent mutant. None when the two parse to the same code."""
    def parsed(src: str) -> list[str]:
        tree = ast.parse(textwrap.dedent(src))
        return [_header(s) for s in tree.body] + [s for top in tree.body for s in _statements(top)]
    for a, b in zip(parsed(orig), parsed(mutant)):
        if a != b:
            return a, b
    return None


def normalise(text: str) -> str:
    """A statement (or a compound statement's header, ``if x > 0:``) written by hand, as
    :func:`statement_change` writes it; text that does not parse as either, stripped."""
    for src in (text, text + "\n    pass"):
        try:
            tree = ast.parse(textwrap.dedent(src).strip() if src is text else src.strip())
        except SyntaxError:
            continue
        if len(tree.body) == 1:
            return _header(tree.body[0])
    return text.strip()


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
        for m, (orig, mutant) in zip(todo, function_sources(ws, [(m.key, f"src/{PACKAGE}/{m.file}") for m in todo])):
            m.diff = "\n".join(difflib.unified_diff(orig.splitlines(), mutant.splitlines(), f"src/{PACKAGE}/{m.file}",
                                                    f"src/{PACKAGE}/{m.file}", lineterm=""))
            m.before, m.after = statement_change(orig, mutant) or changed_lines(m.diff)
    return mutants


def function_sources(ws: Path, keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(the function's source, its mutant's) of each (mutant, source path), as mutmut reads them
    back from its mutated file, in one child process in the workspace."""
    code = ("import json, sys\n"
            "import libcst as cst\n"
            "from mutmut.mutation import diff_apply as d\n"
            "def pair(k, p):\n"
            "    fns = d.read_functions_from_index(k, p)\n"
            "    if fns is None:\n"
            "        m = d.read_mutants_module(p)\n"
            "        fns = (d.read_original_function(m, k), d.read_mutant_function(m, k))\n"
            "    return [cst.Module([f]).code.strip() for f in fns]\n"
            "print(json.dumps([pair(k, p) for k, p in json.load(sys.stdin)]))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ws, input=json.dumps(keys), capture_output=True,
                         text=True, check=True)
    return [tuple(pair) for pair in json.loads(out.stdout)]


def entry_key(e: dict) -> tuple[str, str, str]:
    """An equivalent's key: its function and its statement before and after, normalised."""
    return e["function"], normalise(e["before"]), normalise(e["after"])


def mark_equivalent(target: Target, mutants: list[Mutant], entries: list[dict]) -> list[dict]:
    """Mark the survivors that the equivalents file lists (by function and statement, wherever the
    function lives); returns the entries that matched no survivor but name a function this run
    mutated, or this module and a function it no longer has (stale: the code or the mutant
    changed, or a test kills it now)."""
    index = {entry_key(e): i for i, e in enumerate(entries)}
    used = set()
    for m in mutants:
        if m.status not in ("survived", "no tests"):
            continue
        i = index.get((m.function, normalise(m.before), normalise(m.after)))
        if i is not None:
            m.status, m.reason = "equivalent", entries[i]["reason"]
            used.add(i)
    mutated = {m.function for m in mutants}
    return [e for i, e in enumerate(entries) if i not in used
            and (e["function"] in mutated or e.get("module") == target.name and not mutated & {e["function"]})]


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


def summary_table(rows: dict[str, dict], stale: frozenset[str] = frozenset()) -> str:
    head = "| module | mutants | killed | timeout | crashed | equivalent | survived | kill rate | wall (load) | CPU |"
    lines = [head, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for name, r in rows.items():
        survived = r["survived"] + r["no tests"] + r["other"]
        rate = "–" if r["kill_rate"] is None else f"{r['kill_rate']:.1f} %"
        mark = " †" if name in stale else ""
        lines.append(f"| `{name}`{mark} | {r['mutants']} | {r['killed']} | {r['timeout']} | {r.get('crashed', 0)} | "
                     f"{r['equivalent']} | "
                     f"{survived} | {rate} | {minutes(r['wall_s'])} ({num(r.get('load'))}) | "
                     f"{minutes(r.get('cpu_s'))} |")
    return "\n".join(lines) + "\n"


def docs_block(record: dict, targets: dict[str, Target]) -> str:
    """docs/testing.md's results: the table of the record's rows in the order of the module table,
    the CPU time of all of them and the number of equivalents written down."""
    rows = {name: record["rows"][name] for name in targets if name in record["rows"]}
    cpu = sum(r["cpu_s"] or 0 for r in rows.values())
    stale = stale_rows(record, targets)
    note = (f"\n† {len(stale)} module(s) changed since their run (`scripts/mutation.sh --stale` lists them): "
            "their counts are of the older code until they are run again with `--record`.\n" if stale else "")
    return (summary_table(rows, frozenset(stale)) + note + f"\nThe CPU time of every module in all: {cpu / 60:.1f} min "
            f"(about {cpu / 120:.1f} min of wall time on a quiet 2-core machine); equivalent mutants written down: "
            f"{len(load_equivalents())} (`tests/mutation_equivalent.toml`).\n")


def with_docs_block(text: str, block: str) -> str:
    """``text`` (docs/testing.md) with its generated results block replaced by ``block``."""
    start, end = text.index(BLOCK[0]) + len(BLOCK[0]), text.index(BLOCK[1])
    return text[:start] + "\n" + block + text[end:]


def record_rows(rows: dict[str, dict], targets: dict[str, Target]) -> None:
    """Merge these modules' rows into the committed record and rewrite docs/testing.md from it."""
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {"benchmark": "mutation", "rows": {}}
    record["rows"].update(rows)
    write_atomic(RECORD, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    write_atomic(DOC, with_docs_block(DOC.read_text(), docs_block(record, targets)))


def record_refusal(target: Target, c: dict, source: str | None) -> str | None:
    """Why a run may not be recorded (None: it may): mutants left unchecked (an interrupted run), or
    code that is not the code of the workspace's last full run (a --survivors run after an edit)."""
    if c["other"]:
        return (f"{target.name}: {c['other']} of {c['mutants']} mutants were not checked (an interrupted run?): "
                "run the module in full before --record")
    if source != fingerprint(target):
        return (f"{target.name}: the code changed since the workspace's last full run: run it in full "
                "(without --survivors) before --record")
    return None


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
    ap.add_argument("--record", action="store_true",
                    help=f"write these modules' rows into {RECORD.relative_to(ROOT)} and docs/testing.md's table")
    ap.add_argument("--stale", action="store_true",
                    help="list the recorded modules whose code changed since their run, and run nothing")
    args = ap.parse_args(argv)
    unknown = [m for m in args.modules if m not in targets]
    if unknown:
        print(f"unknown module {', '.join(unknown)}: give one of {', '.join(targets)}", file=sys.stderr)
        return 2
    if args.stale:
        record = json.loads(RECORD.read_text()) if RECORD.exists() else {"rows": {}}
        stale = [m for m in stale_rows(record, targets) if not args.modules or m in args.modules]
        print("\n".join(stale) if stale else "no recorded module has changed since its run")
        return 0
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
                write_atomic(ws / "fingerprint", fingerprint(t))
        ws = WORK / t.slug
        mutants = collect(t, ws)
        stale = mark_equivalent(t, mutants, entries)
        write_atomic(ws / "survivors.json",
                     json.dumps([m.key for m in mutants if m.status in ("survived", "no tests", "other")]))
        c = counts(mutants)
        source = (ws / "fingerprint").read_text() if (ws / "fingerprint").exists() else None
        rows = read_rows()
        rows[name] = {**c, "wall_s": round(wall, 1), "cpu_s": None if cpu is None else round(cpu, 1), "load": load,
                      "source": source}
        write_atomic(summary_path, json.dumps(rows, indent=1) + "\n")
        write_atomic(REPORT / "summary.md", summary_table(rows))
        write_atomic(REPORT / f"{t.slug}.md", module_report(t, mutants, stale, c, wall))
        if args.record:
            refusal = record_refusal(t, c, source)
            if refusal:
                print(refusal, file=sys.stderr)
                return 2
            record_rows({name: rows[name]}, targets)
        print(f"{name}: {c['mutants']} mutants, {c['killed']} killed, {c['timeout']} timeout, {c['crashed']} crashed, "
              f"{c['equivalent']} equivalent, {c['survived'] + c['no tests'] + c['other']} survived "
              f"({c['kill_rate']}% killed); {minutes(wall)} wall, {minutes(cpu)} CPU; "
              f"report {REPORT / (t.slug + '.md')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
