"""Each family's forward against its defining equations, written here in numpy from the state dict.

Every weight is randomised first (LayerNorm scales too), and the model runs in float64, in eval
mode, on every implementation it has ("auto" takes the fused CPU seams of a Mixer, "module" the
modules). The equations (docs/science.md §2 and the models' docstrings):

* Mixer: patches row-major over the image, each (ch, P, P) flattened, X = patches Eᵀ + e;
  U = X̃ + TokenMLP(LN(X)) on every column (X̃ = X, or W̃ X in a first block that changes the
  token count), Y = U + ChannelMLP(LN(U)) on every row; S-Mixer: TokenMLP = φ(W · + b),
  ChannelMLP = φ(· Vᵀ + v); logits = head(mean over tokens of LN(Y_L)).
* Plain MLP: z = E flatten(x) + e, then z ↦ LN(ReLU(W z + b)) (post) or W ReLU(LN z) + b (pre);
  bottleneck z ↦ z + W_c GELU(W_e LN(z) + b_e) + b_c.
* SW-MLP: z = vec(patch embedding) stacked column by column (or E flatten(x)), then
  z ↦ z + φ((s·M⊙A) LN(z) + b) (fc) or z + (s·M2⊙A2) φ((s·M1⊙A1) LN(z) + b1) + b2 (mlp); LN; head.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import erf

import mlplab


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def relu(x):
    return np.maximum(x, 0.0)


def ln(x, sd, name, on=True, eps=1e-5):
    if not on:
        return x
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * sd[f"{name}.weight"] + sd[f"{name}.bias"]


def linear(x, sd, name):
    """x Wᵀ + b on the last axis."""
    y = x @ sd[f"{name}.weight"].T
    return y + sd[f"{name}.bias"] if f"{name}.bias" in sd else y


def patches(x, p):
    n, ch, h, w = x.shape
    rows = [x[:, :, i:i + p, j:j + p].reshape(n, ch * p * p) for i in range(0, h, p) for j in range(0, w, p)]
    return np.stack(rows, 1)  # (N, S0, ch·P²), patch s = i·(W/P) + j


def mixer_reference(sd, x, cfg, feats=None):
    """Logits; ``feats`` collects the stem's output, each sublayer's output before its skip and
    the pooled features (``forward_intermediates``)."""
    feats = {} if feats is None else feats
    act = {"gelu": gelu, "relu": relu}[cfg.act]
    z = feats["stem"] = linear(patches(x, cfg.patch_size), sd, "stem.proj")  # (N, S0, C)
    for i in range(cfg.depth):
        b = f"blocks.{i}"
        h = np.swapaxes(ln(z, sd, f"{b}.norm1", cfg.norm), 1, 2)  # (N, C, S_in): the columns of LN(X)
        if cfg.block == "mlp":
            t = linear(act(linear(h, sd, f"{b}.token_mixing.inner.fc1")), sd, f"{b}.token_mixing.inner.fc2")
        else:
            t = act(linear(h, sd, f"{b}.token_mixing.inner.0"))
        t = feats[f"{b}.token"] = np.swapaxes(t, 1, 2)  # (N, S, C)
        skip = np.einsum("st,ntc->nsc", sd[f"{b}.skip_proj.weight"], z) if f"{b}.skip_proj.weight" in sd else z
        u = skip + t if cfg.skip else t
        v = ln(u, sd, f"{b}.norm2", cfg.norm)
        if cfg.block == "mlp":
            c = linear(act(linear(v, sd, f"{b}.channel_mixing.inner.fc1")), sd, f"{b}.channel_mixing.inner.fc2")
        else:
            c = act(linear(v, sd, f"{b}.channel_mixing.inner.0"))
        feats[f"{b}.channel"] = c
        z = u + c if cfg.skip else c
    feats["pre_logits"] = ln(z, sd, "norm", cfg.norm).mean(1)
    return linear(feats["pre_logits"], sd, "head")


def mlp_reference(sd, x, cfg):
    z = linear(x.reshape(len(x), -1), sd, "stem")
    for i in range(cfg.depth):
        b = f"blocks.{i}"
        if cfg.block == "bottleneck":
            z = z + linear(gelu(linear(ln(z, sd, f"{b}.norm"), sd, f"{b}.fc1")), sd, f"{b}.fc2")
        elif cfg.norm_position == "pre":
            z = linear(relu(ln(z, sd, f"{b}.norm")), sd, f"{b}.fc")
        else:
            z = ln(relu(linear(z, sd, f"{b}.fc")), sd, f"{b}.norm")
    return linear(ln(z, sd, "norm", cfg.final_norm), sd, "head")


def sw_reference(sd, x, cfg):
    if "stem.proj.weight" in sd:
        e = linear(patches(x, cfg.patch_size), sd, "stem.proj")  # (N, S0, C)
        z = np.swapaxes(e, 1, 2).reshape(len(x), -1)  # vec: column c holds entries c·S0 .. c·S0 + S0 − 1
    else:
        z = linear(x.reshape(len(x), -1), sd, "stem")

    def sparse(v, name):
        w = sd[f"{name}.weight"] * sd[f"{name}.mask"] * sd[f"{name}.scale"]
        return v @ w.T + sd[f"{name}.bias"]

    for i in range(cfg.depth):
        b = f"blocks.{i}"
        h = gelu(sparse(ln(z, sd, f"{b}.norm"), f"{b}.fc1"))
        z = z + (sparse(h, f"{b}.fc2") if cfg.block == "mlp" else h)
    return linear(ln(z, sd, "norm"), sd, "head")


def randomised(name, **kw):
    torch.manual_seed(0)
    model = mlplab.create_model(name, **kw).double().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.5 if p.ndim > 1 else 0.3) + (1.0 if "norm" in pname and
                                                                          pname.endswith("weight") else 0.0))
    return model


def compare(model, reference, impls=("module",)):
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    c = model.config
    x = np.random.default_rng(1).normal(size=(3, c.in_chans, c.image_size, c.image_size))
    want = reference(sd, x, c)
    for impl in impls:
        if impl != "module":
            model.impl = impl
        with torch.no_grad():
            got = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, err_msg=f"impl={impl}")
    return sd, x


def test_mixer_intermediate_features_are_the_sublayer_outputs_before_their_skips():
    model = randomised("mlp_mixer", image_size=8, in_chans=2, patch_size=2, depth=2, num_classes=4, hidden_dim=6,
                       num_tokens=10, token_hidden=5, channel_hidden=7)
    sd, x = compare(model, mixer_reference)
    want = {}
    mixer_reference(sd, x, model.config, want)
    with torch.no_grad():
        logits, got = model.forward_intermediates(torch.from_numpy(x))
    assert list(got) == ["stem", "blocks.0.token", "blocks.0.channel", "blocks.1.token", "blocks.1.channel",
                         "pre_logits"]
    for k, v in want.items():
        np.testing.assert_allclose(got[k].numpy(), v, rtol=1e-9, atol=1e-9, err_msg=k)


@pytest.mark.parametrize("name,kw", [
    ("mlp_mixer", dict(hidden_dim=6, token_hidden=5, channel_hidden=7)),
    ("mlp_mixer", dict(hidden_dim=6, num_tokens=10, token_hidden=5, channel_hidden=7, act="relu")),  # S ≠ S0: W̃
    ("s_mixer", dict(hidden_dim=6)),
    ("s_mixer", dict(hidden_dim=5, num_tokens=12, act="relu")),
    ("s_mixer", dict(hidden_dim=6, norm=False, skip=False)),  # the theory form H = φ(φ(W X) V)
])
def test_mixers_are_their_block_equations(name, kw):
    model = randomised(name, image_size=8, in_chans=2, patch_size=2, depth=2, num_classes=4, **kw)
    compare(model, mixer_reference, impls=("module", "auto", "definition"))


@pytest.mark.parametrize("kw", [dict(), dict(norm_position="pre", final_norm=True), dict(block="bottleneck")])
def test_plain_and_bottleneck_mlps_are_their_block_equations(kw):
    compare(randomised("mlp", image_size=4, in_chans=2, width=6, depth=2, num_classes=4, **kw), mlp_reference)


@pytest.mark.parametrize("name,kw", [("sw_mlp", dict(width=16)), ("sw_mlp", dict(width=12, stem="dense")),
                                     ("sw_mlp_block", dict(width=16, mask_scale=True))])
def test_sw_mlps_are_their_block_equations(name, kw):
    model = randomised(name, image_size=8, in_chans=2, patch_size=4, depth=2, density=0.5, num_classes=4, **kw)
    compare(model, sw_reference)
