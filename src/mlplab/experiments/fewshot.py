"""Linear few-shot evaluation of a checkpoint (``mlplab eval --few-shot``): the training package's
:class:`~mlplab.train.evaluation.EvalSetup` (model, run config, data) meets
:mod:`mlplab.analysis.fewshot` here, above both (``train`` and ``analysis`` never import each other).

Linear few-shot accuracy on frozen pre-logit features (docs/science.md §7b): the shots and the
held-out examples that choose the regulariser are drawn from the config's training split, the
accuracy is measured on the evaluated split.
"""
from __future__ import annotations

from typing import Any

from ..analysis.fewshot import extract_features, linear_few_shot
from ..errors import BadInput
from ..train.config import eval_batch_size
from ..train.data import eval_loader
from ..train.distributed import DistInfo
from ..train.evaluation import EvalSetup

__all__ = ["few_shot_setup"]


def few_shot_setup(setup: EvalSetup, shots: tuple[int, ...] = (1, 5, 10, 25), *, draws: int = 5,
                   seed: int = 0) -> dict[str, Any]:
    """Linear k-shot accuracy (mean ± sd over ``draws`` draws of the shots) of ``setup.model``'s
    frozen pre-logit features, for every k in ``shots``: shots and held-out examples from the
    config's training split, accuracy on ``setup.split``."""
    if setup.split_name == "train":
        raise BadInput("--few-shot draws its shots from the training split; evaluate on --split test or val")
    dist = DistInfo()
    batch = eval_batch_size(setup.cfg.run)
    train = extract_features(setup.model, eval_loader(setup.data.train, setup.data, batch, dist), autocast=setup.autocast)
    test = extract_features(setup.model, eval_loader(setup.split, setup.data, batch, dist), autocast=setup.autocast)
    results = linear_few_shot(*train, *test, shots=shots, draws=draws, seed=seed)
    return {str(k): {"mean": r.mean, "sd": r.sd, "accuracies": list(r.accuracies), "l2": list(r.l2),
                     "holdout": r.holdout} for k, r in results.items()}
