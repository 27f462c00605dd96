"""``linear_eval`` on an untrained model's checkpoint (no training: fast): every field is the
library's few-shot and probe fitted here on the training split's and the evaluated split's
pre-logit features, 5 draws from seed 0 unless told otherwise; the training split is refused as
the split evaluated. (Against features computed by hand in eval mode: test_eval_mode_oracle.py.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mlplab import create_model
from mlplab.analysis.fewshot import extract_features, linear_few_shot, linear_probe
from mlplab.experiments.linear_eval import linear_eval
from mlplab.interop import save_pretrained
from mlplab.train.data import eval_loader
from mlplab.train.distributed import DistInfo
from mlplab.train.evaluation import load_for_eval


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    model = create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=8, depth=1, drop_rate=0.5,
                         zero_head=False)
    return save_pretrained(model, tmp_path_factory.mktemp("le") / "m.safetensors")


def _setup(checkpoint, split="test"):
    """Three of the synthetic set's classes (about 100 training and 25 test images each): the
    10-class head is not used. In bf16, so that features taken without the setup's autocast differ."""
    return load_for_eval(checkpoint, {"data.dataset": "synthetic", "data.classes": [0, 1, 2], "run.eval_batch_size": 64,
                                      "run.precision": "bf16"}, split=split, head=False)


def _features(setup, split):
    """Pre-logit features of the split as the training data's evaluation loader gives them, under
    the setup's autocast (the same batches and precision: the λ chosen on near ties is the same);
    extract_features measures in eval mode (test_eval_mode_oracle.py)."""
    return extract_features(setup.model, eval_loader(split, setup.data, 64, DistInfo()), autocast=setup.autocast)


def test_every_field_is_the_librarys_on_eval_mode_features(checkpoint):
    setup = _setup(checkpoint)
    setup.model.train()  # the features must not depend on the mode the model is handed in
    got = linear_eval(setup, (1, 2), probe=True)
    train, test = _features(setup, setup.data.train), _features(setup, setup.split)
    shots = linear_few_shot(*train, *test, shots=(1, 2), draws=5, seed=0)
    probe = linear_probe(*train, *test, seed=0)
    n = len(test[1])
    assert got["features"] == 8 and got["train_examples"] == len(train[1]) == len(setup.data.train) > 200
    assert got["test_examples"] == n == len(setup.split) > 50
    assert set(got) == {"features", "train_examples", "test_examples", "few_shot", "probe"}
    assert set(got["few_shot"]) == {"1", "2"}
    for k in (1, 2):
        r, w = got["few_shot"][str(k)], shots[k]
        assert len(r["accuracies"]) == 5 and r["holdout"] == w.holdout and r["l2"] == list(w.l2)
        assert (r["accuracies"], r["mean"], r["sd"]) == (list(w.accuracies), w.mean, w.sd)
        assert r["mean"] == pytest.approx(np.mean(r["accuracies"]), abs=1e-12)
    assert got["probe"] == {"acc": probe.acc, "l2": probe.l2, "holdout": probe.holdout,
                            "train": len(train[1])}


def test_the_seed_and_draws_are_passed_on_and_nothing_is_fitted_unasked(checkpoint):
    setup = _setup(checkpoint)
    train, test = _features(setup, setup.data.train), _features(setup, setup.split)
    got = linear_eval(setup, (2,), probe=True, draws=3, seed=11)
    want = linear_few_shot(*train, *test, shots=(2,), draws=3, seed=11)[2]
    assert len(got["few_shot"]["2"]["accuracies"]) == 3 and got["few_shot"]["2"]["l2"] == list(want.l2)
    assert got["few_shot"]["2"]["accuracies"] == list(want.accuracies)
    probe = linear_probe(*train, *test, seed=11)
    assert probe.l2 != linear_probe(*train, *test, seed=0).l2  # a seed whose holdout chooses another λ
    assert got["probe"] == {"acc": probe.acc, "l2": probe.l2, "holdout": probe.holdout, "train": probe.train}
    bare = linear_eval(setup)
    assert set(bare) == {"features", "train_examples", "test_examples"}


def test_the_training_split_is_refused(checkpoint):
    with pytest.raises(ValueError, match=r"^linear evaluation fits on the training split; evaluate on the test or "
                                         r"val split$"):
        linear_eval(_setup(checkpoint, split="train"), (1,))
