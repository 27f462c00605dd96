"""Training recipes and scales: the one place where experiment settings become run-config keys.

An experiment states its settings in the units of the paper (optimiser, lr, batch, epochs,
augmentation); :meth:`Scale.recipe` turns them into dotted overrides of
``mlplab.train.RunConfig``, shrunk for the ``cpu`` and ``smoke`` scales:

- ``paper``: the published setting (SPEC §7).
- ``cpu``: the same design (same families, pair structure, comparisons) at small budgets,
  depths and widths, few epochs, one or two seeds, a training subset; about 15–25 min on
  2 cores. Fashion-MNIST (28×28×1) when the published dataset is not on the machine.
- ``smoke``: seconds, for the tests: the synthetic dataset (a few hundred images), one epoch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SCALES", "Scale", "make_scale", "run_dir_overrides", "AUGMENT", "dataset_available"]

SCALES: tuple[str, ...] = ("smoke", "cpu", "paper")

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


def run_dir_overrides(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run-config keys that put a run's files in ``run_dir`` (``run.out_dir/run.name``)."""
    run_dir = Path(run_dir)
    return {"run.out_dir": str(run_dir.parent), "run.name": run_dir.name}


def dataset_available(name: str) -> bool:
    """Whether ``name`` can be loaded here without a download (synthetic always can)."""
    if name == "synthetic":
        return True
    try:
        from ..data import load_dataset

        load_dataset(name, "test")
        return True
    except Exception:
        return False


@dataclass
class Scale:
    """How big an experiment runs. ``dataset`` is the one in use (after any fallback)."""

    name: str
    dataset: str
    requested_dataset: str | None = None  # what the experiment (or --dataset) asked for
    seeds: int = 3  # seeds per point (an experiment may ask for more at paper scale)
    epoch_factor: float = 1.0  # not used at paper scale
    train_subset: int | None = None
    test_subset: int | None = None
    image_size: int = 32  # the side the models see
    in_chans: int = 3
    notes: list[str] = field(default_factory=list)

    @property
    def paper(self) -> bool:
        return self.name == "paper"

    @property
    def smoke(self) -> bool:
        return self.name == "smoke"

    def pick(self, smoke: Any, cpu: Any, paper: Any) -> Any:
        """The value for this scale."""
        return {"smoke": smoke, "cpu": cpu, "paper": paper}[self.name]

    def seed_list(self, paper: int, cpu: int = 2, smoke: int = 1) -> list[int]:
        return list(range(self.pick(smoke, cpu, paper)))

    def recipe(
        self,
        *,
        epochs: float,
        cpu_epochs: float = 4,
        optim: str = "sgd",
        lr: float = 0.02,  # peak lr per step
        batch_size: int = 128,
        weight_decay: float = 0.0,
        augment: str = "crop_flip",
        warmup_epochs: float | None = None,
        min_lr: float = 0.0,
        warmup_start_lr: float = 0.0,
        cpu_optim: tuple[str, float] | None = ("adamw", 2e-3),
        eval_every: int = 0,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run-config overrides for the published setting, shrunk for cpu/smoke.

        At cpu/smoke scale the few epochs are too short for the published SGD schedules to
        move far, so ``cpu_optim`` (default AdamW 2e-3, batch 128) replaces the optimiser
        there; every run of a comparison gets the same recipe, so comparisons stay fair.
        """
        o: dict[str, Any] = {"data.dataset": self.dataset, "schedule.schedule": "cosine",
                             "run.log": "lines", "run.tensorboard": False, "run.eval_every": eval_every,
                             "run.checkpoint_every": 1}
        if self.paper:
            o.update({"optim.name": optim, "optim.lr": lr, "run.batch_size": batch_size,
                      "optim.weight_decay": weight_decay, "schedule.epochs": epochs, "schedule.min_lr": min_lr})
            if warmup_epochs:
                o.update({"schedule.warmup_epochs": warmup_epochs, "schedule.warmup_start_lr": warmup_start_lr})
            if self.requested_dataset == "stl10" and self.dataset == "stl10":
                o["data.image_size"] = 32  # SPEC §7: STL-10 resized to 32×32
            o.update(AUGMENT[augment])
        else:
            name, clr = cpu_optim if cpu_optim else (optim, lr)
            o.update({"optim.name": name, "optim.lr": clr, "run.batch_size": min(batch_size, self.pick(32, 128, 128)),
                      "optim.weight_decay": 0.05 if name == "adamw" else weight_decay,
                      "schedule.epochs": self.pick(1, cpu_epochs, epochs)})
            if self.train_subset:
                o["data.train_subset"] = self.train_subset
                o["data.subset"] = "random"
            if self.test_subset:
                o["data.test_subset"] = self.test_subset
            aug = "none" if self.smoke else ("crop" if augment != "none" and self.in_chans == 1 else
                                             ("crop_flip" if augment != "none" else "none"))
            o.update(AUGMENT[aug])
        if extra:
            o.update(extra)
        return o

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
                "image_size": self.image_size, "in_chans": self.in_chans, "notes": list(self.notes)}


def make_scale(name: str, dataset: str | None, default_dataset: str, *, check_available: bool = True) -> Scale:
    """Resolve scale and dataset: smoke → synthetic; cpu → the requested dataset if it is on this
    machine, else Fashion-MNIST; paper → the requested dataset (it must be there to run)."""
    if name not in SCALES:
        raise ValueError(f"unknown scale {name!r}; choose one of {', '.join(SCALES)}")
    want = dataset or default_dataset
    notes: list[str] = []
    if name == "smoke":
        ds = dataset or "synthetic"
        sc = Scale(name, ds, want, train_subset=64, test_subset=64)
    elif name == "cpu":
        ds = want
        if check_available and not dataset_available(want):
            notes.append(f"{want} is not on this machine: ran on fashion_mnist instead")
            ds = "fashion_mnist"
        sc = Scale(name, ds, want, train_subset=10000, test_subset=5000)
    else:
        sc = Scale(name, want, want)
    sc.notes.extend(notes)
    try:
        from ..data.table import get_info

        info = get_info(sc.dataset)
        sc.image_size = int(info.image_size[0]) or 32
        sc.in_chans = int(info.in_chans)
    except Exception:
        pass
    if sc.paper and sc.dataset == "stl10":
        sc.image_size = 32
    if sc.image_size == 28:
        sc.notes.append("28×28 images are used as they are (no resize): patch 4 gives S0 = 49 patches of "
                        "C0 = 16 values; the first block's token mixing maps S0 → S and its skip path is the "
                        "learned W̃ ∈ R^{S×S0} (SkipLayer, SPEC §2), so every planned S is reached; where a "
                        "spec lists patch sizes they are divisors of 28 (1, 2, 4, 7, 14, 28)")
    return sc
