"""Shared pieces of the experiment specs: model overrides (one table per family), the budget
planner, and the small statistics the verdicts use."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ..aggregate import RunRecord, group_runs, select, spearman, test_error

__all__ = ["mixer", "sw_mlp", "model_seed", "pairs_for", "sw_widths", "family_of", "err_rows",
           "FAMILY_LABEL", "log2", "neighbour_rule", "NEIGHBOUR_RULE", "ERR", "fmt_pair"]

ERR = {"test_error": test_error, "train_loss": lambda r: (r.results or {}).get("train_loss", float("nan")),
       "test_loss": lambda r: (r.results or {}).get("test_loss", float("nan"))}

FAMILY_LABEL = {"s_mixer": "S-Mixer", "rp_s_mixer": "RP S-Mixer", "mlp_mixer": "MLP-Mixer",
                "rp_mlp_mixer": "RP MLP-Mixer", "sw_mlp": "SW-MLP", "monarch_mlp": "Monarch MLP",
                "kronecker_mlp": "Kronecker MLP"}


def mixer(S: int | None, C: int, depth: int, patch: int, *, block: str = "s", gamma: float | None = None,
          rp: bool = False, rp_blocks: Any = None) -> dict[str, Any]:
    """Overrides of an (RP) S-Mixer / MLP-Mixer with S tokens and C channels (S None → S0)."""
    name = {"s": "s_mixer", "mlp": "mlp_mixer"}[block]
    o: dict[str, Any] = {"model.name": ("rp_" + name) if rp else name,
                         "model.kwargs.hidden_dim": int(C), "model.kwargs.depth": int(depth),
                         "model.kwargs.patch_size": int(patch)}
    if S is not None:
        o["model.kwargs.num_tokens"] = int(S)
    if gamma is not None and block == "mlp":
        o["model.kwargs.expansion"] = float(gamma)
    if rp_blocks is not None:
        o["model.kwargs.rp_blocks"] = rp_blocks
    return o


def sw_mlp(width: int, density: float, depth: int, patch: int, gamma: float = 1.0) -> dict[str, Any]:
    """Overrides of a static sparse-weight MLP of width m and density p (SPEC §2): single-layer
    blocks x + φ((M ⊙ A) LN(x)) for γ = 1 (the S-Mixer's counterpart), MLP blocks with hidden
    width γm otherwise (the MLP-Mixer's). ``depth`` counts blocks; the specs use 2L blocks for a
    Mixer of L blocks, one per token- and channel-mixing layer of its effective wide MLP."""
    o = {"model.name": "sw_mlp", "model.kwargs.width": int(width), "model.kwargs.density": float(density),
         "model.kwargs.depth": int(depth), "model.kwargs.patch_size": int(patch)}
    if gamma != 1.0:
        o.update({"model.kwargs.block": "mlp", "model.kwargs.expansion": float(gamma)})
    return o


def model_seed(o: dict[str, Any]) -> dict[str, Any]:
    """Derived key: the model's own ``seed`` (RP permutations, SW-MLP masks) follows ``run.seed``
    for models that have one."""
    try:
        import dataclasses

        from ...models.registry import get_model_entry

        fields = {f.name for f in dataclasses.fields(get_model_entry(o["model.name"]).config_cls)}
    except Exception:
        return {}
    return {"model.kwargs.seed": int(o.get("run.seed", 0))} if "seed" in fields else {}


def pairs_for(omega: float, gamma: float = 1.0, channels: Sequence[int] | None = None,
              tokens: Sequence[int] | None = None, symmetric: bool = True,
              family: str | None = None) -> list[tuple[int, int]]:
    """(C, S) pairs with Ω connections per layer, from the budget planner (SPEC §3)."""
    from ...theory.budget import plan_budget

    fam = family or ("s_mixer" if gamma == 1.0 else "mlp_mixer")
    plan = plan_budget(omega, gamma, fam, channels=channels, tokens=tokens, symmetric=symmetric)
    return plan.pairs()


def sw_widths(omega: float, densities: Sequence[float], gamma: float = 1.0) -> list[tuple[int, float]]:
    """(m, p) of SW-MLPs with Ω connections: m = round(sqrt(Ω/(γp)))."""
    from ...theory.budget import round_half_up, sw_mlp_width

    return [(round_half_up(sw_mlp_width(omega, p, gamma)), float(p)) for p in densities]


def family_of(r: RunRecord) -> str:
    name = r.get("model.name", "?")
    rb = r.get("model.kwargs.rp_blocks")
    if name in ("s_mixer", "mlp_mixer") and rb not in (None, "none"):
        return f"{name}[rp={rb}]"
    return name


def err_rows(runs: Sequence[RunRecord], sweep: str | None, by: dict[str, Callable[[RunRecord], Any]],
             metrics: dict[str, Callable[[RunRecord], float]] | None = None) -> list[dict[str, Any]]:
    """Mean ± std over seeds of the test error (and ``metrics``) of finished runs, grouped ``by``."""
    return group_runs(select(runs, sweep), by, metrics or {"test_error": test_error})


def log2(x: float) -> str:
    if x > 0 and float(x).is_integer() and (int(x) & (int(x) - 1)) == 0:
        return f"2^{int(x).bit_length() - 1}"
    return f"{x:g}"


def fmt_pair(S: Any, C: Any) -> str:
    return f"S={S},C={C}"


NEIGHBOUR_RULE = ("HELD if the pair with the lowest mean test error (pairs sorted by C) has |log(S/C)| no larger "
                  "than either neighbouring pair's; if it does not, but the pair closest to S = C is within one "
                  "seed-std of the best (statistically tied), UNDECIDED; otherwise DID NOT HOLD")


def neighbour_rule(rows: list[dict[str, Any]], key: str = "test_error") -> tuple[bool | None, str]:
    """fig6-style rule on rows sorted by C (each with S, C, ``key`` and ``key_std``): the argmin
    pair has |log(S/C)| ≤ that of each neighbour (moving away from S = C never helps), or the
    pair(s) closest to S = C are within max(std of the best, std of that pair) of the best — a tie
    is reported as undecided (None), never as the claim holding."""
    rows = [r for r in rows if r.get(key) is not None and math.isfinite(r[key])]
    if len(rows) < 3:
        return None, f"only {len(rows)} finished pairs"
    rows = sorted(rows, key=lambda r: r["C"])
    i = int(np.argmin([r[key] for r in rows]))
    dist = [abs(math.log(r["S"] / r["C"])) for r in rows]
    nb = [j for j in (i - 1, i + 1) if 0 <= j < len(rows)]
    by_argmin = all(dist[i] <= dist[j] + 1e-12 for j in nb)
    best = rows[i]
    dmin = min(dist)
    closest = min((r for r, d in zip(rows, dist) if d <= dmin + 1e-12), key=lambda r: r[key])
    std = lambda r: r.get(f"{key}_std") or 0.0  # noqa: E731
    tied = closest[key] - best[key] <= max(std(best), std(closest))
    held = True if by_argmin else (None if tied else False)
    return held, (f"best pair S={best['S']}, C={best['C']} ({key} {best[key]:.2f} ± {std(best):.2f}); "
                               f"|log(S/C)| = {dist[i]:.2f} vs neighbours {[round(dist[j], 2) for j in nb]}; "
                               f"pair closest to S = C: S={closest['S']}, C={closest['C']} "
                               f"({closest[key]:.2f} ± {std(closest):.2f}, "
                               f"{'tied with' if tied else 'worse than'} the best)")


def spearman_rule(x: Sequence[float], y: Sequence[float], sign: int) -> tuple[bool | None, float]:
    rho = spearman(x, y)
    if not math.isfinite(rho):
        return None, rho
    return (rho * sign > 0), rho
