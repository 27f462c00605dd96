"""timm's ``MlpMixer`` state dicts (``timm/models/mlp_mixer.py``) <-> mlplab's MLP-Mixer.

timm names                          mlplab names
``stem.proj.weight`` (C, ch, P, P)   ``stem.proj.weight`` (C, ch·P²) — the conv kernel flattened in
                                     the (ch, P, P) order in which :func:`~mlplab.layers.stem.patchify` lays out a patch
``blocks.i.norm1`` / ``norm2``       same
``blocks.i.mlp_tokens.fc{1,2}``      ``blocks.i.token_mixing.inner.fc{1,2}`` (fc1: (D_S, S))
``blocks.i.mlp_channels.fc{1,2}``    ``blocks.i.channel_mixing.inner.fc{1,2}`` (fc1: (D_C, C))
``norm``, ``head``                   same

timm's Mixer uses LayerNorm eps 1e-6 and the exact GELU; S must be a square number of patches
(image size = P·√S). A normal Mixer stores no permutations, exactly as timm's.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .common import Imported, block_indices, perfect_square, take

__all__ = ["matches", "to_mlplab", "from_mlplab", "timm_model_args", "EXPECTED"]

EXPECTED = "timm MlpMixer names ('stem.proj.weight' 4-D, 'blocks.0.mlp_tokens.fc1.weight', 'head.weight')"

_SUB = {"mlp_tokens": "token_mixing.inner", "mlp_channels": "channel_mixing.inner"}


def matches(tensors: dict[str, torch.Tensor]) -> bool:
    w = tensors.get("stem.proj.weight")
    return w is not None and w.ndim == 4 and "blocks.0.mlp_tokens.fc1.weight" in tensors


def to_mlplab(tensors: dict[str, torch.Tensor], overrides: dict | None = None) -> Imported:
    t = dict(tensors)
    stem_w = take(t, "stem.proj.weight", 4, "timm")
    C, ch, P, P2 = stem_w.shape
    if P != P2:
        raise ValueError(f"timm stem kernel is {P}x{P2}; mlplab's per-patch stem needs square patches")
    depth = len(block_indices(t, r"blocks\.(\d+)\."))
    if depth == 0:
        raise ValueError("timm Mixer checkpoint has no blocks.* tensors")
    tok1 = t["blocks.0.mlp_tokens.fc1.weight"]
    ch1 = t.get("blocks.0.mlp_channels.fc1.weight")
    if ch1 is None or ch1.ndim != 2:
        raise ValueError("timm checkpoint lacks 'blocks.0.mlp_channels.fc1.weight': not an MlpMixer "
                         "(ResMLP and gMLP use other names)")
    d_s, S = tok1.shape
    d_c = ch1.shape[0]
    side = perfect_square(S)
    if side is None:
        raise ValueError(f"timm Mixer has S={S} tokens, not a square number of patches; mlplab's Mixer "
                         "needs a square image (image size = patch·√S)")
    state: dict[str, torch.Tensor] = {"stem.proj.weight": stem_w.reshape(C, ch * P * P)}
    for k in sorted(t):
        new = k
        for a, b in _SUB.items():
            new = new.replace(f".{a}.", f".{b}.")
        state[new] = t[k]
    kwargs = {"image_size": P * side, "in_chans": ch, "patch_size": P, "hidden_dim": C, "depth": depth,
              "token_hidden": d_s, "channel_hidden": d_c, "norm_eps": 1e-6, "act": "gelu"}
    if "head.weight" in t:
        kwargs["num_classes"] = t["head.weight"].shape[0]
    return Imported("mlp_mixer", kwargs, state, "timm")


def from_mlplab(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict timm's ``MlpMixer`` of the same size loads (strictly). Only normal
    MLP-Mixers have a timm counterpart: RP blocks, S-Mixer blocks, the first-block skip layer,
    or removed norms/skips have none, and are refused."""
    from ..models.mixer import Mixer

    if not isinstance(model, Mixer):
        raise ValueError(f"only MLP-Mixers export to timm, not {type(model).__name__}")
    cfg = model.cfg
    why = []
    if cfg.block != "mlp":
        why.append("S-Mixer blocks (block='s')")
    if model.rp_blocks:
        why.append(f"RP blocks {sorted(model.rp_blocks)}")
    if model.num_tokens != model.num_patches:
        why.append(f"num_tokens={model.num_tokens} != {model.num_patches} patches (the first-block skip layer)")
    if not (cfg.norm and cfg.skip):
        why.append("norm=False or skip=False")
    if cfg.token_mixing != "shared":
        why.append(f"token_mixing={cfg.token_mixing!r}")
    if any(blk.skip_proj is not None for blk in model.blocks):
        why.append("a learned first-block skip layer")
    if why:
        raise ValueError("this Mixer has no timm counterpart: " + "; ".join(why))
    out: dict[str, torch.Tensor] = {}
    for k, v in model.state_dict().items():
        if k == "stem.proj.weight":
            P = cfg.patch_size
            v = v.reshape(v.shape[0], cfg.in_chans, P, P)
        for a, b in _SUB.items():
            k = k.replace(f".{b}.", f".{a}.")
        out[k] = v
    return out



def timm_model_args(model: nn.Module) -> tuple[str, dict] | None:
    """``(architecture, model_args)`` with which ``timm.create_model`` builds this model exactly
    (the keys of a Hub ``config.json`` that timm reads), or None when timm has no such model:
    not a normal MLP-Mixer (:func:`from_mlplab`), a patch size, width and depth that no timm Mixer
    has, or options timm's ``MlpMixer`` fixes otherwise (LayerNorm eps 1e-6, exact GELU, hidden
    widths int(ratio·C))."""
    from ..models.registry import model_config
    from ..models.timm_names import TIMM_MIXERS

    try:
        from_mlplab(model)
    except ValueError:
        return None
    cfg = model.cfg
    d_s = model.blocks[0].token_mixing.inner.fc1.out_features
    d_c = model.blocks[0].channel_mixing.inner.fc1.out_features
    C = cfg.hidden_dim
    if cfg.norm_eps != 1e-6 or cfg.act != "gelu" or int(d_s / C * C) != d_s or int(d_c / C * C) != d_c:
        return None
    for name in TIMM_MIXERS:  # timm's functions fix patch, width and depth; the rest are arguments
        ref = model_config(name)
        if (ref.patch_size, ref.hidden_dim, ref.depth) == (cfg.patch_size, C, cfg.depth):
            args = {"img_size": cfg.image_size, "in_chans": cfg.in_chans, "mlp_ratio": [d_s / C, d_c / C],
                    "num_classes": cfg.num_classes}
            if (ref.image_size, ref.in_chans, ref.token_hidden, ref.channel_hidden) == (cfg.image_size, cfg.in_chans,
                                                                                         d_s, d_c):
                args = {"num_classes": cfg.num_classes}
            return name, args
    return None
