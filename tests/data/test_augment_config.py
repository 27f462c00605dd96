"""The ``augment`` config section and ``build_augment``: every refusal's exact message, every
range's edges accepted, what is built from a DatasetInfo or explicit arguments."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from mlplab.data import AugmentConfig, build_augment
from mlplab.data.autoaugment import AutoAugment, RandAugment


@pytest.mark.parametrize("kw,message", [
    ({"crop_padding": -1}, "augment.crop_padding must be >= 0, got -1"),
    ({"crop_padding": 2, "random_resized_crop": True},
     "choose either augment.crop_padding or augment.random_resized_crop, not both"),
    ({"rrc_scale": (0.0, 0.5)}, "augment.rrc_scale must be [lo, hi] with 0 < lo <= hi <= 1, got [0.0, 0.5]"),
    ({"rrc_scale": (0.6, 0.5)}, "augment.rrc_scale must be [lo, hi] with 0 < lo <= hi <= 1, got [0.6, 0.5]"),
    ({"rrc_scale": (0.5, 1.01)}, "augment.rrc_scale must be [lo, hi] with 0 < lo <= hi <= 1, got [0.5, 1.01]"),
    ({"rrc_ratio": (0.0, 1.0)}, "augment.rrc_ratio must be [lo, hi] with 0 < lo <= hi, got [0.0, 1.0]"),
    ({"rrc_ratio": (2.0, 1.0)}, "augment.rrc_ratio must be [lo, hi] with 0 < lo <= hi, got [2.0, 1.0]"),
    ({"mixup": -0.1}, "augment.mixup must be >= 0, got -0.1"),
    ({"cutmix": -1.0}, "augment.cutmix must be >= 0, got -1.0"),
    ({"mix_switch_prob": 1.5}, "augment.mix_switch_prob must be in [0, 1], got 1.5"),
    ({"mix_prob": -0.5}, "augment.mix_prob must be in [0, 1], got -0.5"),
    ({"random_erasing": 1.01}, "augment.random_erasing must be in [0, 1], got 1.01"),
    ({"label_smoothing": -0.01}, "augment.label_smoothing must be in [0, 1], got -0.01"),
    ({"autoaugment": "svhn"}, "augment.autoaugment must be 'none', 'cifar10' or 'imagenet', got 'svhn'"),
    ({"mix_mode": "pair"}, "augment.mix_mode must be 'batch' or 'elem', got 'pair'"),
    ({"autoaugment": "cifar10", "randaugment": "rand-m9"}, "choose either augment.autoaugment or augment.randaugment, "
                                                           "not both"),
])
def test_bad_settings_are_refused_in_one_sentence(kw, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        AugmentConfig(**kw)


def test_the_edges_of_every_range_are_accepted():
    AugmentConfig(crop_padding=0, mixup=0.0, cutmix=0.0)
    AugmentConfig(random_resized_crop=True, rrc_scale=(1.0, 1.0), rrc_ratio=(1.0, 1.0))
    AugmentConfig(rrc_scale=(1e-3, 1e-3), rrc_ratio=(1e-3, 1e3))
    for name in ("mix_switch_prob", "mix_prob", "random_erasing", "label_smoothing"):
        AugmentConfig(**{name: 0.0})
        AugmentConfig(**{name: 1.0})
    for policy in ("none", "cifar10", "imagenet"):
        AugmentConfig(autoaugment=policy)
    AugmentConfig(mix_mode="elem")
    with pytest.raises(ValueError, match="unknown key"):  # a RandAugment string is parsed when set
        AugmentConfig(randaugment="rand-m9-zz3")


@pytest.mark.parametrize("kw,soft", [({}, False), ({"mixup": 0.1}, True), ({"cutmix": 0.1}, True),
                                     ({"label_smoothing": 0.1}, True), ({"hflip": True, "crop_padding": 4}, False)])
def test_soft_targets_when_mixing_or_smoothing(kw, soft):
    cfg = AugmentConfig(**kw)
    assert cfg.soft_targets is soft
    assert build_augment(cfg, num_classes=3, mean=(0.5,), std=(0.5,)).soft_targets is soft


def test_build_augment_from_info_or_arguments():
    info = SimpleNamespace(num_classes=7, mean=(0.1, 0.2, 0.3), std=(0.4, 0.5, 0.6))
    aug = build_augment(None, info)
    assert aug.cfg == AugmentConfig() and aug.num_classes == 7
    assert aug.mean == (0.1, 0.2, 0.3) and aug.std == (0.4, 0.5, 0.6) and aug.policy is None
    aug = build_augment({"hflip": True, "mixup": 0.2}, info, num_classes=4, mean=[0.0], std=[1.0])
    assert aug.cfg == AugmentConfig(hflip=True, mixup=0.2) and aug.num_classes == 4
    assert aug.mean == (0.0,) and aug.std == (1.0,)
    assert repr(aug).startswith("Augment({'crop_padding': 0,") and repr(aug).endswith(", num_classes=4)")
    cfg = AugmentConfig(crop_padding=1)
    assert build_augment(cfg, info).cfg is cfg
    assert build_augment({}, mean=(0.5,), std=(0.5,)).num_classes == 0  # no info: no class count
    with pytest.raises(KeyError, match=re.escape("unknown augment keys ['flip', 'mixupp']; valid: ['autoaugment', ")):
        build_augment({"mixupp": 0.2, "flip": True, "hflip": True}, info)
    with pytest.raises(ValueError, match="^build_augment needs mean/std: pass a DatasetInfo or mean= and std=$"):
        build_augment(None, mean=(0.5,))
    with pytest.raises(ValueError, match="^build_augment needs mean/std"):
        build_augment(None, std=(0.5,))
    with pytest.raises(ValueError, match=r"^soft targets \(mixup/cutmix/label smoothing\) need num_classes > 0$"):
        build_augment({"label_smoothing": 0.1}, mean=(0.5,), std=(0.5,))


def test_one_class_is_enough_for_soft_targets():
    aug = build_augment({"label_smoothing": 0.1}, num_classes=1, mean=(0.5,), std=(0.5,))
    _, y = aug(torch.zeros(2, 1, 2, 2, dtype=torch.uint8), torch.zeros(2, dtype=torch.long), torch.Generator())
    assert torch.equal(y, torch.ones(2, 1))


def test_policies_are_built_with_the_mean_as_fill():
    from mlplab.data.autoaugment import AUTOAUGMENT_POLICIES

    cifar = build_augment({"autoaugment": "cifar10"}, num_classes=2, mean=(0.5,), std=(1,))
    assert cifar.policy.policy == AUTOAUGMENT_POLICIES["cifar10"] != AUTOAUGMENT_POLICIES["imagenet"]
    aa = build_augment({"autoaugment": "imagenet"}, num_classes=2, mean=(0.2, 0.4, 0.6), std=(1, 1, 1))
    assert isinstance(aa.policy, AutoAugment) and aa.policy.fill == pytest.approx(0.4 * 255)
    ra = build_augment({"randaugment": "rand-m9-n2"}, num_classes=2, mean=(0.5,), std=(1,))
    assert isinstance(ra.policy, RandAugment) and ra.policy.fill == pytest.approx(0.5 * 255)
    x = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    got, _ = aa(x, torch.zeros(6, dtype=torch.long), torch.Generator().manual_seed(1))
    want = aa.policy(x.float(), torch.Generator().manual_seed(1))
    mean = torch.tensor([0.2, 0.4, 0.6]).view(1, 3, 1, 1)
    torch.testing.assert_close(got, want / 255 - mean, rtol=0, atol=1e-5)  # the policy, then normalised
