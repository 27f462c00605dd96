"""How a model computes: the one vocabulary of ``impl`` (docs/kernels.md).

A model has one definition, its module forward; ``impl`` chooses how that function is computed.
Every model offers ``auto`` and ``module``; a Mixer also ``fused`` (its pre-LN seams in one C
kernel each way, :mod:`mlplab.models.mixer_fused`) and ``definition`` (every PK layer by the
two gathers of Def. 5.1). The run config's ``model.impl`` names it, the run plan resolves and
checks it (:func:`mlplab.train.runplan.plan_run`), and ``model.impl = ...`` sets it on a model
(:attr:`mlplab.models.base.VisionMLP.impl`).
"""
from __future__ import annotations

import enum
from typing import NamedTuple

import torch.nn as nn

from ..layers.pk import PKMixing

__all__ = ["Impl", "Fusable", "Implementations", "compute_by_definition"]


class Impl(str, enum.Enum):
    """How a model computes (a ``str``: ``Impl.FUSED == "fused"``)."""

    AUTO = "auto"  # the fastest path the model, device and mode allow
    MODULE = "module"  # the module forward (a Mixer without its fused seams)
    FUSED = "fused"  # a Mixer's fused CPU seams, refused where they cannot run
    DEFINITION = "definition"  # the module forward with every PK layer computed by Def. 5.1's gathers

    @classmethod
    def parse(cls, value: str | Impl) -> Impl:
        """``value`` as an :class:`Impl`, or a ValueError listing the valid names."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"impl must be one of {', '.join(m.value for m in cls)}; got {value!r}") from None

    def __str__(self) -> str:
        return self.value


class Fusable(NamedTuple):
    """Whether a model's forward takes the fused seams, and if not, why (a clause for a sentence)."""

    ok: bool
    reason: str = ""


FUSABLE = Fusable(True)


class Implementations:
    """``model.impl`` of a model (a base of :class:`~mlplab.models.base.VisionMLP`): the
    family's :attr:`IMPLS`, and the one setter that checks a choice against them."""

    #: the implementations the family offers; a Mixer adds ``fused`` and ``definition``
    IMPLS: tuple[Impl, ...] = (Impl.AUTO, Impl.MODULE)
    _impl: Impl = Impl.AUTO

    @property
    def impl(self) -> Impl:
        """How the model computes (:class:`Impl`; docs/kernels.md)."""
        return self._impl

    @impl.setter
    def impl(self, impl: str | Impl) -> None:
        impl = Impl.parse(impl)
        if impl not in self.IMPLS:
            name = getattr(self, "model_name", None) or type(self).__name__
            raise ValueError(f"{name} has no {impl.value!r} implementation; use impl=auto or module")
        self._impl = impl
        self._impl_changed()

    def _impl_changed(self) -> None:
        """A family's reaction to a new ``impl`` (the Mixer sets its PK layers)."""


def compute_by_definition(module: nn.Module) -> nn.Module:
    """Every PK layer of ``module`` computed literally as Def. 5.1 (two gathers around the group
    map), in place: a model takes ``impl = "definition"`` (refused by a family without PK
    layers), any other module sets its PK layers' ``by_definition``. Tests and benchmarks
    compare the fast arrangements against it."""
    if isinstance(module, Implementations):
        module.impl = Impl.DEFINITION
        return module
    for m in module.modules():
        if isinstance(m, PKMixing):
            m.by_definition = True
    return module
