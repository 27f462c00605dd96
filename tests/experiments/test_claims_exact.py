"""claims.py field by field: every dict a claim writes, every sentence it says and every boundary
of its rules, against values written out here (literals, or verdicts.py's power functions for the
numbers an UNDECIDED quotes) — so a renamed key, a dropped argument, a reversed comparison or a
wrong default fails a test."""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from mlplab.experiments import verdicts as V
from mlplab.experiments.claims import (
    RULE_WORDS,
    Check,
    Claim,
    ClaimSpec,
    Need,
    condition_key,
    converged_need,
    require_convergence,
    tally,
)

GAMMA = Need("gamma_m", ">=", 8000, "SW-MLPs fail near 8,000")
SPEC = ClaimSpec("wide", "the wider model has lower error", "trained", "paired t, wide < narrow", needs=(GAMMA,),
                 effect=-1.0, effect_source="Fig. 4")
CONVERGED = Need("converged", ">=", 1, "every condition's loss changed ≤ 5%/epoch at the end, and a 2× longer run "
                 "is not better by more than 0.5 points + 5%", kind="convergence")


def _t(**kw) -> V.Verdict:
    """An undecided t-based verdict over 4 seeds of sd 2 whose observed effect is +0.5 points."""
    return V.Verdict(**{"held": None, "n": 4, "spread": 2.0, "effect": 0.5, "p_claim": 0.2, "unit": "points", **kw})


# ------------------------------------------------------------------------------ needs and checks


def test_a_need_checks_its_quantity_against_its_bound():
    assert GAMMA.to_dict() == {"quantity": "gamma_m", "op": ">=", "bound": 8000, "why": "SW-MLPs fail near 8,000",
                               "kind": "regime"}
    assert GAMMA.check({"gamma_m": 9000, "other": 1}) == Check(GAMMA, 9000.0, True)
    assert GAMMA.check({"gamma_m": 7999.5}) == Check(GAMMA, 7999.5, False)
    for unmeasured in ({}, {"other": 9000}, {"gamma_m": float("nan")}, {"gamma_m": float("inf")}):
        assert GAMMA.check(unmeasured) == Check(GAMMA, None, None)
    for op, at_half_one_and_a_half in {">=": [False, True, True], "<=": [True, True, False],
                                       ">": [False, False, True], "<": [True, False, False]}.items():
        need = Need("q", op, 1.0, "w")
        assert [need.check({"q": x}).met for x in (0.5, 1.0, 1.5)] == at_half_one_and_a_half, op
    for kind in ("regime", "premise", "convergence"):
        assert Need("q", "<", 1, "w", kind=kind).kind == kind


def test_bad_needs_and_classes_are_refused_in_one_sentence():
    with pytest.raises(ValueError) as e:
        Need("q", "=>", 1, "w")
    assert str(e.value) == "Need 'q': op must be one of >=, <=, >, <, not '=>'"
    with pytest.raises(ValueError) as e:
        Need("q", ">=", 1, "w", kind="vibe")
    assert str(e.value) == "Need 'q': kind must be regime, premise or convergence, not 'vibe'"
    with pytest.raises(ValueError) as e:
        ClaimSpec("x", "t", "finding", "r")
    assert str(e.value) == "claim 'x': class must be one of trained, identity, measurement, not 'finding'"
    assert [ClaimSpec("x", "t", c, "r").cls for c in ("trained", "identity", "measurement")] == \
        ["trained", "identity", "measurement"]


def test_a_check_says_its_need_and_what_was_measured():
    assert Check(GAMMA, 9000.0, True).text() == "regime met: gamma_m >= 8000 (ours 9000; SW-MLPs fail near 8,000)"
    assert (Check(GAMMA, 744.123456, False, "too narrow").text()
            == "regime NOT met: gamma_m >= 8000 (ours 744.1; SW-MLPs fail near 8,000) — too narrow")
    assert (Check(GAMMA, None, None).text()
            == "regime unknown: gamma_m >= 8000 (ours not measured; SW-MLPs fail near 8,000)")
    assert Check(GAMMA, 1.0, False, "d").to_dict() == {
        "quantity": "gamma_m", "op": ">=", "bound": 8000, "why": "SW-MLPs fail near 8,000", "kind": "regime",
        "value": 1.0, "met": False, "detail": "d"}
    assert converged_need() == CONVERGED


# ---------------------------------------------------------------------------- specs and deciding


def test_a_claim_spec_writes_every_field():
    assert SPEC.to_dict() == {
        "key": "wide", "text": "the wider model has lower error", "class": "trained", "rule": "paired t, wide < narrow",
        "needs": [{"quantity": "gamma_m", "op": ">=", "bound": 8000, "why": "SW-MLPs fail near 8,000",
                   "kind": "regime"}],
        "effect": -1.0, "effect_source": "Fig. 4"}


def test_deciding_carries_the_verdict_its_checks_and_its_runs_into_the_claim():
    v, runs = V.Verdict(held=True, kind="interval"), (NS(sweep="w", name="a"),)
    got = SPEC.decide(v, label="Ω = 2^14", measured={"gamma_m": 9000}, detail="d", runs=runs)
    assert got == Claim(claim="Ω = 2^14: the wider model has lower error",
                        rule="paired t, wide < narrow. " + RULE_WORDS["interval"], held=True, detail="d", stats=v,
                        cls="trained", checks=[Check(GAMMA, 9000.0, True)], key="wide", effect=-1.0,
                        effect_source="Fig. 4", runs=[runs[0]])
    assert SPEC.decide(None) == Claim(claim="the wider model has lower error", rule="paired t, wide < narrow",
                                      held=None, detail="", stats=None, cls="trained",
                                      checks=[Check(GAMMA, None, None)], key="wide", effect=-1.0,
                                      effect_source="Fig. 4", runs=[])
    against = V.Verdict(held=False)
    assert SPEC.decide(against, measured={"gamma_m": 1}).held is False
    assert SPEC.decide(against).rule == "paired t, wide < narrow. " + RULE_WORDS["test"]


# ------------------------------------------------------------------------------------------ power


def _power(target: float, source: str, of: str = "effect", *, spread: float = 2.0, n: int = 4) -> dict:
    return {"detectable": V.detectable_effect(spread, n), "n": n, "spread": spread, "target": target,
            "target_source": source, "target_of": of, "seeds_needed": V.seeds_needed(target, spread), "unit": "points"}


def test_power_says_what_the_seeds_detect_and_what_would_decide_the_target():
    assert Claim("c", "r", None, stats=_t(), effect=-1.0).power() == _power(-1.0, "published")
    assert Claim("c", "r", None, stats=_t()).power() == _power(0.5, "observed")
    assert Claim("c", "r", None, stats=_t(n=2)).power() == _power(0.5, "observed", n=2)  # the fewest seeds with one
    for no_power in (_t(n=1), _t(spread=0.0), _t(spread=float("inf")), _t(spread=float("nan")),
                     _t(kind="interval"), _t(kind="deterministic"), None):
        assert Claim("c", "r", None, stats=no_power).power() is None, no_power


def test_a_margin_rules_target_is_the_distance_to_its_margin():
    """Non-inferiority at margin 1: an observed −0.5 is 1.5 from it; equivalence within ±1 at an
    observed −0.9: 0.1 from it; a published effect of 0.25 against a margin of 1: 0.75."""
    margin = "distance to the margin"
    assert Claim("c", "r", None, stats=_t(effect=-0.5, extra={"margin": 1.0})).power() == _power(1.5, "observed",
                                                                                                 margin)
    eq = _t(effect=-0.9, extra={"margin": 1.0, "equivalence": True})
    assert Claim("c", "r", None, stats=eq).power() == _power(1.0 - 0.9, "observed", margin)
    published = Claim("c", "r", None, stats=_t(extra={"margin": 1.0}), effect=0.25)
    assert published.power() == _power(0.75, "published", margin)


# ----------------------------------------------------------------------------------------- reason

UNDECIDED_4 = ("not significant (p = 0.2, needs < 0.025); with 4 seeds the smallest effect detectable at 80% power "
               "is ±{d:.3g}{u}; the {source} effect {target:+.3g}{u} needs {need}")


def test_reason_of_failed_and_unchecked_preconditions():
    need = Need("q", ">=", 1, "w")
    failed = Claim("c", "r", True, stats=_t(held=True),
                   checks=[Check(need, 0.0, False, "x"), Check(need, 2.0, True), Check(need, None, None),
                           Check(need, 0.5, False)])
    assert failed.reason() == "regime NOT met: q >= 1 (ours 0; w) — x; regime NOT met: q >= 1 (ours 0.5; w)"
    unknown = Claim("c", "r", True, stats=_t(held=True),
                    checks=[Check(need, None, None), Check(need, 2.0, True), Check(need, None, None, "y")])
    assert unknown.reason() == ("precondition not checked: regime unknown: q >= 1 (ours not measured; w); "
                                "regime unknown: q >= 1 (ours not measured; w) — y")


def test_a_decided_claim_needs_no_reason_and_one_without_a_rule_says_so():
    assert Claim("c", "r", True, stats=_t(held=True)).reason() == ""
    assert Claim("c", "r", False, stats=_t(held=False), checks=[Check(GAMMA, 9000.0, True)]).reason() == ""
    assert Claim("c", "r", None).reason() == "no rule could run"
    assert Claim("c", "r", True).reason() == "no rule could run"
    assert Claim("c", "r", None, detail="no finished runs").reason() == "no finished runs"


def test_an_undecided_interval_or_computation_says_the_bound_is_inside():
    for kind in ("interval", "deterministic"):
        assert Claim("c", "r", None, stats=V.Verdict(held=None, kind=kind)).reason() == "the interval holds the bound"
        assert Claim("c", "r", None, stats=V.Verdict(held=None, kind=kind, detail="d")).reason() == "d"


def test_an_undecided_test_says_what_its_seeds_detect_and_what_would_decide_it():
    d = V.detectable_effect(2.0, 4)
    assert Claim("c", "r", None, stats=_t(), effect=-1.0).reason() == UNDECIDED_4.format(
        d=d, u=" points", source="published", target=-1.0, need=f"{V.seeds_needed(-1.0, 2.0)} seeds")
    assert Claim("c", "r", None, stats=_t(unit="")).reason() == UNDECIDED_4.format(
        d=d, u="", source="observed", target=0.5, need=f"{V.seeds_needed(0.5, 2.0)} seeds")
    assert V.seeds_needed(1e-9, 2.0) is None  # beyond any number of seeds
    assert Claim("c", "r", None, stats=_t(), effect=1e-9).reason() == UNDECIDED_4.format(
        d=d, u=" points", source="published", target=1e-9, need="more seeds than can be run")
    three = Claim("c", "r", None, stats=_t(n=3, p_claim=0.3)).reason()  # MIN_SEEDS = 3: tested
    assert three.startswith("not significant (p = 0.3, needs < 0.025); with 3 seeds")


def test_an_undecided_test_on_too_few_seeds_says_so():
    assert Claim("c", "r", None, stats=_t(n=2)).reason() == "fewer than 3 seeds"
    assert Claim("c", "r", None, stats=_t(n=2, detail="only 2 seeds finished")).reason() == "only 2 seeds finished"
    assert Claim("c", "r", None, stats=_t(spread=float("nan"))).reason() == "fewer than 3 seeds"  # no spread: no power


# ---------------------------------------------------------------------------------- to_dict, tally


def test_a_claim_writes_every_field():
    runs = [NS(sweep="w-longer", name="f=a,seed=1"), NS(sweep="w", name="f=b,seed=0"), NS(sweep="w", name="f=a,seed=0")]
    v = _t()
    c = Claim("c", "r", None, "d", v, "trained", [Check(GAMMA, 9000.0, True)], "k", -1.0, "Fig. 4", runs)
    assert c.to_dict() == {
        "key": "k", "claim": "c", "class": "trained", "rule": "r", "held": None, "verdict": "UNDECIDED",
        "reason": UNDECIDED_4.format(d=V.detectable_effect(2.0, 4), u=" points", source="published", target=-1.0,
                                     need=f"{V.seeds_needed(-1.0, 2.0)} seeds"),
        "detail": "d", "stats": v.to_dict(),
        "checks": [{"quantity": "gamma_m", "op": ">=", "bound": 8000, "why": "SW-MLPs fail near 8,000",
                    "kind": "regime", "value": 9000.0, "met": True, "detail": ""}],
        "power": _power(-1.0, "published"), "conditions": ["w/f=a", "w/f=b"]}
    bare = Claim("c", "r", None, cls="identity").to_dict()
    assert bare["stats"] is None and bare["power"] is None and bare["conditions"] == [] and bare["class"] == "identity"


def test_tally_counts_each_class_and_verdict_with_the_defaults_of_old_rows():
    rows = [{"class": "identity", "verdict": "HELD"}, {"class": "identity", "verdict": "HELD"},
            {"verdict": "DID NOT HOLD"}, {"class": "measurement"}, {}, {"class": "trained", "verdict": "NOT TESTABLE"}]
    zero = {"HELD": 0, "DID NOT HOLD": 0, "NOT TESTABLE": 0, "UNDECIDED": 0}
    assert tally(rows) == {"trained": {**zero, "DID NOT HOLD": 1, "UNDECIDED": 1, "NOT TESTABLE": 1},
                           "identity": {**zero, "HELD": 2}, "measurement": {**zero, "UNDECIDED": 1}}


# -------------------------------------------------------------------------------- condition_key


def test_condition_key_drops_every_seed_part_and_nothing_else():
    name = "a=1,seed=2,run.seed=3,model.kwargs.seed=4,aug_seed=5,seedling=6,seed=1=2,run.seed=3=x,b=x=y"
    assert condition_key(NS(sweep="w-longer", name=name)) == "w/a=1,seedling=6,b=x=y"
    assert condition_key(NS(sweep="w", name="seed=0")) == "w/"
    assert condition_key(NS()) == "/"  # no sweep, no name
    assert condition_key(NS(sweep="w-longer-x", name="p")) == "w-longer-x/p"  # only a trailing suffix goes


# ---------------------------------------------------------------------------- require_convergence


def _runs(cond: str, losses, errors=(10.0, 10.0, 10.0), sweep: str = "w") -> list[NS]:
    """One condition's runs, seed s with loss change losses[s] (% per epoch) and test error errors[s]."""
    return [NS(sweep=sweep, name=f"f={cond},seed={s}", loss=x, err=e) for s, (x, e) in enumerate(zip(losses, errors))]


CONV = dict(loss_change=lambda r: r.loss, test_error=lambda r: r.err)


def test_convergence_by_plateau_per_condition():
    """a at exactly PLATEAU_MAX (passes), b's median |change| 6 and e's 7 (fail), c without a
    finite change (passes unchecked); each claim judged on its own runs, all of them when it names
    none; identities, measurements and claims already NOT TESTABLE are left alone."""
    nan = float("nan")
    a, b, c, e = _runs("a", (5.0, 5.0, 5.0)), _runs("b", (-6.0, -6.0, 1.0)), _runs("c", (nan,) * 3), \
        _runs("e", (7.0, 7.0, 7.0))
    runs = a + b + c + e
    identity = ClaimSpec("i", "i", "identity", "r").decide(V.Verdict(held=True, kind="deterministic"), runs=b)
    outside = SPEC.decide(V.Verdict(held=True), measured={"gamma_m": 1}, runs=b)
    flat = ClaimSpec("f", "flat", "trained", "r").decide(V.Verdict(held=True), runs=a + c)
    falling = ClaimSpec("g", "falling", "trained", "r").decide(V.Verdict(held=True), runs=b)
    every = ClaimSpec("h", "every", "trained", "r").decide(V.Verdict(held=True))
    notes = require_convergence([identity, outside, flat, falling, every], runs, [], **CONV)
    assert identity.checks == [] and outside.checks == [Check(GAMMA, 1.0, False)]
    assert flat.checks == [Check(CONVERGED, 1.0, True, "")] and flat.verdict == "HELD"
    assert falling.checks == [Check(CONVERGED, 0.0, False, "still falling: w/f=b 6.0%/epoch")]
    both = "still falling: w/f=b 6.0%/epoch, w/f=e 7.0%/epoch"
    assert every.checks == [Check(CONVERGED, 0.0, False, both)] and every.verdict == "NOT TESTABLE"
    assert notes == ["falling: not converged (still falling: w/f=b 6.0%/epoch)", f"every: not converged ({both})"]


def test_convergence_by_a_longer_run_of_the_same_seed():
    """Base errors 20 (seed 0; c: seed 1): the tolerance is 0.5 + 5% × 20 = 1.5 points. a gains
    exactly 1.5 and b 1.48 (pass), c 1.6 and e 10 (still learning); d has no longer run; a longer
    run without a base run (z) is ignored."""
    twenty = (20.0, 20.0)
    runs = (_runs("a", (0, 0), twenty) + _runs("b", (0, 0), twenty) + _runs("c", (0, 0), (30.0, 20.0))
            + _runs("d", (0, 0), twenty) + _runs("e", (9.0, 9.0), twenty))
    longer = (_runs("a", (0,), (18.5,), "w-longer") + _runs("b", (0,), (18.52,), "w-longer")
              + _runs("c", (0, 0), (99.0, 18.4), "w-longer")[1:] + _runs("e", (0,), (10.0,), "w-longer")
              + _runs("z", (0,), (1.0,), "w-longer"))
    fine = ClaimSpec("f", "fine", "trained", "r").decide(V.Verdict(held=True), runs=_runs("a", (0, 0), twenty)
                                                         + _runs("b", (0, 0), twenty))
    alone = ClaimSpec("d", "alone", "trained", "r").decide(V.Verdict(held=True), runs=_runs("d", (0, 0), twenty))
    every = ClaimSpec("h", "every", "trained", "r").decide(V.Verdict(held=True))
    notes = require_convergence([fine, alone, every], runs, longer, **CONV)
    assert fine.checks == [Check(CONVERGED, 1.0, True, "")]
    assert alone.checks == [Check(CONVERGED, 1.0, True, "1 condition(s) without a longer run")]
    detail = ("still falling: w/f=e 9.0%/epoch; still learning: w/f=c 20.00 → 18.40% (2× longer), "
              "w/f=e 20.00 → 10.00% (2× longer); 1 condition(s) without a longer run")
    assert every.checks == [Check(CONVERGED, 0.0, False, detail)]
    assert notes == [f"every: not converged ({detail})"]
