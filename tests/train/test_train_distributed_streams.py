"""Under torchrun (2 gloo CPU processes): identical initial weights, RP permutations and SW-MLP masks
on every rank, but each rank its own dropout / stochastic-depth and augmentation streams; with
accumulation and EMA, a run stopped and resumed under torchrun ends bitwise equal to one that was not."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import tiny_overrides

from mlplab.train import make_config
from mlplab.train.config import to_dict
from mlplab.train.data import train_loader
from mlplab.train.distributed import DistInfo

CHILD = """
import hashlib, json, os, sys, weakref
import torch
from mlplab.layers import common
from mlplab.train import loop, make_config, runplan, train

rank = os.environ["RANK"]
seen = {}

def build(self, info):  # the model as built, before DDP broadcasts rank 0's copy
    model = build_model(self, info)
    seen["init"] = loop.weights_digest(model)
    return model

build_model, runplan.RunPlan.build_model = runplan.RunPlan.build_model, build

def first_drop_path(self, x):  # the state of the generator the first stochastic-depth mask draws from
    if self.p > 0 and self.training and "drop_rng" not in seen:
        seen["drop_rng"] = hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()
    return forward(self, x)

forward, common.DropPath.forward = common.DropPath.forward, first_drop_path

def loader(*args, **kwargs):
    got = make_loader(*args, **kwargs)
    seen.setdefault("augment_seed", got.seed)
    return got

make_loader, loop.train_loader = loop.train_loader, loader

ddp = []

def wrap(run):  # count the gradient all-reduces DDP performs (one bucket per synced backward here)
    wrap_ddp(run)
    ddp.append(weakref.ref(run.ddp))

    def count(state, bucket):
        seen["allreduces"] = seen.get("allreduces", 0) + 1
        return allreduce_hook(state, bucket)

    run.ddp.register_comm_hook(None, count)

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
wrap_ddp, loop._wrap = loop._wrap, wrap

class Stop(Exception):
    pass

def stop(rec):
    if rec["epoch"] == 1:
        raise Stop

cfg, mode = make_config(sys.argv[1]), sys.argv[3]
try:
    res = train(cfg, resume=mode == "resume", on_epoch_end=stop if mode == "stop" else None)
    seen.update(sha=res["weights_sha256"], acc_ema=res["test_acc_ema"], loss_ema=res["test_loss_ema"],
                steps=res["steps"])
except Stop:  # while the exception (and its traceback) is held here
    seen["stopped"] = True
    seen["ddp_alive"] = ddp[0]() is not None
    seen["gloo_threads"] = [n for n in (open(f"/proc/self/task/{t}/comm").read().strip()
                                        for t in os.listdir("/proc/self/task")) if "gloo" in n]
with open(os.path.join(sys.argv[2], mode + "-rank" + rank + ".json"), "w") as f:
    json.dump(seen, f)
"""


def _torchrun(tmp_path, env, cfg, mode):
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps(to_dict(cfg)))
    (tmp_path / "child.py").write_text(CHILD)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(tmp_path / "child.py"), str(cfg_file), str(tmp_path), mode]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-6000:]
    return [json.loads((tmp_path / f"{mode}-rank{r}.json").read_text()) for r in range(2)]


def _config(tmp_path, name, model):
    extra = {"schedule.epochs": 2, "run.ema_decay": 0.9, "run.accumulate_steps": 2,
             "augment.hflip": True, "augment.crop_padding": 1, "augment.mixup": 0.5, **model}
    ov = tiny_overrides(tmp_path / "runs", name, **extra)
    if ov["model.name"] == "sw_mlp":
        del ov["model.kwargs.hidden_dim"]  # a Mixer's C; the SW-MLP has a width
    return make_config(None, ov)


@pytest.mark.slow
def test_torchrun_streams_per_rank_and_stop_resume_is_bitwise_identical(tmp_path, subprocess_env):
    cfg = _config(tmp_path, "rp", {"model.name": "rp_s_mixer", "model.kwargs.drop_path_rate": 0.2})
    stopped = _torchrun(tmp_path, subprocess_env, cfg, "stop")
    assert all(r["stopped"] for r in stopped)
    # the stopped run's DDP wrapper and process group were freed inside train (distributed.cleanup);
    # freed later by DDP's reducer, the group joins gloo's threads holding the GIL (a deadlock)
    assert not any(r["ddp_alive"] or r["gloo_threads"] for r in stopped), stopped
    resumed = _torchrun(tmp_path, subprocess_env, cfg, "resume")
    ranks = _torchrun(tmp_path, subprocess_env, make_config(cfg, {"run.name": "reference"}), "run")

    assert ranks[0]["init"] == ranks[1]["init"]  # weights and RP permutations (persistent buffers)
    assert ranks[0]["drop_rng"] != ranks[1]["drop_rng"]  # stochastic depth: one stream per rank
    assert ranks[0]["augment_seed"] != ranks[1]["augment_seed"]  # augmentation: one stream per rank
    assert ranks[0]["sha"] == ranks[1]["sha"]  # DDP keeps the replicas identical
    assert ranks[0]["acc_ema"] == ranks[1]["acc_ema"]  # and so their averages
    # accumulation: the first of the 2 micro-batches runs under no_sync, one all-reduce per step
    assert ranks[0]["allreduces"] == ranks[0]["steps"] == ranks[1]["allreduces"]

    assert resumed[0]["sha"] == ranks[0]["sha"] and resumed[0]["loss_ema"] == ranks[0]["loss_ema"]
    for name in ("model.safetensors", "ema.safetensors"):
        a = load_file(str(Path(cfg.run.out_dir) / "rp" / "checkpoint" / name))
        b = load_file(str(Path(cfg.run.out_dir) / "reference" / "checkpoint" / name))
        assert all(torch.equal(a[k], b[k]) for k in b), name


def test_masks_and_permutations_do_not_depend_on_the_global_generator():
    """What every rank builds identically without DDP's broadcast: SW-MLP masks and RP permutations
    come from streams derived from the model's seed, not from the (per-rank) global generator."""
    from mlplab import create_model

    def fixed(name, **kw):
        out = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            m = create_model(name, image_size=8, patch_size=4, **kw)
            out.append({k: v for k, v in m.state_dict().items() if "mask" in k or "perm" in k})
        assert out[0] and out[0].keys() == out[1].keys()
        assert all(torch.equal(out[0][k], out[1][k]) for k in out[0])

    fixed("sw_mlp", width=32, density=0.25, depth=2)
    fixed("rp_s_mixer", hidden_dim=8, depth=2)


def test_each_rank_draws_its_own_augmentation():
    from mlplab.train.data import RunData, Split

    split = Split(torch.zeros(8, 1, 4, 4, dtype=torch.uint8), torch.zeros(8, dtype=torch.long))
    info = type("Info", (), {"mean": (0.5,), "std": (0.5,)})()
    data = RunData(split, None, split, info, None)
    seeds = {train_loader(data, 0, 2, 7, DistInfo(rank=r, world_size=2)).seed for r in range(2)}
    assert len(seeds) == 2
