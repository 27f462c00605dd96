"""The shared building blocks (mlplab.layers.common) against formulas written here: each
activation by name, the two-layer MLP and its column form, the left GEMM, and stochastic depth's
law (a sample's branch dropped with probability p, the kept ones scaled by 1/(1 − p))."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from scipy.stats import binomtest

from mlplab.layers.common import (
    ACTIVATIONS,
    LEFT_GEMM_MIN_COLS,
    DropPath,
    GELUTanh,
    LinearAct,
    Mlp,
    drop_path_rates,
    left_gemm_pays,
    left_linear,
    make_act,
)

f64 = torch.float64
X = torch.linspace(-4, 4, 81, dtype=f64)
PHI = 0.5 * (1 + torch.erf(X / math.sqrt(2)))  # the standard normal CDF
FORMULAS = {
    "gelu": X * PHI,
    "gelu_tanh": 0.5 * X * (1 + torch.tanh(math.sqrt(2 / math.pi) * (X + 0.044715 * X ** 3))),
    "relu": X.clamp(min=0),
    "tanh": (torch.exp(X) - torch.exp(-X)) / (torch.exp(X) + torch.exp(-X)),
    "silu": X / (1 + torch.exp(-X)),
    "identity": X,
}


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_each_activation_is_its_formula(name):
    torch.testing.assert_close(make_act(name)(X), FORMULAS[name], rtol=1e-12, atol=1e-12)


def test_the_activation_table_and_its_refusal():
    assert sorted(ACTIVATIONS) == sorted(FORMULAS)
    assert isinstance(GELUTanh(), nn.GELU) and GELUTanh().approximate == "tanh"
    assert make_act("gelu") is not make_act("gelu")  # a new module each time
    with pytest.raises(ValueError, match=r"unknown activation 'swish'; choose one of \['gelu', 'gelu_tanh', "
                                         r"'identity', 'relu', 'silu', 'tanh'\]") as e:
        make_act("swish")
    assert e.value.__cause__ is None and e.value.__suppress_context__


def _by_hand(fc1: nn.Linear, fc2: nn.Linear, x: torch.Tensor, act: str) -> torch.Tensor:
    h = x @ fc1.weight.T + fc1.bias
    h = {"relu": h.clamp(min=0), "tanh": torch.tanh(h)}[act]
    return h @ fc2.weight.T + fc2.bias


def test_mlp_is_fc2_act_fc1_and_its_column_form():
    torch.manual_seed(0)
    mlp = Mlp(5, 7, 3, act="tanh").to(f64)
    assert (mlp.fc1.in_features, mlp.fc1.out_features, mlp.fc2.in_features, mlp.fc2.out_features) == (5, 7, 7, 3)
    assert isinstance(mlp.drop1, nn.Identity) and isinstance(mlp.drop2, nn.Identity)  # no dropout at drop = 0
    x = torch.randn(2, 4, 5, dtype=f64)
    torch.testing.assert_close(mlp(x), _by_hand(mlp.fc1, mlp.fc2, x, "tanh"), rtol=0, atol=1e-12)
    cols = torch.randn(2, 5, 6, dtype=f64)  # every column mapped: (B, in, cols) -> (B, out, cols)
    torch.testing.assert_close(mlp.forward_columns(cols),
                               _by_hand(mlp.fc1, mlp.fc2, cols.transpose(1, 2), "tanh").transpose(1, 2),
                               rtol=0, atol=1e-12)
    assert isinstance(Mlp(5, 7, 3).act, nn.GELU)  # the default activation


def test_mlp_dropout_is_active_in_training_only():
    torch.manual_seed(0)
    mlp = Mlp(4, 64, 64, act="identity", drop=0.5).to(f64)
    assert mlp.drop1.p == 0.5 and mlp.drop2.p == 0.5
    x = torch.randn(3, 4, dtype=f64)
    with torch.no_grad():
        mlp.fc2.weight.copy_(torch.eye(64, dtype=f64))
        mlp.fc2.bias.zero_()
        mlp.eval()
        clean = mlp(x)
        torch.testing.assert_close(mlp.forward_columns(x.T[None])[0].T, clean, rtol=0, atol=1e-12)
        mlp.train()
        noisy = mlp(x)
    # dropped after fc1 and after fc2: what survives both is the clean output scaled by 1/(1 − p)²
    kept = noisy != 0
    assert 0.1 < kept.double().mean() < 0.45
    torch.testing.assert_close(noisy[kept], clean[kept] * 4, rtol=1e-12, atol=0)


def test_linear_act_is_phi_of_w_x_plus_b_with_sequential_names():
    torch.manual_seed(1)
    la = LinearAct(3, 4, act="relu").to(f64)
    assert [n for n, _ in la.named_parameters()] == ["0.weight", "0.bias"]
    x = torch.randn(5, 3, dtype=f64)
    torch.testing.assert_close(la(x), (x @ la[0].weight.T + la[0].bias).clamp(min=0), rtol=0, atol=1e-12)
    cols = torch.randn(2, 3, 6, dtype=f64)
    torch.testing.assert_close(la.forward_columns(cols), la(cols.transpose(1, 2)).transpose(1, 2), rtol=0, atol=1e-12)
    assert isinstance(LinearAct(3, 4)[1], nn.GELU)


@pytest.mark.parametrize("bias", [True, False])
def test_left_linear_is_w_x_plus_b_for_matrices_and_batches(bias):
    torch.manual_seed(2)
    lin = nn.Linear(3, 4, bias=bias).to(f64)
    b = lin.bias[:, None] if bias else 0.0
    m = torch.randn(3, 5, dtype=f64)
    torch.testing.assert_close(left_linear(lin, m), lin.weight @ m + b, rtol=0, atol=1e-12)
    x = torch.randn(2, 3, 5, dtype=f64)
    torch.testing.assert_close(left_linear(lin, x), torch.stack([lin.weight @ xi + b for xi in x]), rtol=0, atol=1e-12)


def test_left_gemm_pays_from_32_columns_on_the_cpu_without_autocast():
    assert LEFT_GEMM_MIN_COLS == 32
    assert left_gemm_pays(torch.zeros(1, 2, 32)) and not left_gemm_pays(torch.zeros(1, 2, 31))
    assert left_gemm_pays(torch.zeros(1, 2, 100))
    assert not left_gemm_pays(torch.zeros(1, 2, 32, device="meta"))  # elsewhere: the transposed input
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not left_gemm_pays(torch.zeros(1, 2, 32))


def test_drop_path_drops_whole_samples_with_probability_p_and_rescales():
    torch.manual_seed(0)
    p, n = 0.3, 4000
    dp = DropPath(p)
    x = torch.randn(n, 3, 2, dtype=f64)
    y = dp(x)
    per_sample = (y == 0).flatten(1)
    assert torch.all(per_sample.all(1) | ~per_sample.any(1))  # a sample is dropped whole or kept whole
    dropped = int(per_sample.all(1).sum())
    assert binomtest(dropped, n, p).pvalue > 1e-4
    kept = ~per_sample.all(1)
    torch.testing.assert_close(y[kept], x[kept] / (1 - p), rtol=1e-12, atol=0)
    dp.eval()
    assert dp(x) is x
    assert DropPath(0.0)(x) is x and DropPath()(x) is x
    assert dp.extra_repr() == "p=0.3"


def test_drop_path_refuses_rates_outside_0_1():
    DropPath(0.0), DropPath(0.999)
    for bad in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=rf"drop_path rate must be in \[0, 1\), got {bad}"):
            DropPath(bad)


def test_drop_path_rates_rise_linearly_from_zero():
    assert drop_path_rates(0.3, 1) == [0.0]
    assert drop_path_rates(0.3, 0) == []  # no blocks, no rates
    assert drop_path_rates(0.3, 2) == [0.0, 0.3]
    assert drop_path_rates(0.2, 5) == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2], abs=1e-15)
    assert len(drop_path_rates(0.1, 8)) == 8 and drop_path_rates(0.1, 8)[-1] == 0.1
