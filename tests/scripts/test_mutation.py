"""scripts/mutation.py stays correct without running mutmut: its module table names files and
tests that exist and covers the science core and the modules beyond it, every module of the
table has a recorded run, every equivalent mutant is written down with a reason for a known
module, and the report's bookkeeping (names, diffs, counts) holds."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mutation.py"
CORE = ["experiments/verdicts.py", "experiments/claims.py", "experiments/protocol.py", "theory/budget.py",
        "theory/effective.py", "layers/pk.py", "layers/fused",
        "data/augment.py", "data/loader.py", "train/checkpoint.py", "train/optim.py", "train/loop.py", "interop"]
# beyond the core (issue 40): what decides a reported number elsewhere
BEYOND = ["train/evaluation.py", "train/data.py", "train/config.py", "experiments/aggregate.py",
          "experiments/linear_eval.py", "data/datasets.py",
          "models/mixer.py", "models/sw_mlp.py", "models/mlp.py", "models/counting.py",
          "layers/masked.py", "layers/monarch.py", "layers/kronecker.py", "layers/common.py", "layers/stem.py",
          "layers/vec.py", "analysis/fewshot.py", "analysis/units.py", "analysis/spectra.py", "analysis/cka.py",
          "analysis/throughput.py"]
BEYOND += ["models/expand.py", "models/shallow.py", "models/base.py", "models/reference.py", "models/registry.py",
           "models/impl.py", "models/mixer_fused.py", "models/timm_names.py"]  # the rest of models/ (m40c)
BEYOND += ["analysis/scaling.py", "analysis/implicit_bias.py"]  # m40d
BEYOND += ["analysis/pictures.py", "analysis/cost.py"]  # m41a
# beyond the core: the specs' claims (issue 40), one module per spec file
SPECS = ["experiments/specs/budget.py", "experiments/specs/fig5.py", "experiments/specs/pictures.py",
         "experiments/specs/monarch.py", "experiments/specs/patch_size.py", "experiments/specs/implicit_bias.py",
         "experiments/specs/fig6.py", "experiments/specs/figS2_S3.py", "experiments/specs/figS1.py",
         "experiments/specs/fig4.py", "experiments/specs/cka.py", "experiments/specs/rp.py",
         "experiments/specs/table1.py"]
# ---- m40a ----: the specs' shared pieces and the scaling, Mixer-supplement and runtime specs
SPECS += [f"experiments/specs/{m}.py" for m in ("common", "scaling", "mixer_ablations", "mixer_weights", "mixer_cost",
                                                 "pretraining", "runtime")]
SPECS += ["experiments/specs/sm_table1.py", "experiments/specs/sm_batch_size.py", "experiments/specs/timing.py"]  # m40b
SPECS += [f"experiments/specs/{m}.py" for m in ("sm_weights", "sm_transfer", "sm_inference")]  # m41b
# ---- m41e ----: train/loop.py's _train, a second table of the file (issue 40: "train/loop.py (all of it)")
CORE += ["train/loop.py:_train"]
# ---- m41f ----: the weight average a run evaluates as test_acc_ema
BEYOND += ["train/ema.py", "experiments/measures.py", "train/init.py"]  # the specs' shared statistics; fine-tuning
MODULES = CORE + BEYOND + SPECS


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("mutation_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        del sys.modules[spec.name]


def test_the_table_covers_the_core_and_beyond_with_files_and_tests_that_exist(mutation):
    targets = mutation.load_targets()
    assert sorted(targets) == sorted(MODULES)
    assert "data/packed.py" in targets["data/loader.py"].files
    theory = sorted(p.relative_to(ROOT / "src" / "mlplab").as_posix() for p in (ROOT / "src/mlplab/theory").glob("*.py")
                    if p.name != "__init__.py")
    assert all(f in targets for f in theory), theory  # every file of theory/ is a module of its own
    for t in targets.values():
        assert t.files and t.tests, t.name
        for f in t.files:
            assert (ROOT / "src" / "mlplab" / f).is_file(), f
        for test in t.tests:
            assert (ROOT / test).is_file() and test.startswith("tests/"), test


def test_every_equivalent_is_keyed_by_normalised_statements_and_says_why(mutation):
    entries = tomllib.loads((ROOT / "tests" / "mutation_equivalent.toml").read_text())["equivalent"]
    keys = [mutation.entry_key(e) for e in entries]
    assert len(keys) == len(set(keys)), "an equivalent is listed twice"
    for e in entries:
        assert e["module"] in MODULES and e["before"] != e["after"] and len(e["reason"]) > 20, e
        assert (e["before"], e["after"]) == (mutation.normalise(e["before"]), mutation.normalise(e["after"])), e


def test_the_key_survives_moving_and_rewrapping_the_code(mutation):
    """A mutant's key is its function and the mutated statement as ast.unparse writes it: the same
    for the function re-wrapped, re-quoted, re-indented or moved elsewhere."""
    orig = ("def f(x, y):\n    if x > 0 and \\\n            y:\n        return g(x,\n                 'a')\n"
            "    return None\n")
    wrapped = 'def f(x, y):\n    if x > 0 and y:\n        return g(x, "a")\n    return None\n'
    mutants = {"if x >= 0 and y:": "if x >= 0 and y:", "return g(x, 'XXaXX')": "return g(x, 'XXaXX')",
               "def f(x, y=1):": "def f(x, y=1):"}
    for text in (orig, wrapped):
        assert mutation.statement_change(text, text) is None
        assert mutation.statement_change(text, text.replace("x > 0", "x >= 0")) == ("if x > 0 and y:",
                                                                                   mutants["if x >= 0 and y:"])
        assert mutation.statement_change(text, text.replace("'a'", "'XXaXX'").replace('"a"', '"XXaXX"')) == \
            ("return g(x, 'a')", mutants["return g(x, 'XXaXX')"])
        assert mutation.statement_change(text, text.replace("(x, y)", "(x, y=1)")) == ("def f(x, y):", "def f(x, y=1):")
        assert mutation.statement_change("class C:\n    " + text.replace("\n", "\n    "),
                                         "class C:\n    " + text.replace("\n", "\n    ").replace("None", "1")) == \
            ("return None", "return 1")
    assert mutation.normalise('if x>0 and y :') == "if x > 0 and y:"
    assert mutation.normalise("return g(x,\n  'a')") == "return g(x, 'a')"
    assert mutation.normalise("not python (") == "not python ("


def test_names_diffs_and_counts(mutation):
    f = "experiments/verdicts.py"
    assert mutation.function_of("mlplab.experiments.verdicts.x_compare__mutmut_7", f) == "compare"
    assert mutation.function_of("mlplab.experiments.verdicts.x__g__mutmut_10", f) == "_g"
    assert mutation.function_of("mlplab.experiments.verdicts.xǁVerdictǁsummary__mutmut_1", f) == "Verdict.summary"
    t = mutation.Target("train/loop.py", ["train/loop.py"], ["tests/x.py"], ["_resume", "_Guard.*"])
    assert mutation.key_globs(t) == ["mlplab.train.loop.x__resume__mutmut_*", "mlplab.train.loop.xǁ_Guardǁ*__mutmut_*"]
    diff = "--- a\n+++ b\n@@ -1,3 +1,3 @@\n def f():\n-    return x > 0\n+    return x >= 0\n"
    assert mutation.changed_lines(diff) == ("return x > 0", "return x >= 0")
    statuses = [mutation.status_of(code) for code in (1, 3, 1, 1, 1, 1, 1, 36, 0, 0, -11, 33, None)]
    assert statuses[-3:] == ["crashed", "no tests", "other"]
    ms = [mutation.Mutant(f"k{i}", f, "f", s) for i, s in enumerate(statuses)]
    ms[8].before, ms[8].after = "return x > 0", "return x >= 0"
    stale = mutation.mark_equivalent(mutation.Target(f, [f], []), ms, [
        {"module": "moved/elsewhere.py", "function": "f", "before": " return x>0", "after": "return (x >= 0)",
         "reason": "r"},
        {"module": f, "function": "f", "before": "gone", "after": "gone too", "reason": "r"},
        {"module": "other.py", "function": "h", "before": "a", "after": "b", "reason": "r"},
        {"module": f, "function": "renamed", "before": "a", "after": "b", "reason": "r"}])
    assert ms[8].status == "equivalent" and ms[8].reason == "r"
    assert [e["before"] for e in stale] == ["gone", "a"]  # f's unmatched entry, and one of this module's gone
    c = mutation.counts(ms)
    assert (c["mutants"], c["killed"], c["timeout"], c["crashed"], c["equivalent"], c["survived"], c["no tests"],
            c["other"]) == (13, 7, 1, 1, 1, 1, 1, 1)
    assert c["kill_rate"] == round(100 * 9 / 12, 1)  # a crash is detected; no tests and other are not


def test_an_unknown_module_is_refused_in_one_sentence(mutation, capsys):
    assert mutation.main(["experiments/verdict.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("unknown module experiments/verdict.py: give one of experiments/verdicts.py")


def test_deselected_tests_reach_pytest(mutation):
    t = mutation.load_targets()["layers/fused"]
    assert t.deselect == ["tests/models/test_mixer_fused.py::test_compiled_fused_model_matches_eager"]
    config = tomllib.loads(mutation.mutmut_config(t))["tool"]["mutmut"]
    assert config["pytest_add_cli_args"] == ["-p", "no:cacheprovider", "--deselect", t.deselect[0]]
    assert config["only_mutate"] == ["src/mlplab/layers/fused/__init__.py", "src/mlplab/layers/fused/build.py",
                                     "src/mlplab/layers/fused/ops.py"]


def test_the_documented_results_are_the_recorded_ones(mutation):
    """docs/testing.md's table is written from the committed record (scripts/mutation.sh --record),
    which holds a run of every module of the table."""
    import json

    record = json.loads(mutation.RECORD.read_text())
    assert sorted(record["rows"]) == sorted(mutation.load_targets()) == sorted(MODULES)
    text = mutation.DOC.read_text()
    assert mutation.with_docs_block(text, mutation.docs_block(record, mutation.load_targets())) == text


def test_a_row_goes_stale_when_its_code_changes_and_the_docs_mark_it(mutation, tmp_path, monkeypatch):
    """A row carries the fingerprint of the code it was measured on: editing the module's code (not
    its tests) makes it stale, `--stale` lists it, and docs/testing.md's table marks it."""
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    pkg = tmp_path / "src" / "mlplab" / "m"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "b.py").write_text("y = 2\n")
    t = mutation.Target("m", ["m/a.py", "m/b.py"], ["tests/t.py"])
    u = mutation.Target("m/a.py", ["m/a.py"], ["tests/t.py"])
    fp, fp_a = mutation.fingerprint(t), mutation.fingerprint(u)
    assert len(fp) == 16 and fp != fp_a
    assert mutation.fingerprint(mutation.Target("m", ["m/b.py", "m/a.py"], ["tests/other.py"])) == fp
    row = {"mutants": 2, "killed": 2, "timeout": 0, "crashed": 0, "equivalent": 0, "survived": 0, "no tests": 0,
           "other": 0, "kill_rate": 100.0, "wall_s": 60.0, "cpu_s": 60.0, "load": 1.0}
    record = {"rows": {"m": {**row, "source": fp}, "m/a.py": {**row, "source": fp_a}, "old": row}}
    targets = {"m": t, "m/a.py": u}
    assert mutation.stale_rows(record, targets) == []
    (pkg / "b.py").write_text("y = 3\n")  # only `m` holds b.py
    assert mutation.stale_rows(record, targets) == ["m"]
    record["rows"]["m/a.py"].pop("source")  # a row from before fingerprints: stale
    assert mutation.stale_rows(record, targets) == ["m", "m/a.py"]
    monkeypatch.setattr(mutation, "load_equivalents", lambda: [])
    block = mutation.docs_block(record, targets)
    assert "| `m` † | 2 |" in block and "| `m/a.py` † | 2 |" in block
    assert block.count("†") == 3 and "2 module(s) changed since their run" in block
    record["rows"]["m"]["source"] = mutation.fingerprint(t)
    record["rows"]["m/a.py"]["source"] = fp_a
    assert "†" not in mutation.docs_block(record, targets)


def test_record_refuses_an_interrupted_run_or_code_changed_since_the_full_run(mutation, tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    (tmp_path / "src" / "mlplab").mkdir(parents=True)
    (tmp_path / "src" / "mlplab" / "a.py").write_text("x = 1\n")
    t = mutation.Target("a.py", ["a.py"], ["tests/t.py"])
    fp = mutation.fingerprint(t)
    done = {"mutants": 3, "killed": 3, "other": 0}
    assert mutation.record_refusal(t, done, fp) is None
    assert mutation.record_refusal(t, {**done, "killed": 2, "other": 1}, fp) == (
        "a.py: 1 of 3 mutants were not checked (an interrupted run?): run the module in full before --record")
    assert mutation.record_refusal(t, done, None).startswith("a.py: the code changed since the workspace's last full")
    (tmp_path / "src" / "mlplab" / "a.py").write_text("x = 2\n")
    assert "changed since" in mutation.record_refusal(t, done, fp)


def test_stale_lists_the_changed_modules_and_runs_nothing(mutation, capsys):
    assert mutation.main(["--stale", "experiments/claims.py"]) == 0
    out = capsys.readouterr().out.strip()
    assert out in ("experiments/claims.py", "no recorded module has changed since its run")


def test_a_second_table_of_a_file_mutates_its_own_functions_in_its_own_workspace(mutation, tmp_path):
    """``FILE:PART`` (``train/loop.py:_train``) is a second table of FILE: the same file, its own
    functions, tests, workspace and report (its slug), and the same fingerprint as FILE's table."""
    toml = tmp_path / "targets.toml"
    toml.write_text('[modules."train/loop.py"]\nfunctions = ["train"]\ntests = ["tests/a.py"]\n'
                    '[modules."train/loop.py:_train"]\nfunctions = ["_train"]\ntests = ["tests/b.py"]\n'
                    '[modules."layers"]\ntests = ["tests/c.py"]\n')
    targets = mutation.load_targets(toml)
    whole, part = targets["train/loop.py"], targets["train/loop.py:_train"]
    assert whole.files == part.files == ["train/loop.py"] and part.tests == ["tests/b.py"]
    assert (whole.slug, part.slug, targets["layers"].slug) == ("train-loop", "train-loop--_train", "layers")
    assert mutation.key_globs(part) == ["mlplab.train.loop.x__train__mutmut_*"]
    assert "layers/pk.py" in targets["layers"].files
    assert mutation.fingerprint(whole) == mutation.fingerprint(part)
    config = tomllib.loads(mutation.mutmut_config(part))["tool"]["mutmut"]
    assert config["only_mutate"] == ["src/mlplab/train/loop.py"]
    assert config["pytest_add_cli_args_test_selection"] == ["tests/b.py"]
