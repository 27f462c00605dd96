"""Per-patch fully connected stem (docs/science.md §2): X = X0 Eᵀ, X0 ∈ R^{S0×C0}, C0 = ch·P²."""
from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["patchify", "PatchEmbed", "check_patch_size"]


def check_patch_size(image_size: int, patch_size: int) -> int:
    """Number of patches S0, or a clear error when P does not tile the image."""
    if image_size < 1 or patch_size < 1:
        raise ValueError(f"image_size and patch_size must be >= 1 (got {image_size}, {patch_size})")
    if image_size % patch_size:
        divisors = [p for p in range(1, image_size + 1) if image_size % p == 0]
        raise ValueError(
            f"patch_size={patch_size} does not divide image_size={image_size}; "
            f"choose one of {divisors}"
        )
    return (image_size // patch_size) ** 2


def patchify(x: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(N, ch, H, W) -> (N, S0, ch·P²); patches row-major over the image, each patch (ch, P, P)."""
    N, ch, H, W = x.shape
    P = patch_size
    x = x.reshape(N, ch, H // P, P, W // P, P)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (N, H/P, W/P, ch, P, P)
    return x.reshape(N, (H // P) * (W // P), ch * P * P)


class PatchEmbed(nn.Module):
    """Per-patch FC: patchify then one linear map E ∈ R^{C×C0} shared by all patches."""

    def __init__(self, image_size: int, patch_size: int, in_chans: int, dim: int, bias: bool = True):
        super().__init__()
        self.num_patches = check_patch_size(image_size, patch_size)
        self.image_size = image_size
        self.patch_size = patch_size
        self.in_chans = in_chans
        self.patch_dim = in_chans * patch_size * patch_size
        self.proj = nn.Linear(self.patch_dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, ch, H, W) -> (N, S0, C)
        if x.ndim != 4 or x.shape[1:] != (self.in_chans, self.image_size, self.image_size):
            raise ValueError(
                f"expected images of shape (N, {self.in_chans}, {self.image_size}, {self.image_size}), "
                f"got {tuple(x.shape)}; set image_size/in_chans to match the data"
            )
        return self.proj(patchify(x, self.patch_size))
