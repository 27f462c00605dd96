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
    model = mlplab.create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=6, depth=3, token_hidden=7,
                                num_classes=3)
    with torch.no_grad():  # a zero unit in block 1: blocks weigh by their nonzero units
        model.blocks[1].token_mixing.inner.fc1.weight[2].zero_()
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
                                      paired_units(imgs, inverse_partners(W[rows], 0.2)["partner"], min(16, len(rows))))
    assert [s["units"] for s in per] == [7, 6]
    for key in ("frac_inverse", "mean_min_cos", "frac_closest_is_inverse"):
        assert stats[key] == pytest.approx((7 * per[0][key] + 6 * per[1][key]) / 13, abs=1e-12)
    emb = stem_filter_images(model)
    assert stats["embedding_frequency"] == pytest.approx(np.nanmean(mean_frequency(emb)), abs=1e-12)
    f = mean_frequency(emb)
    first = emb[np.argsort(f, kind="stable")[:32]].mean(-1)
    np.testing.assert_allclose(arrays["embedding_units"],
                               first / np.abs(first).reshape(len(first), -1).max(1)[:, None, None], atol=1e-12)
    assert "block2_frac_inverse" not in stats


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
