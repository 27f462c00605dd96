"""Reading an experiment folder (``aggregate.load_runs``) and writing its tables: every run folder
found and read as written, a damaged file named and the run counted as unfinished, a run's
binomial test-error sd by hand, flattened results and CSV cells that read back to the same
numbers. (The statistics are in test_aggregate_oracle.py.)"""
from __future__ import annotations

import csv
import io
import json
import math

import pytest

from mlplab.experiments import aggregate
from mlplab.experiments.aggregate import RunRecord, flat_results, load_runs, rows_to_csv, union_columns

sd = aggregate.test_error_sd  # not imported by its name: pytest would collect it as a test


def _write(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        text = data if isinstance(data, str) else json.dumps(data)
        (folder / name.replace("_json", ".json").replace("_txt", ".txt")).write_text(text)
    return folder


@pytest.fixture
def experiment(tmp_path):
    out = tmp_path / "exp"
    _write(out / "b" / "r2", spec_json={"sweep": "b", "name": "r2", "overrides": {"run.seed": 2}},
           config_json={"run": {"seed": 2, "batch_size": 32}, "optim": {"lr": 0.1}},
           results_json={"test_acc": 0.75})
    _write(out / "a" / "r1", spec_json={"sweep": "a", "overrides": {"optim.lr": 0.5}},
           error_txt="Traceback\n  line\nRuntimeError: out of memory\n\n")
    _write(out / "a" / "r0", spec_json={"sweep": "a", "name": "r0"}, error_txt="\n \n")
    _write(out / "c", spec_json={"sweep": "c", "name": "flat"}, config_json="{cut",
           results_json={"test_acc": 0.5}, error_txt="an old failure\n")
    _write(out / "d" / "cut", spec_json={"sweep": "d", "name": "cut"}, results_json="", error_txt="killed\n")
    (out / "d" / "cut" / "config.json").mkdir()  # unreadable by the OS, not by JSON
    _write(out / "notes", readme_txt="no spec.json: not a run")
    return out


def test_every_run_folder_is_read_as_written_sorted_by_folder(experiment):
    runs = load_runs(experiment)
    assert [(r.sweep, r.name) for r in runs] == [("a", "r0"), ("a", "r1"), ("b", "r2"), ("d", "cut"), ("c", "flat")]
    r0, r1, r2, cut, flat = runs
    assert r2.run_dir == experiment / "b" / "r2" and r2.status == "done" and r2.problem == "" and r2.error == ""
    assert r2.overrides == {"run.seed": 2} and r2.config == {"run.seed": 2, "run.batch_size": 32, "optim.lr": 0.1}
    assert r2.results == {"test_acc": 0.75}
    assert r1.name == "r1" and r1.overrides == {"optim.lr": 0.5}  # no name in the spec: the folder's
    assert (r1.status, r1.error, r1.results, r1.config) == ("failed", "RuntimeError: out of memory", None, {})
    assert (r0.status, r0.error, r0.overrides) == ("failed", "failed", {})  # an error.txt with no text
    # a config cut short is named; results still count, and an old error.txt beside them is ignored
    assert flat.status == "done" and flat.config == {} and flat.error == ""
    assert flat.problem == "config.json is not valid JSON (Expecting property name enclosed in double quotes " \
                           "at line 1 column 2)"
    assert cut.status == "failed" and cut.error == "killed" and cut.results is None
    assert cut.problem.startswith("config.json [Errno 21] Is a directory") and \
        cut.problem.endswith("; results.json is empty")


def test_the_sweeps_asked_for_only(experiment):
    assert [r.name for r in load_runs(experiment, sweeps=["b", "c"])] == ["r2", "flat"]
    assert load_runs(experiment, sweeps=[]) == []
    assert load_runs(experiment / "nothing") == []


def test_a_damaged_spec_counts_as_a_run_of_no_sweep(tmp_path):
    _write(tmp_path / "x" / "y", spec_json="[1, 2]", results_json={"test_acc": 0.1})
    (run,) = load_runs(tmp_path)
    assert (run.sweep, run.name, run.overrides) == ("", "y", {})
    assert run.problem == "spec.json holds a JSON list, not an object" and run.status == "done"


def test_get_looks_in_the_overrides_then_the_config_then_the_results():
    r = RunRecord("s", "n", None, {"a": 1}, {"a": 2, "b": 2}, {"a": 3, "b": 3, "c": 3})
    assert (r.get("a"), r.get("b"), r.get("c"), r.get("d"), r.get("d", 7)) == (1, 2, 3, None, 7)
    assert RunRecord("s", "n", None, {}, {}, None).get("c", 5) == 5
    assert RunRecord("s", "n", None, {}).status == "unfinished"


@pytest.mark.parametrize("acc,n,want_e", [(0.9, 200, 0.1), (90.0, 200, 0.1), (0.25, None, 0.75), (1.0, 50, 0.0)])
def test_the_test_error_sd_is_binomial_over_the_test_images(acc, n, want_e):
    results = {"test_acc": acc, **({"test_examples": n} if n else {})}
    r = RunRecord("s", "n", None, {}, {"data.test_subset": 400}, results)
    images = n or 400
    assert sd(r) == pytest.approx(100 * math.sqrt(want_e * (1 - want_e) / images), rel=1e-12)
    bare = RunRecord("s", "n", None, {}, {}, {"test_acc": 0.5})  # no count anywhere: the default's
    assert sd(bare) == pytest.approx(100 * math.sqrt(0.25 / 10000), rel=1e-12)
    assert sd(bare, default_n=100) == pytest.approx(5.0, rel=1e-12)
    assert math.isnan(sd(RunRecord("s", "n", None, {}, {}, {"test_examples": 10})))
    assert math.isnan(sd(RunRecord("s", "n", None, {}, {}, None)))
    assert math.isnan(sd(RunRecord("s", "n", None, {}, {}, {"test_acc": 0.5}), default_n=0))


def test_results_are_flattened_to_dotted_columns_without_the_history():
    res = {"test_acc": 0.5, "history": [{"epoch": 1}], "few_shot": {"5": {"mean": 0.3, "acc": [0.2, 0.4]}},
           "probe": {"acc": 0.6, "history": 1}, "n": None}
    assert flat_results(res) == {"test_acc": 0.5, "few_shot.5.mean": 0.3, "few_shot.5.acc": [0.2, 0.4],
                                 "probe.acc": 0.6, "probe.history": 1, "n": None}
    assert flat_results({"a": {"b": 1}}, "p.") == {"p.a.b": 1}


def test_csv_cells_read_back_to_the_same_values():
    rows = [{"b": 0.1 + 0.2, "a": float("nan"), "l": [1, 2]}, {"c": None, "b": 3, "d": {"k": "v"}, "e": float("inf")},
            {"a": "text", "b": True}]
    assert union_columns(rows) == ["b", "a", "l", "c", "d", "e"]
    text = rows_to_csv(rows)
    assert text.endswith("\n") and "\r" not in text
    got = list(csv.reader(io.StringIO(text)))
    assert got == [["b", "a", "l", "c", "d", "e"], ["0.30000000000000004", "", "[1, 2]", "", "", ""],
                   ["3", "", "", "", '{"k": "v"}', ""], ["True", "text", "", "", "", ""]]
    assert float(got[1][0]) == 0.1 + 0.2
    assert list(csv.reader(io.StringIO(rows_to_csv(rows, ["e", "b"])))) == [["e", "b"], ["", "0.30000000000000004"],
                                                                           ["", "3"], ["", "True"]]
    assert rows_to_csv([]) == "\n"


def test_an_error_file_that_is_not_utf8_is_read_with_replacements(tmp_path):
    run = _write(tmp_path / "s" / "r", spec_json={"sweep": "s", "name": "r"})
    (run / "error.txt").write_bytes(b"Traceback\nOSError: disk \xff full\n")
    (rec,) = load_runs(tmp_path)
    assert rec.status == "failed" and rec.error == "OSError: disk \ufffd full"
