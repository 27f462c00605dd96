"""``specs/pretraining.py``, the pieces sm-transfer and sm-batch-size share: the rows that point a
later stage at each pre-trained run, seeds and downstream errors read from made-up runs, the
bottleneck MLP's overrides, and both probe sweeps expanded into their runs, each run written out
here (its folder, overrides and task)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from mlplab.experiments.aggregate import RunRecord
from mlplab.experiments.recipes import Scale
from mlplab.experiments.specs import pretraining as pt
from mlplab.experiments.sweep import Sweep, expand


def test_fashion_mnist_split_and_imagenet_21k():
    assert pt.FM_PRE == {"data.classes": [0, 1, 2, 3, 4]} and pt.FM_DOWN == {"data.classes": [5, 6, 7, 8, 9]}
    assert pt.IN21K == {"data.dataset": "packed", "data.image_size": 64}


def _pre() -> Sweep:
    return Sweep("pre", {"x": 1}, [("meta.da", [True, False]), ("meta.n", [10, 20])], seeds=[0, 1])


def test_pretrained_rows_point_at_each_run():
    rows = pt.pretrained_rows(_pre(), ["meta.da", "meta.n", "run.seed", "absent"], "run")
    want = [{"meta.da": da, "meta.n": n, "run.seed": s, "absent": None,
             "run": f"pre/da={str(da).lower()},n={n},seed={s}"}
            for da in (True, False) for n in (10, 20) for s in (0, 1)]
    assert rows == want
    assert pt.pretrained_rows(_pre(), [], "pretrained")[0] == {"pretrained": "pre/da=true,n=10,seed=0"}


def _rec(overrides, results):
    return RunRecord("probe", "x", Path("."), overrides, results=results)


def test_run_seed_reads_run_seed_then_meta_seed():
    assert pt.run_seed(_rec({"run.seed": 3, "meta.seed": 5}, {})) == 3
    assert pt.run_seed(_rec({"meta.seed": 5}, {})) == 5
    assert pt.run_seed(_rec({}, {})) == 0
    assert isinstance(pt.run_seed(_rec({"run.seed": 2.0}, {})), int)


def test_downstream_error_is_the_probe_else_the_test_accuracy():
    assert pt.downstream_error(_rec({}, {"probe": {"acc": 0.8}, "test_acc": 0.5})) == pytest.approx(20.0)
    assert pt.downstream_error(_rec({}, {"probe": {"acc": 0}, "test_acc": 0.5})) == pytest.approx(100.0)
    assert pt.downstream_error(_rec({}, {"probe": {"acc": None}, "test_acc": 0.75})) == pytest.approx(25.0)
    assert pt.downstream_error(_rec({}, {"probe": 0.9, "test_acc": 0.75})) == pytest.approx(25.0)
    assert pt.downstream_error(_rec({}, {"test_acc": 0.75})) == pytest.approx(25.0)
    assert math.isnan(pt.downstream_error(_rec({}, None)))


def test_downstream_errors_by_seed_of_the_matching_finished_runs():
    runs = [_rec({"meta.da": True, "meta.n": 10, "run.seed": 0}, {"probe": {"acc": 0.9}}),
            _rec({"meta.da": True, "meta.n": 10, "run.seed": 1}, None),  # unfinished
            _rec({"meta.da": True, "meta.n": 10, "meta.seed": 2}, {"test_acc": 0.7}),
            _rec({"meta.da": True, "meta.n": 20, "run.seed": 3}, {"test_acc": 0.6}),
            _rec({"meta.da": False, "meta.n": 10, "run.seed": 4}, {"test_acc": 0.5})]
    assert pt.downstream_errors(runs, meta__da=True, meta__n=10) == pytest.approx({0: 10.0, 2: 30.0})
    assert pt.downstream_errors(runs, meta__da=True) == pytest.approx({0: 10.0, 2: 30.0, 3: 40.0})
    assert pt.downstream_errors(runs) == pytest.approx({0: 10.0, 2: 30.0, 3: 40.0, 4: 50.0})
    assert pt.downstream_errors(runs, meta__n=99) == {}


def test_bottleneck_overrides():
    o = pt.bottleneck(768.0, 12.0)
    assert o == {"model.name": "bottleneck_mlp", "model.kwargs.width": 768, "model.kwargs.depth": 12}
    assert [type(o[k]) for k in ("model.kwargs.width", "model.kwargs.depth")] == [int, int]


ROWS = [{"meta.da": True, "run.seed": 0, "run": "pre/a"}, {"meta.da": False, "run.seed": 1, "run": "pre/b"}]


@pytest.mark.parametrize("subset", [None, 128])
def test_probe_sweep_one_ridge_probe_per_pretrained_run(subset):
    sc = Scale("cpu", "fashion_mnist", train_subset=subset)
    sw = pt.probe_sweep(sc, ROWS, pt.FM_DOWN, ["meta.da", "run.seed"], "ridge probes")
    assert (sw.name, sw.task, sw.epochs, sw.description, list(sw.seeds), sw.seed_keys) == \
        ("probe", "linear_eval", 1, "ridge probes", [0], ("meta.eval_seed",))
    runs = expand(sw)
    assert [r.name for r in runs] == ["da=true,seed=0", "da=false,seed=1"]
    assert [r.task for r in runs] == ["linear_eval"] * 2
    assert [r.overrides for r in runs] == [
        {"probe": True, "data.train_subset": subset, "data.classes": [5, 6, 7, 8, 9], "meta.i": i,
         "meta.eval_seed": 0, **row} for i, row in enumerate(ROWS)]


def test_lion_probe_sweep_fine_tunes_a_new_head_per_pretrained_run():
    recipe = {"optim.name": "lion", "schedule.epochs": 5}
    sw = pt.lion_probe_sweep(ROWS, recipe, ["meta.da", "run.seed"], "lion probes")
    assert (sw.name, sw.task, sw.epochs, sw.description, list(sw.seeds), sw.seed_keys) == \
        ("probe", "finetune", 5.0, "lion probes", [0], ("meta.probe_seed",))
    assert isinstance(sw.epochs, float)
    runs = expand(sw)
    assert [r.name for r in runs] == ["da=true,seed=0", "da=false,seed=1"]
    assert [r.task for r in runs] == ["finetune"] * 2
    assert [r.overrides for r in runs] == [{**recipe, "meta.i": i, "meta.probe_seed": 0, **row}
                                           for i, row in enumerate(ROWS)]
    assert pt.lion_probe_sweep(ROWS, {}, ["run.seed"], "").epochs == 1.0
