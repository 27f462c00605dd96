"""What each weight picture draws (mlplab.analysis.pictures), read back from the figure: the image
arrays, colour scales and titles against the matrices computed here; the Fig. S.9 arrays' laws
and seeds; the refusals."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

import mlplab
from mlplab.analysis.pictures import (
    closest_factorisation,
    effective_weight_arrays,
    image_grid,
    plot_effective_weights,
    plot_stem_filters,
    plot_token_mixing_units,
    stem_filter_images,
    stem_weight,
    token_mixing_unit_images,
    token_mixing_weight,
)


def _drawn(fig, i=0):
    ax = fig.axes[i]
    im = ax.images[0]
    return np.ma.filled(im.get_array().astype(np.float64), np.nan), im.get_clim(), ax.get_title(), im


def test_closest_factorisation_by_brute_force():
    for n in range(1, 200):
        h = max(d for d in range(1, n + 1) if n % d == 0 and d * d <= n)
        assert closest_factorisation(n) == (h, n // h)
    for bad in (0, -3):
        with pytest.raises(ValueError, match=f"n must be >= 1, got {bad}"):
            closest_factorisation(bad)


def test_image_grid_tiles_in_rows_with_padding_of_fill():
    imgs = np.arange(5 * 2 * 3, dtype=float).reshape(5, 2, 3)
    g = image_grid(imgs, ncols=2, pad=2, fill=-1.0)
    assert g.shape == (3 * 4 - 2, 2 * 5 - 2)
    for k in range(5):
        r, c = divmod(k, 2)
        np.testing.assert_array_equal(g[4 * r: 4 * r + 2, 5 * c: 5 * c + 3], imgs[k])
    assert (g[2:4] == -1).all() and (g[:, 3:5] == -1).all() and (g[8:, 5:] == -1).all()
    sq = image_grid(np.ones((5, 1, 1)))  # ncols = ⌈√5⌉ = 3, pad 1, NaN between
    assert sq.shape == (3, 5) and np.isnan(sq[1]).all() and np.isnan(sq[2, 3:]).all()
    rgb = image_grid(np.ones((2, 2, 2, 3)), ncols=1, pad=0)
    assert rgb.shape == (4, 2, 3)


def test_fig_s9_arrays_laws_seeds_and_refusal():
    a = effective_weight_arrays(S=4, C=16, seed=1)  # m = 64, p = 1/16
    sw = a["sw"]
    nz = sw[sw != 0]
    assert abs(nz.size - 64 * 64 / 16) < 5 * math.sqrt(64 * 64 / 16)
    assert float((nz ** 2).mean()) == pytest.approx(16 / 64, rel=0.2)  # (1/√p)² · 1/m
    assert np.array_equal(a["mixer"], np.kron(np.eye(16), a["W"]))
    assert float((a["W"] ** 2).mean()) == pytest.approx(1 / 4, rel=0.6) and a["W"].shape == (4, 4)
    b = effective_weight_arrays(S=4, C=16, seed=1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = effective_weight_arrays(S=4, C=16, seed=2)
    assert not np.array_equal(a["sw"], c["sw"]) and not np.array_equal(a["perm_1"], c["perm_1"])
    d = effective_weight_arrays(S=4, C=4, density=0.5, seed=0)["sw"]
    assert np.count_nonzero(d) / d.size == pytest.approx(0.5, abs=0.15)
    assert float((d[d != 0] ** 2).mean()) == pytest.approx(2 / 16, rel=0.5)  # ones scaled by 1/√p, A ~ N(0, 1/m)
    assert np.unique(a["perm_1"]).tolist() == list(range(64)) and np.unique(a["perm_2"]).tolist() == list(range(64))
    with pytest.raises(ValueError, match=r"W must be 4x4, got \(3, 4\)"):
        effective_weight_arrays(S=4, C=2, W=torch.zeros(3, 4))


def test_fig_s9_draws_the_nonzeros_on_one_symmetric_scale():
    arrays = effective_weight_arrays(S=4, C=4, seed=0)
    fig = plot_effective_weights(arrays)
    vmax = max(np.abs(arrays[k]).max() for k in ("sw", "mixer", "rp_mixer"))
    for i, (key, name) in enumerate([("sw", "SW-MLP"), ("mixer", "Mixer"), ("rp_mixer", "RP-Mixer")]):
        data, clim, title, _ = _drawn(fig, i)
        want = np.where(arrays[key] == 0, np.nan, arrays[key])
        np.testing.assert_array_equal(data, want)
        assert clim == pytest.approx((-vmax, vmax))
        assert title.startswith(name) and title.endswith(f"density {np.count_nonzero(arrays[key]) / 256:.3f}")
    zero = {k: np.zeros((2, 2)) for k in ("sw", "mixer", "rp_mixer")}
    assert _drawn(plot_effective_weights(zero))[1] == (-1.0, 1.0)  # all zero: the scale falls back to ±1
    assert len(plot_effective_weights(S=2, C=2).axes) == 3


def test_token_mixing_units_are_drawn_each_on_its_own_scale():
    torch.manual_seed(0)
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=2, num_classes=3)
    W = model.blocks[1].token_mixing.inner.fc1.weight.detach().double().numpy().copy()
    W[1] = 0.0  # a zero unit is drawn as zeros
    with torch.no_grad():
        model.blocks[1].token_mixing.inner.fc1.weight[1] = 0.0
    fig = plot_token_mixing_units(model, block=1, max_units=5, ncols=2)
    data, clim, title, _ = _drawn(fig)
    units = W[:5].reshape(5, 4, 4)
    scale = np.abs(units).reshape(5, -1).max(1)
    want = image_grid(units / np.where(scale == 0, 1, scale)[:, None, None], 2)
    np.testing.assert_allclose(data, want, rtol=0, atol=1e-7)
    assert clim == (-1.0, 1.0) and title == "token-mixing units, block 1 (4×4 tokens)"
    with pytest.raises(ValueError, match=r"model has no blocks\[5\].token_mixing.inner \(a Mixer is needed\)"):
        token_mixing_weight(model, 5)
    with pytest.raises(ValueError, match="a Mixer is needed"):
        token_mixing_weight(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"shape \(3, 5\) does not hold S=16 weights"):
        token_mixing_unit_images(torch.zeros(2, 16), shape=(3, 5))
    assert token_mixing_unit_images(torch.zeros(2, 16), shape=(2, 8)).shape == (2, 2, 8)
    np.testing.assert_array_equal(token_mixing_unit_images(model, block=1, max_units=2),
                                  W[:2].reshape(2, 4, 4).astype(np.float32).astype(np.float64))


def test_token_mixing_weight_is_the_first_linear_of_the_inner_map():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.GELU()
            self.a = nn.Linear(3, 2)
            self.b = nn.Linear(2, 3)

    class Block(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.token_mixing = nn.Module()
            self.token_mixing.inner = inner

    model = nn.Module()
    model.blocks = nn.ModuleList([Block(Inner()), Block(nn.Sequential(nn.ReLU()))])
    assert torch.equal(token_mixing_weight(model, 0), model.blocks[0].token_mixing.inner.a.weight)
    with pytest.raises(ValueError, match="Sequential contains no nn.Linear"):
        token_mixing_weight(model, 1)


def test_stem_filters_drawn_rgb_and_grey():
    torch.manual_seed(1)
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=5, depth=1, num_classes=3)
    E, P, ch = stem_weight(model)
    assert (P, ch) == (2, 3) and torch.equal(E, model.stem.proj.weight)
    imgs = E.double().numpy().reshape(5, 3, 2, 2).transpose(0, 2, 3, 1)  # (filters, P, P, ch)
    lo, hi = imgs.reshape(5, -1).min(1), imgs.reshape(5, -1).max(1)
    norm = (imgs - lo[:, None, None, None]) / (hi - lo)[:, None, None, None]
    np.testing.assert_allclose(stem_filter_images(model, normalise=True), norm, atol=1e-12)
    np.testing.assert_allclose(stem_filter_images(model, max_filters=2), imgs[:2], atol=1e-7)
    data, _, title, _ = _drawn(plot_stem_filters(model, ncols=5))
    np.testing.assert_allclose(data, np.clip(image_grid(norm, 5, fill=1.0), 0, 1), atol=1e-7)
    assert title == "stem filters (2×2×3)"
    grey = torch.tensor([[1.0, 2.0, 3.0, 5.0], [0.0, 0.0, 0.0, 0.0]])  # a constant filter: all zeros
    data, clim, title, _ = _drawn(plot_stem_filters(grey, patch_size=2, in_chans=1, ncols=2))
    want = image_grid(np.stack([np.array([[0.0, 0.25], [0.5, 1.0]]), np.zeros((2, 2))]), 2, fill=1.0)
    np.testing.assert_allclose(data, want, atol=1e-12)
    assert clim == (0.0, 1.0) and title == "stem filters (2×2×1)"
    with pytest.raises(ValueError, match=r"model has no per-patch FC stem \(model.stem.proj\); pass the weight"):
        stem_weight(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="patch_size and in_chans are needed with a bare weight"):
        stem_filter_images(grey, patch_size=2)
    with pytest.raises(ValueError, match="patch_size and in_chans are needed"):
        stem_filter_images(grey, in_chans=1)
    with pytest.raises(ValueError, match=r"weight has 4 inputs, expected ch·P² = 12"):
        stem_filter_images(grey, patch_size=2, in_chans=3)


def test_fig_s9_defaults_are_the_papers_and_rp_permutes_rows_and_columns():
    a = effective_weight_arrays()  # paper Fig. S.9: S = C = 8, m = 64, density 1/C, seed 0
    assert a["sw"].shape == a["mixer"].shape == a["rp_mixer"].shape == (64, 64) and a["W"].shape == (8, 8)
    assert abs(np.count_nonzero(a["sw"]) - 4096 / 8) < 5 * math.sqrt(4096 * (1 / 8) * (7 / 8))
    b = effective_weight_arrays(8, 8, 1 / 8, 0)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # J[k, p[k]] = 1: (J1 K J2)[i, j] = K[p1[i], p2⁻¹[j]]
    for c in (a, effective_weight_arrays(S=3, C=5, seed=4)):
        want = c["mixer"][np.ix_(c["perm_1"], np.argsort(c["perm_2"]))]
        np.testing.assert_array_equal(c["rp_mixer"], want)
        assert not np.array_equal(c["rp_mixer"], c["mixer"][np.ix_(c["perm_2"], np.argsort(c["perm_1"]))])
    given = torch.arange(9.0).reshape(3, 3)
    np.testing.assert_array_equal(effective_weight_arrays(S=3, C=2, W=given)["mixer"],
                                  np.kron(np.eye(2), given.numpy()))


def test_what_each_figure_looks_like():
    """The layout each picture promises: Fig. S.9 three 4 in panels (4.2 in high), no ticks; the
    grids 6 in wide with the grid's aspect (+0.4 in for the title), no axes; pixels drawn as
    squares (nearest), titles at 10 pt."""
    fig = plot_effective_weights(S=2, C=2)
    assert tuple(fig.get_size_inches()) == (12.0, 4.2)
    for ax in fig.axes:
        assert ax.title.get_fontsize() == 10 and not len(ax.get_xticks()) and not len(ax.get_yticks())
        assert ax.images[0].get_interpolation() == "nearest" and ax.images[0].get_cmap().name == "RdBu_r"
    units = plot_token_mixing_units(torch.ones(5, 6), ncols=3)  # 2×3 units, grid 2 × (3·3 + 2) = 5 × 11
    assert tuple(units.get_size_inches()) == pytest.approx((6.0, 6.0 * 5 / 11 + 0.4))
    stems = [plot_stem_filters(torch.ones(3, 12), patch_size=2, in_chans=3, ncols=3),  # RGB: 2 × 8
             plot_stem_filters(torch.ones(3, 4), patch_size=2, in_chans=1, ncols=1)]  # grey: 8 × 2
    assert tuple(stems[0].get_size_inches()) == pytest.approx((6.0, 6.0 * 2 / 8 + 0.4))
    assert tuple(stems[1].get_size_inches()) == pytest.approx((6.0, 6.0 * 8 / 2 + 0.4))
    for f in (units, *stems):
        ax = f.axes[0]
        assert not ax.axison and ax.title.get_fontsize() == 10 and ax.images[0].get_interpolation() == "nearest"
    assert units.axes[0].images[0].get_cmap().name == stems[1].axes[0].images[0].get_cmap().name == "RdBu_r"


def test_fig_s9_arrays_follow_their_seed_recipe_in_float64():
    """The documented recipe, drawn here from the seed: W, the mask's uniforms, A, J1, J2, float64;
    an entry is kept where u < p strictly (p set to one of the uniforms: that entry is zero)."""
    S, C, seed = 3, 2, 5
    m = S * C
    for given in (None, torch.arange(9).reshape(3, 3), torch.ones(3, 3, dtype=torch.float32)):
        g = torch.Generator().manual_seed(seed)
        W = torch.randn(S, S, generator=g, dtype=torch.float64) / math.sqrt(S) if given is None else given.double()
        u = torch.rand(m, m, generator=g, dtype=torch.float64).numpy()
        A = (torch.randn(m, m, generator=g, dtype=torch.float64) / math.sqrt(m)).numpy()
        p1, p2 = torch.randperm(m, generator=g).numpy(), torch.randperm(m, generator=g).numpy()
        p = float(u[2, 3])
        a = effective_weight_arrays(S=S, C=C, density=p, seed=seed, W=given)
        assert all(a[k].dtype == np.float64 for k in ("sw", "mixer", "rp_mixer", "W"))
        np.testing.assert_array_equal(a["W"], W.numpy())
        np.testing.assert_array_equal(a["sw"], np.where(u < p, 1 / math.sqrt(p), 0.0) * A)
        assert a["sw"][2, 3] == 0.0 and np.count_nonzero(a["sw"]) == np.count_nonzero(u < p)
        np.testing.assert_array_equal(a["perm_1"], p1)
        np.testing.assert_array_equal(a["perm_2"], p2)


def test_image_grid_is_float64_whatever_the_fill():
    g = image_grid(np.full((2, 1, 1), 0.5), ncols=2, fill=0)  # an int fill must not truncate the images
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g, [[0.5, 0.0, 0.5]])


def test_every_figure_is_one_row_of_panels_on_an_agg_canvas_with_10pt_titles():
    """Side by side (Fig. S.9: one row of three), drawn to pixels in memory without pyplot, and
    titled at 10 pt whatever the user's matplotlib defaults."""
    import matplotlib as mpl

    with mpl.rc_context({"font.size": 7.0, "axes.titlesize": 20.0}):
        figs = [plot_effective_weights(S=2, C=2), plot_token_mixing_units(torch.ones(5, 6), ncols=3),
                plot_stem_filters(torch.ones(3, 12), patch_size=2, in_chans=3),
                plot_stem_filters(torch.ones(3, 4), patch_size=2, in_chans=1)]
    for fig in figs:
        n = len(fig.axes)
        for i, ax in enumerate(fig.axes):
            assert ax.get_subplotspec().get_geometry() == (1, n, i, i)
            assert ax.title.get_fontsize() == 10
        fig.canvas.draw()
        w, h = fig.get_size_inches() * fig.dpi
        assert np.asarray(fig.canvas.buffer_rgba()).shape == (int(h), int(w), 4)
    assert len(figs[0].axes) == 3
    assert figs[1].axes[0].get_title() == "token-mixing units, block 0 (2×3 tokens)"


def test_grids_show_the_first_64_units_and_filters_by_default():
    torch.manual_seed(0)
    weights = torch.randn(70, 4)  # 2×2 each; 8 per row: 64 fill 8 rows of 3 pixels less the last pad
    units = _drawn(plot_token_mixing_units(weights, ncols=8))[0]
    stems = _drawn(plot_stem_filters(weights, patch_size=2, in_chans=1, ncols=8))[0]
    assert units.shape == stems.shape == (23, 23)
    w = weights[:64].double().numpy().reshape(64, 2, 2)
    np.testing.assert_allclose(units, image_grid(w / np.abs(w).reshape(64, -1).max(1)[:, None, None], 8),
                               rtol=0, atol=1e-7)


def test_grey_stems_show_channel_0_of_other_channel_counts_on_a_fixed_0_1_scale():
    torch.manual_seed(2)
    E = torch.randn(3, 2 * 2 * 2, dtype=torch.float64)  # two channels: channel 0 drawn
    f = E.numpy().reshape(3, 2, 2, 2).transpose(0, 2, 3, 1)
    lo, hi = f.reshape(3, -1).min(1), f.reshape(3, -1).max(1)
    norm = (f - lo[:, None, None, None]) / (hi - lo)[:, None, None, None]
    data, clim, title, _ = _drawn(plot_stem_filters(E, patch_size=2, in_chans=2, ncols=3))
    np.testing.assert_allclose(data, image_grid(norm[..., 0], 3, fill=1.0), rtol=0, atol=1e-12)
    assert clim == (0.0, 1.0) and title == "stem filters (2×2×2)"
    # a constant filter alone (all 0) and a diverged run's NaN filters (only the 1.0 padding
    # finite) keep the 0–1 scale rather than one fitted to the data
    assert _drawn(plot_stem_filters(torch.full((1, 4), 3.0), patch_size=2, in_chans=1))[1] == (0.0, 1.0)
    assert _drawn(plot_stem_filters(torch.full((2, 4), math.nan), patch_size=2, in_chans=1, ncols=2))[1] == (0.0, 1.0)


def test_token_units_keep_the_symmetric_unit_scale_for_one_signed_weights():
    for sign in (1.0, -1.0):
        assert _drawn(plot_token_mixing_units(sign * torch.ones(5, 4), ncols=3))[1] == (-1.0, 1.0)


def test_stem_filters_of_odd_patches_and_the_exact_refusals():
    E = torch.arange(18.0).reshape(2, 9)  # P = 3, one channel: 9 = 1·3², not 1·3·2
    np.testing.assert_array_equal(stem_filter_images(E, patch_size=3, in_chans=1)[..., 0],
                                  E.double().numpy().reshape(2, 3, 3))
    with pytest.raises(ValueError, match=r"^weight has 9 inputs, expected ch·P² = 27$"):
        stem_filter_images(E, patch_size=3, in_chans=3)
    with pytest.raises(ValueError, match=r"^patch_size and in_chans are needed with a bare weight$"):
        stem_filter_images(E, patch_size=3)
    with pytest.raises(ValueError, match=r"^model has no per-patch FC stem \(model.stem.proj\); "
                                         r"pass the weight instead$"):
        stem_weight(nn.Linear(2, 2))
