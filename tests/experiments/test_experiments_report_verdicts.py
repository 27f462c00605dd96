"""``mlplab report ID`` re-decides the claims from the runs on disk, with the statistics shown."""
import json
import math

import pytest

from mlplab.experiments import get_experiment, report_experiment
from mlplab.utils.io import atomic_write_json

PAIRS = [(124, 8), (83, 16), (41, 40), (40, 41), (16, 83), (8, 124)]  # (S, C), Ω = 2^16


PLATEAUED = [0.50, 0.40, 0.396, 0.394]  # the loss changes 0.76% per epoch over the last 2 epochs


def fake_fig6(out, error_of, seeds=3, losses=PLATEAUED):
    """An experiment folder as ``reproduce fig6`` leaves it, with chosen test errors."""
    atomic_write_json(out / "experiment.json", {"experiment": "fig6", "title": "t", "command": "mlplab reproduce fig6",
                                                "scale": {"scale": "cpu", "dataset": "fashion_mnist"}, "sweeps": []})
    for S, C in PAIRS:
        for s in range(seeds):
            d = out / "pairs" / f"S={S},C={C},seed={s}"
            d.mkdir(parents=True, exist_ok=True)
            ov = {"model.name": "s_mixer", "meta.omega": 65536, "meta.family": "s_mixer", "meta.S": S, "meta.C": C,
                  "meta.m": S * C, "run.seed": s}
            atomic_write_json(d / "spec.json", {"sweep": "pairs", "name": d.name, "overrides": ov})
            err = error_of(math.log(S / C), s)
            atomic_write_json(d / "results.json", {
                "test_acc": 1 - err / 100, "train_acc": 0.9, "params": 1000 + S,
                "history": [{"train_loss": x} for x in losses]})


def test_report_redecides_from_disk(tmp_path):
    fake_fig6(tmp_path, lambda x, s: 12 + x * x + 0.05 * s)  # clear minimum at S = C
    res = report_experiment("fig6", tmp_path, verbose=False)
    assert [v["held"] for v in res["verdicts"]] == [True]
    md = (tmp_path / "report.md").read_text()
    assert "**HELD**" in md and "p = " in md and "n = 3 seeds" in md and "95% CI" in md
    assert "params" in md and "connections" in md and "loss_change" in md
    # the runs change on disk (a monotone curve): the report decides again
    fake_fig6(tmp_path, lambda x, s: 12 + 2 * x + 0.05 * s * (1 + x))
    res = report_experiment("fig6", tmp_path, verbose=False)
    assert [v["held"] for v in res["verdicts"]] == [False]
    assert "**DID NOT HOLD**" in (tmp_path / "report.md").read_text()
    v = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"][0]
    assert v["stats"]["n"] == 3 and v["stats"]["p"] < 0.05


def test_report_table_is_sorted_by_c_and_shows_the_plateau(tmp_path):
    fake_fig6(tmp_path, lambda x, s: 12 + x * x)
    report_experiment("fig6", tmp_path, verbose=False)
    rows = (tmp_path / "results.csv").read_text().splitlines()
    head = rows[0].split(",")
    cs = [int(r.split(",")[head.index("C")]) for r in rows[1:]]
    assert cs == sorted(cs)
    lc = float(rows[1].split(",")[head.index("loss_change")])
    assert abs(lc - 100 * ((0.394 / 0.40) ** 0.5 - 1)) < 1e-3


def test_two_seeds_are_undecided(tmp_path):
    fake_fig6(tmp_path, lambda x, s: 12 + 3 * x * x, seeds=2)
    res = report_experiment("fig6", tmp_path, verbose=False)
    assert [v["held"] for v in res["verdicts"]] == [None]
    assert "**UNDECIDED**" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("id", ["fig6", "fig6-imagenet"])
def test_near_s_eq_c_flat_and_out_of_its_window(id):
    """Both ids' analysis (shared): a flat curve is UNDECIDED; a sweep whose S/C stops short of 2
    is NOT TESTABLE, whatever its shape (here a clear minimum at its end, S = C)."""
    from test_spec_claims import TILT, rec, trained

    def runs(pairs, error_of):
        return [rec("pairs", {"meta.omega": 65536, "meta.family": "s_mixer", "meta.S": S, "meta.C": C, "meta.m": S * C,
                              "run.seed": s}, trained(error_of(math.log(S / C)) + 0.5 * s + TILT[s] * i))
                for s in range(4) for i, (S, C) in enumerate(pairs)]

    analyse = get_experiment(id).analyse
    (c,) = analyse(runs(PAIRS, lambda x: 12.0), {"scale": {"dataset": "x"}}).claims
    assert (c.key, c.verdict) == ("near-s-eq-c", "UNDECIDED")
    (c,) = analyse(runs(PAIRS[:3], lambda x: 12 + x * x), {"scale": {"dataset": "x"}}).claims  # S/C 124/8 … 41/40
    assert c.verdict == "NOT TESTABLE" and "spans_window >= 1" in c.reason()
    same = get_experiment("fig6")  # the folder tests above decide both ids
    assert get_experiment(id).analyse is same.analyse and get_experiment(id).claims == same.claims


def test_report_of_another_experiment_is_refused(tmp_path):
    fake_fig6(tmp_path, lambda x, s: 12.0, seeds=1)
    with pytest.raises(ValueError, match="holds experiment 'fig6'"):
        report_experiment("fig5", tmp_path, verbose=False)


def test_runs_that_have_not_plateaued_are_not_testable(tmp_path):
    """The clear minimum of the first test, but the training loss still falls ~11% per epoch in
    every condition: NOT TESTABLE (never HELD or DID NOT HOLD), and the report says which
    conditions and why."""
    fake_fig6(tmp_path, lambda x, s: 12 + x * x + 0.05 * s, losses=[0.50, 0.40, 0.36, 0.32])
    res = report_experiment("fig6", tmp_path, verbose=False)
    assert [v["verdict"] for v in res["verdicts"]] == ["NOT TESTABLE"]
    assert res["verdicts"][0]["held"] is True  # the rule's decision is kept, the verdict is not it
    md = (tmp_path / "report.md").read_text()
    assert "**NOT TESTABLE**" in md and "still falling: pairs/S=124,C=8" in md and "%/epoch" in md


def test_a_longer_run_that_still_learns_makes_the_claim_not_testable(tmp_path):
    fake_fig6(tmp_path, lambda x, s: 12 + x * x + 0.05 * s)
    S, C = PAIRS[2]
    d = tmp_path / "pairs-longer" / f"S={S},C={C},seed=0"
    d.mkdir(parents=True)
    ov = {"model.name": "s_mixer", "meta.omega": 65536, "meta.family": "s_mixer", "meta.S": S, "meta.C": C,
          "meta.m": S * C, "run.seed": 0, "meta.longer": 2.0}
    atomic_write_json(d / "spec.json", {"sweep": "pairs-longer", "name": d.name, "overrides": ov})
    atomic_write_json(d / "results.json", {"test_acc": 1 - 9.0 / 100, "train_acc": 0.95, "params": 1000,
                                           "history": [{"train_loss": x} for x in PLATEAUED]})
    res = report_experiment("fig6", tmp_path, verbose=False)
    assert [v["verdict"] for v in res["verdicts"]] == ["NOT TESTABLE"]
    assert "still learning: pairs/S=41,C=40" in (tmp_path / "report.md").read_text()
    atomic_write_json(d / "results.json", {"test_acc": 1 - 12.0 / 100, "train_acc": 0.95, "params": 1000,
                                           "history": [{"train_loss": x} for x in PLATEAUED]})
    assert [v["verdict"] for v in report_experiment("fig6", tmp_path, verbose=False)["verdicts"]] == ["HELD"]


def test_group_runs_counts_the_seeds_of_the_test_error():
    """n is the number of seeds behind the test error even when a later column is NaN for every
    run (fig2d's shallow MLPs have no connections column): it printed n = 0 before."""
    from pathlib import Path

    from mlplab.experiments.aggregate import RunRecord, group_runs

    runs = [RunRecord("s", f"r{i}", Path(f"r{i}"), {"model.name": "m", "run.seed": i},
                      results={"test_acc": 0.9 - 0.01 * i})
            for i in range(3)]
    rows = group_runs(runs, ["model.name"], {"test_error": lambda r: 100 * (1 - r.results["test_acc"]),
                                             "connections": lambda r: float("nan")})
    assert rows[0]["n"] == 3 and abs(rows[0]["test_error"] - 11.0) < 1e-9


def test_report_tables_show_counts_and_means_of_counts_as_whole_numbers():
    from mlplab.experiments.report import markdown_table

    # a masked SW-MLP's nonzeros differ by seed: their mean is a count too, not "18747.3"
    table = markdown_table([{"params": 18747.3, "connections": 2401.0, "test_error": 12.94, "lr": 0.01}])
    row = table.strip().splitlines()[-1]
    assert "18,747" in row and "2,401" in row and "12.94" in row and "0.01" in row
    # per-trial lists (figS1's spectra) are summarised; results.csv keeps them
    row = markdown_table([{"largest": [2.35, 2.47, 3.17, 2.24, 2.5], "pair": [1, 2]}]).strip().splitlines()[-1]
    assert "5 values, 2.24–3.17" in row and "[1, 2]" in row
