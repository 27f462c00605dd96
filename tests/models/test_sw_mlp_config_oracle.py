"""An SW-MLP is built as its config says, each fact against a number written here (sw_mlp.py):
the width m = ⌊√(Ω/(γp)) + ½⌋ and the budget Ω = pγm², the stream each layer's mask and values
are drawn from, the meta build's sizes, the stem choice, hidden widths, dropout, the head's
initialisation and the edges of every refused setting. Tiny widths throughout."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from mlplab import create_model
from mlplab.layers.masked import MaskedLinear, SparseLinear
from mlplab.models.sw_mlp import DEFAULT_SW_WIDTH, sw_width
from mlplab.utils.seeds import derive_seed

TINY = dict(image_size=8, patch_size=2, num_classes=5, depth=2)  # S0 = 16 patches


def test_width_rounds_half_up_from_the_budget():
    assert sw_width(6.25, 1.0) == 3  # √6.25 = 2.5 -> 3 (Python's round would give 2)
    assert sw_width(12.25, 1.0) == 4  # 3.5 -> 4
    assert sw_width(100.0, 0.25, 4.0) == 10  # √(100 / (4 · 0.25))
    assert sw_width(2.0 ** 18, 0.5, 2.0) == 512
    assert sw_width(5.0, 1.0) == 2 and sw_width(7.0, 1.0) == 3  # √5 = 2.24, √7 = 2.65
    assert sw_width(1e-6, 1.0) == 0  # the model refuses m = 0, not the formula


@pytest.mark.parametrize("args, message", [
    ((0.0, 0.5), r"^omega \(connection budget\) must be > 0, got 0.0$"),
    ((-4.0, 0.5), r"omega \(connection budget\) must be > 0"),
    ((16.0, 0.0), r"^density p must be in \(0, 1\], got 0.0; pass e.g. density=0.1$"),
    ((16.0, 1.01), r"density p must be in \(0, 1\]"),
    ((16.0, 0.5, 0.0), r"^expansion \(gamma\) must be > 0, got 0.0$"),
    ((16.0, 0.5, -1.0), r"expansion \(gamma\) must be > 0"),
])
def test_width_refuses_what_has_no_width(args, message):
    with pytest.raises(ValueError, match=message):
        sw_width(*args)


def test_width_omega_or_the_default_and_the_budget_it_spends():
    m = create_model("sw_mlp", omega=4.0 * 6.25, density=0.25, **TINY)  # √(25 / 0.25) = 10
    assert m.width == m.effective_width == 10 and m.omega == 0.25 * 100
    b = create_model("sw_mlp_block", omega=2.0 ** 9, density=0.5, expansion=4.0, **TINY)  # √(512 / 2) = 16
    assert b.width == 16 and b.omega == 0.5 * 4.0 * 256
    assert create_model("sw_mlp", width=7, density=0.5, **TINY).omega == 0.5 * 49
    with torch.device("meta"):
        d = create_model("sw_mlp", density=1.0, image_size=8, patch_size=8, depth=1)
    assert d.width == DEFAULT_SW_WIDTH == 1024 and d.stem_kind == "patch"  # S0 = 1 divides every m
    assert create_model("sw_mlp", width=1, density=1.0, **TINY).width == 1
    with pytest.raises(ValueError, match="^width m must be >= 1, got 0; raise width"):
        create_model("sw_mlp", omega=1e-6, density=1.0, **TINY)


def test_each_layer_draws_its_mask_and_values_from_its_own_stream():
    """Layer (block i, sub s) is MaskedLinear/SparseLinear.random(in, out, p, seed') with
    seed' = derive_seed(seed, "sw_mlp", i, s): fc1 is s = 0, fc2 s = 1."""
    kw = dict(TINY, width=16, density=0.3, seed=7, depth=2)
    for storage, cls in (("masked", MaskedLinear), ("sparse", SparseLinear)):
        for block, expansion in (("fc", 1.0), ("mlp", 1.5)):
            m = create_model("sw_mlp", block=block, expansion=expansion, storage=storage, mask_scale=True, **kw)
            for i, blk in enumerate(m.blocks):
                layers = [blk.fc1] if block == "fc" else [blk.fc1, blk.fc2]
                sizes = [(16, 16)] if block == "fc" else [(16, 24), (24, 16)]
                for s, (layer, (n_in, n_out)) in enumerate(zip(layers, sizes)):
                    want = cls.random(n_in, n_out, 0.3, derive_seed(7, "sw_mlp", i, s), bias=True, mask_scale=True)
                    assert type(layer) is cls and (layer.in_features, layer.out_features) == (n_in, n_out)
                    torch.testing.assert_close(layer.effective_weight(), want.effective_weight(), rtol=0, atol=0)
                    assert float(layer.scale) == pytest.approx(0.3 ** -0.5)
            assert (blk.fc2 is None) == (block == "fc") and [b.index for b in m.blocks] == [0, 1]


def test_unscaled_and_bias_free_layers():
    m = create_model("sw_mlp", width=16, density=0.5, bias=False, **TINY)
    assert all(blk.fc1.bias is None and float(blk.fc1.scale) == 1.0 for blk in m.blocks)


@pytest.mark.parametrize("storage", ["masked", "sparse"])
def test_a_meta_build_is_sized_not_drawn(storage):
    """On the meta device (a run plan's parameter count) the masked layers are dense-sized and
    the sparse ones hold the expected nonzeros round(p·in·out)."""
    with torch.device("meta"):
        m = create_model("sw_mlp_block", width=16, density=0.3, expansion=1.5, storage=storage, bias=False, **TINY)
    fc1, fc2 = m.blocks[0].fc1, m.blocks[0].fc2
    assert (fc1.in_features, fc1.out_features, fc2.in_features, fc2.out_features) == (16, 24, 24, 16)
    assert fc1.bias is None
    if storage == "masked":
        assert fc1.mask.shape == (24, 16) and fc1.weight.shape == (24, 16)
        assert fc1.mask.is_meta and fc1.mask.dtype == torch.bool  # not drawn on the CPU
    else:
        assert fc1.values.shape == (round(0.3 * 16 * 24),) and fc2.values.shape == (round(0.3 * 24 * 16),)
    with torch.device("meta"):
        biased = create_model("sw_mlp", width=16, density=0.3, storage=storage, **TINY)
    assert biased.blocks[0].fc1.bias.shape == (16,)


def test_stem_choice_and_the_width_it_suggests():
    patch = create_model("sw_mlp", width=32, density=0.5, **TINY)  # 32 = 16 patches · C = 2
    assert patch.stem_kind == "patch" and patch.stem.proj.out_features == 2 and patch.stem.proj.in_features == 12
    assert patch.num_patches == 16 and patch.stem.num_patches == 16
    dense = create_model("sw_mlp", width=24, density=0.5, **TINY)
    assert dense.stem_kind == "dense" and (dense.stem.in_features, dense.stem.out_features) == (192, 24)
    forced = create_model("sw_mlp", width=32, density=0.5, stem="dense", **TINY)
    assert forced.stem_kind == "dense" and forced.stem.out_features == 32
    with pytest.raises(ValueError, match=r"^stem='patch' needs width m=40 to be a multiple of the S0=16 patches "
                                         r"\(C = m/S0\); use stem='dense' or 'auto', or a width such as 32$"):
        create_model("sw_mlp", width=40, density=0.5, stem="patch", **TINY)
    with pytest.raises(ValueError, match="or a width such as 16$"):
        create_model("sw_mlp", width=10, density=0.5, stem="patch", **TINY)


def test_hidden_width_layer_norms_and_dropout():
    m = create_model("sw_mlp_block", width=16, density=0.5, expansion=1.3, drop_rate=0.25, norm_eps=1e-3, **TINY)
    assert m.blocks[0].fc1.out_features == 21  # round(1.3 · 16) = 20.8
    norms = [mod for mod in m.modules() if isinstance(mod, nn.LayerNorm)]
    assert len(norms) == 3 and {n.eps for n in norms} == {1e-3} and {n.normalized_shape for n in norms} == {(16,)}
    assert [mod.p for mod in m.modules() if isinstance(mod, nn.Dropout)] == [0.25, 0.25]
    x = torch.randn(4, 16)
    blk = m.blocks[0].train()
    branch, out = blk(x)
    assert (branch == 0).float().mean() > 0.1  # the dropout after fc2 zeroes a quarter of the branch
    torch.testing.assert_close(out, x + branch)
    blk.eval()
    torch.testing.assert_close(blk(x)[0], blk(x)[0], rtol=0, atol=0)
    fc = create_model("sw_mlp", width=16, density=0.5, drop_rate=0.5, **TINY).blocks[0].train()
    assert (fc(x)[0] == 0).float().mean() > 0.3  # the fc block's dropout on its output
    plain = create_model("sw_mlp", width=16, density=0.5, norm=False, **TINY)
    assert not any(isinstance(mod, (nn.LayerNorm, nn.Dropout)) for mod in plain.modules())
    with pytest.raises(ValueError, match=r"^hidden width round\(expansion\*m\) = 0; raise expansion$"):
        create_model("sw_mlp_block", width=16, density=0.5, expansion=0.02, **TINY)
    assert create_model("sw_mlp_block", width=16, density=0.5, expansion=1 / 16, **TINY).blocks[0].fc1.out_features == 1


def test_the_head_starts_at_torchs_default_or_zero():
    torch.manual_seed(0)
    m = create_model("sw_mlp", width=64, density=0.5, num_classes=32, image_size=8, patch_size=2, depth=1)
    w, bound = m.head.weight.detach().double(), 1 / math.sqrt(64)
    assert w.abs().max() <= bound and w.abs().max() > 0.97 * bound and m.head.bias.abs().max() > 0
    z = create_model("sw_mlp", width=64, density=0.5, num_classes=32, image_size=8, patch_size=2, depth=1,
                     zero_head=True)
    assert not z.head.weight.any() and not z.head.bias.any()


def test_smallest_settings_build_and_zero_sizes_are_refused():
    one = create_model("sw_mlp", width=1, density=1.0, image_size=2, patch_size=2, in_chans=1, num_classes=1,
                       depth=1)
    assert one(torch.randn(3, 1, 2, 2)).shape == (3, 1)
    for key, what in (("depth", r"depth \(L\)"), ("num_classes", "num_classes"), ("in_chans", "in_chans")):
        with pytest.raises(ValueError, match=rf"^{what} must be >= 1, got 0$"):
            create_model("sw_mlp", width=16, density=0.5, **{**TINY, key: 0})


@pytest.mark.parametrize("kw, message", [
    (dict(block="mlp", expansion=0.0), r"^expansion \(gamma\) must be > 0, got 0.0$"),
    (dict(block="mlp", expansion=-2.0), r"expansion \(gamma\) must be > 0"),
    (dict(drop_rate=1.0), r"^drop_rate must be in \[0, 1\), got 1.0$"),
    (dict(drop_rate=-0.5), r"drop_rate must be in \[0, 1\)"),
    (dict(density=0.0), r"^density p must be in \(0, 1\], got 0.0; pass e.g. density=0.1$"),
    (dict(density=1.5), r"^density p must be in \(0, 1\], got 1.5; pass e.g. density=0.1$"),
    (dict(expansion=0.5), r"^expansion=0.5 only applies to block='mlp'; use block='mlp' or expansion=1$"),
])
def test_refused_settings_at_their_edges(kw, message):
    with pytest.raises(ValueError, match=message):
        create_model("sw_mlp", width=16, **{**dict(TINY, density=0.5), **kw})


def test_density_one_is_dense():
    m = create_model("sw_mlp", width=16, density=1.0, **TINY)
    assert bool(m.blocks[0].fc1.mask.all())
