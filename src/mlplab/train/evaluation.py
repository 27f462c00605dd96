"""Evaluation only (``mlplab eval``): a run folder or any checkpoint on one split of a dataset.

:func:`load_for_eval` resolves, once, what is evaluated and on what (an :class:`EvalSetup`): the
model (a run's last checkpoint, its EMA average with ``ema=True``, or any file that
``mlplab.load_pretrained`` reads), the run config it is evaluated under (a run folder's own
``config.json``, so that the data, its resizing, holdout and subsets, the evaluation batch, the
precision and test-time flips are the run's and ``test_acc`` in its ``results.json`` is
reproduced exactly), and the data, loaded as training loads it (``train.data.load_run_data``).
:func:`evaluate_setup` then measures top-1, top-5, mean cross-entropy and images/s with the
training loop's own ``evaluate``. ``mlplab eval --few-shot`` evaluates the same setup by linear
few-shot accuracy on its frozen pre-logit features (:mod:`mlplab.analysis.fewshot`, joined to
this module in the command: train and analysis do not import each other).

Overrides are dotted config keys of the ``data`` section (``data.dataset=cifar10
data.root=DIR data.image_size=64``) plus ``run.eval_batch_size``, ``run.precision``,
``run.device``, ``run.threads`` and ``augment.test_hflip``; a checkpoint file outside a run
folder needs ``data.dataset``. The data is resized to the model's resolution when its native
size differs and no ``data.image_size`` is given.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..data.table import get_info
from ..errors import BadInput
from ..interop.files import CHECKPOINT_DIRS
from . import checkpoint as ckpt
from .config import RunConfig, eval_batch_size, make_config, parse_overrides
from .data import RunData, Split, eval_loader, load_run_data
from .distributed import DistInfo
from .loop import evaluate, resolve_device, resolve_precision

__all__ = ["EvalSetup", "load_for_eval", "evaluate_setup", "evaluate_checkpoint", "EVAL_KEYS"]

#: the config keys ``mlplab eval`` accepts (``data.*`` as a whole section)
EVAL_KEYS = ("run.eval_batch_size", "run.precision", "run.device", "run.threads", "augment.test_hflip")
SPLITS = ("train", "val", "test")


@dataclass
class EvalSetup:
    model: nn.Module  # in eval mode, on ``device``
    cfg: RunConfig  # the config the evaluation follows (the run's, with the overrides)
    weights: Path  # the file the weights came from
    run_dir: Path | None  # the run folder, when the checkpoint belongs to one
    split_name: str
    split: Split  # the split evaluated (of ``data``)
    data: RunData  # the run's data, loaded as training loads it
    device: torch.device
    precision: str
    # False when the overrides chose other data.classes of the dataset the run trained on: a head
    # of the same size then predicts other classes
    trained_classes: bool = True

    def describe(self) -> dict[str, Any]:
        """What is evaluated on what (the part of a result that is not a measurement)."""
        return {"images": len(self.split), "split": self.split_name, "dataset": self.cfg.data.dataset,
                "image_size": self.data.info.image_size[0], "weights": str(self.weights),
                "model": getattr(self.model, "model_name", type(self.model).__name__), "precision": self.precision,
                "device": str(self.device)}

    @property
    def head_fits(self) -> bool:
        """The model's classifier predicts the data's classes (top-1, top-5 and loss mean something)."""
        return self.trained_classes and getattr(getattr(self.model, "config", None), "num_classes", None) in \
            (None, self.data.info.num_classes)

    def autocast(self):  # as the training loop's (loop._Run.autocast)
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def _run_folder(path: Path) -> Path | None:
    """The run folder (it holds ``config.json``) that ``path`` is, or whose checkpoint folder or
    checkpoint file ``path`` is; None for a checkpoint of no run."""
    folder = path.parent if path.is_file() else path
    if folder.name in CHECKPOINT_DIRS:
        folder = folder.parent
    return folder if (folder / "config.json").is_file() else None


def _weights(path: Path, run_dir: Path | None, ema: bool) -> Path:
    """The weights file to load: ``path`` itself, or a run's (or checkpoint folder's) model or EMA file."""
    want = ckpt.EMA_FILE if ema else ckpt.MODEL_FILE
    if path.is_file():
        if ema and path.name != ckpt.EMA_FILE:
            raise BadInput(f"--ema reads a run's {ckpt.EMA_FILE}; give the run folder or that file, not {path}")
        return path
    folder = ckpt.find_checkpoint(path) if path == run_dir else path
    if folder is None or not (folder / ckpt.MODEL_FILE).is_file():
        if run_dir is None and not ema:  # a folder of weights that is no run: interop finds its one file
            from ..interop.files import resolve_weights_path
            return resolve_weights_path(path)
        raise FileNotFoundError(f"{path} holds no checkpoint ({ckpt.MODEL_FILE}); give a run folder that has "
                                "written one, or a checkpoint file")
    if not (folder / want).is_file():
        raise BadInput(f"{folder} has no {want}: the run kept no EMA of its weights (run.ema_decay); drop --ema")
    return folder / want


def _eval_config(run_dir: Path | None, overrides: dict[str, Any]) -> RunConfig:
    bad = sorted(k for k in overrides if not (k.startswith("data.") or k in EVAL_KEYS))
    if bad:
        raise BadInput(f"mlplab eval takes data.* keys and {', '.join(EVAL_KEYS)}, not {', '.join(bad)}; "
                       "the model comes from the checkpoint")
    if run_dir is not None:
        return make_config(run_dir / "config.json", overrides)
    if "data.dataset" not in overrides:
        raise BadInput("a checkpoint file outside a run folder says nothing about its data; add "
                       "data.dataset=NAME (e.g. data.dataset=cifar10)")
    return make_config(None, {"run.name": "eval", **overrides})


def _load_model(weights: Path) -> nn.Module:
    from ..interop import load_pretrained

    return load_pretrained(weights)


def _check_model_fits(model: nn.Module, info: Any, cfg: RunConfig, weights: Path, head: bool) -> None:
    mc = getattr(model, "config", None)
    fields = (("num_classes", info.num_classes),) if head else ()
    for field, have in fields + (("in_chans", info.in_chans),):
        want = getattr(mc, field, None)
        if want is not None and want != have:
            what = "classes" if field == "num_classes" else "image channels"
            raise BadInput(f"the model in {weights} has {want} {what} but {cfg.data.dataset} has {have}; evaluate "
                           f"it on a dataset with {want} {what} (mlplab finetune trains a new head)")


def load_for_eval(checkpoint: str | Path, overrides: dict[str, Any] | list[str] | None = None, *,
                  split: str = "test", ema: bool = False, head: bool = True) -> EvalSetup:
    """Everything :func:`evaluate_setup` needs, checked before any image is evaluated.
    ``head=False``: the classifier head is not used (few-shot on frozen features), so the data
    may have another class count than the model."""
    if split not in SPLITS:
        raise BadInput(f"--split must be one of {', '.join(SPLITS)}, not {split!r}")
    path = Path(checkpoint)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; give a run folder or a checkpoint file")
    run_dir = _run_folder(path)
    ov = parse_overrides(overrides)
    cfg = _eval_config(run_dir, ov)
    get_info(cfg.data.dataset)  # an unknown name -> BadInput listing the known ones, before reading weights
    weights = _weights(path, run_dir, ema)
    model = _load_model(weights)
    size = getattr(getattr(model, "config", None), "image_size", None)
    d = cfg.data
    if d.image_size is not None and size is not None and d.image_size != size:
        raise BadInput(f"data.image_size={d.image_size} but the model in {weights} takes {size}x{size} images; "
                       "drop data.image_size (the data is resized to the model's resolution)")
    if d.image_size is None and size is not None and get_info(d.dataset).image_size != (size, size):
        d = dataclasses.replace(d, image_size=size)
        cfg = dataclasses.replace(cfg, data=d)
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    device = resolve_device(cfg.run.device)
    precision = resolve_precision(cfg.run.precision, device)
    if split == "val" and not d.val_fraction > 0:
        raise BadInput("--split val evaluates the part of the training split a run held out; this config holds "
                       "out none (data.val_fraction=0): add data.val_fraction=F, or use --split test")
    data = load_run_data(cfg, device)  # the run's own splits: holdout, subsets, storage (train.data)
    _check_model_fits(model, data.info, cfg, weights, head)
    on = {"train": data.train, "val": data.val, "test": data.test}[split]
    trained = make_config(run_dir / "config.json").data if run_dir is not None else d
    same = trained.dataset != cfg.data.dataset or trained.classes == cfg.data.classes
    if head and not same:
        raise BadInput(f"the model was trained on data.classes={trained.classes} and its head predicts those, not "
                       f"data.classes={cfg.data.classes}; add --few-shot K or --probe to evaluate its features on them")
    return EvalSetup(model.to(device).eval(), cfg, weights, run_dir, split, on, data, device, precision, same)


def evaluate_setup(setup: EvalSetup, progress: bool | None = None) -> dict[str, Any]:
    """Top-1 / top-5 accuracy, mean loss and images/s of ``setup.model`` on ``setup.split``, batched
    and autocast as the run's final test was. ``progress``: a tqdm bar (None: on a terminal)."""
    from tqdm import tqdm

    dist = DistInfo()
    loader = eval_loader(setup.split, setup.data, eval_batch_size(setup.cfg.run), dist)
    bar = tqdm(loader, desc=f"eval {setup.split_name}", unit="batch", leave=False,
               disable=None if progress is None else not progress)
    t0 = time.perf_counter()
    got = evaluate(setup.model, bar, dist, setup.autocast, setup.cfg.augment.test_hflip)  # ends in a host sync
    seconds = time.perf_counter() - t0
    n = len(setup.split)
    return {**got, "seconds": seconds, "images_per_s": n / max(seconds, 1e-9), **setup.describe()}


def evaluate_checkpoint(checkpoint: str | Path, overrides: dict[str, Any] | list[str] | None = None, *,
                        split: str = "test", ema: bool = False, progress: bool | None = None) -> dict[str, Any]:
    """``mlplab eval`` as a function: :func:`load_for_eval` then :func:`evaluate_setup`."""
    return evaluate_setup(load_for_eval(checkpoint, overrides, split=split, ema=ema), progress)
