"""Prop. 3.2: every Mixer equals its materialised effective wide MLP (float64, |diff| <= 1e-10)."""
import pytest
import torch

import mlplab
from mlplab.layers.vec import vec
from mlplab.models.impl import compute_by_definition
from mlplab.theory import EffectiveMLP, effective_mlp

D = torch.float64
TOL = 1e-10


def _model(name, **kw):
    torch.manual_seed(kw.pop("init_seed", 0))
    kw.setdefault("image_size", 8)
    kw.setdefault("patch_size", 2)  # S0 = 16, C0 = 12
    model = mlplab.create_model(name, zero_head=False, **kw).double().eval()
    with torch.no_grad():  # random biases and LN affine parameters, so none of them can be dropped silently
        for mod in model.modules():
            if isinstance(mod, torch.nn.Linear) and mod.bias is not None:
                mod.bias.normal_(0, 0.3)
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.normal_(1, 0.3)
                mod.bias.normal_(0, 0.3)
    return model


def _images(model, n=3, seed=1):
    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, cfg.in_chans, cfg.image_size, cfg.image_size, generator=g, dtype=D)


CASES = {
    "s_mixer S=C=S0": ("s_mixer", dict(hidden_dim=4, depth=2)),
    "s_mixer S!=C, S!=S0 (skip layer)": ("s_mixer", dict(num_tokens=6, hidden_dim=3, depth=2)),
    "s_mixer S=S0 with skip layer": ("s_mixer", dict(hidden_dim=5, depth=1, skip_layer=True)),
    "s_mixer theory form (no LN, no skip)": ("s_mixer", dict(num_tokens=7, hidden_dim=4, depth=2, norm=False,
                                                             skip=False)),
    "s_mixer relu, patch 4": ("s_mixer", dict(num_tokens=3, hidden_dim=6, depth=2, act="relu", patch_size=4)),
    "mlp_mixer gamma=2": ("mlp_mixer", dict(num_tokens=5, hidden_dim=4, expansion=2.0, depth=2)),
    "mlp_mixer gamma=0.5": ("mlp_mixer", dict(num_tokens=6, hidden_dim=4, expansion=0.5, depth=2)),
    "mlp_mixer D_S, D_C explicit": ("mlp_mixer", dict(num_tokens=4, hidden_dim=3, token_hidden=7, channel_hidden=5,
                                                      depth=1)),
    "mlp_mixer no LN no skip": ("mlp_mixer", dict(num_tokens=5, hidden_dim=3, expansion=2.0, depth=2, norm=False,
                                                  skip=False)),
    "rp_s_mixer all blocks": ("rp_s_mixer", dict(num_tokens=5, hidden_dim=4, depth=2, seed=3)),
    "rp_s_mixer one block of three": ("rp_s_mixer", dict(hidden_dim=4, depth=3, rp_blocks=(1,))),
    "rp_s_mixer first block with skip layer": ("rp_s_mixer", dict(num_tokens=9, hidden_dim=3, depth=2, rp_blocks=(0,))),
    "rp_mlp_mixer gamma=2": ("rp_mlp_mixer", dict(num_tokens=6, hidden_dim=5, expansion=2.0, depth=2)),
    "rp_mlp_mixer no LN no skip": ("rp_mlp_mixer", dict(num_tokens=4, hidden_dim=4, expansion=1.5, depth=2, norm=False,
                                                        skip=False)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_model_equals_effective_mlp(case):
    name, kw = CASES[case]
    model = _model(name, **kw)
    x = _images(model)
    eff = effective_mlp(model)
    assert isinstance(eff, EffectiveMLP)
    with torch.no_grad():
        ref = model(x)
    out = eff(x)
    assert out.dtype == D and out.shape == ref.shape
    assert ref.abs().max() > 1e-3  # a non-trivial function (the head is random)
    assert (ref - out).abs().max().item() <= TOL


def test_a_wrong_weight_is_detected():
    model = _model("s_mixer", num_tokens=5, hidden_dim=4, depth=2)
    x = _images(model)
    eff = effective_mlp(model)
    with torch.no_grad():
        model.blocks[1].channel_mixing.inner[0].weight[0, 0] += 0.5
        assert (model(x) - eff(x)).abs().max().item() > 1e-6


def test_intermediates_are_the_vec_of_the_mixer_features():
    model = _model("mlp_mixer", num_tokens=5, hidden_dim=3, expansion=2.0, depth=2)
    x = _images(model)
    with torch.no_grad():
        logits, feats = model.forward_intermediates(x)
    trace = effective_mlp(model).intermediates(x)
    for name, f in feats.items():
        if name == "pre_logits":
            assert torch.allclose(trace["pool"], f, atol=TOL, rtol=0)
        else:
            assert torch.allclose(trace[name], vec(f), atol=TOL, rtol=0), name
    assert torch.allclose(trace["logits"], logits, atol=TOL, rtol=0)


def test_mlp_block_hidden_layer_is_vec_of_the_hidden_matrix():
    """J_h is chosen so the hidden vector is vec(φ(LN(U) W3)) (S × γC) for channel mixing and
    vec(φ(W1 LN(X))) for token mixing (it cancels either way)."""
    model = _model("mlp_mixer", num_tokens=5, hidden_dim=3, expansion=2.0, depth=1)
    compute_by_definition(model)  # the hidden matrix as Def. 5.1 groups it (token MLP on Xᵀ rows)
    x = _images(model)
    seen = {}
    blk = model.blocks[0]
    hooks = [blk.token_mixing.inner.act.register_forward_hook(lambda m, i, o: seen.__setitem__("tok", o)),
             blk.channel_mixing.inner.act.register_forward_hook(lambda m, i, o: seen.__setitem__("ch", o))]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    trace = effective_mlp(model).intermediates(x)
    # token MLP acts on X^T rows: hidden stored (B, C, γS) = (W1 X)ᵀ; its vec is the row-major flatten
    assert torch.allclose(trace["blocks.0.token.act"], seen["tok"].reshape(x.shape[0], -1), atol=TOL, rtol=0)
    assert torch.allclose(trace["blocks.0.channel.act"], vec(seen["ch"]), atol=TOL, rtol=0)


def test_layers_and_summary_report_widths_and_densities():
    S, C, g = 5, 4, 2.0
    model = _model("mlp_mixer", num_tokens=S, hidden_dim=C, expansion=g, depth=1)
    eff = effective_mlp(model)
    infos = {i.name: i for i in eff.layers()}
    m = S * C
    assert eff.width == m
    S0 = 16
    assert infos["stem"].shape == (C * S0, 3 * 8 * 8) and infos["stem"].density == pytest.approx(1 / S0)
    tok1, tok2 = infos["blocks.0.token.fc1"], infos["blocks.0.token.fc2"]
    assert tok1.shape == (C * int(g * S), C * S0) and tok1.width == int(g * S) * C  # hidden width γ·S·C
    assert tok2.shape == (m, C * int(g * S))
    ch1, ch2 = infos["blocks.0.channel.fc1"], infos["blocks.0.channel.fc2"]
    assert ch1.shape == (int(g * C) * S, m) and ch2.shape == (m, int(g * C) * S)
    for info in (tok1, tok2, infos["blocks.0.skip"], infos["pool"]):
        assert info.density == pytest.approx(1 / C) and info.density_label == "1/C"
    for info in (ch1, ch2):
        assert info.density == pytest.approx(1 / S) and info.density_label == "1/S"
    assert tok1.nnz == C * int(g * S) * S0 and ch1.nnz == S * C * int(g * C)
    assert infos["head"].density == 1.0 and infos["head"].nnz == 10 * C
    assert eff.nnz == sum(i.nnz for i in eff.layers())
    text = eff.summary()
    assert "blocks.0.channel.fc1" in text and "1/S = 0.2" in text and f"m = S·C = {m}" in text


def test_rp_layers_are_marked_and_have_the_same_density():
    model = _model("rp_s_mixer", num_tokens=4, hidden_dim=4, depth=2, rp_blocks=(1,))
    infos = {i.name: i for i in effective_mlp(model).layers()}
    assert not infos["blocks.0.token.fc"].rp and infos["blocks.1.token.fc"].rp
    assert infos["blocks.1.token.fc"].density == pytest.approx(1 / 4)
    assert "(RP)" in effective_mlp(model).summary()


def test_size_guard_and_wrong_inputs():
    model = _model("s_mixer", num_tokens=6, hidden_dim=4, depth=1)
    with pytest.raises(ValueError, match="max_nnz"):
        effective_mlp(model, max_nnz=100)
    with pytest.raises(TypeError, match="Mixer"):
        effective_mlp(torch.nn.Linear(3, 3))
    eff = effective_mlp(model)
    with pytest.raises(ValueError, match="expected images of shape"):
        eff(torch.zeros(2, 3, 16, 16, dtype=D))
    drop = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=3, depth=1, drop_rate=0.1)
    with pytest.raises(ValueError, match="eval"):
        effective_mlp(drop.train())
    effective_mlp(drop.eval())  # eval mode: dropout is the identity


def test_float32_model_is_materialised_in_float64():
    torch.manual_seed(0)
    model = mlplab.create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=1, zero_head=False).eval()
    x = _images(model)
    eff = effective_mlp(model)
    ref = model.double()(x)
    assert (eff(x) - ref).abs().max().item() <= TOL


def test_moderate_size_is_fast_and_sparse():
    """S = 40, C = 24, S0 = 64: m = 960, ~0.2 M nonzeros; never an m×m dense matrix."""
    torch.manual_seed(0)
    model = mlplab.create_model("rp_s_mixer", image_size=32, patch_size=4, num_tokens=40, hidden_dim=24,
                                depth=1, zero_head=False).double().eval()
    eff = effective_mlp(model)
    x = torch.randn(2, 3, 32, 32, dtype=D)
    assert (model(x) - eff(x)).abs().max().item() <= TOL
    assert all(lin.weight.layout == torch.sparse_csr for lin in eff.linears())


@pytest.mark.parametrize("case", ["mlp_mixer gamma=2", "rp_s_mixer first block with skip layer",
                                  "s_mixer theory form (no LN, no skip)"])
def test_size_guard_estimate_is_exact(case):
    from mlplab.theory.effective import _estimate_nnz

    name, kw = CASES[case]
    model = _model(name, **kw)
    assert effective_mlp(model).nnz == _estimate_nnz(model)
