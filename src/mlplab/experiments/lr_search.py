"""The held-out lr search behind the cpu scale's per-family lr (``recipes.cpu_lr``): one
representative model per family, AdamW on 90% of the Fashion-MNIST training set, validation error
on the other 10% (the test set untouched), at every lr of the grid in ``data/lr_search.json``.

    python -m mlplab.experiments.lr_search [KEY ...]   # ≈ 5 min on 2 cores with bf16; prints val errors

Its printed errors are what ``data/lr_search.json`` records under ``val_error``.
"""
from __future__ import annotations

from typing import Any

from .aggregate import load_runs
from .derived import derive
from .executors import run_sweep
from .recipes import CPU_BATCH, lr_search_table
from .sweep import Sweep, product

__all__ = ["lr_search"]


def lr_search(families: list[str] | None = None, out_dir: str = "runs/lr_search",
              jobs: int = 1) -> list[dict[str, Any]]:
    """Rerun the lr search of ``recipes.lr_search_table()`` for ``families`` (its ``models`` keys;
    all by default): one row per (key, lr) with the validation error (%) and the final training loss."""
    table = lr_search_table()
    fams = families or list(table["models"])
    unknown = sorted(set(fams) - set(table["models"]))
    if unknown:
        raise ValueError(f"no lr-search model for {unknown}; choose from {sorted(table['models'])}")
    base = {"data.dataset": "fashion_mnist", "data.val_fraction": table["val_fraction"], "optim.name": "adamw",
            "optim.weight_decay": 0.05, "run.batch_size": CPU_BATCH, "schedule.schedule": "cosine",
            "schedule.epochs": table["epochs"], "schedule.warmup_epochs": 0.5, "augment.crop_padding": 1,
            "run.eval_every": 0, "run.checkpoint_every": 0, "run.log": "lines", "run.tensorboard": False}
    sweep = Sweep("lr", base, [product(("meta.family", fams), ("optim.lr", table["grid"]))],
                  derived=[derive("lookup", key="meta.family", table=table["models"])],
                  name_keys=["meta.family", "optim.lr"])
    run_sweep(sweep, out_dir, jobs=jobs, executor="inline" if jobs == 1 else "local")
    rows = []
    for r in load_runs(out_dir):
        res = r.results or {}
        rows.append({"family": r.get("meta.family"), "lr": r.get("optim.lr"),
                     "val_error": 100 * (1 - res.get("val_acc", float("nan"))), "train_loss": res.get("train_loss")})
    return sorted(rows, key=lambda r: (r["family"], r["lr"]))


if __name__ == "__main__":
    import sys

    for row in lr_search(sys.argv[1:] or None, jobs=2):
        if row["train_loss"] is None:  # the run failed (diverged): its folder's error.txt says why
            print(f"{row['family']:10s} lr {row['lr']:g}: failed (see its run folder's error.txt)")
        else:
            print(f"{row['family']:10s} lr {row['lr']:g}: val error {row['val_error']:.2f}%  "
                  f"train loss {row['train_loss']:.4f}")
