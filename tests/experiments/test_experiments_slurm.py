"""The Slurm executor's jobs (mlplab.experiments.slurm): a multi-GPU training run is one job of one
task per GPU; beside each run an ``srun torchrun`` script that a user can read and submit; with
``submit=false`` only the scripts. (The script run under a fake srun, with a real signal:
tests/train/test_train_preemption.py.)"""
import json
import subprocess
import sys
import types

import pytest

from mlplab.experiments import Sweep, executors, product, run_sweep
from mlplab.experiments.slurm import SBATCH_FILE, sbatch_script

ECHO = "echo"


def _spec_dir(tmp_path, overrides=None, task="train"):
    d = tmp_path / "sw" / "r0"
    d.mkdir(parents=True)
    (d / "spec.json").write_text(json.dumps({"name": "r0", "sweep": "sw", "task": task,
                                             "overrides": overrides or {"optim.lr": 0.1}}))
    return d


def test_the_script_is_one_torchrun_per_node_with_the_jobs_options(tmp_path):
    d = _spec_dir(tmp_path)
    text = sbatch_script(d, {"gpus_per_node": 4, "nodes": 2, "timeout_min": 600, "cpus_per_task": 8, "mem_gb": 200,
                             "slurm_partition": "gpu", "slurm_setup": ["module load cuda"], "tasks_per_node": 4,
                             "slurm_array_parallelism": 3, "slurm_additional_parameters": {"exclusive": True}},
                         python="/env/bin/python", cwd="/work")
    flags = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert flags == ["#SBATCH --job-name=r0", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                     "#SBATCH --gpus-per-node=4", "#SBATCH --time=600", "#SBATCH --partition=gpu",
                     "#SBATCH --cpus-per-task=32", "#SBATCH --mem=200G", "#SBATCH --exclusive",
                     "#SBATCH --signal=USR1@90", "#SBATCH --requeue", "#SBATCH --open-mode=append",
                     f"#SBATCH --output={d / 'slurm.out'}", "#SBATCH --chdir=/work"]
    assert f"#     sbatch {d / SBATCH_FILE}" in text and '"optim.lr": 0.1' in text  # how to submit, what it runs
    assert "module load cuda\n" in text
    command = text[text.index("srun "):].replace("\\\n", " ").split()
    assert command == ["srun", "/env/bin/python", "-m", "torch.distributed.run", '--nnodes="$SLURM_JOB_NUM_NODES"',
                       "--nproc-per-node=4", "--rdzv-backend=c10d", '--rdzv-id="$SLURM_JOB_ID"',
                       '--rdzv-endpoint="$head:$port"', "--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
                       "--shutdown-timeout=80", "-m", "mlplab.experiments.worker", str(d)]
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, check=False).returncode == 0


def test_a_cpu_run_gets_one_process_and_no_gpu_option(tmp_path):
    text = sbatch_script(_spec_dir(tmp_path), {"slurm_signal_delay_s": 200})
    assert "--gpus-per-node" not in text and "--nproc-per-node=1" in text
    assert "#SBATCH --signal=USR1@200" in text and "--shutdown-timeout=190" in text


def test_submit_false_writes_the_scripts_and_needs_no_submitit(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` fails
    sw = Sweep("s", {}, [product(("value", [1, 2]))], task=ECHO)
    res = run_sweep(sw, tmp_path, executor="slurm", slurm={"submit": False, "slurm_partition": "cpu"}, verbose=False)
    assert res.counts() == {}
    for d in res.run_dirs.values():
        assert "#SBATCH --partition=cpu" in (d / SBATCH_FILE).read_text() and not (d / "results.json").exists()
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["counts"] == {"unfinished": 2}
    with pytest.raises(ImportError, match=r"pip install 'mlplab\[slurm\]'.*or submit the script written beside each "
                                          r"run by hand: sbatch .*job\.sbatch"):
        run_sweep(sw, tmp_path, executor="slurm", verbose=False)


class FakeSubmitit:
    """submitit's AutoExecutor as far as the executor uses it: the parameters and the calls."""

    def __init__(self):
        self.params, self.calls = {}, []
        fake = self

        class Job:
            def __init__(self, fn, arg):
                self.job_id, self._out = "1", fn(arg)

            def results(self):
                return [self._out]

        class AutoExecutor:
            def __init__(self, folder, cluster=None):
                pass

            def update_parameters(self, **kw):
                fake.params.update(kw)

            def map_array(self, fn, args):
                fake.calls.append(fn)
                return [Job(fn, a) for a in args]

        self.module = types.SimpleNamespace(AutoExecutor=AutoExecutor)


@pytest.mark.parametrize("task, tasks_per_node, procs", [("train", 4, 4), (ECHO, None, 1)])
def test_a_multi_gpu_training_run_is_one_job_of_one_task_per_gpu(tmp_path, monkeypatch, task, tasks_per_node, procs):
    """An analysis task in a job of several GPUs stays one process (it uses one GPU)."""
    fake = FakeSubmitit()
    monkeypatch.setitem(sys.modules, "submitit", fake.module)
    monkeypatch.setattr(executors, "execute_run", lambda run_dir: "done")
    d = _spec_dir(tmp_path, task=task)
    out = executors._run_slurm([d], 1, tmp_path, lambda m: None, {"gpus_per_node": 4, "nodes": 2}, {},
                               executors.RunTally(total=1), {d: d.name})
    assert out == {d: "done"} and isinstance(fake.calls[0], executors.SlurmRun)
    assert fake.params.get("tasks_per_node") == tasks_per_node and fake.params["nodes"] == 2
    assert f"--nproc-per-node={procs} " in (d / SBATCH_FILE).read_text()


def test_a_slurm_run_is_checkpointable_by_submitit():
    submitit = pytest.importorskip("submitit")
    again = executors.SlurmRun().checkpoint("/runs/r0")
    assert isinstance(again, submitit.helpers.DelayedSubmission)
    assert isinstance(again.function, executors.SlurmRun) and again.args == ("/runs/r0",)
