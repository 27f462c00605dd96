"""The verdict rules where the data are uneven: groups with different paired-seed counts (the rule
takes the minimum), two effects that differ (the weaker is reported), the plateau rule's
exemptions, and the rules' invariants (relabelling, too few seeds, sign flip) as properties.

Every expected number is computed another way: numpy float64 arithmetic written out here, or
scipy's ``ttest_1samp``, never the rule under test."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ttest_1samp

from mlplab.experiments.claims import KIND_RULE, PLATEAU_MAX, Claim, decided, require_plateau
from mlplab.experiments.verdicts import (ALPHA, MIN_SEEDS, best_is_interior, compare, deterministic,
                                         interior_optimum, lowest_of, noninferior, trend, worst_of)

PROPS = settings(max_examples=40, deadline=None)


def t_stat(d) -> float:
    """The one-sample t of ``d`` against 0, float64 numpy: mean / (sd / √n)."""
    d = np.asarray(d, dtype=np.float64)
    return float(d.mean() / (d.std(ddof=1) / math.sqrt(d.size)))


# ------------------------------------------------------------ uneven seeds: the minimum decides


def test_lowest_of_counts_the_seeds_of_the_thinnest_comparison():
    """The target has 5 seeds, one rival 5, the other only seeds 0 and 1: the comparison with 2
    paired seeds cannot be tested, so the claim is UNDECIDED with n = 2, however clear the data."""
    target = {s: 10.0 + 0.1 * s for s in range(5)}
    full = {s: 20.0 + 0.1 * s for s in range(5)}
    thin = {0: 30.0, 1: 30.5, 7: 30.2}  # seed 7 has no partner in the target
    v = lowest_of({"t": target, "full": full, "thin": thin}, "t")
    assert v.held is None and v.n == 2 and "fewer than 3 paired seeds" in v.detail
    v = worst_of({s: -x for s, x in target.items()}, {"full": {s: -x for s, x in full.items()},
                                                       "thin": {s: -x for s, x in thin.items()}})
    assert v.held is None and v.n == 2


def test_lowest_of_degrees_of_freedom_follow_the_smallest_pairing():
    """Rivals with 5 and 3 paired seeds: n = 3, df = 2, whichever rival is the closest."""
    target = {s: 10.0 + 0.2 * (s % 2) for s in range(5)}
    wide = {s: 10.5 + 0.1 * s for s in range(5)}  # the closest, 5 pairs
    short = {s: 16.0 - 0.3 * s for s in range(3)}  # 3 pairs
    v = lowest_of({"t": target, "wide": wide, "short": short}, "t")
    assert v.n == 3 and v.extra["closest"] == "wide"
    assert v.statistic == "paired t vs the closest (wide, df = 2)"
    d = [target[s] - wide[s] for s in range(5)]
    assert v.value == pytest.approx(-t_stat(d), rel=1e-12)  # the closest comparison's own 5 pairs
    assert v.effect == pytest.approx(-np.mean(d), rel=1e-12)


def test_compare_and_noninferior_count_only_paired_finite_seeds():
    a = {0: 1.0, 1: 1.2, 2: 0.9, 3: float("nan"), 4: 1.1}
    b = {0: 2.0, 1: 2.1, 2: 2.3, 3: 2.0, 5: 2.2}  # seed 3 is NaN in a, 4 and 5 unpaired
    v = compare(a, b, what="a − b", unit="points")
    d = [a[s] - b[s] for s in (0, 1, 2)]
    assert v.n == 3 and v.statistic == "paired t (df = 2)"
    assert v.value == pytest.approx(t_stat(d), rel=1e-12)
    assert v.effect == pytest.approx(np.mean(d), rel=1e-12) and v.effect_name == "mean a − b"
    ref = ttest_1samp(d, 0.0, alternative="less")
    assert v.held is True and v.p == pytest.approx(ref.pvalue, rel=1e-10)
    v = noninferior(a, b, 2.0)
    assert v.n == 3 and v.value == pytest.approx(t_stat([x - 2.0 for x in d]), rel=1e-12)
    two = compare({0: 1.0, 1: 1.2, 2: float("nan")}, {0: 2.0, 1: 2.1, 2: 2.3})
    assert two.held is None and two.n == 2 and two.effect == pytest.approx(-0.95)
    assert compare({}, {0: 1.0}).n == 0 and math.isnan(compare({}, {0: 1.0}).effect)


def test_trend_counts_seeds_with_three_finite_points():
    x = [1, 2, 4, 8]
    y = {0: [4.0, 3.0, 2.1, 1.0], 1: [4.2, 3.1, 2.0, 0.9], 2: [4.1, float("nan"), float("nan"), 1.2],
         3: [3.9, 3.0, 1.9, 1.1]}
    v = trend(x, y)
    assert v.n == 3  # seed 2 has two finite points
    slopes = [np.polyfit(np.log2(x), y[s], 1)[0] for s in (0, 1, 3)]
    assert v.effect == pytest.approx(np.mean(slopes), rel=1e-12)
    assert v.value == pytest.approx(t_stat(slopes), rel=1e-12)
    assert v.held is True and v.statistic == "t of per-seed slopes (df = 2)"


# ------------------------------------------------------------ two effects: the weaker is reported


def test_lowest_of_reports_the_margin_over_the_closest_rival():
    """The target beats one rival by ~8 points and the other by ~1: the effect is the 1-point
    margin (with that comparison's interval), not the 8."""
    target = {0: 10.0, 1: 10.3, 2: 9.9, 3: 10.1}
    far = {s: x + 8.0 + 0.1 * s for s, x in target.items()}
    near = {s: x + 1.0 + 0.05 * (s % 2) for s, x in target.items()}
    for order in (("far", "near"), ("near", "far")):
        groups = {"t": target, **{k: {"far": far, "near": near}[k] for k in order}}
        v = lowest_of(groups, "t", unit="points")
        d = [target[s] - near[s] for s in target]
        ci = ttest_1samp(d, 0.0).confidence_interval(0.95)
        assert v.held is True and v.extra["closest"] == "near"
        assert v.effect == pytest.approx(-np.mean(d), rel=1e-12)
        assert v.interval == (pytest.approx(-ci.high, rel=1e-10), pytest.approx(-ci.low, rel=1e-10))
        assert v.effect_name == "margin of t over near" and v.unit == "points"


def test_interior_optimum_reports_the_weaker_end():
    """The centre beats the low end by ~3 points and the high end by ~0.5: the effect, its
    interval and its t are the high end's."""
    S, C = [64, 32, 16, 8, 4], [4, 8, 16, 32, 64]
    base = {0: 0.0, 1: 0.1, 2: -0.1, 3: 0.05}
    err = {s: [13.0 + b + 0.2 * s, 11.5, 10.0 + b, 11.0, 10.5 + b + 0.07 * s] for s, b in base.items()}
    v = interior_optimum(S, C, err)
    d_hi = [err[s][2] - err[s][4] for s in base]  # centre − the end with the largest log(S/C)... (S=4, C=64)
    d_lo = [err[s][2] - err[s][0] for s in base]
    assert -np.mean(d_hi) < -np.mean(d_lo)
    ci = ttest_1samp(d_hi, 0.0).confidence_interval(0.95)
    assert v.n == 4 and v.effect == pytest.approx(-np.mean(d_hi), rel=1e-12)
    assert v.value == pytest.approx(t_stat(d_hi), rel=1e-12)
    assert v.interval == (pytest.approx(-ci.high, rel=1e-10), pytest.approx(-ci.low, rel=1e-10))
    # the same data mirrored (the weak end now the low one) reports the same effect
    mirrored = interior_optimum(C, S, err)
    assert mirrored.effect == pytest.approx(v.effect, rel=1e-12) and mirrored.held is v.held


def test_interior_optimum_with_too_few_seeds_still_reports_the_weaker_effect():
    S, C = [64, 16, 4], [4, 16, 64]
    err = {0: [14.0, 10.0, 11.0], 1: [13.0, 10.0, 10.5]}
    v = interior_optimum(S, C, err)
    assert v.held is None and v.n == 2 and v.effect == pytest.approx(0.75) and "fewer than 3 seeds" in v.detail


# ------------------------------------------------------------ the plateau rule and its exemptions


def claims_of_every_kind():
    held = compare({0: 1.0, 1: 1.1, 2: 0.9, 3: 1.05}, {0: 2.0, 1: 2.1, 2: 1.9, 3: 2.0})
    refuted = compare({0: 2.0, 1: 2.1, 2: 1.9, 3: 2.0}, {0: 1.0, 1: 1.1, 2: 0.9, 3: 1.05})
    exact = deterministic(0.125, expected=1 / 8, tol=1e-12)
    return {
        "trained test": decided("a < b", "compare", held),
        "trained refuted": decided("b < a", "compare", refuted, detail="why"),
        "exact on trained runs": decided("density", "exact", exact),  # trained=True, kind deterministic
        "random weights": decided("spectrum", "compare", held, trained=False),
        "no statistics": Claim("count", "r", True),
        "undecided": decided("noise", "compare", compare({0: 1.0}, {0: 2.0})),
    }


def test_plateau_rule_turns_only_statistical_verdicts_about_trained_models_undecided():
    cs = claims_of_every_kind()
    before = {k: (c.held, c.detail) for k, c in cs.items()}
    note = require_plateau(list(cs.values()), [-(PLATEAU_MAX + 2), PLATEAU_MAX + 1, 0.0])
    assert note.startswith(f"not plateaued: the median run's training loss still changed {PLATEAU_MAX + 1:.1f}% per epoch")
    assert note.endswith(f"(a verdict needs ≤ {PLATEAU_MAX:g}%): every statistical verdict about the trained models "
                         "is UNDECIDED; train longer (schedule.epochs) to decide")
    assert cs["trained test"].held is None
    assert cs["trained test"].detail == (f"the statistics said HELD, but not plateaued: the median run's training loss "
                                         f"still changed {PLATEAU_MAX + 1:.1f}% per epoch over its last 2 epochs "
                                         f"(a verdict needs ≤ {PLATEAU_MAX:g}%)")
    assert cs["trained refuted"].held is None
    assert cs["trained refuted"].detail.startswith("why; the statistics said DID NOT HOLD, but not plateaued")
    for k in ("exact on trained runs", "random weights", "no statistics", "undecided"):
        assert (cs[k].held, cs[k].detail) == before[k], k
    assert cs["exact on trained runs"].held is True


def test_plateau_rule_threshold_is_on_the_median_absolute_change():
    for changes, gated in (([PLATEAU_MAX] * 3, False), ([-PLATEAU_MAX - 0.01] * 3, True),
                           ([100.0, 100.0, 0.0, 0.0], True),  # median of 4: mean of the middle two = 50
                           ([100.0, 0.0, 0.0, 0.0], False),
                           ([float("nan"), float("inf"), -9.0, 1.0, 8.0], True),  # finite: 9, 1, 8 → 8
                           ([float("nan")], False)):
        cs = claims_of_every_kind()
        note = require_plateau(list(cs.values()), changes)
        assert (note is not None) is gated and (cs["trained test"].held is None) is gated, changes


def test_decided_appends_the_rule_of_the_verdicts_kind():
    exact = decided("density", "the density is 1/8", deterministic(0.125, expected=1 / 8))
    assert exact.rule == "the density is 1/8. " + KIND_RULE["deterministic"] and exact.trained is True
    assert exact.to_dict()["stats"]["kind"] == "deterministic" and exact.to_dict()["verdict"] == "HELD"
    t = decided("a < b", "compare", compare({0: 1.0}, {0: 2.0}), detail="d", trained=False)
    assert (t.held, t.detail, t.trained, t.verdict) == (None, "d", False, "UNDECIDED")
    assert t.to_dict() == {"claim": "a < b", "rule": "compare. " + KIND_RULE["test"], "held": None,
                           "verdict": "UNDECIDED", "detail": "d", "stats": t.stats.to_dict(), "trained": False}
    assert Claim("c", "r", False).to_dict()["stats"] is None and Claim("c", "r", False).verdict == "DID NOT HOLD"
    assert f"α = {ALPHA}" in KIND_RULE["test"] and f"≥ {MIN_SEEDS} seeds" in KIND_RULE["test"]


# ------------------------------------------------------------ properties


values = st.floats(min_value=-50, max_value=50, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def seed_tables(draw, groups=3, min_seeds=0, max_seeds=6):
    """name → {seed → value}; each group has its own subset of seeds 0..7 and a group effect."""
    out = {}
    for g in range(groups):
        seeds = draw(st.lists(st.integers(0, 7), min_size=min_seeds, max_size=max_seeds, unique=True))
        shift = draw(st.sampled_from([0.0, 5.0, -5.0]))
        out[f"g{g}"] = {s: shift + draw(values) / 25 for s in seeds}
    return out


@PROPS
@given(seed_tables(min_seeds=3))
def test_lowest_of_is_blind_to_the_order_and_names_of_groups_and_seeds(groups):
    v = lowest_of(groups, "g0")
    # list the rivals in reverse, rename them, and relabel the seeds by a bijection
    seed_map = {s: 100 + 7 * ((s * 5) % 8) for s in range(8)}
    relabelled = {"target": {seed_map[s]: x for s, x in groups["g0"].items()}}
    for k in reversed([k for k in groups if k != "g0"]):
        relabelled[f"rival {k}"] = {seed_map[s]: x for s, x in reversed(list(groups[k].items()))}
    w = lowest_of(relabelled, "target")
    assert w.held is v.held and w.n == v.n
    if v.held is not None or not math.isnan(v.effect):
        assert w.effect == pytest.approx(v.effect, rel=1e-9, abs=1e-12)
        assert w.p == pytest.approx(v.p, rel=1e-9, abs=1e-15)


@PROPS
@given(seed_tables(min_seeds=0, max_seeds=8))
def test_lowest_of_is_undecided_whenever_a_comparison_has_too_few_seeds(groups):
    paired = [len(set(groups["g0"]) & set(groups[k])) for k in groups if k != "g0"]
    v = lowest_of(groups, "g0")
    assert v.n == min(paired)
    if min(paired) < MIN_SEEDS:
        assert v.held is None and not v.statistic


@PROPS
@given(st.lists(st.tuples(values, values), min_size=0, max_size=7), st.sampled_from([0.0, 3.0, -3.0]))
def test_compare_flips_under_a_sign_flip_and_needs_three_pairs(pairs, shift):
    a = {s: x / 10 + shift for s, (x, _) in enumerate(pairs)}
    b = {s: y / 10 for s, (_, y) in enumerate(pairs)}
    v, w = compare(a, b), compare(b, a)
    flip = {True: False, False: True, None: None}
    assert w.held is flip[v.held] and w.n == v.n == len(pairs)
    if len(pairs) < MIN_SEEDS:
        assert v.held is None
    else:
        d = [a[s] - b[s] for s in a]
        if np.std(d) > 1e-9:
            ref = ttest_1samp(d, 0.0, alternative="less").pvalue
            assert v.held is (True if ref < ALPHA else (False if 1 - ref < ALPHA else None)) or abs(ref - ALPHA) < 1e-9 \
                or abs(1 - ref - ALPHA) < 1e-9
        assert w.effect == pytest.approx(-v.effect, abs=1e-12)


@PROPS
@given(st.lists(st.lists(values, min_size=4, max_size=4), min_size=0, max_size=6), st.sampled_from([-1, 1]))
def test_trend_flips_when_y_or_the_claimed_sign_flips(rows, sign):
    x = [1, 2, 4, 8]
    y = {s: [r / 10 + (-1.5 * i) for i, r in enumerate(row)] for s, row in enumerate(rows)}
    v = trend(x, y, sign=sign)
    flip = {True: False, False: True, None: None}
    assert trend(x, y, sign=-sign).held is flip[v.held]
    assert trend(x, {s: [-u for u in ys] for s, ys in y.items()}, sign=sign).held is flip[v.held]
    if len(rows) < MIN_SEEDS:
        assert v.held is None


@PROPS
@given(seed_tables(groups=4, min_seeds=3))
def test_best_is_interior_reads_the_sweep_the_same_both_ways(groups):
    order = list(groups)
    v, w = best_is_interior(order, groups), best_is_interior(order[::-1], groups)
    assert w.held is v.held
    means = [np.mean(list(groups[k].values())) for k in order]
    if len(set(means)) == len(means):  # a tie goes to the first listed
        assert w.extra["best"] == v.extra["best"] == order[int(np.argmin(means))]


@PROPS
@given(seed_tables(min_seeds=3))
def test_lowest_of_negated_is_highest_of(groups):
    """Negating every value turns "the lowest" into "the highest" with the same verdict and p."""
    v = lowest_of(groups, "g0")
    w = lowest_of({k: {s: -x for s, x in g.items()} for k, g in groups.items()}, "g0", higher=True)
    assert w.held is v.held and w.n == v.n and w.extra.get("closest") == v.extra.get("closest")
    if v.held is not None:
        assert w.p == pytest.approx(v.p, rel=1e-9, abs=1e-15) and w.effect == pytest.approx(v.effect, rel=1e-9)
