"""What first-layer and token-mixing units learn (mlplab.analysis.units): the weight statistics of
mixer-weights and the localisation measure r½ of sm-weights on weights with known answers, the
initial model rebuilt from a run's seed, and the pictures of units."""
import math

import numpy as np
import pytest
import torch

from mlplab.analysis.units import (
    half_energy_radius,
    initial_model,
    inverse_partners,
    mean_frequency,
    paired_units,
    stem_unit_images,
    uniform_half_energy_radius,
    unit_picture,
)

# ------------------------------------------------------------------ token-mixing and embedding units


def test_mean_frequency_of_known_images():
    h = w = 8
    const = np.ones((h, w))
    checker = (-1.0) ** np.add.outer(np.arange(h), np.arange(w))
    cos3 = np.cos(2 * np.pi * 3 * np.arange(w) / w)[None, :].repeat(h, 0)  # 3 cycles along x
    f = mean_frequency(np.stack([const, checker, cos3]))
    assert f[0] == 0.0
    assert f[1] == pytest.approx(math.sqrt(2) / 2, abs=1e-12)
    assert f[2] == pytest.approx(3 / 8, abs=1e-12)
    rgb = mean_frequency(np.stack([cos3, cos3, cos3], -1)[None])  # channels' power summed: same frequency
    assert rgb[0] == pytest.approx(3 / 8, abs=1e-12)
    assert math.isnan(mean_frequency(np.zeros((1, 4, 4)))[0])
    with pytest.raises(ValueError, match="images must be"):
        mean_frequency(np.zeros((4, 4)))


def test_inverse_partners_finds_the_inverse():
    a, b, c = np.eye(4)[0], np.eye(4)[1], np.eye(4)[2] + 0.5 * np.eye(4)[1]
    W = np.stack([a, -a, b, c, np.zeros(4)])  # the zero row is left out
    ip = inverse_partners(W, tau=0.5)
    assert ip["units"] == 4 and list(ip["kept"]) == [0, 1, 2, 3]
    assert ip["partner"][0] == 1 and ip["partner"][1] == 0
    assert ip["min_cos"][0] == pytest.approx(-1.0)
    assert ip["frac_inverse"] == 0.5  # units 0 and 1 have an inverse; 2 and 3 only a positive twin
    assert ip["frac_closest_is_inverse"] == 0.5
    with pytest.raises(ValueError, match="two nonzero units"):
        inverse_partners(np.stack([a, np.zeros(4)]))


def test_random_units_have_no_inverse_and_a_fair_coin_for_the_closest():
    W = np.random.default_rng(0).standard_normal((400, 64))
    ip = inverse_partners(W, tau=0.5)
    assert ip["frac_inverse"] < 0.05
    assert 0.4 < ip["frac_closest_is_inverse"] < 0.6


def test_paired_units_sorts_low_frequency_first_with_partners():
    const = np.ones((4, 4))
    checker = (-1.0) ** np.add.outer(np.arange(4), np.arange(4))
    imgs = np.stack([2 * checker, const, -checker, -3 * const])
    ip = inverse_partners(imgs.reshape(4, -1))
    out = paired_units(imgs, ip["partner"], 2)
    assert out.shape == (4, 4, 4)
    np.testing.assert_array_equal(out[:2], np.stack([const, -const]))  # the constant, then its inverse
    np.testing.assert_array_equal(out[2:], np.stack([checker, -checker]))  # scaled to max |w| = 1



# ------------------------------------------------------------------ first-layer units of a flattening MLP


def test_half_energy_radius_exact_values():
    delta = np.zeros((1, 5, 5))
    delta[0, 3, 1] = 2.0
    assert half_energy_radius(delta)[0] == 0.0
    assert half_energy_radius(np.ones((1, 3, 3)))[0] == 1.0  # centre 1, ring at 1 holds 5 of 9 ≥ 4.5
    two = np.zeros((1, 1, 5))
    two[0, 0, 0] = two[0, 0, 4] = 1.0  # centre at x = 2: both pixels at distance 2
    assert half_energy_radius(two)[0] == 2.0
    # energy Σ_ch w²: a colour unit with its energy split over channels counts once per pixel
    rgb = np.zeros((1, 3, 3, 3))
    rgb[0, 1, 1] = [1.0, 1.0, 1.0]
    rgb[0, 0, 0, 0] = 1.0
    r = half_energy_radius(rgb)[0]  # energies 3 at (1, 1) and 1 at (0, 0): centre of mass (0.75, 0.75)
    assert r == pytest.approx(np.hypot(0.25, 0.25))  # the centre pixel alone holds 3/4 ≥ 1/2
    assert np.isnan(half_energy_radius(np.zeros((1, 4, 4)))[0])
    side = 28
    assert uniform_half_energy_radius(side) == pytest.approx(np.sqrt(side * side / 2 / np.pi), rel=0.1)
    # a localised blob is smaller than a spread-out unit
    yy, xx = np.mgrid[0:side, 0:side]
    blob = np.exp(-((yy - 10) ** 2 + (xx - 17) ** 2) / 8.0)[None]
    assert half_energy_radius(blob)[0] < 0.3 * uniform_half_energy_radius(side)
    # a unit spread evenly over a centred disc of a quarter of the image: r½ ≈ half an even spread's
    disc = (np.hypot(yy - 13.5, xx - 13.5) <= np.sqrt(side * side / 4 / np.pi)).astype(float)[None]
    assert half_energy_radius(disc)[0] / uniform_half_energy_radius(side) == pytest.approx(0.5, abs=0.02)


def test_stem_unit_images_follow_the_flattening_order():
    from mlplab.models.registry import create_model

    model = create_model("bottleneck_mlp", width=4, depth=1, image_size=5, in_chans=3, num_classes=2)
    imgs = stem_unit_images(model)
    assert imgs.shape == (4, 5, 5, 3)
    x = torch.zeros(1, 3, 5, 5)
    x[0, 2, 1, 3] = 1.0  # channel 2, row 1, column 3
    with torch.no_grad():
        out = model.embed(x) - model.stem.bias
    assert np.allclose(out[0].double().numpy(), imgs[:, 1, 3, 2])


def test_initial_model_is_the_trainers_initial_weights(tmp_path):
    """A run whose lr is too small to move any weight ends where it started: initial_model must
    rebuild exactly those weights from run.seed (random subset and augmentation on, as the runs)."""
    from mlplab.experiments.tasks import load_trained_model
    from mlplab.train import train
    from mlplab.train.config import make_config

    o = {"data.dataset": "synthetic", "data.train_subset": 64, "data.subset": "random", "data.test_subset": 32,
         "model.name": "bottleneck_mlp", "model.kwargs.width": 8, "model.kwargs.depth": 1, "optim.name": "sgd",
         "optim.lr": 1e-30, "optim.weight_decay": 0.0, "schedule.epochs": 1, "run.batch_size": 32, "run.seed": 3,
         "run.out_dir": str(tmp_path), "run.name": "still", "run.log": "lines", "run.tensorboard": False,
         "augment.crop_padding": 1, "augment.hflip": True}
    train(make_config(None, o))
    model, cfg = load_trained_model(tmp_path / "still")
    state = torch.random.get_rng_state()
    init = initial_model(model, cfg.run.seed)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(init.stem.weight, model.stem.weight)
    assert not torch.equal(initial_model(model, cfg.run.seed + 1).stem.weight, model.stem.weight)



def test_unit_picture_scales_colour_to_0_1_and_grey_symmetrically():
    units = np.zeros((2, 2, 2, 3))
    units[0, 0, 0] = [2.0, -2.0, 0.0]
    units[1, 1, 1, 0] = -4.0
    image, symmetric = unit_picture(units)
    assert not symmetric and np.nanmin(image) == 0.0 and np.nanmax(image) == 1.0
    grey, symmetric = unit_picture(units[..., :1] * 0.5)
    assert symmetric and np.nanmax(np.abs(grey)) == 1.0 and np.nanmin(grey) == -1.0
    blank, _ = unit_picture(np.zeros((1, 2, 2, 1)))  # no energy: zeros, not NaN
    assert np.nanmax(np.abs(blank)) == 0.0
