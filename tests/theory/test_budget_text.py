"""What the planner prints and says, pinned: the table, the optimum line, JSON layout, default
arguments and each refusal's sentence (docs/science.md §3). Every number in the pinned tables was
checked by hand: e.g. C = 16 at Ω = 2^18: S = 173, m = 2768, p = 2^18/2768² = 0.03421,
connections 16·173·189/2 = 261576, rel.err −568/2^18 = −0.217 %."""
import json

import pytest

from mlplab.theory import budget as B
from mlplab.theory import plan_budget

MIXER_TABLE = """\
budget Ω = 2^18 = 262144 connections per layer, γ = 1, family = s_mixer
 family   C    S     m     1/C      1/S  p=Ω/(γm²)  connections  rel.err
-------  --  ---  ----  ------  -------  ---------  -----------  -------
s_mixer  16  173  2768  0.0625  0.00578    0.03421       261576  -0.217%
 sw_mlp   -    -   724       -        -        0.5       262088  -0.021%
optimum: C* = S* = (Ω/γ)^(1/3) = 64.00, max m = (Ω/γ)^(2/3) = 4096.0, min SW-MLP density p = 0.01563; \
nearest integers C = S = 64 (m = 4096, +0.00% vs Ω); Mixer widths lie in [723.6, 4096.0]"""

SW_TABLE = """\
budget Ω = 1000 connections per layer, γ = 1, family = sw_mlp
family  C  S   m  1/C  1/S  p=Ω/(γm²)  connections  rel.err
------  -  -  --  ---  ---  ---------  -----------  -------
sw_mlp  -  -  32    -    -          1         1024  +2.400%
sw_mlp  -  -  63    -    -       0.25          992  -0.775%
SW-MLP: m = sqrt(Ω/(γp)) grows without bound as p -> 0; smallest width (dense, p = 1): m = 31.6"""


def test_mixer_table_pinned():
    assert plan_budget(2**18, channels=[16], densities=[0.5]).format_table() == MIXER_TABLE


def test_sw_mlp_table_pinned():
    assert plan_budget(1000, family="sw_mlp", densities=[0.25, 1.0]).format_table() == SW_TABLE


def test_table_title_for_other_budgets_and_gammas():
    title = plan_budget(3 * 2**10, gamma=2.5, family="mlp_mixer", channels=[4]).format_table().splitlines()[0]
    assert title == "budget Ω = 3072 connections per layer, γ = 2.5, family = mlp_mixer"
    assert plan_budget(1.5, channels=[1]).format_table().startswith("budget Ω = 1.5 connections")
    assert plan_budget(1, channels=[1]).format_table().startswith("budget Ω = 2^0 = 1 connections")
    row = plan_budget(2**12, gamma=2, family="mlp_mixer", channels=[8]).format_table().splitlines()[3].split()
    assert row[0] == "mlp_mixer"  # a Mixer row is labelled with the plan's family


def test_json_layout_and_fields():
    plan = plan_budget(2**10, channels=[4])
    text = plan.to_json()
    assert text.startswith('{\n  "omega": 1024,\n  "gamma": 1.0,\n  "family": "s_mixer",\n  "rows": [\n    {\n')
    assert plan.to_json(indent=0).startswith('{\n"omega": 1024')
    d = json.loads(text)
    assert set(d) == {"omega", "gamma", "family", "rows", "optimum", "width_bounds"}
    # C = 4: 4S² + 16S = 2048 gives S = 20.7 -> 21
    assert d["rows"] == [{"family": "mixer", "channels": 4, "tokens": 21, "width": 84, "density_token": 0.25,
                          "density_channel": 1 / 21, "density": 1024 / 84**2, "connections": 1050.0,
                          "rel_error": 26 / 1024, "solved_for": "S"}]
    assert d["optimum"]["channels"] == d["optimum"]["tokens"] == 10 and d["optimum"]["int_width"] == 100
    assert d["width_bounds"] == list(B.width_bounds(1024))
    sw = json.loads(plan_budget(2**10, family="sw_mlp", densities=[1.0]).to_json())
    assert sw["optimum"] is None and sw["width_bounds"] is None and sw["rows"][0]["width"] == 32
    assert plan_budget(100.5, channels=[2]).to_dict()["omega"] == 100.5  # a fractional Ω stays a float


def test_default_arguments_are_gamma_1():
    assert B.omega_mixer(3, 5) == 3 * 5 * 8 / 2
    assert B.omega_sw_mlp(10, 0.5) == 50.0
    assert B.tokens_for(60, 3) == 5.0 and B.channels_for(60, 3) == 5.0  # (3·25 + 9·5)/2 = 60
    assert B.optimal_size(27) == pytest.approx(3.0) and B.max_width(27) == pytest.approx(9.0)
    assert B.width_bounds(3) == (2.0, 3 ** (2 / 3))  # (sqrt(1 + 24) − 1)/2
    assert B.sw_mlp_width(50, 0.5) == 10.0 and B.sw_mlp_density(50, 10) == 0.5
    assert B.min_omega() == 1.0 and B.min_omega(channels=3) == 6.0 and B.min_omega(tokens=4) == 10.0
    plan = plan_budget(60, channels=[3])
    assert (plan.gamma, plan.family, plan.pairs()) == (1.0, "s_mixer", [(3, 5)])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: B.omega_mixer(0.5, 3), "tokens S must be >= 1, got 0.5"),
        (lambda: B.omega_mixer(3, 0), "channels C must be >= 1, got 0"),
        (lambda: B.omega_mixer(3, float("nan")), "channels C must be a number >= 1, got nan"),
        (lambda: B.omega_mixer(True, 3), "tokens S must be a number >= 1, got True"),
        (lambda: B.omega_mixer(3, 3, gamma=float("inf")), "gamma (expansion factor) must be a finite number, got inf"),
        (lambda: B.omega_mixer(3, 3, gamma=True), "gamma (expansion factor) must be a finite number, got True"),
        (lambda: B.omega_mixer(3, 3, gamma=-1),
         "gamma (expansion factor) must be > 0, got -1; the S-Mixer uses gamma=1"),
        (lambda: B.tokens_for("5", 3), "omega must be a finite number of connections, got '5'"),
        (lambda: B.tokens_for(False, 3), "omega must be a finite number of connections, got False"),
        (lambda: B.tokens_for(0, 3), "omega (connections per layer) must be > 0, got 0; e.g. omega=2^18"),
        (lambda: B.tokens_for(2.0**63, 3), "omega=9.22e+18 is too large; use at most 2^62 connections per layer"),
        (lambda: B.omega_sw_mlp(10, 0), "density p must be in (0, 1] (p = 1 is a dense MLP), got 0; "
                                        "a sparsity of 1-p = 0.9 is density p = 0.1"),
        (lambda: B.omega_sw_mlp(10, True), "density p must be a number in (0, 1], got True"),
        (lambda: B.omega_sw_mlp(10, float("nan")), "density p must be a number in (0, 1], got nan"),
        (lambda: B.sw_mlp_width(10, 1.0000001), "density p must be in (0, 1]"),
        (lambda: B.min_omega(1.0, channels=2, tokens=2), "give channels or tokens, not both"),
        (lambda: B.min_omega(1.0, tokens=0), "tokens S must be >= 1, got 0"),
        (lambda: B.min_omega(1.0, channels=0), "channels C must be >= 1, got 0"),
        (lambda: B.parse_omega(True), "omega must be a number, got True"),
        (lambda: B.parse_omega("2^x"), "cannot read omega '2^x'; write e.g. 2^18 or 262144"),
        (lambda: B.parse_omega("2.5"), "omega must be a whole number of connections, got '2.5'"),
        (lambda: B.parse_omega(float("inf")), "omega must be a whole number of connections, got inf"),
        (lambda: B.parse_omega("9^99"), "omega=2.95e+94 is too large"),
        (lambda: B.parse_omega("1e999"), "omega must be a whole number of connections, got '1e999'"),
    ],
)
def test_refusals_say_what_is_wrong(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value).startswith(message)


OMEGA_BAD = "omega (connections per layer) must be > 0, got -1"
GAMMA_BAD = "gamma (expansion factor) must be > 0, got 0"


@pytest.mark.parametrize(
    "call, message",
    [
        # every formula checks every argument, and names it
        (lambda: B.omega_sw_mlp(0.5, 1.0), "width m must be >= 1, got 0.5"),
        (lambda: B.omega_sw_mlp(2, 1.0, gamma=0), GAMMA_BAD),
        (lambda: B.sw_mlp_density(10, 0.5), "width m must be >= 1, got 0.5"),
        (lambda: B.sw_mlp_density(-1, 2), OMEGA_BAD),
        (lambda: B.sw_mlp_density(10, 2, gamma=0), GAMMA_BAD),
        (lambda: B.sw_mlp_width(-1, 0.5), OMEGA_BAD),
        (lambda: B.sw_mlp_width(10, 0.5, gamma=0), GAMMA_BAD),
        (lambda: B.sw_mlp_width(10, 0), "density p must be in (0, 1]"),
        (lambda: B.gamma_max(10, 0.5), "width m must be >= 1, got 0.5"),
        (lambda: B.gamma_max(-1, 2), OMEGA_BAD),
        (lambda: B.gamma_for_width(10, 0.5, 2), "width m must be >= 1, got 0.5"),
        (lambda: B.gamma_for_width(10, 4, 0.5), "channels C must be >= 1, got 0.5"),
        (lambda: B.gamma_for_width(-1, 4, 2), OMEGA_BAD),
        (lambda: B.tokens_for(10, 0.5), "channels C must be >= 1, got 0.5"),
        (lambda: B.tokens_for(10, 2, gamma=0), GAMMA_BAD),
        (lambda: B.channels_for(10, 0.5), "tokens S must be >= 1, got 0.5"),
        (lambda: B.channels_for(-1, 2), OMEGA_BAD),
        (lambda: B.channels_for(10, 2, gamma=0), GAMMA_BAD),
        (lambda: B.optimal_size(-1), OMEGA_BAD),
        (lambda: B.optimal_size(10, gamma=0), GAMMA_BAD),
        (lambda: B.max_width(-1), OMEGA_BAD),
        (lambda: B.max_width(10, gamma=0), GAMMA_BAD),
        (lambda: B.width_bounds(-1), OMEGA_BAD),
        (lambda: B.width_bounds(10, gamma=0), GAMMA_BAD),
        (lambda: B.min_omega(0), GAMMA_BAD),
        (lambda: B.omega_mixer(3, 3, gamma=0), GAMMA_BAD),
    ],
)
def test_every_formula_checks_its_arguments(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(omega=100, channels=[64]),
         "Ω = 100 is too small for C = 64 at γ = 1: it gives S = 0.049 < 1; lower C or raise Ω to at least "
         "2080 (= γ(C + C²)/2)"),
        (dict(omega=100, tokens=[64]),
         "Ω = 100 is too small for S = 64 at γ = 1: it gives C = 0.049 < 1; lower S or raise Ω to at least "
         "2080 (= γ(S + S²)/2)"),
        (dict(omega=100, gamma=2.0, family="mlp_mixer", channels=[64]),
         "Ω = 100 is too small for C = 64 at γ = 2: it gives S = 0.024 < 1; lower C or raise Ω to at least "
         "4160 (= γ(C + C²)/2)"),
        (dict(omega=0.5), "Ω = 0.5 is too small: the smallest model (S = C = 1) needs Ω >= γ = 1"),
        (dict(omega=2**18, gamma=2.0), "the S-Mixer has γ = 1 (got gamma=2.0); use family='mlp_mixer' for γ != 1"),
        (dict(omega=2**18, family="x"), "unknown family 'x'; choose one of s_mixer, mlp_mixer, sw_mlp"),
        (dict(omega=2**18, channels=[4], tokens=[4]), "give channels or tokens, not both (the other is solved from Ω)"),
        (dict(omega=2**18, densities=[]), "densities: give at least one value in (0, 1]"),
        (dict(omega=2**18, channels=[True]), "channels must be whole numbers >= 1, got True"),
        (dict(omega=2**18, tokens=["4"]), "tokens must be whole numbers >= 1, got '4'"),
        (dict(omega=2**18, tokens=[0]), "tokens must be >= 1, got 0"),
        (dict(omega=2**18, tokens=[]), "tokens: give at least one value"),
        (dict(omega=2**18, family="sw_mlp", tokens=[4]), "an SW-MLP has no (S, C) pair; give densities (p)"),
        (dict(omega=2**18, family="sw_mlp", symmetric=True), "an SW-MLP has no (S, C) pair"),
    ],
)
def test_plan_refusals_are_whole_sentences(kwargs, message):
    with pytest.raises(ValueError) as e:
        plan_budget(**kwargs)
    assert str(e.value).startswith(message)


def test_boundaries_accepted():
    assert B.omega_sw_mlp(1, 1.0) == 1.0  # p = 1 and m = 1 are allowed
    assert B.tokens_for(2**62, 1) > 0  # the largest Ω
    assert B.omega_mixer(1, 1, gamma=1e-9) == 1e-9
    assert plan_budget(1, channels=[1]).pairs() == [(1, 1)]  # Ω = γ: the smallest model
    assert plan_budget(3, channels=[2]).pairs() == [(2, 1)]  # Ω = γ(C + C²)/2 exactly: S = 1
    assert B.parse_omega(" 2 ^ 10 ") == 1024 and B.parse_omega("1_024") == 1024 and B.parse_omega("1,024") == 1024
    assert B.parse_omega(2**62) == 2**62 and B.parse_omega("2.0^3") == 8
    assert B.parse_omega("2^1_0") == 1024 and B.parse_omega("1__024") == 1024  # separators anywhere


def test_sw_mlp_line_divides_by_gamma_and_an_empty_plan_prints():
    plan = plan_budget(1000, gamma=4.0, family="sw_mlp", densities=[1.0])
    assert plan.optimum_line().endswith("smallest width (dense, p = 1): m = 15.8")  # sqrt(1000/4)
    empty = B.BudgetPlan(omega=8, gamma=1.0, family="sw_mlp")
    assert empty.format_table().splitlines() == [
        "budget Ω = 2^3 = 8 connections per layer, γ = 1, family = sw_mlp",
        "family  C  S  m  1/C  1/S  p=Ω/(γm²)  connections  rel.err",
        "------  -  -  -  ---  ---  ---------  -----------  -------",
        "SW-MLP: m = sqrt(Ω/(γp)) grows without bound as p -> 0; smallest width (dense, p = 1): m = 2.8"]
    assert [B._omega_str(x) for x in (0, 3, 4, 2.5, 1024.0)] == ["0", "3", "2^2 = 4", "2.5", "2^10 = 1024"]
