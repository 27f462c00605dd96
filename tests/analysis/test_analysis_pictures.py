"""Weight pictures: the arrays are the right matrices; the plots run and are saved atomically."""
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import mlplab
from mlplab.analysis.pictures import (
    closest_factorisation,
    effective_weight_arrays,
    image_grid,
    plot_effective_weights,
    plot_stem_filters,
    plot_token_mixing_units,
    save_figure,
    stem_filter_images,
    token_mixing_unit_images,
    token_mixing_weight,
)
from mlplab.layers.stem import patchify
from mlplab.layers.vec import perm_matrix


def test_closest_factorisation():
    assert closest_factorisation(64) == (8, 8)
    assert closest_factorisation(48) == (6, 8)
    assert closest_factorisation(7) == (1, 7)
    assert closest_factorisation(1) == (1, 1)
    with pytest.raises(ValueError):
        closest_factorisation(0)


def test_effective_weight_arrays_are_fig_s9_matrices():
    arr = effective_weight_arrays(S=8, C=8, seed=3)
    W = torch.from_numpy(arr["W"])
    kron = torch.kron(torch.eye(8, dtype=torch.float64), W).numpy()
    assert np.array_equal(arr["mixer"], kron)  # I_C ⊗ W: C diagonal blocks of W
    assert np.array_equal(arr["mixer"][8:16, 8:16], arr["W"]) and not arr["mixer"][0:8, 8:16].any()
    J1 = perm_matrix(torch.from_numpy(arr["perm_1"])).numpy()
    J2 = perm_matrix(torch.from_numpy(arr["perm_2"])).numpy()
    assert np.allclose(arr["rp_mixer"], J1 @ kron @ J2, atol=0)
    assert np.allclose(np.linalg.svd(arr["rp_mixer"], compute_uv=False), np.linalg.svd(kron, compute_uv=False))
    assert np.count_nonzero(arr["rp_mixer"]) == np.count_nonzero(kron) == 8 * 64  # density 1/C
    sw = arr["sw"]
    assert sw.shape == (64, 64)
    assert np.count_nonzero(sw) / sw.size == pytest.approx(1 / 8, abs=0.03)
    assert float((sw ** 2).mean()) == pytest.approx(1 / 64, rel=0.2)  # (1/√p)² · p · 1/m
    given = torch.eye(4, dtype=torch.float64)
    assert np.array_equal(effective_weight_arrays(4, 2, W=given)["mixer"], np.eye(8))


def _mixer(**kw):
    torch.manual_seed(0)
    return mlplab.create_model("mlp_mixer", image_size=16, patch_size=2, hidden_dim=6, depth=1, num_classes=3, **kw)


def test_token_mixing_unit_images():
    model = _mixer()  # S0 = 64 tokens on an 8×8 patch grid
    W = model.blocks[0].token_mixing.inner.fc1.weight.detach()
    assert torch.equal(token_mixing_weight(model), W)
    imgs = token_mixing_unit_images(model)
    assert imgs.shape == (W.shape[0], 8, 8)
    u, r, c = 5, 2, 7
    assert imgs[u, r, c] == pytest.approx(float(W[u, r * 8 + c]))  # patch (r, c) is token r·8 + c
    ns = token_mixing_unit_images(torch.arange(2 * 48.0).reshape(2, 48), max_units=1)
    assert ns.shape == (1, 6, 8) and ns[0, 1, 0] == 8.0
    s_model = mlplab.create_model("s_mixer", image_size=16, patch_size=4, hidden_dim=4, depth=1, num_tokens=6)
    assert token_mixing_unit_images(s_model).shape == (6, 4, 4)  # first block: S0=16 -> S=6


def test_stem_filter_images_invert_patchify():
    model = _mixer()
    E = model.stem.proj.weight.detach()  # (C, ch·P²)
    imgs = stem_filter_images(model)
    assert imgs.shape == (6, 2, 2, 3)  # (filters, P, P, ch)
    # put filter k as the top-left patch of an image: patchify must give back row k of E
    k = 4
    x = torch.zeros(1, 3, 16, 16, dtype=torch.float64)
    x[0, :, :2, :2] = torch.from_numpy(imgs[k]).permute(2, 0, 1)
    assert torch.allclose(patchify(x, 2)[0, 0], E[k].double())
    norm = stem_filter_images(E, patch_size=2, in_chans=3, normalise=True)
    assert norm.min() >= 0 and norm.max() <= 1 and np.allclose(norm.reshape(6, -1).max(1), 1)
    with pytest.raises(ValueError, match="ch·P²"):
        stem_filter_images(E, patch_size=3, in_chans=3)


def test_image_grid():
    g = image_grid(np.ones((5, 2, 3)), ncols=3, pad=1)
    assert g.shape == (2 * 3 - 1, 3 * 4 - 1)
    assert np.isnan(g[2]).all() and g[0, 0] == 1


def test_plots_run_and_save(tmp_path):
    model = _mixer()
    figs = {
        "eff": plot_effective_weights(path=tmp_path / "eff", S=4, C=4),
        "units": plot_token_mixing_units(model, max_units=8, path=tmp_path / "units.png"),
        "stem": plot_stem_filters(model, path=tmp_path / "stem"),
        "gray": plot_stem_filters(torch.randn(5, 4), patch_size=2, in_chans=1),
    }
    assert all(isinstance(f, Figure) for f in figs.values())
    for name in ("eff", "units", "stem"):
        for ext in ("png", "pdf"):
            f = tmp_path / f"{name}.{ext}"
            assert f.exists() and f.stat().st_size > 500
    assert (tmp_path / "eff.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "eff.pdf").read_bytes()[:4] == b"%PDF"
    written = save_figure(figs["gray"], tmp_path / "sub" / "gray", formats=("png",))
    assert written == [tmp_path / "sub" / "gray.png"] and written[0].exists()
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave no temp files
