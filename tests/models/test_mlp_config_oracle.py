"""Plain and bottleneck MLPs are built as their configs say, each fact against a number written
here (mlp.py): closed-form parameter counts, the hidden width round(k·m), the activation and
norm position each block takes, dropout, eps, the features each block reports, and the edges of
every refused setting. Tiny widths, float64."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mlplab import create_model

TINY = dict(image_size=4, in_chans=2, num_classes=3, width=6, depth=2)  # 32 inputs


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def test_parameter_counts_are_the_closed_forms():
    """Stem d·m + m; standard block m² + m + 2m (its LN); bottleneck 2m + m·h + h + h·m + m;
    final LN 2m; head m·K + K."""
    d, m, K, L = 32, 6, 3, 2
    assert n_params(create_model("mlp", **TINY)) == d * m + m + L * (m * m + 3 * m) + m * K + K
    assert n_params(create_model("mlp", final_norm=True, **TINY)) == d * m + m + L * (m * m + 3 * m) + 2 * m + m * K + K
    h = round(1.5 * m)
    b = create_model("bottleneck_mlp", expansion=1.5, **TINY)
    assert n_params(b) == d * m + m + L * (2 * m + m * h + h + h * m + m) + m * K + K
    assert b.in_features == d and b.stem.in_features == d and b.width == b.effective_width == m
    assert (b.head.in_features, b.head.out_features) == (m, K)


def test_hidden_width_activation_and_norm_of_each_block():
    b = create_model("bottleneck_mlp", expansion=1.3, **TINY)
    assert [(blk.fc1.out_features, blk.fc2.in_features) for blk in b.blocks] == [(8, 8), (8, 8)]  # round(7.8)
    assert all(type(blk.act) is nn.GELU for blk in b.blocks) and isinstance(b.norm, nn.Identity)
    assert len(b.blocks) == 2
    s = create_model("mlp", **TINY)
    assert all(type(blk.act) is nn.ReLU and not blk.pre_norm for blk in s.blocks)
    assert all(blk.pre_norm for blk in create_model("mlp", norm_position="pre", **TINY).blocks)
    assert all(not blk.pre_norm for blk in create_model("mlp", norm_position="post", **TINY).blocks)
    assert all(type(blk.act) is nn.GELU for blk in create_model("mlp", act="gelu", **TINY).blocks)
    assert all(type(blk.act) is nn.ReLU for blk in create_model("bottleneck_mlp", act="relu", **TINY).blocks)
    e = create_model("bottleneck_mlp", norm_eps=1e-3, final_norm=True, **TINY)
    norms = [mod for mod in e.modules() if isinstance(mod, nn.LayerNorm)]
    assert len(norms) == 3 and {n.eps for n in norms} == {1e-3} and {n.normalized_shape for n in norms} == {(6,)}
    assert {mod.eps for mod in create_model("mlp", norm_eps=1e-4, **TINY).modules()
            if isinstance(mod, nn.LayerNorm)} == {1e-4}
    with pytest.raises(ValueError, match=r"^bottleneck hidden width round\(expansion\*m\) = 0; raise expansion$"):
        create_model("bottleneck_mlp", expansion=0.05, **TINY)
    assert create_model("bottleneck_mlp", expansion=1 / 6, **TINY).blocks[0].fc1.out_features == 1


def test_each_block_reports_its_branch_and_output():
    torch.manual_seed(0)
    b = create_model("bottleneck_mlp", **TINY).double().eval()
    z = torch.randn(5, 6, dtype=torch.float64)
    blk = b.blocks[0]
    want = blk.fc2(F.gelu(blk.fc1(F.layer_norm(z, (6,), blk.norm.weight, blk.norm.bias, 1e-5))))
    branch, out = blk(z)
    torch.testing.assert_close(branch, want, rtol=0, atol=1e-14)
    torch.testing.assert_close(out, z + want, rtol=0, atol=1e-14)
    x = torch.randn(5, 2, 4, 4, dtype=torch.float64)
    logits, feats = b.forward_intermediates(x)
    torch.testing.assert_close(feats["stem"], b.stem(x.flatten(1)), rtol=0, atol=0)
    z1 = feats["stem"] + feats["blocks.0"]
    torch.testing.assert_close(feats["blocks.1"], b.blocks[1](z1)[0], rtol=0, atol=1e-14)
    torch.testing.assert_close(feats["pre_logits"], z1 + feats["blocks.1"], rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["mlp", "bottleneck_mlp"])
def test_dropout_reaches_every_block_and_only_trains(name):
    m = create_model(name, drop_rate=0.5, **TINY)
    per_block = 1 if name == "mlp" else 2
    assert [mod.p for mod in m.modules() if isinstance(mod, nn.Dropout)] == [0.5] * (2 * per_block)
    x = torch.randn(64, 2, 4, 4)
    torch.manual_seed(0)
    blk = m.blocks[0].train()
    z = torch.randn(256, 6)
    branch = blk(z)[0]
    if name == "bottleneck_mlp":  # the dropout after W_c zeroes half the branch
        assert 0.3 < (branch == 0).float().mean() < 0.7
    else:  # post-norm: LN(drop(ReLU(W z))); the dropped units make the LN's inputs differ
        blk.eval()
        assert not torch.equal(branch, blk(z)[0])
    m.eval()
    torch.testing.assert_close(m(x), m(x), rtol=0, atol=0)
    assert not any(isinstance(mod, nn.Dropout) for mod in create_model(name, **TINY).modules())


def test_smallest_settings_build_and_zero_sizes_are_refused():
    one = create_model("mlp", image_size=1, in_chans=1, num_classes=1, width=1, depth=1)
    assert one(torch.randn(2, 1, 1, 1)).shape == (2, 1)
    for key, what in (("width", r"width \(m\)"), ("depth", r"depth \(L\)"), ("num_classes", "num_classes"),
                      ("in_chans", "in_chans"), ("image_size", "image_size")):
        with pytest.raises(ValueError, match=f"^{what} must be >= 1, got 0$"):
            create_model("mlp", **{**TINY, key: 0})
    for rate in (1.0, -0.1):
        with pytest.raises(ValueError, match=rf"^drop_rate must be in \[0, 1\), got {rate}$"):
            create_model("mlp", drop_rate=rate, **TINY)
    assert create_model("mlp", drop_rate=0.0, **TINY)(torch.randn(1, 2, 4, 4)).shape == (1, 3)


def test_images_of_another_shape_are_refused():
    m = create_model("mlp", **TINY)
    for shape in [(2, 2, 4, 5), (2, 3, 4, 4), (2, 2, 4), (2, 2, 5, 4)]:
        with pytest.raises(ValueError, match=r"^expected images of shape \(N, 2, 4, 4\), got"):
            m(torch.zeros(shape))


def test_a_standard_block_is_post_norm_unless_asked():
    from mlplab.models.mlp import StandardBlock

    blk = StandardBlock(4, "relu", 0.0, 1e-5)
    assert not blk.pre_norm and blk.norm.eps == 1e-5 and (blk.fc.in_features, blk.fc.out_features) == (4, 4)
    assert StandardBlock(4, "relu", 0.0, 1e-5, pre_norm=True).pre_norm


def test_a_post_norm_bottleneck_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match=r"^norm_position='post' exists for standard blocks only; bottleneck blocks "
                                         r"are pre-norm \(drop norm_position or use block='standard'\)$"):
        create_model("bottleneck_mlp", norm_position="post", **TINY)
