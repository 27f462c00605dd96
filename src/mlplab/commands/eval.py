"""``mlplab eval CHECKPOINT_OR_RUN [data.KEY=VALUE ...] [--split test] [--ema] [--few-shot K,...] [--probe] [--json]``

Evaluates a run folder (its last checkpoint, under the run's own config: on a finished run this
reproduces ``test_acc`` of its ``results.json``) or any checkpoint file that
``mlplab.load_pretrained`` reads, on one split of a dataset; prints accuracy, loss and images/s.

    mlplab eval runs/fmnist_fast
    mlplab eval runs/fmnist_fast --ema --json
    mlplab eval model.safetensors data.dataset=cifar10 data.root=~/data --split test
    mlplab eval runs/fmnist_fast --few-shot 1,5,10,25     # linear few-shot on frozen features
    mlplab eval runs/pretrain04 data.classes=[5,6,7,8,9] --few-shot 5 --probe   # on classes it never saw
"""
from __future__ import annotations

import argparse
import json

#: how this command takes overrides (``mlplab.cli.dotted_options``): KEY=VALUE positionals
OVERRIDES = "positional"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="run folder, checkpoint folder or checkpoint file (mlplab, timm, Flax, "
                                           "Scaling-MLPs)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="data.* keys (data.dataset=cifar10 data.root=DIR data.image_size=64; or "
                             "--data.dataset cifar10), "
                             "run.eval_batch_size, run.precision, run.device, run.threads, augment.test_hflip")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"), help="the split (default test)")
    parser.add_argument("--ema", action="store_true", help="evaluate the run's EMA of the weights (run.ema_decay)")
    parser.add_argument("--few-shot", default=None, metavar="K[,K...]",
                        help="also the linear K-shot accuracy of the frozen pre-logit features (closed-form "
                             "ridge; shots from the training split), e.g. 1,5,10,25")
    parser.add_argument("--probe", action="store_true",
                        help="also the accuracy of a closed-form ridge linear probe of the frozen pre-logit features "
                             "on the whole training split (λ chosen on a held-out 10%% of it)")
    parser.add_argument("--draws", type=int, default=5, help="random draws of the shots per K (default 5)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run(args: argparse.Namespace) -> int:
    from ..experiments.linear_eval import linear_eval
    from ..train.evaluation import evaluate_setup, load_for_eval

    shots = _shots(args.few_shot) if args.few_shot is not None else ()
    linear = bool(shots) or args.probe
    setup = load_for_eval(args.checkpoint, args.overrides, split=args.split, ema=args.ema, head=not linear)
    # linear evaluation on data with other classes than the model's head: the features only, no head metrics
    res = evaluate_setup(setup) if setup.head_fits else setup.describe()
    if linear:
        res.update(linear_eval(setup, shots, probe=args.probe, draws=args.draws))
    if args.json:
        print(json.dumps(res))
    else:
        head = (f"acc {res['acc']:.4f} top5 {res['top5']:.4f} loss {res['loss']:.4f}; {res['images']} images, "
                f"{res['images_per_s']:.0f} img/s" if "acc" in res else
                f"{res['images']} images (the model's head has other classes: features only)")
        print(f"{res['model']} ({res['weights']}) on {res['dataset']} {res['split']} at {res['image_size']}px: "
              f"{head} ({res['device']}, {res['precision']})")
        for k, r in res.get("few_shot", {}).items():
            print(f"linear {k}-shot: {100 * r['mean']:.2f} ± {100 * r['sd']:.2f}% over {len(r['accuracies'])} draws")
        if "probe" in res:
            p = res["probe"]
            print(f"linear probe: {100 * p['acc']:.2f}% (ridge λ = {p['l2']:g} chosen on {p['holdout']} held-out "
                  f"training examples, refitted on {p['train']})")
    return 0


def _shots(text: str) -> tuple[int, ...]:
    try:
        shots = tuple(int(k) for k in text.split(","))
    except ValueError:
        raise ValueError(f"--few-shot takes shot counts like 1,5,10,25, not {text!r}") from None
    if not shots or min(shots) < 1:
        raise ValueError(f"--few-shot takes positive shot counts like 1,5,10,25, not {text!r}")
    return shots
