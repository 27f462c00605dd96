"""One Slurm step of several tasks (srun, one task per GPU) is one DDP run: the ranks come from
Slurm's variables when torchrun's are absent (mlplab.train.distributed.launch_env), and two
processes started as srun starts them train one run (fake srun environment, gloo)."""
import json
import socket
import subprocess
import sys

import pytest
from train_helpers import tiny_overrides

from mlplab.errors import BadInput
from mlplab.train.distributed import Launch, first_host, launch_env

SRUN = {"SLURM_JOB_ID": "123456", "SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
        "SLURM_STEP_NODELIST": "gpu[007-008]", "SLURM_JOB_NODELIST": "gpu[007-008]"}


@pytest.mark.parametrize("nodes, first", [("gpu[003-008,012],cpu1", "gpu003"), ("node1", "node1"),
                                          ("a-1,a-2", "a-1"), ("n[7]", "n7"), ("r[1-2]c[3-4]", "r1c3")])
def test_the_first_host_of_a_node_list(nodes, first):
    assert first_host(nodes) == first


def test_srun_tasks_are_the_ranks_and_meet_on_the_steps_first_node():
    assert launch_env(SRUN) == Launch(rank=5, world_size=8, local_rank=1, init_method="tcp://gpu007:23456")
    assert launch_env({**SRUN, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}).init_method == "tcp://10.0.0.1:29400"


def test_torchrun_wins_and_a_batch_script_alone_is_one_process():
    torchrun = {**SRUN, "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "3"}  # srun torchrun: torchrun's roles
    assert launch_env(torchrun) == Launch(rank=3, world_size=4, local_rank=3)
    assert launch_env({**SRUN, "WORLD_SIZE": "1"}) == Launch()  # torchrun --nproc_per_node=1
    batch = {k: v for k, v in SRUN.items() if not k.startswith("SLURM_STEP")} | {"SLURM_NTASKS": "8"}
    assert launch_env(batch) == Launch()  # sbatch's own shell: no step, no peers to wait for
    assert launch_env({}) == Launch()
    with pytest.raises(BadInput, match="WORLD_SIZE=2 but RANK and LOCAL_RANK not set; launch with torchrun"):
        launch_env({"WORLD_SIZE": "2"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_srun_tasks_train_one_run_and_rank_0_keeps_the_files(tmp_path, subprocess_env):
    """``python -m mlplab.experiments.worker RUN`` in two processes with srun's variables (no
    torchrun): one DDP run of world size 2; only rank 0 writes results (and no error.txt)."""
    run_dir = tmp_path / "sweep" / "run"
    run_dir.mkdir(parents=True)
    base = {k: v for k, v in tiny_overrides(tmp_path, "x").items() if k not in ("run.out_dir", "run.name")}
    (run_dir / "spec.json").write_text(json.dumps({"name": "run", "sweep": "sweep", "task": "train",
                                                   "base": None, "overrides": base}))
    env = {**subprocess_env, "SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "localhost",
           "MASTER_PORT": str(_free_port())}
    procs = [subprocess.Popen([sys.executable, "-m", "mlplab.experiments.worker", str(run_dir)],
                              env={**env, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    res = json.loads((run_dir / "results.json").read_text())
    assert res["world_size"] == 2 and res["epochs"] == 3 and not (run_dir / "error.txt").exists()
