"""The pieces sm-transfer and sm-batch-size (Scaling MLPs Tables 2–3, Fig. 4) share: the data split
of the cpu proxy, the pre-trained runs a later stage points at (:func:`pretrained_rows`), the
probes of frozen features, and the downstream error per seed."""
from __future__ import annotations

from typing import Any

from ..aggregate import RunRecord, test_error
from ..derived import derive
from ..recipes import Scale
from ..sweep import Sweep, expand

__all__ = ["FM_PRE", "FM_DOWN", "IN21K", "pretrained_rows", "run_seed", "downstream_error", "downstream_errors",
           "bottleneck", "probe_sweep", "lion_probe_sweep"]

FM_PRE = {"data.classes": [0, 1, 2, 3, 4]}  # Fashion-MNIST T-shirt, trouser, pullover, dress, coat
FM_DOWN = {"data.classes": [5, 6, 7, 8, 9]}  # sandal, shirt, sneaker, bag, ankle boot
IN21K = {"data.dataset": "packed", "data.image_size": 64}  # ImageNet-21k as an mlplab pack (data.root)


def pretrained_rows(sweep: Sweep, keys: list[str], into: str) -> list[dict[str, Any]]:
    """One row per run of ``sweep``: its values at ``keys`` and, under ``into``, its folder relative
    to the experiment folder — the rows of a ``match`` derived key that points a later stage's run
    at the trained run with the same labels (e.g. ``meta.da``, ``meta.n``, ``run.seed``)."""
    return [{**{k: s.overrides.get(k) for k in keys}, into: f"{s.sweep}/{s.name}"} for s in expand(sweep)]


def run_seed(r: RunRecord) -> int:
    """The seed of a run (``run.seed``, else ``meta.seed``, else 0)."""
    return int(r.get("run.seed", r.get("meta.seed", 0)))


def downstream_error(r: RunRecord) -> float:
    """Downstream test error (%): a ``linear_eval`` run's ridge probe, else the run's test accuracy."""
    probe = (r.results or {}).get("probe")
    if isinstance(probe, dict) and probe.get("acc") is not None:
        return 100.0 * (1.0 - float(probe["acc"]))
    return test_error(r)


def downstream_errors(runs: list[RunRecord], **where: Any) -> dict[int, float]:
    """seed → :func:`downstream_error` of the finished runs whose ``get(k) == v`` for each ``k=v``
    (dots in keys written as ``__``)."""
    out = {}
    for r in runs:
        if r.results is not None and all(r.get(k.replace("__", ".")) == v for k, v in where.items()):
            out[run_seed(r)] = downstream_error(r)
    return out


def bottleneck(width: int, depth: int) -> dict[str, Any]:
    """Overrides of the inverted-bottleneck MLP B-``depth``/Wi-``width``."""
    return {"model.name": "bottleneck_mlp", "model.kwargs.width": int(width), "model.kwargs.depth": int(depth)}


def probe_sweep(sc: Scale, rows: list[dict[str, Any]], downstream: dict[str, Any], keys: list[str],
                description: str) -> Sweep:
    """The closed-form ridge probe (``linear_eval``, ``probe=true``) on the downstream data, one run
    per pre-trained run: the whole downstream training split (the scale's subset at smoke scale),
    whatever subset the run pre-trained on."""
    base = {"probe": True, "data.train_subset": sc.train_subset, **downstream}
    return Sweep("probe", base, [("meta.i", list(range(len(rows))))], seeds=[0], seed_keys=("meta.eval_seed",),
                 derived=[derive("lookup", key="meta.i", table=rows)], name_keys=keys, task="linear_eval", epochs=1,
                 description=description)


def lion_probe_sweep(rows: list[dict[str, Any]], recipe: dict[str, Any], keys: list[str],
                     description: str) -> Sweep:
    """The paper's linear probe: the body frozen, a new head trained with LION (``finetune`` task)."""
    return Sweep("probe", recipe, [("meta.i", list(range(len(rows))))], seeds=[0], seed_keys=("meta.probe_seed",),
                 derived=[derive("lookup", key="meta.i", table=rows)], name_keys=keys, task="finetune",
                 epochs=float(recipe.get("schedule.epochs", 1)), description=description)
