"""Every experiment id runs at smoke scale and writes its report (report.md with a verdict
line, results.csv, the figure as PNG and PDF). One module-scoped run of all ids, inline."""
import json

import pytest

from mlplab.experiments import list_experiments, report_experiment, reproduce

IDS = ["fig2a-c", "fig2d", "fig4", "fig5", "fig6", "fig6-imagenet", "fig7", "figS1", "figS2-S3", "figS4", "figS5",
       "figS6-S8", "figS9", "table1", "table1-imagenet", "tableS3", "implicit-bias", "scaling",
       "sm-table1", "sm-weights"]


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke")
    return {id: reproduce(id, "smoke", out_dir=root / id, verbose=False) for id in list_experiments()}


@pytest.mark.parametrize("id", IDS)
def test_smoke_experiment_reports(smoke_runs, id):
    res = smoke_runs[id]
    assert res["failed"] == [], f"{id}: failed runs {res['failed']}"
    out = __import__("pathlib").Path(res["out_dir"])
    md = (out / "report.md").read_text()
    assert md.startswith(f"# {id}")
    assert "\nVerdict: " in md
    assert "## What was run" in md and "scale: **smoke**" in md
    assert (out / "results.csv").read_text().count("\n") >= 2, "results.csv has no rows"
    pngs = list(out.glob("*.png"))
    assert pngs and all(p.with_suffix(".pdf").exists() for p in pngs)
    v = json.loads((out / "verdicts.json").read_text())
    assert v["line"].startswith("Verdict: ")
    assert "Analysis error" not in md
    # every claim is decided from the smoke runs: a verdict word, and the statistics where a rule gave them
    assert v["verdicts"], f"{id}: no claim decided from the smoke runs"
    for c in v["verdicts"]:
        assert c["verdict"] in ("HELD", "DID NOT HOLD", "UNDECIDED") and f"**{c['verdict']}**" in md


def test_report_is_rewritten_from_the_runs(smoke_runs):
    out = smoke_runs["fig6"]["out_dir"]
    res = report_experiment("fig6", out, verbose=False)
    assert res["error"] is None and res["report"].endswith("report.md")


def test_rerun_skips_everything(smoke_runs):
    res = reproduce("figS9", "smoke", out_dir=smoke_runs["figS9"]["out_dir"], verbose=False)
    assert set(res["status"].values()) == {"skipped"}
