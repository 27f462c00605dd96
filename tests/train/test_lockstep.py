"""Seeds in lockstep (mlplab.train.lockstep): each seed's trajectory, files and failure are its solo
run's. Tiny runs on synthetic data, each a few seconds."""
import json
import time

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import tiny_overrides

from mlplab.errors import Interrupted
from mlplab.train import checkpoint as ckpt
from mlplab.train import lockstep, make_config, train
from mlplab.train.lockstep import lockstep_unsupported, not_stackable, train_lockstep
from mlplab.train.loop import NonFiniteError
from mlplab.train.runplan import RunPlan
from mlplab.utils.machine import run_cpu_seconds

SEEDS = (0, 1, 2)
NOISY = {"model.kwargs.drop_path_rate": 0.3, "augment.crop_padding": 1, "augment.hflip": True, "augment.mixup": 0.5,
         "augment.label_smoothing": 0.1, "optim.grad_clip": 0.5}
MLP = {"model.name": "bottleneck_mlp", "model.kwargs": {"width": 16, "depth": 2, "drop_rate": 0.2}}


def _cfgs(tmp_path, where, seeds=SEEDS, **extra):
    def one(seed):
        o = {**tiny_overrides(tmp_path / where, f"seed={seed}"), "run.seed": seed, **extra}
        if o["model.name"] == "s_mixer":
            o["model.kwargs.seed"] = seed
        else:
            o = {k: v for k, v in o.items() if not k.startswith("model.kwargs.")}
        return make_config(None, o)
    return [one(s) for s in seeds]


def _weights(run_dir):
    return load_file(str(run_dir / "checkpoint" / ckpt.MODEL_FILE))


def _same_weights(a_dir, b_dir, rel=1e-10):
    """Every tensor of the two runs' last checkpoints agrees to ``rel`` (relative, float64 runs)."""
    a, b = _weights(a_dir), _weights(b_dir)
    assert a.keys() == b.keys()
    for k in b:
        assert a[k].dtype == torch.float64 or not a[k].is_floating_point(), k
        assert torch.linalg.vector_norm((a[k] - b[k]).double()) <= rel * torch.linalg.vector_norm(b[k].double()), k


def _stop_after(n):
    """An ``on_epoch_end`` that interrupts the run after ``n`` records of epoch 1 (one per seed)."""
    seen = []

    def stop(rec):
        seen.append(rec["epoch"])
        if seen.count(1) == n:
            raise KeyboardInterrupt
    return stop


@pytest.fixture
def float64(monkeypatch):
    """Runs build their models in float64 and feed them float64 images."""
    build = RunPlan.build_model

    def double(self, info):
        model = build(self, info).double()
        model.register_forward_pre_hook(lambda m, args: (args[0].double(),))
        return model

    monkeypatch.setattr(RunPlan, "build_model", double)


@pytest.mark.parametrize("extra", [{**NOISY}, {**MLP, "optim.grad_clip": 0.5, "augment.crop_padding": 1}],
                         ids=["s_mixer", "bottleneck_mlp"])
def test_each_seed_follows_its_solo_run_for_200_steps_in_float64(tmp_path, float64, extra):
    """Dropout, drop-path, crop, flip, mixup, label smoothing and clipping draw from each seed's own
    streams: after 200 steps every weight is its solo run's to 1e-10 (relative)."""
    common = {**extra, "data.train_subset": 800, "schedule.epochs": 8}  # 25 steps per epoch
    together = train_lockstep(_cfgs(tmp_path, "lock", (0, 1), **common))
    for seed, res in zip((0, 1), together):
        solo = train(_cfgs(tmp_path, "solo", (seed,), **common)[0])
        assert res["steps"] == solo["steps"] == 200 and res["lockstep"]["seeds"] == [0, 1]
        _same_weights(tmp_path / "lock" / f"seed={seed}", tmp_path / "solo" / f"seed={seed}")
        assert res["test_acc"] == solo["test_acc"]


def test_seeds_keep_their_own_folders_files_and_generator_streams(tmp_path, float64):
    run_cpu_seconds()  # what ran before this test is no run's
    t0 = time.process_time()
    res = train_lockstep(_cfgs(tmp_path, "lock", **NOISY))
    cpus = [r["cpu_s"] for r in res]  # the group's so far, as each seed's results are written
    assert 0 < cpus[0] <= cpus[1] <= cpus[2] <= time.process_time() - t0
    assert all("cpu_s are the group's" in r["lockstep"]["note"] for r in res)
    solo = [train(c) for c in _cfgs(tmp_path, "solo", **NOISY)]
    for seed, r, s in zip(SEEDS, res, solo):
        d = tmp_path / "lock" / f"seed={seed}"
        assert (r["run_dir"] == str(d)
                and json.loads((d / "results.json").read_text())["weights_sha256"] == r["weights_sha256"])
        assert json.loads((d / "config.json").read_text())["run"]["seed"] == seed
        assert len((d / "metrics.jsonl").read_text().splitlines()) == 3
        _same_weights(d, tmp_path / "solo" / f"seed={seed}")
        saved = torch.load(d / "checkpoint" / ckpt.STATE_FILE, weights_only=True)
        mine = torch.load(tmp_path / "solo" / f"seed={seed}" / "checkpoint" / ckpt.STATE_FILE, weights_only=True)
        assert torch.equal(saved["rng"][0]["torch"], mine["rng"][0]["torch"])  # its drop-path stream, where it stood
        assert r["implementation"]["lockstep"] == 3 and r["implementation"]["path"] == s["implementation"]["path"]


def test_a_diverged_seed_stops_alone_and_the_others_finish(tmp_path, monkeypatch, float64):
    load = lockstep.train_loader

    def poisoned(data, epoch, batch, seed, dist):
        for x, y in load(data, epoch, batch, seed, dist):
            yield (x * float("nan") if seed == 1 and epoch == 1 else x), y

    monkeypatch.setattr(lockstep, "train_loader", poisoned)
    res = train_lockstep(_cfgs(tmp_path, "lock", **{"run.checkpoint_every": 1}))
    assert isinstance(res[1], NonFiniteError)
    assert str(res[1]).startswith(f"non-finite loss or gradient at step 9 (epoch 2) of run "
                                  f"{tmp_path / 'lock' / 'seed=1'}; the last good checkpoint (epoch 1)")
    assert not (tmp_path / "lock" / "seed=1" / "results.json").exists()
    assert ckpt.find_checkpoint(tmp_path / "lock" / "seed=1").name == "checkpoint"  # epoch 1's, untouched
    for seed in (0, 2):
        train(_cfgs(tmp_path, "solo", (seed,), **{"run.checkpoint_every": 1})[0])
        _same_weights(tmp_path / "lock" / f"seed={seed}", tmp_path / "solo" / f"seed={seed}")


def test_a_lockstep_checkpoint_resumes_solo_and_a_solo_one_in_lockstep(tmp_path, float64):
    extra = {**NOISY, "run.checkpoint_every": 1}
    for c in _cfgs(tmp_path, "whole", **extra):
        train(c)
    with pytest.raises(Interrupted):  # after both seeds' first epoch (their checkpoints written)
        train_lockstep(_cfgs(tmp_path, "mixed", (0, 1), **extra), on_epoch_end=_stop_after(2))
    with pytest.raises(Interrupted):
        train(_cfgs(tmp_path, "mixed", (2,), **extra)[0], on_epoch_end=_stop_after(1))
    first, *rest = _cfgs(tmp_path, "mixed", **extra)
    train(first, resume=True)  # a lockstep checkpoint, resumed alone
    together = train_lockstep(rest, resume=True)  # one lockstep checkpoint and one solo, resumed together
    assert [r["lockstep"]["seeds"] for r in together] == [[1, 2]] * 2 and all(r["epochs"] == 3 for r in together)
    for seed in SEEDS:
        _same_weights(tmp_path / "mixed" / f"seed={seed}", tmp_path / "whole" / f"seed={seed}")


def test_seeds_resumed_at_different_epochs_train_in_one_group_each(tmp_path, capsys, float64):
    extra = {**NOISY, "run.checkpoint_every": 1, "run.log": "lines"}
    with pytest.raises(Interrupted):
        train(_cfgs(tmp_path, "r", (0,), **extra)[0], on_epoch_end=_stop_after(1))
    train_lockstep(_cfgs(tmp_path, "r", **extra), resume=[True, False, False])
    out = capsys.readouterr().err
    for c in _cfgs(tmp_path, "whole", **extra):
        train(c)
        _same_weights(tmp_path / "r" / c.run.name, tmp_path / "whole" / c.run.name)
    assert "lockstep of 2 seeds (1, 2)" in out and "lockstep of 1 seeds (0)" in out and "resumed at epoch 1" in out


def test_a_finished_seed_is_kept_and_the_rest_train(tmp_path):
    done = train(_cfgs(tmp_path, "r", (1,))[0])
    res = train_lockstep(_cfgs(tmp_path, "r"), resume=[False, True, False])
    assert res[1]["weights_sha256"] == done["weights_sha256"] and "lockstep" not in res[1]
    assert res[0]["lockstep"]["seeds"] == [0, 2]


def test_what_cannot_be_stacked_trains_one_after_another_and_says_why(tmp_path, capsys):
    cfgs = _cfgs(tmp_path, "rp", (0, 1), **{"model.name": "rp_s_mixer", "run.log": "lines"})
    assert lockstep_unsupported(cfgs[0]).startswith("random-permuted layers")
    res = train_lockstep(cfgs)
    assert "not in lockstep: random-permuted layers" in capsys.readouterr().err
    assert all("lockstep" not in r for r in res)
    a, b = _cfgs(tmp_path, "lr", (0, 1), **{"run.log": "lines"})
    res = train_lockstep([a, make_config(b, {"optim.lr": 0.1})])
    assert "not in lockstep: the runs differ in more than their seed (optim.lr)" in capsys.readouterr().err
    assert res[1]["history"][0]["lr"] != res[0]["history"][0]["lr"]


@pytest.mark.parametrize("overrides,why", [
    ({"run.ema_decay": 0.9}, "run.ema_decay"),
    ({"model.kwargs.rp_blocks": [0]}, "random-permuted layers"),
    ({"model.impl": "definition"}, "model.impl=definition"),
    ({"run.log_every_steps": 5}, "run.log_every_steps"),
])
def test_lockstep_unsupported_names_the_reason(tmp_path, overrides, why):
    assert lockstep_unsupported(_cfgs(tmp_path, "x", (0,), **overrides)[0]).startswith(why)
    assert lockstep_unsupported(_cfgs(tmp_path, "x", (0,))[0]) is None


def test_models_with_different_state_outside_their_weights_are_not_stackable():
    from mlplab import create_model

    a, b = (create_model("rp_s_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, seed=s) for s in (0, 1))
    assert "differs between the seeds" in not_stackable([a, b])
    c, d = (create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=c, depth=1) for c in (4, 8))
    assert not_stackable([c, d]) == "the seeds' models hold tensors of different shapes"
    assert not_stackable([c, create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1)]) is None
