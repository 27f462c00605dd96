"""An exponential moving average of the weights (``run.ema_decay``; Polyak averaging as in timm's
``ModelEmaV2`` and the DeiT / big_vision recipes).

After every optimiser step each floating tensor of the model's state (parameters and floating
buffers) is folded in as θ_ema ← D·θ_ema + (1 − D)·θ, starting from the initial weights. The
average lives in a frozen copy of the model kept in at least float32 (a bf16 model gets an fp32
average, whose small increments (1 − D)·Δθ a bf16 copy would round away), so it is evaluated like
any model and saved as a model file (``checkpoint/ema.safetensors``, readable by
``mlplab.load_pretrained`` and ``mlplab eval``). Integer buffers (RP permutations) are copied, not
averaged; a frozen tensor such as an SW-MLP mask is a fixed point of the update.

The update is one ``torch._foreach_lerp_`` on the device: no host sync, and under DDP every rank
averages its identical replica, so the averages stay identical without communication.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

__all__ = ["WeightEMA"]


def _at_least_fp32(t: torch.Tensor) -> torch.dtype:
    return torch.promote_types(t.dtype, torch.float32)


class WeightEMA:
    """``WeightEMA(model, decay)``; call :meth:`update` after each optimiser step; ``.model`` is
    the averaged model (in eval mode, no gradients)."""

    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must be in (0, 1), got {decay}")
        self.decay = float(decay)
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        for t in list(self.model.parameters()) + list(self.model.buffers()):
            if t.is_floating_point():
                t.data = t.data.to(_at_least_fp32(t))
        src, dst = model.state_dict(keep_vars=True), self.model.state_dict(keep_vars=True)
        pairs = [(dst[k], src[k]) for k in dst if dst[k].is_floating_point()]
        self._avg = [a for a, _ in pairs]
        self._src = [s for _, s in pairs]

    @torch.no_grad()
    def update(self) -> None:
        """θ_ema ← θ_ema + (1 − D)(θ − θ_ema), for every floating tensor at once."""
        src = [s.detach() if s.dtype == a.dtype else s.detach().to(a.dtype) for a, s in zip(self._avg, self._src)]
        torch._foreach_lerp_(self._avg, src, 1.0 - self.decay)
