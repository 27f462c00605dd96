"""The connection budget Ω (docs/science.md §3): formulas, and every integer list the paper uses."""
import json
import math

import pytest

from mlplab.theory import budget as B
from mlplab.theory import plan_budget


@pytest.mark.parametrize(
    "omega, channels, tokens",
    [
        (2**18, [16, 32, 48], [173, 113, 83]),
        (2**21, [16, 32, 64], [504, 346, 226]),
        (2**27, [128, 256], [1386, 904]),
    ],
)
def test_paper_pairs_and_symmetric_pairs(omega, channels, tokens):
    plan = plan_budget(omega, gamma=1.0, family="s_mixer", channels=channels)
    assert plan.pairs() == list(zip(channels, tokens))
    sym = plan_budget(omega, channels=channels, symmetric=True)
    expected = sorted(list(zip(channels, tokens)) + list(zip(tokens, channels)))
    assert sym.pairs() == expected
    swapped = [r for r in sym.rows if r.solved_for == "swap"]
    assert [(r.channels, r.tokens) for r in swapped] == sorted(zip(tokens, channels))


def test_paper_pairs_written_out():
    # docs/science.md §3, literally
    assert plan_budget(2**18, channels=[16, 32, 48], symmetric=True).pairs() == [
        (16, 173), (32, 113), (48, 83), (83, 48), (113, 32), (173, 16)]
    assert plan_budget(2**21, channels=[16, 32, 64], symmetric=True).pairs() == [
        (16, 504), (32, 346), (64, 226), (226, 64), (346, 32), (504, 16)]
    assert plan_budget(2**27, channels=[128, 256], symmetric=True).pairs() == [
        (128, 1386), (256, 904), (904, 256), (1386, 128)]


def test_fig4_tokens_to_channels_gamma_2():
    S = [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 64]
    C = [360, 252, 203, 173, 152, 136, 124, 113, 104, 96, 89, 83, 64]
    plan = plan_budget(2**19, gamma=2, family="mlp_mixer", tokens=S)
    assert [r.tokens for r in plan.rows] == S  # listed in the order of S
    assert [r.channels for r in plan.rows] == C
    assert all(r.solved_for == "C" for r in plan.rows)


def test_sw_mlp_widths_round_to_nearest():
    sparsity = [0.1, 0.3, 0.5, 0.7, 0.9]
    plan = plan_budget(2**18, family="sw_mlp", densities=[1 - s for s in sparsity])
    assert plan.widths() == [540, 612, 724, 935, 1619]
    # the convention: nearest integer (floor would give 539 and 611, ceil 725 and 1620)
    assert [math.floor(B.sw_mlp_width(2**18, 1 - s)) for s in sparsity][:2] == [539, 611]
    for r in plan.rows:
        assert abs(r.rel_error) < 2e-3
        assert r.channels is None and r.tokens is None


def test_imagenet_mixer_b16_budget():
    omega = 290217984
    assert B.omega_mixer(196, 768, gamma=4) == omega
    plan = plan_budget(omega, gamma=4, family="mlp_mixer", channels=[768])
    assert plan.pairs() == [(768, 196)]
    assert plan.rows[0].rel_error == 0.0 and plan.rows[0].connections == omega
    assert plan_budget(omega, gamma=4, family="mlp_mixer", tokens=[196]).pairs() == [(768, 196)]
    # Mixer-B-W (Table 1): S = 256, C = 588 spends the same budget with γ ≈ 4.57
    assert B.gamma_for_width(omega, 256 * 588, 588) == pytest.approx(4.57, abs=5e-3)


def test_formulas_consistent():
    om, g = 123456.0, 1.7
    for C in (3, 17, 64, 250):
        S = B.tokens_for(om, C, g)
        assert B.omega_mixer(S, C, g) == pytest.approx(om, rel=1e-12)
        assert B.channels_for(om, S, g) == pytest.approx(C, rel=1e-12)
    c_star = B.optimal_size(om, g)
    assert c_star == pytest.approx((om / g) ** (1 / 3))
    assert B.tokens_for(om, c_star, g) == pytest.approx(c_star, rel=1e-12)
    m_star = B.max_width(om, g)
    assert m_star == pytest.approx(c_star**2, rel=1e-12)
    # m = S·C is single-peaked at C*
    c_max = int(B.width_bounds(om, g)[0])  # largest C with S >= 1 (bounds hold for S, C >= 1)
    widths = [C * B.tokens_for(om, C, g) for C in range(1, c_max + 1)]
    peak = max(range(len(widths)), key=widths.__getitem__) + 1
    assert abs(peak - c_star) < 1
    assert max(widths) <= m_star * (1 + 1e-12)
    lo, hi = B.width_bounds(om, g)
    assert lo == pytest.approx(1 * B.tokens_for(om, 1, g)) and hi == pytest.approx(m_star)
    assert all(lo - 1e-9 <= w <= hi + 1e-9 for w in widths)
    # p = Ω/(γ m²) is smallest at the optimum
    p_grid = min(B.sw_mlp_density(om, w, g) for w in widths)
    assert (B.sw_mlp_density(om, m_star, g) <= p_grid
            and B.sw_mlp_density(om, m_star, g) == pytest.approx(p_grid, rel=1e-4))
    # SW-MLP: Ω = p γ m²
    assert B.omega_sw_mlp(B.sw_mlp_width(om, 0.25, g), 0.25, g) == pytest.approx(om)
    assert B.sw_mlp_width(om, 1.0, 1.0) == pytest.approx(math.sqrt(om))
    # γ at fixed m: spends Ω exactly; largest at C = S = √m with γ_max = Ω/m^{3/2}
    m = 4096
    for C in (16, 32, 64, 128):
        gam = B.gamma_for_width(om, m, C)
        assert B.omega_mixer(m / C, C, gam) == pytest.approx(om)
        assert gam <= B.gamma_max(om, m) * (1 + 1e-12)
    assert B.gamma_for_width(om, m, 64) == pytest.approx(B.gamma_max(om, m))


def test_optimum_and_default_enumeration():
    plan = plan_budget(2**18)
    assert plan.optimum.size == pytest.approx(64.0) and plan.optimum.width == pytest.approx(4096.0)
    assert plan.optimum.density == pytest.approx(1 / 64)
    assert (plan.optimum.channels, plan.optimum.tokens, plan.optimum.int_width) == (64, 64, 4096)
    cs = [r.channels for r in plan.rows]
    assert cs and all(c & (c - 1) == 0 for c in cs)  # powers of two
    assert (64, 64) in plan.pairs()
    assert all(r.tokens >= 4 and r.channels >= 4 for r in plan.rows)
    tiny = plan_budget(3)  # too small for S, C >= 4: fall back to anything that fits
    assert tiny.pairs() and all(s >= 1 for _, s in tiny.pairs())


def test_row_fields_and_mlp_mixer_connections():
    r = plan_budget(2**18, channels=[16]).rows[0]
    assert (r.width, r.density_token, r.density_channel) == (16 * 173, 1 / 16, 1 / 173)
    assert r.density == pytest.approx(2**18 / (16 * 173) ** 2)
    assert r.connections == 16 * 173 * (16 + 173) / 2
    assert r.rel_error == pytest.approx((r.connections - 2**18) / 2**18)
    # MLP-Mixer with fractional γ: connections use the integer hidden widths round(γS), round(γC)
    r = plan_budget(2**18, gamma=1.5, family="mlp_mixer", channels=[16]).rows[0]
    assert r.connections == r.tokens * 16 * (B.round_half_up(1.5 * r.tokens) + 24) / 2


def test_mixer_plan_with_sw_mlp_comparison_rows():
    plan = plan_budget(2**18, channels=[32], densities=[0.5])
    assert [r.family for r in plan.rows] == ["mixer", "sw_mlp"]
    assert plan.rows[1].width == 724


def test_to_dict_json_and_table():
    plan = plan_budget("2^18", channels=[16, 32, 48], symmetric=True)
    d = json.loads(plan.to_json())
    assert d["omega"] == 262144 and d["gamma"] == 1.0 and d["family"] == "s_mixer"
    assert [(r["channels"], r["tokens"]) for r in d["rows"]] == plan.pairs()
    assert d["optimum"]["channels"] == 64 and len(d["width_bounds"]) == 2
    text = plan.format_table()
    assert "2^18 = 262144" in text and "173" in text and "optimum: C* = S*" in text
    assert len(text.splitlines()) == 3 + 6 + 1


@pytest.mark.parametrize("text, value", [("2^18", 262144), ("2**21", 2**21), ("262144", 262144),
                                         (" 290217984 ", 290217984), ("1e3", 1000), (1024, 1024)])
def test_parse_omega(text, value):
    assert B.parse_omega(text) == value


@pytest.mark.parametrize("text", ["2^x", "abc", "0", "-5", "2.5", "2^-1", ""])
def test_parse_omega_refuses(text):
    with pytest.raises(ValueError):
        B.parse_omega(text)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(omega=0), "must be > 0"),
        (dict(omega=-3.0), "must be > 0"),
        (dict(omega=2**18, gamma=0.0), "gamma"),
        (dict(omega=2**18, gamma=-1.0, family="mlp_mixer"), "gamma"),
        (dict(omega=2**18, gamma=2.0), "S-Mixer has γ = 1"),
        (dict(omega=0.5), "needs Ω >= γ"),
        (dict(omega=100, channels=[64]), r"raise Ω to at least 2080"),
        (dict(omega=100, tokens=[64]), r"raise Ω to at least 2080"),
        (dict(omega=2**18, channels=[0]), ">= 1"),
        (dict(omega=2**18, tokens=[-4]), ">= 1"),
        (dict(omega=2**18, channels=[2.5]), "whole numbers"),
        (dict(omega=2**18, channels=[16], tokens=[16]), "not both"),
        (dict(omega=2**18, family="sw_mlp", densities=[0.0]), r"\(0, 1\]"),
        (dict(omega=2**18, family="sw_mlp", densities=[1.5]), r"\(0, 1\]"),
        (dict(omega=2**18, family="sw_mlp", channels=[16]), "no \\(S, C\\) pair"),
        (dict(omega=2**18, family="sw_mixer"), "unknown family"),
        (dict(omega=2**18, channels=[]), "at least one"),
    ],
)
def test_impossible_inputs_say_what_to_change(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_budget(**kwargs)


def test_min_omega():
    assert B.min_omega(1.0) == 1.0
    assert B.min_omega(2.0, channels=64) == 2 * (64 + 64**2) / 2
    assert B.round_half_up(2.5) == 3 and B.round_half_up(173.49) == 173
