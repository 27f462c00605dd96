"""Size and cost of models: parameters, forward FLOPs, summaries of registered models.

FLOPs are counted two ways:

* :func:`count_flops` (the one used everywhere) is **analytic**: it walks the module tree and
  multiplies each matrix product's cost by the number of rows it is applied to, known from the
  structure (a per-patch stem acts on S0 patches, a PK mixing layer on its n1 groups, the
  Mixer's first-block skip layer W̃ on C channels). No forward pass, so it is instant even for
  Mixer-H/14. It counts **matmul FLOPs only** (multiply-add = 2): ``nn.Linear``,
  :class:`MaskedLinear` at its dense cost 2·out·in (that is what runs), :class:`SparseLinear`
  at 2·nnz, :class:`MonarchLinear` 2·(k·q·b + q·l·k), :class:`KroneckerLinear` 2·(d·b·a + d·a·c).
  Bias adds, norms, activations, pooling, the mask product and permutation gathers are left out
  (they are O(m) per example against O(m·n) for the matmuls).
* :func:`measured_flops` runs a real forward pass under ``torch.utils.flop_counter.FlopCounterMode``,
  which counts aten mm/addmm/bmm (bias of addmm not counted) — i.e. the same matmul FLOPs. It does
  not see sparse-dense products (``torch.sparse.mm``), so for ``storage="sparse"`` SW-MLPs it
  reports the dense parts only. Tests require the two to agree within 0.1 % (they agree exactly).

:func:`model_summary` and :func:`models_table` build models with initialisation skipped
(``skip_init``) and count Mixers from their config (:func:`mixer_counts`, checked against built
models in the tests), so listing every registered model takes seconds, not minutes.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn as nn

from ..layers.kronecker import KroneckerLinear
from ..layers.masked import MaskedLinear, SparseLinear
from ..layers.monarch import MonarchLinear
from ..layers.pk import PKMixing
from ..layers.stem import PatchEmbed
from ..models.mixer import Mixer, MixerBlock, MixerConfig
from ..models.registry import create_model, get_model_entry, list_models, model_config
from ..models.sw_mlp import DEFAULT_SW_WIDTH, SWMLPConfig, sw_width

__all__ = [
    "count_params", "count_flops", "flops_per_example", "measured_flops", "state_bytes", "skip_init",
    "mixer_counts", "sw_mlp_counts", "config_flops", "model_summary", "models_table", "format_count",
]


def count_params(model: nn.Module, effective: bool = False, trainable_only: bool = False) -> int:
    """Number of parameter entries. ``effective=True`` counts a :class:`MaskedLinear` weight by its
    mask's nonzeros (what a sparse storage would hold) instead of out·in."""
    total = 0
    masked = {id(m.weight): m.nnz for m in model.modules() if isinstance(m, MaskedLinear)} if effective else {}
    for p in model.parameters():
        if trainable_only and not p.requires_grad:
            continue
        total += masked.get(id(p), p.numel())
    return total


def state_bytes(model: nn.Module) -> int:
    """Bytes held by parameters and buffers (persistent or not): the model's storage."""
    seen: set[int] = set()
    total = 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def _walk(module: nn.Module, rows: int) -> int:
    """Matmul FLOPs of ``module`` applied to ``rows`` vectors per example."""
    if isinstance(module, (nn.Linear, MaskedLinear)):
        return 2 * module.in_features * module.out_features * rows
    if isinstance(module, SparseLinear):
        return 2 * module.nnz * rows
    if isinstance(module, (MonarchLinear, KroneckerLinear)):
        return module.flops_per_example() * rows
    if isinstance(module, PatchEmbed):
        return _walk(module.proj, rows * module.num_patches)  # one product per patch
    if isinstance(module, PKMixing):
        return _walk(module.inner, rows * module.n1)  # the group map acts on n1 groups
    if isinstance(module, MixerBlock):
        # the skip layer W̃ ∈ R^{S×S0} acts on each of the C channel columns
        return sum(_walk(child, rows * module.dim if name == "skip_proj" else rows)
                   for name, child in module.named_children())
    children = list(module.children())
    if not children and any(p.ndim >= 2 for p in module.parameters(recurse=False)):
        raise NotImplementedError(
            f"count_flops does not know how to count {type(module).__name__}; add a rule to mlplab.analysis.cost"
        )
    return sum(_walk(c, rows) for c in children)


def _check_input_shape(model: nn.Module, input_shape: tuple[int, ...] | None) -> tuple[int, int, int] | None:
    cfg = getattr(model, "config", None) or getattr(model, "cfg", None)
    expected = None
    if cfg is not None and hasattr(cfg, "image_size") and hasattr(cfg, "in_chans"):
        expected = (cfg.in_chans, cfg.image_size, cfg.image_size)
    if input_shape is None:
        return expected
    shape = tuple(int(s) for s in input_shape)
    if len(shape) == 4:
        shape = shape[1:]  # (N, ch, H, W): per example
    if len(shape) != 3:
        raise ValueError(f"input_shape must be (ch, H, W) or (N, ch, H, W), got {input_shape}")
    if expected is not None and shape != expected:
        raise ValueError(f"model expects inputs of shape {expected} (in_chans, image_size, image_size), got {shape}")
    return shape  # type: ignore[return-value]


def count_flops(model: nn.Module, input_shape: tuple[int, ...] | None = None) -> int:
    """Analytic forward matmul FLOPs per example (multiply-add = 2); see the module docstring.

    ``input_shape`` is (ch, H, W) or (N, ch, H, W); it is checked against the model's config
    (the models' shapes are fixed by their configs), and may be omitted."""
    _check_input_shape(model, input_shape)
    return int(_walk(model, 1))


flops_per_example = count_flops


def measured_flops(model: nn.Module, input_shape: tuple[int, ...] | None = None, batch: int = 2) -> int:
    """FLOPs per example counted by ``FlopCounterMode`` on a real forward pass (the check on
    :func:`count_flops`; slow for big models, and imports torch's dynamo machinery)."""
    from torch.utils.flop_counter import FlopCounterMode

    shape = _check_input_shape(model, input_shape)
    if shape is None:
        raise ValueError("input_shape is needed for a model without image_size/in_chans in its config")
    p = next(model.parameters())
    x = torch.zeros(batch, *shape, dtype=p.dtype, device=p.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            model(x)
    finally:
        model.train(was_training)
    return int(fc.get_total_flops()) // batch


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
    """Params, matmul FLOPs per example, buffer entries and effective width of a Mixer, from its
    config alone (no build). Building a big Mixer costs tens of seconds (its PK layers sort and
    check permutations of m = S·C entries), so tables use this; ``tests/analysis/test_cost.py``
    checks it against :func:`count_params` / :func:`count_flops` of built Mixers."""
    s0 = (cfg.image_size // cfg.patch_size) ** 2
    S = cfg.num_tokens if cfg.num_tokens is not None else s0
    C, K = cfg.hidden_dim, cfg.num_classes
    c0 = cfg.in_chans * cfg.patch_size ** 2
    skip_layer = (cfg.skip_layer if cfg.skip_layer is not None else S != s0) and cfg.skip
    rp = set(range(cfg.depth)) if cfg.rp_blocks == "all" else set() if cfg.rp_blocks == "none" else set(cfg.rp_blocks)
    params = c0 * C + C + C * K + K + (2 * C if cfg.norm else 0)
    flops = 2 * s0 * c0 * C + 2 * C * K
    buffers = 0
    for i in range(cfg.depth):
        s_in = s0 if i == 0 else S
        params += 4 * C if cfg.norm else 0
        if cfg.block == "mlp":
            d_s = cfg.token_hidden if cfg.token_hidden is not None else int(round(cfg.expansion * S))
            d_c = cfg.channel_hidden if cfg.channel_hidden is not None else int(round(cfg.expansion * C))
            params += s_in * d_s + d_s + d_s * S + S + 2 * C * d_c + d_c + C
            flops += 2 * C * (s_in * d_s + d_s * S) + 2 * S * (2 * C * d_c)
        else:
            params += s_in * S + S + C * C + C
            flops += 2 * C * s_in * S + 2 * S * C * C
        if skip_layer and i == 0:
            params += s_in * S
            flops += 2 * C * s_in * S
        if i in rp:  # an RP block stores J1, J2 of its token and channel PK layers
            buffers += s_in * C + 3 * S * C
    return {"params": params, "flops": flops, "buffer_entries": buffers, "effective_width": S * C}


def sw_mlp_counts(cfg: SWMLPConfig) -> dict[str, int]:
    """Params (masked weights counted dense, as :func:`count_params` does) and matmul FLOPs per
    example of a ``storage="masked"`` SW-MLP from its config alone. Building a wide SW-MLP draws
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
        params, flops = c0 * (m // s0) + m // s0, 2 * s0 * c0 * (m // s0)
    else:  # dense embedding of the flattened image
        d = cfg.in_chans * cfg.image_size ** 2
        params, flops = d * m + m, 2 * d * m
    h = m if cfg.block == "fc" else int(round(cfg.expansion * m))
    layers = [(m, m)] if cfg.block == "fc" else [(m, h), (h, m)]  # (in, out) of each masked layer of a block
    for _ in range(cfg.depth):
        params += n * m + sum(i * o + b * o for i, o in layers)
        flops += sum(2 * i * o for i, o in layers)
    params += n * m + m * K + K
    flops += 2 * m * K
    return {"params": params, "flops": flops, "effective_width": m}


def config_flops(name: str, **overrides: Any) -> int:
    """Forward matmul FLOPs per example of registered model ``name`` with ``overrides``: Mixers
    (:func:`mixer_counts`) and masked SW-MLPs (:func:`sw_mlp_counts`) from the config alone, any
    other model built with initialisation skipped and walked (:func:`count_flops`)."""
    cfg = model_config(name, **overrides)
    if isinstance(cfg, MixerConfig):
        return mixer_counts(cfg)["flops"]
    if isinstance(cfg, SWMLPConfig) and cfg.storage == "masked":
        return sw_mlp_counts(cfg)["flops"]
    with skip_init():
        return count_flops(create_model(name, **overrides))


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
        shape = _check_input_shape(model, None)
        row.update(params=count_params(model), effective_params=count_params(model, effective=True),
                   flops=count_flops(model), input_shape=list(shape) if shape is not None else None,
                   effective_width=_effective_width(model), state_bytes=state_bytes(model))
    row["overrides"] = dict(overrides)
    return row


def models_table(family: str | None = None) -> list[dict[str, Any]]:
    """:func:`model_summary` of every registered model at its defaults (sorted by name)."""
    return [model_summary(n) for n in list_models(family)]


def format_count(n: float | None) -> str:
    """1234567 -> '1.23M' (K, M, G, T)."""
    if n is None:
        return "-"
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return str(int(n))
