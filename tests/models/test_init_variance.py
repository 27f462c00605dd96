"""Every layer's initial weights against the scheme its model states, in float64.

The schemes (from the docstrings and the papers):

* Mixers (Tolstikhin et al. 2021, Flax's Mixer): the stem is LeCun normal, Var = 1/fan_in; every
  other dense map — token and channel MLPs, the S-Mixer's single layers, the first block's skip
  W̃, each group of the supplement's untied / grouped / views maps — is Xavier uniform,
  U(±√(6/(fan_in + fan_out))); biases 0; the head 0 (``zero_head``) or torch's Linear default.
* Plain and bottleneck MLPs (Scaling-MLPs' code): torch's Linear default, weight and bias
  U(±1/√fan_in), Var = 1/(3·fan_in).
* SW-MLP: LeCun normal stem with zero bias; each sparse layer's effective weight scale·M⊙A has
  E[w²] = 1/fan_in, its mask density p, its nonzero values normal; zero biases.
* Monarch: R and L blocks U(±1/√fan_in) on their own fan-in (b for R, k for L), as nn.Linear;
  Kronecker: the entries of V ⊗ W have nn.Linear's Var = 1/(3·fan_in), with W ~ U(±√(3/a)),
  V ~ U(±1/√b).
* LayerNorm: weight 1, bias 0.

Each tensor's mean square is compared with the stated variance within 5 standard errors of the
sample (Var of a mean square = (κ − 1)σ⁴/N, κ = 1.8 uniform, 3 normal); uniform weights also stay
within their bound and fill it, and the kurtosis tells uniform (1.8) from normal (3).
Every parameter of every model here must be named by one rule, so a new layer needs its scheme.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

import mlplab
from mlplab.layers.kronecker import KroneckerLinear
from mlplab.layers.masked import MaskedLinear, SparseLinear
from mlplab.layers.monarch import MonarchLinear
from mlplab.models.mixer_variants import GroupLinear

KURTOSIS = {"uniform": 1.8, "normal": 3.0}


def check_law(w: torch.Tensor, var: float, law: str, bound: float | None = None, what: str = "") -> None:
    w = w.detach().double().flatten()
    n = w.numel()
    assert n >= 1000, f"{what}: {n} entries are too few to test a variance"
    ms = float((w ** 2).mean())
    se = var * math.sqrt((KURTOSIS[law] - 1) / n)
    assert abs(ms - var) < 5 * se, f"{what}: mean square {ms:.5g}, stated variance {var:.5g} (±{5 * se:.2g})"
    assert abs(float(w.mean())) < 5 * math.sqrt(var / n), f"{what}: mean {float(w.mean()):.3g} is not 0"
    kurt = float((w ** 4).mean()) / ms ** 2
    assert abs(kurt - KURTOSIS[law]) < 0.5, f"{what}: kurtosis {kurt:.3g}, a {law} law has {KURTOSIS[law]}"
    if bound is not None:
        assert float(w.abs().max()) <= bound * (1 + 1e-6) and float(w.abs().max()) > 0.97 * bound, what


def uniform(w, bound, what):
    check_law(w, bound ** 2 / 3, "uniform", bound, what)


def exactly(t: torch.Tensor, value: float, what: str) -> None:
    assert torch.all(t == value), f"{what} should start at {value}"


def check_model(model: nn.Module, rules) -> None:
    """Apply ``rules(name, module) -> params it checked`` to every module; every parameter must be checked."""
    seen: set[int] = set()
    for name, mod in model.named_modules():
        for p in rules(name, mod) or ():
            seen.add(id(p))
    missed = [n for n, p in model.named_parameters() if id(p) not in seen]
    assert not missed, f"no stated initialisation for {missed}"


def layer_norm(name, mod):
    if isinstance(mod, nn.LayerNorm):
        exactly(mod.weight, 1.0, f"{name}.weight")
        exactly(mod.bias, 0.0, f"{name}.bias")
        return [mod.weight, mod.bias]


def mixer_rules(zero_head: bool):
    def rules(name, mod):
        if isinstance(mod, nn.Linear):
            fan_out, fan_in = mod.weight.shape
            if name == "head":
                if zero_head:
                    exactly(mod.weight, 0.0, "head.weight")
                    exactly(mod.bias, 0.0, "head.bias")
                return [mod.weight, mod.bias]  # the default Linear init: tested with the MLPs
            if name == "stem.proj":
                check_law(mod.weight, 1.0 / fan_in, "normal", what=name)  # LeCun normal
            else:
                uniform(mod.weight, math.sqrt(6.0 / (fan_in + fan_out)), name)  # Xavier uniform
            if mod.bias is not None:
                exactly(mod.bias, 0.0, f"{name}.bias")
            return [p for p in (mod.weight, mod.bias) if p is not None]
        if isinstance(mod, GroupLinear):
            for g in range(mod.groups):
                uniform(mod.weight[g], math.sqrt(6.0 / (mod.in_features + mod.out_features)), f"{name}[{g}]")
            exactly(mod.bias, 0.0, f"{name}.bias")
            return [mod.weight, mod.bias]
        return layer_norm(name, mod)
    return rules


MIXERS = [
    ("mlp_mixer", dict(hidden_dim=64, token_hidden=128, channel_hidden=32)),  # D_S ≠ S, D_C ≠ C
    ("mlp_mixer", dict(hidden_dim=64, num_tokens=32, token_hidden=64, channel_hidden=128, zero_head=False)),
    ("s_mixer", dict(hidden_dim=64, num_tokens=48)),
    ("rp_mlp_mixer", dict(hidden_dim=32, token_hidden=64, channel_hidden=96)),
    ("mlp_mixer_untied", dict(hidden_dim=32, token_hidden=32)),
    ("mlp_mixer_grouped", dict(hidden_dim=32, token_groups=4, token_hidden=96)),
    ("mlp_mixer_views", dict(hidden_dim=32, token_groups=2, token_hidden=48)),
]


@pytest.mark.parametrize("name,kw", MIXERS)
def test_mixers_start_lecun_stem_xavier_maps_zero_biases(name, kw):
    torch.manual_seed(0)
    model = mlplab.create_model(name, image_size=32, patch_size=4, depth=2, **kw)
    check_model(model, mixer_rules(kw.get("zero_head", True)))


def linear_default(name, mod):
    if isinstance(mod, nn.Linear):
        bound = 1.0 / math.sqrt(mod.in_features)
        uniform(mod.weight, bound, name)
        if mod.bias.numel() >= 1000:
            uniform(mod.bias, bound, f"{name}.bias")
        else:  # too few entries for a variance
            assert float(mod.bias.detach().abs().max()) <= bound, f"{name}.bias"
        return [mod.weight, mod.bias]
    return layer_norm(name, mod)


@pytest.mark.parametrize("kw", [dict(width=1024, depth=1), dict(block="bottleneck", width=48, depth=1),
                                dict(width=64, depth=1, norm_position="pre", final_norm=True)])
def test_mlps_start_at_torchs_linear_default(kw):
    torch.manual_seed(0)
    model = mlplab.create_model("mlp", image_size=8, num_classes=100, **kw)
    check_model(model, linear_default)


def sw_rules(name, mod):
    if isinstance(mod, (MaskedLinear, SparseLinear)):
        w, scale, p = mod.effective_weight().detach().double(), float(mod.scale), mod.density
        values = (mod.weight[mod.mask] if isinstance(mod, MaskedLinear) else mod.values).detach()
        if isinstance(mod, MaskedLinear):
            exactly(mod.weight[~mod.mask], 0.0, f"{name} off the mask")
        # E[w²] over the dense weight, zeros included: (nnz / n) · mean of the nonzeros' squares,
        # each factor with its own sampling error
        ms = float((w ** 2).mean())
        se = math.sqrt(2.0 / values.numel() + (1 - p) / (p * w.numel())) / mod.in_features
        assert abs(ms - 1.0 / mod.in_features) < 5 * se, f"{name}: E[w²] = {ms:.4g}, not 1/fan_in"
        check_law(values * scale, 1.0 / (mod.in_features * p), "normal", what=f"{name} nonzeros")
        if mod.bias is not None:
            exactly(mod.bias, 0.0, f"{name}.bias")
        return [mod.values if isinstance(mod, SparseLinear) else mod.weight, mod.bias]
    if isinstance(mod, nn.Linear):
        if name in ("stem", "stem.proj"):
            check_law(mod.weight, 1.0 / mod.in_features, "normal", what=name)
            exactly(mod.bias, 0.0, f"{name}.bias")
        return [mod.weight, mod.bias]  # the head: torch's default unless zero_head
    return layer_norm(name, mod)


@pytest.mark.parametrize("kw", [dict(width=256, density=0.25), dict(width=192, density=0.5, mask_scale=True),
                                dict(width=128, density=0.3, storage="sparse"),
                                dict(width=64, density=0.6, block="mlp", expansion=2.0, stem="dense")])
def test_sw_mlp_starts_with_unit_gain_sparse_layers(kw):
    torch.manual_seed(0)
    model = mlplab.create_model("sw_mlp", image_size=32, patch_size=8, depth=1, **kw)
    check_model(model, sw_rules)
    for mod in model.modules():
        if isinstance(mod, MaskedLinear):  # the mask is Bernoulli(p)
            n = mod.mask.numel()
            assert abs(mod.density - kw["density"]) < 5 * math.sqrt(kw["density"] * (1 - kw["density"]) / n)


def structured_rules(name, mod):
    if isinstance(mod, MonarchLinear):
        uniform(mod.R, 1.0 / math.sqrt(mod.block_in), f"{name}.R")
        uniform(mod.L, 1.0 / math.sqrt(mod.nblocks), f"{name}.L")
        uniform(mod.bias, 1.0 / math.sqrt(mod.in_features), f"{name}.bias")
        return [mod.R, mod.L, mod.bias]
    if isinstance(mod, KroneckerLinear):
        a, b = mod.in_shape
        uniform(mod.W, math.sqrt(3.0 / a), f"{name}.W")
        uniform(mod.V, 1.0 / math.sqrt(b), f"{name}.V")
        # the mean square of V ⊗ W's entries is the product of the factors' (within 5 se of each)
        ms = float((mod.W.detach().double() ** 2).mean() * (mod.V.detach().double() ** 2).mean())
        tol = 5 * math.sqrt(0.8 / mod.W.numel() + 0.8 / mod.V.numel())
        assert abs(ms * 3 * mod.in_features - 1) < tol, f"{name}: V⊗W has not nn.Linear's variance"
        uniform(mod.bias, 1.0 / math.sqrt(mod.in_features), f"{name}.bias")
        return [mod.W, mod.V, mod.bias]
    if isinstance(mod, nn.Linear):
        return [mod.weight, mod.bias]  # the head: torch's default
    return None


@pytest.mark.parametrize("layer", ["monarch", "kronecker"])
def test_shallow_structured_mlps_start_as_linear_layers_do(layer):
    torch.manual_seed(0)
    model = mlplab.create_model(f"{layer}_mlp", image_size=48, in_chans=1, width=1152)  # 2304 = 48², 1152 = 32·36
    check_model(model, structured_rules)
    if layer == "monarch":
        assert model.fc1.block_in != model.fc1.nblocks or model.fc2.block_in != model.fc2.nblocks
