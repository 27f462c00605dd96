"""Fine-tuning at K× the resolution (MLP-Mixer paper, Tolstikhin et al. 2021, §3.3 / App. C; docs/science.md §7).

The patch size is kept, so a K·H image has K² times the patches. Think of the K·H image as a K×K
grid of H×H *tiles*. The expanded Mixer processes every tile exactly as the original model
processes an H×H image and only the final average pools over all tiles:

* every token-mixing weight becomes block-diagonal with K² copies of the original (one per tile,
  tokens of a tile mixed only among themselves); the token-MLP hidden width grows by K² and its
  biases are repeated. The first-block skip layer W̃ ∈ R^{S×S0} is expanded the same way.
* stem, channel mixing, LayerNorms and head are unchanged (they act per token).

Token order: with S = S0 tokens stay in image order (row-major over the K·H/P × K·H/P grid of
patches), so the expanded model is an ordinary Mixer of image size K·H. With S ≠ S0 (first-block
skip layer) the first block's outputs are no longer patches: the expanded model orders them
tile by tile (token j·S + s is token s of tile j, tiles row-major).

**RP blocks.** An RP layer's J1, J2 are permutations of the whole S·C (or S·D) entries of one
image. The expanded RP layer applies the original J1, J2 *within each tile* (block permutations
J' = K² copies of J, placed on the tile's entries), with the group map expanded as above, so its
effective weight J2'(I ⊗ W')J1' is — up to the order of the entries — block-diagonal with K²
copies of the original J2 (I ⊗ W) J1. It stays a random permutation *per tile*; entries of
different tiles never mix before the final pooling.

Property (tested in float64 to ~1e-12): on the K×K tiling of K² images, the expanded model's
logits equal the mean of the original model's logits on the tiles.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from .mixer import Mixer

__all__ = ["expand_resolution"]


def _spatial_tokens(K: int, n: int) -> torch.Tensor:
    """tok[j, s]: index, in the K·n × K·n patch grid (row-major), of patch s (row-major in its
    n × n tile) of tile j (tiles row-major)."""
    j = torch.arange(K * K)[:, None]
    s = torch.arange(n * n)[None, :]
    row = (j // K) * n + s // n
    col = (j % K) * n + s % n
    return row * (K * n) + col


def _tile_major(K: int, count: int) -> torch.Tensor:
    """tok[j, s] = j·count + s: tile after tile."""
    return torch.arange(K * K * count).view(K * K, count)


def _block_diagonal(W: torch.Tensor, tok_out: torch.Tensor, tok_in: torch.Tensor) -> torch.Tensor:
    """K² copies of W (out, in): W'[tok_out[j, a], tok_in[j, b]] = W[a, b], zero across tiles."""
    KK, n_out = tok_out.shape
    n_in = tok_in.shape[1]
    Wp = W.new_zeros(KK * n_out, KK * n_in)
    for j in range(KK):
        Wp[tok_out[j][:, None], tok_in[j][None, :]] = W
    return Wp


def _repeat_bias(b: torch.Tensor, tok_out: torch.Tensor) -> torch.Tensor:
    bp = b.new_empty(tok_out.numel())
    for j in range(tok_out.shape[0]):
        bp[tok_out[j]] = b
    return bp


def _expand_group_map(f: nn.Module, tok_in: torch.Tensor, tok_out: torch.Tensor,
                      K: int, sd: dict, prefix: str) -> None:
    """Token-mixing group map (Linear, LinearAct or Mlp): each Linear block-diagonal; hidden units
    tile-major."""
    lins = [m for m in f.modules() if isinstance(m, nn.Linear)]
    names = [n for n, m in f.named_modules() if isinstance(m, nn.Linear)]
    orders = [tok_in] + [_tile_major(K, lin.out_features) for lin in lins[:-1]] + [tok_out]
    for i, (name, lin) in enumerate(zip(names, lins)):
        key = f"{prefix}.{name}." if name else f"{prefix}."
        sd[key + "weight"] = _block_diagonal(lin.weight.detach(), orders[i + 1], orders[i])
        if lin.bias is not None:
            sd[key + "bias"] = _repeat_bias(lin.bias.detach(), orders[i + 1])


def _vec_global(j: torch.Tensor, v: torch.Tensor, rows: int, tok: torch.Tensor, K: int) -> torch.Tensor:
    """Vec (column-major) index in the expanded (K²·rows × cols) matrix of tile j's vec index v of
    its (rows × cols) matrix."""
    return (v // rows) * (K * K * rows) + tok[j, v % rows]


def _expand_rp(pk, K: int, tok_in: torch.Tensor, tok_out: torch.Tensor,
               token: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """J1', J2' of an RP layer: the original J1, J2 inside every tile (see the module docstring).

    Token mixing (groups = n1 = C groups of n2 = S entries; the group map grows): position r of group
    g of tile j goes to g·K²n2 + j·n2 + r. Channel mixing (n1 = S groups of C; the map is kept):
    group g of tile j becomes group j·n1 + g."""
    n1, n2, n2o = pk.n1, pk.n2, pk.n2_out
    rows_in, rows_out = pk.in_shape[0], pk.out_shape[0]
    KK = K * K
    j = torch.arange(KK)[:, None]
    p1, p2 = pk.perm_in.cpu(), pk.perm_out.cpu()

    def grouped(k, width):  # tile j's grouped index k = g·width + r -> expanded grouped index
        if token:
            return (k // width) * (KK * width) + j * width + k % width
        return j * (n1 * width) + k

    k_in = torch.arange(n1 * n2)[None, :]
    p1_new = torch.empty(KK * n1 * n2, dtype=torch.long)
    p1_new[grouped(k_in, n2).reshape(-1)] = _vec_global(j, p1[k_in], rows_in, tok_in, K).reshape(-1)
    k_out = torch.arange(n1 * n2o)[None, :]
    p2_new = torch.empty(KK * n1 * n2o, dtype=torch.long)
    p2_new[_vec_global(j, k_out, rows_out, tok_out, K).reshape(-1)] = grouped(p2[k_out], n2o).reshape(-1)
    return p1_new, p2_new


def expand_resolution(model: nn.Module, K: int) -> Mixer:
    """A copy of the Mixer ``model`` for images K× larger (same patch size, S and token-MLP width
    × K²), whose token-mixing weights are block-diagonal with K² copies of the original (docs/science.md §7;
    see the module docstring, also for what it means for RP blocks). ``model`` is not changed."""
    if not isinstance(model, Mixer):
        raise ValueError(f"expand_resolution works on Mixers (MLP-, S- and RP-Mixers), not {type(model).__name__}")
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K must be a whole number >= 1 (the resolution factor), got {K!r}")
    cfg = model.cfg
    if cfg.token_mixing != "shared":
        raise ValueError(f"expand_resolution works on the shared token MLP, not token_mixing={cfg.token_mixing!r}")
    S0, S = model.num_patches, model.num_tokens
    n = cfg.image_size // cfg.patch_size
    KK = K * K
    blk0 = model.blocks[0]
    changes = dict(image_size=K * cfg.image_size, skip_layer=blk0.skip_proj is not None)
    if cfg.num_tokens is not None:
        changes["num_tokens"] = KK * S
    if cfg.block == "mlp":
        changes["token_hidden"] = KK * blk0.token_mixing.inner.fc1.out_features
        changes["channel_hidden"] = blk0.channel_mixing.inner.fc1.out_features
    new_cfg = dataclasses.replace(cfg, **changes)
    with torch.random.fork_rng(devices=[]):  # its own init is overwritten; leave the caller's RNG alone
        new = Mixer(new_cfg)
    new = new.to(device=next(model.parameters()).device, dtype=next(model.parameters()).dtype)
    new.model_name = getattr(model, "model_name", "mlp_mixer")
    new.config = new_cfg
    if isinstance(getattr(model, "pretrained_cfg", None), dict):  # same weights' settings, K x the input
        new.pretrained_cfg = {**model.pretrained_cfg,
                              "input_size": (cfg.in_chans, new_cfg.image_size, new_cfg.image_size)}

    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    spatial = _spatial_tokens(K, n)
    for i, blk in enumerate(model.blocks):
        tok_in = spatial if (i == 0 or S == S0) else _tile_major(K, S)
        tok_out = spatial if S == S0 else _tile_major(K, S)
        p = f"blocks.{i}"
        tm = blk.token_mixing
        if blk.rp:
            f_in, f_out = _tile_major(K, tm.n2), _tile_major(K, tm.n2_out)
            _expand_group_map(tm.inner, f_in, f_out, K, sd, f"{p}.token_mixing.inner")
            sd[f"{p}.token_mixing.perm_in"], sd[f"{p}.token_mixing.perm_out"] = _expand_rp(tm, K, tok_in, tok_out, True)
            ch = blk.channel_mixing
            sd[f"{p}.channel_mixing.perm_in"], sd[f"{p}.channel_mixing.perm_out"] = \
                _expand_rp(ch, K, tok_out, tok_out, False)
        else:
            _expand_group_map(tm.inner, tok_in, tok_out, K, sd, f"{p}.token_mixing.inner")
        if blk.skip_proj is not None:
            sd[f"{p}.skip_proj.weight"] = _block_diagonal(blk.skip_proj.weight.detach(), tok_out, tok_in)
    new.load_state_dict(sd)  # copied into new's own tensors, on its device
    new.train(model.training)
    return new
