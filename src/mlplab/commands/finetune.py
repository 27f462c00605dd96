"""``mlplab finetune CHECKPOINT CONFIG [section.key=value ...] [--resume] [--overwrite]
[--print-config [--format yaml]]``

Trains CONFIG (a named config such as ``fmnist_finetune`` / ``fmnist_linear_probe``, or a JSON,
YAML or TOML file; overrides also as ``--section.key=value``) starting from CHECKPOINT: a run
folder, an mlplab file or a timm / Flax / Scaling-MLPs checkpoint. The checkpoint decides the
model (CONFIG's model section keeps only ``expand``, ``new_head``, ``init_format``, and ``kwargs``
when it names no model); the data is resized to the model's resolution. Equivalent to
``mlplab train CONFIG model.init_from=CHECKPOINT model.name=...``.

    mlplab finetune runs/fmnist_mixer_pretrain fmnist_finetune schedule.epochs=2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .train import add_format_argument, check_format

#: how this command takes overrides (``mlplab.cli.dotted_options``): KEY=VALUE positionals
OVERRIDES = "positional"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="run folder or checkpoint file (mlplab, timm, Flax .npz, Scaling-MLPs)")
    parser.add_argument("config", help="a named config (mlplab train --list) or a JSON, YAML or TOML file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. optim.head_lr=0.01 or --optim.head_lr=0.01")
    parser.add_argument("--resume", action="store_true", help="continue the run in its folder")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    add_format_argument(parser)


def _finetune_config(checkpoint: str, config: str, overrides: list[str] | dict | None):
    """(the run config, the checkpoint read into mlplab's terms): CONFIG with its model taken
    from CHECKPOINT."""
    from ..interop import read_checkpoint
    from ..train.config import data_name, load_config, make_config, parse_overrides, run_name

    base, label = load_config(config)
    ov = parse_overrides(overrides)
    model = dict(base.get("model", {}))
    fmt = ov.get("model.init_format", model.get("init_format", "auto"))
    imported = read_checkpoint(checkpoint, fmt)
    # a fine-tuning config (no model.name) may carry model.kwargs overrides; another config's kwargs
    # describe its own model, not this checkpoint's, and are dropped
    keep = ("expand", "new_head", "init_format") + (("kwargs",) if "name" not in model else ())
    base["model"] = {**{k: v for k, v in model.items() if k in keep}, "name": imported.model_name,
                     "init_from": str(checkpoint)}
    base.get("data", {}).pop("image_size", None)  # the data is resized to the model's resolution
    if "run.name" not in ov and not base.get("run", {}).get("name"):
        stem = Path(checkpoint).stem if Path(checkpoint).is_file() else Path(checkpoint).name
        data = base.get("data", {})
        where = data_name(ov.get("data.dataset", data.get("dataset", "synthetic")),
                          ov.get("data.root", data.get("root")))
        ov["run.name"] = run_name({**ov, **where}, label=f"{label}-from-{stem}")
    return make_config(base, ov), imported


def finetune_config(checkpoint: str, config: str, overrides: list[str] | dict | None = None):
    """The run config of ``mlplab finetune``: CONFIG with its model taken from CHECKPOINT."""
    return _finetune_config(checkpoint, config, overrides)[0]


def finetune_plan(checkpoint: str, config: str, overrides: list[str] | dict | None = None):
    """The run plan of ``mlplab finetune`` (``mlplab.train.runplan.RunPlan``), CHECKPOINT read once."""
    from ..train.runplan import plan_run

    cfg, imported = _finetune_config(checkpoint, config, overrides)
    return plan_run(cfg, checkpoint=imported)


def run(args: argparse.Namespace) -> int:
    from ..train import train
    from ..train.config import to_dict
    from ..utils.configfile import format_config

    if args.resume and args.overwrite:
        print("mlplab finetune: error: --resume and --overwrite exclude each other", file=sys.stderr)
        return 2
    check_format(args)
    plan = finetune_plan(args.checkpoint, args.config, args.overrides)  # before anything is written
    if args.print_config:
        print(format_config(to_dict(plan.cfg), args.format))
        return 0
    results = train(plan, resume=args.resume, overwrite=args.overwrite)
    return 0 if results else 1
