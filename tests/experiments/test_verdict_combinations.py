"""The verdict rules that combine several tests into one claim's verdict (``verdicts.all_of``,
``holm_over_claims``, ``equivalent``, ``all_hold``) on made-up numbers with known answers: each
reaches HELD, DID NOT HOLD and UNDECIDED."""
import numpy as np
import pytest

from mlplab.experiments.verdicts import Verdict, all_hold, all_of, compare, equivalent, holm_over_claims


def test_all_of_needs_every_part_and_holm():
    down = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}
    up = {s: v + 5.0 + 0.1 * s * s for s, v in down.items()}
    held = all_of({"a": compare(down, up), "b": compare(down, up)})
    assert held.held is True and len(held.extra["p_claim_holm"]) == 2
    assert all_of({"a": compare(down, up), "b": compare(up, down)}).held is False
    flat = {s: v + (0.3 if s % 2 else -0.3) for s, v in down.items()}
    assert all_of({"a": compare(down, up), "b": compare(down, flat)}).held is None
    two = all_of({"a": compare({0: 1.0, 1: 2.0}, {0: 3.0, 1: 4.0})})
    assert two.held is None and "fewer than 3 seeds" in two.detail


def test_holm_over_claims_reaches_each_verdict():
    lower = {s: 1.0 + 0.01 * s for s in range(5)}
    higher = {s: 2.0 + 0.02 * s for s in range(5)}
    v = holm_over_claims({"a < b": [("a − b", lower, higher)], "b < a": [("b − a", higher, lower)],
                          "two seeds": [("a − b", {0: 1.0, 1: 1.0}, {0: 2.0, 1: 2.0})]})
    assert v["a < b"].held is True and v["b < a"].held is False
    assert v["two seeds"].held is None and "fewer than 3" in v["two seeds"].detail


def test_holm_over_claims_adjusts_over_every_comparison_and_needs_all_of_a_claims():
    # one comparison significant alone (p ≈ 0.03), with a flat one beside it: the claim needs both
    rng = np.random.default_rng(0)
    a = {s: float(x) for s, x in enumerate(rng.normal(0, 1, 6))}
    b = {s: a[s] + 0.8 + 0.1 * (-1) ** s for s in range(6)}  # a clearly below b
    flat = {s: a[s] + 0.3 * (-1) ** s for s in range(6)}  # no direction
    v = holm_over_claims({"both": [("a − b", a, b), ("a − flat", a, flat)]})["both"]
    assert v.held is None and set(v.extra["holm_claim"]) == {"a − b", "a − flat"}
    alone = holm_over_claims({"one": [("a − b", a, b)]})["one"]
    assert alone.held is True
    # Holm: the smallest of k p-values is multiplied by k
    tight = {s: a[s] + 0.5 + 0.45 * (-1) ** s for s in range(6)}
    single = holm_over_claims({"x": [("a − tight", a, tight)]})["x"]
    many = holm_over_claims({"x": [("a − tight", a, tight)], "y": [("a − flat", a, flat)]})["x"]
    assert many.extra["holm_claim"]["a − tight"] == pytest.approx(min(1.0, 2 * single.p))


def test_equivalent_reaches_each_verdict():
    base = {0: 70.0, 1: 71.0, 2: 72.0, 3: 70.5}
    near = {s: v + d for (s, v), d in zip(base.items(), (0.1, -0.1, 0.05, 0.0))}
    far = {s: v + d for (s, v), d in zip(base.items(), (3.0, 3.2, 2.9, 3.1))}
    noisy = {s: v + d for (s, v), d in zip(base.items(), (2.0, -2.5, 1.5, -0.5))}
    held = equivalent(near, base, 1.0)
    assert held.held is True and held.p < 0.05 and "TOST" in held.statistic
    assert equivalent(far, base, 1.0).held is False
    assert equivalent(noisy, base, 1.0).held is None
    few = equivalent({0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0}, 1.0)
    assert few.held is None and "fewer than 3" in few.detail
    with pytest.raises(ValueError, match="margin"):
        equivalent(near, base, -1.0)


def test_all_hold_combines_intervals():
    def v(h):
        return Verdict(held=h, kind="interval", n=5, effect_name="x")

    assert all_hold([v(True), v(True)], "w").held is True
    assert all_hold([v(True), v(None)], "w").held is None
    assert all_hold([v(None), v(False)], "w").held is False
    assert all_hold([], "w").held is None
