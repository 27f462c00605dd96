"""Claims: the four verdicts, preconditions (NOT TESTABLE is never DID NOT HOLD), classes, the
reason an UNDECIDED gives, and convergence per condition."""
from __future__ import annotations

import pytest

from mlplab.experiments import verdicts as V
from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.claims import (
    LONGER_SUFFIX,
    PLATEAU_MAX,
    ClaimSpec,
    Need,
    condition_key,
    require_convergence,
    tally,
)

SPEC = ClaimSpec("wide", "the wider model has lower error", "trained", "paired t, wide < narrow",
                 needs=(Need("gamma_m", ">=", 8000, "the paper sees SW-MLPs fail around γm ≈ 8,000"),),
                 effect=-1.0, effect_source="Fig. 4")


def _held() -> V.Verdict:
    return V.compare({s: -3.0 + 0.1 * s for s in range(5)}, {s: 0.0 for s in range(5)}, unit="points")


def _against() -> V.Verdict:
    return V.compare({s: 3.0 + 0.1 * s for s in range(5)}, {s: 0.0 for s in range(5)}, unit="points")


def _flat() -> V.Verdict:
    return V.compare({s: (-1) ** s * 1.0 for s in range(5)}, {s: 0.0 for s in range(5)}, unit="points")


def test_a_claim_in_its_regime_takes_the_rules_decision():
    assert SPEC.decide(_held(), measured={"gamma_m": 9000}).verdict == "HELD"
    assert SPEC.decide(_against(), measured={"gamma_m": 9000}).verdict == "DID NOT HOLD"
    assert SPEC.decide(_flat(), measured={"gamma_m": 9000}).verdict == "UNDECIDED"


def test_out_of_regime_is_not_testable_never_did_not_hold():
    c = SPEC.decide(_against(), measured={"gamma_m": 744})
    assert c.held is False and c.verdict == "NOT TESTABLE"
    assert "gamma_m >= 8000" in c.reason() and "744" in c.reason()
    assert c.to_dict()["verdict"] == "NOT TESTABLE"


def test_a_precondition_that_was_not_measured_leaves_the_claim_undecided():
    c = SPEC.decide(_held(), measured={})
    assert c.verdict == "UNDECIDED" and "not checked" in c.reason()


def test_an_undecided_claim_says_what_its_seeds_could_detect_and_what_would_decide_it():
    c = SPEC.decide(_flat(), measured={"gamma_m": 9000})
    pw = c.power()
    assert pw["target"] == -1.0 and pw["target_source"] == "published"
    assert pw["detectable"] == pytest.approx(V.detectable_effect(pw["spread"], 5))
    assert pw["seeds_needed"] == V.seeds_needed(-1.0, pw["spread"])
    r = c.reason()
    assert "80% power" in r and f"{pw['seeds_needed']} seeds" in r and "p = " in r
    # without a published effect, the observed one, said so
    plain = ClaimSpec("x", "x", "trained", "r").decide(_flat())
    assert plain.power()["target_source"] == "observed"


def test_classes_are_checked_and_tallied_apart():
    with pytest.raises(ValueError, match="class"):
        ClaimSpec("x", "x", "finding", "r")
    claims = [SPEC.decide(_held(), measured={"gamma_m": 9000}).to_dict(),
              ClaimSpec("i", "identity", "identity", "r").decide(V.deterministic(1.0, expected=1.0)).to_dict(),
              ClaimSpec("m", "time", "measurement", "r").decide(None).to_dict()]
    t = tally(claims)
    assert t["trained"]["HELD"] == 1 and t["identity"]["HELD"] == 1 and t["measurement"]["UNDECIDED"] == 1
    assert sum(sum(v.values()) for v in t.values()) == 3


def test_a_need_with_an_unknown_operator_or_kind_is_refused():
    with pytest.raises(ValueError, match="op"):
        Need("q", "=>", 1, "why")
    with pytest.raises(ValueError, match="kind"):
        Need("q", ">=", 1, "why", kind="vibe")


def _run(sweep, name, seed, losses, acc):
    return RunRecord(sweep, name, None, {"run.seed": seed}, {}, {"test_acc": acc, "train_loss": losses[-1],
                                                                 "history": [{"train_loss": x} for x in losses]})


def test_condition_key_drops_every_seed_and_the_longer_suffix():
    a = _run("width", "omega=16384,family=sw_mlp,seed=3", 3, [1, 1], 0.9)
    b = _run("width" + LONGER_SUFFIX, "omega=16384,family=sw_mlp,run.seed=4,model.kwargs.seed=4", 4, [1, 1], 0.9)
    assert condition_key(a) == condition_key(b) == "width/omega=16384,family=sw_mlp"


def test_convergence_is_judged_per_condition_not_pooled():
    """Two conditions plateaued, one still falling 5.5%/epoch: pooled, the median passes; per
    condition the claim resting on it is NOT TESTABLE."""
    flat, falling = [1.0, 0.999, 0.998], [1.0, 0.945, 0.945 * 0.945]
    runs = [_run("w", f"f={f},seed={s}", s, flat if f != "sw" else falling, 0.9) for f in ("a", "b", "sw")
            for s in range(3)]
    c = SPEC.decide(_held(), measured={"gamma_m": 9000}, runs=runs)
    notes = require_convergence([c], runs, [], lambda r: 100 * (r.results["history"][-1]["train_loss"] /
                                                              r.results["history"][-2]["train_loss"] - 1),
                                lambda r: 100 * (1 - r.results["test_acc"]))
    assert c.verdict == "NOT TESTABLE" and "w/f=sw" in c.checks[-1].detail and notes
    assert PLATEAU_MAX == 5.0


def test_a_longer_run_that_is_still_learning_makes_the_claim_not_testable():
    flat = [1.0, 1.0, 1.0]
    runs = [_run("w", f"f=a,seed={s}", s, flat, 0.90) for s in range(3)]
    longer = [_run("w" + LONGER_SUFFIX, "f=a,seed=0", 0, flat, 0.93)]  # 10% → 7% error
    conv = dict(loss_change=lambda r: 0.0, test_error=lambda r: 100 * (1 - r.results["test_acc"]))
    c = SPEC.decide(_held(), measured={"gamma_m": 9000}, runs=runs)
    require_convergence([c], runs, longer, **conv)
    assert c.verdict == "NOT TESTABLE" and "still learning" in c.checks[-1].detail
    same = [_run("w" + LONGER_SUFFIX, "f=a,seed=0", 0, flat, 0.902)]  # within the tolerance
    c = SPEC.decide(_held(), measured={"gamma_m": 9000}, runs=runs)
    require_convergence([c], runs, same, **conv)
    assert c.verdict == "HELD"


def test_convergence_leaves_identities_and_measurements_alone():
    runs = [_run("w", f"f=a,seed={s}", s, [1.0, 0.5, 0.25], 0.9) for s in range(3)]
    c = ClaimSpec("i", "identity", "identity", "r").decide(V.deterministic(1.0, expected=1.0), runs=runs)
    require_convergence([c], runs, [], lambda r: -50.0, lambda r: 10.0)
    assert c.verdict == "HELD" and not c.checks


def test_a_margin_rules_seeds_needed_come_from_the_distance_to_its_margin():
    """Non-inferiority at margin 1 with an observed difference of 0.9: what would decide it is the
    0.1 between the difference and the margin, not the difference itself."""
    a = {s: 0.9 + d for s, d in enumerate([-0.4, 0.3, -0.1, 0.5, -0.3])}
    v = V.noninferior(a, {s: 0.0 for s in a}, 1.0)
    pw = ClaimSpec("x", "x", "trained", "r").decide(v).power()
    assert pw["target"] == pytest.approx(1.0 - 0.9) and pw["target_source"] == "observed"
    assert pw["target_of"] == "distance to the margin"
    assert pw["seeds_needed"] == V.seeds_needed(1.0 - 0.9, pw["spread"]) > V.seeds_needed(0.9, pw["spread"])
    eq = V.equivalent({s: -x for s, x in a.items()}, {s: 0.0 for s in a}, 1.0)  # |−0.9| inside ±1
    assert ClaimSpec("x", "x", "trained", "r").decide(eq).power()["target"] == pytest.approx(0.1)
