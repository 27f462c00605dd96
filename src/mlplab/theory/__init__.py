"""Theory: the connection budget Ω and the effective wide-MLP form of Mixers.

Depends only on ``mlplab.layers`` and ``mlplab.models`` (docs/science.md §1-§3, Prop. 3.2, Def. 5.1, Cor. 3.4).
"""
from .budget import (
    BudgetPlan,
    PlanRow,
    channels_for,
    gamma_for_width,
    gamma_max,
    max_width,
    omega_mixer,
    omega_sw_mlp,
    optimal_size,
    parse_omega,
    plan_budget,
    sw_mlp_density,
    sw_mlp_width,
    tokens_for,
    width_bounds,
)
from .effective import EffectiveMLP, effective_mlp, pk_matrix, sparse_kron_identity, sparse_perm_matrix

__all__ = [
    "BudgetPlan", "PlanRow", "plan_budget", "parse_omega", "omega_mixer", "omega_sw_mlp", "tokens_for",
    "channels_for", "optimal_size", "max_width", "width_bounds", "sw_mlp_width", "sw_mlp_density",
    "gamma_for_width", "gamma_max", "EffectiveMLP", "effective_mlp", "pk_matrix", "sparse_kron_identity",
    "sparse_perm_matrix",
]
