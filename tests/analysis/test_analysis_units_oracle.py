"""The unit statistics of mixer-weights and sm-weights (mlplab.analysis.units) against loops written
here: every cosine, partner and fraction of inverse_partners, the pooled statistics of a model's
blocks, the pairs Fig. 1 shows, the spatial frequency of a unit from its DFT sum, and r½ by
scanning every radius."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mlplab
from mlplab.analysis.pictures import stem_filter_images, token_mixing_unit_images, token_mixing_weight
from mlplab.analysis.units import (
    INVERSE_TAU,
    half_energy_radius,
    inverse_partners,
    mean_frequency,
    paired_units,
    weight_stats,
)


def _partners_by_loops(W: np.ndarray, tau: float):
    rows = [i for i in range(len(W)) if np.linalg.norm(W[i]) > 0]
    cos = {(u, v): float(W[u] @ W[v] / (np.linalg.norm(W[u]) * np.linalg.norm(W[v]))) for u in rows for v in rows}
    partner, min_cos, closest_neg = [], [], []
    for u in rows:
        others = [v for v in rows if v != u]
        v_min = min(others, key=lambda v: cos[u, v])  # first of equal minima, as argmin
        v_abs = max(others, key=lambda v: abs(cos[u, v]))
        partner.append(v_min)
        min_cos.append(cos[u, v_min])
        closest_neg.append(cos[u, v_abs] < 0)
    return rows, partner, np.array(min_cos), {
        "units": len(rows), "frac_inverse": float(np.mean(np.array(min_cos) <= -tau)),
        "mean_min_cos": float(np.mean(min_cos)), "frac_closest_is_inverse": float(np.mean(closest_neg))}


@pytest.mark.parametrize("tau", [INVERSE_TAU, 0.3])
def test_inverse_partners_are_the_loops_over_every_pair(tau):
    rng = np.random.default_rng(0)
    base = rng.normal(size=(4, 9))
    W = np.vstack([base, -base[:2] + 0.8 * rng.normal(size=(2, 9)), np.zeros((1, 9)), rng.normal(size=(3, 9))])
    rows, partner, min_cos, stats = _partners_by_loops(W, tau)
    got = inverse_partners(W, tau)
    assert got["kept"].tolist() == rows and got["partner"].tolist() == partner  # indices of W's rows
    np.testing.assert_allclose(got["min_cos"], min_cos, rtol=0, atol=1e-12)
    for key, value in stats.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    assert inverse_partners(W)["frac_inverse"] == _partners_by_loops(W, 0.5)[3]["frac_inverse"]  # τ = 0.5 by default


def test_a_cosine_of_exactly_minus_tau_counts_as_an_inverse():
    W = np.array([[1.0, 0.0], [-0.5, math.sqrt(3) / 2], [-0.5, -math.sqrt(3) / 2]])  # pairwise cos −1/2
    ip = inverse_partners(W, tau=0.5 - 1e-9)
    assert ip["frac_inverse"] == 1.0 and ip["frac_closest_is_inverse"] == 1.0
    assert inverse_partners(W, tau=0.5 + 1e-9)["frac_inverse"] == 0.0
    orth = inverse_partners(np.eye(3), tau=0.0)  # cos 0: "≤ −0" holds, "< 0" (closest is inverse) does not
    assert orth["frac_inverse"] == 1.0 and orth["frac_closest_is_inverse"] == 0.0
    assert inverse_partners(np.array([[1.0, 0.0], [2.0, 0.0]]))["units"] == 2  # two units are enough


def test_mean_frequency_is_the_power_weighted_dft_sum():
    rng = np.random.default_rng(1)
    imgs = rng.normal(size=(3, 4, 6, 2))
    want = []
    for im in imgs:
        num = den = 0.0
        for ky in range(4):
            for kx in range(6):
                F = sum(im[y, x] * np.exp(-2j * np.pi * (ky * y / 4 + kx * x / 6)) for y in range(4) for x in range(6))
                power = float(np.sum(np.abs(F) ** 2))  # channels' power summed
                fy, fx = (ky if ky < 2 else ky - 4) / 4, (kx if kx < 3 else kx - 6) / 6
                num += power * math.hypot(fy, fx)
                den += power
        want.append(num / den)
    np.testing.assert_allclose(mean_frequency(imgs), want, rtol=1e-12)
    with pytest.raises(ValueError, match=r"images must be \(n, h, w\) or \(n, h, w, ch\), got shape \(1, 2, 2, 1, 1\)"):
        mean_frequency(np.zeros((1, 2, 2, 1, 1)))


def test_paired_units_shows_each_unit_once_low_frequency_first():
    checker = (-1.0) ** np.add.outer(np.arange(4), np.arange(4))
    const = np.ones((4, 4))
    stripes = np.cos(np.pi * np.arange(4))[None, :].repeat(4, 0) * 0.5  # frequency 1/2 along x
    imgs = np.stack([checker, 2 * const, stripes, np.zeros((4, 4)), -const])
    partner = np.array([2, 4, 0, 0, 1])
    out = paired_units(imgs, partner, 10)
    # order by frequency: 2·const (0), −const (0), stripes (1/2), checker (√2/2), zero (NaN, last);
    # −const and checker were shown as partners, so they are skipped; a partner may repeat
    expected = [const, -const, stripes / 0.5, checker, np.zeros((4, 4)), checker]
    np.testing.assert_array_equal(out, np.stack(expected))
    assert paired_units(imgs, partner, 1).shape == (2, 4, 4)


def test_weight_stats_pool_the_blocks_by_their_units():
    torch.manual_seed(0)
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=40, depth=3, token_hidden=64,
                                num_classes=3)
    with torch.no_grad():  # a zero unit in block 1: blocks weigh by their nonzero units
        model.blocks[1].token_mixing.inner.fc1.weight[2].zero_()
        stem = model.stem.proj.weight
        c, v, h, k = (torch.tensor(p) for p in ([1.0, 1, 1, 1], [1.0, -1, 1, -1], [1.0, 1, -1, -1], [1.0, -1, -1, 1]))
        groups = [[c, -c], [v, h, -v, -h], [k, -k]]  # frequencies exactly 0, 1/2 and √2/2
        for i in range(40):  # three interleaved groups of distinct filters with tied frequencies
            stem[i] = 2.0 ** ((i // 3) % 3 - 1) * groups[i % 3][(i // 3) % len(groups[i % 3])].repeat(3)
        stem[35] = 0.0  # no energy: frequency NaN, sorted last
        stem[31] = torch.tensor([1.0] * 4 + [-1.0] * 4 + [0.0] * 4)  # channels cancel: a zero mean image, shown as 0
    stats, arrays = weight_stats(model, blocks=2, tau=0.2)
    per = []
    for b in range(2):
        W = token_mixing_weight(model, b).double().numpy()
        rows, _, _, s = _partners_by_loops(W, 0.2)
        per.append(s)
        for key in ("frac_inverse", "mean_min_cos", "frac_closest_is_inverse"):
            assert stats[f"block{b}_{key}"] == pytest.approx(s[key], abs=1e-12)
        imgs = token_mixing_unit_images(torch.from_numpy(W[rows]))
        assert stats[f"block{b}_token_frequency"] == pytest.approx(np.nanmean(mean_frequency(imgs)), abs=1e-12)
        np.testing.assert_array_equal(arrays[f"token_units_block{b}"],
                                      paired_units(imgs, inverse_partners(W[rows], 0.2)["partner"], 16))
    assert [s["units"] for s in per] == [64, 63]
    assert arrays["token_units_block0"].shape == (32, 4, 4)  # 16 pairs of 64 units
    for key in ("frac_inverse", "mean_min_cos", "frac_closest_is_inverse"):
        assert stats[key] == pytest.approx((64 * per[0][key] + 63 * per[1][key]) / 127, abs=1e-12)
    emb = stem_filter_images(model)
    f = mean_frequency(emb)
    assert stats["embedding_frequency"] == pytest.approx(np.nanmean(f), abs=1e-12)
    first = emb[np.argsort(f, kind="stable")[:32]].mean(-1)  # numpy sorts NaN last; ties in index order
    scale = np.abs(first).reshape(len(first), -1).max(1)
    np.testing.assert_allclose(arrays["embedding_units"], first / np.where(scale > 0, scale, 1)[:, None, None],
                               rtol=0, atol=1e-12)
    assert arrays["embedding_units"].shape == (32, 2, 2) and "block2_frac_inverse" not in stats
    assert not arrays["embedding_units"].reshape(32, -1).any(1).all()  # stem row 31 is among them, shown as 0


def test_half_energy_radius_scans_every_radius():
    rng = np.random.default_rng(4)
    imgs = rng.normal(size=(5, 6, 7)) * (rng.random((5, 6, 7)) < 0.4)
    got = half_energy_radius(imgs)
    for u, im in enumerate(imgs):
        e = im ** 2
        yy, xx = np.mgrid[0:6, 0:7]
        cy, cx = (e * yy).sum() / e.sum(), (e * xx).sum() / e.sum()
        d = np.hypot(yy - cy, xx - cx)
        r = min(float(r) for r in np.unique(d) if e[d <= r].sum() >= 0.5 * e.sum() * (1 - 1e-12))
        assert got[u] == pytest.approx(r, abs=1e-12)
    # exactly half the energy within a radius is enough
    two = np.zeros((1, 1, 3))
    two[0, 0, 0], two[0, 0, 2] = 1.0, 1.0
    assert half_energy_radius(two)[0] == 1.0


def test_half_energy_radius_edge_cases_and_precision():
    # energies a², 1, a² in a row with a² chosen so that the centre pixel holds exactly the threshold
    # ½·total·(1 − 10⁻¹²): "at least half" keeps the centre alone, r½ = 0
    a = 0.7071067811872547
    row = np.array([[[a, 1.0, a]]])
    assert 1.0 == 0.5 * (row ** 2).sum() * (1 - 1e-12)
    assert half_energy_radius(row)[0] == 0.0
    small = np.zeros((1, 3, 3))
    small[0, 2, 0] = 0.5  # total energy 1/4 (< 1): still a radius, not NaN
    assert half_energy_radius(small)[0] == 0.0
    rgb = np.zeros((1, 1, 3, 2))  # energy Σ_ch w² with values other than 0 and 1
    rgb[0, 0, 0] = [3.0, 0.5]  # 9.25
    rgb[0, 0, 2] = [-1.0, 2.0]  # 5: centre at x = 2·5/14.25; the heavier pixel is nearer
    assert half_energy_radius(rgb)[0] == pytest.approx(2 * 5 / 14.25, abs=1e-12)
    rng = np.random.default_rng(5)
    x32 = rng.normal(size=(4, 5, 6)).astype(np.float32)  # float32 input: computed in float64
    np.testing.assert_array_equal(half_energy_radius(x32), half_energy_radius(x32.astype(np.float64)))


def test_no_warning_for_units_without_energy():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(half_energy_radius(np.zeros((1, 3, 3)))[0])
        assert np.isnan(mean_frequency(np.zeros((1, 3, 3)))[0])


def test_mean_frequency_of_faint_and_float32_images():
    checker = (-1.0) ** np.add.outer(np.arange(2), np.arange(2))
    assert mean_frequency(0.1 * checker[None])[0] == pytest.approx(math.sqrt(2) / 2)  # total power 0.16 < 1
    x32 = np.random.default_rng(6).normal(size=(3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(mean_frequency(x32), mean_frequency(x32.astype(np.float64)))


def test_inverse_partners_of_float32_weights_and_the_refusal():
    W = np.random.default_rng(7).normal(size=(6, 5)).astype(np.float32)
    a, b = inverse_partners(W), inverse_partners(W.astype(np.float64))
    np.testing.assert_array_equal(a["min_cos"], b["min_cos"])
    with pytest.raises(ValueError, match="^inverse_partners needs at least two nonzero units$"):
        inverse_partners(np.zeros((3, 2)))


def test_paired_units_order_ties_by_unit_index():
    """Units of equal frequency are shown in index order (a stable sort), whatever numpy's default sort does."""
    n = 40
    partner = (np.arange(n) + n // 2) % n
    freq = np.stack([np.ones((2, 2)) * (i + 1) for i in range(n)])
    freq[:, 0, 0] += np.arange(n) % 3 * 0.1  # three frequency groups, each with ties
    f = mean_frequency(freq)
    order = [int(u) for u in np.argsort(f, kind="stable")]
    shown = []
    for u in order:
        if len(shown) >= 2 * 25:
            break
        if u not in shown:
            shown += [u, int(partner[u])]
    want = freq[shown] / np.abs(freq[shown]).reshape(len(shown), -1).max(1)[:, None, None]
    np.testing.assert_array_equal(paired_units(freq, partner, 25), want)


def test_unit_picture_scales_by_hand():
    from mlplab.analysis.pictures import image_grid
    from mlplab.analysis.units import unit_picture

    rng = np.random.default_rng(8)
    colour = rng.normal(size=(3, 2, 2, 3))
    colour[1] = 0.7  # a constant unit: shown as 0, not NaN
    image, symmetric = unit_picture(colour)
    lo = colour.reshape(3, -1).min(1)[:, None, None, None]
    span = colour.reshape(3, -1).max(1)[:, None, None, None] - lo
    want = image_grid((colour - lo) / np.where(span > 0, span, 1.0), fill=1.0)  # white padding
    assert not symmetric and not np.isnan(image).any()
    np.testing.assert_allclose(image, want, rtol=0, atol=1e-15)
    grey = np.zeros((2, 2, 2, 1))
    grey[0, 0, 1, 0], grey[1, 1, 0, 0] = -0.5, 0.25  # faint units: each still reaches ±1
    image, symmetric = unit_picture(grey)
    np.testing.assert_array_equal(image, image_grid(np.stack([grey[0, ..., 0] / 0.5, grey[1, ..., 0] / 0.25])))
    assert symmetric


def test_half_energy_radius_names_the_axis_it_gathers_along(monkeypatch):
    """np.take_along_axis has a default axis only since numpy 2.3: the axis is given explicitly."""
    import mlplab.analysis.units as units

    seen = []
    take = np.take_along_axis
    monkeypatch.setattr(units.np, "take_along_axis", lambda a, i, *args, **kw: seen.append(args + tuple(kw.values()))
                        or take(a, i, *args, **kw))
    half_energy_radius(np.ones((2, 3, 3)))
    assert seen == [(1,), (1,)]
