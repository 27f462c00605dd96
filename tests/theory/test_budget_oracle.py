"""The planner against an independent oracle: exact integer arithmetic, never the planner's own code.

Ω(S, C) = γ(C·S² + C²·S)/2 (docs/science.md §3) is strictly increasing in S, so "S is the real
root rounded half up" is the same as Ω(S − ½, C) ≤ Ω < Ω(S + ½, C). With γ = a/b, multiplying by
8b turns that into the integer inequalities

    a·C·(2S − 1)(2S − 1 + 2C) ≤ 8·b·Ω < a·C·(2S + 1)(2S + 1 + 2C),

which the tests below check, and use to enumerate every integer pair by brute force. γ is drawn
from dyadic rationals k/8, so every float product the planner forms with it is exact.
"""
import json
import math
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mlplab import cli
from mlplab.theory import budget as B
from mlplab.theory import plan_budget

PROPS = settings(max_examples=60, deadline=None, derandomize=True, database=None)

gammas = st.integers(1, 64).map(lambda k: k / 8)  # γ in (0, 8], exact in binary
omegas = st.integers(1, 2**40)


def _ab(gamma):
    g = Fraction(gamma)
    return g.numerator, g.denominator


def _omega8b(omega, b):
    return Fraction(omega) * 8 * b  # exact for the float Ω the planner accepts


def _below(n, given, gamma, omega):
    """Ω(n − ½, given) ≤ Ω, exactly."""
    a, b = _ab(gamma)
    return a * given * (2 * n - 1) * (2 * n - 1 + 2 * given) <= _omega8b(omega, b)


def _rounded_root(omega, given, gamma):
    """The integer n ≥ 0 with Ω(n − ½) ≤ Ω < Ω(n + ½) (n = 0: no pair), by walking up from 0.

    A bisection bracket first, so a 2^40 budget does not walk a million steps."""
    lo, hi = 0, 1
    while _below(hi, given, gamma, omega):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # invariant: _below(lo) or lo == 0, not _below(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _below(mid, given, gamma, omega) else (lo, mid)
    return lo


def _brackets(n, given, gamma, omega, slack=Fraction(0)):
    """Ω(n − ½) ≤ Ω < Ω(n + ½), with a relative slack for a root within float rounding of a half."""
    a, b = _ab(gamma)
    target = _omega8b(omega, b)
    low = a * given * (2 * n - 1) * (2 * n - 1 + 2 * given)
    high = a * given * (2 * n + 1) * (2 * n + 1 + 2 * given)
    return low <= target * (1 + slack) and target * (1 - slack) < high


def _connections(S, C, gamma, family):
    """Mean connections per layer as built, in exact rationals (four layers of an MLP-Mixer whose
    hidden widths are round(γS), round(γC) with halves to even, as ``models.mixer`` builds them)."""
    if family == "s_mixer":
        return Fraction(S * C * (S + C), 2)
    g = Fraction(gamma)
    return Fraction(S * C * (round(g * S) + round(g * C)), 2)  # Fraction.__round__: exact, halves to even


@st.composite
def mixer_budgets(draw):
    family = draw(st.sampled_from(["s_mixer", "mlp_mixer"]))
    gamma = 1.0 if family == "s_mixer" else draw(gammas)
    omega = draw(omegas)
    # sizes whose partner is at least 1: γ(n + n²)/2 ≤ Ω for S = 1
    n_max = max(1, math.isqrt(int(2 * omega / gamma)))
    sizes = draw(st.lists(st.integers(1, min(n_max, 4096)), min_size=1, max_size=6))
    sizes = [n for n in sizes if gamma * (n + n * n) / 2 <= omega] or [1]
    return omega, gamma, family, sizes


@PROPS
@given(mixer_budgets(), st.booleans(), st.booleans())
def test_pairs_are_the_rounded_roots_exactly_on_budget(budget, by_tokens, symmetric):
    omega, gamma, family, sizes = budget
    if min(_rounded_root(omega, n, gamma) for n in sizes) < 1:
        return  # Ω too small for one of them (tested below)
    kw = {"tokens": sizes} if by_tokens else {"channels": sizes}
    plan = plan_budget(omega, gamma=gamma, family=family, symmetric=symmetric, **kw)
    expected = set()
    for n in sizes:
        other = _rounded_root(omega, n, gamma)
        expected.add((other, n) if by_tokens else (n, other))  # (C, S)
    if symmetric:
        expected |= {(s, c) for c, s in expected}
    assert set(plan.pairs()) == expected
    assert len(plan.rows) == len(expected)
    key = (lambda p: (p[1], p[0])) if by_tokens else (lambda p: p)
    assert plan.pairs() == sorted(expected, key=key)
    for r in plan.rows:
        given_size = r.tokens if r.solved_for == "C" else r.channels
        solved = r.channels if r.solved_for == "C" else r.tokens
        if r.solved_for != "swap":
            assert _brackets(solved, given_size, gamma, omega)
        exact = _connections(r.tokens, r.channels, gamma, family)
        assert r.connections == float(exact)
        assert r.rel_error == pytest.approx(float((exact - omega) / omega), rel=1e-12, abs=1e-15)
        assert r.width == r.tokens * r.channels
        assert (r.density_token, r.density_channel) == (1 / r.channels, 1 / r.tokens)
        assert r.density == pytest.approx(omega / (gamma * r.width**2), rel=1e-12)
    solved_for = {(r.channels, r.tokens): r.solved_for for r in plan.rows}
    for n in sizes:
        other = _rounded_root(omega, n, gamma)
        pair = (other, n) if by_tokens else (n, other)
        assert solved_for[pair] == ("C" if by_tokens else "S")


@PROPS
@given(gammas, omegas)
def test_optimum_is_the_rounded_cube_root(gamma, omega):
    if omega < gamma:
        return
    plan = plan_budget(omega, gamma=gamma, family="mlp_mixer", channels=[1])
    o = plan.optimum
    a, b = _ab(gamma)
    # n = round_half_up((Ω/γ)^{1/3}) ⇔ (2n − 1)³ ≤ 8Ω/γ < (2n + 1)³, or n = 1 for a tiny Ω
    n = o.channels
    assert o.tokens == n and o.int_width == n * n
    assert n == 1 or (2 * n - 1) ** 3 * a <= 8 * omega * b * (1 + Fraction(1, 10**12))
    assert (2 * n + 1) ** 3 * a > 8 * omega * b * (1 - Fraction(1, 10**12))
    ratio = omega / gamma
    assert o.size == pytest.approx(ratio ** (1 / 3), rel=1e-13)
    assert o.width == pytest.approx(ratio ** (2 / 3), rel=1e-13)
    assert o.density == pytest.approx(ratio ** (-1 / 3), rel=1e-12)
    assert o.connections == float(_connections(n, n, gamma, "mlp_mixer"))
    assert o.rel_error == pytest.approx((o.connections - omega) / omega, rel=1e-12, abs=1e-15)
    lo, hi = plan.width_bounds
    assert lo == pytest.approx((math.sqrt(1 + 8 * ratio) - 1) / 2, rel=1e-12)
    assert hi == pytest.approx(o.width, rel=1e-13)


@pytest.mark.parametrize("omega, gamma", [(2**19, 2.0), (2**16, 3.0), (50_000, 0.5), (2**14, 4.0), (2**12, 1.25)])
def test_every_pair_against_brute_force_enumeration(omega, gamma):
    """Every C with a partner, and its S found by walking S = 1, 2, ... (no root formula at all)."""
    a, b = _ab(gamma)
    expected = []
    C = 1
    while a * C * (1 + 2 * C) <= 8 * b * omega:  # Ω(½, C) ≤ Ω: some S ≥ 1 rounds to the root
        S = 1
        while a * C * (2 * S + 1) * (2 * S + 1 + 2 * C) <= 8 * b * omega:
            S += 1
        expected.append((C, S))
        C += 1
    plan = plan_budget(omega, gamma=gamma, family="mlp_mixer", channels=[c for c, _ in expected])
    assert plan.pairs() == expected
    by_tokens = plan_budget(omega, gamma=gamma, family="mlp_mixer", tokens=[c for c, _ in expected])
    assert sorted(by_tokens.pairs()) == sorted((s, c) for c, s in expected)  # Ω is symmetric in S, C
    # the next C has no partner: the planner says so
    with pytest.raises(ValueError, match="too small"):
        plan_budget(omega, gamma=gamma, family="mlp_mixer", channels=[C])


# Ω = 192: C = 8 has S = 4 exactly, the smallest partner the default enumeration keeps
@pytest.mark.parametrize("omega, gamma", [(2**18, 1.0), (2**19, 2.0), (3, 1.0), (40, 1.0), (2**30, 4.0), (192, 1.0)])
def test_default_channels_against_enumeration(omega, gamma):
    family = "s_mixer" if gamma == 1 else "mlp_mixer"
    powers = [2**k for k in range(40) if _rounded_root(omega, 2**k, gamma) >= 1]
    picks = [c for c in powers if c >= 4 and _rounded_root(omega, c, gamma) >= 4]
    expected = [(c, _rounded_root(omega, c, gamma)) for c in (picks or powers)]
    assert plan_budget(omega, gamma=gamma, family=family).pairs() == expected
    if omega == 192:
        assert expected == [(4, 8), (8, 4)]


@PROPS
@given(omegas, st.integers(0, 12), gammas)
@example(1, 0, 1.0)  # the narrowest SW-MLP: m = 1
@example(9, 2, 1.0)  # sqrt(36) = 6 exactly
def test_sw_mlp_width_is_the_rounded_root(omega, k, gamma):
    """m = round_half_up(sqrt(Ω/(γp))) ⇔ (2m − 1)²·γp ≤ 4Ω < (2m + 1)²·γp, with p = 2^-k."""
    p = 2.0**-k
    if omega < gamma:  # refused: see test_budget.py
        return
    plan = plan_budget(omega, gamma=gamma, family="sw_mlp", densities=[p])
    (r,) = plan.rows
    gp = Fraction(gamma) * Fraction(p)
    m = r.width
    slack = Fraction(1, 10**12)
    assert (2 * m - 1) ** 2 * gp <= 4 * omega * (1 + slack) and 4 * omega * (1 - slack) < (2 * m + 1) ** 2 * gp
    assert r.connections == float(gp * m * m)
    assert r.rel_error == pytest.approx(float((gp * m * m - omega) / omega), rel=1e-12, abs=1e-15)
    assert (r.family, r.density, r.solved_for) == ("sw_mlp", p, "m")


def test_sw_mlp_default_densities_and_order():
    plan = plan_budget(2**18, family="sw_mlp")
    assert [r.density for r in plan.rows] == [2.0**-n for n in range(9)]  # widest last
    assert plan.widths() == [_rounded_sqrt(2**18 * 2**n) for n in range(9)]
    assert plan.optimum is None and plan.width_bounds is None


def _rounded_sqrt(x) -> int:
    """round_half_up(sqrt(x)) for a rational x ≥ 0: the m with (2m − 1)² ≤ 4x < (2m + 1)²."""
    x = Fraction(x)
    m = (math.isqrt(math.floor(4 * x)) + 1) // 2
    assert (2 * m - 1) ** 2 <= 4 * x < (2 * m + 1) ** 2
    return m


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(st.floats(1.0, 1e9), st.floats(0.05, 8.0), st.floats(1.0, 500.0))
def test_budget_identities_in_float64(omega, gamma, size):
    """The closed forms of docs/science.md §3 satisfy their defining equations to float64 rounding."""
    if gamma * (size + size * size) / 2 > omega:
        return  # the partner would be < 1: outside the planner's domain
    S = B.tokens_for(omega, size, gamma)
    assert gamma * (size * S * S + size * size * S) / 2 == pytest.approx(omega, rel=1e-11)
    assert B.channels_for(omega, size, gamma) == S  # Ω symmetric in S and C
    assert B.omega_mixer(S, size, gamma) == pytest.approx(omega, rel=1e-11)
    assert B.channels_for(omega, S, gamma) == pytest.approx(size, rel=1e-9)
    c_star, m_star = B.optimal_size(omega, gamma), B.max_width(omega, gamma)
    assert c_star**3 * gamma == pytest.approx(omega, rel=1e-12) and m_star == pytest.approx(c_star**2, rel=1e-12)
    assert size * S <= m_star * (1 + 1e-12)  # m = S·C peaks at C*
    lo, hi = B.width_bounds(omega, gamma)
    assert lo * (lo + 1) / 2 * gamma == pytest.approx(omega, rel=1e-11) and hi == m_star
    m = size * S
    g = B.gamma_for_width(omega, m, size)
    assert g == pytest.approx(gamma, rel=1e-9)  # the γ that spends Ω at (S, C) is the γ we started from
    assert g <= B.gamma_max(omega, m) * (1 + 1e-12)
    assert B.gamma_max(omega, m) * m**1.5 == pytest.approx(omega, rel=1e-12)
    assert B.min_omega(gamma, channels=size) == pytest.approx(gamma * (size + size * size) / 2, rel=1e-15)
    assert B.min_omega(gamma, tokens=size) == B.min_omega(gamma, channels=size)
    p = min(1.0, 1 / size)
    w = B.sw_mlp_width(omega, p, gamma)
    assert (p * gamma * w * w == pytest.approx(omega, rel=1e-12)
            and B.sw_mlp_density(omega, w, gamma) == pytest.approx(p, rel=1e-12))
    assert B.omega_sw_mlp(w, p, gamma) == pytest.approx(omega, rel=1e-12)


# ----------------------------------------------------------------------------- the CLI, against the oracle


def test_cli_gamma_2_against_enumeration(capsys):
    omega, gamma, tokens = 2**19, 2.0, [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 64]
    assert cli.main(["plan", "--omega", "2^19", "--gamma", "2", "--family", "mlp_mixer",
                     "--tokens", ",".join(map(str, tokens)), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["omega"], data["gamma"], data["family"]) == (omega, gamma, "mlp_mixer")
    expected = [(S, _rounded_root(omega, S, gamma)) for S in tokens]
    assert [(r["tokens"], r["channels"]) for r in data["rows"]] == expected
    assert expected[:3] == [(4, 360), (8, 252), (12, 203)]  # Fig. 4 of the paper
    for r in data["rows"]:
        exact = _connections(r["tokens"], r["channels"], gamma, "mlp_mixer")
        assert r["connections"] == float(exact) and r["width"] == r["tokens"] * r["channels"]
        assert r["rel_error"] == pytest.approx(float((exact - omega) / omega), rel=1e-12)
        assert r["solved_for"] == "C"
    assert data["optimum"]["channels"] == data["optimum"]["tokens"] == 64  # (2^18)^{1/3} = 64
    assert data["optimum"]["size"] == pytest.approx(64.0, rel=1e-14)
    assert data["width_bounds"] == pytest.approx([(math.sqrt(1 + 8 * 2**18) - 1) / 2, 4096.0], rel=1e-14)


def test_cli_table_gamma_3_against_enumeration(capsys):
    omega, gamma, channels = 10**6, 3.0, [5, 50, 200]
    assert cli.main(["plan", "--omega", "1000000", "--gamma", "3", "--family", "mlp_mixer",
                     "--channels", "200,5,50", "--symmetric", "--density", "0.25"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "budget Ω = 1e+06 connections per layer, γ = 3, family = mlp_mixer"
    assert lines[1].split() == ["family", "C", "S", "m", "1/C", "1/S", "p=Ω/(γm²)", "connections", "rel.err"]
    pairs = [(c, _rounded_root(omega, c, gamma)) for c in sorted(channels)]
    pairs = sorted(set(pairs) | {(s, c) for c, s in pairs})
    body = [l.split() for l in lines[3:-1]]
    assert [(int(r[1]), int(r[2])) for r in body[:-1]] == pairs
    for r in body[:-1]:
        C, S = int(r[1]), int(r[2])
        assert r[0] == "mlp_mixer" and int(r[3]) == C * S
        assert float(r[7]) == pytest.approx(float(_connections(S, C, gamma, "mlp_mixer")), abs=0.5)
        assert float(r[8].rstrip("%")) / 100 == pytest.approx(
            float((_connections(S, C, gamma, "mlp_mixer") - omega) / omega), abs=5e-6 + 1e-12)
    sw = body[-1]
    assert (sw[0] == "sw_mlp" and sw[1] == sw[2] == "-"
            and int(sw[3]) == _rounded_sqrt(Fraction(omega) / (Fraction(gamma) / 4)))
    assert lines[-1].startswith("optimum: C* = S* = (Ω/γ)^(1/3) = ")
    n = next(n for n in range(1, 200) if 8 * omega < (2 * n + 1) ** 3 * gamma)  # (2n − 1)³ ≤ 8Ω/γ < (2n + 1)³
    assert f"nearest integers C = S = {n} (m = {n * n}, " in lines[-1]
