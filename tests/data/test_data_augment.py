"""Batched augmentation: per-sample randomness, determinism, ranges, and PIL agreement."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from mlplab.data import AugmentConfig, build_augment, get_info, parse_randaugment
from mlplab.data.augment import erasing_masks, mix_batch, one_hot, random_crop, random_erasing, random_hflip
from mlplab.data.autoaugment import OPS, AutoAugment, RandAugment, apply_op


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def batch(b=64, c=3, h=16, w=16, seed=0):
    return torch.randint(0, 256, (b, c, h, w), generator=gen(seed), dtype=torch.uint8)


def test_random_crop_per_sample_within_padding_and_deterministic():
    x = batch(64)
    out, off = random_crop(x, 4, gen(1), return_offsets=True)
    out2 = random_crop(x, 4, gen(1))
    assert torch.equal(out, out2) and out.shape == x.shape and out.dtype == torch.uint8
    assert len({tuple(o) for o in off.tolist()}) > 20  # different samples, different offsets
    assert off.min() >= 0 and off.max() <= 8
    padded = torch.nn.functional.pad(x, (4,) * 4)
    for b in range(64):  # each crop is exactly one window of the padded image
        dy, dx = off[b].tolist()
        assert torch.equal(out[b], padded[b, :, dy:dy + 16, dx:dx + 16])
    # nothing outside the padded image: with all-255 images, zeros come only from the padding
    ones = torch.full((64, 1, 16, 16), 255, dtype=torch.uint8)
    o, off = random_crop(ones, 4, gen(2), return_offsets=True)
    zero_rows = (o[:, 0] == 0).all(2).sum(1)  # rows that are entirely padding
    assert torch.equal(zero_rows, (off[:, 0] - 4).abs())


def test_hflip_mask_per_sample():
    x = batch(64)
    out, mask = random_hflip(x, gen(3), return_mask=True)
    assert 10 < mask.sum() < 54
    assert torch.equal(out[mask], x[mask].flip(-1)) and torch.equal(out[~mask], x[~mask])


def test_one_hot_smoothing():
    t = one_hot(torch.tensor([0, 2]), 4, smoothing=0.1)
    assert torch.allclose(t.sum(1), torch.ones(2))
    assert torch.isclose(t[0, 0], torch.tensor(0.925)) and torch.isclose(t[0, 1], torch.tensor(0.025))


@pytest.mark.parametrize("mode", ["batch", "elem"])
def test_mixup_cutmix_targets(mode):
    x = batch(32).float()
    y = torch.arange(32) % 10
    t = one_hot(y, 10, 0.1)
    seen_lams = []
    for seed in range(6):
        out, tgt, lam = mix_batch(x, t, gen(seed), mixup_alpha=0.8, cutmix_alpha=1.0, mode=mode)
        assert out.shape == x.shape and torch.allclose(tgt.sum(1), torch.ones(32))
        assert (lam >= 0).all() and (lam <= 1).all()
        # each output pixel is either the mix of x and its partner (mixup) or one of the two (cutmix)
        assert torch.allclose(tgt, lam[:, None] * t + (1 - lam[:, None]) * t.flip(0))
        seen_lams.append(lam)
        if mode == "batch":
            assert torch.all(lam == lam[0])
    if mode == "elem":
        assert len(set(seen_lams[0].tolist())) > 10


def test_cutmix_lam_equals_area():
    x = torch.zeros(8, 1, 20, 20)
    x[:4] = 1.0  # partners (reversed batch) of the last four are ones
    for seed in range(5):
        out, _, lam = mix_batch(x, one_hot(torch.zeros(8, dtype=torch.long), 2), gen(seed), cutmix_alpha=1.0,
                                mode="elem")
        pasted = out[4:].mean((1, 2, 3))  # fraction of pixels taken from the partner
        assert torch.allclose(pasted, 1 - lam[4:], atol=1e-6)


def test_mix_prob_zero_is_identity():
    x = batch(8).float()
    t = one_hot(torch.arange(8) % 3, 3)
    out, tgt, lam = mix_batch(x, t, gen(0), mixup_alpha=1.0, mix_prob=0.0)
    assert torch.equal(out, x) and torch.equal(tgt, t) and torch.all(lam == 1)


def test_random_erasing_area_and_probability():
    m = erasing_masks(2000, 32, 32, 0.5, gen(4))
    frac = m.float().mean((1, 2))
    erased = frac > 0
    assert 0.4 < erased.float().mean() < 0.6
    assert frac[erased].min() >= 0.015 and frac[erased].max() <= 0.36
    x = torch.zeros(16, 3, 8, 8)
    out = random_erasing(x, 1.0, gen(5), value=7.0)
    assert ((out == 7.0).flatten(1).any(1)).all()  # every sample erased once, on all channels
    assert torch.equal((out == 7.0)[:, 0], (out == 7.0)[:, 2])


def test_pil_agreement_of_point_ops():
    img = np.random.default_rng(0).integers(20, 200, (16, 16, 3), dtype=np.uint8)
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    pil = Image.fromarray(img)
    one = torch.ones(1)

    def ours(op, arg):
        return OPS[op].fn(x.clone(), torch.tensor([float(arg)]))[0].permute(1, 2, 0).numpy()

    np.testing.assert_array_equal(ours("Equalize", 0), np.asarray(ImageOps.equalize(pil)))
    np.testing.assert_array_equal(ours("AutoContrast", 0), np.asarray(ImageOps.autocontrast(pil)))
    np.testing.assert_array_equal(ours("Posterize", 3), np.asarray(ImageOps.posterize(pil, 3)))
    np.testing.assert_array_equal(ours("Solarize", 128), np.asarray(ImageOps.solarize(pil, 128)))
    np.testing.assert_array_equal(ours("Invert", 0), np.asarray(ImageOps.invert(pil)))
    assert apply_op(x.clone(), "Brightness", one * 0, one, denom=9).equal(x)  # level 0 -> identity


def test_autoaugment_and_randaugment_change_images_per_sample():
    x = batch(48).float()
    for aug in (AutoAugment("cifar10"), AutoAugment("imagenet"), RandAugment("rand-m9-mstd0.5-inc1"),
                RandAugment("rand-n2-m9")):
        a = aug(x.clone(), gen(7))
        b = aug(x.clone(), gen(7))
        assert torch.equal(a, b)  # deterministic given the generator
        assert a.min() >= 0 and a.max() <= 255 and torch.equal(a, a.round())
        changed = (a != x).flatten(1).any(1)
        assert 0.3 < changed.float().mean() <= 1.0  # many samples changed, by different ops
        assert not torch.equal(aug(x.clone(), gen(8)), a)


def test_parse_randaugment():
    c = parse_randaugment("rand-m9-mstd0.5-inc1")
    assert (c.magnitude, c.magnitude_std, c.increasing, c.num_ops, c.prob) == (9.0, 0.5, True, 2, 0.5)
    c = parse_randaugment("rand-n3-m15-mmax15-p0.7")
    assert (c.num_ops, c.magnitude, c.magnitude_max, c.prob) == (3, 15.0, 15.0, 0.7)
    with pytest.raises(ValueError, match="unknown key"):
        parse_randaugment("rand-m9-zz3")
    with pytest.raises(ValueError):
        parse_randaugment("auto-m9")


def test_build_augment_pipeline_and_config_checks():
    info = get_info("cifar10")
    x = batch(32, h=32, w=32)
    y = torch.arange(32) % 10
    plain = build_augment(AugmentConfig(), info)
    xp, yp = plain(x, y, gen(0))
    assert yp.dtype == torch.int64 and abs(xp.mean().item()) < 1.0
    full = build_augment(dict(crop_padding=4, hflip=True, randaugment="rand-m9-mstd0.5-inc1", mixup=0.8,
                              cutmix=1.0, random_erasing=0.25, label_smoothing=0.1), info)
    xa, ya = full(x, y, gen(0))
    assert xa.shape == (32, 3, 32, 32) and xa.dtype == torch.float32 and ya.shape == (32, 10)
    assert torch.allclose(ya.sum(1), torch.ones(32)) and full.soft_targets
    xb, yb = full(x, y, gen(0))
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    with pytest.raises(KeyError, match="unknown augment keys"):
        build_augment({"mixupp": 0.2}, info)
    with pytest.raises(ValueError, match="autoaugment"):
        AugmentConfig(autoaugment="svhn")
    with pytest.raises(ValueError, match="either"):
        AugmentConfig(autoaugment="cifar10", randaugment="rand-m9")
    assert AugmentConfig(label_smoothing=0.1).soft_targets and not AugmentConfig(hflip=True).soft_targets


def test_grey_images_work_with_all_ops():
    x = batch(32, c=1, h=28, w=28).float()
    for name in OPS:
        out = apply_op(x.clone(), name, torch.full((32,), 7.0), torch.ones(32))
        assert out.shape == x.shape and out.min() >= 0 and out.max() <= 255


def test_geometric_ops_conventions():
    x = torch.arange(2 * 16 * 16, dtype=torch.float32).view(2, 1, 16, 16) % 251
    r = OPS["Rotate"].fn(x, torch.tensor([90.0, -90.0]), 0.0)
    assert {torch.equal(r[0], x[0].rot90(1, (1, 2))), torch.equal(r[0], x[0].rot90(-1, (1, 2)))} == {True, False}
    assert torch.equal(r[1], x[1].rot90(1, (1, 2))) != torch.equal(r[0], x[0].rot90(1, (1, 2)))
    t = OPS["TranslateX"].fn(x, torch.tensor([2 / 16, -3 / 16]), -1.0)
    assert torch.equal(t[0, :, :, :14], x[0, :, :, 2:]) and torch.all(t[0, :, :, 14:] == -1)
    assert torch.equal(t[1, :, :, 3:], x[1, :, :, :13]) and torch.all(t[1, :, :, :3] == -1)
    s = OPS["ShearX"].fn(x, torch.zeros(2), 0.0)
    assert torch.equal(s, x)  # zero shear is the identity (nearest sampling hits pixel centres)
