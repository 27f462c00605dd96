"""The specs as named data: settings per scale, registered derived keys and tasks, the ImageNet
ids, the lr search and the cost model read from their data files."""
import math

import pytest

from mlplab.errors import BadInput
from mlplab.experiments import EXPERIMENTS, expand, list_experiments, plan_experiment
from mlplab.experiments.derived import DERIVED, Derive, derive
from mlplab.experiments.recipes import Scale
from mlplab.experiments.tasks import TASKS, get_task


def test_scale_has_no_positional_pick():
    assert not hasattr(Scale, "pick")


@pytest.mark.parametrize("id", list_experiments())
def test_every_sweep_derives_by_registered_name_and_runs_a_registered_task(id):
    exp = EXPERIMENTS[id]
    for scale in exp.scales:
        _, _, plan = plan_experiment(id, scale, check_available=False)
        for sw in plan.sweeps:
            assert sw.task == "train" or sw.task in TASKS, f"{id}/{sw.name}: task {sw.task!r}"
            for d in sw.derived:
                assert isinstance(d, Derive) and d.name in DERIVED, f"{id}/{sw.name}: derived {d!r}"


def test_derive_lookup_match_and_an_unknown_name():
    assert derive("lookup", key="k", table={1: {"a": 2}})({"k": 1}) == {"a": 2}
    assert derive("lookup", key="i", table=[{"a": 0}, {"a": 1}])({"i": 1}) == {"a": 1}
    rows = [{"x": 1, "y": 2, "z": "first"}, {"x": 1, "y": 3, "z": "second"}]
    assert derive("match", keys=["x", "y"], rows=rows)({"x": 1, "y": 3})["z"] == "second"
    with pytest.raises(KeyError, match="no row with x=2"):
        derive("match", keys=["x"], rows=rows)({"x": 2})
    with pytest.raises(ValueError, match="unknown derived key 'nope'; registered: .*budget_models"):
        derive("nope")
    assert repr(derive("lookup", key="k", table={})) == "derive('lookup', key=…, table=…)"


def test_tasks_by_name_or_module_function_and_each_has_an_estimate():
    from mlplab.experiments.cost import TASK_S

    assert get_task("cka") is TASKS["cka"]
    assert get_task("mlplab.experiments.tasks:echo_task") is TASKS["echo"]
    assert not set(TASKS) - set(TASK_S), "a registered task has no estimate in cost.TASK_S"
    assert not set(TASK_S) - set(TASKS), "cost.TASK_S estimates a task that is not registered"
    with pytest.raises(ValueError, match="unknown task 'spectra'; registered tasks: train, cka"):
        get_task("spectra")


def test_each_table_is_written_only_by_its_own_module():
    """Tasks are registered with ``@task`` in tasks.py and estimated in cost.py's ``TASK_S``
    literal: no module writes an entry into either table at import time."""
    import ast
    from pathlib import Path

    import mlplab

    own = {"TASKS": "tasks.py", "TASK_S": "cost.py"}
    writes = []
    for path in sorted(Path(mlplab.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for tgt in targets:
                if isinstance(tgt, ast.Subscript):
                    table = tgt.value.id if isinstance(tgt.value, ast.Name) else getattr(tgt.value, "attr", None)
                    if table in own and not (path.name == own[table] and path.parent.name == "experiments"):
                        writes.append(f"{path.name}:{node.lineno} writes {table}")
    assert not writes


def test_imagenet_variants_are_their_own_ids():
    _, sc, plan = plan_experiment("fig6-imagenet", "paper", check_available=False)
    assert sc.dataset == "imagefolder"
    specs = expand(plan.sweeps[0])
    assert sorted(s.overrides["meta.P"] for s in specs) == [7, 8, 14, 16, 28, 32]
    assert all(s.overrides["meta.S"] == (224 // s.overrides["meta.P"]) ** 2 for s in specs)
    assert {s.overrides["data.image_size"] for s in specs} == {224}
    _, _, plan = plan_experiment("table1-imagenet", "paper", check_available=False)
    labels = {s.overrides["meta.label"] for s in expand(plan.sweeps[0])}
    assert labels == {"Mixer-B/16 narrow", "Mixer-B-W wide"}
    for id in ("fig6-imagenet", "table1-imagenet"):
        assert EXPERIMENTS[id].scales == ("smoke", "paper")
        with pytest.raises(BadInput, match=f"{id} has no cpu scale .* run `mlplab reproduce {id[:-9]} --scale cpu`"):
            plan_experiment(id, "cpu", check_available=False)
    # the CIFAR ids send ImageNet to them instead of planning CIFAR-style models on it
    for id in ("fig6", "table1"):
        with pytest.raises(BadInput, match=f"run `mlplab reproduce {id}-imagenet --scale paper`"):
            plan_experiment(id, "paper", dataset="imagefolder", check_available=False)


def test_fig6_paper_settings_per_dataset():
    def first(ds):
        _, _, plan = plan_experiment("fig6", "paper", dataset=ds, check_available=False)
        o = expand(plan.sweeps[0])[0].overrides
        return o["meta.omega"], o["optim.name"], o["optim.lr"], o["schedule.epochs"]

    assert first("cifar10") == (2**21, "adamw", 0.02, 2000)
    assert first("cifar100") == first("mnist") == (2**21, "sgd", 0.1, 600)  # CIFAR-100's for any other
    assert first("stl10") == (2**18, "sgd", 0.1, 2000)


def test_cpu_lr_is_the_best_of_the_search_table():
    from mlplab.experiments.recipes import DEFAULT_LR, cpu_lr, lr_search_table

    t, lrs = lr_search_table(), cpu_lr()
    for key, errs in t["val_error"].items():
        best = min((e, lr) for e, lr in zip(errs, t["grid"]) if isinstance(e, float))[1]
        assert lrs[key] == best
    assert lrs["rp_s_mixer"] == lrs["s_mixer"] == 3e-2 and lrs["default"] == DEFAULT_LR


def test_paper_machine_reproduces_the_papers_table_s3():
    """R, τ0 and the RP slowdown of the V100 are solved from the paper's Table S.3: the model then
    gives back its three times per epoch."""
    from mlplab.experiments.cost import calibration, paper_machine

    t, v100 = calibration()["paper_machine"], paper_machine()
    slow = {"mixer": 1.0, "rp_mixer": v100.rp_slowdown, "sw_mlp": 1.0}
    for k in ("mixer", "rp_mixer", "sw_mlp"):
        est = t["examples"] * v100.example_s(t[k]["flops"], t[k]["activations"], slow[k])
        assert math.isclose(est, t[k]["s_per_epoch"], rel_tol=1e-12)
    assert 1e12 < v100.rate < 1.5e13  # a V100's fp32/mixed matmul rate, not a CPU's


def test_analysis_tasks_are_estimated_by_their_work():
    from mlplab.experiments import estimate_cost

    _, _, plan = plan_experiment("figS1", "cpu", dataset="fashion_mnist", check_available=False)
    spectrum = plan.sweeps[1]
    (twenty,) = {estimate_cost(type(plan)([[spectrum]]), "cpu")["est_s"]}
    spectrum.base = {**spectrum.base, "trials": 40}
    assert estimate_cost(type(plan)([[spectrum]]), "cpu")["est_s"] > twenty
