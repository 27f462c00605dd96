"""The token-mixing variants of the MLP-Mixer supplement (Tolstikhin et al. 2021, App. E), chosen
by ``MixerConfig.token_mixing`` with ``token_groups`` = G:

- ``"shared"`` (the Mixer): one token MLP S_in -> D_S -> S, shared by all C channels.
- ``"untied"``: every channel c has its own token MLP (C times the token-mixing parameters).
- ``"views"`` (G learned views): the channels are split into G contiguous groups of C/G and
  group g is mixed by its own token MLP g; G = C is ``"untied"``, G = 1 is ``"shared"``.
- ``"grouped"`` (grouping channels together): G neighbouring channels are folded into the token
  axis, so one shared token MLP acts on S_in·G "tokens" for each of the C/G channel groups,
  S_in·G -> D -> S·G, with D = token_hidden when set, else round(γ·S·G).

Each module maps tokens (B, S_in, C) -> (B, S, C); the untied and view MLPs are batched
einsums over the groups (:class:`GroupLinear`), not a Python loop.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..layers.common import Mlp, make_act

__all__ = ["TOKEN_MIXINGS", "GroupLinear", "TokenMlpBank", "GroupedTokenMlp", "token_mlp_shape", "check_token_groups"]

TOKEN_MIXINGS = ("shared", "untied", "grouped", "views")


def check_token_groups(token_mixing: str, groups: int, channels: int) -> None:
    """Refuse a variant or a group count G that the channel count C cannot take."""
    if token_mixing not in TOKEN_MIXINGS:
        raise ValueError(f"token_mixing must be one of {', '.join(TOKEN_MIXINGS)}, got {token_mixing!r}")
    if groups < 1 or channels % groups:
        raise ValueError(f"token_groups={groups} must divide hidden_dim (C) = {channels}; "
                         f"choose a divisor of {channels}")


def token_mlp_shape(token_mixing: str, groups: int, tokens_in: int, tokens: int, channels: int,
                    token_hidden: int | None, expansion: float) -> tuple[int, int, int, int, int]:
    """(M, V, n_in, D, n_out): a block's token mixing is M separate MLPs n_in -> D -> n_out, each
    applied to V vectors per example (M·V·n_out = S·C outputs). D = token_hidden when set, else
    round(γ·S), or round(γ·S·G) for "grouped" (whose MLP outputs S·G entries)."""
    G, C = groups, channels
    if token_mixing == "grouped":
        d = token_hidden if token_hidden is not None else int(round(expansion * tokens * G))
        return 1, C // G, tokens_in * G, d, tokens * G
    d = token_hidden if token_hidden is not None else int(round(expansion * tokens))
    m = {"shared": 1, "untied": C, "views": G}[token_mixing]
    return m, C // m, tokens_in, d, tokens


class GroupLinear(nn.Module):
    """G independent linear maps, y_g = W_g x + b_g, on grouped vectors (B, G, K, in) -> (B, G, K, out):
    weight (G, out, in) and bias (G, out), each group initialised as the Mixer initialises a
    Linear (Xavier uniform, zero bias)."""

    def __init__(self, groups: int, in_features: int, out_features: int):
        super().__init__()
        self.groups, self.in_features, self.out_features = groups, in_features, out_features
        self.weight = nn.Parameter(torch.empty(groups, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(groups, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = math.sqrt(6.0 / (self.in_features + self.out_features))
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bgki,goi->bgko", x, self.weight) + self.bias[:, None, :]


class TokenMlpBank(nn.Module):
    """G token MLPs, fc2_g(drop(φ(fc1_g(x)))), MLP g mixing the tokens of the g-th group of C/G
    contiguous channels (channel c = g·C/G + k): (B, S_in, C) -> (B, S, C). G = C is the untied
    Mixer; with every MLP g equal to one MLP it is the shared Mixer."""

    def __init__(self, groups: int, tokens_in: int, hidden: int, tokens: int, act: str = "gelu", drop: float = 0.0):
        super().__init__()
        self.groups = groups
        self.fc1 = GroupLinear(groups, tokens_in, hidden)
        self.act = make_act(act)
        self.drop1 = nn.Dropout(drop) if drop > 0 else nn.Identity()
        self.fc2 = GroupLinear(groups, hidden, tokens)
        self.drop2 = nn.Dropout(drop) if drop > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S_in, C = x.shape
        cols = x.reshape(B, S_in, self.groups, C // self.groups).permute(0, 2, 3, 1)  # (B, G, C/G, S_in)
        y = self.drop2(self.fc2(self.drop1(self.act(self.fc1(cols)))))  # (B, G, C/G, S)
        return y.permute(0, 3, 1, 2).reshape(B, -1, C)


class GroupedTokenMlp(nn.Module):
    """One token MLP on S_in·G tokens and C/G channels: the G neighbouring channels
    (g·G .. g·G + G-1) of each channel group are folded into the token axis,
    (B, S_in, C) -> (B, C/G, S_in·G) -> ``fn`` -> (B, C/G, S·G) -> (B, S, C). Folded token index
    s·G + j is token s of channel g·G + j. ``fn`` is an :class:`~mlplab.layers.common.Mlp`, named
    as in the shared Mixer's token mixing (``token_mixing.fn.fc1`` ...)."""

    def __init__(self, groups: int, tokens_in: int, hidden: int, tokens: int, act: str = "gelu", drop: float = 0.0):
        super().__init__()
        self.groups = groups
        self.fn = Mlp(tokens_in * groups, hidden, tokens * groups, act, drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S_in, C = x.shape
        G = self.groups
        folded = x.reshape(B, S_in, C // G, G).permute(0, 2, 1, 3).reshape(B, C // G, S_in * G)
        y = self.fn(folded)  # (B, C/G, S·G)
        return y.reshape(B, C // G, -1, G).permute(0, 2, 1, 3).reshape(B, -1, C)
