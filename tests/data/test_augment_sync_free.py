"""The augmentation never makes the host wait on the device: checked by construction on the CPU.

Each recipe runs on a batch on the ``meta`` device (shapes only, no data). An op that reads a
value on the host (``.item()``, ``.tolist()``, ``nonzero`` for a data-dependent shape) fails
there, and a dispatch mode records every op that creates or consumes a host tensor while the
batch is being augmented: on a GPU each of those is a host→device copy (a sync for pageable
memory). After one warm-up batch (constants such as mean/std and the AutoAugment tables are
copied to the device once per process) a batch must record none.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mlplab.data import AugmentConfig, build_augment
from mlplab.data.augment import mix_batch, one_hot, sample_beta
from mlplab.data.autoaugment import AutoAugment, RandAugment

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)

RECIPES = {
    "crop_flip": dict(crop_padding=4, hflip=True),
    "cifar_autoaugment": dict(crop_padding=4, hflip=True, autoaugment="cifar10", random_erasing=0.25,
                              cutmix=1.0, mixup=0.8, label_smoothing=0.1),
    "imagenet_recipe": dict(hflip=True, randaugment="rand-m9-mstd0.5-inc1", random_erasing=0.25, mixup=0.8,
                            cutmix=1.0, mix_mode="elem", label_smoothing=0.1),
    "imagenet_autoaugment": dict(hflip=True, autoaugment="imagenet", mixup=0.2),
}


class HostTensors(TorchDispatchMode):
    """Records every op that takes or makes a host tensor of at least one element (0-dim CPU
    tensors are scalars that travel as kernel arguments)."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        leaves = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        if any(t.device.type == "cpu" and t.dim() > 0 for t in leaves):
            self.seen.append(str(func))
        return out


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_batch_makes_no_host_tensor(recipe):
    aug = build_augment(AugmentConfig(**RECIPES[recipe]), num_classes=10, mean=MEAN, std=STD)
    x = torch.empty(16, 3, 32, 32, dtype=torch.uint8, device="meta")
    y = torch.empty(16, dtype=torch.long, device="meta")
    aug(x, y, torch.Generator().manual_seed(0))  # warm-up: per-process constants
    with HostTensors() as mode:
        xo, yo = aug(x, y, torch.Generator().manual_seed(1))
    assert mode.seen == []
    assert xo.device.type == "meta" and xo.shape == x.shape


def test_the_check_catches_a_host_tensor():
    """A per-batch host tensor copied to the device is what the check exists to catch."""
    x = torch.empty(4, 3, 8, 8, device="meta")
    with HostTensors() as mode:
        _ = x * torch.rand(4).to("meta").view(-1, 1, 1, 1)
    assert mode.seen


@pytest.mark.parametrize("cls,arg", [(AutoAugment, "cifar10"), (AutoAugment, "imagenet"),
                                     (RandAugment, "rand-m9-mstd0.5-inc1"), (RandAugment, "rand-n3-m15")])
def test_whole_batch_selection_equals_per_op_gather(cls, arg):
    """The accelerator path (every op on the whole batch, kept where drawn) gives exactly the
    CPU path's batch (each op on the samples that drew it)."""
    x = torch.randint(0, 256, (64, 3, 16, 16), generator=torch.Generator().manual_seed(3)).float()
    policy = cls(arg, fill=120.0)
    a = policy(x.clone(), torch.Generator().manual_seed(4), select=True)
    b = policy(x.clone(), torch.Generator().manual_seed(4), select=False)
    assert torch.equal(a, b)


@pytest.mark.parametrize("alpha", [0.1, 0.8, 1.0, 2.5])
def test_sample_beta_matches_the_beta_distribution(alpha):
    """Kolmogorov–Smirnov against scipy's Beta(alpha, alpha) CDF, plus its mean and variance."""
    draws = sample_beta(alpha, 20000, torch.Generator().manual_seed(11), dtype=torch.float64).numpy()
    assert np.all((draws >= 0) & (draws <= 1))
    assert stats.kstest(draws, stats.beta(alpha, alpha).cdf).pvalue > 1e-3
    assert abs(draws.mean() - 0.5) < 4 * math.sqrt(1 / (4 * (2 * alpha + 1)) / len(draws))
    assert draws.var() == pytest.approx(1 / (4 * (2 * alpha + 1)), rel=0.05)


def test_sample_beta_tiny_alpha_is_finite_and_near_the_ends():
    draws = sample_beta(1e-3, 1000, torch.Generator().manual_seed(2))
    assert torch.isfinite(draws).all()
    assert ((draws < 0.01) | (draws > 0.99)).float().mean() > 0.95


def test_batch_mode_mixes_the_whole_batch_with_one_lam():
    x = torch.rand(32, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    t = one_hot(torch.arange(32) % 4, 4)
    _, _, lam = mix_batch(x, t, torch.Generator().manual_seed(5), mixup_alpha=0.8, mode="batch")
    assert lam.shape == (32,) and torch.all(lam == lam[0])


def test_host_staged_batches_cross_once_as_uint8(monkeypatch):
    """A dataset kept in host memory for an accelerator run (``meta`` stands in for a GPU) stays
    there; each batch crosses once, as uint8 images and int64 labels, asynchronously from the
    ring's buffers (pinned on CUDA), and is augmented where it lands."""
    from mlplab.data import loader as loader_mod

    crossed, to = [], torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        if self.device.type == "cpu" and args and str(args[0]) == "meta":
            crossed.append((self.dtype, tuple(self.shape), kwargs))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(loader_mod, "derive_generator", lambda *key, device=None: torch.Generator().manual_seed(0))
    images = torch.randint(0, 256, (64, 3, 8, 8), dtype=torch.uint8)
    aug = build_augment(AugmentConfig(crop_padding=1, hflip=True), num_classes=10, mean=MEAN, std=STD)
    dl = loader_mod.DeviceLoader(images, torch.arange(64) % 10, 16, augment=aug, device="meta")
    assert dl.images is images  # built for the device, the images stay on the host
    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    batches = list(dl)
    monkeypatch.undo()
    assert len(batches) == 4 and all(x.device.type == "meta" and x.dtype == torch.float32 for x, _ in batches)
    assert crossed == [(torch.uint8, (16, 3, 8, 8), {"non_blocking": True}),
                       (torch.int64, (16,), {"non_blocking": True})] * 4


@pytest.mark.parametrize("padding,hflip", [(4, True), (4, False), (1, True), (0, True)])
def test_host_crop_flip_equals_the_batched_ops(padding, hflip):
    """The host fast path draws the same numbers in the same order as random_crop then
    random_hflip and returns the same batch, element for element."""
    from mlplab.data.augment import crop_flip_host, random_crop, random_hflip

    x = torch.randint(0, 256, (33, 3, 12, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(9))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    want = random_crop(x, padding, g1)
    if hflip:
        want = random_hflip(want, g1)
    assert torch.equal(crop_flip_host(x, padding, hflip, g2), want)
    assert torch.equal(g1.get_state(), g2.get_state())  # and leaves the generator where they leave it
