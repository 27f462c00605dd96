"""The official Flax MLP-Mixer checkpoints (google-research/vision_transformer, ``models_mixer.py``;
``.npz`` files with ``/``-separated names) -> mlplab's MLP-Mixer.

Flax names                                         mlplab names
``stem/kernel`` (P, P, ch, C), HWIO                 ``stem.proj.weight`` (C, ch·P²): permuted to
                                                    (C, ch, P, P), flattened
``MixerBlock_i/LayerNorm_0`` / ``LayerNorm_1``      ``blocks.i.norm1`` / ``norm2`` (``scale`` -> ``weight``)
``MixerBlock_i/token_mixing/Dense_{0,1}``           ``blocks.i.token_mixing.inner.fc{1,2}``
                                                    (``kernel`` (in, out) transposed)
``MixerBlock_i/channel_mixing/Dense_{0,1}``         ``blocks.i.channel_mixing.inner.fc{1,2}``
``pre_head_layer_norm``, ``head``                   ``norm``, ``head``

Flax's ``nn.LayerNorm`` has eps 1e-6 and ``nn.gelu`` is the tanh approximation, so the model is
built with ``norm_eps=1e-6, act="gelu_tanh"``. Flax takes NHWC images, mlplab NCHW: the same
image, so the logits agree. A leading ``params/`` or ``opt/target/`` is ignored.
"""
from __future__ import annotations

import torch

from .common import Imported, block_indices, perfect_square, take

__all__ = ["matches", "to_mlplab", "EXPECTED"]

EXPECTED = "Flax Mixer names ('stem/kernel', 'MixerBlock_0/token_mixing/Dense_0/kernel', 'head/kernel')"
_ROOTS = ("params/", "opt/target/", "target/")


def _unroot(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in tensors.items():
        for r in _ROOTS:
            if k.startswith(r):
                k = k[len(r):]
                break
        out[k] = v
    return out


def matches(tensors: dict[str, torch.Tensor]) -> bool:
    t = _unroot(tensors)
    return "stem/kernel" in t and "MixerBlock_0/token_mixing/Dense_0/kernel" in t


def _dense(t: dict, src: str, dst: str, state: dict) -> None:
    state[f"{dst}.weight"] = take(t, f"{src}/kernel", 2, "Flax").T.contiguous()  # (in, out) -> (out, in)
    state[f"{dst}.bias"] = take(t, f"{src}/bias", 1, "Flax")


def _norm(t: dict, src: str, dst: str, state: dict) -> None:
    state[f"{dst}.weight"] = take(t, f"{src}/scale", 1, "Flax")
    state[f"{dst}.bias"] = take(t, f"{src}/bias", 1, "Flax")


def to_mlplab(tensors: dict[str, torch.Tensor], overrides: dict | None = None) -> Imported:
    t = _unroot(tensors)
    kernel = take(t, "stem/kernel", 4, "Flax")
    P, P2, ch, C = kernel.shape
    if P != P2:
        raise ValueError(f"Flax stem kernel is {P}x{P2}; mlplab's per-patch stem needs square patches")
    state = {"stem.proj.weight": kernel.permute(3, 2, 0, 1).reshape(C, ch * P * P).contiguous(),
             "stem.proj.bias": take(t, "stem/bias", 1, "Flax")}
    depth = len(block_indices(t, r"MixerBlock_(\d+)/"))
    S = t["MixerBlock_0/token_mixing/Dense_0/kernel"].shape[0]
    d_s = t["MixerBlock_0/token_mixing/Dense_0/kernel"].shape[1]
    d_c = t["MixerBlock_0/channel_mixing/Dense_0/kernel"].shape[1] \
        if "MixerBlock_0/channel_mixing/Dense_0/kernel" in t else None
    if d_c is None:
        raise ValueError("Flax checkpoint lacks 'MixerBlock_0/channel_mixing/Dense_0/kernel': not a Mixer")
    side = perfect_square(S)
    if side is None:
        raise ValueError(f"Flax Mixer has S={S} tokens, not a square number of patches")
    for i in range(depth):
        b, d = f"MixerBlock_{i}", f"blocks.{i}"
        _norm(t, f"{b}/LayerNorm_0", f"{d}.norm1", state)
        _norm(t, f"{b}/LayerNorm_1", f"{d}.norm2", state)
        for mix in ("token_mixing", "channel_mixing"):
            _dense(t, f"{b}/{mix}/Dense_0", f"{d}.{mix}.inner.fc1", state)
            _dense(t, f"{b}/{mix}/Dense_1", f"{d}.{mix}.inner.fc2", state)
    _norm(t, "pre_head_layer_norm", "norm", state)
    kwargs = {"image_size": P * side, "in_chans": ch, "patch_size": P, "hidden_dim": C, "depth": depth,
              "token_hidden": d_s, "channel_hidden": d_c, "norm_eps": 1e-6, "act": "gelu_tanh"}
    if "head/kernel" in t:
        _dense(t, "head", "head", state)
        kwargs["num_classes"] = state["head.weight"].shape[0]
    if t:
        raise ValueError(f"Flax checkpoint has tensors a Mixer does not use: {sorted(t)[:5]}")
    return Imported("mlp_mixer", kwargs, state, "flax")
