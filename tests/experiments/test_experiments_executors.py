"""run_sweep: one folder per run, skip finished, resume after a kill, failures recorded,
local worker processes, slurm through submitit's local executor, and a real training resume."""
import json
import os

import pytest

from mlplab.experiments import Sweep, product, run_sweep
from mlplab.experiments.executors import execute_run

ECHO = "echo"  # a registered task (mlplab.experiments.tasks.TASKS)


def _sweep(name="e", **kw):
    return Sweep(name, {"acc": 0.5}, [product(("value", [1, 2, 3]))], task=ECHO, **kw)


def test_every_run_in_its_own_folder_and_skip_finished(tmp_path):
    res = run_sweep(_sweep(), tmp_path, verbose=False)
    assert res.counts() == {"done": 3}
    for d in res.run_dirs.values():
        assert (d / "results.json").exists() and (d / "spec.json").exists()
        assert d.parent == tmp_path / "e"
    mtimes = {k: os.path.getmtime(d / "results.json") for k, d in res.run_dirs.items()}
    again = run_sweep(_sweep(), tmp_path, verbose=False)
    assert again.counts() == {"skipped": 3}
    assert {k: os.path.getmtime(d / "results.json") for k, d in again.run_dirs.items()} == mtimes
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["counts"] == {"skipped": 3}


def test_failed_run_is_recorded_and_others_continue(tmp_path):
    sw = Sweep("f", {}, [product(("value", [1, 2, 3]))], task=ECHO,
               derived=[lambda o: {"fail": o["value"] == 2}])
    res = run_sweep(sw, tmp_path, verbose=False)
    assert res.counts() == {"done": 2, "failed": 1}
    (bad,) = res.failed
    err = (res.run_dirs[bad] / "error.txt").read_text()
    assert "RuntimeError" in err and "asked to fail" in err
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    failed = [r for r in summary["runs"] if r["status"] == "failed"]
    assert len(failed) == 1 and "asked to fail" in failed[0]["error"]
    # a re-run retries only the failed one (and keeps the old trace aside)
    res2 = run_sweep(sw, tmp_path, verbose=False)
    assert res2.counts() == {"skipped": 2, "failed": 1}
    assert (res.run_dirs[bad] / "error.previous.txt").exists()


def test_resume_after_a_kill(tmp_path):
    # run 2 is "killed" half-way (KeyboardInterrupt after writing its checkpoint)
    sw = Sweep("k", {}, [product(("value", [1, 2, 3]))], task=ECHO,
               derived=[lambda o: {"interrupt": o["value"] == 2}])
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sw, tmp_path, verbose=False)
    summary = json.loads((tmp_path / "k" / "summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["done", "unfinished", "unfinished"]
    res = run_sweep(sw, tmp_path, verbose=False)
    assert res.counts() == {"skipped": 1, "done": 2}
    resumed = {k: json.loads((d / "results.json").read_text())["resumed"] for k, d in res.run_dirs.items()}
    assert sorted(resumed.values()) == [False, False, True]  # the killed run found its checkpoint


def test_folder_holding_other_overrides_is_refused(tmp_path):
    run_sweep(Sweep("x", {"acc": 0.5}, [("value", [1])], task=ECHO, name_keys=["value"]), tmp_path, verbose=False)
    with pytest.raises(ValueError, match="other overrides"):
        run_sweep(Sweep("x", {"acc": 0.9}, [("value", [1])], task=ECHO, name_keys=["value"]), tmp_path, verbose=False)


def test_bad_executor_and_jobs(tmp_path):
    with pytest.raises(ValueError, match="unknown executor"):
        run_sweep(_sweep(), tmp_path, executor="cloud")
    with pytest.raises(ValueError, match="jobs"):
        run_sweep(_sweep(), tmp_path, jobs=0)


def test_local_executor_processes(tmp_path):
    sw = Sweep("l", {}, [product(("value", [1, 2]))], task=ECHO, derived=[lambda o: {"fail": o["value"] == 2}])
    res = run_sweep(sw, tmp_path, jobs=2, executor="local", verbose=False)  # one round of two workers
    assert res.counts() == {"done": 1, "failed": 1}
    d = res.run_dirs[res.failed[0]]
    assert "asked to fail" in (d / "error.txt").read_text()
    assert (d / "log.txt").exists()


def test_slurm_executor_via_submitit_local(tmp_path):
    pytest.importorskip("submitit", reason="submitit not installed (pip install 'mlplab[slurm]')")
    sw = Sweep("s", {}, [product(("value", [1, 2]))], task=ECHO, derived=[lambda o: {"fail": o["value"] == 2}])
    res = run_sweep(sw, tmp_path, jobs=2, executor="slurm", slurm={"cluster": "local", "timeout_min": 5},
                    verbose=False)
    assert res.counts() == {"done": 1, "failed": 1}
    assert (tmp_path / ".submitit").is_dir()


def test_slurm_without_submitit_says_what_to_install(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "submitit":
            raise ImportError("no submitit")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match="pip install"):
        run_sweep(_sweep(), tmp_path, executor="slurm", verbose=False)


def test_killed_training_run_resumes_from_its_checkpoint(tmp_path):
    """A real (tiny) training run killed after epoch 1 of 2 continues from its checkpoint."""
    from mlplab.experiments.executors import run_dir_overrides
    from mlplab.experiments.sweep import expand
    from mlplab.train import make_config, train

    base = {"model.name": "s_mixer", "model.kwargs.hidden_dim": 8, "model.kwargs.num_tokens": 8,
            "model.kwargs.depth": 1, "data.dataset": "synthetic", "data.train_subset": 64, "data.test_subset": 32,
            "run.batch_size": 32, "schedule.epochs": 2, "run.log": "none", "run.tensorboard": False,
            "run.eval_every": 0}
    sw = Sweep("t", base, [("optim.lr", [0.01])])
    (spec,) = expand(sw)
    run_dir = tmp_path / "t" / spec.name
    cfg = make_config(None, {**spec.overrides, **run_dir_overrides(run_dir)})

    def kill(rec):
        if rec["epoch"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, on_epoch_end=kill)
    assert (run_dir / "checkpoint").is_dir() and not (run_dir / "results.json").exists()
    res = run_sweep(sw, tmp_path, verbose=False)
    assert res.counts() == {"done": 1}
    results = json.loads((run_dir / "results.json").read_text())
    assert results["epochs"] == 2 and len(results["history"]) == 2


def test_execute_run_skips_finished(tmp_path):
    run_sweep(_sweep(), tmp_path, verbose=False)
    d = next((tmp_path / "e").iterdir())
    d = d if d.is_dir() else next(p for p in (tmp_path / "e").iterdir() if p.is_dir())
    assert execute_run(d) == "skipped"


def test_local_executor_starts_the_longest_estimate_first(tmp_path, capsys, monkeypatch):
    """Graham's LPT order: a long run started last would keep one worker busy after the others end."""
    from mlplab.experiments import executors, expand
    from mlplab.utils.progress import RunTally

    handed = []  # the order the local executor's workers take the jobs in

    def local(jobs_, jobs, log, out, tally, names):
        handed.extend(names[dirs[0]] for dirs, _ in jobs_)
        return out

    monkeypatch.setattr(executors, "_run_local", local)
    est = {"e/value=1": 1.0, "e/value=2": 5.0, "e/value=3": 3.0}
    executors.run_specs(expand(_sweep()), tmp_path, jobs=2, executor="local", tally=RunTally(est), verbose=False)
    assert handed == ["value=2", "value=3", "value=1"]  # one sweep: the run's name
    executors.run_specs(expand(_sweep("f")), tmp_path, jobs=1, executor="inline", tally=RunTally(
        {"f/value=1": 1.0, "f/value=2": 5.0, "f/value=3": 3.0}))  # inline keeps the sweep's order
    started = [ln.split()[1] for ln in capsys.readouterr().out.splitlines() if ln.startswith("[")]
    assert started == ["value=1", "value=2", "value=3"]


def test_longest_first_shortens_the_makespan_the_estimate_counts():
    from mlplab.experiments.cost import longest_first, makespan

    secs = [1.0, 1.0, 2.0]
    assert longest_first(secs) == [2, 0, 1]  # ties keep the sweep's order
    assert makespan(secs, 2) == 3.0 and makespan([secs[i] for i in longest_first(secs)], 2) == 2.0


def test_progress_lines_name_the_sweep_where_a_stage_has_several(tmp_path, capsys):
    """A sweep and its 2x longer twin hold runs of the same names: each line says which it is."""
    from mlplab.experiments import expand
    from mlplab.experiments.executors import run_specs

    run_specs(expand(_sweep("e")) + expand(_sweep("e-longer")), tmp_path, jobs=1, executor="inline")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[")]
    assert [ln.split()[1] for ln in lines] == [f"{sw}/value={v}" for sw in ("e", "e-longer") for v in (1, 2, 3)]
