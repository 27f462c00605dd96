"""Helpers shared by the training tests (a module with a unique name, so importing it cannot pick
up another folder's conftest)."""
from pathlib import Path

import mlplab

SRC = str(Path(mlplab.__file__).resolve().parents[1])


def tiny_overrides(out_dir, name="run", **extra):
    """A 2-block S-Mixer (C = 8) on 256 synthetic 8x8 images: a run takes well under a second."""
    ov = {
        "model.name": "s_mixer", "model.kwargs.patch_size": 4, "model.kwargs.hidden_dim": 8,
        "model.kwargs.depth": 2,
        "data.dataset": "synthetic", "data.image_size": 8, "data.train_subset": 256, "data.test_subset": 128,
        "optim.name": "adamw", "optim.lr": 3e-3, "optim.weight_decay": 0.01,
        "schedule.epochs": 3, "schedule.warmup_steps": 4,
        "run.batch_size": 32, "run.threads": 1, "run.log": "none", "run.precision": "fp32",
        "run.tensorboard": False, "run.out_dir": str(out_dir), "run.name": name, "run.device": "cpu",
    }
    ov.update(extra)
    return ov
