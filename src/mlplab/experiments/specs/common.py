"""Shared pieces of the experiment specs: model overrides (one table per family), the derived
keys every training sweep uses, the budget planner, and the small statistics the verdicts use."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..aggregate import RunRecord, group_runs, loss_change, select, test_error
from ..derived import Derive, derive, derived_key
from ..recipes import Scale
from ..sweep import Sweep, expand

__all__ = ["mixer", "sw_mlp", "model_seed", "trained", "pairs_for", "sw_widths", "err_rows", "FAMILY_LABEL",
           "log2", "fair_width", "connections", "loss_change", "TRAIN_METRICS", "TRAIN_COLUMNS",
           "seed_table", "per_seed", "run_folders"]

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
    """Overrides of a static sparse-weight MLP of width m and density p (docs/science.md §2): single-layer
    blocks x + φ((M ⊙ A) LN(x)) for γ = 1 (the S-Mixer's counterpart), MLP blocks with hidden
    width γm otherwise (the MLP-Mixer's). ``depth`` counts blocks; the specs use 2L blocks for a
    Mixer of L blocks, one per token- and channel-mixing layer of its effective wide MLP."""
    o = {"model.name": "sw_mlp", "model.kwargs.width": int(width), "model.kwargs.density": float(density),
         "model.kwargs.depth": int(depth), "model.kwargs.patch_size": int(patch)}
    if gamma != 1.0:
        o.update({"model.kwargs.block": "mlp", "model.kwargs.expansion": float(gamma)})
    return o


@derived_key("model_seed")
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


def trained(sc: Scale) -> list[Derive]:
    """The derived keys that end every training sweep: the model's seed, then the family's lr at
    cpu scale (:func:`mlplab.experiments.recipes.family_lr`)."""
    return [derive("model_seed"), derive("family_lr", scale=sc.name)]


def pairs_for(omega: float, gamma: float = 1.0, channels: Sequence[int] | None = None,
              tokens: Sequence[int] | None = None, symmetric: bool = True,
              family: str | None = None) -> list[tuple[int, int]]:
    """(C, S) pairs with Ω connections per layer, from the budget planner (docs/science.md §3)."""
    from ...theory.budget import plan_budget

    fam = family or ("s_mixer" if gamma == 1.0 else "mlp_mixer")
    plan = plan_budget(omega, gamma, fam, channels=channels, tokens=tokens, symmetric=symmetric)
    return plan.pairs()


def sw_widths(omega: float, densities: Sequence[float], gamma: float = 1.0) -> list[tuple[int, float]]:
    """(m, p) of SW-MLPs with Ω connections: m = round(sqrt(Ω/(γp)))."""
    from ...theory.budget import round_half_up, sw_mlp_width

    return [(round_half_up(sw_mlp_width(omega, p, gamma)), float(p)) for p in densities]


def err_rows(runs: Sequence[RunRecord], sweep: str | None, by: dict[str, Callable[[RunRecord], Any]],
             metrics: dict[str, Callable[[RunRecord], float]] | None = None) -> list[dict[str, Any]]:
    """Mean ± std over seeds of the test error (and ``metrics``) of finished runs, grouped ``by``."""
    return group_runs(select(runs, sweep), by, metrics or {"test_error": test_error})


def log2(x: float) -> str:
    if x > 0 and float(x).is_integer() and (int(x) & (int(x) - 1)) == 0:
        return f"2^{int(x).bit_length() - 1}"
    return f"{x:g}"


def fair_width(m: float, s0: int) -> int:
    """The SW-MLP width nearest ``m`` that is a multiple of the S0 patches (at least S0).

    An SW-MLP of such a width gets the same stem as the Mixer it is compared with — the per-patch
    FC (C0 → m/S0 channels), then the sparse layers on vec(X) — instead of a dense embedding of
    the whole image whose ch·H·W·m weights lie outside Ω (docs/science.md §2, issue 8)."""
    return max(int(s0), int(round(m / s0)) * int(s0))


def connections(r: RunRecord) -> float:
    """Mean connections per mixing layer as built (docs/science.md §3): a Mixer's (C·S·D_S + S·C·D_C)/2 with
    its built hidden widths D_S = round(γS), D_C = round(γC) (= γ(C·S² + C²·S)/2 when γS and γC
    are whole), from ``meta.S``, ``meta.C``; an SW-MLP's p·γ·m² from ``meta.m``, ``meta.p``."""
    from ...theory.budget import omega_sw_mlp

    gamma = float(r.get("model.kwargs.expansion") or 1.0)
    if r.get("model.name") == "sw_mlp":
        m, p = r.get("meta.m") or r.get("model.kwargs.width"), r.get("meta.p") or r.get("model.kwargs.density")
        return omega_sw_mlp(m, p, gamma) if m and p else float("nan")
    S, C = r.get("meta.S") or r.get("model.kwargs.num_tokens"), r.get("meta.C") or r.get("model.kwargs.hidden_dim")
    if not (S and C):
        return float("nan")
    d_s = r.get("model.kwargs.token_hidden") or int(round(gamma * S))
    d_c = r.get("model.kwargs.channel_hidden") or int(round(gamma * C))
    return (C * S * d_s + S * C * d_c) / 2


def train_error(r: RunRecord) -> float:
    acc = (r.results or {}).get("train_acc")
    return 100.0 * (1.0 - float(acc)) if acc is not None else float("nan")


# Columns every training table carries: test error, and what makes comparisons fair and shows
# convergence — parameters (masked SW-MLP weights by their nonzeros, ``effective_params``; runs
# written by older versions have only the dense count), connections per mixing layer, training
# error, last-epochs loss change.
TRAIN_METRICS: dict[str, Callable[[RunRecord], float]] = {
    "test_error": test_error, "train_error": train_error, "loss_change": loss_change,
    "params": lambda r: float((r.results or {}).get("effective_params", (r.results or {}).get("params", float("nan")))),
    "connections": connections}
TRAIN_COLUMNS = ["test_error", "test_error_std", "train_error", "loss_change", "params", "connections", "n"]


def seed_table(runs: Sequence[RunRecord], point: Callable[[RunRecord], Any],
               metric: Callable[[RunRecord], float] = test_error) -> dict[Any, dict[int, float]]:
    """point → {seed → metric} over finished runs (the per-seed numbers the verdicts test)."""
    out: dict[Any, dict[int, float]] = {}
    for r in runs:
        if r.results is None:
            continue
        out.setdefault(point(r), {})[int(r.get("run.seed", 0))] = float(metric(r))
    return out


def per_seed(table: dict[Any, dict[int, float]], points: Sequence[Any]) -> dict[int, list[float]]:
    """{seed → [value at each point, NaN where missing]} for the seeds present anywhere."""
    seeds = sorted({s for p in points for s in table.get(p, {})})
    return {s: [table.get(p, {}).get(s, float("nan")) for p in points] for s in seeds}


def run_folders(train: Sweep) -> dict[tuple, str]:
    """(``meta.key``, ``run.seed``) → the folder (relative to the experiment folder) of each run of
    ``train``: where a later stage's task finds the run it analyses."""
    out = {}
    for s in expand(train):
        out[(s.overrides.get("meta.key"), s.overrides.get("run.seed"))] = f"{s.sweep}/{s.name}"
    return out
