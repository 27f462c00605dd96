"""The catalogue of bad inputs and faults (issue 10): each is one or two lines on stderr, exit
status 2 for bad input and 1 for a runtime failure, and nothing is lost or left behind.

Every case runs the real ``mlplab`` entry point in-process on ``synthetic_tiny`` (8x8 synthetic
images, a 2-block S-Mixer; well under a second per run) and compares the output folder before and
after."""
from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path

import pytest
import torch

import mlplab
from mlplab import cli
from mlplab.train import checkpoint as ckpt
from mlplab.train import loop, rundir

TINY = ["synthetic_tiny", "run.log=none", "run.device=cpu", "run.threads=1"]


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file's bytes (the lock file holds only the PID of whoever last held it)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != rundir.LOCK_FILE}


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _assert_message(err: str, pattern: str, command: str) -> None:
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2, err
    assert lines[0].startswith(f"mlplab {command}: error: "), err
    assert "Traceback" not in err
    import re
    assert re.search(pattern, err), (pattern, err)


def _finished_run(out_dir: Path, capsys, name: str = "done") -> Path:
    rc, _, _ = _run(["train", *TINY, f"run.out_dir={out_dir}", f"run.name={name}", "schedule.epochs=1"], capsys)
    assert rc == 0
    return out_dir / name


# ----------------------------------------------------------------------------- bad input: exit 2

CONFIG_FILES = {
    "empty": (b"", r"config file .*bad\.json.* is empty"),
    "not_json": (b"{model: s_mixer", r"config file .*bad\.json.* is not valid JSON"),
    "latin1": ('{"run": {"name": "caf\u00e9"}}'.encode("latin-1"), r"config file .*bad\.json.* is not UTF-8"),
    "list": (b"[1, 2]", r"config file .*bad\.json.* holds a JSON list"),
    "bad_section": (b'{"optimiser": {}}', r"unknown config section 'optimiser'"),
}


@pytest.mark.parametrize("overrides, pattern", [
    (["optim.lrr=1"], r"unknown config key 'optim\.lrr'; did you mean 'optim\.lr'\? valid keys"),
    (["optim.lr=fast"], r"config key 'optim\.lr'.*expected"),
    (["data.dataset=cifar-10"], r"unknown dataset 'cifar-10'; did you mean 'cifar10'"),
    (["model.kwargs.patch_size=5"], r"patch_size=5 does not divide image_size=8"),
    (["model.name=sw_mlp", "model.kwargs={\"density\": 0.0}"], r"density p must be in \(0, 1\]"),
    (["run.batch_size=100000"], r"fewer than one batch of 100000; lower run\.batch_size"),
    (["model.name=mlp", "model.kwargs={\"width\": 400000}"], r"parameters, needing about .* GiB.*smaller model"),
    (["schedule.steps=10"], r"exactly one training length"),
    (["optim.lr=-1"], r"optim\.lr must be a finite number > 0"),
    (["run.name=a/b"], r"run\.name 'a/b' must be a plain folder name"),
    (["model.name=no_such_model"], r"no_such_model"),
    (["model.kwargs.widht=3"], r"unknown override\(s\) \['widht'\]"),
    (["model.kwargs.image_size=32"], r"model\.kwargs\.image_size=32 does not match.*data\.image_size=32"),
    (["model.kwargs.in_chans=1"], r"model\.kwargs\.in_chans=1 does not match"),
    (["run.divergence_factor=0"], r"run\.divergence_factor must be > 0"),
    (["run.nan_check_every=0"], r"run\.nan_check_every must be >= 1"),
    (["data.val_fraction=1.5"], r"data\.val_fraction must be in \[0, 1\)"),
    (["--resume", "--overwrite"], r"--resume and --overwrite exclude each other"),
    (["model.name=sw_mlp", "model.kwargs={\"density\": 0.0}", "--print-config"], r"density p must be in"),
    (["data.dataset=cifar-10", "--print-config"], r"unknown dataset 'cifar-10'"),
])
def test_bad_train_input_is_refused_before_anything_is_written(tmp_path, capsys, overrides, pattern):
    out = tmp_path / "runs"
    rc, stdout, err = _run(["train", *TINY, f"run.out_dir={out}", *overrides], capsys)
    assert rc == 2
    _assert_message(err, pattern, "train")
    assert stdout == ""  # --print-config prints nothing for an invalid config
    assert not out.exists()  # no folder left to refuse the corrected retry


@pytest.mark.parametrize("kind", sorted(CONFIG_FILES))
def test_bad_config_file_names_the_file(tmp_path, capsys, kind):
    data, pattern = CONFIG_FILES[kind]
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    rc, _, err = _run(["train", str(path), f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2
    _assert_message(err, pattern, "train")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("argv, pattern", [
    (["train", "no_such_config"], r"unknown config 'no_such_config'"),
    (["train", "missing.json"], r"config file 'missing\.json' does not exist"),
    (["reproduce", "fig99"], r"fig99"),
])
def test_unknown_names(tmp_path, capsys, argv, pattern):
    rc, _, err = _run(argv, capsys)
    assert rc == 2
    _assert_message(err, pattern, argv[0])


@pytest.mark.parametrize("argv, command, pattern", [
    (["train", *TINY, "optim.lr"], "train", r"override 'optim\.lr' is not of the form KEY=VALUE"),
    (["reproduce", "fig6", "--scale", "smoke", "--set", "optim.lr"], "reproduce",
     r"--set 'optim\.lr' is not of the form KEY=VALUE"),
    (["reproduce", "fig6", "--scale", "smoke", "--slurm", "gpu"], "reproduce",
     r"--slurm 'gpu' is not of the form KEY=VALUE \(e\.g\. slurm_partition=gpu\)"),
    (["sweep", "fig6", "--scale", "smoke", "--slurm", "gpu"], "sweep", r"--slurm 'gpu' is not of the form KEY=VALUE"),
])
def test_malformed_key_value_items_are_refused_before_anything_runs(tmp_path, capsys, argv, command, pattern):
    out = tmp_path / "out"
    extra = [f"run.out_dir={out}"] if command == "train" else ["--out", str(out)]
    rc, _, err = _run([*argv, *extra], capsys)
    assert rc == 2
    _assert_message(err, pattern, command)
    assert not out.exists()


def test_plan_with_an_absurd_budget_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:  # argparse's own error path: usage + one line, status 2
        cli.main(["plan", "--omega", "2^1000"])
    assert e.value.code == 2
    assert "omega=1.07e+301 is too large; use at most 2^62" in capsys.readouterr().err


def test_reproduce_validates_set_once_before_launching(tmp_path, capsys):
    out = tmp_path / "exp"
    rc, _, err = _run(["reproduce", "fig6", "--scale", "smoke", "--out", str(out), "--set", "optim.lrr=1"], capsys)
    assert rc == 2
    _assert_message(err, r"unknown config key 'optim\.lrr'", "reproduce")
    assert not out.exists()  # no run launched, no manifest, no report


@pytest.mark.parametrize("extra, pattern", [
    ([], r"already holds a finished run; pass --resume"),
    (["optim.lr=0.01", "--resume"], r"cannot resume .*optim\.lr: saved 0\.003, now 0\.01.*Nothing was changed"),
])
def test_existing_runs_are_protected(tmp_path, capsys, extra, pattern):
    run_dir = _finished_run(tmp_path / "runs", capsys)
    before = _snapshot(run_dir)
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=done", "schedule.epochs=1",
                       *extra], capsys)
    assert rc == 2
    _assert_message(err, pattern, "train")
    assert _snapshot(run_dir) == before


# ----------------------------------------------------------------------------- runtime failures: exit 1

def test_sgd_divergence_keeps_the_last_good_checkpoint(tmp_path, capsys):
    out = tmp_path / "runs"
    rc, _, err = _run(["train", *TINY, f"run.out_dir={out}", "run.name=sgd", "optim.name=sgd", "optim.lr=1e6",
                       "data.train_subset=64", "schedule.epochs=null", "schedule.steps=40",
                       "schedule.warmup_steps=40"], capsys)
    assert rc == 1
    _assert_message(err, r"after step 2 \(epoch 2\).*last good checkpoint \(epoch 1\)", "train")
    model = mlplab.create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=16, depth=2, num_classes=10,
                                in_chans=3)
    state = ckpt.load_checkpoint(ckpt.find_checkpoint(out / "sgd"), model)
    assert state["epoch"] == 1
    assert all(torch.isfinite(t).all() for t in model.state_dict().values() if t.is_floating_point())
    assert not (out / "sgd" / "results.json").exists()


def test_adamw_divergence_stops_with_the_one_based_step(tmp_path, capsys):
    out = tmp_path / "runs"
    rc, _, err = _run(["train", *TINY, f"run.out_dir={out}", "run.name=adam", "optim.lr=1e6",
                       "run.nan_check_every=1"], capsys)
    assert rc == 1
    _assert_message(err, r"diverged \(training loss above run\.divergence_factor x ln K = 230\.3\) at step \d+ "
                         r"\(epoch 1\).*no checkpoint was written", "train")
    assert not (out / "adam" / "checkpoint").exists() and not (out / "adam" / "results.json").exists()


def test_a_second_writer_is_refused_naming_the_holder(tmp_path, capsys):
    run_dir = _finished_run(tmp_path / "runs", capsys)
    (run_dir / "results.json").unlink()  # an unfinished run someone is continuing
    before = _snapshot(run_dir)
    fd = os.open(run_dir / rundir.LOCK_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, b"4242\n", 0)
    try:
        rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=done",
                           "schedule.epochs=1", "--resume"], capsys)
    finally:
        os.close(fd)
    assert rc == 1
    _assert_message(err, r"is in use by process 4242; wait for it to finish", "train")
    assert _snapshot(run_dir) == before


def test_out_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "runs").write_text("not a folder")
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 1
    _assert_message(err, r"cannot use .*runs.*choose another run\.out_dir", "train")
    assert (tmp_path / "runs").read_text() == "not a folder"


def test_full_disk_is_one_line_and_leaves_no_temp_file(tmp_path, capsys, monkeypatch):
    def full(path, obj, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(rundir, "atomic_write_json", full)
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 1
    _assert_message(err, r"No space left on device", "train")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.json"))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_failed_checkpoint_write_keeps_the_previous_checkpoint(tmp_path, capsys, monkeypatch, code):
    """The disk fills up (or the quota, or the folder turns read-only) while epoch 2's checkpoint is
    written: one message, epoch 1's checkpoint still loads, no half-written file is left, and
    --resume finishes the run once there is space again."""
    out = tmp_path / "runs"
    real, calls = ckpt.atomic_save, []

    def disk_full_after_one_checkpoint(path, writer):
        calls.append(path)
        if len(calls) <= 2:  # epoch 1: model.safetensors and state.pt
            return real(path, writer)

        def partial(tmp):
            with open(tmp, "wb") as f:
                f.write(b"\0" * 1000)
            raise OSError(code, os.strerror(code), tmp)
        return real(path, partial)

    monkeypatch.setattr(ckpt, "atomic_save", disk_full_after_one_checkpoint)
    argv = ["train", *TINY, f"run.out_dir={out}", "run.name=full", "schedule.epochs=2", "run.checkpoint_every=1",
            "run.eval_every=0"]
    rc, _, err = _run(argv, capsys)
    assert rc == 1
    _assert_message(err, rf"cannot write the checkpoint of epoch 2 .*\({os.strerror(code)}\); the last good "
                         r"checkpoint \(epoch 1\) is kept\. Free space, then continue with --resume", "train")
    run_dir = out / "full"
    model = mlplab.create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=16, depth=2, num_classes=10,
                                in_chans=3)
    assert ckpt.find_checkpoint(run_dir) == run_dir / "checkpoint"
    assert ckpt.load_checkpoint(run_dir / "checkpoint", model)["epoch"] == 1
    assert not (run_dir / "checkpoint.new").exists() and not list(run_dir.rglob("*.tmp"))
    assert not (run_dir / "results.json").exists()
    monkeypatch.setattr(ckpt, "atomic_save", real)  # space again
    rc, _, _ = _run([*argv, "--resume"], capsys)
    assert rc == 0
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 2


def test_out_of_memory_is_one_line(tmp_path, capsys, monkeypatch):
    def oom(name, **kw):
        raise MemoryError()

    monkeypatch.setattr(loop, "create_model", oom)
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 1
    _assert_message(err, r"out of memory; lower run\.batch_size", "train")
    assert not (tmp_path / "runs").exists()


def test_corrupt_dataset_file_is_named(tmp_path, capsys):
    info = mlplab.data.DATASETS["fashion_mnist"]
    folder = tmp_path / "data" / info.folder
    folder.mkdir(parents=True)
    for f in info.files:
        (folder / f.name).write_bytes(b"\x1f\x8b not really gzip")
    rc, _, err = _run(["train", *TINY, "data.dataset=fashion_mnist", f"data.root={tmp_path / 'data'}",
                       "data.image_size=null", "model.kwargs.patch_size=7", f"run.out_dir={tmp_path / 'runs'}"],
                      capsys)
    assert rc == 1
    _assert_message(err, r"fashion_mnist/.*(checksum|corrupt|cannot read)", "train")
    assert not (tmp_path / "runs").exists()


# ----------------------------------------------------------------------------- checkpoints and bugs

def _tiny_model(name="s_mixer", **kw):
    return mlplab.create_model(name, image_size=8, patch_size=4, hidden_dim=8, depth=2, **kw)


@pytest.mark.parametrize("other, pattern", [
    (dict(name="rp_s_mixer", rp_blocks="all"), r"holds a 's_mixer' .*not this 'rp_s_mixer'.*rp_blocks"),
    (dict(hidden_dim=16), r"hidden_dim: checkpoint 8, model 16"),
])
def test_mismatched_checkpoint_leaves_the_model_untouched(tmp_path, other, pattern):
    ckpt.save_weights(_tiny_model(), tmp_path / "w.safetensors")
    kw = dict(image_size=8, patch_size=4, hidden_dim=8, depth=2, seed=3)
    kw.update({k: v for k, v in other.items() if k != "name"})
    model = mlplab.create_model(other.get("name", "s_mixer"), **kw)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=pattern):
        ckpt.load_weights(model, tmp_path / "w.safetensors")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_checkpoint_shape_mismatch_without_metadata(tmp_path):
    from safetensors.torch import save_file

    tensors = {k: v.clone() for k, v in _tiny_model().state_dict().items()}
    tensors["head.weight"] = torch.zeros(3, 3)
    save_file(tensors, str(tmp_path / "w.safetensors"))  # no mlplab metadata: names and shapes still checked
    model = _tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"shapes differ .*head\.weight \(3, 3\)"):
        ckpt.load_weights(model, tmp_path / "w.safetensors")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("victim", [ckpt.STATE_FILE, ckpt.MODEL_FILE])
def test_truncated_checkpoint_is_named(tmp_path, victim):
    model = _tiny_model()
    d = ckpt.save_checkpoint(tmp_path, model, {"epoch": 1, "step": 2, "x": torch.zeros(1000)})
    data = (d / victim).read_bytes()
    (d / victim).write_bytes(data[: len(data) // 2])
    with pytest.raises(ckpt.CheckpointError, match=rf"{victim} is unreadable .*truncated"):
        ckpt.load_checkpoint(d, _tiny_model())


def test_real_bugs_still_show_tracebacks(tmp_path, monkeypatch, capsys):
    def bug(name, **kw):
        raise KeyError("a bug")

    monkeypatch.setattr(loop, "create_model", bug)
    with pytest.raises(KeyError):
        cli.main(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}"])


def test_debug_shows_the_traceback_of_an_expected_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MLPLAB_DEBUG", "1")
    with pytest.raises(ValueError, match="unknown config key"):
        cli.main(["train", *TINY, "optim.lrr=1"])


def test_explain_sorts_errors():
    from mlplab.errors import BadType, RunFailure

    assert cli.explain(BadType("x"))[0] == 2
    assert cli.explain(RunFailure("x"))[0] == 1
    assert cli.explain(OSError(errno.EROFS, "Read-only file system", "/r"))[0] == 1
    assert cli.explain(TypeError("unsupported operand"))[0] is None  # a bug, not user error
    assert cli.explain(KeyError("k"))[0] is None


# ----------------------------------------------------------------------------- sweeps: done or failed

def test_a_run_is_done_or_failed_never_both(tmp_path):
    from mlplab.experiments.executors import execute_run
    from mlplab.experiments.sweep import RunSpec
    from mlplab.utils.io import atomic_write_json

    d = tmp_path / "r"
    d.mkdir()
    spec = RunSpec(name="r", base="synthetic_tiny", overrides={"run.log": "none", "schedule.epochs": 1})
    atomic_write_json(d / "spec.json", spec.to_json())
    (d / "error.txt").write_text("in use by process 1\n")  # a refused second process wrote this
    assert execute_run(d) == "done"
    assert (d / "results.json").exists() and not (d / "error.txt").exists()
    json.loads((d / "results.json").read_text())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_killing_the_executor_kills_its_workers(tmp_path):
    """SIGKILL of a sweep's parent (no handler runs) still stops its local workers: they are in
    their own process group and get SIGTERM when the parent dies (PR_SET_PDEATHSIG)."""
    import subprocess
    import sys
    import time

    script = (
        "from mlplab.experiments import Sweep, product, run_sweep\n"
        "sw = Sweep('k', {'sleep': 60}, [product(('value', [1, 2]))], task='mlplab.experiments.tasks:echo_task')\n"
        f"run_sweep(sw, {str(tmp_path)!r}, executor='local', jobs=2, verbose=False)\n")
    parent = subprocess.Popen([sys.executable, "-c", script])
    children: list[int] = []
    deadline = time.time() + 60
    while len(children) < 2 and time.time() < deadline:
        time.sleep(0.2)
        tasks = Path(f"/proc/{parent.pid}/task")
        children = [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()] \
            if tasks.exists() else []
    assert len(children) == 2, "the workers did not start"
    assert all(os.getpgid(c) == c for c in children)  # each worker leads its own process group
    parent.kill()
    parent.wait()
    deadline = time.time() + 20
    while any(_alive(c) for c in children) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(_alive(c) for c in children)
    assert not any((tmp_path / "k").rglob("results.json"))  # killed: unfinished, never "done"
