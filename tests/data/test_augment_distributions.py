"""The augmentations' distributions, not only their bounds.

Every test draws from a fixed seed, so it is deterministic and cannot flake; the thresholds are
the usual p-value floors (chi-square, binomial, Kolmogorov–Smirnov), and the sample sizes are
large enough that a biased variant — a crop that never reaches the far edge, a flip with the
wrong probability, a box centre that skips the last row — lands far below them. Where the law
is a geometry (random erasing, RandomResizedCrop), the oracle is the timm recipe re-implemented
in float64 numpy with its own random numbers, compared by two-sample tests.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from mlplab.data import AugmentConfig, build_augment
from mlplab.data.augment import (
    _boxes,
    crop_flip_host,
    erasing_masks,
    mix_batch,
    normalize,
    one_hot,
    random_crop,
    random_erasing,
    random_hflip,
    sample_beta,
)
from mlplab.data.resized_crop import resized_crop_boxes

P_FLOOR = 1e-4  # a fixed seed: a correct sampler is far above it, a biased one far below


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- crop and flip

@pytest.mark.parametrize("padding", [1, 3])
def test_crop_offsets_are_uniform_over_every_position_including_the_far_edge(padding):
    n, k = 20000, 2 * padding + 1
    x = torch.zeros(n, 1, 2, 3, dtype=torch.uint8)
    _, off = random_crop(x, padding, gen(1), return_offsets=True)
    assert off.dtype == torch.int64 and off.shape == (n, 2)
    cells = torch.bincount(off[:, 0] * k + off[:, 1], minlength=k * k).numpy()
    assert len(cells) == k * k and cells.min() > 0  # every (dy, dx), the far corner (2p, 2p) too
    assert stats.chisquare(cells).pvalue > P_FLOOR  # the joint law is uniform on the k x k grid
    sd = math.sqrt((k * k - 1) / 12 / n)  # of the mean of a discrete uniform on k values
    for axis in (0, 1):  # unbiased: the mean shift dy - p, dx - p is 0
        assert abs(off[:, axis].double().mean().item() - padding) < 4 * sd


def test_crop_without_padding_is_the_identity_with_zero_offsets():
    x = torch.randint(0, 256, (5, 2, 4, 4), dtype=torch.uint8, generator=gen(0))
    out, off = random_crop(x, 0, gen(1), return_offsets=True)
    assert out is x and off.dtype == torch.int64 and torch.equal(off, torch.zeros(5, 2, dtype=torch.long))
    assert random_crop(x, 0, gen(1)) is x
    _, off = random_crop(torch.empty(3, 1, 2, 2, device="meta"), 0, gen(1), return_offsets=True)
    assert off.device.type == "meta" and off.dtype == torch.int64  # on the batch's device


def test_crop_windows_read_the_padded_image_for_non_square_images():
    x = torch.randint(1, 256, (200, 2, 5, 7), dtype=torch.uint8, generator=gen(3))
    out, off = random_crop(x, 2, gen(4), return_offsets=True)
    padded = np.pad(x.numpy(), ((0, 0), (0, 0), (2, 2), (2, 2)))
    for b in range(200):
        dy, dx = off[b].tolist()
        np.testing.assert_array_equal(out[b].numpy(), padded[b, :, dy:dy + 5, dx:dx + 7])


@pytest.mark.parametrize("p", [0.5, 0.2])
def test_flip_probability_is_p(p):
    n = 20000
    x = torch.arange(n * 3, dtype=torch.float32).view(n, 1, 1, 3)
    out, mask = random_hflip(x, gen(2), p, return_mask=True)
    assert stats.binomtest(int(mask.sum()), n, p).pvalue > P_FLOOR
    assert torch.equal(out[mask], x[mask].flip(-1)) and torch.equal(out[~mask], x[~mask])
    host = crop_flip_host(x.to(torch.uint8).view(n, 1, 1, 3), 0, True, gen(2), p)
    flipped = (host[:, 0, 0, 0] != x.to(torch.uint8)[:, 0, 0, 0])
    assert torch.equal(flipped, mask)  # the host path flips the same samples with the same law


@pytest.mark.parametrize("padding,hflip,p", [(2, True, 0.3), (3, False, 0.5), (1, True, 1.0)])
def test_host_crop_flip_equals_the_batched_ops_on_rectangles(padding, hflip, p):
    x = torch.randint(0, 256, (300, 2, 5, 9), dtype=torch.uint8, generator=gen(7))
    g1, g2 = gen(8), gen(8)
    want = random_crop(x, padding, g1)
    if hflip:
        want = random_hflip(want, g1, p)
    assert torch.equal(crop_flip_host(x, padding, hflip, g2, p), want)


# ----------------------------------------------------------------------------- mixup / cutmix

def test_sample_beta_without_alpha_is_ones_of_the_dtype():
    for alpha in (0.0, -1.0):
        ones = sample_beta(alpha, 7, gen(0), dtype=torch.float64)
        assert ones.dtype == torch.float64 and torch.equal(ones, torch.ones(7, dtype=torch.float64))
    assert sample_beta(0.5, 5, gen(0)).dtype == torch.float32


@pytest.mark.parametrize("alpha", [0.4, 1.7])
def test_mixup_lam_is_beta_alpha_per_sample(alpha):
    n = 8000
    x = torch.rand(n, 1, 1, 2, generator=gen(0), dtype=torch.float64)
    t = one_hot(torch.arange(n) % 3, 3, dtype=torch.float64)
    out, tgt, lam = mix_batch(x, t, gen(5), mixup_alpha=alpha, mode="elem")
    lam64 = lam.double()
    assert stats.kstest(lam64.numpy(), stats.beta(alpha, alpha).cdf).pvalue > P_FLOOR
    want = lam64.view(-1, 1, 1, 1) * x + (1 - lam64.view(-1, 1, 1, 1)) * x.flip(0)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)  # a blend with the reversed batch
    torch.testing.assert_close(tgt, lam64[:, None] * t + (1 - lam64[:, None]) * t.flip(0), rtol=0, atol=1e-12)


def test_mix_prob_and_switch_prob_are_the_probabilities_they_name():
    n = 8000
    x = torch.rand(n, 1, 4, 4, generator=gen(0), dtype=torch.float64)
    t = one_hot(torch.arange(n) % 2, 2, dtype=torch.float64)
    _, _, lam = mix_batch(x, t, gen(6), mixup_alpha=1.0, mix_prob=0.7, mode="elem")
    assert stats.binomtest(int((lam == 1).sum()), n, 0.3).pvalue > P_FLOOR  # unmixed: 1 - mix_prob
    out, _, lam = mix_batch(x, t, gen(7), mixup_alpha=1.0, cutmix_alpha=1.0, switch_prob=0.3, mode="elem")
    partner = x.flip(0)
    pasted = ((out == x) | (out == partner)).flatten(1).all(1)  # cutmix: every pixel from one of the two
    assert stats.binomtest(int(pasted.sum()), n, 0.3).pvalue > P_FLOOR
    area = (out == partner).flatten(1).double().mean(1)  # pixels taken from the partner
    torch.testing.assert_close(lam[pasted].double(), 1 - area[pasted], rtol=0, atol=1e-6)
    blended = ~pasted
    want = (lam.double()[blended].view(-1, 1, 1, 1) * x[blended]
            + (1 - lam.double()[blended].view(-1, 1, 1, 1)) * partner[blended])
    torch.testing.assert_close(out[blended], want, rtol=0, atol=1e-12)
    out, _, lam = mix_batch(x, t, gen(8), cutmix_alpha=1.0, mode="elem")  # cutmix alone: always cutmix
    assert ((out == x) | (out == partner)).all()
    # a box is empty exactly when floor(4·sqrt(1 − λ)) < 2, i.e. λ > 3/4: P(λ <= 3/4) = 3/4 for U(0, 1)
    assert stats.binomtest(int((lam < 1).sum()), n, 0.75).pvalue > P_FLOOR


@pytest.mark.parametrize("h,w,lam", [(16, 12, 0.75), (9, 20, 0.5), (16, 16, 0.1),
                                     (2, 40, 0.5), (40, 2, 0.5)])  # a half-side of 0 on one axis: empty boxes
def test_cutmix_box_sides_and_centres(h, w, lam):
    """timm rand_bbox: sides floor(H·sqrt(1 − λ)), floor(W·sqrt(1 − λ)), halved down; the centre
    uniform over every pixel (the last row and column too), the box clipped to the image."""
    n = 16000
    boxes = _boxes(torch.full((n,), lam), h, w, gen(3))
    y0, y1, x0, x1 = boxes.unbind(1)
    half_h, half_w = int(h * math.sqrt(1 - lam)) // 2, int(w * math.sqrt(1 - lam)) // 2
    assert half_h < h / 2 and half_w < w / 2
    cy = torch.where(y1 < h, y1 - half_h, y0 + half_h)  # one side is unclipped
    cx = torch.where(x1 < w, x1 - half_w, x0 + half_w)
    torch.testing.assert_close(y0, (cy - half_h).clamp(min=0), rtol=0, atol=0)
    torch.testing.assert_close(y1, (cy + half_h).clamp(max=h), rtol=0, atol=0)
    torch.testing.assert_close(x0, (cx - half_w).clamp(min=0), rtol=0, atol=0)
    torch.testing.assert_close(x1, (cx + half_w).clamp(max=w), rtol=0, atol=0)
    for c, size in ((cy, h), (cx, w)):
        counts = torch.bincount(c, minlength=size).numpy()
        assert len(counts) == size and counts.min() > 0
        assert stats.chisquare(counts).pvalue > P_FLOOR


# ----------------------------------------------------------------------------- random erasing

def _np_erasing(n, h, w, prob, rng, min_area=0.02, max_area=1 / 3, min_aspect=0.3, attempts=10):
    """timm RandomErasing's geometry, float64 numpy: (erased, eh, ew, top, left)."""
    out = []
    for _ in range(n):
        erase = rng.random() < prob
        for _ in range(attempts):
            area = rng.uniform(min_area, max_area) * h * w
            aspect = math.exp(rng.uniform(math.log(min_aspect), math.log(1 / min_aspect)))
            eh, ew = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
            if 0 < eh < h and 0 < ew < w:
                out.append((erase, eh, ew, rng.integers(0, h - eh + 1), rng.integers(0, w - ew + 1)))
                break
        else:
            out.append((False, 0, 0, 0, 0))
    return np.array(out)


def _assert_far_edge_rate(start, side, size):
    """Given its side, a box's start is uniform over the size − side + 1 positions that fit."""
    hits = int((start + side == size).sum())
    assert stats.binomtest(hits, len(start), float(np.mean(1.0 / (size - side + 1)))).pvalue > P_FLOOR


def _rectangles(mask):
    """(erased, eh, ew, top, left) of each (H, W) mask holding one rectangle or nothing."""
    rows, cols = mask.any(2), mask.any(1)
    erased = rows.any(1)
    eh, ew = rows.sum(1), cols.sum(1)
    top = torch.where(erased, rows.long().argmax(1), 0)
    left = torch.where(erased, cols.long().argmax(1), 0)
    assert torch.equal(mask.sum((1, 2)), eh * ew)  # a full rectangle: rows x cols
    return erased, eh, ew, top, left


@pytest.mark.parametrize("h,w,kw", [(12, 12, {}), (10, 16, {}),
                                    (8, 8, {"min_area": 0.5, "max_area": 0.9}),  # often no draw fits
                                    (16, 16, {"min_area": 0.001, "max_area": 0.02})])  # sides of 0 and 1
def test_erasing_rectangles_follow_the_timm_law(h, w, kw):
    n = 6000
    erased, eh, ew, top, left = _rectangles(erasing_masks(n, h, w, 0.4, gen(4), **kw))
    ref = _np_erasing(n, h, w, 0.4, np.random.default_rng(0), **kw)
    table = [[int(erased.sum()), n - int(erased.sum())], [int(ref[:, 0].sum()), n - int(ref[:, 0].sum())]]
    assert stats.chi2_contingency(table).pvalue > P_FLOOR  # as often erased as the recipe says
    ref = ref[ref[:, 0] == 1]
    ours = [t[erased].numpy() for t in (eh, ew, top, left)]
    for got, want in zip(ours, ref[:, 1:].T):
        assert stats.ks_2samp(got, want).pvalue > P_FLOOR
    # the far edges are reached as often as the law says: top = h − eh with probability 1/(h − eh + 1)
    _assert_far_edge_rate(ours[2], ours[0], h)
    _assert_far_edge_rate(ours[3], ours[1], w)
    if kw.get("min_area") == 0.001:
        assert (ours[0] == 1).any() and (ours[1] == 1).any()  # one-pixel sides are kept, empty ones not


def test_an_erased_rectangle_is_strictly_smaller_than_the_image():
    """timm keeps a draw only if h_e < H and w_e < W: with area H·W/4 and aspects around 1 many
    draws give a side equal to the short side, and every one of them is rejected."""
    for h, w in ((4, 16), (16, 4)):
        _, eh, ew, _, _ = _rectangles(erasing_masks(3000, h, w, 1.0, gen(6), min_area=0.25, max_area=0.25))
        assert eh.max() < h and ew.max() < w
        assert ((eh == h - 1) if h < w else (ew == w - 1)).any()  # the short side is reached, not passed


def test_the_erasing_noise_has_the_batchs_precision():
    x = torch.zeros(8, 1, 8, 8, dtype=torch.float64)
    out = random_erasing(x, 1.0, gen(3))
    noise = out[out != 0]
    assert out.dtype == torch.float64 and (noise != noise.float().double()).all()  # not float32 draws


def test_erasing_probability_edges_and_the_noise_fill():
    assert not erasing_masks(500, 8, 8, 0.0, gen(1)).any()
    assert erasing_masks(500, 8, 8, 1.0, gen(1)).flatten(1).any(1).all()
    assert not erasing_masks(50, 8, 8, 1.0, gen(1), min_area=0.99, max_area=0.99, min_aspect=0.99).any()
    x = torch.full((400, 2, 16, 16), 100.0)
    out = random_erasing(x, 1.0, gen(2))
    noise = out[out != 100.0].double().numpy()
    assert stats.kstest(noise, "norm").pvalue > P_FLOOR  # N(0, 1) noise in the erased pixels
    assert torch.equal((out != 100.0)[:, 0], (out != 100.0)[:, 1])  # one rectangle for all channels
    m = erasing_masks(64, 9, 9, 1.0, gen(3), device="cpu")
    assert m.shape == (64, 9, 9) and m.dtype == torch.bool


# ----------------------------------------------------------------------------- RandomResizedCrop

def _np_rrc(n, h, w, rng, scale, ratio, attempts=10):
    """timm RandomResizedCrop.get_params, float64 numpy: (fits, top, left, bh, bw)."""
    out = []
    for _ in range(n):
        for _ in range(attempts):
            area = h * w * rng.uniform(*scale)
            r = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
            bw, bh = int(round(math.sqrt(area * r))), int(round(math.sqrt(area / r)))
            if 0 < bw <= w and 0 < bh <= h:
                out.append((1, rng.integers(0, h - bh + 1), rng.integers(0, w - bw + 1), bh, bw))
                break
        else:
            out.append((0, 0, 0, 0, 0))
    return np.array(out)


@pytest.mark.parametrize("h,w,scale,ratio", [(20, 20, (0.08, 1.0), (3 / 4, 4 / 3)),
                                             (12, 18, (0.3, 0.9), (0.5, 1.5)),
                                             (16, 16, (0.001, 0.01), (3 / 4, 4 / 3))])  # sides of 0 and 1
def test_resized_crop_boxes_follow_the_timm_law(h, w, scale, ratio):
    n = 6000
    boxes = resized_crop_boxes(n, h, w, gen(9), scale=scale, ratio=ratio).numpy()
    ref = _np_rrc(n, h, w, np.random.default_rng(1), scale, ratio)
    for got, want in zip(boxes.T, ref[:, 1:].T):  # top, left, height, width
        assert stats.ks_2samp(got, want).pvalue > P_FLOOR
    top, left, bh, bw = boxes.T
    assert ((bh * bw) / (h * w) >= scale[0] * 0.6).all() and (bh <= h).all() and (bw <= w).all()
    _assert_far_edge_rate(top, bh, h)
    _assert_far_edge_rate(left, bw, w)
    # top and left are independent draws: their relative positions are uncorrelated
    fits = (bh < h) & (bw < w)
    rel_top, rel_left = (top + 0.5) / (h - bh + 1), (left + 0.5) / (w - bw + 1)
    assert abs(stats.spearmanr(rel_top[fits], rel_left[fits]).statistic) < 0.06
    if scale[1] == 0.01:
        assert (bh == 1).any() and (bw == 1).any()


@pytest.mark.parametrize("h,w,ratio,box", [(16, 4, (2.0, 3.0), [7, 0, 2, 4]),  # too tall: height cut to w / r_lo
                                           (4, 16, (0.5, 2.0), [0, 4, 4, 8]),  # too wide: width cut to h · r_hi
                                           (6, 8, (0.5, 0.6), [0, 2, 6, 4]),
                                           (6, 8, (1.2, 1.4), [0, 0, 6, 8])])  # w / h in the range: all of it
def test_the_fallback_box_is_centred_with_its_aspect_clamped_into_the_range(h, w, ratio, box):
    """timm's fallback when no draw fits: the whole image, its aspect w/h clamped into ``ratio``,
    centred (the offsets rounded down)."""
    assert resized_crop_boxes(5, h, w, gen(0), scale=(1.0, 1.0), ratio=ratio).tolist() == [box] * 5


# ----------------------------------------------------------------------------- normalisation and targets

def test_normalize_is_the_float64_formula_per_channel(monkeypatch):
    from mlplab.data import augment as augment_mod

    monkeypatch.setattr(augment_mod, "_CHANNEL_CONSTANTS", {})  # as in a fresh process: nothing cached yet
    x = torch.randint(0, 256, (4, 3, 5, 5), generator=gen(0)).double()
    mean, std = (0.123, 0.456, 0.789), (0.271, 0.314, 0.159)  # 255·mean is not a float32: float64 constants
    want = (x.numpy() / 255 - np.array(mean)[None, :, None, None]) / np.array(std)[None, :, None, None]
    np.testing.assert_allclose(normalize(x, mean, std).numpy(), want, rtol=1e-13, atol=1e-13)
    got32 = normalize(x.float(), mean, std)  # the same constants, cached per dtype and device
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.numpy(), want, rtol=1e-5, atol=1e-5)
    on_meta = normalize(x.float().to("meta"), mean, std)  # cached per device too
    assert on_meta.device.type == "meta" and on_meta.shape == x.shape


@pytest.mark.parametrize("k,eps", [(3, 0.0), (5, 0.1), (10, 0.3)])
def test_one_hot_smoothing_in_closed_form(k, eps):
    y = torch.tensor([0, k - 1, 1])
    t = one_hot(y, k, eps, dtype=torch.float64)
    want = np.full((3, k), eps / k)
    want[np.arange(3), y.numpy()] = 1 - eps + eps / k
    np.testing.assert_allclose(t.numpy(), want, rtol=0, atol=1e-15)


def test_augment_runs_the_steps_in_order():
    """crop + flip on uint8, then normalise, then erasing, then mixup, each from one generator:
    the pipeline equals the steps called by hand with the same generator."""
    mean, std = (0.4, 0.5), (0.2, 0.25)
    x = torch.randint(0, 256, (24, 2, 6, 6), dtype=torch.uint8, generator=gen(0))
    y = torch.arange(24) % 4
    cfg = AugmentConfig(crop_padding=2, hflip=True, random_erasing=0.5, mixup=0.6, label_smoothing=0.2)
    aug = build_augment(cfg, num_classes=4, mean=mean, std=std)
    got_x, got_y = aug(x, y, gen(3))
    g = gen(3)
    want = random_hflip(random_crop(x, 2, g), g).float()
    want = random_erasing(normalize(want, mean, std), 0.5, g)
    want_x, want_y, _ = mix_batch(want, one_hot(y, 4, 0.2), g, mixup_alpha=0.6)
    assert torch.equal(got_x, want_x) and torch.equal(got_y, want_y)
    float_x, _ = aug(x.float(), y, gen(3))  # a float batch takes the batched ops: the same numbers
    assert torch.equal(float_x, got_x)
    for m, sd in (((0.0, 0.0), (1.0, 1.0)), ((0.1, 0.2), None), (None, (0.5, 0.6))):  # per-call statistics
        g = gen(3)
        want = random_hflip(random_crop(x, 2, g), g).float()
        want = random_erasing(normalize(want, m or mean, sd or std), 0.5, g)
        want_x, _, _ = mix_batch(want, one_hot(y, 4, 0.2), g, mixup_alpha=0.6)
        assert torch.equal(aug(x, y, gen(3), mean=m, std=sd)[0], want_x)
    mix_only = build_augment(AugmentConfig(mixup=0.5), num_classes=4, mean=mean, std=std)
    g = gen(6)  # no erasing configured: no draws for it before the mixing
    want_x, want_y, _ = mix_batch(normalize(x.float(), mean, std), one_hot(y, 4), g, mixup_alpha=0.5)
    got_x, got_y = mix_only(x, y, gen(6))
    assert torch.equal(got_x, want_x) and torch.equal(got_y, want_y)
    plain = build_augment(AugmentConfig(hflip=True), num_classes=4, mean=mean, std=std)
    g = gen(5)
    px, py = plain(x, y, gen(5))
    assert torch.equal(px, normalize(random_hflip(x, g).float(), mean, std)) and torch.equal(py, y)


def test_augment_passes_every_mixing_setting_and_the_resized_crop_on():
    from mlplab.data.resized_crop import random_resized_crop

    mean, std = (0.3,), (0.2,)
    x = torch.randint(0, 256, (16, 1, 8, 8), dtype=torch.uint8, generator=gen(0))
    y = torch.arange(16) % 3
    cfg = AugmentConfig(random_resized_crop=True, rrc_scale=(0.3, 0.6), rrc_ratio=(0.5, 2.0), hflip=True,
                        mixup=0.4, cutmix=2.0, mix_switch_prob=0.7, mix_prob=0.6, mix_mode="elem")
    got_x, got_y = build_augment(cfg, num_classes=3, mean=mean, std=std)(x, y, gen(4))
    g = gen(4)
    want = random_hflip(random_resized_crop(x, g, scale=(0.3, 0.6), ratio=(0.5, 2.0)), g)
    want_x, want_y, _ = mix_batch(normalize(want, mean, std), one_hot(y, 3), g, mixup_alpha=0.4, cutmix_alpha=2.0,
                                  switch_prob=0.7, mix_prob=0.6, mode="elem")
    assert torch.equal(got_x, want_x) and torch.equal(got_y, want_y)


def test_resized_crop_stays_on_the_batchs_device_and_dtype():
    from mlplab.data.resized_crop import random_resized_crop, resized_crop

    boxes = torch.tensor([[0, 1, 3, 2], [1, 0, 2, 4]])
    out = resized_crop(torch.empty(2, 1, 4, 4, device="meta"), boxes, (5, 3))  # boxes follow the batch
    assert out.device.type == "meta" and out.shape == (2, 1, 5, 3)
    x = torch.rand(2, 1, 4, 4, generator=gen(0), dtype=torch.float64)
    got = resized_crop(x, boxes, 6)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.float(), resized_crop(x.float(), boxes, 6), rtol=0, atol=1e-6)
    assert random_resized_crop(x, gen(1)).dtype == torch.float64  # a float batch keeps its precision
    assert random_resized_crop((x * 255).to(torch.uint8), gen(1)).dtype == torch.float32


@pytest.mark.parametrize("kw,dtype,host", [({"crop_padding": 2, "hflip": True}, torch.uint8, True),
                                          ({"crop_padding": 2}, torch.uint8, True),
                                          ({"crop_padding": 2, "hflip": True}, torch.float32, False),
                                          ({"random_resized_crop": True, "hflip": True}, torch.uint8, False),
                                          ({"hflip": True}, torch.uint8, False)])
def test_a_cpu_uint8_batch_takes_the_host_crop_flip(monkeypatch, kw, dtype, host):
    """The host fast path (the same batch as the batched ops, several times faster) is taken for
    exactly the batches it is written for: uint8 in host memory, padded crops."""
    from mlplab.data import augment as augment_mod

    calls = []
    real = augment_mod.crop_flip_host
    monkeypatch.setattr(augment_mod, "crop_flip_host", lambda *a, **k: (calls.append(a[1:3]), real(*a, **k))[1])
    aug = build_augment(AugmentConfig(**kw), num_classes=2, mean=(0.5,), std=(0.5,))
    aug(torch.zeros(4, 1, 6, 6, dtype=dtype), torch.zeros(4, dtype=torch.long), gen(0))
    assert calls == ([(2, kw.get("hflip", False))] if host else [])


def _erasing_fit_rate(h, w, rng, area, aspect):
    """Monte Carlo (float64 numpy, 10^6 draws) of the chance that one erasing draw fits."""
    a = rng.uniform(*area, 10 ** 6) * h * w
    r = np.exp(rng.uniform(math.log(aspect[0]), math.log(aspect[1]), 10 ** 6))
    sh, sw = np.round(np.sqrt(a * r)), np.round(np.sqrt(a / r))
    return float(np.mean((sh > 0) & (sh < h) & (sw > 0) & (sw < w)))


def test_ten_attempts_before_giving_up():
    """P(no draw fits) = (1 − q)^10 for erasing (then no rectangle) and RandomResizedCrop (then
    the fallback box), with q the chance one draw fits, in a regime where q is small."""
    n, rng = 20000, np.random.default_rng(5)
    q = _erasing_fit_rate(8, 8, rng, (0.7, 0.95), (0.3, 1 / 0.3))
    erased = int(erasing_masks(n, 8, 8, 1.0, gen(2), min_area=0.7, max_area=0.95).flatten(1).any(1).sum())
    assert stats.binomtest(erased, n, 1 - (1 - q) ** 10).pvalue > P_FLOOR
    # RandomResizedCrop: a fitted box may equal the fallback (10 x 8, centred), so compare the rate
    # of that box with the numpy oracle's (fallback when none of its 10 draws fits)
    boxes = resized_crop_boxes(n, 10, 10, gen(3), scale=(0.75, 1.0), ratio=(1.2, 2.0))
    ours = int((boxes == torch.tensor([1, 0, 8, 10])).all(1).sum())
    ref = _np_rrc(n, 10, 10, rng, (0.75, 1.0), (1.2, 2.0))
    theirs = int(((ref[:, 0] == 0) | (ref[:, 1:] == [1, 0, 8, 10]).all(1)).sum())
    assert stats.chi2_contingency([[ours, n - ours], [theirs, n - theirs]]).pvalue > P_FLOOR


def test_cutmix_alone_is_applied_in_the_pipeline():
    x = torch.randint(0, 256, (8, 1, 6, 6), dtype=torch.uint8, generator=gen(0))
    y = torch.arange(8) % 2
    got_x, got_y = build_augment(AugmentConfig(cutmix=0.5), num_classes=2, mean=(0.5,), std=(0.5,))(x, y, gen(1))
    want_x, want_y, _ = mix_batch(normalize(x.float(), (0.5,), (0.5,)), one_hot(y, 2), gen(1), cutmix_alpha=0.5)
    assert torch.equal(got_x, want_x) and torch.equal(got_y, want_y)


@pytest.mark.parametrize("alpha", [0.3, 1.0, 2.5, 12.0])
def test_gamma_draws_follow_the_gamma_law(alpha):
    """The Marsaglia–Tsang sampler itself (sample_beta only sees differences of two of its draws,
    which hide a sign or a factor common to both): exp of the log draws is Gamma(alpha, 1)."""
    from mlplab.data.augment import _gamma_log

    g = _gamma_log(alpha, 50000, gen(8), torch.device("cpu"))
    assert g.dtype == torch.float64
    assert stats.kstest(g.exp().numpy(), stats.gamma(alpha).cdf).pvalue > P_FLOOR


def _np_marsaglia_tsang_log(alpha, z, u, u1):
    """float64 numpy oracle of the log Gamma(alpha) draws for given proposals: row i keeps the first
    j with V = (1 + c·z)^3 > 0 and log u < z²/2 + d − d·V + d·log V (Marsaglia & Tsang 2000,
    d = alpha − 1/3, c = 1/sqrt(9d); for alpha < 1, Gamma(alpha + 1) boosted by U^(1/alpha))."""
    boost = alpha < 1
    d = (alpha + 1 if boost else alpha) - 1 / 3
    c = 1 / np.sqrt(9 * d)
    out, first = np.empty(len(z)), np.zeros(len(z), dtype=int)
    for i in range(len(z)):
        for j in range(z.shape[1]):
            v = (1 + c * z[i, j]) ** 3
            if v > 0 and np.log(u[i, j]) < 0.5 * z[i, j] ** 2 + d - d * v + d * np.log(v):
                first[i] = j
                break
        out[i] = np.log(d * (1 + c * z[i, first[i]]) ** 3)
    if boost:
        out += np.log(u1) / alpha
    return out, first


@pytest.mark.parametrize("alpha", [0.3, 1.0, 2.5])
def test_gamma_draws_keep_the_first_proposal_the_squeeze_test_accepts(alpha):
    """The acceptance rule draw by draw: replaying the sampler's normals and uniforms through the
    numpy oracle gives the same log draws, including the rows whose first proposals are rejected
    (a rule that accepts everything, or nothing, keeps the first proposal there)."""
    from mlplab.data.augment import _gamma_log

    n, attempts = 3000, 16  # 16 proposals per draw by default: which numbers a seed gives depends on it
    got = _gamma_log(alpha, n, gen(9), torch.device("cpu")).numpy()
    replay = gen(9)
    z = torch.randn(n, attempts, generator=replay, dtype=torch.float64).numpy()
    u = torch.rand(n, attempts, generator=replay, dtype=torch.float64).numpy()
    u1 = torch.rand(n, generator=replay, dtype=torch.float64).numpy()
    want, first = _np_marsaglia_tsang_log(alpha, z, u, u1)
    assert (first > 0).sum() >= 20  # the rule decides: some first proposals are rejected
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_empty_erasing_draws_are_rejected():
    """Sides that round to 0 do not fit: with areas of a pixel or less many draws do, and a sample
    is erased (a non-empty rectangle) with probability 1 − (1 − q)^10, q the chance one draw fits."""
    n = 20000
    q = _erasing_fit_rate(16, 16, np.random.default_rng(6), (0.0005, 0.004), (0.3, 1 / 0.3))
    masks = erasing_masks(n, 16, 16, 1.0, gen(9), min_area=0.0005, max_area=0.004)
    assert stats.binomtest(int(masks.flatten(1).any(1).sum()), n, 1 - (1 - q) ** 10).pvalue > P_FLOOR


def test_mixing_defaults_switch_half_the_time():
    n = 4000
    x = torch.rand(n, 1, 4, 4, generator=gen(0), dtype=torch.float64)
    out, _, _ = mix_batch(x, one_hot(torch.arange(n) % 2, 2, dtype=torch.float64), gen(1), mixup_alpha=1.0,
                          cutmix_alpha=1.0, mode="elem")
    pasted = ((out == x) | (out == x.flip(0))).flatten(1).all(1)
    assert stats.binomtest(int(pasted.sum()), n, 0.5).pvalue > P_FLOOR


def test_a_full_square_resized_crop_is_the_image():
    from mlplab.data.resized_crop import random_resized_crop

    x = torch.randint(0, 256, (6, 2, 5, 5), dtype=torch.uint8, generator=gen(0))
    assert torch.equal(random_resized_crop(x, gen(1), scale=(1.0, 1.0), ratio=(1.0, 1.0)), x.float())
    x = torch.randint(0, 256, (6, 2, 4, 6), dtype=torch.uint8, generator=gen(0))  # and a 3:2 one at ratio 3/2
    got = random_resized_crop(x, gen(1), scale=(1.0, 1.0), ratio=(1.5, 1.5))
    torch.testing.assert_close(got, x.float(), rtol=0, atol=1e-4)  # grid positions 2p/W − 1 round at W = 6
