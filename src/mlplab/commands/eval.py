"""``mlplab eval CHECKPOINT_OR_RUN [data.KEY=VALUE ...] [--split test] [--ema] [--json]``

Evaluates a run folder (its last checkpoint, under the run's own config: on a finished run this
reproduces ``test_acc`` of its ``results.json``) or any checkpoint file that
``mlplab.load_pretrained`` reads, on one split of a dataset; prints accuracy, loss and images/s.

    mlplab eval runs/fmnist_fast
    mlplab eval runs/fmnist_fast --ema --json
    mlplab eval model.safetensors data.dataset=cifar10 data.root=~/data --split test
"""
from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="run folder, checkpoint folder or checkpoint file (mlplab, timm, Flax, "
                                           "Scaling-MLPs)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="data.* keys (data.dataset=cifar10 data.root=DIR data.image_size=64), "
                             "run.eval_batch_size, run.precision, run.device, run.threads, augment.test_hflip")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"), help="the split (default test)")
    parser.add_argument("--ema", action="store_true", help="evaluate the run's EMA of the weights (run.ema_decay)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run(args: argparse.Namespace) -> int:
    from ..train.evaluation import evaluate_setup, load_for_eval

    setup = load_for_eval(args.checkpoint, args.overrides, split=args.split, ema=args.ema)
    res = evaluate_setup(setup)
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{res['model']} ({res['weights']}) on {res['dataset']} {res['split']} at {res['image_size']}px: "
              f"acc {res['acc']:.4f} top5 {res['top5']:.4f} loss {res['loss']:.4f}; {res['images']} images, "
              f"{res['images_per_s']:.0f} img/s ({res['device']}, {res['precision']})")
    return 0
