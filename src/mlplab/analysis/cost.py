"""Size and cost of models: parameters, forward FLOPs, summaries of registered models.

Parameters, FLOPs and activations of a built model are counted by :mod:`mlplab.models.counting`
(the one counter: :func:`count_flops` analytic, :func:`measured_flops` its check with
``FlopCounterMode``, :func:`count_activations` the elements a forward pass writes);
they are re-exported here, where the tables and summaries of registered models are built.

:func:`model_summary` and :func:`models_table` build models with initialisation skipped
(``skip_init``) and count Mixers from their config (:func:`mixer_counts`, checked against built
models in the tests), so listing every registered model takes seconds, not minutes.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch.nn as nn

from ..models.counting import (
    count_activations,
    count_flops,
    count_params,
    measured_flops,
    model_input_shape,
    state_bytes,
)
from ..models.mixer import Mixer, MixerConfig
from ..models.mixer_variants import token_mlp_shape
from ..models.registry import create_model, get_model_entry, list_models, model_config
from ..models.sw_mlp import DEFAULT_SW_WIDTH, SWMLPConfig, sw_width

__all__ = [
    "count_params", "count_flops", "measured_flops", "count_activations", "state_bytes", "skip_init",
    "mixer_counts", "sw_mlp_counts", "config_flops", "config_activations", "model_summary", "models_table",
]


_INIT_FUNCS = ("uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
               "kaiming_normal_", "zeros_", "ones_", "constant_", "orthogonal_")


@contextlib.contextmanager
def skip_init() -> Iterator[None]:
    """Make ``torch.nn.init`` functions no-ops while building: weights stay uninitialised
    (``torch.empty``), which is all that counting needs. Not thread-safe (patches the module)."""
    saved = {name: getattr(nn.init, name) for name in _INIT_FUNCS if hasattr(nn.init, name)}

    def noop(tensor, *args, **kwargs):
        return tensor

    try:
        for name in saved:
            setattr(nn.init, name, noop)
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def _effective_width(model: nn.Module) -> int | None:
    if isinstance(model, Mixer):
        return int(model.num_tokens * model.hidden_dim)  # m = S·C
    w = getattr(model, "effective_width", None)
    return int(w) if w is not None else None


def mixer_counts(cfg: MixerConfig) -> dict[str, int]:
    """Params, matmul FLOPs per example, activation elements per example, buffer entries and
    effective width of a Mixer, from its config alone (no build). Building a big Mixer costs tens
    of seconds (its PK layers sort and check permutations of m = S·C entries), so tables use this;
    ``tests/analysis/test_cost.py`` checks it against :func:`count_params` / :func:`count_flops` /
    :func:`count_activations` of built Mixers.

    Activations (the leaf-module outputs of :func:`count_activations`): the stem's S0·C; per block
    with S_in input tokens, LN S_in·C, the token map's Linear outputs and their φ (C·D_S·2 + C·S
    for an MLP block, C·S·2 for an S block), the skip layer's S·C, LN S·C and the channel map
    (S·D_C·2 + S·C, or S·C·2); then LN S·C and the K logits. LN and φ write nothing when they are
    identities (``norm=False``, ``act="identity"``); RP blocks write the same (their gathers are
    outside modules)."""
    s0 = (cfg.image_size // cfg.patch_size) ** 2
    S = cfg.num_tokens if cfg.num_tokens is not None else s0
    C, K = cfg.hidden_dim, cfg.num_classes
    c0 = cfg.in_chans * cfg.patch_size ** 2
    skip_layer = (cfg.skip_layer if cfg.skip_layer is not None else S != s0) and cfg.skip
    rp = set(range(cfg.depth)) if cfg.rp_blocks == "all" else set() if cfg.rp_blocks == "none" else set(cfg.rp_blocks)
    params = c0 * C + C + C * K + K + (2 * C if cfg.norm else 0)
    flops = 2 * s0 * c0 * C + 2 * C * K
    ln, phi = int(cfg.norm), int(cfg.act != "identity")  # identities write nothing
    acts = s0 * C + ln * S * C + K
    buffers = 0
    for i in range(cfg.depth):
        s_in = s0 if i == 0 else S
        params += 4 * C if cfg.norm else 0
        acts += ln * (s_in + S) * C
        if cfg.block == "mlp":
            # M token MLPs n_in -> D_S -> n_out on V vectors each (M = V = ... as token_mixing says)
            M, V, n_in, d_s, n_out = token_mlp_shape(cfg.token_mixing, cfg.token_groups, s_in, S, C,
                                                     cfg.token_hidden, cfg.expansion)
            d_c = cfg.channel_hidden if cfg.channel_hidden is not None else int(round(cfg.expansion * C))
            params += M * (n_in * d_s + d_s + d_s * n_out + n_out) + 2 * C * d_c + d_c + C
            flops += 2 * M * V * (n_in * d_s + d_s * n_out) + 2 * S * (2 * C * d_c)
            acts += (1 + phi) * (M * V * d_s + S * d_c) + 2 * S * C
        else:
            params += s_in * S + S + C * C + C
            flops += 2 * C * s_in * S + 2 * S * C * C
            acts += 2 * (1 + phi) * S * C
        if skip_layer and i == 0:
            params += s_in * S
            flops += 2 * C * s_in * S
            acts += S * C
        if i in rp:  # an RP block stores J1, J2 of its token and channel PK layers
            buffers += s_in * C + 3 * S * C
    return {"params": params, "flops": flops, "activations": acts, "buffer_entries": buffers, "effective_width": S * C}


def sw_mlp_counts(cfg: SWMLPConfig) -> dict[str, int]:
    """Params (masked weights counted dense, as :func:`count_params` does), matmul FLOPs and
    activation elements (:func:`count_activations`: stem m; per block LN m, each masked layer's
    output and φ of the first; LN m and the K logits) per example of a ``storage="masked"``
    SW-MLP from its config alone. Building a wide SW-MLP draws
    its masks (seconds at m ≈ 3000), so cost estimates use this; ``tests/analysis/test_cost.py``
    checks it against built models. Sparse storage costs 2·nnz per layer, known only once the
    masks are drawn: build it and use :func:`count_flops`."""
    if cfg.storage != "masked":
        raise ValueError("sw_mlp_counts counts masked SW-MLPs only; build a sparse one and use count_flops")
    s0 = (cfg.image_size // cfg.patch_size) ** 2
    m = cfg.width if cfg.width is not None else (sw_width(cfg.omega, cfg.density, cfg.expansion)
                                                 if cfg.omega is not None else DEFAULT_SW_WIDTH)
    K, b, n = cfg.num_classes, int(cfg.bias), 2 * int(cfg.norm)
    if cfg.stem == "patch" or (cfg.stem == "auto" and m % s0 == 0):  # per-patch FC C0 -> m/S0, on S0 patches
        c0 = cfg.in_chans * cfg.patch_size ** 2
        params, flops, acts = c0 * (m // s0) + m // s0, 2 * s0 * c0 * (m // s0), s0 * (m // s0)
    else:  # dense embedding of the flattened image
        d = cfg.in_chans * cfg.image_size ** 2
        params, flops, acts = d * m + m, 2 * d * m, m
    if cfg.block == "fc":  # (in, out) of each masked layer of a block
        layers = [(m, m)]
    else:  # the mlp block: m -> round(γ m) -> m
        h = int(round(cfg.expansion * m))
        layers = [(m, h), (h, m)]
    ln, phi = int(cfg.norm), int(cfg.act != "identity")
    for _ in range(cfg.depth):
        params += n * m + sum(i * o + b * o for i, o in layers)
        flops += sum(2 * i * o for i, o in layers)
        acts += ln * m + sum(o for _, o in layers) + phi * layers[0][1]
    params += n * m + m * K + K
    flops += 2 * m * K
    acts += ln * m + K
    return {"params": params, "flops": flops, "activations": acts, "effective_width": m}


def _config_count(key: str, walk, name: str, overrides: dict[str, Any]) -> int:
    """``key`` ("flops" or "activations") of registered model ``name``: Mixers
    (:func:`mixer_counts`) and masked SW-MLPs (:func:`sw_mlp_counts`) from the config alone, any
    other model built with initialisation skipped and counted by ``walk``."""
    cfg = model_config(name, **overrides)
    if isinstance(cfg, MixerConfig):
        return mixer_counts(cfg)[key]
    if isinstance(cfg, SWMLPConfig) and cfg.storage == "masked":
        return sw_mlp_counts(cfg)[key]
    with skip_init():
        return walk(create_model(name, **overrides))


def config_flops(name: str, **overrides: Any) -> int:
    """Forward matmul FLOPs per example of registered model ``name`` with ``overrides`` (others
    than Mixers and masked SW-MLPs walked by :func:`count_flops`)."""
    return _config_count("flops", count_flops, name, overrides)


def config_activations(name: str, **overrides: Any) -> int:
    """Activation elements written per example by the forward pass of registered model ``name``
    with ``overrides`` (others than Mixers and masked SW-MLPs run on one example by
    :func:`count_activations`)."""
    return _config_count("activations", count_activations, name, overrides)


def model_summary(name: str, build: bool = False, **overrides: Any) -> dict[str, Any]:
    """Parameters, FLOPs and shape facts of a registered model.

    Keys: name, family, description, params, effective_params (masked weights counted by their
    nonzeros), flops (forward matmul FLOPs per example), input_shape, effective_width (Mixer S·C,
    SW-MLP/MLP m, shallow hidden width), state_bytes (float32 parameters + buffers), overrides.
    Mixers are counted from their config (:func:`mixer_counts`) unless ``build=True``; other
    models are built without initialisation (:func:`skip_init`) and walked."""
    entry = get_model_entry(name)
    cfg = model_config(name, **overrides)
    row: dict[str, Any] = {"name": name, "family": entry.family, "description": entry.description}
    if isinstance(cfg, MixerConfig) and not build:
        c = mixer_counts(cfg)
        row.update(params=c["params"], effective_params=c["params"], flops=c["flops"],
                   input_shape=[cfg.in_chans, cfg.image_size, cfg.image_size], effective_width=c["effective_width"],
                   state_bytes=4 * c["params"] + 8 * c["buffer_entries"])
    else:
        with skip_init():
            model = create_model(name, **overrides)
        shape = model_input_shape(model)
        row.update(params=count_params(model), effective_params=count_params(model, effective=True),
                   flops=count_flops(model), input_shape=list(shape) if shape is not None else None,
                   effective_width=_effective_width(model), state_bytes=state_bytes(model))
    row["overrides"] = dict(overrides)
    return row


def models_table(family: str | None = None) -> list[dict[str, Any]]:
    """:func:`model_summary` of every registered model at its defaults (sorted by name)."""
    return [model_summary(n) for n in list_models(family=family)]
