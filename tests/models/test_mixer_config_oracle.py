"""A Mixer is built as its config says, each fact against a number written here (mixer.py,
mixer_variants.py): which blocks are RP and the stream each permutation is drawn from, the
first block's skip layer, the hidden widths, the stochastic-depth and dropout rates, the
LayerNorms' eps, closed-form parameter counts, the head's initialisation, the edges of every
refused setting, and what keeps a model off the fused seams. Tiny widths throughout."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from mlplab import create_model
from mlplab.layers import fused
from mlplab.models.mixer import MixerBlock, MixerConfig
from mlplab.models.mixer_variants import check_token_groups, token_mlp_shape
from mlplab.utils.seeds import derive_generator

TINY = dict(image_size=8, patch_size=2, hidden_dim=3, depth=3)  # S0 = 16 patches


def _perms(blk):
    return [blk.token_mixing.perm_in, blk.token_mixing.perm_out, blk.channel_mixing.perm_in,
            blk.channel_mixing.perm_out]


def test_rp_blocks_draw_j1_then_j2_from_one_stream_per_sublayer():
    """Block i's token mixing draws J1 (S_in·C entries) then J2 (S·C) from the stream
    (seed, "rp", i, 0), its channel mixing J1 then J2 from (seed, "rp", i, 1): the same
    permutations whichever other blocks are RP."""
    kw = dict(TINY, num_tokens=5, seed=11)  # S0 = 16 -> S = 5: block 0's J1 is longer than its J2
    full = create_model("rp_s_mixer", **kw)
    for i, blk in enumerate(full.blocks):
        m_in, m = (16 if i == 0 else 5) * 3, 5 * 3
        tok, ch = derive_generator(11, "rp", i, 0), derive_generator(11, "rp", i, 1)
        want = [torch.randperm(m_in, generator=tok), torch.randperm(m, generator=tok),
                torch.randperm(m, generator=ch), torch.randperm(m, generator=ch)]
        for k, (w, g) in enumerate(zip(want, _perms(blk))):
            assert torch.equal(w, g), (i, k)
    for chosen in [(0,), (2,), (0, 2)]:
        part = create_model("rp_s_mixer", rp_blocks=chosen, **kw)
        assert [b.rp for b in part.blocks] == [i in chosen for i in range(3)]
        sd = part.state_dict()
        for i in range(3):
            assert (f"blocks.{i}.token_mixing.perm_in" in sd) == (i in chosen)
            assert (f"blocks.{i}.channel_mixing.perm_out" in sd) == (i in chosen)
            if i in chosen:
                assert all(torch.equal(a, b) for a, b in zip(_perms(part.blocks[i]), _perms(full.blocks[i])))
    none = create_model("rp_s_mixer", rp_blocks="none", **kw)
    assert not any(b.rp for b in none.blocks) and not any("perm" in k for k in none.state_dict())


@pytest.mark.parametrize("bad", [(3,), (-1,), (0, 5)])
def test_rp_block_indices_outside_the_depth_are_refused(bad):
    with pytest.raises(ValueError, match=r"rp_blocks \[.*\] out of range for depth=3; use indices 0\.\.2"):
        create_model("rp_s_mixer", rp_blocks=bad, **TINY)


def test_the_first_block_has_the_skip_layer_when_tokens_change():
    m = create_model("mlp_mixer", num_tokens=5, **TINY)
    assert m.num_patches == 16 and m.num_tokens == 5 and m.hidden_dim == 3
    assert m.blocks[0].skip_proj.weight.shape == (5, 16) and m.blocks[0].skip_proj.bias is None
    assert [b.skip_proj for b in m.blocks[1:]] == [None, None]
    assert [(b.tokens_in, b.tokens, b.dim) for b in m.blocks] == [(16, 5, 3), (5, 5, 3), (5, 5, 3)]
    forced = create_model("mlp_mixer", skip_layer=True, **TINY)  # S = S0 and a learned W̃ anyway
    assert forced.blocks[0].skip_proj.weight.shape == (16, 16)
    assert [b.skip_proj for b in forced.blocks[1:]] == [None, None]
    assert all(b.skip_proj is None for b in create_model("mlp_mixer", **TINY).blocks)
    no_skips = create_model("mlp_mixer", num_tokens=5, skip=False, **TINY)  # the theory form: nothing to add
    assert all(b.skip_proj is None and not b.use_skip for b in no_skips.blocks)
    assert all(b.skip_proj is None for b in create_model("mlp_mixer", skip_layer=True, skip=False, **TINY).blocks)
    msg = "num_tokens=5 differs from the 16 patches: the first block needs skip_layer=True"
    with pytest.raises(ValueError, match=msg):
        create_model("mlp_mixer", num_tokens=5, skip_layer=False, **TINY)


def test_a_block_that_changes_the_token_count_needs_its_skip_layer():
    cfg = MixerConfig(hidden_dim=3)
    with pytest.raises(ValueError, match="^a block that changes the token count needs the skip layer$"):
        MixerBlock(16, 5, 3, cfg, rp=False, index=0, drop_path=0.0, skip_layer=False)
    assert MixerBlock(16, 16, 3, cfg, rp=False, index=0, drop_path=0.0, skip_layer=False).skip_proj is None
    free = MixerConfig(hidden_dim=3, skip=False)
    assert MixerBlock(16, 5, 3, free, rp=False, index=0, drop_path=0.0, skip_layer=False).skip_proj is None


def test_hooks_on_the_skip_layer_fire():
    """The skip layer's left GEMM bypasses the module: a hook on it makes the block call it."""
    m = create_model("s_mixer", image_size=32, patch_size=4, hidden_dim=32, num_tokens=8, depth=1).eval()
    m.impl = "module"
    x = torch.randn(2, 3, 32, 32)
    h = m.stem(x)  # (2, 64, 32): 32 columns, fp32 -> W̃ X as one left GEMM
    want = torch.einsum("st,btc->bsc", m.blocks[0].skip_proj.weight, h)
    torch.testing.assert_close(m.blocks[0].skip(h), want)
    calls = []
    m.blocks[0].skip_proj.register_forward_hook(lambda mod, i, o: calls.append(o.shape))
    y = m(x)
    assert calls == [(2, 32, 8)]  # W̃ on the transpose: (B, C, S0) -> (B, C, S)
    torch.testing.assert_close(m.blocks[0].skip(h), want)
    assert y.shape == (2, 10)


def _mixer_params(ch, P, S0, S, C, L, K, token_block, channel_block, skip_layer):
    """Closed form: the stem ch·P²·C + C; per block the token maps on S_in (S0 in block 0)
    tokens, the channel maps on C channels, two LayerNorms 4C; W̃ S·S0; final LN 2C; head."""
    total = ch * P * P * C + C + (S * S0 if skip_layer else 0) + 2 * C + C * K + K
    for i in range(L):
        total += token_block(S0 if i == 0 else S, S) + channel_block(C) + 4 * C
    return total


def test_parameter_counts_are_the_closed_forms():
    D_S, D_C = 7, 5
    m = create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=3, num_tokens=6, depth=3,
                     token_hidden=D_S, channel_hidden=D_C, num_classes=4)
    want = _mixer_params(3, 2, 16, 6, 3, 3, 4, lambda si, s: si * D_S + D_S + D_S * s + s,
                         lambda c: c * D_C + D_C + D_C * c + c, True)
    assert sum(p.numel() for p in m.parameters()) == want
    s = create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=3, num_tokens=6, depth=3, num_classes=4)
    want = _mixer_params(3, 2, 16, 6, 3, 3, 4, lambda si, s: si * s + s, lambda c: c * c + c, True)
    assert sum(p.numel() for p in s.parameters()) == want
    bare = create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=3, depth=2, num_classes=4, norm=False,
                        skip=False)  # no LayerNorms at all
    assert sum(p.numel() for p in bare.parameters()) == 3 * 4 * 3 + 3 + 2 * (16 * 16 + 16 + 3 * 3 + 3) + 3 * 4 + 4


def test_hidden_widths_round_gamma_times_the_width_or_take_the_explicit_one():
    m = create_model("mlp_mixer", image_size=16, patch_size=4, hidden_dim=6, depth=2, expansion=1.3)
    for blk in m.blocks:  # round(1.3 · 16) = 21, round(1.3 · 6) = 8
        assert blk.token_mixing.inner.fc1.out_features == 21 and blk.channel_mixing.inner.fc1.out_features == 8
        assert blk.token_mixing.inner.fc2.out_features == 16 and blk.channel_mixing.inner.fc2.out_features == 6
    e = create_model("mlp_mixer", image_size=16, patch_size=4, hidden_dim=6, depth=1, expansion=1.3,
                     token_hidden=2, channel_hidden=1)
    assert e.blocks[0].token_mixing.inner.fc1.out_features == 2
    assert e.blocks[0].channel_mixing.inner.fc1.out_features == 1
    one = create_model("mlp_mixer", image_size=16, patch_size=4, hidden_dim=6, depth=1, expansion=1 / 16,
                       channel_hidden=2)
    assert one.blocks[0].token_mixing.inner.fc1.out_features == 1  # round(16/16) = 1 is allowed
    with pytest.raises(ValueError, match="channel-MLP hidden width is 0; raise expansion or set it explicitly"):
        create_model("mlp_mixer", image_size=16, patch_size=4, hidden_dim=6, depth=1, expansion=0.07,
                     token_hidden=3)  # round(0.07 · 6) = 0
    with pytest.raises(ValueError, match="token-MLP hidden width is 0"):
        create_model("mlp_mixer", image_size=16, patch_size=4, hidden_dim=6, depth=1, expansion=0.02)
    with pytest.raises(ValueError, match="token-MLP hidden width is 0"):
        create_model("mlp_mixer_views", image_size=16, patch_size=4, hidden_dim=6, depth=1, expansion=0.02,
                     token_groups=2)


def test_the_smallest_model_builds_and_zero_sizes_are_refused():
    one = create_model("mlp_mixer", image_size=2, patch_size=2, in_chans=1, num_tokens=1, hidden_dim=1, depth=1,
                       num_classes=1, token_hidden=1, channel_hidden=1)
    assert one(torch.randn(2, 1, 2, 2)).shape == (2, 1)
    for key, what in (("num_tokens", r"num_tokens \(S\)"), ("hidden_dim", r"hidden_dim \(C\)"),
                      ("depth", r"depth \(L\)"), ("num_classes", "num_classes"), ("in_chans", "in_chans")):
        with pytest.raises(ValueError, match=f"^{what} must be >= 1, got 0$"):
            create_model("mlp_mixer", **{**TINY, key: 0})


@pytest.mark.parametrize("kw, message", [
    (dict(expansion=0.0), r"expansion \(gamma\) must be > 0, got 0.0"),
    (dict(expansion=-1.0), r"expansion \(gamma\) must be > 0"),
    (dict(drop_rate=1.0), r"drop_rate must be in \[0, 1\), got 1.0"),
    (dict(drop_rate=-0.1), r"drop_rate must be in \[0, 1\)"),
    (dict(token_mixing="views", token_groups=3, rp_blocks="all"), "variant of the MLP-Mixer block"),
    (dict(token_mixing="untied", rp_blocks=(1,)), "^token_mixing='untied' is a variant of the MLP-Mixer block: use "
                                                  "block='mlp' and rp_blocks='none', or token_mixing='shared'$"),
])
def test_refused_settings_at_their_edges(kw, message):
    with pytest.raises(ValueError, match=message):
        create_model("mlp_mixer", **{**TINY, **kw})


def test_stochastic_depth_rises_linearly_and_dropout_reaches_every_mlp():
    m = create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=4, drop_path_rate=0.3,
                     drop_rate=0.25)
    assert [b.drop_path.p for b in m.blocks] == pytest.approx([0.0, 0.1, 0.2, 0.3], abs=1e-15)
    drops = [mod.p for mod in m.modules() if isinstance(mod, nn.Dropout)]
    assert drops == [0.25] * 16  # two per MLP, two MLPs per block
    assert create_model("mlp_mixer", **{**TINY, "depth": 1}, drop_path_rate=0.3).blocks[0].drop_path.p == 0.0
    for variant, groups in (("untied", 1), ("views", 3), ("grouped", 3)):
        v = create_model(f"mlp_mixer_{variant}", image_size=8, patch_size=2, hidden_dim=3, depth=1,
                         token_groups=groups, drop_rate=0.5)
        assert [mod.p for mod in v.blocks[0].token_mixing.modules() if isinstance(mod, nn.Dropout)] == [0.5, 0.5]
        x = torch.randn(4, 3, 8, 8)
        v.train()
        torch.manual_seed(0)
        a = v.blocks[0].token_mixing(torch.randn(4, 16, 3))
        assert (a == 0).float().mean() > 0.2, variant  # dropout after fc2 zeroes about half the entries
        v.eval()
        torch.testing.assert_close(v(x), v(x), rtol=0, atol=0)
        quiet = create_model(f"mlp_mixer_{variant}", image_size=8, patch_size=2, hidden_dim=3, depth=1,
                             token_groups=groups)
        assert not any(isinstance(mod, nn.Dropout) for mod in quiet.modules())


def test_every_layer_norm_takes_the_configured_eps():
    for name in ("mlp_mixer", "s_mixer"):
        m = create_model(name, **TINY, norm_eps=1e-3)
        norms = [mod for mod in m.modules() if isinstance(mod, nn.LayerNorm)]
        assert len(norms) == 2 * 3 + 1 and {n.eps for n in norms} == {1e-3}
        assert all(n.normalized_shape == (3,) for n in norms)
    assert not any(isinstance(mod, nn.LayerNorm) for mod in create_model("s_mixer", **TINY, norm=False).modules())


def test_a_head_that_is_not_zeroed_starts_at_torchs_linear_default():
    """U(±1/√C): bounded by it and filling it, mean square 1/(3C) within 5 standard errors."""
    torch.manual_seed(0)
    m = create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=64, depth=1, num_classes=64, zero_head=False)
    w = m.head.weight.detach().double().flatten()
    bound = 1 / math.sqrt(64)
    assert w.abs().max() <= bound and w.abs().max() > 0.97 * bound
    assert abs(float((w ** 2).mean()) - bound ** 2 / 3) < 5 * bound ** 2 / 3 * math.sqrt(0.8 / w.numel())
    assert m.head.bias.abs().max() <= bound and m.head.bias.abs().max() > 0
    zero = create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=64, depth=1, num_classes=64)
    assert not zero.head.weight.any() and not zero.head.bias.any()


def test_token_mlp_shapes_are_the_closed_forms():
    """(M, V, n_in, D, n_out): M MLPs n_in -> D -> n_out on V vectors each, M·V·n_out = S·C."""
    S_in, S, C, G = 9, 5, 6, 3
    assert token_mlp_shape("shared", 1, S_in, S, C, None, 2.0) == (1, 6, 9, 10, 5)
    assert token_mlp_shape("untied", 1, S_in, S, C, None, 2.0) == (6, 1, 9, 10, 5)
    assert token_mlp_shape("views", G, S_in, S, C, None, 2.0) == (3, 2, 9, 10, 5)
    assert token_mlp_shape("grouped", G, S_in, S, C, None, 2.0) == (1, 2, 27, 30, 15)  # round(2·5·3)
    assert token_mlp_shape("grouped", G, S_in, S, C, 4, 2.0) == (1, 2, 27, 4, 15)
    assert token_mlp_shape("views", G, S_in, S, C, 4, 1.3) == (3, 2, 9, 4, 5)
    assert token_mlp_shape("untied", 1, S_in, S, C, None, 1.3) == (6, 1, 9, 6, 5)  # round(6.5) = 6
    for variant in ("shared", "untied", "views", "grouped"):
        M, V, _, _, n_out = token_mlp_shape(variant, G, S_in, S, C, None, 1.0)
        assert M * V * n_out == S * C


def test_unknown_token_mixing_and_groups_are_refused_in_one_sentence():
    with pytest.raises(ValueError, match="^token_mixing must be one of shared, untied, grouped, views, got 'tied'$"):
        check_token_groups("tied", 1, 6)
    with pytest.raises(ValueError, match="^token_groups=4 must divide hidden_dim .C. = 6; choose a divisor of 6$"):
        check_token_groups("views", 4, 6)
    with pytest.raises(ValueError, match="token_groups=-2 must divide"):
        check_token_groups("grouped", -2, 6)
    check_token_groups("views", 1, 6)
    check_token_groups("grouped", 6, 6)


def test_what_keeps_a_mixer_off_the_fused_seams(monkeypatch):
    for kw in (dict(norm=False), dict(skip=False)):
        bare = create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=1, **kw)
        assert bare.fusable("cpu") == (False, "a Mixer without LayerNorms or skips has no seams")
    views = create_model("mlp_mixer_views", image_size=8, patch_size=2, hidden_dim=4, depth=1, token_groups=2)
    assert views.fusable() == (False, "token_mixing='views' (the kernels compute the shared token MLP)")
    m = create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=1, drop_path_rate=0.2)
    assert m.fusable() == (True, "")  # on the CPU by default
    assert m.train().fusable("cpu").ok  # one block: no stochastic depth (its only rate is 0)
    m.impl = "module"
    assert m.fusable("cpu") == (False, "impl=module")
    m.impl = "auto"
    why = "torch.bfloat16 weights (the kernels take float32 and float64)"
    assert m.to(torch.bfloat16).fusable("cpu") == (False, why)
    m.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m.fusable("cpu").ok
    h = m.norm.register_forward_hook(lambda *a: None)
    assert m.fusable("cpu") == (False, "forward hooks on its blocks (the module path calls them)")
    h.remove()
    monkeypatch.setattr(fused, "available", lambda: False)
    monkeypatch.setattr(fused, "status", lambda: {"available": False, "reason": "no C compiler", "library": None})
    assert m.fusable(None).ok  # a plan for a machine not known yet: the kernels are not asked
    assert m.fusable("cpu") == (False, "the fused kernels are unavailable: no C compiler")
    assert m.fusable("meta") == (False, "the fused kernels run on CPU, not meta")


def test_the_forward_asks_about_its_inputs_device(monkeypatch):
    """Without the kernels on this machine the forward takes the module path, though a plan
    for an unknown machine (device None) would fuse."""
    from mlplab.models import mixer_fused

    m = create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=1).eval()
    x = torch.randn(2, 3, 8, 8)
    fused_calls = []
    real = mixer_fused.forward_features
    monkeypatch.setattr(mixer_fused, "forward_features", lambda *a: fused_calls.append(1) or real(*a))
    y = m(x)
    assert fused_calls == [1]
    monkeypatch.setattr(fused, "available", lambda: False)
    monkeypatch.setattr(fused, "status", lambda: {"available": False, "reason": "no C compiler", "library": None})
    torch.testing.assert_close(m(x), y, rtol=1e-5, atol=1e-6)
    assert fused_calls == [1]


def test_variants_take_the_explicit_token_hidden_width_and_count_in_ints():
    for variant, groups in (("untied", 1), ("views", 3), ("grouped", 3)):
        m = create_model(f"mlp_mixer_{variant}", image_size=8, patch_size=2, hidden_dim=3, depth=1,
                         token_groups=groups, token_hidden=7, expansion=3.0)
        tm = m.blocks[0].token_mixing
        fc1 = tm.fn.fc1 if variant == "grouped" else tm.fc1
        assert fc1.out_features == 7, variant
    for variant in ("shared", "untied", "views", "grouped"):
        assert all(type(v) is int for v in token_mlp_shape(variant, 3, 9, 5, 6, None, 1.3)), variant


def test_a_variants_token_width_is_checked_where_it_is_made():
    """A block built directly (not through Mixer, which refuses variants of the S-Mixer block)
    checks the variant's own width."""
    cfg = MixerConfig(hidden_dim=4, block="s", token_mixing="views", token_groups=2, expansion=0.01)
    with pytest.raises(ValueError, match="^token-MLP hidden width is 0; raise expansion or set it explicitly$"):
        MixerBlock(16, 16, 4, cfg, rp=False, index=0, drop_path=0.0, skip_layer=False)


def test_the_variants_modules_default_to_exact_gelu_without_dropout():
    from mlplab.models.mixer_variants import GroupedTokenMlp, TokenMlpBank

    for tm in (TokenMlpBank(2, 4, 3, 5), GroupedTokenMlp(2, 4, 3, 5)):
        acts = [mod for mod in tm.modules() if isinstance(mod, nn.GELU)]
        assert len(acts) == 1 and acts[0].approximate == "none"
        assert not any(isinstance(mod, nn.Dropout) for mod in tm.modules())
        assert tm.groups == 2
