"""``mlplab report ID`` re-decides the claims from the runs on disk, with the statistics shown."""
import json
import math

from mlplab.experiments import report_experiment
from mlplab.utils.io import atomic_write_json

PAIRS = [(124, 8), (83, 16), (41, 40), (40, 41), (16, 83), (8, 124)]  # (S, C), Ω = 2^16


def fake_fig6(out, error_of, seeds=3):
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
                "history": [{"train_loss": 0.50}, {"train_loss": 0.40}, {"train_loss": 0.396}]})


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
    assert lc == round(100 * ((0.396 / 0.5) ** 0.5 - 1), 4) or abs(lc - 100 * ((0.396 / 0.5) ** 0.5 - 1)) < 1e-3


def test_two_seeds_are_undecided(tmp_path):
    fake_fig6(tmp_path, lambda x, s: 12 + 3 * x * x, seeds=2)
    res = report_experiment("fig6", tmp_path, verbose=False)
    assert [v["held"] for v in res["verdicts"]] == [None]
    assert "**UNDECIDED**" in (tmp_path / "report.md").read_text()


def test_report_of_another_experiment_is_refused(tmp_path):
    import pytest

    fake_fig6(tmp_path, lambda x, s: 12.0, seeds=1)
    with pytest.raises(ValueError, match="holds experiment 'fig6'"):
        report_experiment("fig5", tmp_path, verbose=False)
