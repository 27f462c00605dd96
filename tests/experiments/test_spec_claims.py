"""Every claim of every spec on synthetic result tables with known answers: the claim true (HELD),
false (DID NOT HOLD), flat (UNDECIDED) and, where it declares a precondition (``claims.Need``),
the precondition violated (NOT TESTABLE, never DID NOT HOLD) — so a reversed comparison, a flipped
sign or a wrong group fails a test. Each table is built so that the intended groups give one
verdict and the likely wrong ones another. The specs without a test file of their own are here;
the others' cases live beside their plans (``COVERAGE`` names every test), and the last test
checks that every declared claim of every registered id has all its cases."""
import ast
import math
from pathlib import Path

import pytest

from mlplab.experiments import get_experiment, list_experiments, report_experiment
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.claims import PLATEAU_MAX
from mlplab.experiments.specs.cka import _analyse_fig2
from mlplab.experiments.specs.fig4 import LAMBDA_MARGIN, _analyse_fig4
from mlplab.experiments.specs.fig5 import _analyse_fig5
from mlplab.experiments.specs.figS1 import _analyse_figS1
from mlplab.experiments.specs.figS2_S3 import _analyse_figS2
from mlplab.experiments.specs.pictures import _analyse_figS9
from mlplab.experiments.specs.rp import _analyse_fig7, _analyse_figS4
from mlplab.experiments.specs.table1 import WIDER, WIDER_IN

MANIFEST = {"scale": {"scale": "cpu", "dataset": "made-up"}}
SEEDS = (0, 1, 2, 3)
# A per-seed tilt over a table's points (added as TILT[s] × the point's index): the seeds'
# slopes and differences spread, and their mean over the seeds is exactly the table's, so a
# flat table is flat on average and a decisive one decides with room to spare.
TILT = (0.3, -0.3, 0.1, -0.1)
PLATEAUED = [{"train_loss": 0.40}, {"train_loss": 0.396}, {"train_loss": 0.394}]  # < 1% per epoch


def at(s: int, i: int, value: float, scale: float = 1.0) -> float:
    """``value`` at the point of index ``i`` for seed ``s``: a seed offset shared by every point
    (which paired tests see through) and the seed's tilt."""
    return value + scale * (0.5 * s + TILT[s] * i)


def rec(sweep: str, labels: dict, results: dict) -> RunRecord:
    return RunRecord(sweep, ",".join(f"{k}={v}" for k, v in labels.items()), Path("/nonexistent"), dict(labels),
                     results=results)


def trained(err: float) -> dict:
    return {"test_acc": 1 - err / 100, "train_acc": 1 - err / 200, "params": 1000, "history": PLATEAUED}


def verdicts(an) -> dict[str, str]:
    """key → verdict, one claim per key."""
    out = {c.key: c.verdict for c in an.claims}
    assert len(out) == len(an.claims)
    return out


def effect_sign(an, key: str) -> float:
    (c,) = [c for c in an.claims if c.key == key]
    return math.copysign(1.0, c.stats.effect)


# ------------------------------------------------------------------------------------- fig2a-c

NS = (0, 2, 4, 8)  # SW-MLP densities p = 2^-n at S = C = 16: p = 1/C is n = 4


def _cka(values: tuple[float, ...]) -> list[RunRecord]:
    """fig2a-c's CKA runs: the mean diagonal CKA at each n (densest first), per training seed."""
    return [rec("cka", {"meta.S": 16, "meta.n": n, "meta.p": 2.0 ** -n, "seed": s},
                {"diagonal_mean": at(s, i, v, 0.01), "matrix": [[v]], "layers_a": ["a"], "layers_b": ["b"]})
            for s in SEEDS for i, (n, v) in enumerate(zip(NS, values))]


def test_fig2abc_peak_and_match():
    an = _analyse_fig2(_cka((0.5, 0.7, 0.8, 0.4)), MANIFEST)  # a peak inside, highest at p = 1/C
    assert verdicts(an) == {"peak": "HELD", "match": "HELD"}
    assert effect_sign(an, "match") < 0  # CKA(p = 1) − CKA(p = 1/C)
    an = _analyse_fig2(_cka((0.8, 0.7, 0.6, 0.4)), MANIFEST)  # highest at the dense end
    assert verdicts(an) == {"peak": "DID NOT HOLD", "match": "DID NOT HOLD"}
    assert effect_sign(an, "match") > 0
    assert verdicts(_analyse_fig2(_cka((0.6,) * 4), MANIFEST)) == {"peak": "UNDECIDED", "match": "UNDECIDED"}
    # p = 1/C below the dense MLP, every other p above it: only p = 1/C decides "match"
    assert verdicts(_analyse_fig2(_cka((0.6, 0.7, 0.5, 0.7)), MANIFEST))["match"] == "DID NOT HOLD"


# ----------------------------------------------------------------------------------------- fig4

MIXER_M = ((32, 32), (64, 32), (64, 64))  # (S, C): m = 1024, 2048, 4096; γm = 8192 at the top
SW_M = (1029, 2058, 4116, 8232)  # the SW-MLP nearest the Mixer's largest width is 4116, not the widest


def _fig4_train(mixer: tuple[float, ...], sw: tuple[float, ...]) -> list[RunRecord]:
    runs = []
    for s in SEEDS:
        for i, ((S, C), e) in enumerate(zip(MIXER_M, mixer)):
            runs.append(rec("train", {"meta.omega": 2**14, "meta.family": "mlp_mixer", "meta.S": S, "meta.C": C,
                                      "meta.m": S * C, "meta.p": 0.1, "run.seed": s}, trained(at(s, i, e))))
        for i, (m, e) in enumerate(zip(SW_M, sw)):
            runs.append(rec("train", {"meta.omega": 2**14, "meta.family": "sw_mlp", "meta.m": m, "meta.p": 0.1,
                                      "run.seed": s}, trained(at(s, i, e))))
    return runs


def _fig4_spectra(lam_sw: tuple[float, ...], mixer_departure: float) -> list[RunRecord]:
    """λ_max per random seed at three widths: the SW-MLP's as given, the Mixer's c_γ + a departure
    whose per-seed mean is ``mixer_departure``."""
    cg = 1 + math.sqrt(2.0)
    return [rec("spectra", {"seed": s, "omega": 2**19},
                {"rows": [{"m": m, "S": 1, "C": m, "p": 0.1, "c_gamma": cg, "gamma": 2.0, "sw_theory": 2.0,
                           "lambda_sw": at(s, i, v, 0.1), "lambda_mixer": cg + mixer_departure + 0.1 * TILT[s]}
                          for i, (m, v) in enumerate(zip((256, 1024, 4096), lam_sw))]}) for s in SEEDS]


def test_fig4_claims():
    margin = LAMBDA_MARGIN * (1 + math.sqrt(2.0))
    # the Mixer falls with m and beats the SW-MLP at 4116 (not at 8232); λ_sw grows, the Mixer's stays at c_γ
    an = _analyse_fig4(_fig4_train((14, 12, 10), (13, 14, 16, 9)) + _fig4_spectra((2, 3, 4), 0.2 * margin),
                       MANIFEST)
    assert set(verdicts(an).values()) == {"HELD"} and len(an.claims) == 4
    assert effect_sign(an, "mixer-beats-sw") < 0 and effect_sign(an, "lambda-sw") > 0
    an = _analyse_fig4(_fig4_train((10, 12, 14), (13, 12, 11, 18)) + _fig4_spectra((4, 3, 2), 3 * margin), MANIFEST)
    assert set(verdicts(an).values()) == {"DID NOT HOLD"}
    assert effect_sign(an, "mixer-beats-sw") > 0 and effect_sign(an, "mixer-width") > 0
    an = _analyse_fig4(_fig4_train((12, 12, 12), (11, 13, 12, 8)) + _fig4_spectra((3, 3, 3), margin), MANIFEST)
    assert set(verdicts(an).values()) == {"UNDECIDED"}


def test_fig4_mixer_beats_sw_is_not_testable_below_the_regime():
    """Up to m = 2048 (γm = 4096 < 8000) the SW-MLPs still train: the Mixer winning decides nothing."""
    an = _analyse_fig4(_fig4_train((14, 12), (15, 16)), MANIFEST)
    (c,) = [c for c in an.claims if c.key == "mixer-beats-sw"]
    assert c.held is True and c.verdict == "NOT TESTABLE" and "gamma_m >= 8000" in c.reason()


# ----------------------------------------------------------------------------------------- fig5

FIG5 = {"s_mixer": (2**18, ((360, 4), (173, 16), (64, 64))), "rp_s_mixer": (2**18, ((360, 4), (173, 16), (64, 64))),
        "sw_mlp": (2**14, ((147, None), (294, None), (588, None)))}  # (Ω, (S or m, C)) as at cpu scale


def _fig5(slopes: dict[str, float]) -> list[RunRecord]:
    """Test error 12 + slope × log2-position over each family's three widths."""
    runs = []
    for f, (om, pts) in FIG5.items():
        for i, (a, C) in enumerate(pts):
            lab = {"meta.omega": om, "meta.family": f, "meta.m": a * (C or 1), "meta.p": 0.5}
            if C:
                lab.update({"meta.S": a, "meta.C": C})
            runs += [rec("width", {**lab, "run.seed": s}, trained(at(s, i, 12 + slopes[f] * i))) for s in SEEDS]
    return runs


@pytest.mark.parametrize("turn", range(3))
def test_fig5_each_family_decided_on_its_own_runs(turn):
    """Three families, three directions, turned: every family falls, rises and stays flat once."""
    directions = [-1.5, 1.5, 0.0][turn:] + [-1.5, 1.5, 0.0][:turn]
    slopes = dict(zip(FIG5, directions))
    word = {-1.5: "HELD", 1.5: "DID NOT HOLD", 0.0: "UNDECIDED"}
    an = _analyse_fig5(_fig5(slopes), MANIFEST)
    assert verdicts(an) == {f"width-{f}": word[d] for f, d in slopes.items()}
    for f, d in slopes.items():
        if d:
            assert effect_sign(an, f"width-{f}") == math.copysign(1.0, d)


def test_fig5_a_family_still_learning_is_not_testable_through_the_report(tmp_path):
    """Through ``mlplab report``: the SW-MLPs' loss still falls 20% per epoch at one width; their
    claim is NOT TESTABLE (its rule still HELD), the Mixers' claims are decided as before."""
    from mlplab.utils.io import atomic_write_json

    atomic_write_json(tmp_path / "experiment.json", {"experiment": "fig5", "title": "t", "command": "c",
                                                     "scale": {"scale": "cpu", "dataset": "made-up"}, "sweeps": []})
    for r in _fig5({"s_mixer": -1.5, "rp_s_mixer": 1.5, "sw_mlp": -1.5}):
        res = dict(r.results)
        if r.get("meta.family") == "sw_mlp" and r.get("meta.m") == 294:
            res["history"] = [{"train_loss": 0.5}, {"train_loss": 0.4}]
        d = tmp_path / r.sweep / r.name
        d.mkdir(parents=True)
        atomic_write_json(d / "spec.json", {"sweep": r.sweep, "name": r.name, "overrides": r.overrides})
        atomic_write_json(d / "results.json", res)
    got = {v["key"]: v for v in report_experiment("fig5", tmp_path, verbose=False)["verdicts"]}
    assert {k: v["verdict"] for k, v in got.items()} == {"width-s_mixer": "HELD", "width-rp_s_mixer": "DID NOT HOLD",
                                                         "width-sw_mlp": "NOT TESTABLE"}
    assert got["width-sw_mlp"]["held"] is True and "still falling" in got["width-sw_mlp"]["reason"]
    assert "20.0%/epoch" in got["width-sw_mlp"]["reason"] and 20.0 > PLATEAU_MAX


# ----------------------------------------------------------------------------------------- fig7

DEPTHS = (2, 4, 8)


def _fig7(gaps: tuple[float, ...]) -> list[RunRecord]:
    """Normal and RP S-Mixers over depth; per seed the RP − normal gap at each depth is ``gaps``."""
    runs = []
    for s in SEEDS:
        for i, (L, g) in enumerate(zip(DEPTHS, gaps)):
            base = 10 + 0.5 * s - i
            runs.append(rec("depth", {"model.name": "s_mixer", "model.kwargs.depth": L, "run.seed": s}, trained(base)))
            runs.append(rec("depth", {"model.name": "rp_s_mixer", "model.kwargs.depth": L, "run.seed": s},
                            trained(base + g + TILT[s] * i)))
    return runs


def test_fig7_catch_up():
    an = _analyse_fig7(_fig7((3, 2, 1)), MANIFEST)
    assert verdicts(an) == {"catch-up": "HELD"} and effect_sign(an, "catch-up") < 0
    an = _analyse_fig7(_fig7((1, 2, 3)), MANIFEST)  # RP worse when shallow, and more so deeper
    assert verdicts(an) == {"catch-up": "DID NOT HOLD"} and effect_sign(an, "catch-up") > 0
    assert verdicts(_analyse_fig7(_fig7((2, 2, 2)), MANIFEST)) == {"catch-up": "UNDECIDED"}


def test_fig7_without_a_gap_when_shallow_is_not_testable():
    """RP better at the shallowest depth: nothing to catch up, whatever the slope."""
    (c,) = _analyse_fig7(_fig7((-1, -2, -3)), MANIFEST).claims
    assert c.held is True and c.verdict == "NOT TESTABLE" and "rp_worse_when_shallow" in c.reason()


# ----------------------------------------------------------------------------------------- figS1

DENSITIES = ((98, 1.0), (196, 0.25), (392, 1 / 16), (784, 1 / 64))


def _figS1(errors: tuple[float, ...], sigma: tuple[float, ...]) -> list[RunRecord]:
    """SW-MLPs over the densities (densest first), and σ_max over a ∈ {0.5, 1, 1.5} in 4 trials."""
    runs = [rec("train", {"meta.omega": 9604, "meta.family": "sw_mlp", "meta.m": m, "meta.p": p, "run.seed": s},
                trained(at(s, i, e))) for s in SEEDS for i, ((m, p), e) in enumerate(zip(DENSITIES, errors))]
    for i, (a, v) in enumerate(zip((0.5, 1.0, 1.5), sigma)):
        largest = [at(t, i, v, 0.1) for t in SEEDS]
        runs.append(rec("spectrum", {"a": a}, {"a": a, "omega": 1000.0, "trials": 4, "largest": largest,
                                               "largest_mean": sum(largest) / 4, "largest_std": 0.1,
                                               "edges": [0.0, 1.0, 2.0], "hist": [3, 1]}))
    return runs


def test_figS1_claims():
    # only the sparsest against the next denser decides "sparse-worse": every other pair says the opposite
    an = _analyse_figS1(_figS1((16, 16, 12, 14), (2.0, 2.5, 3.0)), MANIFEST)
    assert verdicts(an) == {"spectrum": "HELD", "sparse-worse": "HELD"}
    assert effect_sign(an, "sparse-worse") < 0 and effect_sign(an, "spectrum") > 0
    an = _analyse_figS1(_figS1((10, 10, 14, 12), (3.0, 2.5, 2.0)), MANIFEST)
    assert verdicts(an) == {"spectrum": "DID NOT HOLD", "sparse-worse": "DID NOT HOLD"}
    an = _analyse_figS1(_figS1((12, 10, 14, 14), (2.5, 2.5, 2.5)), MANIFEST)
    assert verdicts(an) == {"spectrum": "UNDECIDED", "sparse-worse": "UNDECIDED"}


# ------------------------------------------------------------------------------------- figS2-S3

WIDTH_PAIRS = ((32, 4), (32, 8), (32, 16))  # S.2: (S, C), m doubling
TOKENS = (4, 8, 16, 32, 64)  # S.3: S at m = 256, so S/C runs from 1/16 to 16


def _figS2(width_slope: float, near_error, tokens=TOKENS) -> list[RunRecord]:
    """S.2: error 12 + slope × position over the widths; S.3: ``near_error(log(S/C))``."""
    runs = []
    for s in SEEDS:
        for i, (S, C) in enumerate(sorted(WIDTH_PAIRS, key=lambda p: p[0] * p[1])):
            runs.append(rec("width", {"meta.omega": 2**14, "meta.family": "mlp_mixer", "meta.S": S, "meta.C": C,
                                      "meta.m": S * C, "run.seed": s}, trained(at(s, i, 12 + width_slope * i))))
        for i, S in enumerate(tokens):
            C = 256 // S
            runs.append(rec("expansion", {"meta.S": S, "meta.C": C, "meta.m": 256, "meta.omega": 2**14,
                                          "meta.family": "mlp_mixer", "meta.gamma": 1.0, "run.seed": s},
                            trained(at(s, i, near_error(math.log(S / C)), 0.3))))
    return runs


def test_figS2_S3_claims():
    an = _analyse_figS2(_figS2(-1.5, lambda x: 12 + 0.5 * x * x), MANIFEST)  # falls with m; U-shaped at S = C
    assert verdicts(an) == {"width": "HELD", "near-s-eq-c": "HELD"} and effect_sign(an, "width") < 0
    an = _analyse_figS2(_figS2(1.5, lambda x: 12 + x), MANIFEST)  # rises with m; best at the smallest S/C
    assert verdicts(an) == {"width": "DID NOT HOLD", "near-s-eq-c": "DID NOT HOLD"} and effect_sign(an, "width") > 0
    an = _analyse_figS2(_figS2(0.0, lambda x: 12.0), MANIFEST)
    assert verdicts(an) == {"width": "UNDECIDED", "near-s-eq-c": "UNDECIDED"}


def test_figS3_a_sweep_short_of_the_window_is_not_testable():
    """S/C from 1/16 to 1 never reaches past 2: an optimum between ½ and 2 cannot be told."""
    (c,) = [c for c in _analyse_figS2(_figS2(-1.5, lambda x: 12 + 0.5 * x * x, tokens=(4, 8, 16)), MANIFEST).claims
            if c.key == "near-s-eq-c"]
    assert c.verdict == "NOT TESTABLE" and "spans_window >= 1" in c.reason()


# ----------------------------------------------------------------------------------------- figS4

BLOCKS = ("none", [0], [1], [2], [3], "all")


def _figS4(errors: tuple[float, ...]) -> list[RunRecord]:
    return [rec("blocks", {"model.kwargs.rp_blocks": b, "run.seed": s}, trained(at(s, i, e)))
            for s in SEEDS for i, (b, e) in enumerate(zip(BLOCKS, errors))]


def test_figS4_first_block():
    """Block 0 against the other single blocks only: the all-RP Mixer (worst here) is no single block."""
    an = _analyse_figS4(_figS4((10, 14, 11, 11.5, 11, 18)), MANIFEST)
    assert verdicts(an) == {"first-block": "HELD"}
    assert verdicts(_analyse_figS4(_figS4((10, 11, 11, 14, 11, 9)), MANIFEST)) == {"first-block": "DID NOT HOLD"}
    assert verdicts(_analyse_figS4(_figS4((10, 12, 12, 12, 12, 8)), MANIFEST)) == {"first-block": "UNDECIDED"}


# ----------------------------------------------------------------------------------------- figS9


def _figS9(mixer: float, rp: float, sw: float) -> list[RunRecord]:
    """Densities as fractions of 1/C (C = 8, m = 64): the SW-MLP's tolerance is 3 binomial sd ≈ 0.0155."""
    return [rec("pictures", {"seed": 0}, {"S": 8, "C": 8, "m": 64, "density_mixer": mixer / 8,
                                          "density_rp_mixer": rp / 8, "density_sw": sw / 8})]


@pytest.mark.parametrize("densities, want", [
    ((1.0, 1.0, 1.08), ("HELD", "HELD")),
    ((1.0, 1.02, 1.0), ("DID NOT HOLD", "HELD")),  # the RP-Mixer's off: the farther of the two decides
    ((1.02, 1.0, 1.2), ("DID NOT HOLD", "DID NOT HOLD")),
    ((float("nan"), float("nan"), float("nan")), ("UNDECIDED", "UNDECIDED")),
])
def test_figS9_densities(densities, want):
    an = _analyse_figS9(_figS9(*densities), MANIFEST)
    assert verdicts(an) == dict(zip(("mixer-density", "sw-density"), want))


# ------------------------------------------------------------------------------- table1 (both ids)


def _table1(id: str, errors: dict[tuple[str, float], float]) -> list[RunRecord]:
    label = ({"narrow": "Mixer-SS/7 narrow", "wide": "Mixer-SS-W wide"} if id == "table1" else
             {"narrow": "Mixer-B/16 narrow", "wide": "Mixer-B-W wide"})
    return [rec("models", {"meta.label": label[m], "meta.S": 16, "meta.C": 128, "meta.P": 7, "optim.lr": lr,
                           "run.seed": s}, trained(at(s, m == "wide", e)))
            for (m, lr), e in errors.items() for s in SEEDS]


@pytest.mark.parametrize("id", ["table1", "table1-imagenet"])
def test_table1_wider_beats_narrower_at_each_best_lr(id):
    """Each model at its best lr (a grid of two), chosen so that both models at their other lr
    give the opposite verdict, and the wide model at its other lr too."""
    analyse = get_experiment(id).analyse
    manifest = {**MANIFEST, "experiment": id}
    an = analyse(_table1(id, {("wide", 0.04): 12, ("wide", 0.05): 21, ("narrow", 0.04): 20, ("narrow", 0.05): 14}),
                 manifest)
    assert verdicts(an) == {"wider-beats-narrower": "HELD"} and effect_sign(an, "wider-beats-narrower") < 0
    assert an.claims[0].effect == (WIDER if id == "table1" else WIDER_IN).effect
    an = analyse(_table1(id, {("wide", 0.04): 13, ("wide", 0.05): 11, ("narrow", 0.04): 16, ("narrow", 0.05): 10}),
                 manifest)
    assert verdicts(an) == {"wider-beats-narrower": "DID NOT HOLD"} and effect_sign(an, "wider-beats-narrower") > 0
    an = analyse(_table1(id, {("wide", 0.04): 12, ("wide", 0.05): 20, ("narrow", 0.04): 20, ("narrow", 0.05): 12}),
                 manifest)
    assert verdicts(an) == {"wider-beats-narrower": "UNDECIDED"}


# --------------------------------------------------------------------- every claim, every verdict

HERE = Path(__file__).parent
HDU = ("HELD", "DID NOT HOLD", "UNDECIDED")
AN, RV, MS = "test_experiments_analyses.py", "test_experiments_report_verdicts.py", "test_mixer_supplement.py"
SM, TR, IN, ES = "test_scaling_mlps.py", "test_sm_transfer.py", "test_inference.py", "test_experiments_scaling.py"
SC = Path(__file__).name


def cases(where: str, *verdicts: str, **more: str) -> dict[str, str]:
    """verdict → "file::test" that reaches it: ``verdicts`` (default HELD, DID NOT HOLD, UNDECIDED)
    in the test ``where``, and ``more`` (``NT`` for NOT TESTABLE, ``H``, ``D``, ``U``) elsewhere."""
    words = {"H": "HELD", "D": "DID NOT HOLD", "U": "UNDECIDED", "NT": "NOT TESTABLE"}
    return {**dict.fromkeys(verdicts or HDU, where), **{words[k]: v for k, v in more.items()}}


FIG6 = cases(f"{RV}::test_near_s_eq_c_flat_and_out_of_its_window", "UNDECIDED", "NOT TESTABLE",
             H=f"{RV}::test_report_redecides_from_disk", D=f"{RV}::test_report_redecides_from_disk")
TABLE1 = cases(f"{SC}::test_table1_wider_beats_narrower_at_each_best_lr")
SM_TABLE1 = cases(f"{SM}::test_table1_analysis_holds_when_every_effect_is_there", "HELD",
                  D=f"{SM}::test_table1_inverted_bottleneck_and_longer_training_that_hurt_did_not_hold",
                  U=f"{SM}::test_table1_flat_is_undecided")
SM_TRANSFER = cases(f"{TR}::test_transfer_analysis_reaches_each_verdict", "HELD", "DID NOT HOLD", "NOT TESTABLE",
                    U=f"{TR}::test_transfer_fine_tuning_and_probe_are_decided_apart_and_flat_is_undecided")
# (id, claim key) → the test that drives it to each verdict (NOT TESTABLE where it declares a Need)
COVERAGE = {
    ("fig2a-c", "peak"): cases(f"{SC}::test_fig2abc_peak_and_match"),
    ("fig2a-c", "match"): cases(f"{SC}::test_fig2abc_peak_and_match"),
    ("fig2d", "kronecker-as-accurate"): cases(f"{AN}::test_fig2d_noninferior", "HELD", "DID NOT HOLD",
                                              U=f"{AN}::test_fig2d_on_the_margin_is_undecided"),
    ("fig4", "lambda-sw"): cases(f"{SC}::test_fig4_claims"),
    ("fig4", "lambda-mixer"): cases(f"{SC}::test_fig4_claims"),
    ("fig4", "mixer-width"): cases(f"{SC}::test_fig4_claims"),
    ("fig4", "mixer-beats-sw"): cases(f"{SC}::test_fig4_claims",
                                      NT=f"{SC}::test_fig4_mixer_beats_sw_is_not_testable_below_the_regime"),
    **{("fig5", f"width-{f}"): cases(f"{SC}::test_fig5_each_family_decided_on_its_own_runs") for f in FIG5},
    ("fig6", "near-s-eq-c"): FIG6,
    ("fig6-imagenet", "near-s-eq-c"): FIG6,
    ("fig7", "catch-up"): cases(f"{SC}::test_fig7_catch_up",
                                NT=f"{SC}::test_fig7_without_a_gap_when_shallow_is_not_testable"),
    ("figS1", "spectrum"): cases(f"{SC}::test_figS1_claims"),
    ("figS1", "sparse-worse"): cases(f"{SC}::test_figS1_claims"),
    ("figS2-S3", "width"): cases(f"{SC}::test_figS2_S3_claims"),
    ("figS2-S3", "near-s-eq-c"): cases(f"{SC}::test_figS2_S3_claims",
                                       NT=f"{SC}::test_figS3_a_sweep_short_of_the_window_is_not_testable"),
    ("figS4", "first-block"): cases(f"{SC}::test_figS4_first_block"),
    ("figS5", "intermediate-patch"): cases(f"{AN}::test_figS5_monotone_is_did_not_hold_and_flat_undecided",
                                           "DID NOT HOLD", "UNDECIDED", H=f"{AN}::test_figS5_best_inner_patch"),
    ("figS6-S8", "rp-overfits-less"): cases(f"{AN}::test_figS6_S8_each_part_decided_on_its_own_runs", "DID NOT HOLD",
                                            "UNDECIDED", "NOT TESTABLE", H=f"{AN}::test_figS6_S8_paired_gaps"),
    ("figS9", "mixer-density"): cases(f"{SC}::test_figS9_densities"),
    ("figS9", "sw-density"): cases(f"{SC}::test_figS9_densities"),
    ("table1", "wider-beats-narrower"): TABLE1,
    ("table1-imagenet", "wider-beats-narrower"): TABLE1,
    **{("tableS3", k): cases(f"{AN}::test_tableS3_other_verdicts", "DID NOT HOLD", "UNDECIDED",
                             H=f"{AN}::test_tableS3_time_ratios") for k in ("sw-slower", "rp-as-cheap")},
    ("implicit-bias", "l1-bound"): cases(f"{AN}::test_implicit_bias_violated_and_unmeasured", "DID NOT HOLD",
                                         "UNDECIDED", H=f"{AN}::test_implicit_bias_is_deterministic"),
    ("scaling", "power-law"): cases(f"{ES}::test_power_law_and_frontier_reach_each_verdict", "HELD", "UNDECIDED",
                                    D=f"{ES}::test_error_rising_with_compute_did_not_hold_without_a_frontier"),
    ("scaling", "beta-p"): cases(f"{ES}::test_power_law_and_frontier_reach_each_verdict",
                                 NT=f"{ES}::test_a_frontier_over_two_model_sizes_is_not_testable"),
    ("sm-table1", "da-helps"): {**SM_TABLE1,
                                "DID NOT HOLD": f"{SM}::test_table1_analysis_reaches_did_not_hold_and_undecided",
                                "NOT TESTABLE": f"{SM}::test_table1_da_claim_is_not_testable_when_the_models_without_"
                                                "da_do_not_overfit"},
    ("sm-table1", "inv-helps"): SM_TABLE1,
    ("sm-table1", "epochs-help"): SM_TABLE1,
    ("sm-batch-size", "batch-helps"): cases(f"{TR}::test_batch_size_analysis_reaches_each_verdict"),
    **{("sm-transfer", k): SM_TRANSFER for k in ("transfer", "da-finetune", "da-probe", "da-over-size",
                                                 "no-da-vs-scratch")},
    **{("sm-weights", k): cases(f"{SM}::test_weights_analysis_decides_on_r_half", *HDU, "NOT TESTABLE")
       for k in ("localised-da", "localised-data")},
    ("sm-inference", "params"): cases(f"{IN}::test_sm_inference_verdicts", "HELD", "DID NOT HOLD",
                                      U=f"{IN}::test_sm_inference_other_verdicts",
                                      NT=f"{IN}::test_sm_inference_other_verdicts"),
    **{("sm-inference", k): cases(f"{IN}::test_sm_inference_verdicts", "HELD", "DID NOT HOLD",
                                  U=f"{IN}::test_sm_inference_other_verdicts") for k in ("throughput", "latency")},
    **{("mixer-ablations", k): cases(f"{MS}::test_ablations_analysis_reaches_each_verdict", "HELD", "DID NOT HOLD",
                                     U=f"{MS}::test_ablations_views_in_its_regime_and_gains_on_the_margins")
       for k in ("untied", "grouped")},
    ("mixer-ablations", "views"): cases(f"{MS}::test_ablations_views_in_its_regime_and_gains_on_the_margins",
                                        NT=f"{MS}::test_ablations_analysis_reaches_each_verdict"),
    **{("mixer-weights", k): cases(f"{MS}::test_weights_analysis_held_and_did_not_hold", "HELD", "DID NOT HOLD",
                                   U=f"{MS}::test_weights_analysis_flat_is_undecided")
       for k in ("inverse-pairs", "closest-is-inverse", "embedding-frequency")},
    **{("mixer-cost", k): cases(f"{IN}::test_mixer_cost_verdicts") for k in ("order", "ratios")},
}


def _test_names(file: str) -> set[str]:
    tree = ast.parse((HERE / file).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_declared_claim_reaches_each_verdict_in_some_test():
    """Every (id, claim key) any registered experiment declares is in ``COVERAGE`` — a claim added
    later without its cases fails here — with HELD, DID NOT HOLD, UNDECIDED and, where it declares
    a precondition, NOT TESTABLE, each naming a test that exists."""
    declared = {(id, c.key): c for id in list_experiments() for c in get_experiment(id).claims}
    assert set(COVERAGE) == set(declared)
    names = {}
    for (id, key), where in COVERAGE.items():
        assert set(where) == set(HDU) | ({"NOT TESTABLE"} if declared[id, key].needs else set()), (id, key)
        for test in where.values():
            file, name = test.split("::")
            assert name in names.setdefault(file, _test_names(file)), test
