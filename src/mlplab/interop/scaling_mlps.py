"""Scaling-MLPs checkpoints (gregorbachmann/scaling_mlps, ``models/networks.py``) -> mlplab MLPs.

``BottleneckMLP``: x ↦ linear_in; per block x + block(layernorm(x)), block = Linear(m, km), GELU,
Linear(km, m); then linear_out. It is mlplab's ``bottleneck_mlp`` (pre-norm, exact GELU):

    linear_in -> stem      layernorms.i -> blocks.i.norm      blocks.i.block.0 / .2 -> blocks.i.fc1 / fc2
    linear_out -> head

``StandardMLP`` (their model "MLP"): z ↦ linear_in; per layer z ↦ layer(GELU(norm(z))); linear_out.
It is mlplab's ``mlp`` with ``norm_position="pre", act="gelu"`` (layers.i -> blocks.i.fc,
layernorms.i -> blocks.i.norm).

The input is the image flattened in (ch, H, W) order, as their loader's ``reshape`` of NCHW
batches does and as mlplab's MLPs do. ch and H are inferred from the input width d = ch·H²
(H² for one channel, 3·H² for three; 3·H² is never a square, so this is unique); pass
``in_chans``/``image_size`` to override. BatchNorm variants (``normalization='batch'``) are refused.
"""
from __future__ import annotations

import torch

from .common import Imported, block_indices, perfect_square, take

__all__ = ["matches", "to_mlplab", "EXPECTED"]

EXPECTED = ("Scaling-MLPs names ('linear_in.weight', 'blocks.0.block.0.weight' or 'layers.0.weight', "
            "'linear_out.weight')")


def matches(tensors: dict[str, torch.Tensor]) -> bool:
    return "linear_in.weight" in tensors and "linear_out.weight" in tensors


def image_shape(d_in: int, in_chans: int | None = None, image_size: int | None = None) -> tuple[int, int]:
    """(in_chans, image_size) with in_chans·image_size² = d_in (given values are checked), or a clear error."""
    if in_chans is not None or image_size is not None:
        ch = in_chans if in_chans is not None else d_in // image_size ** 2
        h = image_size if image_size is not None else perfect_square(d_in // max(ch, 1))
        if h is None or ch * h * h != d_in:
            raise ValueError(f"in_chans={in_chans}, image_size={image_size} do not match the checkpoint's input "
                             f"width {d_in} (in_chans·image_size² must equal it)")
        return ch, h
    if (h := perfect_square(d_in)) is not None:
        return 1, h
    if d_in % 3 == 0 and (h := perfect_square(d_in // 3)) is not None:
        return 3, h
    raise ValueError(f"the input width {d_in} is neither H² nor 3·H²; pass in_chans= and image_size= "
                     f"with in_chans·image_size² = {d_in}")


def to_mlplab(tensors: dict[str, torch.Tensor], overrides: dict | None = None) -> Imported:
    t = dict(tensors)
    if any(k.endswith("running_mean") for k in t):
        raise ValueError("this Scaling-MLPs checkpoint uses BatchNorm (normalization='batch'); mlplab's MLPs "
                         "use LayerNorm only")
    state = {"stem.weight": take(t, "linear_in.weight", 2, "Scaling-MLPs"),
             "stem.bias": take(t, "linear_in.bias", 1, "Scaling-MLPs"),
             "head.weight": take(t, "linear_out.weight", 2, "Scaling-MLPs"),
             "head.bias": take(t, "linear_out.bias", 1, "Scaling-MLPs")}
    m, d_in = state["stem.weight"].shape
    ov = overrides or {}
    in_chans, image_size = image_shape(d_in, ov.get("in_chans"), ov.get("image_size"))
    kwargs = {"image_size": image_size, "in_chans": in_chans, "width": m, "act": "gelu", "norm_eps": 1e-5,
              "num_classes": state["head.weight"].shape[0]}
    if "blocks.0.block.0.weight" in t:
        depth = len(block_indices(t, r"blocks\.(\d+)\."))
        for i in range(depth):
            for src, dst in (("block.0", "fc1"), ("block.2", "fc2")):
                state[f"blocks.{i}.{dst}.weight"] = take(t, f"blocks.{i}.{src}.weight", 2, "Scaling-MLPs")
                state[f"blocks.{i}.{dst}.bias"] = take(t, f"blocks.{i}.{src}.bias", 1, "Scaling-MLPs")
            state[f"blocks.{i}.norm.weight"] = take(t, f"layernorms.{i}.weight", 1, "Scaling-MLPs")
            state[f"blocks.{i}.norm.bias"] = take(t, f"layernorms.{i}.bias", 1, "Scaling-MLPs")
        hidden = state["blocks.0.fc1.weight"].shape[0]
        kwargs.update(block="bottleneck", depth=depth, expansion=hidden / m)
        name = "bottleneck_mlp"
    else:
        depth = len(block_indices(t, r"layers\.(\d+)\."))
        if depth == 0:
            raise ValueError("Scaling-MLPs checkpoint has neither blocks.* (BottleneckMLP) nor layers.* (MLP) "
                             "tensors; a model without blocks has no mlplab counterpart")
        for i in range(depth):
            state[f"blocks.{i}.fc.weight"] = take(t, f"layers.{i}.weight", 2, "Scaling-MLPs")
            state[f"blocks.{i}.fc.bias"] = take(t, f"layers.{i}.bias", 1, "Scaling-MLPs")
            state[f"blocks.{i}.norm.weight"] = take(t, f"layernorms.{i}.weight", 1, "Scaling-MLPs")
            state[f"blocks.{i}.norm.bias"] = take(t, f"layernorms.{i}.bias", 1, "Scaling-MLPs")
        kwargs.update(block="standard", depth=depth, norm_position="pre")
        name = "mlp"
    if t:
        raise ValueError(f"Scaling-MLPs checkpoint has tensors this model does not use: {sorted(t)[:5]}")
    return Imported(name, kwargs, state, "scaling_mlps")
