"""The documentation agrees with the code and the committed results.

The README's experiment table and the tables of docs/experiments.md and docs/performance.md are
generated from docs/results/ and benchmarks/results/ by scripts/gen_docs.py; docstrings cite
docs/science.md by section.
"""
import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
gen_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_docs)

#: the pages this test holds to "current, not a history" (no dates or clock times) and to working links
PAGES = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]


def test_generated_tables_match_the_result_files():
    assert gen_docs.stale() == [], "run: python scripts/gen_docs.py"


def test_a_stale_table_is_detected(tmp_path):
    (tmp_path / "README.md").write_text("intro\n<!-- gen_docs: experiments -->\n| old | table |\n<!-- /gen_docs -->\n")
    assert gen_docs.stale(["README.md"], repo=tmp_path) == ["README.md"]
    (tmp_path / "README.md").write_text(gen_docs.regenerate((tmp_path / "README.md").read_text()))
    assert gen_docs.stale(["README.md"], repo=tmp_path) == []


def test_unknown_generated_block_is_an_error():
    with pytest.raises(KeyError, match="experiments, all-results, open-claims, benchmarks, lockstep or cost-fit"):
        gen_docs.regenerate("<!-- gen_docs: nonsense -->\n<!-- /gen_docs -->")


def _result(**kw):
    claims = [{"claim": "c", "verdict": "HELD", "class": "trained", "reason": "", "p_two_sided": 0.001}] * 3
    return {"id": "fig5", "scale": "cpu", "machine": "a", "measured": "2026-01-01", "claims": claims,
            "verdicts": [c["verdict"] for c in claims], "link": "docs/results/a/report.md", "recovered": False,
            "role": "confirmatory", "seeds": [3, 4, 5, 6, 7], "hash": "h", "minutes": 1, **kw}


def test_the_readme_table_shows_the_latest_confirmed_result_per_id_by_class():
    old = _result(machine="a", measured="2026-01-01", link="docs/results/old/report.md")
    new = _result(machine="b", measured="2026-01-02", link="docs/results/new/report.md")
    explored = _result(id="fig6", role="exploratory", seeds=[0, 1, 2], link="docs/results/x/report.md")
    recovered = _result(id="fig7", role="recovered", recovered=True, link="docs/results/y/verdicts.json")
    table = gen_docs.experiments_table([new, old, explored, recovered], {"fig5": "width", "fig6": "S ≈ C", "fig7": "d"})
    assert "| `fig5` | width | trained: **HELD** ×3 | 5 (3–7) | [new](docs/results/new/report.md) |" in table
    assert "| `fig6` | S ≈ C | not confirmed yet | – | [exploratory only](docs/results/x/report.md) |" in table
    assert "| `fig7` | d | not confirmed yet | – | – |" in table  # recovered from prose: not in the table
    assert "trained 3: 3 HELD" in table and "keeps 3 of the 3 decided" in table
    going = gen_docs.experiments_table([explored], {"fig6": "S ≈ C"},
                                       under_way={"fig6": {"runs": 7, "of": 36, "seeds": [3, 4, 5, 6, 7]}})
    assert ("| `fig6` | S ≈ C | under way: 7 of 36 runs committed | 5 (3–7) | "
            "[exploratory only](docs/results/x/report.md) |") in going


def test_a_confirmatory_folder_without_its_report_counts_its_committed_runs(tmp_path, monkeypatch):
    from mlplab.experiments.protocol import frozen_protocol

    frozen = frozen_protocol("fig5", "cpu")
    folder = tmp_path / "fig5-cpu-somewhere"
    (folder / "runs" / "width" / "r0").mkdir(parents=True)
    (folder / "runs" / "width" / "r0" / "results.json").write_text("{}")
    (folder / "runs" / "width" / "r1").mkdir(parents=True)  # not finished
    (folder / "protocol.json").write_text(json.dumps({"hash": frozen["hash"], "role": "confirmatory", "seeds": [3, 4]}))
    other = tmp_path / "fig6-cpu-somewhere"  # another protocol's hash: not this id's campaign
    other.mkdir()
    (other / "protocol.json").write_text(json.dumps({"hash": "0" * 16, "role": "confirmatory", "seeds": [3]}))
    monkeypatch.setattr(gen_docs, "REPO", tmp_path)
    got = gen_docs.campaigns_under_way(tmp_path)
    assert got == {"fig5": {"runs": 1, "of": len(frozen["content"]["runs"]), "seeds": [3, 4],
                            "link": "fig5-cpu-somewhere"}}


def test_the_summary_applies_benjamini_hochberg_across_ids():
    claims = [{"claim": "c", "verdict": "HELD", "class": "trained", "reason": "", "p_two_sided": p}
              for p in (0.001, 0.02, 0.04, 0.3)]
    claims[3]["verdict"] = "UNDECIDED"
    line = gen_docs.summary_line({"fig5": _result(claims=claims)})
    # BH over 4 tested: the adjusted p of 0.02 is 0.04 and of 0.04 is 0.053: two of the three decided survive
    assert "keeps 2 of the 3 decided (2 HELD, 0 DID NOT HOLD)" in line
    assert gen_docs.bh([0.001, 0.02, 0.04, 0.3]) == pytest.approx([0.004, 0.04, 0.04 * 4 / 3, 0.3])


def test_verdict_summary_counts_each_word():
    assert gen_docs.verdict_summary(["HELD", "DID NOT HOLD", "HELD"]) == "**HELD** ×2, **DID NOT HOLD** ×1"
    assert gen_docs.verdict_summary(["UNDECIDED"]) == "**UNDECIDED**"


def test_every_registered_experiment_is_in_the_readme():
    readme = (REPO / "README.md").read_text()
    for id in gen_docs.experiment_titles():
        assert f"| `{id}` |" in readme


def test_every_committed_result_names_its_machine_and_verdicts():
    results = gen_docs.load_results()
    assert results, "docs/results/ holds no reproduction"
    for r in results:
        assert r["machine"] and r["scale"] in gen_docs.SCALE_RANK and r["verdicts"], r
        assert set(r["verdicts"]) <= set(gen_docs.VERDICTS), r


def test_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES)
def test_pages_carry_no_dates_or_clock_times(page):
    text = (REPO / page).read_text()
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d\b", text), "dates belong in CHANGELOG.md"


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    path = REPO / page
    for target in re.findall(r"\]\(([^)#\s]+)\)", path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{page} links to missing {target}"


def test_science_citations_name_existing_sections():
    headings = set(re.findall(r"^## (\d+)\.", (REPO / "docs" / "science.md").read_text(), re.M))
    cited = set()
    for f in [*(REPO / "src").rglob("*.py"), *(REPO / "tests").rglob("*.py")]:
        text = f.read_text()
        assert "SPEC" + " §" not in text, f"{f} cites a file outside the repository"
        cited |= set(re.findall(r"docs/science\.md §(\d+)", text))
    assert cited and cited <= headings, f"cited sections without a heading: {sorted(cited - headings)}"


def test_benchmark_results_are_named_by_what_torch_and_machine():
    spec = importlib.util.spec_from_file_location("bench_common", REPO / "benchmarks" / "common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    from mlplab.utils.cpu import machine_tag

    torch_tag = "".join(common.torch.__version__.split("+")[0].split(".")[:2])
    assert common.default_out("bench_mixer_step") == \
        REPO / "benchmarks" / "results" / f"mixer-step-pt{torch_tag}-{machine_tag()}.json"
    files = sorted((REPO / "benchmarks" / "results").glob("*.json"))
    assert files
    for f in files:
        assert re.fullmatch(r"[a-z0-9-]+-pt\d+-[a-z0-9]+-[a-z0-9]+\.json", f.name), f.name
        d = json.loads(f.read_text())
        assert f.name.endswith(f"-{d['machine']}.json") and d["tables"], f.name


def test_the_lockstep_section_says_where_auto_stacks(tmp_path):
    ratio = {"median": 0.7, "lo": 0.6, "hi": 0.8, "n": 2}
    measured = {m: {"recipe": r, "seeds": 5, "epochs": 2, "recipe_epochs": 30, "cpu": ratio, "wall": ratio,
                    "cpu_at_recipe_epochs": f, "wall_at_recipe_epochs": f,
                    "source": "benchmarks/results/lockstep-process-x-pt213-kind-a.json"}
                for m, r, f in [("s_mixer", "fig5:s_mixer", 0.8), ("sw_mlp", "fig5:sw_mlp", 1.07)]}
    (tmp_path / "c.json").write_text(json.dumps({"lockstep": {"machine": "kind-a", "loadavg": [5.0, 9.5],
                                                              "factor": {"s_mixer": 0.8, "sw_mlp": 1.07},
                                                              "measured": measured}}))
    text = gen_docs.lockstep_section(tmp_path / "c.json")
    assert text.startswith("On `kind-a`, `--lockstep auto` stacks the seeds of `s_mixer` (0.800×) and trains those "
                           "of `sw_mlp` (1.070×) one after another")
    assert ("| `s_mixer` | `fig5:s_mixer` | 5 | 2 (30) | 0.70 [0.60, 0.80] | 0.70 [0.60, 0.80] | 0.80 | 0.80 "
            "| in lockstep |") in text
    assert "| 1.07 | 1.07 | one after another |" in text and "Load 5.0–9.5" in text
    (tmp_path / "c.json").write_text("{}")
    assert "trains every seed alone" in gen_docs.lockstep_section(tmp_path / "c.json")


def test_the_cost_fit_section_shows_each_cpu_kinds_constants_and_spread(tmp_path):
    fit = {"rate": 1.5e11, "kappa": 1.25e-9, "tau": 3e-5, "step_s": 2.125e-3, "overhead_s": 16.75,
           "rp_slowdown": 1.125, "runs": 202, "measured_over_estimated": {"median": 0.995, "min": 0.666, "max": 1.504}}
    older = {k: v for k, v in fit.items() if k != "step_s"}  # fitted before τs: none
    (tmp_path / "c.json").write_text(json.dumps({"machines": {"kind-b": fit, "kind-a": {**older, "runs": 7}}}))
    rows = gen_docs.cost_fit_section(tmp_path / "c.json").splitlines()[2:]
    assert rows == ["| `kind-a` | 7 | 150.0 | 1.25 | 30.0 | 0.00 | 16.8 | 1.12 | 0.99 (0.67–1.50) |",
                    "| `kind-b` | 202 | 150.0 | 1.25 | 30.0 | 2.12 | 16.8 | 1.12 | 0.99 (0.67–1.50) |"]
    (tmp_path / "c.json").write_text(json.dumps({}))
    assert "fallback constants" in gen_docs.cost_fit_section(tmp_path / "c.json")


def test_committed_per_run_results_are_not_ignored_by_git():
    """A campaign commits each run under docs/results/<id>-<scale>-<machine>/runs/: git must see
    those files (an ignore rule for run folders once hid them, so a fresh clone had none)."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("docs/results/fig5-cpu-m/runs/width/r0/results.json", "docs/results/explore/x/runs/s/r/spec.json"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 1, path
    assert subprocess.run(["git", "check-ignore", "-q", "runs/experiments/fig5-cpu/x"], cwd=REPO).returncode == 0


def test_the_results_table_sums_the_committed_runs_training_time(tmp_path, monkeypatch):
    """A campaign resumed over sessions: the report's wall time is its last invocation's; the table
    also gives the sum of every committed run's wall time (run-minutes)."""
    folder = tmp_path / "docs" / "results" / "fig5-cpu-a"
    for name, wall in (("r0", 600.0), ("r1", 1200.0), ("r2", None)):
        (folder / "runs" / "width" / name).mkdir(parents=True)
        (folder / "runs" / "width" / name / "results.json").write_text(json.dumps({"wall_s": wall} if wall else {}))
    (folder / "verdicts.json").write_text(json.dumps({"experiment": "fig5", "scale": "cpu", "verdicts": [],
                                                      "protocol": {"role": "confirmatory", "seeds": [3]}}))
    (folder / "experiment.json").write_text(json.dumps({"wall_s": 120.0, "finished": "2026-01-01 00:00:00"}))
    monkeypatch.setattr(gen_docs, "REPO", tmp_path)
    r = gen_docs.load_result(folder)
    assert (r["minutes"], r["run_minutes"]) == (2.0, 30.0)
    assert "| 2 | 30 | [report, figure, per-run data]" in gen_docs.all_results_table([r])
    (folder / "runs" / "width" / "r0" / "results.json").unlink()
    assert gen_docs.load_result(folder)["run_minutes"] == 20.0
