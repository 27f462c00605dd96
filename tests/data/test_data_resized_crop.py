"""Batched RandomResizedCrop: the box law (timm geometry), the resampling, the config key."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mlplab.data import AugmentConfig, build_augment
from mlplab.data.resized_crop import random_resized_crop, resized_crop, resized_crop_boxes


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_boxes_fit_and_follow_scale_and_ratio():
    h, w = 32, 40
    boxes = resized_crop_boxes(4000, h, w, gen(), scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
    top, left, bh, bw = boxes.unbind(1)
    assert boxes.dtype == torch.int64 and boxes.shape == (4000, 4)
    assert (top >= 0).all() and (left >= 0).all() and (top + bh <= h).all() and (left + bw <= w).all()
    assert (bh >= 1).all() and (bw >= 1).all()
    frac = (bh * bw).double() / (h * w)
    assert frac.min() > 0.06 and frac.max() <= 1.0
    assert 0.45 < frac.mean() < 0.60  # E[s] = 0.54 for s ~ U(0.08, 1); large draws that do not fit retry
    aspect = (bw.double() / bh.double()).log()
    assert aspect.min() > math.log(3 / 4) - 0.25 and aspect.max() < math.log(4 / 3) + 0.25  # rounding of small boxes
    # offsets are spread over the positions that fit
    assert top.float().std() > 1 and left.float().std() > 1


def test_fallback_is_the_central_crop_with_the_ratio_clamped():
    # a ratio range that no box of a 4x16 image can meet from the given scale: the fallback
    boxes = resized_crop_boxes(8, 4, 16, gen(), scale=(1.0, 1.0), ratio=(1.0, 1.0))
    assert boxes.tolist() == [[0, 6, 4, 4]] * 8  # width clamped to h * ratio_max = 4, centred


def test_identity_box_reproduces_the_image():
    x = torch.rand(3, 2, 9, 7, dtype=torch.float64) * 255
    boxes = torch.tensor([[0, 0, 9, 7]] * 3)
    torch.testing.assert_close(resized_crop(x, boxes, (9, 7)), x, rtol=0, atol=1e-9)


def test_box_is_resampled_like_interpolate_of_the_slice():
    x = torch.rand(2, 3, 12, 12, dtype=torch.float64) * 255
    boxes = torch.tensor([[2, 3, 6, 5], [0, 4, 12, 8]])
    out = resized_crop(x, boxes, 10)
    for k, (t, l, bh, bw) in enumerate(boxes.tolist()):
        ref = F.interpolate(x[k:k + 1, :, t:t + bh, l:l + bw], size=(10, 10), mode="bilinear", align_corners=False)
        torch.testing.assert_close(out[k:k + 1], ref, rtol=0, atol=1e-9)


def test_random_resized_crop_is_a_function_of_the_generator():
    x = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
    a = random_resized_crop(x, gen(5))
    b = random_resized_crop(x, gen(5))
    assert a.dtype == torch.float32 and a.shape == (6, 3, 16, 16) and torch.equal(a, b)
    assert not torch.equal(a, random_resized_crop(x, gen(6)))
    assert a.min() >= 0 and a.max() <= 255
    assert random_resized_crop(x, gen(5), 8).shape == (6, 3, 8, 8)


def test_augment_config_key_runs_in_the_pipeline():
    x = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
    aug = build_augment({"random_resized_crop": True, "hflip": True}, mean=(0.5,) * 3, std=(0.25,) * 3, num_classes=3)
    out, y = aug(x, torch.arange(4) % 3, gen())
    assert out.shape == (4, 3, 16, 16) and out.dtype == torch.float32 and torch.isfinite(out).all()
    plain, _ = build_augment({}, mean=(0.5,) * 3, std=(0.25,) * 3)(x, torch.arange(4), gen())
    assert not torch.equal(out, plain)


@pytest.mark.parametrize("kw, match", [
    ({"random_resized_crop": True, "crop_padding": 4}, "not both"),
    ({"rrc_scale": (0.5, 0.2)}, "augment.rrc_scale"),
    ({"rrc_scale": (0.0, 1.0)}, "augment.rrc_scale"),
    ({"rrc_ratio": (-1.0, 2.0)}, "augment.rrc_ratio"),
])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        AugmentConfig(**kw)
