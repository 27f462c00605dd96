"""Dependencies point down (docs/DESIGN.md, "Package layers"): every ``mlplab`` import, read from
the source with ``ast`` (function-level imports included), goes to a lower layer or stays in its
own package; no two modules import each other, even through others; the light entry points do
not pull in matplotlib or scipy."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "mlplab"

# a package may import only from packages of a lower rank (and from itself); equal ranks are
# independent of each other: train and analysis never import one another, nor theory and interop
RANK = {
    "errors": 0, "version": 0,
    "utils": 1,
    "data": 2, "layers": 2,
    "models": 3,
    "theory": 4, "interop": 4,
    "analysis": 5, "train": 5,
    "experiments": 6,
    "commands": 7,
    "cli": 8,
    "__main__": 9,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(module: str) -> set[str]:
    """The ``mlplab`` modules that ``module`` imports anywhere in its source (``from pkg import
    name`` counts as ``pkg.name`` when that is a module, else as ``pkg``)."""
    path = MODULES[module]
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "mlplab")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "mlplab":
                continue
            out.update(f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names)
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""  # "" is the package facade mlplab/__init__.py


def test_every_package_has_a_rank():
    assert {_package(m) for m in MODULES} - {""} == set(RANK)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "mlplab"))
def test_imports_point_down(module):
    src = _package(module)
    wrong = sorted(t for t in imports_of(module)
                   if _package(t) != src and (_package(t) == "" or RANK[_package(t)] >= RANK[src]))
    assert not wrong, (f"{module} (layer {src}, rank {RANK[src]}) imports {wrong}: move the shared piece "
                       "down, or import it from the package that defines it")


def test_the_facade_is_imported_by_no_module():
    assert not [m for m in MODULES if "mlplab" in imports_of(m)]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_between_modules():
    graph = {m: {t for t in imports_of(m) if t in MODULES and t != m} for m in MODULES}
    assert _cycles(graph) == []


@pytest.mark.parametrize("entry", ["mlplab", "mlplab.train", "mlplab.cli"])
def test_light_entry_points_do_not_import_plotting_or_scipy(entry):
    code = (f"import sys, {entry}; "
            "print(' '.join(m for m in ('matplotlib', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC), "PATH": ""}).stdout.strip()
    assert out == "", f"import {entry} imports {out}"


# A spec module holds settings, claims and wiring (docs/adding-an-experiment.md): the numbers an
# analysis computes live in experiments/measures.py, aggregate.py or analysis/, the rules in
# verdicts.py, the tasks in tasks.py (a sweep names its task by a string)
SPECS = sorted(m for m in MODULES if m == "mlplab.experiments.specs" or m.startswith("mlplab.experiments.specs."))
SPEC_FORBIDDEN = ("numpy", "scipy", "torch", "statistics")
SPEC_FORBIDDEN_MLPLAB = ("mlplab.train", "mlplab.experiments.executors", "mlplab.experiments.tasks")
SPEC_MAX_LINES = 300


def _external_imports(module: str) -> set[str]:
    """The top-level names of the non-relative imports of ``module`` (function-level included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_there_are_spec_modules_to_check():
    assert len(SPECS) > 20 and "mlplab.experiments.specs.sm_transfer" in SPECS


@pytest.mark.parametrize("module", SPECS)
def test_spec_modules_are_settings_claims_and_wiring(module):
    numeric = sorted(_external_imports(module) & set(SPEC_FORBIDDEN))
    assert not numeric, f"{module} imports {numeric}: move the computation to experiments/measures.py or analysis/"
    wrong = sorted(t for t in imports_of(module) if any(t == f or t.startswith(f + ".") for f in SPEC_FORBIDDEN_MLPLAB))
    assert not wrong, f"{module} imports {wrong}: a spec names its task by string and leaves training to the tasks"
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= SPEC_MAX_LINES, f"{module} has {lines} lines (at most {SPEC_MAX_LINES}): split it by experiment id"


def test_the_spec_rule_sees_a_forbidden_import(tmp_path, monkeypatch):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import numpy as np\n    from scipy.stats import t\n    from ..tasks import task\n")
    monkeypatch.setitem(MODULES, "mlplab.experiments.specs.bad", bad)
    assert _external_imports("mlplab.experiments.specs.bad") == {"numpy", "scipy"}
    assert "mlplab.experiments.tasks" in imports_of("mlplab.experiments.specs.bad")
