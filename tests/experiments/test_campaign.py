"""The confirmation campaign: frozen protocols only, committed runs never repeated (also from
another machine's folder), another protocol's runs never mixed in, reports committed as ids finish."""
from __future__ import annotations

import json
import shutil

import pytest

from mlplab.errors import BadInput
from mlplab.experiments import campaign as C
from mlplab.experiments import registry


@pytest.fixture()
def frozen_now(monkeypatch):
    """Every protocol counts as frozen as it is now (the confirmatory content, its hash)."""
    def frozen(id, scale):
        content, h = registry.experiment_protocol(id, scale, role="confirmatory")
        return {"hash": h, "frozen": "2026-01-01", "reason": "test", "content": content}

    monkeypatch.setattr(registry, "frozen_protocol", frozen)
    monkeypatch.setattr(C, "frozen_protocol", frozen)


def test_the_order_puts_the_main_job_first_then_the_recovered_ids():
    ids = ["fig2d", "fig5", "fig6", "fig7", "figS9"]
    assert C.campaign_order(ids, then=["fig7", "nope"]) == ["fig5", "fig7", "fig2d", "fig6", "figS9"]
    # a folder per machine: once
    assert C.campaign_order(ids, then=["fig6", "fig6", "fig5"]) == ["fig5", "fig6", "fig2d", "fig7", "figS9"]
    assert C.campaign_ids(["fig6", "fig6-imagenet"], "cpu", lambda i: registry.get_experiment(i).scales) == ["fig6"]


def test_unfrozen_ids_are_skipped_and_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(C, "frozen_protocol", lambda id, scale: None)
    assert C.run_campaign("smoke", ids=["figS9"], results_root=tmp_path / "r", out_root=tmp_path / "o",
                          executor="inline") == []
    assert "no frozen smoke protocol, skipped: figS9" in capsys.readouterr().out


def test_a_campaign_commits_runs_and_reports_and_continues_elsewhere(tmp_path, frozen_now, capsys):
    root, out = tmp_path / "results", tmp_path / "runs"
    (rec,) = C.run_campaign("smoke", ids=["fig5"], results_root=root, out_root=out, executor="inline", verbose=False)
    assert rec["status"] == "done"
    (folder,) = root.glob("fig5-smoke-*")
    proto = json.loads((folder / "protocol.json").read_text())
    assert proto["role"] == "confirmatory" and proto["seeds"] == [3, 4, 5, 6, 7]
    runs = sorted((folder / "runs").glob("*/*/results.json"))
    assert len(runs) == 15 and all((r.parent / "spec.json").is_file() for r in runs)
    assert not list(folder.rglob("*.safetensors")) and not list(folder.rglob("checkpoint*"))
    v = json.loads((folder / "verdicts.json").read_text())
    assert v["protocol"]["hash"] == proto["hash"] and v["protocol"]["role"] == "confirmatory"
    # another machine, a fresh checkout: nothing to run again
    shutil.rmtree(out)
    (rec,) = C.run_campaign("smoke", ids=["fig5"], results_root=root, out_root=out, executor="inline", verbose=False)
    assert rec["status"] == "confirmed before" and not out.exists()
    # a sitting cut short: two runs and the report were never committed; only those two run again
    for r in runs[:2]:
        shutil.rmtree(r.parent)
    (folder / "verdicts.json").unlink()
    (rec,) = C.run_campaign("smoke", ids=["fig5"], results_root=root, out_root=out, executor="inline", verbose=True)
    log = capsys.readouterr().out
    assert "13 restored" in log and "2 run(s) to do, 13 finished before" in log
    assert len(list((folder / "runs").glob("*/*/results.json"))) == 15 and (folder / "verdicts.json").is_file()


def test_runs_of_another_protocol_are_never_mixed_in(tmp_path):
    folder = tmp_path / "fig5-cpu-m"
    (folder / "runs" / "width" / "a").mkdir(parents=True)
    (folder / "protocol.json").write_text(json.dumps({"hash": "old", "role": "confirmatory", "seeds": [3]}))
    for name in C.RUN_FILES:
        (folder / "runs" / "width" / "a" / name).write_text("{}")
    assert C.restore_runs(folder, tmp_path / "out", "new") == 0 and not (tmp_path / "out").exists()
    assert C.restore_runs(folder, tmp_path / "out", "old") == 1
    with pytest.raises(BadInput, match="holds runs of protocol old, not protocol new"):
        C.results_folder(tmp_path, "fig5", "cpu", "new", "m")
    assert C.results_folder(tmp_path, "fig5", "cpu", "old", "other-machine") == folder  # found by its hash
    legacy = tmp_path / "fig6-cpu-m"
    legacy.mkdir()
    (legacy / "verdicts.json").write_text("{}")
    with pytest.raises(BadInput, match="an earlier result without a protocol record"):
        C.results_folder(tmp_path, "fig6", "cpu", "h", "m")


def test_a_run_is_committed_only_once_it_has_finished(tmp_path):
    run = tmp_path / "out" / "width" / "r1"
    run.mkdir(parents=True)
    (run / "spec.json").write_text("{}")
    assert C.publish_run(run, tmp_path / "res") is False and not (tmp_path / "res").exists()
    (run / "results.json").write_text("{}")
    (run / "checkpoint").mkdir()
    assert C.publish_run(run, tmp_path / "res") is True
    published = tmp_path / "res" / "runs" / "width" / "r1"
    assert sorted(p.name for p in published.iterdir()) == ["results.json", "spec.json"]


def test_the_command_runs_a_chosen_part_of_the_campaign(tmp_path, frozen_now, capsys, monkeypatch):
    """``mlplab reproduce --all --confirm --ids a,b``: those ids only, committed like the whole
    campaign; an unknown id is one sentence."""
    from mlplab import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["reproduce", "--all", "--confirm", "--scale", "smoke", "--ids", "figS9, fig5",
                     "--results", "res", "--executor", "inline"]) == 0
    out = capsys.readouterr().out
    assert out.index("fig5: ") < out.index("figS9: ") and "campaign: 2 ids, 0 with failed runs" in out
    assert sorted(f.name.split("-smoke-")[0] for f in (tmp_path / "res").iterdir()) == ["fig5", "figS9"]
    assert cli.main(["reproduce", "--all", "--confirm", "--scale", "smoke", "--ids", "fig99"]) == 2
    assert "fig99" in capsys.readouterr().err


def test_the_whole_campaign_fits_one_night_on_the_calibrated_cpu(monkeypatch):
    """Item 5 of the campaign: every frozen cpu protocol together, at --jobs 2 on the CPU kind the
    cost model is fitted to, is estimated at 8 hours or less (a protocol that pushes it over says
    what it drops instead)."""
    from mlplab.experiments import cost

    tag = "epyc-avx512bf16"  # the CPU kind the committed campaign ran on
    assert tag in cost.calibration()["machines"]
    monkeypatch.setattr(cost, "host_tag", lambda: tag)
    every = C.campaign_ids(registry.list_experiments(), "cpu", lambda i: registry.get_experiment(i).scales)
    ready, unfrozen = C.frozen_ids(every, "cpu")
    assert len(ready) == 24 and not unfrozen
    total = sum(cost.estimate_cost(registry.plan_experiment(i, "cpu", role="confirmatory")[2], "cpu", 2)["est_s"]
                for i in ready)
    assert 6 * 3600 < total <= 8 * 3600
