"""The executors train a sweep point's seeds in lockstep where it applies (``lockstep`` auto / on /
off), each seed in its own folder with its solo run's name and outcome; the cost estimate counts
such a group as one job."""
import json

import pytest

from mlplab.experiments import Sweep, cost, product, run_sweep
from mlplab.experiments.executors import execute_group, lockstep_note
from mlplab.experiments.plan import Plan
from mlplab.experiments.sweep import RunSpec, expand, seed_groups
from mlplab.train import lockstep

TINY = {"model.name": "s_mixer", "model.kwargs.hidden_dim": 8, "model.kwargs.patch_size": 4, "model.kwargs.depth": 1,
        "data.dataset": "synthetic", "data.image_size": 8, "data.train_subset": 64, "data.test_subset": 32,
        "run.batch_size": 32, "schedule.epochs": 1, "run.log": "none", "run.tensorboard": False, "run.threads": 1,
        "run.device": "cpu", "run.precision": "fp32", "run.checkpoint_every": 1}


def _sweep(lrs=(0.01, 0.02), **base):
    return Sweep("p", {**TINY, **base}, [product(("optim.lr", list(lrs)))], seeds=[0, 1],
                 seed_keys=("run.seed", "model.kwargs.seed"))


def test_seed_groups_are_the_points_of_a_sweep_in_order():
    specs = expand(_sweep())
    groups = seed_groups(specs)
    assert [[s.name for s in g] for g in groups] == [
        ["lr=0.01,run.seed=0,model.kwargs.seed=0", "lr=0.01,run.seed=1,model.kwargs.seed=1"],
        ["lr=0.02,run.seed=0,model.kwargs.seed=0", "lr=0.02,run.seed=1,model.kwargs.seed=1"]]
    other = RunSpec("x", dict(specs[0].overrides), sweep="q")  # another sweep: never the same point
    assert len(seed_groups([specs[0], other])) == 2


@pytest.mark.parametrize("executor,lrs", [("inline", (0.01, 0.02)), ("local", (0.01,))])
def test_lockstep_on_trains_each_point_together_into_the_solo_runs_folders(tmp_path, executor, lrs, capsys):
    on = run_sweep(_sweep(lrs), tmp_path / "on", executor=executor, lockstep="on")
    off = run_sweep(_sweep(lrs), tmp_path / "off", lockstep="off", verbose=False)
    assert on.counts() == off.counts() == {"done": 2 * len(lrs)}
    assert sorted(d.name for d in on.run_dirs.values()) == sorted(d.name for d in off.run_dirs.values())
    for key, d in on.run_dirs.items():
        res, solo = (json.loads((x / "results.json").read_text()) for x in (d, off.run_dirs[key]))
        assert res["lockstep"]["seeds"] == [0, 1] and "lockstep" not in solo
        assert res["test_acc"] == solo["test_acc"] and res["train_loss"] == pytest.approx(solo["train_loss"], rel=1e-5)
    assert "in lockstep (2 seeds)" in capsys.readouterr().out
    if executor == "local":
        first, second = sorted(on.run_dirs.values())[:2]
        assert "trained in lockstep with" in (second / "log.txt").read_text()


def test_a_diverged_seed_fails_alone_with_its_trace(tmp_path, monkeypatch):
    load = lockstep.train_loader

    def poisoned(data, epoch, batch, seed, dist):
        for x, y in load(data, epoch, batch, seed, dist):
            yield (x * float("nan") if seed == 1 else x), y

    monkeypatch.setattr(lockstep, "train_loader", poisoned)
    res = run_sweep(_sweep(), tmp_path, lockstep="on", verbose=False)
    assert res.counts() == {"done": 2, "failed": 2}
    for key in res.failed:
        assert ("run.seed=1" in key
                and "NonFiniteError: non-finite loss or gradient" in (res.run_dirs[key] / "error.txt").read_text())
    dirs = sorted(res.run_dirs.values())
    assert execute_group(dirs[:2])[str(dirs[0])] == "skipped"


def test_lockstep_note_says_why_a_point_trains_one_seed_after_another(monkeypatch):
    spec = expand(_sweep())[0]
    monkeypatch.setattr(cost, "calibration", lambda: {"lockstep": {"factor": {"s_mixer": 0.8, "sw_mlp": 1.2}}})
    assert lockstep_note(spec, "off") == "lockstep off"
    assert lockstep_note(spec, "auto") is None and lockstep_note(spec, "on") is None
    rp = RunSpec("r", {**spec.overrides, "model.name": "rp_s_mixer"})
    assert lockstep_note(rp, "on").startswith("random-permuted layers")
    sw = RunSpec("w", {**{k: v for k, v in spec.overrides.items() if not k.startswith("model.")},
                       "model.name": "sw_mlp", "model.kwargs.width": 16, "model.kwargs.patch_size": 4})
    assert lockstep_note(sw, "auto") == "lockstep was measured at 1.20x the time of one seed after another for sw_mlp"
    assert lockstep_note(sw, "on") is None
    mlp = RunSpec("m", {**{k: v for k, v in spec.overrides.items() if not k.startswith("model.")}, "model.name": "mlp"})
    assert lockstep_note(mlp, "auto") == "lockstep is not measured for mlp"
    assert lockstep_note(RunSpec("e", {}, task="echo"), "auto") == "an analysis task"
    with pytest.raises(ValueError, match="unknown lockstep"):
        run_sweep(_sweep(), "unused", lockstep="sometimes")


def test_the_estimate_counts_a_point_in_lockstep_as_one_job_at_the_measured_factor(monkeypatch):
    plan = Plan(stages=[[_sweep()]])
    alone = cost.estimate_cost(plan, "cpu", jobs=1)
    monkeypatch.setattr(cost, "calibration", lambda: {"lockstep": {"factor": {"s_mixer": 0.5}}})
    assert cost.estimate_cost(plan, "cpu", jobs=1)["est_s"] == pytest.approx(0.5 * alone["est_s"])
    assert cost.estimate_cost(plan, "cpu", jobs=1, lockstep="off") == alone
    assert cost.estimate_cost(plan, "cpu", jobs=2)["est_s"] == pytest.approx(0.5 * alone["est_s"] / 2)


def test_runs_alone_keep_the_sweeps_order_and_a_stacked_point_takes_its_first_seeds_place(tmp_path):
    """A sweep whose seeds are its outer axis (each seed a whole trend: fig6) runs in that order
    when its points train alone; stacked, each point is one job where its first seed stood."""
    from mlplab.experiments.executors import _jobs, _key

    by_point = expand(_sweep(lrs=(0.01, 0.02)))
    specs = [by_point[0], by_point[2], by_point[1], by_point[3]]  # seed 0 of both points, then seed 1
    dirs = {_key(s): tmp_path / s.name for s in specs}
    alone = _jobs(specs, dirs, "off")
    assert [[d.name for d in ds] for ds, _ in alone] == [[s.name] for s in specs]
    stacked = _jobs(specs, dirs, "on")
    assert [[d.name for d in ds] for ds, _ in stacked] == [[by_point[0].name, by_point[1].name],
                                                          [by_point[2].name, by_point[3].name]]
    assert cost._job_seconds(specs, "cpu", _sweep(), "off") == [cost.spec_s(s, "cpu", None, 1) for s in specs]
