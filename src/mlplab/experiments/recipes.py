"""Training recipes and scales: the one place where experiment settings become run-config keys.

An experiment states its settings in the units of the paper (optimiser, lr, batch, epochs,
augmentation); :meth:`Scale.recipe` turns them into dotted overrides of
``mlplab.train.RunConfig``, shrunk for the ``cpu`` and ``smoke`` scales:

- ``paper``: the published setting (docs/science.md §7).
- ``cpu``: the same design (same families, pair structure, comparisons) at small budgets,
  depths and widths, *trained*: the full training set, ``CPU_SEEDS`` seeds, AdamW with a
  per-family learning rate (:func:`cpu_lr`, chosen on a held-out split: ``data/lr_search.json``),
  epochs enough for the training loss to flatten, the fast engine (batch 256, one evaluation at the end, one
  checkpoint at the end); ≤ 30 min per id on 2 cores. Fashion-MNIST (28×28×1) when the published
  dataset is not on the machine.
- ``quick``: the cpu scale, reduced where an experiment says how (fig6: only the S ≈ C twins and
  the two ends; figS6-S8: the cpu runs of 3 of the 5 seeds); otherwise
  the same as ``cpu``. Every id's cpu and quick plans fit 30 minutes by ``cost.estimate_cost``.
- ``smoke``: seconds, for the tests: the synthetic dataset (a few hundred images), one epoch.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Mapping

from ..data.table import DATASETS
from .derived import derived_key
from .protocol import CONFIRM_FIRST, CONFIRM_SEEDS, ROLES

__all__ = ["SCALES", "Scale", "ScaleRules", "SCALE_RULES", "make_scale", "AUGMENT", "dataset_available", "CPU_SEEDS",
           "CPU_BATCH", "DEFAULT_LR", "cpu_lr", "lr_search_table", "family_lr", "preset"]

CPU_SEEDS = 3  # seeds per point at cpu scale: the fewest the verdict rules test (verdicts.MIN_SEEDS);
# experiments with small effects ask for 5 (fig2d, figS5, figS6-S8)
CPU_BATCH = 256  # examples per step at cpu scale (the fast engine: big enough GEMMs, few steps)
DEFAULT_LR = 3e-3  # AdamW peak lr at cpu and smoke scale for a family the lr search has no entry for


@functools.lru_cache(maxsize=None)
def lr_search_table() -> dict[str, Any]:
    """The held-out lr search behind :func:`cpu_lr` (``data/lr_search.json``, written from
    ``python -m mlplab.experiments.lr_search``): grid, epochs, the model searched per key, and its
    validation error (%) at each lr."""
    return json.loads(resources.files(__package__).joinpath("data/lr_search.json").read_text())


@functools.lru_cache(maxsize=None)
def cpu_lr() -> dict[str, float]:
    """AdamW peak lr per step of ``CPU_BATCH`` examples at cpu scale, per family (a model name or
    a ``meta.lr_key``): the grid's lr with the lowest validation error in :func:`lr_search_table`;
    ``same_as`` entries take their family's, and ``"default"`` the rest."""
    t = lr_search_table()
    out = {}
    for key, errs in t["val_error"].items():
        tried = [(e, lr) for e, lr in zip(errs, t["grid"]) if isinstance(e, (int, float))]
        out[key] = min(tried)[1]
    out.update({k: out[v] for k, v in t["same_as"].items()})
    out["default"] = DEFAULT_LR
    return out


@derived_key("family_lr")
def family_lr(o: dict[str, Any], scale: str) -> dict[str, Any]:
    """Derived key: at cpu (and quick) scale, the searched :func:`cpu_lr` for runs on the cpu
    recipe (AdamW): the entry ``meta.lr_key`` names, else the family's (the model name's), else
    the default. Other scales and runs that keep their published lr (``meta.fixed_lr``): nothing."""
    if scale not in ("cpu", "quick") or o.get("optim.name") != "adamw" or o.get("meta.fixed_lr"):
        return {}
    lrs = cpu_lr()
    return {"optim.lr": lrs.get(str(o.get("meta.lr_key") or o.get("model.name")), DEFAULT_LR)}


SCALES: tuple[str, ...] = ("smoke", "quick", "cpu", "paper")

# Augmentation presets, as ``augment.*`` overrides (mlplab.data.augment.AugmentConfig).
AUGMENT: dict[str, dict[str, Any]] = {
    "none": {},
    "crop_flip": {"augment.crop_padding": 4, "augment.hflip": True},
    "crop": {"augment.crop_padding": 4},
    "autoaugment": {"augment.crop_padding": 4, "augment.hflip": True, "augment.autoaugment": "cifar10"},
    # ImageNet recipe of fig6 / table1 (DeiT-style): RandAugment m9-mstd0.5, mixup/cutmix, smoothing, erasing
    "imagenet": {"augment.hflip": True, "augment.randaugment": "rand-m9-mstd0.5-inc1", "augment.mixup": 0.8,
                 "augment.cutmix": 1.0, "augment.mix_switch_prob": 0.5, "augment.label_smoothing": 0.1,
                 "augment.random_erasing": 0.25},
}


@functools.lru_cache(maxsize=None)
def dataset_available(name: str) -> bool:
    """Whether ``name`` can be loaded here without a download (synthetic always can; asked once
    per process)."""
    if name == "synthetic":
        return True
    try:
        from ..data import load_dataset

        load_dataset(name, "test")
        return True
    except Exception:
        return False


CPU_WEIGHT_DECAY = 0.05  # AdamW's weight decay where it replaces the published optimiser (cpu, smoke)


@dataclass(frozen=True)
class ScaleRules:
    """How one scale shrinks a published recipe (:meth:`Scale.recipe`): a row of :data:`SCALE_RULES`."""

    published_optimiser: bool  # the published optimiser, lr, weight decay and warmup; else ``cpu_optim``
    epochs: str | float  # "published", "cpu" (the recipe's cpu_epochs), or a number of epochs
    batch: int | None  # examples per step (None: the published batch, at most max_batch)
    max_batch: int | None  # the batch at most (None: no limit)
    schedule: dict[str, Any]  # fixed schedule and run keys of the scale
    subsets: str  # "always" (the scale's subsets, even None), "given" (those set), "none"
    augment: str  # "published" (the recipe's preset), "light" (crop and flip; padding 1 on grey 28×28), "none"
    checkpoint_every: int = 1  # epochs between checkpoints (0: at the end)


_CPU_RULES = ScaleRules(published_optimiser=False, epochs="cpu", batch=CPU_BATCH, max_batch=None,
                        schedule={"schedule.warmup_epochs": 0.5, "schedule.min_lr": 0.0},
                        subsets="given", augment="light", checkpoint_every=0)
#: Each scale's rules: paper runs the published setting; cpu (and quick) the fast engine on the full
#: training set (batch CPU_BATCH, lr per family: family_lr); smoke one epoch on a few dozen images.
SCALE_RULES: dict[str, ScaleRules] = {
    "paper": ScaleRules(published_optimiser=True, epochs="published", batch=None, max_batch=None, schedule={},
                        subsets="none", augment="published"),
    "smoke": ScaleRules(published_optimiser=False, epochs=1, batch=None, max_batch=32, schedule={}, subsets="always",
                        augment="none"),
    "cpu": _CPU_RULES,
    "quick": _CPU_RULES,
}


@dataclass
class Scale:
    """How big an experiment runs. ``dataset`` is the one in use (after any fallback)."""

    name: str
    dataset: str
    requested_dataset: str | None = None  # what the experiment (or --dataset) asked for
    train_subset: int | None = None
    test_subset: int | None = None
    image_size: int = 32  # the side the models see
    in_chans: int = 3
    notes: list[str] = field(default_factory=list)
    role: str = "exploratory"  # protocol.ROLES: seeds 0, 1, … explore a proxy; fresh seeds confirm it

    def seeds(self, n: int, confirm: int = CONFIRM_SEEDS) -> list[int]:
        """The seeds of every point of a sweep: 0 … n − 1 when exploring; when confirming, ``confirm``
        (at least ``protocol.CONFIRM_SEEDS``) fresh seeds from ``protocol.CONFIRM_FIRST`` on, or
        from n where the exploration used more seeds than that: never an exploratory one."""
        if self.role == "confirmatory":
            first = max(CONFIRM_FIRST, n)
            return list(range(first, first + max(confirm, CONFIRM_SEEDS)))
        return list(range(n))

    def one_seed(self) -> list[int]:
        """The seed of a sweep whose every run is one seed (its intervals come from a bootstrap
        over runs): 0 when exploring, ``protocol.CONFIRM_FIRST`` when confirming."""
        return [CONFIRM_FIRST] if self.role == "confirmatory" else [0]

    @property
    def paper(self) -> bool:
        return self.name == "paper"

    @property
    def smoke(self) -> bool:
        return self.name == "smoke"

    def settings(self, table: Mapping[str, Any]) -> Any:
        """This scale's entry of a per-scale settings table keyed by scale name (``smoke``,
        ``quick``, ``cpu``, ``paper``); ``quick`` takes the ``cpu`` entry unless the table names it."""
        if self.name in table:
            return table[self.name]
        if self.name == "quick" and "cpu" in table:
            return table["cpu"]
        raise KeyError(f"no settings for scale {self.name!r} (the table has {sorted(table)})")

    def family_lr(self, o: dict[str, Any]) -> dict[str, Any]:
        """:func:`family_lr` at this scale."""
        return family_lr(o, self.name)

    def recipe(self, *, epochs: float, cpu_epochs: float = 4, optim: str = "sgd", lr: float = 0.02,
               batch_size: int = 128, weight_decay: float = 0.0, augment: str = "crop_flip",
               warmup_epochs: float | None = None, min_lr: float = 0.0, warmup_start_lr: float = 0.0,
               cpu_optim: tuple[str, float] | None = ("adamw", DEFAULT_LR), eval_every: int = 0,
               extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run-config overrides for the published setting (optimiser, peak lr per step, batch,
        weight decay, augmentation preset, epochs, warmup), shrunk as this scale's row of
        :data:`SCALE_RULES` says.

        At cpu/smoke scale the epochs are too few for the published SGD schedules, so
        ``cpu_optim`` (AdamW; at cpu scale batch ``CPU_BATCH`` and the family's :func:`cpu_lr` through
        :func:`family_lr`) replaces the optimiser there; every family gets the same search
        effort and the same recipe otherwise, so comparisons stay fair. ``cpu_optim=None`` keeps
        the published optimiser and lr at every scale (``meta.fixed_lr``: :meth:`family_lr`
        leaves it), for experiments whose point is the optimiser. ``extra`` is applied last.
        """
        rules = SCALE_RULES[self.name]
        name, peak = (optim, lr) if rules.published_optimiser or cpu_optim is None else cpu_optim
        o: dict[str, Any] = {"data.dataset": self.dataset, "schedule.schedule": "cosine",
                             "run.log": "lines", "run.tensorboard": False, "run.eval_every": eval_every,
                             "run.checkpoint_every": rules.checkpoint_every,
                             "optim.name": name, "optim.lr": peak,
                             "run.batch_size": rules.batch or min(batch_size, rules.max_batch or batch_size),
                             "optim.weight_decay": weight_decay if rules.published_optimiser or name != "adamw"
                             else CPU_WEIGHT_DECAY,
                             "schedule.epochs": {"published": epochs, "cpu": cpu_epochs}.get(rules.epochs,
                                                                                             rules.epochs)}
        if rules.published_optimiser:
            o["schedule.min_lr"] = min_lr
            if warmup_epochs:
                o.update({"schedule.warmup_epochs": warmup_epochs, "schedule.warmup_start_lr": warmup_start_lr})
        o.update(rules.schedule)
        o.update(self._subsets(rules))
        if rules.published_optimiser and self.requested_dataset == "stl10" and self.dataset == "stl10":
            o["data.image_size"] = 32  # docs/science.md §7: STL-10 resized to 32×32
        o.update(self._augmentation(rules, augment))
        if cpu_optim is None:
            o["meta.fixed_lr"] = True
        return {**o, **(extra or {})}

    def _subsets(self, rules: "ScaleRules") -> dict[str, Any]:
        """The training and test subsets of this scale (a seeded random N of the training set)."""
        if rules.subsets == "always":  # smoke: a few dozen images, even when None
            return {"data.train_subset": self.train_subset, "data.subset": "random",
                    "data.test_subset": self.test_subset}
        if rules.subsets == "none":
            return {}
        out: dict[str, Any] = {}
        if self.train_subset:
            out.update({"data.train_subset": self.train_subset, "data.subset": "random"})
        if self.test_subset:
            out["data.test_subset"] = self.test_subset
        return out

    def _augmentation(self, rules: "ScaleRules", augment: str) -> dict[str, Any]:
        """The augmentation overrides: the published preset, light (cpu), or none (smoke)."""
        if rules.augment == "published":
            return AUGMENT[augment]
        if rules.augment == "none" or augment == "none":
            return {}
        # light augmentation: crop padding 1 on 28×28 grey images (padding 4 underfits, issue 8)
        return {"augment.crop_padding": 1} if self.in_chans == 1 else AUGMENT["crop_flip"]

    def s0(self, patch: int) -> int:
        """Number of patches S0 = (image side / P)² that the stem makes."""
        return (self.image_size // patch) ** 2

    def patch_for_tokens(self, paper_patch: int = 4) -> int:
        """Patch size giving about the paper's S0 = 64 (32×32, P = 4): P = 4 on 28×28 (S0 = 49)."""
        if self.image_size == 32:
            return paper_patch
        return max(1, round(paper_patch * self.image_size / 32))

    def to_dict(self) -> dict[str, Any]:
        return {"scale": self.name, "dataset": self.dataset, "requested_dataset": self.requested_dataset,
                "train_subset": self.train_subset, "test_subset": self.test_subset,
                "image_size": self.image_size, "in_chans": self.in_chans, "notes": list(self.notes), "role": self.role}


def make_scale(name: str, dataset: str | None, default_dataset: str, *, check_available: bool = True,
               role: str = "exploratory") -> Scale:
    """Resolve scale and dataset: smoke → synthetic; cpu → the requested dataset if it is on this
    machine, else Fashion-MNIST; paper → the requested dataset (it must be there to run). ``role``:
    exploratory (seeds 0, 1, …) or confirmatory (fresh seeds, :meth:`Scale.seeds`)."""
    if name not in SCALES:
        raise ValueError(f"unknown scale {name!r}; choose one of {', '.join(SCALES)}")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    want = dataset or default_dataset
    notes: list[str] = []
    if name == "smoke":
        ds = dataset or "synthetic"
        sc = Scale(name, ds, want, train_subset=64, test_subset=64)
    elif name in ("cpu", "quick"):
        ds = want
        if check_available and not dataset_available(want):
            notes.append(f"{want} is not on this machine: ran on fashion_mnist instead")
            ds = "fashion_mnist"
        sc = Scale(name, ds, want)  # full training and test sets
    else:
        sc = Scale(name, want, want)
    sc.notes.extend(notes)
    sc.role = role
    info = DATASETS.get(sc.dataset)  # an unknown name: the run plans refuse it, naming the known ones
    if info is not None:
        sc.image_size = int(info.image_size[0]) or 32
        sc.in_chans = int(info.in_chans)
    if sc.paper and sc.dataset == "stl10":
        sc.image_size = 32
    if sc.image_size == 28:
        sc.notes.append("28×28 images are used as they are (no resize): patch 4 gives S0 = 49 patches of "
                        "C0 = 16 values; the first block's token mixing maps S0 → S and its skip path is the "
                        "learned W̃ ∈ R^{S×S0} (SkipLayer, docs/science.md §2), so every planned S is reached; where a "
                        "spec lists patch sizes they are divisors of 28 (1, 2, 4, 7, 14, 28)")
    return sc


def preset(name: str) -> dict[str, Any]:
    """The run-config preset ``name`` (:data:`mlplab.train.presets.CONFIGS`) as flat dotted
    overrides: the published recipe a paper-scale plan starts from."""
    from ..train.config import flatten
    from ..train.presets import CONFIGS

    return flatten(CONFIGS[name])
