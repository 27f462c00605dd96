"""The specs' analyses field by field, on small result tables with numbers chosen here: the rules
the budget experiments share (``specs/budget.py``: a run's point, the width trend, the optimum
near S = C and its window) and fig5's analysis whole (its table, its panels and each claim with
its label and runs) — the expected slopes from numpy fits written in the test, so that a wrong
group, a reversed sign or a dropped label fails here (test_spec_claims.py drives every verdict)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.plots import Panel, Series
from mlplab.experiments.specs import fig5 as fig5_spec
from mlplab.experiments.specs.budget import dataset_title, near_claim, point, row_point, width_claim

SEEDS = (0, 1, 2, 3)
TILT = (0.3, -0.3, 0.1, -0.1)  # per-seed slope offsets whose mean is 0


def rec(sweep: str, labels: dict, err: float | None) -> RunRecord:
    return RunRecord(sweep, ",".join(f"{k}={v}" for k, v in labels.items()), Path("/nonexistent"), dict(labels),
                     results=None if err is None else {"test_acc": 1 - err / 100, "train_acc": 1 - err / 200,
                                                       "params": 1000, "history": [{"train_loss": 0.4}] * 3})


def slopes_per_seed(x: list[float], ys: dict[int, list[float]]) -> list[float]:
    """Least-squares slope of each seed's y against x (numpy's fit)."""
    return [float(np.polyfit(x, ys[s], 1)[0]) for s in sorted(ys)]


# --------------------------------------------------------------------------- specs/budget.py


def test_a_run_and_a_row_name_the_same_point():
    r = rec("w", {"meta.omega": 64, "meta.family": "s_mixer", "meta.S": 4, "meta.C": 8, "meta.m": 32, "meta.p": 0.5,
                  "run.seed": 1}, 10.0)
    assert point(r) == (64, "s_mixer", 4, 8, 32)
    assert row_point({"omega": 64, "family": "s_mixer", "S": 4, "C": 8, "m": 32, "p": 0.5}) == (64, "s_mixer", 4, 8, 32)
    assert row_point({"omega": 64, "family": "sw_mlp", "m": 32}) == (64, "sw_mlp", None, None, 32)


def test_dataset_title_reads_the_manifests_scale():
    assert dataset_title({"scale": {"scale": "cpu", "dataset": "cifar10"}}) == "cifar10"
    assert dataset_title({"scale": {"scale": "cpu"}}) == "?"
    assert dataset_title({}) == "?"


def _width_runs(errors: dict[int, float], family: str = "sw_mlp") -> list[RunRecord]:
    """One family at one Ω over widths m (a dict m → error), seed s adding 0.5·s + TILT[s]·log2(m/100)."""
    return [rec("width", {"meta.omega": 2**14, "meta.family": family, "meta.m": m, "meta.p": 0.5, "run.seed": s},
                e + 0.5 * s + TILT[s] * math.log2(m / 100)) for s in SEEDS for m, e in errors.items()]


@pytest.mark.parametrize("errors, held", [({100: 14.0, 200: 12.0, 400: 10.0}, True),
                                          ({100: 10.0, 200: 11.0, 400: 12.5}, False)])
def test_width_claim_is_the_seeds_mean_slope_per_doubling(errors, held):
    rows = [{"omega": 2**14, "family": "sw_mlp", "m": m} for m in errors]
    runs = _width_runs(errors) + _width_runs({m: 50.0 for m in errors}, family="s_mixer")  # another family: ignored
    v = width_claim(runs, rows)
    x = [math.log2(m) for m in errors]
    ys = {s: [e + 0.5 * s + TILT[s] * math.log2(m / 100) for m, e in errors.items()] for s in SEEDS}
    assert v.held is held and v.n == 4
    assert v.effect == pytest.approx(np.mean(slopes_per_seed(x, ys)), abs=1e-9)
    assert v.effect_name == "mean Δ test error per doubling" and v.unit == "points"


S_C = ((4, 64), (8, 32), (16, 16), (32, 8), (64, 4))  # S/C from 1/16 to 16 at m = 256


def _near_runs(err, pairs=S_C) -> tuple[list[RunRecord], list[dict]]:
    """err(log(S/C)) at each pair, seed s adding 0.3·s + 0.05·s·index."""
    runs = [rec("expansion", {"meta.omega": 2**14, "meta.family": "mlp_mixer", "meta.S": S, "meta.C": C,
                              "meta.m": S * C, "run.seed": s}, err(math.log(S / C)) + 0.3 * s + 0.05 * s * i)
            for s in SEEDS for i, (S, C) in enumerate(pairs)]
    return runs, [{"omega": 2**14, "family": "mlp_mixer", "S": S, "C": C, "m": S * C} for S, C in pairs]


def test_near_claim_fits_a_parabola_in_log_s_over_c_between_half_and_two():
    runs, rows = _near_runs(lambda x: 12 + 0.5 * x * x)
    v, measured = near_claim(runs, rows)
    assert measured == {"spans_window": 1.0} and v.held is True and v.unit == "points"
    lo = -math.log(2.0)
    assert v.extra["lo"] == lo and v.extra["hi"] == -lo
    assert v.effect_name == "test error, slope at log(S/C) = -0.693 (claim < 0)"
    # the deciding slope: each seed's parabola c0 + c1 x + c2 x² differentiated at lo, averaged
    x = [math.log(S / C) for S, C in S_C]
    fits = [np.polyfit(x, [12 + 0.5 * xi * xi + 0.3 * s + 0.05 * s * i for i, xi in enumerate(x)], 2) for s in SEEDS]
    assert v.effect == pytest.approx(np.mean([2 * c2 * lo + c1 for c2, c1, _ in fits]), abs=1e-9)
    v, _ = near_claim(*_near_runs(lambda x: 12 + x))  # best at the smallest S/C: the optimum lies below ½
    assert v.held is False


@pytest.mark.parametrize("pairs", [
    ((8, 16), (16, 16), (32, 8)),  # S/C = ½ … 4: reaches past 2 only (½ is the bound itself, not past it)
    ((4, 32), (8, 16), (16, 8)),  # 1/8 … 2: past ½ only
    ((8, 16), (16, 8)),  # ½ and 2 exactly
    (),
])
def test_near_claim_outside_its_window_is_not_testable(pairs):
    v, measured = near_claim(*_near_runs(lambda x: 12 + x * x, pairs))
    assert measured == {"spans_window": 0.0}
    assert v.held is None and v.detail == "the sweep's S/C does not reach past 1/2 and 2"


# --------------------------------------------------------------------------------------- fig5

# (family, Ω) → its points (S, C, m), written in no order of m; the S-Mixer at Ω = 2^18 with a
# swapped pair (8, 16) / (16, 8) at m = 128, and at Ω = 2^14 too (each Ω a claim of its own)
FIG5_POINTS = {
    ("sw_mlp", 2**14): [(None, None, 400), (None, None, 100), (None, None, 200)],
    ("s_mixer", 2**18): [(16, 32, 512), (8, 16, 128), (16, 8, 128), (16, 16, 256)],
    ("rp_s_mixer", 2**18): [(8, 16, 128), (16, 32, 512), (16, 16, 256)],
    ("s_mixer", 2**14): [(8, 8, 64), (4, 8, 32), (8, 16, 128)],
}
BASE = {"sw_mlp": 20.0, "s_mixer": 10.0, "rp_s_mixer": 30.0}
SLOPE = {("sw_mlp", 2**14): -2.0, ("s_mixer", 2**18): -1.0, ("rp_s_mixer", 2**18): 1.5, ("s_mixer", 2**14): 0.5}
SWAP = 0.4  # the swapped pair's error above its twin
LABEL = {"s_mixer": "S-Mixer", "rp_s_mixer": "RP S-Mixer", "sw_mlp": "SW-MLP"}
TRAIN_KEYS = {"test_error", "test_error_std", "n", "train_error", "train_error_std", "loss_change", "loss_change_std",
              "params", "params_std", "connections", "connections_std"}


def _fig5_error(f: str, om: int, S, m: int, s: int) -> float:
    d = math.log2(m / 32)
    swap = SWAP if (f, om, S, m) == ("s_mixer", 2**18, 16, 128) else 0.0
    return BASE[f] + SLOPE[f, om] * d + swap + 0.5 * s + TILT[s] * d


def _fig5_runs() -> list[RunRecord]:
    runs = []
    for (f, om), pts in FIG5_POINTS.items():
        for S, C, m in pts:
            lab = {"meta.omega": om, "meta.family": f, "meta.m": m, "meta.p": 0.5}
            if S:
                lab.update({"meta.S": S, "meta.C": C})
            runs += [rec("width", {**lab, "run.seed": s}, _fig5_error(f, om, S, m, s)) for s in SEEDS]
    runs.append(rec("width", {"meta.omega": 2**14, "meta.family": "sw_mlp", "meta.m": 800, "meta.p": 0.5,
                              "run.seed": 0}, None))  # unfinished: no point
    runs.append(rec("other", {"meta.omega": 2**14, "meta.family": "sw_mlp", "meta.m": 800, "meta.p": 0.5,
                              "run.seed": 0}, 99.0))  # another sweep's run
    return runs


def test_fig5_analysis_table_panels_and_claims(monkeypatch):
    drawn = []
    monkeypatch.setattr(fig5_spec, "draw", lambda panels, title: drawn.append((panels, title)) or "figure")
    runs = _fig5_runs()
    an = fig5_spec._analyse_fig5(runs, {"scale": {"scale": "cpu", "dataset": "made-up"}})
    mean_err = {(f, om, S, m): np.mean([_fig5_error(f, om, S, m, s) for s in SEEDS])
                for (f, om), pts in FIG5_POINTS.items() for S, _, m in pts}
    # the table: one row per point, by Ω, family, m (the swapped pair's rows in the order seen)
    order = sorted([(om, f, m, S, C) for (f, om), pts in FIG5_POINTS.items() for S, C, m in pts],
                   key=lambda k: k[:3])
    assert [(r["omega"], r["family"], r["m"], r["S"], r["C"]) for r in an.table] == order
    assert [r["test_error"] for r in an.table] == pytest.approx([mean_err[f, om, S, m] for om, f, m, S, _ in order])
    assert all(set(r) == {"omega", "family", "S", "C", "m", "p"} | TRAIN_KEYS for r in an.table)
    assert an.columns == ["omega", "family", "S", "C", "m", "p", "test_error", "test_error_std", "train_error",
                          "loss_change", "params", "connections", "n"]
    # the figure: a panel per Ω, a line per family over its distinct m (the swapped pair's mean)
    assert an.figures == {"fig5": "figure"}
    axis = ("effective width m = S·C (SW-MLP: m)", "test error (%)")

    def line(f, om):
        ms = sorted({m for _, _, m in FIG5_POINTS[f, om]})
        ys = [np.mean([mean_err[f, om, S, m] for S, _, m2 in FIG5_POINTS[f, om] if m2 == m]) for m in ms]
        return Series(LABEL[f], ms, pytest.approx(ys))

    families = ("s_mixer", "rp_s_mixer", "sw_mlp")
    claims_order = [(f, om) for om in (2**14, 2**18) for f in families if (f, om) in FIG5_POINTS]
    assert drawn == [([Panel(f"made-up, Ω = 2^{k}", *axis, [line(f, om) for f, om2 in claims_order if om2 == om],
                             xscale="log") for k, om in ((14, 2**14), (18, 2**18))],
                      "Fig. 5: test error vs effective width at fixed Ω")]
    # the claims: one per family and Ω, labelled, decided on that family's runs at that Ω only
    assert [c.claim for c in an.claims] == [
        f"Ω = 2^{int(math.log2(om))}: {LABEL[f]}: test error falls as the effective width m grows at fixed Ω"
        for f, om in claims_order]
    assert [c.verdict for c in an.claims] == ["DID NOT HOLD", "HELD", "HELD", "DID NOT HOLD"]
    for c, (f, om) in zip(an.claims, claims_order):
        assert c.key == f"width-{f}"
        assert c.runs == [r for r in runs if r.sweep == "width" and r.results is not None
                          and r.get("meta.family") == f and r.get("meta.omega") == om]
        pts = FIG5_POINTS[f, om]
        x = [math.log2(m) for _, _, m in pts]
        ys = {s: [_fig5_error(f, om, S, m, s) for S, _, m in pts] for s in SEEDS}
        assert c.stats.effect == pytest.approx(np.mean(slopes_per_seed(x, ys)), abs=1e-9)


# -------------------------------------------------------------------------------------- figS9

FIGS9_TITLE = "Fig. S.9: effective weights at S = C = 8"
MIXER_WHAT = "density (the farther of the two from 1/C)"


def _figS9_run(folder: Path, mixer: float, rp: float, sw: float) -> RunRecord:
    """A pictures run at S = C = 8, m = 64 with the three densities (and a list and a dict in its
    results, which the table leaves out)."""
    return RunRecord("pictures", "seed=0", folder, {"seed": 0},
                     results={"S": 8, "C": 8, "m": 64, "density_mixer": mixer, "density_rp_mixer": rp,
                              "density_sw": sw, "rows": [1, 2], "meta": {"a": 1}})


def test_figS9_analysis_pictures_and_both_density_claims(tmp_path, monkeypatch):
    from mlplab.experiments.specs import pictures

    drawn = []
    monkeypatch.setattr(pictures, "draw", lambda panels, title, ncols: drawn.append((panels, title, ncols)) or "fig")
    arrays = {k: np.arange(4.0).reshape(2, 2) + i for i, k in enumerate(("sw", "mixer", "rp_mixer"))}
    np.savez(tmp_path / "weights.npz", **arrays)
    other = RunRecord("other", "seed=0", tmp_path, {"seed": 0}, results={"C": 1})  # another sweep: ignored
    an = pictures._analyse_figS9([_figS9_run(tmp_path, 0.125, 0.125, 0.13), other], {})
    assert an.table == [{"S": 8, "C": 8, "m": 64, "density_mixer": 0.125, "density_rp_mixer": 0.125,
                         "density_sw": 0.13}]
    assert an.columns is None and an.figures == {"figS9": "fig"}
    ((panels, title, ncols),) = drawn
    assert title == FIGS9_TITLE and ncols == 3
    assert [p.title for p in panels] == ["SW-MLP M ⊙ A (density 0.130)", "Mixer I_C ⊗ W (density 0.125)",
                                         "RP J1(I_C ⊗ W)J2 (density 0.125)"]
    for p, key in zip(panels, ("sw", "mixer", "rp_mixer")):
        np.testing.assert_array_equal(p.image, arrays[key])
    dens = "densities 0.1250, 0.1250, 0.1300 vs 1/C = 0.1250"
    mixer, sw = an.claims
    assert (mixer.key, mixer.verdict, mixer.detail, mixer.stats.detail) == ("mixer-density", "HELD", "", dens)
    assert mixer.stats.statistic == f"{MIXER_WHAT} = 0.125; needs |{MIXER_WHAT} − 0.125| ≤ 1e-12"
    # 3 binomial sd of a density 1/8 over 64² entries: 3·sqrt(1/8 · 7/8)/64 = 0.0155
    tol = 3 * math.sqrt(7 / 64) / 64
    assert (sw.key, sw.verdict, sw.detail, sw.stats.detail) == ("sw-density", "HELD", "tolerance 0.016", dens)
    assert sw.stats.statistic == "density(M ⊙ A) = 0.13; needs |density(M ⊙ A) − 0.125| ≤ 0.0155"
    assert sw.stats.extra == {"tol": pytest.approx(tol, rel=1e-12)}


@pytest.mark.parametrize("mixer, rp, far, sw, sw_held", [
    (0.125, 0.13, 0.13, 0.125 + 0.0154, True),  # the RP-Mixer's farther: it decides
    (0.14, 0.125, 0.14, 0.125 - 0.0156, False),  # the Mixer's farther
    (0.0625, 0.1875, 0.0625, 0.125, True),  # equally far: the Mixer's
])
def test_figS9_the_farther_density_decides_and_the_sw_tolerance_is_three_sd(tmp_path, mixer, rp, far, sw, sw_held):
    """No weights saved: no pictures, the same claims."""
    from mlplab.experiments.specs import pictures

    an = pictures._analyse_figS9([_figS9_run(tmp_path, mixer, rp, sw)], {})
    m, s = an.claims
    assert m.verdict == "DID NOT HOLD" and m.stats.value == far
    assert s.held is sw_held and s.stats.value == sw


# --------------------------------------------------------------------------------------- fig2d

FIG2D = {("monarch_mlp", 16): 12.0, ("kronecker_mlp", 16): 12.3, ("monarch_mlp", 64): 10.0,
         ("kronecker_mlp", 64): 13.0, ("monarch_mlp", 256): 9.0}  # no Kronecker MLP at 256: no claim there


def _fig2d_error(model: str, w: int, s: int) -> float:
    return FIG2D[model, w] + 0.5 * s + (TILT[s] if model == "kronecker_mlp" else 0.0)


def test_fig2d_analysis_table_panel_and_one_claim_per_width_with_both_models(monkeypatch):
    from mlplab.experiments.specs import monarch

    drawn = []
    monkeypatch.setattr(monarch, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = [rec("shallow", {"model.name": m, "meta.width": w, "run.seed": s}, _fig2d_error(m, w, s))
            for s in SEEDS for (m, w) in FIG2D]
    runs.append(rec("other", {"model.name": "monarch_mlp", "meta.width": 16, "run.seed": 9}, 90.0))
    an = monarch._analyse_fig2d(runs, {"scale": {"dataset": "made-up"}})
    mean_err = {k: np.mean([_fig2d_error(*k, s) for s in SEEDS]) for k in FIG2D}
    order = [("kronecker_mlp", 16), ("kronecker_mlp", 64), ("monarch_mlp", 16), ("monarch_mlp", 64),
             ("monarch_mlp", 256)]
    assert [(r["model"], r["width"]) for r in an.table] == order
    assert all(set(r) == {"model", "width"} | TRAIN_KEYS for r in an.table)
    assert [r["test_error"] for r in an.table] == pytest.approx([mean_err[k] for k in order])
    assert [r["test_error_std"] for r in an.table] == pytest.approx(
        [np.std([_fig2d_error(*k, s) for s in SEEDS], ddof=1) for k in order])
    assert an.columns == ["model", "width", "test_error", "test_error_std", "train_error", "loss_change", "params",
                          "connections", "n"]
    assert an.figures == {"fig2d": "fig"}
    ((panels, title),) = drawn
    assert title == "Fig. 2d: Monarch vs Kronecker MLP"
    std = {k: np.std([_fig2d_error(*k, s) for s in SEEDS], ddof=1) for k in FIG2D}
    assert panels == [Panel("made-up: shallow MLPs", "width", "test error (%)", [
        Series("Monarch MLP", [16, 64, 256], pytest.approx([mean_err["monarch_mlp", w] for w in (16, 64, 256)]),
               pytest.approx([std["monarch_mlp", w] for w in (16, 64, 256)])),
        Series("Kronecker MLP", [16, 64], pytest.approx([mean_err["kronecker_mlp", w] for w in (16, 64)]),
               pytest.approx([std["kronecker_mlp", w] for w in (16, 64)]))], xscale="log")]
    # Kronecker − Monarch: +0.3 at width 16 (inside the 1-point margin), +3 at 64 (outside)
    assert [c.claim.split(":")[0] for c in an.claims] == ["width 16", "width 64"]
    assert [c.verdict for c in an.claims] == ["HELD", "DID NOT HOLD"]
    for c, w in zip(an.claims, (16, 64)):
        assert c.key == "kronecker-as-accurate" and c.stats.unit == "points"
        assert c.stats.effect_name == "mean Kronecker − Monarch test error (margin 1)"
        assert c.stats.effect == pytest.approx(FIG2D["kronecker_mlp", w] - FIG2D["monarch_mlp", w])
        assert sorted(r.name for r in c.runs) == sorted(r.name for r in runs[:-1] if r.get("meta.width") == w)


# --------------------------------------------------------------------------------------- figS5

PATCHES = (28, 14, 7, 4, 2)  # written largest first: the table sorts them


def _figS5_error(P: int, s: int) -> float:
    """A parabola in log2(P) with its minimum at P = 4, each seed shifted and tilted."""
    x = math.log2(P)
    return 12 + (x - 2) ** 2 + 0.5 * s + 0.1 * TILT[s] * x


def _figS5_runs(patches=PATCHES) -> list[RunRecord]:
    return [rec("patch", {"model.name": "s_mixer", "model.kwargs.patch_size": P, "meta.S0": (28 // P) ** 2,
                          "run.seed": s}, _figS5_error(P, s)) for P in patches for s in SEEDS]


def test_figS5_analysis_table_panel_and_the_intermediate_patch_claim(monkeypatch):
    from mlplab.experiments.specs import patch_size

    drawn = []
    monkeypatch.setattr(patch_size, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = _figS5_runs() + [rec("other", {"model.kwargs.patch_size": 3, "run.seed": 0}, 50.0)]
    an = patch_size._analyse_figS5(runs, {"scale": {"dataset": "made-up"}})
    Ps = sorted(PATCHES)
    mean = [np.mean([_figS5_error(P, s) for s in SEEDS]) for P in Ps]
    std = [np.std([_figS5_error(P, s) for s in SEEDS], ddof=1) for P in Ps]
    assert [(r["P"], r["S0"]) for r in an.table] == [(P, (28 // P) ** 2) for P in Ps]
    assert all(set(r) == {"P", "S0"} | TRAIN_KEYS for r in an.table)
    assert [r["test_error"] for r in an.table] == pytest.approx(mean)
    assert an.columns == ["P", "S0", "test_error", "test_error_std", "train_error", "loss_change", "params",
                          "connections", "n"]
    assert an.figures == {"figS5": "fig"}
    assert drawn == [([Panel("made-up: S = C fixed, 4 blocks", "patch size P", "test error (%)",
                             [Series("S-Mixer", Ps, pytest.approx(mean), pytest.approx(std))], xscale="log",
                             xticks=Ps)], "Fig. S.5: patch-size dependence")]
    (c,) = an.claims
    assert c.key == "intermediate-patch" and c.verdict == "HELD" and c.runs == runs[:-1]
    assert c.detail == ", ".join(f"P={P}: {m:.2f}%" for P, m in zip(Ps, mean))
    # the slope at the smallest P of each seed's parabola in log2(P), averaged
    x = [math.log2(P) for P in Ps]
    assert c.stats.extra["lo"] == 1.0 and c.stats.extra["hi"] == math.log2(28) and c.stats.unit == "points"
    assert c.stats.effect_name == "test error, slope at log2(P) = 1 (claim < 0)"
    fits = [np.polyfit(x, [_figS5_error(P, s) for P in Ps], 2) for s in SEEDS]
    assert c.stats.effect == pytest.approx(np.mean([2 * c2 * 1.0 + c1 for c2, c1, _ in fits]), abs=1e-9)


def test_figS5_needs_three_patch_sizes_for_a_claim():
    from mlplab.experiments.specs.patch_size import _analyse_figS5

    assert len(_analyse_figS5(_figS5_runs((2, 4, 7)), {"scale": {"dataset": "x"}}).claims) == 1
    assert _analyse_figS5(_figS5_runs((2, 4)), {"scale": {"dataset": "x"}}).claims == []


# ------------------------------------------------------------------------------- implicit-bias

WHAT = "min over problems of lhs − rhs"


def _problem(S: int, lam: float, seed: int, gap: float) -> RunRecord:
    return RunRecord("check", f"S={S},lam={lam},seed={seed}", Path("/nonexistent"), {"seed": seed}, results={
        "S": S, "C": S, "lam": lam, "seed": seed, "lhs": 1.0 + gap, "rhs_at_lhs_solution": 1.5, "rhs": 1.0,
        "rhs_lower_bound": 0.9, "holds": gap >= 0, "steps": 100})


def test_implicit_bias_analysis_rows_bars_and_its_bound(monkeypatch):
    from mlplab.experiments.specs import implicit_bias

    drawn = []
    monkeypatch.setattr(implicit_bias, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    problems = [_problem(3, 0.1, 0, 0.25), _problem(2, 0.1, 1, 0.5), _problem(2, 0.01, 0, -2.0**-34),
                _problem(2, 0.1, 0, 0.125)]
    other = RunRecord("other", "x", Path("/nonexistent"), {}, results={"S": 1})
    an = implicit_bias._analyse_implicit(problems + [other], {})
    order = [(2, 0.01, 0), (2, 0.1, 0), (2, 0.1, 1), (3, 0.1, 0)]
    gaps = {(2, 0.01, 0): -2.0**-34, (2, 0.1, 0): 0.125, (2, 0.1, 1): 0.5, (3, 0.1, 0): 0.25}
    assert an.table == [{"S": S, "C": S, "lam": lam, "seed": s, "lhs": 1.0 + gaps[S, lam, s],
                         "rhs_at_lhs_solution": 1.5, "rhs": 1.0, "rhs_lower_bound": 0.9,
                         "holds": gaps[S, lam, s] >= 0} for S, lam, s in order]
    assert an.columns is None and an.figures == {"implicit-bias": "fig"}
    ((bars,), title) = drawn[0]
    labels = ["S=2,λ=0.01,s0", "S=2,λ=0.1,s0", "S=2,λ=0.1,s1", "S=3,λ=0.1,s0"]
    assert title == "Prop. 3.3: implicit L1 regularisation"
    assert (bars.title, bars.ylabel) == ("left vs right side", "objective")
    assert bars.labels == [f"{x} lhs" for x in labels] + [f"{x} rhs" for x in labels]
    assert bars.values == [1.0 + gaps[k] for k in order] + [1.0] * 4
    assert bars.groups == ["lhs"] * 4 + ["rhs"] * 4
    (c,) = an.claims
    # the worst problem is 2^-34 ≈ 5.8e-11 below its bound: within the solvers' resolution, so it holds
    assert (c.key, c.verdict, c.stats.value) == ("l1-bound", "HELD", -2.0**-34)
    assert c.stats.statistic == f"{WHAT} = -5.82077e-11; needs {WHAT} ≥ 0 − 1e-10"
    assert c.stats.detail == "3/4 problems with lhs ≥ rhs"


# ------------------------------------------------------------------------------------ figS2-S3

S2_PAIRS = {2**16: ((64, 16), (64, 8), (64, 4)), 2**14: ((32, 16), (32, 8), (32, 4))}  # written widest first
S2_SLOPE = {2**14: -1.5, 2**16: 1.0}
S3_TOKENS = (64, 4, 32, 8, 16)  # S at m = 256 (C = 256/S), in no order
GAMMA = {4: 3.1, 8: 4.2, 16: 4.9, 32: 4.2, 64: 3.1}  # γ by S


def _s2_error(om: int, m: int, s: int) -> float:
    d = math.log2(m / (S2_PAIRS[om][-1][0] * 4))
    return 12 + S2_SLOPE[om] * d + 0.5 * s + TILT[s] * d


def _s3_error(S: int, s: int) -> float:
    x = math.log(S / (256 // S))
    return 12 + 0.5 * x * x + 0.3 * s + 0.05 * s * x


def _figS2_runs(expansion: bool = True) -> list[RunRecord]:
    runs = [rec("width", {"meta.omega": om, "meta.family": "mlp_mixer", "meta.S": S, "meta.C": C, "meta.m": S * C,
                          "run.seed": s}, _s2_error(om, S * C, s)) for om, pairs in S2_PAIRS.items()
            for S, C in pairs for s in SEEDS]
    if expansion:
        runs += [rec("expansion", {"meta.S": S, "meta.C": 256 // S, "meta.m": 256, "meta.omega": 2**14,
                                   "meta.family": "mlp_mixer", "meta.gamma": GAMMA[S], "run.seed": s},
                     _s3_error(S, s)) for S in S3_TOKENS for s in SEEDS]
    return runs + [rec("other", {"meta.omega": 2**14, "meta.m": 64, "meta.S": 8, "meta.C": 8, "run.seed": 0}, 70.0)]


def test_figS2_S3_analysis_tables_panels_and_claims(monkeypatch):
    from mlplab.experiments.claims import Check
    from mlplab.experiments.specs import figS2_S3
    from mlplab.experiments.specs.budget import SPANS_WINDOW

    drawn = []
    monkeypatch.setattr(figS2_S3, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = _figS2_runs()
    an = figS2_S3._analyse_figS2(runs, {"scale": {"dataset": "made-up"}})
    s2 = [(om, S, C) for om in sorted(S2_PAIRS) for S, C in reversed(S2_PAIRS[om])]  # by Ω, then m
    s3 = sorted(S3_TOKENS, reverse=True)  # by C
    s2_mean = {(om, S * C): np.mean([_s2_error(om, S * C, s) for s in SEEDS]) for om, S, C in s2}
    s2_std = {(om, S * C): np.std([_s2_error(om, S * C, s) for s in SEEDS], ddof=1) for om, S, C in s2}
    s3_mean = [np.mean([_s3_error(S, s) for s in SEEDS]) for S in s3]
    s3_std = [np.std([_s3_error(S, s) for s in SEEDS], ddof=1) for S in s3]
    assert [(r["omega"], r["S"], r["C"], r["m"], r.get("gamma")) for r in an.table] == \
        [(om, S, C, S * C, None) for om, S, C in s2] + [(2**14, S, 256 // S, 256, GAMMA[S]) for S in s3]
    by = {"omega", "family", "S", "C", "m", "p"}
    assert [set(r) for r in an.table] == [by | TRAIN_KEYS] * 6 + [by | {"gamma"} | TRAIN_KEYS] * 5
    assert [r["test_error"] for r in an.table] == pytest.approx([s2_mean[om, S * C] for om, S, C in s2] + s3_mean)
    assert an.columns == ["omega", "S", "C", "m", "gamma", "test_error", "test_error_std", "train_error",
                          "loss_change", "params", "connections", "n"]
    assert an.figures == {"figS2-S3": "fig"}
    width_series = [Series(f"Ω = 2^{14 if om == 2**14 else 16}", [S * C for S, C in reversed(S2_PAIRS[om])],
                           pytest.approx([s2_mean[om, S * C] for S, C in reversed(S2_PAIRS[om])]),
                           pytest.approx([s2_std[om, S * C] for S, C in reversed(S2_PAIRS[om])]))
                    for om in sorted(S2_PAIRS)]
    assert drawn == [([Panel("made-up: width sweep (Fig. S.2)", "width m = S·C", "test error (%)", width_series,
                             xscale="log"),
                       Panel("fixed m = 256 (Fig. S.3)", "expansion γ (C shown in table)", "test error (%)",
                             [Series("MLP-Mixer", [GAMMA[S] for S in s3], pytest.approx(s3_mean),
                                     pytest.approx(s3_std), style="o")])],
                      "Figs. S.2/S.3: MLP-Mixer width and expansion sweeps")]
    w14, w16, near = an.claims
    assert [c.claim.split(":")[0] for c in an.claims] == ["Ω = 2^14", "Ω = 2^16", "m = 256"]
    assert [(c.key, c.verdict) for c in an.claims] == [("width", "HELD"), ("width", "DID NOT HOLD"),
                                                       ("near-s-eq-c", "HELD")]
    for c, om in ((w14, 2**14), (w16, 2**16)):
        assert c.runs == [r for r in runs if r.sweep == "width" and r.get("meta.omega") == om]
        x = [math.log2(S * C) for S, C in reversed(S2_PAIRS[om])]
        ys = {s: [_s2_error(om, S * C, s) for S, C in reversed(S2_PAIRS[om])] for s in SEEDS}
        assert c.stats.effect == pytest.approx(np.mean(slopes_per_seed(x, ys)), abs=1e-9)
    assert near.runs == [r for r in runs if r.sweep == "expansion"]
    assert near.checks == [Check(SPANS_WINDOW, 1.0, True)]
    x = [math.log(S / (256 // S)) for S in s3]
    fits = [np.polyfit(x, [_s3_error(S, s) for S in s3], 2) for s in SEEDS]
    assert near.stats.effect == pytest.approx(np.mean([-2 * c2 * math.log(2) + c1 for c2, c1, _ in fits]), abs=1e-9)


def test_figS2_without_the_expansion_sweep_has_the_width_claims_only(monkeypatch):
    from mlplab.experiments.specs import figS2_S3

    drawn = []
    monkeypatch.setattr(figS2_S3, "draw", lambda panels, title: drawn.append(panels) or "fig")
    an = figS2_S3._analyse_figS2(_figS2_runs(expansion=False), {})
    assert [c.key for c in an.claims] == ["width", "width"]
    assert [p.title for p in drawn[0]] == ["?: width sweep (Fig. S.2)"]


# ---------------------------------------------------------------------------------------- fig6

# S = C, its neighbour (12, 24) within a factor e of it (not marked), twins (8, 32) / (32, 8)
FIG6 = {2**15: ("s_mixer", ((64, 4), (8, 32), (32, 8), (4, 64), (16, 16), (12, 24))),
        2**17: ("mlp_mixer", ((128, 2), (32, 8), (8, 32), (2, 128)))}  # twins nearest S = C, none equal


def _fig6_error(S: int, C: int, s: int) -> float:
    x = math.log(S / C)
    return 12 + 0.5 * x * x + 0.1 * x + 0.3 * s + 0.05 * s * x


def test_fig6_analysis_panels_mark_the_pairs_nearest_s_eq_c_and_decide_each_budget(monkeypatch):
    from mlplab.experiments.claims import Check
    from mlplab.experiments.specs import fig6
    from mlplab.experiments.specs.budget import SPANS_WINDOW

    drawn = []
    monkeypatch.setattr(fig6, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = [rec("pairs", {"meta.omega": om, "meta.family": fam, "meta.S": S, "meta.C": C, "meta.m": S * C,
                          "run.seed": s}, _fig6_error(S, C, s))
            for om, (fam, pairs) in FIG6.items() for S, C in pairs for s in SEEDS]
    runs.append(rec("other", {"meta.omega": 2**15, "meta.family": "s_mixer", "meta.S": 2, "meta.C": 128,
                              "meta.m": 256, "run.seed": 0}, 80.0))
    an = fig6._analyse_fig6(runs, {"scale": {"dataset": "made-up"}})
    by_c = {om: sorted(pairs, key=lambda p: p[1]) for om, (_, pairs) in FIG6.items()}
    mean = {(S, C): np.mean([_fig6_error(S, C, s) for s in SEEDS]) for _, pairs in FIG6.values() for S, C in pairs}
    std = {(S, C): np.std([_fig6_error(S, C, s) for s in SEEDS], ddof=1) for _, pairs in FIG6.values()
           for S, C in pairs}
    assert [(r["omega"], r["family"], r["S"], r["C"], r["m"]) for r in an.table] == \
        [(om, FIG6[om][0], S, C, S * C) for om in sorted(FIG6) for S, C in by_c[om]]
    assert all(set(r) == {"omega", "family", "S", "C", "m", "p"} | TRAIN_KEYS for r in an.table)
    assert an.columns == ["omega", "family", "S", "C", "m", "test_error", "test_error_std", "train_error",
                          "loss_change", "params", "connections", "n"]
    assert an.figures == {"fig6": "fig"}
    ((panels, title),) = drawn
    assert title == "Fig. 6: test error vs (S, C) at fixed Ω (circle: S ≈ C)"
    # S = C is C* = Ω^(1/3) = 32 for the S-Mixer, (Ω/γ)^(1/3) = 32 at γ = 4 for the MLP-Mixer
    marks = {2**15: [2], 2**17: [1, 2]}  # by C: (64, 4), (32, 8), (16, 16), (12, 24) …; (128, 2), (32, 8), (8, 32) …
    assert panels == [Panel(f"made-up, Ω = 2^{int(math.log2(om))}", "channels C", "test error (%)",
                            [Series({"s_mixer": "S-Mixer", "mlp_mixer": "MLP-Mixer"}[FIG6[om][0]],
                                    [C for _, C in by_c[om]], pytest.approx([mean[p] for p in by_c[om]]),
                                    pytest.approx([std[p] for p in by_c[om]]), mark=marks[om])],
                            xscale="log", vlines=[(pytest.approx(32.0), "S = C (C*)")]) for om in sorted(FIG6)]
    assert [c.claim.split(":")[0] for c in an.claims] == ["Ω = 2^15", "Ω = 2^17"]
    for c, om in zip(an.claims, sorted(FIG6)):
        assert c.key == "near-s-eq-c" and c.verdict == "HELD" and c.checks == [Check(SPANS_WINDOW, 1.0, True)]
        assert c.runs == [r for r in runs if r.sweep == "pairs" and r.get("meta.omega") == om]
        x = [math.log(S / C) for S, C in by_c[om]]
        fits = [np.polyfit(x, [_fig6_error(S, C, s) for S, C in by_c[om]], 2) for s in SEEDS]
        slope_lo = np.mean([-2 * c2 * math.log(2) + c1 for c2, c1, _ in fits])
        assert c.stats.effect == pytest.approx(slope_lo, abs=1e-9)


# ---------------------------------------------------------------------------------------- fig4

F4_MIXER = {(64, 64): 10.0, (32, 32): 14.0, (64, 32): 12.0}  # (S, C) → error, m = 1024 … 4096
F4_SW = {8232: 9.0, 1029: 13.0, 4116: 16.0, 2058: 14.0}  # m → error; 4116 is the nearest to the Mixer's 4096
SPEC_M = (4096, 256, 65536, 16384, 1024)  # λ_max widths, in no order
CG = 1 + math.sqrt(2.0)


def _f4_runs() -> list[RunRecord]:
    runs = []
    for s in SEEDS:
        for (S, C), e in F4_MIXER.items():
            runs.append(rec("train", {"meta.omega": 2**14, "meta.family": "mlp_mixer", "meta.S": S, "meta.C": C,
                                      "meta.m": S * C, "meta.p": 0.1, "run.seed": s},
                            e + 0.5 * s + TILT[s] * math.log2(S * C / 1024)))
        for m, e in F4_SW.items():
            runs.append(rec("train", {"meta.omega": 2**14, "meta.family": "sw_mlp", "meta.m": m, "meta.p": 0.1,
                                      "run.seed": s}, e + 0.5 * s))
    return runs


def _lam_sw(m: int, s: int) -> float:
    return 2 + 0.5 * math.log2(m / 256) + 0.1 * s + 0.05 * TILT[s] * math.log2(m)


def _lam_mx(m: int, s: int) -> float:
    return CG + 0.01 * (s + 1) * (1 if m > 1000 else -1)


def _has(s: int, m: int) -> bool:
    """Whether the spectra run of seed 10 + s has width m: seed 13 lacks 1024, only seed 10 has 65536."""
    return not (s == 3 and m == 1024) and (m != 65536 or s == 0)


def _spectra(seeds=(10, 11, 12, 13)) -> list[RunRecord]:
    """λ_max per seed (its widths: ``_has``); the run of seed 11 is there twice (counted once)."""
    out = []
    for s in seeds:
        ms = [m for m in SPEC_M if _has(s - 10, m)]
        out.append(RunRecord("spectra", f"seed={s}", Path("/nonexistent"), {"seed": s, "omega": 2**19}, results={
            "rows": [{"m": m, "S": m // 64, "C": 64, "p": 64 / m, "c_gamma": CG, "gamma": 2.0,
                      "sw_theory": 1.5 + m / 1e4, "lambda_sw": _lam_sw(m, s - 10), "lambda_mixer": _lam_mx(m, s - 10)}
                     for m in ms]}))
    return out + [out[1]]


def test_fig4_analysis_tables_panels_and_its_four_claims(monkeypatch):
    from mlplab.experiments.specs import fig4

    drawn = []
    monkeypatch.setattr(fig4, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    train, spectra = _f4_runs(), _spectra()
    empty = RunRecord("spectra", "x", Path("/nonexistent"), {}, results={})  # no rows and no seed: adds nothing
    an = fig4._analyse_fig4(train + spectra + [empty, rec("other", {"meta.family": "sw_mlp", "meta.m": 64}, 5.0)],
                            {"scale": {"dataset": "made-up"}})
    mixer = sorted(F4_MIXER, key=lambda p: p[0] * p[1])
    mx_err = {S * C: np.mean([r.get("test_acc") for r in train if r.get("meta.m") == S * C]) for S, C in mixer}
    assert [(r["family"], r["S"], r["C"], r["m"]) for r in an.table] == \
        [("mlp_mixer", S, C, S * C) for S, C in mixer] + [("sw_mlp", None, None, m) for m in sorted(F4_SW)]
    assert all(set(r) == {"omega", "family", "S", "C", "m", "p"} | TRAIN_KEYS for r in an.table)
    assert [r["test_error"] for r in an.table][:3] == pytest.approx([100 * (1 - mx_err[S * C]) for S, C in mixer])
    assert an.columns == ["family", "S", "C", "m", "p", "test_error", "test_error_std", "train_error",
                          "loss_change", "params", "connections", "n"]
    assert an.figures == {"fig4": "fig"}
    # λ_max per width over the five spectra runs (seed 11's twice)
    ms = sorted(SPEC_M)
    per = {m: [s - 10 for s in (10, 11, 12, 13, 11) if _has(s - 10, m)] for m in ms}
    srows = [{"m": m, "S": m // 64, "C": 64, "p": 64 / m, "c_gamma": CG,
              "lambda_mixer": pytest.approx(np.mean([_lam_mx(m, s) for s in per[m]])),
              "lambda_mixer_std": pytest.approx(np.std([_lam_mx(m, s) for s in per[m]])),
              "lambda_sw": pytest.approx(np.mean([_lam_sw(m, s) for s in per[m]])),
              "lambda_sw_std": pytest.approx(np.std([_lam_sw(m, s) for s in per[m]])),
              "sw_theory": 1.5 + m / 1e4, "seeds": len(per[m])} for m in ms]
    assert an.tables == {"spectra": srows}
    ((panels, title),) = drawn
    assert title == "Fig. 4: error and λ_max vs width at fixed Ω"
    err = {r["m"]: (r["test_error"], r["test_error_std"]) for r in an.table}
    ref = [(S * C) for S, C in mixer]
    assert panels[0] == Panel("made-up: test error", "width m = S·C", "test error (%)", [
        Series("MLP-Mixer", ref, [err[m][0] for m in ref], [err[m][1] for m in ref]),
        Series("SW-MLP", sorted(F4_SW), [err[m][0] for m in sorted(F4_SW)], [err[m][1] for m in sorted(F4_SW)])],
        xscale="log")
    assert panels[1] == Panel("λ_max at Ω = 2^19, γ = 2", "width m = S·C", "largest singular value", [
        Series("MLP-Mixer", ms, [r["lambda_mixer"] for r in srows], [r["lambda_mixer_std"] for r in srows]),
        Series("SW-MLP", ms, [r["lambda_sw"] for r in srows], [r["lambda_sw_std"] for r in srows]),
        Series("SW-MLP theory √L+", ms, [1.5 + m / 1e4 for m in ms], style="--")],
        xscale="log", hlines=[(CG, "c_γ = 1 + √γ = 2.414")])
    assert len(panels) == 2
    lam_sw, lam_mx, width, beats = an.claims
    assert [c.key for c in an.claims] == ["lambda-sw", "lambda-mixer", "mixer-width", "mixer-beats-sw"]
    # λ_sw: per seed (each once) the slope against log2(m) over the widths it has
    slopes = [np.polyfit([math.log2(m) for m in ms if _has(s, m)], [_lam_sw(m, s) for m in ms if _has(s, m)], 1)[0]
              for s in range(4)]
    assert (lam_sw.verdict, lam_sw.stats.n) == ("HELD", 4)
    assert lam_sw.stats.effect == pytest.approx(np.mean(slopes), abs=1e-9)
    assert lam_sw.stats.effect_name == "mean Δ λ_max per doubling"
    # λ_Mixer: per seed the mean |λ − c_γ| over its widths, 0.01·(s + 1), within 5 % of c_γ
    assert lam_mx.claim.startswith("c_γ = 2.414: ") and lam_mx.verdict == "HELD"
    assert lam_mx.stats.effect == pytest.approx(np.mean([0.01 * (s + 1) for s in range(4)]))
    assert lam_mx.stats.extra["margin"] == pytest.approx(0.05 * CG) and lam_mx.stats.n == 4
    assert lam_mx.stats.effect_name == f"mean mean over widths |λ_max(Mixer) − c_γ| (margin {0.05 * CG:g})"
    dev = max(abs(np.mean([_lam_mx(m, s) for s in per[m]]) - CG) for m in ms)
    assert lam_mx.detail == f"largest seed-mean departure {dev:.3f}"
    assert width.verdict == "HELD" and width.claim == fig4.MIXER_WIDTH.text
    assert width.runs == [r for r in train if r.get("meta.family") == "mlp_mixer"]
    # the largest Mixer (4096) against the SW-MLP nearest its width (4116, not the widest 8232)
    assert beats.claim.startswith("m = 4096: ") and beats.verdict == "HELD"
    assert beats.checks[0].value == 2.0 * 4096
    assert beats.stats.effect == pytest.approx(10.0 - 16.0) and beats.stats.effect_name == \
        "mean Mixer − SW-MLP test error"
    assert beats.stats.unit == "points"
    assert beats.runs == [r for r in train if r.get("meta.m") in (4096, 4116)]


def test_fig4_without_spectra_or_sw_mlps_decides_what_it_has(monkeypatch):
    from mlplab.experiments.specs import fig4

    drawn = []
    monkeypatch.setattr(fig4, "draw", lambda panels, title: drawn.append(panels) or "fig")
    mixers = [r for r in _f4_runs() if r.get("meta.family") == "mlp_mixer"]
    an = fig4._analyse_fig4(mixers, {})
    assert [c.key for c in an.claims] == ["mixer-width"] and an.tables == {"spectra": []}
    assert [p.title for p in drawn[0]] == ["?: test error"] and [s.label for s in drawn[0][0].series] == ["MLP-Mixer"]
    an = fig4._analyse_fig4(_spectra(), {})
    assert [c.key for c in an.claims] == ["lambda-sw", "lambda-mixer"] and an.table == []
    # one spectra run at one width: a panel and both claims (too few widths and seeds to decide)
    one = RunRecord("spectra", "seed=10", Path("/nonexistent"), {"seed": 10, "omega": 2**19}, results={"rows": [
        {"m": 256, "S": 4, "C": 64, "p": 0.25, "c_gamma": CG, "gamma": 2.0, "sw_theory": 1.5, "lambda_sw": 2.0,
         "lambda_mixer": CG}]})
    an = fig4._analyse_fig4([one], {})
    assert [(c.key, c.verdict) for c in an.claims] == [("lambda-sw", "UNDECIDED"), ("lambda-mixer", "UNDECIDED")]
    assert drawn[-1][1].title == "λ_max at Ω = 2^19, γ = 2" and drawn[-1][1].hlines == [(CG, "c_γ = 1 + √γ = 2.414")]


# --------------------------------------------------------------------------------------- figS1

S1_POINTS = {1 / 16: (392, 12.0), 1.0: (98, 16.0), 1 / 64: (784, 14.5), 0.25: (196, 16.5)}  # p → (m, error)
S1_SPEC = {1.5: (3.0, [0, 1]), 0.5: (2.0, []), 1.0: (2.5, [0.0, 0.5, 1.0])}  # a → (σ mean, histogram edges)


def _s1_sigma(a: float, t: int) -> float:
    return S1_SPEC[a][0] + 0.05 * t + 0.02 * TILT[t] * a


def _figS1_runs(points=S1_POINTS) -> list[RunRecord]:
    runs = [rec("train", {"meta.omega": 2**13, "meta.family": "sw_mlp", "meta.m": m, "meta.p": p, "run.seed": s},
                e + 0.5 * s + 0.1 * TILT[s] * m / 98) for p, (m, e) in points.items() for s in SEEDS]
    for a, (sigma, edges) in S1_SPEC.items():
        largest = [_s1_sigma(a, t) for t in range(3 if a == 1.0 else 4)]  # one trial short at a = 1
        runs.append(RunRecord("spectrum", f"a={a}", Path("/nonexistent"), {"a": a}, results={
            "a": a, "omega": 1000.0, "trials": len(largest), "largest": largest, "largest_mean": sigma,
            "largest_std": 0.1 * a, "edges": edges, "hist": [3] * max(len(edges) - 1, 0)}))
    runs.append(RunRecord("spectrum", "a=2", Path("/nonexistent"), {"a": 2.0}, results={  # no per-trial values
        "a": 2.0, "omega": 1000.0, "trials": 4, "largest_mean": 3.2, "largest_std": 0.2, "edges": [], "hist": []}))
    return runs


def test_figS1_analysis_panels_spectra_and_both_claims(monkeypatch):
    from mlplab.experiments.specs import figS1

    drawn = []
    monkeypatch.setattr(figS1, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = _figS1_runs()
    an = figS1._analyse_figS1(runs + [rec("other", {"meta.p": 0.5, "meta.m": 1}, 1.0)],
                              {"scale": {"dataset": "made-up"}})
    ps = sorted(S1_POINTS, reverse=True)  # densest first
    err = {p: [S1_POINTS[p][1] + 0.5 * s + 0.1 * TILT[s] * S1_POINTS[p][0] / 98 for s in SEEDS] for p in ps}
    assert [(r["omega"], r["m"], r["p"]) for r in an.table] == [(2**13, S1_POINTS[p][0], p) for p in ps]
    assert all(set(r) == {"omega", "family", "S", "C", "m", "p"} | TRAIN_KEYS for r in an.table)
    assert [r["test_error"] for r in an.table] == pytest.approx([np.mean(err[p]) for p in ps])
    assert an.columns == ["omega", "m", "p", "test_error", "test_error_std", "train_error", "loss_change", "params",
                          "connections", "n"]
    assert an.figures == {"figS1": "fig"}
    spec = sorted([r.results for r in runs if r.sweep == "spectrum"], key=lambda d: d["a"])
    assert an.tables == {"spectrum": [{k: v for k, v in d.items() if k not in ("hist", "edges")} for d in spec]}
    ((panels, title),) = drawn
    assert title == "Fig. S.1: SW-MLP trainability and spectra vs sparsity"
    assert panels[:2] == [
        Panel("made-up: SW-MLP at Ω = 2^13", "sparsity 1 − p", "test error (%)",
              [Series("SW-MLP", [1 - p for p in ps], pytest.approx([np.mean(err[p]) for p in ps]),
                      pytest.approx([np.std(err[p], ddof=1) for p in ps]))]),
        Panel("normalised spectrum: largest singular value", "a (m = Ω^((1+a)/2), p = Ω^-a)", "σ_max (normalised)",
              [Series("mean over trials", [0.5, 1.0, 1.5, 2.0], [2.0, 2.5, 3.0, 3.2],
                      [0.05, 0.1, pytest.approx(0.15), 0.2])])]
    # a histogram panel for each spectrum with edges (a = 1 and 1.5; a = 0.5 has none), at the bins' centres
    assert [(p.title, p.xlabel, p.ylabel) for p in panels[2:]] == [("spectrum, a = 1, Ω = 1000", "singular value",
                                                                    "count"),
                                                                   ("spectrum, a = 1.5, Ω = 1000", "singular value",
                                                                    "count")]
    for p, centres, n in zip(panels[2:], ([0.25, 0.75], [0.5]), (3, 4)):
        (s,) = p.series
        assert (s.label, s.style, list(s.y)) == (f"{n} trials", "-", [3] * len(centres))
        np.testing.assert_array_equal(s.x, centres)
    spectrum, sparse = an.claims
    # σ_max: per trial with ≥ 3 values (trial 3 lacks a = 1), the slope against a (not log a)
    slopes = [np.polyfit([0.5, 1.0, 1.5], [_s1_sigma(a, t) for a in (0.5, 1.0, 1.5)], 1)[0] for t in range(3)]
    assert (spectrum.key, spectrum.verdict, spectrum.stats.n, spectrum.stats.n_of) == ("spectrum", "HELD", 3, "trial")
    assert spectrum.stats.effect == pytest.approx(np.mean(slopes), abs=1e-9)
    assert spectrum.stats.effect_name == "mean Δ σ_max per unit of a"
    assert spectrum.detail == "a=0.5: 2.00, a=1: 2.50, a=1.5: 3.00, a=2: 3.20"
    # the sparsest (p = 1/64) against the next denser (1/16) only: 12 − 14.5 per seed, plus the tilt
    assert (sparse.key, sparse.verdict) == ("sparse-worse", "HELD")
    assert sparse.stats.effect == pytest.approx(np.mean(err[1 / 16]) - np.mean(err[1 / 64]))
    assert sparse.stats.effect_name == "mean next denser − sparsest SW-MLP test error" and sparse.stats.unit == "points"
    assert sparse.runs == ([r for r in runs if r.get("meta.p") == 1 / 64]
                           + [r for r in runs if r.get("meta.p") == 1 / 16])
    assert sparse.detail == (f"sparsest 1−p=0.984: {np.mean(err[1 / 64]):.2f}%; "
                             f"next denser 1−p=0.938: {np.mean(err[1 / 16]):.2f}%")


def test_figS1_needs_two_densities_for_its_trained_claim(monkeypatch):
    from mlplab.experiments.specs import figS1

    drawn = []
    monkeypatch.setattr(figS1, "draw", lambda panels, title: drawn.append(panels) or "fig")
    two = {p: S1_POINTS[p] for p in (1.0, 0.25)}
    train = [r for r in _figS1_runs(two) if r.sweep == "train"]
    assert [c.key for c in figS1._analyse_figS1(train, {}).claims] == ["sparse-worse"]
    one = [r for r in train if r.get("meta.p") == 1.0]
    assert figS1._analyse_figS1(one, {}).claims == []
    assert figS1._analyse_figS1([], {}).claims == []
    assert [p.title for p in drawn[-1]] == ["?: SW-MLP at Ω = ?"]


# ------------------------------------------------------------------------------------- fig2a-c

# S → n → CKA; at S = 32 no p = 1/C run (so no "match"), only two densities (so no "peak")
CKA = {16: {0: 0.5, 2: 0.7, 4: 0.8, 8: 0.4}, 4: {2: 0.6, 0: 0.7, 1: 0.75}, 8: {3: 0.9, 0: 0.6}, 32: {0: 0.5, 1: 0.6}}


def _cka_value(S: int, n: int, s: int) -> float:
    return CKA[S][n] + 0.01 * s + 0.005 * TILT[s] * n


def _cka_runs() -> list[RunRecord]:
    runs = [RunRecord("cka", f"S={S},n={n},seed={s}", Path("/nonexistent"),  # S = 8's seed 0 has no seed key
                      {"meta.S": S, "meta.n": n, "meta.p": 2.0 ** -n, **({"seed": s} if (S, s) != (8, 0) else {})},
                      results={"diagonal_mean": _cka_value(S, n, s), "matrix": [[S, n], [s, 0]],
                               "layers_a": [f"a{s}"], "layers_b": [f"b{n}"]})
            for S in CKA for n in CKA[S] for s in SEEDS]
    runs += [rec("train", {"meta.family": f, "meta.S": S, "meta.p": p, "run.seed": s}, 10.0 + S + s)
             for S in (4, 8, 16, 32) for f, p in (("mlp_mixer", 1.0), ("sw_mlp", 1 / S)) for s in SEEDS]
    return runs


def test_fig2abc_analysis_curves_heatmaps_and_claims_per_size(monkeypatch):
    from mlplab.experiments.plots import Heatmap
    from mlplab.experiments.specs import cka

    drawn = []
    monkeypatch.setattr(cka, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = _cka_runs()
    an = cka._analyse_fig2(runs + [RunRecord("cka", "x", Path("/nonexistent"), {"meta.S": 16, "meta.n": 4})],
                           {})  # an unfinished CKA run: no value
    order = [(S, n) for S in sorted(CKA) for n in sorted(CKA[S])]
    mean = {k: np.mean([_cka_value(*k, s) for s in SEEDS]) for k in order}
    std = {k: np.std([_cka_value(*k, s) for s in SEEDS], ddof=1) for k in order}
    assert [(r["S=C"], r["log2(1/p)"], r["p"], r["n"]) for r in an.table] == [(S, n, 2.0 ** -n, 4) for S, n in order]
    assert [r["cka_diag"] for r in an.table] == pytest.approx([mean[k] for k in order])
    assert an.columns == ["S=C", "log2(1/p)", "p", "cka_diag", "cka_diag_std", "n"]
    assert [(r["family"], r["S"], r["p"], pytest.approx(r["test_error"])) for r in an.tables["test_error"]] == \
        [(f, S, p, 10.0 + S + 1.5) for S in (4, 8, 16, 32) for f, p in (("mlp_mixer", 1.0), ("sw_mlp", 1 / S))]
    assert all(set(r) == {"family", "S", "p"} | TRAIN_KEYS for r in an.tables["test_error"])
    assert all(set(r) == {"S=C", "p", "log2(1/p)", "cka_diag", "cka_diag_std", "n"} for r in an.table)
    assert an.figures == {"fig2a-c": "fig"}
    ((panels, title),) = drawn
    assert title == "Fig. 2a-c: CKA between a Mixer and SW-MLPs over sparsity"
    assert panels[0] == Panel("average diagonal CKA (Fig. 2b)", "SW-MLP density p", "mean diagonal CKA", [
        Series(f"Mixer S = C = {S}", [2.0 ** -n for n in sorted(CKA[S])], pytest.approx([mean[S, n] for n in
                                                                                         sorted(CKA[S])]),
               pytest.approx([std[S, n] for n in sorted(CKA[S])])) for S in sorted(CKA)], xscale="log")
    # the CKA matrices of the first seed's run at p = 1/C and p = 1, where there is one (none at p = 1/8 for S = 8)
    heat = [(S, lab, n) for S in sorted(CKA) for lab, n in (("p = 1/C", int(math.log2(S))), ("p = 1 (dense)", 0))
            if n in CKA[S]]
    assert panels[1:] == [Heatmap(f"S=C={S}: Mixer vs SW-MLP {lab}", [[S, n], [0, 0]], xlabels=[f"b{n}"],
                                  ylabels=["a0"], xlabel="SW-MLP layer", ylabel="Mixer layer") for S, lab, n in heat]
    assert [(c.key, c.claim.split(":")[0]) for c in an.claims] == [
        ("peak", "S = C = 4"), ("match", "S = C = 4"), ("match", "S = C = 8"), ("peak", "S = C = 16"),
        ("match", "S = C = 16")]
    for c in an.claims:
        S = int(c.claim.split(":")[0].rsplit(" ", 1)[1])
        assert c.runs == [r for r in runs if r.sweep == "train" and r.get("meta.S") == S]
        assert c.stats.unit == "CKA"
        if c.key == "match":  # CKA(p = 1) − CKA(p = 1/C), per seed
            n = int(math.log2(S))
            assert c.stats.effect == pytest.approx(mean[S, 0] - mean[S, n])
            assert c.stats.effect_name == "mean CKA(p = 1) − CKA(p = 1/C)"
        else:  # the slope at the densest n (0) of each seed's parabola in n, a maximum inside when > 0
            ns = sorted(CKA[S])
            fits = [np.polyfit(ns, [_cka_value(S, n, s) for n in ns], 2) for s in SEEDS]
            assert c.stats.effect == pytest.approx(np.mean([c1 for _, c1, _ in fits]), abs=1e-9)
            assert c.stats.effect_name == "mean diagonal CKA, slope at log2(1/p) = 0 (claim > 0)"
            assert c.detail == ", ".join(f"p={2.0 ** -n:.3g}: {mean[S, n]:.3f}" for n in ns)
    assert [c.verdict for c in an.claims] == ["HELD", "DID NOT HOLD", "HELD", "HELD", "HELD"]


# ------------------------------------------------------------------------- fig7, figS4, figS6-S8

F7_DEPTHS = (8, 2, 4)  # in no order
F7_GAP = {2: 3.0, 4: 2.0, 8: 1.0}  # RP − normal test error at each depth


def _f7_normal(L: int, s: int) -> float:
    return 10 + 0.5 * s - math.log2(L)


def _f7_rp(L: int, s: int) -> float:
    return _f7_normal(L, s) + F7_GAP[L] + TILT[s] * math.log2(L)


def _fig7_runs() -> list[RunRecord]:
    runs = []
    for s in SEEDS:
        for L in F7_DEPTHS:
            runs.append(rec("depth", {"model.name": "s_mixer", "model.kwargs.depth": L, "run.seed": s},
                            _f7_normal(L, s)))
            if not (s == 3 and L == 8):  # seed 3's deepest RP run is missing
                runs.append(rec("depth", {"model.name": "rp_s_mixer", "model.kwargs.depth": L, "run.seed": s},
                                _f7_rp(L, s)))
    return runs


def test_fig7_analysis_gaps_panel_and_the_catch_up_claim(monkeypatch):
    from mlplab.experiments.claims import Check
    from mlplab.experiments.specs import rp

    drawn = []
    monkeypatch.setattr(rp, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = _fig7_runs()
    an = rp._analyse_fig7(runs + [rec("other", {"model.name": "s_mixer", "model.kwargs.depth": 16}, 1.0)],
                          {"scale": {"dataset": "made-up"}})
    Ls = sorted(F7_DEPTHS)
    seeds_of = {("s_mixer", L): list(SEEDS) for L in Ls} | {("rp_s_mixer", L): [s for s in SEEDS if (s, L) != (3, 8)]
                                                          for L in Ls}
    err = {("s_mixer", L): [_f7_normal(L, s) for s in SEEDS] for L in Ls} | {
        ("rp_s_mixer", L): [_f7_rp(L, s) for s in seeds_of["rp_s_mixer", L]] for L in Ls}
    gaps = {L: [_f7_rp(L, s) - _f7_normal(L, s) for s in seeds_of["rp_s_mixer", L]] for L in Ls}
    order = [(f, L) for f in ("rp_s_mixer", "s_mixer") for L in Ls]
    assert [(r["family"], r["depth"]) for r in an.table] == order + [("gap RP − normal", L) for L in Ls]
    assert [r["test_error"] for r in an.table] == pytest.approx([np.mean(err[k]) for k in order]
                                                                + [np.mean(gaps[L]) for L in Ls])
    assert all(set(r) == {"family", "depth"} | TRAIN_KEYS for r in an.table[:6])
    assert an.columns == ["family", "depth", "test_error", "test_error_std", "train_error", "loss_change", "params",
                          "connections", "n"]
    assert an.figures == {"fig7": "fig"}
    assert drawn == [([Panel("made-up: S-Mixer vs RP S-Mixer", "depth L", "test error (%)", [
        Series(lab, Ls, pytest.approx([np.mean(err[f, L]) for L in Ls]),
               pytest.approx([np.std(err[f, L], ddof=1) for L in Ls]))
        for f, lab in (("s_mixer", "S-Mixer"), ("rp_s_mixer", "RP S-Mixer"))], xticks=Ls)],
        "Fig. 7: RP vs normal over depth")]
    (c,) = an.claims
    assert (c.key, c.verdict, c.runs) == ("catch-up", "HELD", runs)
    assert c.checks == [Check(rp.CATCH_UP.needs[0], 1.0, True)]
    assert c.detail == "mean gaps " + "; ".join(f"L={L}: {np.mean(gaps[L]):+.2f}" for L in Ls)
    # per seed with all three depths, the slope of its gap against log2(L)
    slopes = [np.polyfit([1, 2, 3], [_f7_rp(L, s) - _f7_normal(L, s) for L in Ls], 1)[0] for s in (0, 1, 2)]
    assert c.stats.effect == pytest.approx(np.mean(slopes), abs=1e-9) and c.stats.n == 3
    assert (c.stats.effect_name, c.stats.unit) == ("mean Δ gap per doubling", "points")


def test_fig7_without_runs_or_a_shallow_gap_is_not_testable(monkeypatch):
    from mlplab.experiments.specs import rp

    monkeypatch.setattr(rp, "draw", lambda panels, title: "fig")
    (c,) = rp._analyse_fig7([], {"scale": {"dataset": "x"}}).claims
    assert c.verdict == "NOT TESTABLE" and c.checks[0].value == 0.0 and c.detail == "mean gaps "
    same = [r for r in _fig7_runs() if r.get("model.kwargs.depth") != 2]  # no gap at the shallowest (L = 4) …
    flat = [rec("depth", {"model.name": "rp_s_mixer", "model.kwargs.depth": 2, "run.seed": s}, _f7_normal(2, s))
            for s in SEEDS] + [rec("depth", {"model.name": "s_mixer", "model.kwargs.depth": 2, "run.seed": s},
                                   _f7_normal(2, s) + 0.1 * TILT[s]) for s in SEEDS]  # … once L = 2 is level
    (c,) = rp._analyse_fig7(same + flat, {"scale": {"dataset": "x"}}).claims
    assert c.checks[0].value == 0.0 and c.verdict == "NOT TESTABLE"


def test_rp_labels():
    assert [rp_label(v) for v in (None, "none", "all", [0], [1, 3])] == [
        "none (S-Mixer)", "none (S-Mixer)", "all (RP S-Mixer)", "block 0", "block 1,3"]


def rp_label(v):
    from mlplab.experiments.specs.rp import _rp_label

    return _rp_label(v)


S4 = {"none": 10.0, (0,): 14.0, (1,): 11.0, (2,): 11.5, (3,): 11.0, "all": 18.0}  # rp_blocks → error


def _figS4_runs(blocks=S4) -> list[RunRecord]:
    runs = []
    for b, e in blocks.items():
        for s in SEEDS:
            o = {"run.seed": s} if b == "none" else {"model.kwargs.rp_blocks": list(b) if isinstance(b, tuple) else b,
                                                     "run.seed": s}
            runs.append(RunRecord("blocks", f"b={b},s={s}", Path("/nonexistent"), o,
                                  results={"test_acc": 1 - (e + 0.5 * s + 0.2 * TILT[s]) / 100}))
    return runs


def test_figS4_analysis_bars_and_the_first_block_claim(monkeypatch):
    from mlplab.experiments.specs import rp

    drawn = []
    monkeypatch.setattr(rp, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = _figS4_runs()
    an = rp._analyse_figS4(runs + [rec("other", {"model.kwargs.rp_blocks": [0]}, 50.0)],
                           {"scale": {"dataset": "made-up"}})
    labels = ["none (S-Mixer)", "block 0", "block 1", "block 2", "block 3", "all (RP S-Mixer)"]
    err = {lab: [e + 0.5 * s + 0.2 * TILT[s] for s in SEEDS] for lab, e in zip(labels, S4.values())}
    assert [r["rp_blocks"] for r in an.table] == labels
    assert [r["test_error"] for r in an.table] == pytest.approx([np.mean(err[k]) for k in labels])
    assert all(set(r) == {"rp_blocks"} | TRAIN_KEYS for r in an.table)
    assert an.columns == ["rp_blocks", "test_error", "test_error_std", "train_error", "loss_change", "params",
                          "connections", "n"]
    assert an.figures == {"figS4": "fig"}
    ((bars,), title) = drawn[0]
    assert title == "Fig. S.4: replacing one block with an RP block"
    assert (bars.title, bars.ylabel) == ("made-up: 4-block S-Mixer, one block RP", "test error (%)")
    assert bars.labels == labels
    assert bars.values == pytest.approx([np.mean(err[k]) for k in labels])
    assert bars.errors == pytest.approx([np.std(err[k], ddof=1) for k in labels])
    (c,) = an.claims
    assert (c.key, c.verdict) == ("first-block", "HELD")
    assert (c.stats.effect_name, c.stats.unit) == ("margin of block 0, vs block 1", "points")
    assert c.runs == [r for r in runs if r.get("model.kwargs.rp_blocks") in ([0], [1], [2], [3])]
    assert c.detail == ", ".join(f"{k}: {np.mean(err[k]):.2f}%" for k in labels)


@pytest.mark.parametrize("blocks, claims", [(("none", (0,), (1,)), 1), (("none", (0,), "all"), 0),
                                            (("none", (1,), (2,)), 0)])
def test_figS4_needs_block_0_and_another_single_block(blocks, claims):
    from mlplab.experiments.specs.rp import _analyse_figS4

    assert len(_analyse_figS4(_figS4_runs({b: S4[b] for b in blocks}), {"scale": {"dataset": "x"}}).claims) == claims


def _s6_run(part: str, rp_: bool, s: int, gap: float, history: bool = True) -> RunRecord:
    hist = [{"train_loss": 1.0 - 0.1 * e, "test_loss": 1.0 - 0.1 * e + gap * e / 2 + 0.01 * s} for e in range(3)]
    return RunRecord(part, f"rp={rp_},s={s}", Path("/nonexistent"), {"meta.rp": rp_, "run.seed": s}, results={
        "test_acc": 0.9 - 0.01 * s - (0.02 if rp_ else 0.0), "train_loss": 0.8, "test_loss": 0.8 + gap + 0.01 * s,
        **({"history": hist[: 3 - (s == 1 and rp_)]} if history else {})})


def test_figS6_S8_analysis_curves_gaps_and_the_overfitting_claims(monkeypatch):
    from mlplab.experiments.claims import Check
    from mlplab.experiments.specs import rp

    drawn = []
    monkeypatch.setattr(rp, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    # S6: the normal Mixer overfits (gap 0.6), RP less (0.2); S7 absent; S8: normal runs only, no history
    s6 = [_s6_run("S6", r, s, g + 0.02 * TILT[s]) for s in SEEDS for r, g in ((False, 0.6), (True, 0.2))]
    s8 = [_s6_run("S8", False, s, 0.05, history=False) for s in SEEDS]
    an = rp._analyse_figS6(s6 + s8 + [RunRecord("S7", "x", Path("/nonexistent"), {})], {})
    gap = {(p, r): [0.8 + g + 0.02 * TILT[s] * (p == "S6") + 0.01 * s - 0.8 for s in SEEDS]
           for p, r, g in (("S6", "normal", 0.6), ("S6", "RP", 0.2), ("S8", "normal", 0.05))}
    acc = {(p, r): [100 * (1 - (0.9 - 0.01 * s - (0.02 if r == "RP" else 0.0))) for s in SEEDS]
           for p, r in gap}
    assert [(r["part"], r["setting"], r["model"], r["n"]) for r in an.table] == [
        ("S6", rp._S678["S6"], "normal", 4), ("S6", rp._S678["S6"], "RP", 4), ("S8", rp._S678["S8"], "normal", 4)]
    for r in an.table:
        k = (r["part"], r["model"])
        assert (r["gap"], r["test_error"]) == (pytest.approx(np.mean(gap[k])), pytest.approx(np.mean(acc[k])))
        assert (r["gap_std"], r["test_error_std"]) == (pytest.approx(np.std(gap[k], ddof=1)),
                                                       pytest.approx(np.std(acc[k], ddof=1)))
    assert an.columns == ["part", "setting", "model", "test_error", "test_error_std", "gap", "gap_std", "n"]
    assert an.figures == {"figS6-S8": "fig"}
    ((panels, title),) = drawn
    assert title == "Figs. S.6–S.8: RP Mixers overfit less"
    # the curves: the mean over runs of each epoch the runs all have (seed 1's RP run has 2 epochs)
    curve = {(r, k): [np.mean([h[k] for h in hs]) for hs in zip(*[run.results["history"] for run in s6
                                                                   if run.overrides["meta.rp"] == (r == "RP")])]
             for r in ("normal", "RP") for k in ("test_loss", "train_loss")}
    assert panels == [
        Panel("Fig. S.6: " + rp._S678["S6"], "epoch", "loss", [
            Series(f"{r}: {k.replace('_', ' ')}", list(range(1, len(curve[r, k]) + 1)), pytest.approx(curve[r, k]),
                   style=st) for r in ("normal", "RP") for k, st in (("test_loss", "-"), ("train_loss", "--"))]),
        Panel("Fig. S.8: " + rp._S678["S8"], "epoch", "loss", [])]
    c6, c8 = an.claims
    assert c6.claim.startswith(f"S6 ({rp._S678['S6']}): ") and c6.runs == s6 and c6.verdict == "HELD"
    assert c6.checks == [Check(rp.LESS_OVERFIT.needs[0], pytest.approx(np.mean(gap["S6", "normal"])), True)]
    assert c6.stats.effect == pytest.approx(np.mean(gap["S6", "RP"]) - np.mean(gap["S6", "normal"]))
    assert (c6.stats.effect_name, c6.stats.unit) == ("mean RP − normal generalisation gap", "nats")
    # S8: the normal Mixer's gap 0.05 + 0.015 < 0.1: nothing to reduce (and no RP runs to compare)
    assert c8.runs == s8 and c8.verdict == "NOT TESTABLE" and c8.checks[0].met is False


# -------------------------------------------------------------------------------------- table1

T1 = {  # label → (P, S, C, {lr: error}); each model's best lr is another one
    "Mixer-SS/7 narrow": (7, 16, 128, {0.04: 16.0, 0.05: 14.0}),
    "Mixer-SS-W wide": (4, 64, 43, {0.04: 12.0, 0.05: 13.0}),
    "Mixer-B/16": (16, 196, 8, {0.04: 20.0, 0.05: 20.0}),  # a tie: the first lr seen stays the best
}


def _t1_error(lab: str, lr: float, s: int) -> float:
    return T1[lab][3][lr] + 0.5 * s + (TILT[s] if lab.endswith("wide") else 0.0)


def _table1_runs() -> list[RunRecord]:
    return [rec("models", {"meta.label": lab, "meta.P": P, "meta.S": S, "meta.C": C, "optim.lr": lr, "run.seed": s},
                _t1_error(lab, lr, s)) for lab, (P, S, C, errs) in T1.items() for lr in errs for s in SEEDS]


@pytest.mark.parametrize("id", ["table1", "table1-imagenet"])
def test_table1_analysis_best_lrs_published_rows_and_the_claim(monkeypatch, id):
    from mlplab.experiments.specs import table1

    drawn = []
    monkeypatch.setattr(table1, "draw", lambda panels, title: drawn.append((panels, title)) or "fig")
    runs = _table1_runs()
    an = table1._analyse_table1(runs + [rec("other", {"meta.label": "Mixer-SS-W wide", "optim.lr": 0.04}, 1.0)],
                                {"experiment": id, "scale": {"dataset": "made-up"}})
    mean = {(lab, lr): np.mean([_t1_error(lab, lr, s) for s in SEEDS]) for lab in T1 for lr in T1[lab][3]}
    std = {(lab, lr): np.std([_t1_error(lab, lr, s) for s in SEEDS], ddof=1) for lab in T1 for lr in T1[lab][3]}
    order = [(lab, lr) for lab in T1 for lr in T1[lab][3]]
    assert [(r["model"], r["P"], r["S"], r["C"], r["lr"]) for r in an.table] == [
        (lab, *T1[lab][:3], lr) for lab, lr in order]
    assert [r["test_error"] for r in an.table] == pytest.approx([mean[k] for k in order])
    assert all(set(r) == {"model", "S", "C", "P", "lr"} | TRAIN_KEYS for r in an.table)
    assert an.columns == ["model", "P", "S", "C", "lr", "test_error", "test_error_std", "train_error", "loss_change",
                          "params", "connections", "n"]
    assert an.figures == {"table1": "fig"}
    assert drawn == [([Panel("made-up: test error per lr", "lr", "test error (%)", [
        Series(lab, [0.04, 0.05], pytest.approx([mean[lab, lr] for lr in (0.04, 0.05)]),
               pytest.approx([std[lab, lr] for lr in (0.04, 0.05)])) for lab in T1], xscale="log")],
        "Table 1: wide vs narrow MLP-Mixer at equal connections")]
    best = {"Mixer-SS/7 narrow": 0.05, "Mixer-SS-W wide": 0.04, "Mixer-B/16": 0.04}
    ours = {lab: f"{mean[lab, lr]:.2f} ± {std[lab, lr]:.2f} (lr {lr:g}, n=4)" for lab, lr in best.items()}
    assert an.published == [{**row, "ours (made-up)": o} for row, o in zip(
        table1.TABLE1_PUBLISHED, ["", ours["Mixer-SS/7 narrow"], ours["Mixer-SS-W wide"], ours["Mixer-B/16"], ""])]
    (c,) = an.claims
    assert (c.key, c.verdict, c.runs) == ("wider-beats-narrower", "HELD", runs)
    assert c.effect == (table1.WIDER_IN if id == "table1-imagenet" else table1.WIDER).effect
    # the wide model at its best lr (0.04) against the narrow one at its best (0.05), per seed
    assert c.stats.effect == pytest.approx(mean["Mixer-SS-W wide", 0.04] - mean["Mixer-SS/7 narrow", 0.05])
    assert (c.stats.effect_name, c.stats.unit) == ("mean wide − narrow test error", "points")
    assert c.detail == (f"wide {mean['Mixer-SS-W wide', 0.04]:.2f}% (S=64, C=43) vs "
                        f"narrow {mean['Mixer-SS/7 narrow', 0.05]:.2f}% (S=16, C=128)")


def test_table1_without_both_models_has_no_claim(monkeypatch):
    from mlplab.experiments.specs import table1

    monkeypatch.setattr(table1, "draw", lambda panels, title: "fig")
    for lab in ("Mixer-SS/7 narrow", "Mixer-SS-W wide"):
        only = [r for r in _table1_runs() if r.get("meta.label") == lab]
        assert table1._analyse_table1(only, {}).claims == []


def test_figS3_with_one_finished_expansion_run_is_not_testable(monkeypatch):
    """A single S.3 point (the others not yet run): its panel and claim are named by its m, and
    one S/C reaches past neither bound."""
    from mlplab.experiments.specs import figS2_S3

    drawn = []
    monkeypatch.setattr(figS2_S3, "draw", lambda panels, title: drawn.append(panels) or "fig")
    one = [r for r in _figS2_runs() if r.sweep != "expansion" or (r.get("meta.S"), r.get("run.seed")) == (16, 0)]
    an = figS2_S3._analyse_figS2(one, {})
    assert [p.title for p in drawn[0]] == ["?: width sweep (Fig. S.2)", "fixed m = 256 (Fig. S.3)"]
    near = an.claims[-1]
    assert near.claim.startswith("m = 256: ") and near.verdict == "NOT TESTABLE"


def test_fig7_a_depth_with_one_model_only_has_no_gap_there(monkeypatch):
    """The shallowest depth (1) with only the normal S-Mixer: no gap there and so no premise
    (NOT TESTABLE); the deepest (16) with only the RP one: no gap there either. And the other
    way round at the shallowest: still no premise."""
    from mlplab.experiments.specs import rp

    monkeypatch.setattr(rp, "draw", lambda panels, title: "fig")
    normal_1 = [rec("depth", {"model.name": "s_mixer", "model.kwargs.depth": 1, "run.seed": s}, 12.0) for s in SEEDS]
    rp_16 = [rec("depth", {"model.name": "rp_s_mixer", "model.kwargs.depth": 16, "run.seed": s}, 5.0) for s in SEEDS]
    (c,) = rp._analyse_fig7(_fig7_runs() + normal_1 + rp_16, {"scale": {"dataset": "x"}}).claims
    gaps = {L: np.mean([_f7_rp(L, s) - _f7_normal(L, s) for s in SEEDS if (s, L) != (3, 8)]) for L in (2, 4, 8)}
    assert c.detail == "mean gaps L=1: +nan; " + "; ".join(f"L={L}: {gaps[L]:+.2f}" for L in (2, 4, 8)) + "; L=16: +nan"
    assert c.checks[0].value == 0.0 and c.verdict == "NOT TESTABLE"
    rp_1 = [rec("depth", {"model.name": "rp_s_mixer", "model.kwargs.depth": 1, "run.seed": s}, 20.0) for s in SEEDS]
    (c,) = rp._analyse_fig7(_fig7_runs() + rp_1, {"scale": {"dataset": "x"}}).claims
    assert c.checks[0].value == 0.0 and c.verdict == "NOT TESTABLE"


def test_figS6_S8_a_part_with_rp_runs_only_and_a_run_without_losses(monkeypatch):
    """S7 with RP runs only (one of them without its final losses): its row, its curves and an
    UNDECIDED claim (nothing to compare with, the premise unmeasured)."""
    from mlplab.experiments.specs import rp

    drawn = []
    monkeypatch.setattr(rp, "draw", lambda panels, title: drawn.append(panels) or "fig")
    s7 = [_s6_run("S7", True, s, 0.3) for s in SEEDS]
    del s7[0].results["test_loss"], s7[1].results["train_loss"]
    an = rp._analyse_figS6(s7, {})
    gaps = [0.8 + 0.3 + 0.01 * s - 0.8 for s in (2, 3)]  # seeds 0 and 1 lack a loss: no gap
    ((part, model, n),) = [(r["part"], r["model"], r["n"]) for r in an.table]
    assert (part, model, n) == ("S7", "RP", 2) and an.table[0]["gap"] == pytest.approx(np.mean(gaps))
    assert [sr.label for sr in drawn[0][0].series] == ["RP: test loss", "RP: train loss"]
    (c,) = an.claims
    assert c.verdict == "UNDECIDED" and c.checks[0].value is None
