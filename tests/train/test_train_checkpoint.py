"""Checkpoints: a real SIGKILL mid-run, then --resume, ends bitwise equal to an uninterrupted run."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from train_helpers import tiny_overrides

from mlplab.train import make_config, train
from mlplab.train.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from mlplab.train.config import to_dict

CHILD = """
import sys, time
from mlplab.train import make_config, train

def hold(rec):  # after epoch 2 (its checkpoint is on disk) stay alive until the parent kills us
    if rec["epoch"] == 2:
        time.sleep(120)

train(make_config(sys.argv[1]), on_epoch_end=hold)
raise SystemExit("the run was not killed")
"""


def test_sigkill_then_resume_is_bitwise_identical(tmp_path, subprocess_env):
    extra = {"schedule.epochs": 4, "optim.name": "sgd", "optim.lr": 0.05, "model.kwargs.drop_path_rate": 0.1,
             "augment.hflip": True, "augment.crop_padding": 1}
    cfg = make_config(None, tiny_overrides(tmp_path / "runs", "killed", **extra))
    cfg_file = tmp_path / "killed.json"
    cfg_file.write_text(json.dumps(to_dict(cfg)))
    run_dir = Path(cfg.run.out_dir) / "killed"

    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(cfg_file)], env=subprocess_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            state = run_dir / "checkpoint" / "state.pt"
            if state.is_file() and torch.load(state, weights_only=True)["epoch"] == 2:
                break
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "no checkpoint within 90 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (run_dir / "results.json").exists()

    resumed = train(cfg, resume=True)
    reference = train(make_config(cfg, {"run.name": "reference"}))
    w1 = load_file(str(run_dir / "checkpoint" / "model.safetensors"))
    w2 = load_file(str(Path(reference["run_dir"]) / "checkpoint" / "model.safetensors"))
    assert set(w1) == set(w2)
    for k in w1:
        assert torch.equal(w1[k], w2[k]), k  # bitwise, fp32 on CPU
    assert [h["train_loss"] for h in resumed["history"]] == [h["train_loss"] for h in reference["history"]]
    assert resumed["test_acc"] == reference["test_acc"] and resumed["steps"] == reference["steps"]
    epochs = [json.loads(x)["epoch"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3, 4]


def test_kill_between_the_two_renames_is_recovered(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path, model, {"epoch": 1, "step": 5})
    os.replace(tmp_path / "checkpoint", tmp_path / "checkpoint.prev")  # as if killed mid-swap
    found = find_checkpoint(tmp_path)
    assert found == tmp_path / "checkpoint.prev"
    fresh = torch.nn.Linear(3, 2)
    state = load_checkpoint(found, fresh)
    assert state["epoch"] == 1 and torch.equal(fresh.weight, model.weight)
    (tmp_path / "checkpoint.new").mkdir()  # a half-written next checkpoint is ignored, then replaced
    save_checkpoint(tmp_path, model, {"epoch": 2, "step": 10})
    assert find_checkpoint(tmp_path) == tmp_path / "checkpoint"
    assert not (tmp_path / "checkpoint.new").exists()
    assert load_checkpoint(tmp_path / "checkpoint.prev", fresh)["epoch"] == 1  # the one before is kept
    save_checkpoint(tmp_path, model, {"epoch": 3, "step": 15})
    assert load_checkpoint(tmp_path / "checkpoint.prev", fresh)["epoch"] == 2
