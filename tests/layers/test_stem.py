"""The per-patch stem (mlplab.layers.stem) against its definition written out: patch s = (row,
column) of the patch grid in row-major order, feature (ch, y, x) of the patch in that order; the
patch size's refusals and the images' shape check."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from mlplab.layers.stem import PatchEmbed, check_patch_size, patchify

f64 = torch.float64


def test_patchify_is_the_row_major_patch_grid_written_out():
    N, ch, H, W, P = 2, 3, 4, 6, 2
    x = torch.randn(N, ch, H, W, dtype=f64)
    out = patchify(x, P)
    assert out.shape == (N, (H // P) * (W // P), ch * P * P)
    expected = torch.empty_like(out)
    for n in range(N):
        for pr in range(H // P):
            for pc in range(W // P):
                for c in range(ch):
                    for py in range(P):
                        for px in range(P):
                            expected[n, pr * (W // P) + pc, c * P * P + py * P + px] = x[n, c, pr * P + py, pc * P + px]
    assert torch.equal(out, expected)
    assert torch.equal(patchify(x, 1), x.flatten(2).transpose(1, 2))  # P = 1: one pixel per token


def test_check_patch_size_counts_patches_or_names_the_divisors():
    assert check_patch_size(32, 4) == 64 and check_patch_size(28, 28) == 1 and check_patch_size(7, 1) == 49
    assert type(check_patch_size(32, 4)) is int  # a count of tokens: sizes of layers are built from it
    assert check_patch_size(1, 1) == 1  # a one-pixel image is one patch
    with pytest.raises(ValueError, match=r"patch_size=5 does not divide image_size=12; choose one of "
                                         r"\[1, 2, 3, 4, 6, 12\]"):
        check_patch_size(12, 5)
    for image, patch in ((0, 1), (4, 0), (-4, 2), (4, -2)):
        with pytest.raises(ValueError, match=rf"image_size and patch_size must be >= 1 \(got {image}, {patch}\)"):
            check_patch_size(image, patch)


@pytest.mark.parametrize("bias", [True, False])
def test_patch_embed_is_one_linear_map_shared_by_all_patches(bias):
    torch.manual_seed(0)
    emb = PatchEmbed(image_size=4, patch_size=2, in_chans=3, dim=5, bias=bias).to(f64)
    assert (emb.num_patches, emb.image_size, emb.patch_size, emb.in_chans, emb.patch_dim) == (4, 4, 2, 3, 12)
    assert isinstance(emb.proj, nn.Linear) and emb.proj.weight.shape == (5, 12)
    assert (emb.proj.bias is not None) == bias
    x = torch.randn(2, 3, 4, 4, dtype=f64)
    E = emb.proj.weight
    b = emb.proj.bias if bias else 0.0
    torch.testing.assert_close(emb(x), patchify(x, 2) @ E.T + b, rtol=0, atol=1e-12)


def test_patch_embed_refuses_images_of_another_shape():
    emb = PatchEmbed(4, 2, 3, 5)
    assert emb.proj.bias is not None  # a bias by default
    msg = r"expected images of shape \(N, 3, 4, 4\), got {}; set image_size/in_chans to match the data"
    for shape in ((2, 1, 4, 4), (2, 3, 4, 6), (2, 3, 6, 4), (3, 4, 4)):
        with pytest.raises(ValueError, match=msg.format(str(shape).replace("(", r"\(").replace(")", r"\)"))):
            emb(torch.zeros(shape))
    with pytest.raises(ValueError, match="does not divide"):
        PatchEmbed(6, 4, 3, 5)
