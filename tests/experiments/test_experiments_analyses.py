"""Each id's analysis decides its claims from run folders written with chosen numbers: the
new rules (non-inferiority, best inner point, paired gaps, time ratios, exact checks) give the
known answer through ``mlplab report ID``, and the report prints the effect with its unit; the
same claims' other verdicts come from run records without folders (no report written)."""
import json

import numpy as np
import pytest
from test_spec_claims import TILT, rec  # a run record without a folder, for the cases decided without a report

from mlplab.experiments import report_experiment
from mlplab.utils.io import atomic_write_json


def manifest(out, id):
    atomic_write_json(out / "experiment.json", {"experiment": id, "title": "t", "command": f"mlplab reproduce {id}",
                                                "scale": {"scale": "cpu", "dataset": "fashion_mnist"}, "sweeps": []})


def run(out, sweep, name, overrides, results):
    d = out / sweep / name
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_json(d / "spec.json", {"sweep": sweep, "name": name, "overrides": overrides})
    atomic_write_json(d / "results.json", results)


def trained(err, train_loss=0.3, test_loss=0.4):
    return {"test_acc": 1 - err / 100, "train_acc": 0.95, "params": 1000, "train_loss": train_loss,
            "test_loss": test_loss, "history": [{"train_loss": 1.01 * train_loss, "test_loss": test_loss},
                                                {"train_loss": train_loss, "test_loss": test_loss}]}  # plateaued


def held(out, id):
    res = report_experiment(id, out, verbose=False)
    assert res["error"] is None
    return [v["held"] for v in res["verdicts"]]


def fake_fig2d(out, kron_minus_monarch, seeds=5):
    manifest(out, "fig2d")
    g = np.random.default_rng(0)
    for w in (256, 1024):
        for s in range(seeds):
            base = 12.0 + 0.5 * float(g.normal())
            for model, e in (("monarch_mlp", base), ("kronecker_mlp", base + kron_minus_monarch + 0.05 * s)):
                run(out, "shallow", f"{model},w={w},s={s}", {"model.name": model, "meta.width": w, "run.seed": s},
                    trained(e))


def test_fig2d_noninferior(tmp_path):
    fake_fig2d(tmp_path / "a", 0.2)
    assert held(tmp_path / "a", "fig2d") == [True, True]
    md = (tmp_path / "a" / "report.md").read_text()
    assert "margin 1" in md and "points" in md and "n = 5 seeds" in md
    fake_fig2d(tmp_path / "b", 3.0)
    assert held(tmp_path / "b", "fig2d") == [False, False]
    fake_fig2d(tmp_path / "c", 0.2, seeds=2)
    assert held(tmp_path / "c", "fig2d") == [None, None]


def test_fig2d_on_the_margin_is_undecided():
    """The Kronecker MLP exactly the margin (1 point) worse on average: the data cannot tell."""
    from mlplab.experiments.specs.monarch import FIG2D_MARGIN, _analyse_fig2d

    runs = [rec("shallow", {"model.name": model, "meta.width": w, "run.seed": s},
                trained(12.0 + 0.5 * s + (FIG2D_MARGIN + TILT[s] if model == "kronecker_mlp" else 0.0)))
            for w in (256, 1024) for s in range(4) for model in ("monarch_mlp", "kronecker_mlp")]
    an = _analyse_fig2d(runs, {"scale": {"dataset": "x"}})
    assert [(c.key, c.verdict) for c in an.claims] == [("kronecker-as-accurate", "UNDECIDED")] * 2


def test_figS5_best_inner_patch(tmp_path):
    manifest(tmp_path, "figS5")
    for P, e in ((2, 15.0), (4, 12.0), (7, 13.0), (14, 16.0), (28, 25.0)):
        for s in range(5):
            run(tmp_path, "patch", f"P={P},s={s}", {"model.name": "s_mixer", "model.kwargs.patch_size": P,
                                                     "meta.S0": (28 // P) ** 2, "run.seed": s}, trained(e + 0.1 * s))
    assert held(tmp_path, "figS5") == [True]
    assert "vertex at log2(P)" in (tmp_path / "report.md").read_text()


def test_figS5_monotone_is_did_not_hold_and_flat_undecided():
    from mlplab.experiments.specs.patch_size import _analyse_figS5

    def runs(error_of):
        return [rec("patch", {"model.name": "s_mixer", "model.kwargs.patch_size": P, "meta.S0": (28 // P) ** 2,
                              "run.seed": s}, trained(error_of(i) + 0.5 * s + TILT[s] * i))
                for s in range(4) for i, P in enumerate((2, 4, 7, 14, 28))]

    (c,) = _analyse_figS5(runs(lambda i: 12.0 + 2 * i), {"scale": {"dataset": "x"}}).claims  # best at the smallest P
    assert (c.key, c.verdict) == ("intermediate-patch", "DID NOT HOLD")
    (c,) = _analyse_figS5(runs(lambda i: 12.0), {"scale": {"dataset": "x"}}).claims
    assert c.verdict == "UNDECIDED"


def test_figS6_S8_paired_gaps(tmp_path):
    manifest(tmp_path, "figS6-S8")
    for part in ("S6", "S7", "S8"):
        for s in range(5):
            for rp, gap in ((False, 0.6 + 0.02 * s), (True, 0.2 + 0.03 * s)):
                run(tmp_path, part, f"rp={rp},s={s}", {"model.name": "rp_s_mixer" if rp else "s_mixer",
                                                       "meta.rp": rp, "run.seed": s},
                    trained(20.0, train_loss=0.3, test_loss=0.3 + gap))
    assert held(tmp_path, "figS6-S8") == [True, True, True]
    assert "nats" in (tmp_path / "report.md").read_text()


def test_figS6_S8_each_part_decided_on_its_own_runs():
    """S6: the RP gap larger (DID NOT HOLD); S7: equal (UNDECIDED); S8: the RP gap larger again, but
    the normal Mixer does not overfit (gap 0.05 < 0.1 nats; the RP Mixer's 0.3 is not the premise):
    NOT TESTABLE, never DID NOT HOLD."""
    from mlplab.experiments.specs.rp import _analyse_figS6

    gaps = {"S6": (0.3, 0.6), "S7": (0.4, 0.4), "S8": (0.05, 0.3)}  # (normal, RP)
    runs = [rec(part, {"model.name": "s_mixer", "meta.rp": rp, "run.seed": s},
                trained(20.0, train_loss=0.3, test_loss=0.3 + g + 0.01 * s + 0.01 * TILT[s] * rp))
            for part, pair in gaps.items() for s in range(4) for rp, g in zip((False, True), pair)]
    an = _analyse_figS6(runs, {"scale": {"dataset": "x"}})
    got = {c.claim[:2]: c for c in an.claims}
    assert {k: c.verdict for k, c in got.items()} == {"S6": "DID NOT HOLD", "S7": "UNDECIDED", "S8": "NOT TESTABLE"}
    assert {c.key for c in an.claims} == {"rp-overfits-less"} and got["S6"].stats.effect > 0
    assert got["S8"].held is False and "normal_gap >= 0.1" in got["S8"].reason()


def tableS3_results(rp, sw, rounds=40, spread=0.01):
    """The cost run's results: per round a load shared by the three models, times rp and sw × the Mixer's."""
    g = np.random.default_rng(1)
    load = 1 + 0.2 * g.random(rounds)
    rows = []
    for label, model, t in (("MLP-Mixer", "mlp_mixer", 1.0), ("RP-Mixer", "rp_mlp_mixer", rp),
                            ("SW-MLP", "sw_mlp", sw)):
        times = list(t * load * (1 + spread * g.standard_normal(rounds)))
        rows.append({"label": label, "model": model, "params": 1, "params_nonzero": 1, "weight_MB": 1.0,
                     "flops_per_example": 1e6, "step_s": float(np.median(times)), "step_times": times,
                     "epoch_s": 100 * float(np.median(times)), "peak_MB": None})
    return {"rows": rows, "machine": {"loadavg": [1.5, 1.0, 1.0]}, "load_after": [1.6, 1.0, 1.0], "device": "cpu"}


def test_tableS3_time_ratios(tmp_path):
    """One run times the models interleaved; each claim is the median of the per-round ratios."""
    manifest(tmp_path, "tableS3")
    run(tmp_path, "cost", "setting=cifar", {"setting": "cifar"}, tableS3_results(rp=1.05, sw=4.6))
    assert held(tmp_path, "tableS3") == [True, True]
    md = (tmp_path / "report.md").read_text()
    assert "n = 40 pairs" in md and "95% CI" in md and "load average 1.50 before" in md
    assert [c["class"] for c in json.loads((tmp_path / "verdicts.json").read_text())["verdicts"]] == ["measurement"] * 2


@pytest.mark.parametrize("rp, sw, want", [
    (1.3, 1.5, ["DID NOT HOLD", "DID NOT HOLD"]),  # SW-MLP only 1.5×, RP 30% dearer
    (1.10, 2.0, ["UNDECIDED", "UNDECIDED"]),  # each median on its bound, the interval around it
    (1.05, 4.6, ["UNDECIDED", "UNDECIDED"]),  # fewer than 20 interleaved rounds (below)
])
def test_tableS3_other_verdicts(rp, sw, want):
    from mlplab.experiments.specs.runtime import _analyse_tableS3

    rounds, spread = (10, 0.01) if rp == 1.05 else (40, 0.05)
    an = _analyse_tableS3([rec("cost", {"setting": "cifar"}, tableS3_results(rp, sw, rounds, spread))], {})
    assert [(c.key, c.verdict) for c in an.claims] == list(zip(("sw-slower", "rp-as-cheap"), want))


def test_implicit_bias_is_deterministic(tmp_path):
    manifest(tmp_path, "implicit-bias")
    for i, gap in enumerate((0.02, 0.0)):
        run(tmp_path, "check", f"p{i}", {"seed": i}, {"S": 2, "C": 2, "lam": 0.1, "seed": i, "lhs": 1.0 + gap,
                                                      "rhs_at_lhs_solution": 1.0, "rhs": 1.0, "rhs_lower_bound": 1.0,
                                                      "holds": True})
    assert held(tmp_path, "implicit-bias") == [True]
    md = (tmp_path / "report.md").read_text()
    assert "no seeds needed" in md and "n = " not in md.split("## Results")[0]
    v = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"][0]
    assert v["stats"]["kind"] == "deterministic"


def test_implicit_bias_violated_and_unmeasured():
    """lhs below rhs by more than the solvers' resolution on one problem: DID NOT HOLD; no problem
    solved: nothing to check, UNDECIDED."""
    from mlplab.experiments.specs.implicit_bias import _analyse_implicit

    def problem(i, gap):
        return rec("check", {"seed": i}, {"S": 2, "C": 2, "lam": 0.1, "seed": i, "lhs": 1.0 + gap,
                                          "rhs_at_lhs_solution": 1.0, "rhs": 1.0, "rhs_lower_bound": 1.0,
                                          "holds": gap >= 0})

    (c,) = _analyse_implicit([problem(0, 0.02), problem(1, -1e-6)], {}).claims
    assert (c.key, c.verdict) == ("l1-bound", "DID NOT HOLD") and c.stats.effect == pytest.approx(-1e-6)
    (c,) = _analyse_implicit([problem(0, 0.02), problem(1, -1e-12)], {}).claims  # within 1e-10: float64 noise
    assert c.verdict == "HELD"
    (c,) = _analyse_implicit([], {}).claims
    assert c.verdict == "UNDECIDED"


def test_connections_count_the_built_hidden_widths():
    """The report's connections column is Ω as built: with a non-integer γ the Mixer's hidden
    widths are rounded (figS3's γ = 1.882 at S = 64, C = 4 builds D_S = 120, D_C = 8), so the
    count is a whole number; with whole γS, γC it equals the formula γ(C·S² + C²·S)/2."""
    from pathlib import Path

    from mlplab.experiments.aggregate import RunRecord
    from mlplab.experiments.specs.common import connections
    from mlplab.theory.budget import omega_mixer

    def run(**o):
        return RunRecord("s", "r", Path("r"), {"model.name": "mlp_mixer", **o})

    assert connections(run(**{"meta.S": 64, "meta.C": 4, "model.kwargs.expansion": 1.882})) == \
        (4 * 64 * 120 + 64 * 4 * 8) / 2
    assert connections(run(**{"meta.S": 16, "meta.C": 16, "model.kwargs.expansion": 2.0})) == omega_mixer(16, 16, 2.0)
    assert connections(RunRecord("s", "r", Path("r"), {"model.name": "s_mixer", "meta.S": 41, "meta.C": 40})) == \
        omega_mixer(41, 40, 1.0)
    sw = {"model.name": "sw_mlp", "model.kwargs.width": 256, "model.kwargs.density": 0.25,
          "model.kwargs.expansion": 2.0}
    assert connections(RunRecord("s", "r", Path("r"), sw)) == 0.25 * 2.0 * 256 ** 2  # fig2a-c names m, p only in kwargs
