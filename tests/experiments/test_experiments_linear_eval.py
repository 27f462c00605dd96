"""The ``linear_eval`` task: a trained run's frozen features, evaluated on the data the task's
``data.*`` keys name (here classes the run never saw), as ``mlplab eval --few-shot --probe`` does."""
from __future__ import annotations

import sys
from pathlib import Path

from mlplab.data import load_dataset
from mlplab.experiments.cost import TASK_S, cpu_machine
from mlplab.experiments.linear_eval import linear_eval
from mlplab.experiments.tasks import TASKS
from mlplab.train import make_config, train
from mlplab.train.evaluation import load_for_eval

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
from train_helpers import tiny_overrides  # noqa: E402


def test_linear_eval_task_reads_the_run_and_evaluates_other_classes(tmp_path):
    exp = tmp_path / "exp"
    train(make_config(None, tiny_overrides(exp / "pretrain", "c04", **{"data.classes": [0, 1, 2, 3, 4],
                                                                       "schedule.epochs": 1})))
    o = {"run": "pretrain/c04", "data.classes": [5, 6, 7, 8, 9], "data.train_subset": None, "shots": [1, 2],
         "draws": 2, "probe": True}
    got = TASKS["linear_eval"](o, exp / "transfer" / "run0")
    want = linear_eval(load_for_eval(exp / "pretrain" / "c04", {"data.classes": [5, 6, 7, 8, 9],
                                                                 "data.train_subset": None}, head=False),
                       [1, 2], probe=True, draws=2)
    assert got == {"run": "pretrain/c04", **want}
    synthetic = load_dataset("synthetic", "train")
    assert set(got["few_shot"]) == {"1", "2"} and got["train_examples"] == int((synthetic.labels >= 5).sum())
    assert TASK_S["linear_eval"](o, cpu_machine()) > 0
