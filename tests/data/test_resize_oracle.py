"""Resizing against a reference written here, on random (non-constant) images.

The reference is the separable linear filter of Pillow's ``BILINEAR`` resize, as a matrix: output
pixel i of n_out has its centre at c = (i + ½)·n_in/n_out in input coordinates, and input pixel j
(centre j + ½) weighs max(0, 1 − |j + ½ − c| / s), normalised over j. With s = max(1, n_in/n_out)
the triangle widens when shrinking (antialiasing: ``resize_images``, which loads datasets at
``data.image_size``); with s = 1 it is plain bilinear interpolation with half-pixel centres and
clamped edges (``resized_crop``, which does not antialias). The reference agrees with Pillow's
float resize to 1e-5 (checked when it was written).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mlplab.data import resize_images
from mlplab.data.resized_crop import resized_crop


def filter_matrix(n_in: int, n_out: int, antialias: bool) -> np.ndarray:
    scale = n_in / n_out
    support = max(1.0, scale) if antialias else 1.0
    centres = (np.arange(n_out) + 0.5) * scale
    w = np.maximum(0.0, 1.0 - np.abs(np.arange(n_in)[None, :] + 0.5 - centres[:, None]) / support)
    return w / w.sum(1, keepdims=True)


def reference(x: np.ndarray, hw: tuple[int, int], antialias: bool) -> np.ndarray:
    """(…, H, W) -> (…, h, w) in float64."""
    a, b = filter_matrix(x.shape[-2], hw[0], antialias), filter_matrix(x.shape[-1], hw[1], antialias)
    return np.einsum("ij,...jk,lk->...il", a, x.astype(np.float64), b)


def test_the_reference_is_area_averaging_where_that_is_exact_and_interpolates_between_centres():
    # shrinking by 2: the triangle over 4 input pixels weighs 1/8, 3/8, 3/8, 1/8 (edges renormalised)
    np.testing.assert_allclose(filter_matrix(4, 2, True), [[3 / 7, 3 / 7, 1 / 7, 0], [0, 1 / 7, 3 / 7, 3 / 7]])
    np.testing.assert_allclose(filter_matrix(4, 2, False), [[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
    np.testing.assert_allclose(filter_matrix(2, 4, True), [[1, 0], [0.75, 0.25], [0.25, 0.75], [0, 1]])


@pytest.mark.parametrize("shape,hw", [((24, 24), (12, 12)), ((30, 30), (12, 12)), ((24, 18), (8, 6)),
                                      ((8, 8), (20, 20)), ((10, 16), (7, 23)), ((9, 9), (9, 9))])
def test_resize_images_is_the_antialiased_reference_rounded(shape, hw):
    x = np.random.default_rng(sum(shape)).integers(0, 256, (3, 2, *shape), dtype=np.uint8)
    got = resize_images(torch.from_numpy(x), hw if hw[0] != hw[1] else hw[0])
    assert got.dtype == torch.uint8 and tuple(got.shape) == (3, 2, *hw)
    err = got.numpy().astype(np.float64) - reference(x, hw, antialias=True)
    assert np.abs(err).max() <= 0.5 + 1e-3  # rounded to the nearest integer, in [0, 255]
    assert abs(err.mean()) < 0.05  # not biased (truncation would be −0.5 on average)


def test_resize_images_in_chunks_is_the_same():
    x = torch.randint(0, 256, (7, 1, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(resize_images(x, 5, chunk=3), resize_images(x, 5))


def test_resized_crop_is_the_bilinear_reference_of_each_box():
    g = np.random.default_rng(1)
    x = g.uniform(0, 255, (4, 2, 20, 16))
    boxes = [[0, 0, 20, 16], [3, 2, 7, 11], [5, 9, 15, 7], [1, 1, 2, 3]]  # whole, shrunk and enlarged boxes
    got = resized_crop(torch.from_numpy(x), torch.tensor(boxes), (9, 12)).numpy()
    for k, (t, l, h, w) in enumerate(boxes):
        np.testing.assert_allclose(got[k], reference(x[k, :, t:t + h, l:l + w], (9, 12), antialias=False),
                                   rtol=0, atol=1e-9)


def test_resize_images_keeps_black_and_white_where_the_reference_does():
    """Blocks of 0 and 255 (not constant): where the filter sees one block only the reference is
    exactly 0 or 255 and so is the resize, neither clipped nor lifted off the ends of the range."""
    blocks = np.kron(np.random.default_rng(2).integers(0, 2, (2, 3, 4, 4)), np.ones((6, 6))) * 255  # 24x24
    x = torch.from_numpy(blocks.astype(np.uint8))
    for hw in ((12, 12), (8, 8), (36, 30)):
        got = resize_images(x, hw).numpy().astype(np.float64)
        want = reference(blocks, hw, antialias=True)
        clear = np.abs(want - np.floor(want) - 0.5) > 0.01  # away from a rounding tie
        np.testing.assert_array_equal(got[clear], np.rint(want[clear]))
        assert (got == 0).any() and (got == 255).any()


def test_resize_images_builds_its_output_where_the_images_are():
    x = torch.zeros(2, 3, 12, 12, dtype=torch.uint8, device="meta")  # stands in for an accelerator
    y = resize_images(x, (5, 7))
    assert y.device == x.device and y.dtype == torch.uint8 and tuple(y.shape) == (2, 3, 5, 7)


def test_resize_images_returns_images_already_at_the_size_and_resizes_2048_at_a_time(monkeypatch):
    x = torch.randint(0, 256, (4, 3, 6, 6), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    assert resize_images(x, 6) is x and resize_images(x, (6, 6)) is x
    calls = []
    real = torch.nn.functional.interpolate
    monkeypatch.setattr(torch.nn.functional, "interpolate", lambda t, **kw: calls.append(len(t)) or real(t, **kw))
    resize_images(torch.zeros(2049, 1, 2, 2, dtype=torch.uint8), 1)
    assert calls == [2048, 1]  # memory is bounded by the chunk
    calls.clear()
    resize_images(x, 3, chunk=3)
    assert calls == [3, 1]
