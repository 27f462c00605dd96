"""Linear evaluation of a trained model's frozen pre-logit features (docs/science.md §7): the
linear few-shot accuracy of the MLP-Mixer paper and a closed-form ridge linear probe
(:mod:`mlplab.analysis.fewshot`), on the data of an evaluation setup (:mod:`mlplab.train.evaluation`).
``mlplab eval --few-shot/--probe`` and the ``linear_eval`` task both call :func:`linear_eval`.
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["linear_eval"]


def linear_eval(setup: Any, shots: Sequence[int] = (), *, probe: bool = False, draws: int = 5,
                seed: int = 0) -> dict[str, Any]:
    """``{"few_shot": {"k": {mean, sd, accuracies, l2, holdout}}, "probe": {acc, l2, holdout, train}}``
    for ``setup.model``'s features: the shots, the probe's training examples and the examples
    that choose the regulariser all come from the setup's training split, accuracy from the split
    it evaluates (``setup.split``), which must not be the training split."""
    from ..analysis.fewshot import extract_features, linear_few_shot, linear_probe
    from ..train.config import eval_batch_size
    from ..train.data import eval_loader
    from ..train.distributed import DistInfo

    if setup.split_name == "train":
        raise ValueError("linear evaluation fits on the training split; evaluate on the test or val split")
    batch = eval_batch_size(setup.cfg.run)
    features = lambda split: extract_features(  # noqa: E731
        setup.model, eval_loader(split, setup.data, batch, DistInfo()), autocast=setup.autocast)
    train, test = features(setup.data.train), features(setup.split)
    out: dict[str, Any] = {"features": int(train[0].shape[1]), "train_examples": len(train[1]),
                           "test_examples": len(test[1])}
    if shots:
        res = linear_few_shot(*train, *test, shots=shots, draws=draws, seed=seed)
        out["few_shot"] = {str(k): {"mean": r.mean, "sd": r.sd, "accuracies": list(r.accuracies), "l2": list(r.l2),
                                    "holdout": r.holdout} for k, r in res.items()}
    if probe:
        p = linear_probe(*train, *test, seed=seed)
        out["probe"] = {"acc": p.acc, "l2": p.l2, "holdout": p.holdout, "train": p.train}
    return out
