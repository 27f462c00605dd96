"""Two CPU processes (torchrun, gloo) train like one process with the same global batch."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import tiny_overrides

from mlplab.train import make_config, train
from mlplab.train.config import to_dict
from mlplab.train.distributed import DistInfo, shard_indices

CHILD = """
import json, os, sys
from mlplab.train import make_config, train
res = train(make_config(sys.argv[1]))
# each rank reports through its own file: stdout of torchrun's workers is not a reliable channel
with open(os.path.join(sys.argv[2], "rank" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump({"rank": os.environ["RANK"], "sha": res["weights_sha256"], "world": res["world_size"]}, f)
"""


def test_shards_partition_each_epoch_like_one_global_batch():
    n, B = 103, 8
    one = shard_indices(n, 3, 0, DistInfo())
    two = [shard_indices(n, 3, 0, DistInfo(rank=r, world_size=2)) for r in range(2)]
    assert len(two[0]) == len(two[1]) == n // 2
    for k in range(len(two[0]) // (B // 2)):  # batch k of the ranks together = batch k of one process
        union = torch.cat([t[k * B // 2:(k + 1) * B // 2] for t in two])
        assert set(union.tolist()) == set(one[k * B:(k + 1) * B].tolist())
    assert not torch.equal(shard_indices(n, 4, 0, DistInfo()), one)  # a new order every epoch


@pytest.mark.slow
def test_two_gloo_processes_match_one_process(tmp_path, subprocess_env):
    extra = {"optim.name": "sgd", "optim.lr": 0.05, "optim.nesterov": True, "schedule.epochs": 2,
             "run.checkpoint_every": 1}
    cfg = make_config(None, tiny_overrides(tmp_path / "runs", "ddp", **extra))
    cfg_file = tmp_path / "ddp.json"
    cfg_file.write_text(json.dumps(to_dict(cfg)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(tmp_path / "child.py"), str(cfg_file), str(tmp_path)]
    (tmp_path / "child.py").write_text(CHILD)
    out = subprocess.run(cmd, env=subprocess_env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[:6000]
    reports = sorted(tmp_path.glob("rank*.json"))
    assert len(reports) == 2, out.stdout[-2000:] + out.stderr[-4000:]
    ranks = [json.loads(r.read_text()) for r in reports]
    assert [r["rank"] for r in ranks] == ["0", "1"] and {r["world"] for r in ranks} == {2}
    assert ranks[0]["sha"] == ranks[1]["sha"]  # both ranks end with identical weights

    run_dir = Path(cfg.run.out_dir) / "ddp"
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved["world_size"] == 2 and saved["weights_sha256"] == ranks[0]["sha"]
    # MFU is per device: the two processes' FLOP/s over two devices' matmul rate (not one device's)
    assert saved["mfu"] == pytest.approx(saved["flops_per_s"] / (2 * saved["matmul_flops_per_s"]), rel=1e-12)
    single = train(make_config(cfg, {"run.name": "single"}))
    w2 = load_file(str(run_dir / "checkpoint" / "model.safetensors"))
    w1 = load_file(str(Path(single["run_dir"]) / "checkpoint" / "model.safetensors"))
    for k in w1:  # same global batches and averaged gradients: equal up to summation order
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-4, atol=1e-5, msg=k)
    for a, b in zip(saved["history"], single["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
    assert saved["test_acc"] == pytest.approx(single["test_acc"], abs=1 / 128 + 1e-9)


def test_cleanup_after_a_failure_frees_what_the_failed_frames_held(monkeypatch):
    """The DDP wrapper a failed run's frames hold (here any object) is freed before the process
    group is destroyed, through the exception's cause, context and group members (distributed.cleanup)."""
    import builtins
    import weakref

    from mlplab.train import distributed

    class Held:
        pass

    def fail():
        held = Held()  # a local of the failed frame, in a reference cycle (freed by gc only)
        held.me = held
        refs.append(weakref.ref(held))
        raise RuntimeError("inner")

    def outer(link: str):
        try:
            fail()
        except RuntimeError as inner:
            if link == "context":
                raise KeyboardInterrupt from None  # suppressed, but still the context
            caught = inner
        if link == "group":
            raise builtins.BaseExceptionGroup("ranks", [caught, KeyboardInterrupt()])  # the member only
        raise KeyboardInterrupt from caught  # the cause only: raised outside the handler

    alive_at_destroy = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "destroy_process_group",
                        lambda: alive_at_destroy.append([r() is not None for r in refs]))
    links = ("cause", "context") + (("group",) if sys.version_info >= (3, 11) else ())
    for link in links:
        refs: list = []
        try:
            outer(link)
        except BaseException as e:
            distributed.cleanup(distributed.DistInfo(rank=0, world_size=2), failed=e)
    assert alive_at_destroy == [[False]] * len(links)
