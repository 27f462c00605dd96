"""mlplab: build, train, analyse and compare all-MLP vision models.

Nothing runs at import time except model registration. The entry points below mirror the
``mlplab`` CLI subcommands; the heavier ones are imported on first use.
"""
from __future__ import annotations

import importlib

from .interop import create_model  # the registry's builder, plus pretrained= weights
from .models import list_models, model_config
from .version import __version__

_LAZY = {
    "effective_mlp": "mlplab.theory",  # Prop. 3.2: the Mixer as an explicit wide sparse MLP
    "plan_budget": "mlplab.theory",  # docs/science.md §3: (S, C) pairs / SW-MLP widths for a budget Ω
    "models_table": "mlplab.analysis.cost",  # params and FLOPs of every registered model
    "count_flops": "mlplab.models.counting",  # forward matmul FLOPs per example
    "load_dataset": "mlplab.data",
    "pack": "mlplab.data",  # `mlplab pack`: an image folder, tar/Parquet shards or dataset -> streamable .npy shards
    "make_config": "mlplab.train",
    "reproduce": "mlplab.experiments",
    "run_sweep": "mlplab.experiments",
    "write_report": "mlplab.experiments",
    "load_pretrained": "mlplab.interop",  # timm / Flax / Scaling-MLPs / mlplab checkpoints -> model
    "save_pretrained": "mlplab.interop",
    "push_to_hub": "mlplab.interop",  # save_pretrained(..., hub_layout=True) uploaded with huggingface_hub
    "machine_info": "mlplab.train.machine",  # what `mlplab info` prints
    "expand_resolution": "mlplab.models.expand",  # docs/science.md §7: fine-tuning at K× the resolution
}

__all__ = ["create_model", "list_models", "model_config", "__version__", "train", *_LAZY]


def __getattr__(name: str):
    if name == "train":  # the package mlplab.train is callable: mlplab.train(cfg) -> results
        return importlib.import_module("mlplab.train")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mlplab' has no attribute {name!r}")
