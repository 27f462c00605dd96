"""The weight average (train/ema.py) against its formula, θ_ema ← D·θ_ema + (1 − D)·θ, written out
in float64 step by step on a small module with every kind of state: parameters, a floating buffer,
an integer buffer (copied, not averaged) and a frozen parameter (a fixed point)."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from mlplab.train.ema import WeightEMA


class _State(nn.Module):
    """A weight, a bias, a frozen mask, a floating buffer and an integer buffer."""

    def __init__(self, dtype=torch.float64):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.randn(3, 4, generator=g, dtype=torch.float64).to(dtype))
        self.bias = nn.Parameter(torch.randn(3, generator=g, dtype=torch.float64).to(dtype))
        self.mask = nn.Parameter(torch.ones(3, 4, dtype=dtype), requires_grad=False)
        self.register_buffer("running", torch.randn(4, generator=g, dtype=torch.float64).to(dtype))
        self.register_buffer("perm", torch.tensor([2, 0, 3, 1]))


def _state(m: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().double().numpy().copy() for k, v in m.state_dict().items()}


def test_every_step_is_the_formula_in_float64():
    model = _State().train()
    decay = 0.75
    ema = WeightEMA(model, decay)
    expect = {k: v for k, v in _state(model).items() if k != "perm"}  # starts at the initial weights
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        with torch.no_grad():
            model.weight.add_(torch.randn(3, 4, generator=g, dtype=torch.float64))
            model.bias.mul_(-2.0)
            model.running.add_(1.5 * (step + 1))
            model.perm.copy_(torch.tensor([0, 1, 2, 3]))  # an integer buffer is not averaged
        ema.update()
        now, got = _state(model), _state(ema.model)
        for k in expect:
            expect[k] = decay * expect[k] + (1.0 - decay) * now[k]
            np.testing.assert_allclose(got[k], expect[k], rtol=0, atol=1e-13, err_msg=f"{k} step {step}")
        np.testing.assert_array_equal(got["perm"], [2, 0, 3, 1])  # the copy made at the start
        np.testing.assert_array_equal(got["mask"], np.ones((3, 4)))  # a frozen tensor is a fixed point
    assert ema.decay == decay and type(ema.decay) is float
    assert model.training and not ema.model.training  # the average is in eval mode, the model as it was
    assert all(p.requires_grad for p in (model.weight, model.bias))
    assert not any(p.requires_grad for p in ema.model.parameters())


def test_the_average_is_a_copy_until_updated():
    model = _State()
    ema = WeightEMA(model, 0.5)
    start = _state(ema.model)
    with torch.no_grad():
        model.weight.add_(10.0)
    np.testing.assert_array_equal(_state(ema.model)["weight"], start["weight"])
    assert ema.model.weight.data_ptr() != model.weight.data_ptr()


@pytest.mark.parametrize("dtype,kept", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                        (torch.float32, torch.float32), (torch.float64, torch.float64)])
def test_the_average_is_kept_in_at_least_float32(dtype, kept):
    model = _State(dtype)
    ema = WeightEMA(model, 0.9)
    assert {k: v.dtype for k, v in ema.model.state_dict().items()} == {
        "weight": kept, "bias": kept, "mask": kept, "running": kept, "perm": torch.int64}
    assert model.weight.dtype == dtype  # the model itself is left in its dtype
    start = ema.model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update()
    # in the kept dtype: θ_ema + (1 − D)(θ − θ_ema), θ read in the model's dtype and widened
    theta = model.weight.detach().to(kept)
    expect = start + torch.tensor(1.0 - 0.9, dtype=kept) * (theta - start)
    torch.testing.assert_close(ema.model.weight, expect, rtol=0, atol=1e-6 if kept == torch.float32 else 1e-14)
    assert ema.model.weight.dtype == kept


def test_a_bf16_model_keeps_increments_a_bf16_average_would_round_away():
    model = _State(torch.bfloat16)
    ema = WeightEMA(model, 0.999)
    start = ema.model.bias.detach().clone()
    with torch.no_grad():
        model.bias.add_(1.0)
    ema.update()
    # (1 − D)·Δθ = 1e-3 per element: below bf16's spacing near the bias' values, kept in fp32
    delta = (ema.model.bias - start).double().numpy()
    moved = (model.bias.detach().double() - start.double()).numpy()
    np.testing.assert_allclose(delta, 1e-3 * moved, rtol=1e-3)


def test_the_average_follows_parameters_whose_storage_is_replaced():
    """``model.to(dtype)`` (Module._apply) rebinds ``param.data``: the average reads the
    parameters themselves, not the tensors they held when it was built, on both sides."""
    model = _State(torch.float32)
    ema = WeightEMA(model, 0.5)
    model.double()  # the model's parameters now hold new float64 storage
    ema.model.double()  # and so do the average's
    start = ema.model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(4.0)
    ema.update()
    expect = 0.5 * start + 0.5 * model.weight.detach()
    assert ema.model.weight.dtype == torch.float64
    torch.testing.assert_close(ema.model.weight.detach(), expect, rtol=0, atol=1e-12)


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 1.5, float("nan")])
def test_a_decay_outside_the_open_unit_interval_is_refused(decay):
    with pytest.raises(ValueError, match=r"EMA decay must be in \(0, 1\), got"):
        WeightEMA(_State(), decay)


@pytest.mark.parametrize("decay", [1e-12, 0.5, 1 - 1e-12])
def test_a_decay_inside_the_open_unit_interval_is_taken(decay):
    assert WeightEMA(_State(), decay).decay == decay
