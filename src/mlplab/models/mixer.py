"""MLP-Mixer, S-Mixer and their random-permuted (RP) variants, all built from PK mixing layers.

Tokens are stored as (B, S, C) row-major tensors. Every mixing sublayer is a
:class:`~mlplab.layers.pk.PKMixing`: token mixing has J1 = J2 = I with groups = columns (n1 = C,
n2 = S), channel mixing has J1 = J_c, J2 = J_cᵀ with groups = rows (n1 = S, n2 = C) (docs/science.md §2,
Prop. 3.2). An RP block replaces those J's by independent uniformly random permutations, drawn
at construction from ``seed`` and stored in the state dict.

Block (MLP-Mixer):  U = X + TokenMLP(LN(X)),  Y = U + ChannelMLP(LN(U)).
Block (S-Mixer):    U = X + φ(W LN(X)),       Y = U + φ(LN(U) V).
With ``norm=False`` / ``skip=False`` the LNs / skips are removed (the theory form
H = φ(φ(W X) V) of the S-Mixer is ``norm=False, skip=False``).
The first block maps S0 -> S tokens; its skip path is then a learned W̃ ∈ R^{S×S0} (SkipLayer).

How it computes (``model.impl``, :class:`mlplab.models.impl.Impl`). One forward,
:meth:`MixerBlock.forward`, defines the model. On CPU, "auto" runs a Mixer with norms and skips
through the fused seams of :mod:`mlplab.models.mixer_fused` (one C kernel per seam each way, the
same function: tests compare them in float64 to 1e-12) when :meth:`Mixer.fusable` allows it;
"module" takes the module forward, "definition" that with every PK layer computed by Def. 5.1's
gathers. What the model's structure allows is decided once (when it is made and when ``impl``
changes); a forward checks only what can change between two forwards (device, training with
stochastic depth, autocast, dtype, forward hooks: a hooked block makes "auto" take the module
path, so the hooks fire).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn

from ..layers import fused
from ..layers.common import DropPath, LinearAct, Mlp, drop_path_rates, left_gemm_pays, left_linear
from ..layers.pk import PKMixing, has_hooks, random_perm
from ..layers.stem import PatchEmbed, check_patch_size
from ..utils.seeds import derive_generator
from . import mixer_fused
from .base import VisionMLP
from .impl import FUSABLE, Fusable, Impl
from .mixer_variants import GroupedTokenMlp, GroupLinear, TokenMlpBank, check_token_groups, token_mlp_shape
from .registry import register_model

__all__ = ["MixerConfig", "Mixer", "MixerBlock", "build_mixer", "MIXER_PRESETS"]


@dataclass
class MixerConfig:
    image_size: int = 32
    in_chans: int = 3
    patch_size: int = 4
    num_tokens: int | None = None  # S; None -> S0 = (image_size / patch_size)²
    hidden_dim: int = 64  # C
    expansion: float = 1.0  # γ: token hidden = round(γS), channel hidden = round(γC)
    token_hidden: int | None = None  # D_S (overrides γ for the token MLP)
    channel_hidden: int | None = None  # D_C (overrides γ for the channel MLP)
    depth: int = 8  # L
    num_classes: int = 10
    block: Literal["mlp", "s"] = "mlp"  # MLP-Mixer block or single-layer S-Mixer block
    rp_blocks: Literal["all", "none"] | tuple[int, ...] = "none"  # random-permuted blocks
    seed: int = 0  # seed of the RP permutations
    act: str = "gelu"
    norm: bool = True  # LayerNorm before each mixing sublayer (and before the head)
    skip: bool = True  # residual connections
    skip_layer: bool | None = None  # learned first-block skip W̃; None -> when S != S0
    drop_rate: float = 0.0  # dropout inside the MLPs
    drop_path_rate: float = 0.0  # stochastic depth, rising linearly to this over the blocks
    zero_head: bool = True  # zero-initialised classifier (as in the original Mixer)
    norm_eps: float = 1e-5
    token_mixing: Literal["shared", "untied", "grouped", "views"] = "shared"  # supplement variants (mixer_variants)
    token_groups: int = 1  # G of the "grouped" and "views" variants; divides C


def _rp_block_set(cfg: MixerConfig) -> frozenset[int]:
    if cfg.rp_blocks == "all":
        return frozenset(range(cfg.depth))
    if cfg.rp_blocks == "none":
        return frozenset()
    bad = [b for b in cfg.rp_blocks if not 0 <= b < cfg.depth]
    if bad:
        raise ValueError(f"rp_blocks {bad} out of range for depth={cfg.depth}; use indices 0..{cfg.depth - 1}")
    return frozenset(cfg.rp_blocks)


def _layer_generator(seed: int, block: int, sub: int) -> torch.Generator:
    """Each mixing layer has its own stream, so a block's permutations do not depend on which
    other blocks are RP."""
    return derive_generator(seed, "rp", block, sub)


def _hidden(explicit: int | None, expansion: float, n: int, what: str) -> int:
    """The hidden width: ``explicit``, else round(γ·n); refused below 1."""
    return _positive_width(explicit if explicit is not None else int(round(expansion * n)), what)


def _positive_width(h: int, what: str) -> int:
    if h < 1:
        raise ValueError(f"{what} hidden width is {h}; raise expansion or set it explicitly")
    return h


def _token_mixing_variant(cfg: MixerConfig, tokens_in: int, tokens: int, dim: int) -> nn.Module:
    """The supplement's untied / grouped / views token mixing (:mod:`mlplab.models.mixer_variants`)."""
    mlps, _, _, d, _ = token_mlp_shape(cfg.token_mixing, cfg.token_groups, tokens_in, tokens, dim,
                                       cfg.token_hidden, cfg.expansion)
    d = _positive_width(d, "token-MLP")
    if cfg.token_mixing == "grouped":
        return GroupedTokenMlp(cfg.token_groups, tokens_in, d, tokens, cfg.act, cfg.drop_rate)
    return TokenMlpBank(mlps, tokens_in, d, tokens, cfg.act, cfg.drop_rate)


_FUSE_SEAMS_REMOVED = "Mixer.fuse_seams was removed: set model.impl = 'auto' (fused where possible) or 'module'"


class MixerBlock(nn.Module):
    """One Mixer block: token-mixing then channel-mixing sublayer, each a PK mixing layer."""

    def __init__(
        self,
        tokens_in: int,
        tokens: int,
        dim: int,
        cfg: MixerConfig,
        rp: bool,
        index: int,
        drop_path: float,
        skip_layer: bool,
    ):
        super().__init__()
        self.index = index
        self.rp = rp
        self.use_skip = cfg.skip
        self.tokens_in, self.tokens, self.dim = tokens_in, tokens, dim
        eps = cfg.norm_eps
        self.norm1 = nn.LayerNorm(dim, eps=eps) if cfg.norm else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=eps) if cfg.norm else nn.Identity()
        if cfg.block == "mlp":
            d_s = _hidden(cfg.token_hidden, cfg.expansion, tokens, "token-MLP")
            d_c = _hidden(cfg.channel_hidden, cfg.expansion, dim, "channel-MLP")
            token_fn: nn.Module = Mlp(tokens_in, d_s, tokens, cfg.act, cfg.drop_rate)
            channel_fn: nn.Module = Mlp(dim, d_c, dim, cfg.act, cfg.drop_rate)
        else:
            token_fn = LinearAct(tokens_in, tokens, cfg.act)
            channel_fn = LinearAct(dim, dim, cfg.act)
        m_in, m = tokens_in * dim, tokens * dim
        tok, ch = {}, {}
        if rp:
            # one stream per sublayer: J1 then J2 of token mixing, J1 then J2 of channel mixing
            g_tok, g_ch = _layer_generator(cfg.seed, index, 0), _layer_generator(cfg.seed, index, 1)
            perms = [random_perm(m_in, g_tok), random_perm(m, g_tok), random_perm(m, g_ch), random_perm(m, g_ch)]
            tok = dict(perm_in=perms[0], perm_out=perms[1])
            ch = dict(perm_in=perms[2], perm_out=perms[3])
        if cfg.token_mixing == "shared":
            # token mixing: n1 = C groups (the columns of X) of n2 = S_in entries -> S; J1 = J2 = I
            self.token_mixing = PKMixing(token_fn, (tokens_in, dim), (tokens, dim), "columns", **tok)
        else:
            self.token_mixing = _token_mixing_variant(cfg, tokens_in, tokens, dim)
        # channel mixing: n1 = S groups (the rows) of n2 = C entries -> C; J1 = J_c, J2 = J_cᵀ
        self.channel_mixing = PKMixing(channel_fn, (tokens, dim), (tokens, dim), "rows", **ch)
        self.skip_proj = nn.Linear(tokens_in, tokens, bias=False) if skip_layer else None
        if self.skip_proj is None and tokens_in != tokens and cfg.skip:
            raise ValueError("a block that changes the token count needs the skip layer")
        self.drop_path = DropPath(drop_path)

    def skip(self, x: torch.Tensor) -> torch.Tensor:  # (B, S_in, C) -> (B, S, C)
        """The skip path: X, or W̃ X in the first block when it changes the token count."""
        if self.skip_proj is None:
            return x
        if left_gemm_pays(x) and not has_hooks(self.skip_proj):
            return left_linear(self.skip_proj, x)  # W̃ X as one left GEMM
        return self.skip_proj(x.transpose(1, 2)).transpose(1, 2)  # W̃ X on the transpose

    def forward(self, x: torch.Tensor, feats: dict | None = None) -> torch.Tensor:
        """U = X + TokenMixing(LN(X)), Y = U + ChannelMixing(LN(U)); ``feats`` collects each
        sublayer's output before its skip."""
        t = self.token_mixing(self.norm1(x))
        u = self.skip(x) + self.drop_path(t) if self.use_skip else t
        c = self.channel_mixing(self.norm2(u))
        if feats is not None:
            feats[f"blocks.{self.index}.token"], feats[f"blocks.{self.index}.channel"] = t, c
        return u + self.drop_path(c) if self.use_skip else c


class Mixer(VisionMLP):
    """MLP-Mixer / S-Mixer / RP-Mixer: per-patch stem, L blocks, LN, token average, linear head.

    Intermediate features: ``stem``, ``blocks.{i}.token``, ``blocks.{i}.channel`` (each mixing
    sublayer's output just before its skip), ``pre_logits``.
    """

    def __init__(self, cfg: MixerConfig):
        super().__init__()
        s0 = check_patch_size(cfg.image_size, cfg.patch_size)
        S = cfg.num_tokens if cfg.num_tokens is not None else s0
        C = cfg.hidden_dim
        for what, v in (("num_tokens (S)", S), ("hidden_dim (C)", C), ("depth (L)", cfg.depth),
                        ("num_classes", cfg.num_classes), ("in_chans", cfg.in_chans)):
            if v < 1:
                raise ValueError(f"{what} must be >= 1, got {v}")
        if cfg.expansion <= 0:
            raise ValueError(f"expansion (gamma) must be > 0, got {cfg.expansion}")
        if not 0.0 <= cfg.drop_rate < 1.0:
            raise ValueError(f"drop_rate must be in [0, 1), got {cfg.drop_rate}")
        check_token_groups(cfg.token_mixing, cfg.token_groups, C)
        if cfg.token_mixing != "shared" and (cfg.block != "mlp" or cfg.rp_blocks != "none"):
            raise ValueError(f"token_mixing={cfg.token_mixing!r} is a variant of the MLP-Mixer block: "
                             "use block='mlp' and rp_blocks='none', or token_mixing='shared'")
        self.cfg = cfg
        self.num_patches, self.num_tokens, self.hidden_dim = s0, S, C
        self.rp_blocks = _rp_block_set(cfg)
        skip_layer = cfg.skip_layer if cfg.skip_layer is not None else S != s0
        if S != s0 and not skip_layer and cfg.skip:
            raise ValueError(f"num_tokens={S} differs from the {s0} patches: the first block needs skip_layer=True")
        self.stem = PatchEmbed(cfg.image_size, cfg.patch_size, cfg.in_chans, C)
        dpr = drop_path_rates(cfg.drop_path_rate, cfg.depth)
        self.blocks = nn.ModuleList(
            MixerBlock(s0 if i == 0 else S, S, C, cfg, i in self.rp_blocks, i, dpr[i],
                       skip_layer and i == 0 and cfg.skip)
            for i in range(cfg.depth)
        )
        self.norm = nn.LayerNorm(C, eps=cfg.norm_eps) if cfg.norm else nn.Identity()
        self.head = nn.Linear(C, cfg.num_classes)
        self._impl_changed()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, mod in self.named_modules():
            if isinstance(mod, nn.Linear) and mod is not self.head:
                if name.startswith("stem"):
                    nn.init.trunc_normal_(mod.weight, std=(1.0 / mod.in_features) ** 0.5)  # lecun normal
                else:
                    nn.init.xavier_uniform_(mod.weight)
                if mod.bias is not None:
                    nn.init.zeros_(mod.bias)
            elif isinstance(mod, GroupLinear):
                mod.reset_parameters()
        if self.cfg.zero_head:
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    IMPLS = tuple(Impl)

    def _impl_changed(self) -> None:
        for m in self.blocks.modules():  # the PK layers compute by definition, or their cheapest way
            if isinstance(m, PKMixing):
                m.by_definition = self._impl is Impl.DEFINITION
        self._seams = self._seams_allowed()

    def _seams_allowed(self) -> Fusable:
        """What the model's structure and ``impl`` allow the fused seams (decided once)."""
        cfg = self.cfg
        if self._impl in (Impl.MODULE, Impl.DEFINITION):
            return Fusable(False, f"impl={self._impl.value}")
        if not (cfg.norm and cfg.skip):
            return Fusable(False, "a Mixer without LayerNorms or skips has no seams")
        if cfg.token_mixing != "shared":
            return Fusable(False, f"token_mixing={cfg.token_mixing!r} (the kernels compute the shared token MLP)")
        return FUSABLE

    @property
    def fuse_seams(self):
        raise AttributeError(_FUSE_SEAMS_REMOVED)

    @fuse_seams.setter
    def fuse_seams(self, on: bool) -> None:
        raise AttributeError(_FUSE_SEAMS_REMOVED)

    def forward_features(self, x: torch.Tensor, feats: dict | None = None) -> torch.Tensor:
        if feats is None and self._takes_fused_path(x):
            return mixer_fused.forward_features(self, x)
        x = self.stem(x)  # (B, S0, C)
        if feats is not None:
            feats["stem"] = x
        for blk in self.blocks:
            x = blk(x, feats)  # (B, S, C)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return super().forward_head(x.mean(dim=1), pre_logits)  # average over tokens: (B, C)

    def fusable(self, device: torch.device | str | None = "cpu") -> Fusable:
        """Whether the fused seams compute this model's forward on ``device`` in the current mode
        (training, autocast) under "auto" / "fused", and if not, why. ``device=None``: on a
        machine not known yet (a plan for a cluster node): the device and the kernels' build
        are not asked."""
        if not self._seams.ok:
            return self._seams
        if device is not None and torch.device(device).type != "cpu":
            return Fusable(False, f"the fused kernels run on CPU, not {torch.device(device).type}")
        if self.training and self.cfg.drop_path_rate > 0 and self.cfg.depth > 1:
            return Fusable(False, "stochastic depth while training")
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") != torch.bfloat16:
            return Fusable(False, f"autocast to {torch.get_autocast_dtype('cpu')}")
        if self.norm.weight.dtype not in (torch.float32, torch.float64):
            return Fusable(False, f"{self.norm.weight.dtype} weights (the kernels take float32 and float64)")
        if has_hooks(self.blocks) or has_hooks(self.norm):
            return Fusable(False, "forward hooks on its blocks (the module path calls them)")
        if device is not None and not fused.available():
            return Fusable(False, f"the fused kernels are unavailable: {fused.status()['reason']}")
        return FUSABLE

    def _takes_fused_path(self, x: torch.Tensor) -> bool:
        ok, why = self.fusable(x.device)
        if not ok and self._impl is Impl.FUSED:
            raise RuntimeError(f"impl='fused' but the fused seams cannot run: {why}; use impl='auto'")
        return ok


def build_mixer(cfg: MixerConfig) -> Mixer:
    return Mixer(cfg)


# Published MLP-Mixer sizes (Tolstikhin et al. 2021, Table 1): patch, C, L, D_S, D_C.
MIXER_PRESETS: dict[str, tuple[int, int, int, int, int]] = {
    "mixer_s32": (32, 512, 8, 256, 2048),
    "mixer_s16": (16, 512, 8, 256, 2048),
    "mixer_b32": (32, 768, 12, 384, 3072),
    "mixer_b16": (16, 768, 12, 384, 3072),
    "mixer_l32": (32, 1024, 24, 512, 4096),
    "mixer_l16": (16, 1024, 24, 512, 4096),
    "mixer_h14": (14, 1280, 32, 640, 5120),
}

for _name, (_p, _c, _l, _ds, _dc) in MIXER_PRESETS.items():
    register_model(
        _name, family="mlp_mixer", config_cls=MixerConfig, builder=build_mixer,
        description=f"published MLP-Mixer {_name[6:].upper()}: P={_p}, C={_c}, L={_l}, D_S={_ds}, D_C={_dc}, 224x224",
        image_size=224, in_chans=3, num_classes=1000, patch_size=_p, hidden_dim=_c, depth=_l,
        token_hidden=_ds, channel_hidden=_dc, block="mlp",
    )

register_model(
    "mlp_mixer", family="mlp_mixer", config_cls=MixerConfig, builder=build_mixer,
    description="custom MLP-Mixer (S, C, γ or D_S/D_C, L); 32x32x3, patch 4 by default",
    block="mlp", hidden_dim=64, expansion=2.0, depth=3,
)
register_model(
    "s_mixer", family="mlp_mixer", config_cls=MixerConfig, builder=build_mixer,
    description="S-Mixer: single-layer token and channel mixing (the idealised Mixer)",
    block="s", hidden_dim=64, depth=8,
)
register_model(
    "rp_mlp_mixer", family="mlp_mixer", config_cls=MixerConfig, builder=build_mixer,
    description="random-permuted MLP-Mixer (rp_blocks chooses which blocks)",
    block="mlp", hidden_dim=64, expansion=2.0, depth=3, rp_blocks="all",
)
for _variant in ("untied", "grouped", "views"):
    register_model(
        f"mlp_mixer_{_variant}", family="mlp_mixer", config_cls=MixerConfig, builder=build_mixer,
        description=f"MLP-Mixer with {_variant} token mixing (supplement ablation; token_groups = G)",
        block="mlp", hidden_dim=64, expansion=2.0, depth=3, token_mixing=_variant,
        token_groups=1 if _variant == "untied" else 4,
    )
register_model(
    "rp_s_mixer", family="mlp_mixer", config_cls=MixerConfig, builder=build_mixer,
    description="random-permuted S-Mixer (rp_blocks chooses which blocks)",
    block="s", hidden_dim=64, depth=8, rp_blocks="all",
)
