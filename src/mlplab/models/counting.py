"""Counting a built model: parameters, stored bytes, forward FLOPs and activations per example.

The one counter, used by training (MFU), the cost tables (``mlplab.analysis.cost``) and the
experiments. It needs only the module tree, so it sits with the models, below everything that
uses it.

* :func:`count_flops` is **analytic**: it walks the module tree and multiplies each matrix
  product's cost by the number of rows it is applied to, known from the structure (a per-patch
  stem acts on S0 patches, a PK mixing layer on its n1 groups, the Mixer's first-block skip layer
  W̃ on C channels). No forward pass, so it is instant even for Mixer-H/14. It counts **matmul
  FLOPs only** (multiply-add = 2): ``nn.Linear``, :class:`MaskedLinear` at its dense cost
  2·out·in (that is what runs), :class:`SparseLinear` at 2·nnz, :class:`MonarchLinear`
  2·(k·q·b + q·l·k), :class:`KroneckerLinear` 2·(d·b·a + d·a·c), and any module with a
  ``flops_per_example()`` method at what it states (the convolutions and transformer blocks of
  :mod:`mlplab.models.reference`, which know their output positions). Bias adds, norms, activations,
  pooling, the mask product and permutation gathers are left out (they are O(m) per example
  against O(m·n) for the matmuls).
* :func:`measured_flops` runs a real forward pass under ``torch.utils.flop_counter.FlopCounterMode``,
  which counts aten mm/addmm/bmm (bias of addmm not counted) — i.e. the same matmul FLOPs. It does
  not see sparse-dense products (``torch.sparse.mm``), so for ``storage="sparse"`` SW-MLPs it
  reports the dense parts only. Tests require the two to agree within 0.1 % (they agree exactly).
* :func:`count_activations` counts the **activation elements written** per example by the
  forward pass, A = Σ numel(output) over every leaf-module call of a real forward of one example:
  the memory-bound work (layer norms, activations, bias adds inside the Linears) that dominates
  small Mixers on a CPU, where the time follows A rather than F. The training-cost estimate
  (:mod:`mlplab.experiments.cost`) uses both.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..layers.kronecker import KroneckerLinear
from ..layers.masked import MaskedLinear, SparseLinear
from ..layers.monarch import MonarchLinear
from ..layers.pk import PKMixing
from ..layers.stem import PatchEmbed
from .mixer import MixerBlock
from .mixer_variants import GroupedTokenMlp, GroupLinear, TokenMlpBank

__all__ = ["count_params", "count_flops", "measured_flops", "count_activations", "state_bytes", "model_input_shape"]


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
    if isinstance(module, (MonarchLinear, KroneckerLinear)) or callable(getattr(module, "flops_per_example", None)):
        return module.flops_per_example() * rows  # a layer that states its own (e.g. models.reference's)
    if isinstance(module, PatchEmbed):
        return _walk(module.proj, rows * module.num_patches)  # one product per patch
    if isinstance(module, PKMixing):
        return _walk(module.inner, rows * module.n1)  # the group map acts on n1 groups
    if isinstance(module, GroupLinear):
        return 2 * module.groups * module.in_features * module.out_features * rows  # rows vectors per group
    if isinstance(module, MixerBlock):
        # the skip layer W̃ ∈ R^{S×S0} acts on each of the C channel columns; a token-mixing
        # variant's MLPs (mixer_variants) on C/G vectors per group
        def rows_of(name: str, child: nn.Module) -> int:
            if name == "skip_proj":
                return rows * module.dim
            if isinstance(child, (TokenMlpBank, GroupedTokenMlp)):
                return rows * module.dim // child.groups
            return rows
        return sum(_walk(child, rows_of(name, child)) for name, child in module.named_children())
    children = list(module.children())
    if not children and any(p.ndim >= 2 for p in module.parameters(recurse=False)):
        raise NotImplementedError(
            f"count_flops does not know how to count {type(module).__name__}; add a rule to mlplab.models.counting"
        )
    return sum(_walk(c, rows) for c in children)


def model_input_shape(model: nn.Module, given: tuple[int, ...] | None = None) -> tuple[int, int, int] | None:
    """The per-example input shape (ch, H, W) fixed by the model's config (None when it has no
    ``image_size``/``in_chans``); ``given`` (ch, H, W) or (N, ch, H, W) is checked against it."""
    cfg = getattr(model, "config", None) or getattr(model, "cfg", None)
    expected = None
    if cfg is not None and hasattr(cfg, "image_size") and hasattr(cfg, "in_chans"):
        expected = (cfg.in_chans, cfg.image_size, cfg.image_size)
    if given is None:
        return expected
    shape = tuple(int(s) for s in given)
    if len(shape) == 4:
        shape = shape[1:]  # (N, ch, H, W): per example
    if len(shape) != 3:
        raise ValueError(f"input_shape must be (ch, H, W) or (N, ch, H, W), got {given}")
    if expected is not None and shape != expected:
        raise ValueError(f"model expects inputs of shape {expected} (in_chans, image_size, image_size), got {shape}")
    return shape  # type: ignore[return-value]


def count_flops(model: nn.Module, input_shape: tuple[int, ...] | None = None) -> int:
    """Analytic forward matmul FLOPs per example (multiply-add = 2); see the module docstring.

    ``input_shape`` is (ch, H, W) or (N, ch, H, W); it is checked against the model's config
    (the models' shapes are fixed by their configs), and may be omitted."""
    model_input_shape(model, input_shape)
    return int(_walk(model, 1))


def measured_flops(model: nn.Module, input_shape: tuple[int, ...] | None = None, batch: int = 2) -> int:
    """FLOPs per example counted by ``FlopCounterMode`` on a real forward pass (the check on
    :func:`count_flops`; slow for big models, and imports torch's dynamo machinery)."""
    from torch.utils.flop_counter import FlopCounterMode

    shape = model_input_shape(model, input_shape)
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


def count_activations(model: nn.Module, input_shape: tuple[int, ...] | None = None) -> int:
    """Activation elements written per example by the forward pass: A = Σ numel(output) over every
    call of a leaf module (one without children) in a real forward of one example.

    The forward runs on the model's device (CPU for models built to be counted), in eval mode and
    under ``torch.no_grad``; the hooks it registers make every ``nn.Linear`` a module call (a
    model's "auto" implementation steps aside for hooked modules, ``mlplab.layers.pk.IMPLS``). An
    output that *is* its input (``nn.Identity``, dropout and stochastic depth in eval mode) writes
    nothing and is not counted; neither is elementwise work done outside modules (residual adds,
    transposes, the token mean, permutation gathers). Meta-device
    forwards cannot be used: the Mixer's PK layers call ``aten::equal``. Mixers are counted
    from their config by :func:`mlplab.analysis.cost.mixer_counts` (checked against this)."""
    shape = model_input_shape(model, input_shape)
    if shape is None:
        raise ValueError("input_shape is needed for a model without image_size/in_chans in its config")
    total = 0

    def hook(module: nn.Module, inputs: tuple, output) -> None:
        nonlocal total
        outs = output if isinstance(output, (tuple, list)) else (output,)
        for t in outs:
            if isinstance(t, torch.Tensor) and not any(t is i for i in inputs):
                total += t.numel()

    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    p = next(model.parameters())
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, *shape, dtype=p.dtype, device=p.device))
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return int(total)
