"""The catalogue of bad inputs and faults (issues 10 and 25): each is one or two lines on stderr,
exit status 2 for bad input, 1 for a runtime failure, 130/143 for Ctrl-C/SIGTERM (with the command
that continues), and nothing is lost, left half-written or in the way of the retry.

Every case runs the real ``mlplab`` entry point in-process on ``synthetic_tiny`` (8x8 synthetic
images, a 2-block S-Mixer; well under a second per run) and compares the output folder before and
after."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from pathlib import Path

import pytest
import torch

import mlplab
from mlplab import cli
from mlplab.train import checkpoint as ckpt
from mlplab.train import loop, rundir, runplan

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

    monkeypatch.setattr(runplan, "create_model", oom)
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

    monkeypatch.setattr(runplan, "create_model", bug)
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
    oom = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                       "tried to allocate 51539607552 bytes. Error code 12 (Cannot allocate memory)")
    assert cli.explain(oom)[0] == 1 and cli.explain(oom)[1].startswith("out of memory; lower run.batch_size")


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


# ============================================================================= issue 25: round two
# Every case asserts the exit status, the message and what is left on disk.

SRC = str(Path(__file__).resolve().parents[1] / "src")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "interop"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.pop("WORLD_SIZE", None)
    env.pop("MLPLAB_DEBUG", None)
    return env


def _foreground_signals() -> None:
    """In the child: Ctrl-C's default disposition, as in a terminal's foreground job (a suite
    started in the background, e.g. ``nohup ... &``, passes SIGINT on ignored)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _mlplab(args: list[str], **kw):
    """``mlplab ARGS`` in a child process (signals and resource limits act on it alone)."""
    import subprocess
    import sys

    kw.setdefault("preexec_fn", _foreground_signals)
    return subprocess.Popen([sys.executable, "-m", "mlplab.cli", *args], env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _tmp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name == "checkpoint.new"]


def _load_tiny(run_or_ckpt: Path) -> dict:
    model = mlplab.create_model("s_mixer", image_size=8, patch_size=4, hidden_dim=16, depth=2, num_classes=10,
                                in_chans=3)
    d = run_or_ckpt if (run_or_ckpt / ckpt.STATE_FILE).exists() else ckpt.find_checkpoint(run_or_ckpt)
    return ckpt.load_checkpoint(d, model)


# ----------------------------------------------------------------------------- bad values: exit 2, nothing written

@pytest.mark.parametrize("overrides, pattern", [
    (["optim.weight_decay=NaN"], r"config key 'optim\.weight_decay' is nan; give a finite number"),
    (["optim.lr=NaN"], r"config key 'optim\.lr' is nan"),
    (["optim.momentum=Infinity"], r"config key 'optim\.momentum' is inf"),
    (["schedule.epochs=NaN"], r"config key 'schedule\.epochs' is nan"),
    (["schedule.min_lr=-Infinity"], r"config key 'schedule\.min_lr' is -inf"),
    (["run.divergence_factor=NaN"], r"config key 'run\.divergence_factor' is nan"),
    (["optim.name=adamw", "optim.betas=[NaN,0.9]"], r"config key 'optim\.betas' is nan"),
    (["model.kwargs.drop_path_rate=NaN"], r"config key 'model\.kwargs\.drop_path_rate' is nan"),
    (["optim.name=adamw", "optim.betas=[2,0]"], r"optim\.betas must both be in \[0, 1\), got \[2\.0, 0\.0\]"),
    (["run.name=line1\nline2"], r"run\.name 'line1\\nline2' must be a plain folder name \(no '/', newline"),
    (["run.name=a\tb"], r"run\.name 'a\\tb' must be a plain folder name"),
    (["run.name=.."], r"run\.name '\.\.' must be a plain folder name"),
    (["optimm.lr=0.1"], r"unknown config key 'optimm\.lr': did you mean 'optim'\?"),
    (["optim.weight_decy=0.1"], r"did you mean 'optim\.weight_decay'\?"),
    (["model.name=s_mixr"], r"unknown model 's_mixr'; did you mean 's_mixer'\?"),
    (["model.kwargs.hidden_dimm=8"], r"unknown override\(s\) \['hidden_dimm'\].*did you mean 'hidden_dim'\?"),
    (["run.batch_sise=8"], r"did you mean 'run\.batch_size'\?"),
])
def test_bad_values_are_refused_naming_the_key(tmp_path, capsys, overrides, pattern):
    out = tmp_path / "runs"
    rc, stdout, err = _run(["train", *TINY, f"run.out_dir={out}", *overrides], capsys)
    assert rc == 2
    _assert_message(err, pattern, "train")
    assert not out.exists()


@pytest.mark.parametrize("config, pattern", [
    ("synthetic_tinyy", r"unknown config 'synthetic_tinyy'.*did you mean 'synthetic_tiny'\?"),
    ("{folder}", r"config '.*cfgdir' is a folder; give a JSON config file"),
    ("{sections}", r"unknown config section 'optimm'; did you mean 'optim'\?"),
])
def test_config_names_and_folders(tmp_path, capsys, config, pattern):
    (tmp_path / "cfgdir").mkdir()
    (tmp_path / "sections.json").write_text('{"optimm": {"lr": 0.1}}')
    config = config.format(folder=tmp_path / "cfgdir", sections=tmp_path / "sections.json")
    rc, _, err = _run(["train", config, f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2
    _assert_message(err, pattern, "train")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("argv, pattern", [
    (["reproduce", "fig66"], r"unknown experiment 'fig66'; did you mean 'fig6'\?"),
    (["sweep", "fig66", "--dry-run"], r"unknown experiment 'fig66'; did you mean 'fig6'\?"),
    (["report", "fig66"], r"unknown experiment 'fig66'; did you mean 'fig6'\?"),
])
def test_experiment_ids_suggest_the_closest(tmp_path, capsys, argv, pattern):
    rc, _, err = _run([*argv, "--out", str(tmp_path / "exp")], capsys)
    assert rc == 2
    _assert_message(err, pattern, argv[0])
    assert not (tmp_path / "exp").exists()


# ----------------------------------------------------------------------------- the run folder: never blocks the retry

def test_a_run_that_diverged_before_its_first_checkpoint_does_not_block_the_corrected_retry(tmp_path, capsys):
    out = tmp_path / "runs"
    rc, _, err = _run(["train", *TINY, f"run.out_dir={out}", "run.name=r", "optim.lr=1e6", "run.nan_check_every=1"],
                      capsys)
    assert rc == 1
    _assert_message(err, r"diverged .*no checkpoint was written", "train")
    assert (out / "r" / "config.json").exists() and ckpt.find_checkpoint(out / "r") is None
    rc, _, err = _run(["train", *TINY, f"run.out_dir={out}", "run.name=r", "schedule.epochs=1"], capsys)
    assert rc == 0, err
    assert json.loads((out / "r" / "config.json").read_text())["optim"]["lr"] == 0.003
    assert json.loads((out / "r" / "results.json").read_text())["epochs"] == 1


def test_a_run_stopped_before_its_first_checkpoint_reruns_with_the_same_command(tmp_path, capsys):
    run_dir = _finished_run(tmp_path / "runs", capsys, "r")
    for name in ("checkpoint", "checkpoint.prev"):
        import shutil
        shutil.rmtree(run_dir / name, ignore_errors=True)
    (run_dir / "results.json").unlink()
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=r", "schedule.epochs=1"], capsys)
    assert rc == 0, err
    assert ckpt.find_checkpoint(run_dir) is not None and (run_dir / "results.json").exists()


def test_an_unfinished_run_with_a_checkpoint_says_what_to_add(tmp_path, capsys):
    run_dir = _finished_run(tmp_path / "runs", capsys, "r")
    (run_dir / "results.json").unlink()
    before = _snapshot(run_dir)
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=r", "schedule.epochs=1"], capsys)
    assert rc == 2
    _assert_message(err, r"already holds an unfinished run \(last checkpoint: epoch 1\); pass --resume", "train")
    assert _snapshot(run_dir) == before


def test_resume_with_a_mistyped_run_name_is_refused(tmp_path, capsys):
    _finished_run(tmp_path / "runs", capsys, "baseline")
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=baselin", "schedule.epochs=1",
                       "--resume"], capsys)
    assert rc == 2
    _assert_message(err, r"nothing to resume: .*baselin holds no run; did you mean run\.name=baseline\? drop --resume",
                    "train")
    assert not (tmp_path / "runs" / "baselin").exists()


def test_resume_of_a_finished_run_says_so(tmp_path, capsys):
    run_dir = _finished_run(tmp_path / "runs", capsys)
    before = _snapshot(run_dir)
    rc, out, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=done", "schedule.epochs=1",
                         "--resume"], capsys)
    assert rc == 0 and err == ""
    assert re.search(r"done finished before \(test acc [0-9.]+\); nothing to do\. --overwrite trains it again", out)
    assert _snapshot(run_dir) == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_run_name_of_a_folder_of_someone_elses_files(tmp_path, capsys, overwrite):
    folder = tmp_path / "runs" / "thesis"
    folder.mkdir(parents=True)
    (folder / "chapter1.tex").write_text("precious")
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=thesis", "schedule.epochs=1",
                       *(["--overwrite"] if overwrite else [])], capsys)
    assert (folder / "chapter1.tex").read_text() == "precious"  # never deleted
    if overwrite:
        assert rc == 0 and (folder / "results.json").exists()
    else:
        assert rc == 2
        _assert_message(err, r"thesis is not an mlplab run folder but holds files \(chapter1\.tex\); choose another "
                             r"run\.name, or pass --overwrite", "train")
        assert sorted(p.name for p in folder.iterdir()) == ["chapter1.tex"]  # not even a lock file


def test_a_run_left_with_only_checkpoint_prev_resumes_from_it(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["train", *TINY, f"run.out_dir={out}", "run.name=p", "schedule.epochs=3"]
    assert _run(argv, capsys)[0] == 0
    run_dir = out / "p"
    (run_dir / "results.json").unlink()
    import shutil
    shutil.rmtree(run_dir / "checkpoint")  # a kill between the two renames of a checkpoint swap
    assert _load_tiny(run_dir)["epoch"] == 2
    rc, stdout, err = _run([*argv, "--resume"], capsys)
    assert rc == 0, err
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 3
    assert _load_tiny(run_dir / "checkpoint")["epoch"] == 3


# ----------------------------------------------------------------------------- truncated and corrupt run files

def _cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("victim, pattern", [
    ("checkpoint/state.pt", r"checkpoint file .*checkpoint/state\.pt is unreadable \(it is cut short or not a PyTorch "
                            r"file\); it is truncated"),
    ("checkpoint/model.safetensors", r"checkpoint file .*checkpoint/model\.safetensors is unreadable .*truncated"),
    ("config.json", r"run config .*config\.json is not valid JSON .*cut short or damaged: restore it from a copy, "
                    r"or pass --overwrite to start the run again"),
])
def test_resume_with_a_damaged_file_names_it(tmp_path, capsys, victim, pattern):
    run_dir = _finished_run(tmp_path / "runs", capsys, "r")
    (run_dir / "results.json").unlink()
    _cut(run_dir / victim, 0.9 if victim.endswith("state.pt") else 0.5)
    before = _snapshot(run_dir)
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=r", "schedule.epochs=1",
                       "--resume"], capsys)
    assert rc == 1
    _assert_message(err, pattern, "train")
    assert "Invalid argument" not in err
    assert _snapshot(run_dir) == before  # nothing repaired behind the user's back, nothing lost


@pytest.mark.parametrize("keep", [0.0, 0.5])
def test_a_cut_results_json_counts_as_unfinished_and_resume_rewrites_it(tmp_path, capsys, keep):
    run_dir = _finished_run(tmp_path / "runs", capsys, "r")
    _cut(run_dir / "results.json", keep)
    argv = ["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=r", "schedule.epochs=1"]
    rc, _, err = _run(argv, capsys)
    assert rc == 2
    _assert_message(err, r"already holds an unfinished run \(last checkpoint: epoch 1\); pass --resume", "train")
    rc, _, err = _run([*argv, "--resume"], capsys)
    assert rc == 0, err
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 1


def test_a_metrics_line_cut_by_a_kill_is_dropped_on_resume(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["train", *TINY, f"run.out_dir={out}", "run.name=m", "schedule.epochs=2"]
    assert _run(argv, capsys)[0] == 0
    run_dir = out / "m"
    (run_dir / "results.json").unlink()
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 3, "train_lo')  # a line cut by a kill
    assert _run([*argv, "--resume"], capsys)[0] == 0
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2]


# ----------------------------------------------------------------------------- files a team can share (umask)

@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_run_files_honour_the_umask(tmp_path, capsys, umask, mode):
    old = os.umask(umask)
    try:
        run_dir = _finished_run(tmp_path / "runs", capsys)
    finally:
        os.umask(old)
    for name in ("config.json", "results.json", "metrics.jsonl", "checkpoint/model.safetensors",
                 "checkpoint/state.pt"):
        assert (run_dir / name).stat().st_mode & 0o777 == mode, name


def test_converted_files_and_reports_honour_the_umask(tmp_path):
    from mlplab.utils.io import atomic_write_json

    old = os.umask(0o002)
    try:
        atomic_write_json(tmp_path / "x.json", {"a": 1})
        mlplab.save_pretrained(_tiny_model(), tmp_path / "w.safetensors")
    finally:
        os.umask(old)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o664
    assert (tmp_path / "w.safetensors").stat().st_mode & 0o777 == 0o664


# ----------------------------------------------------------------------------- convert: no user file destroyed

@pytest.fixture
def tiny_weights(tmp_path):
    path = tmp_path / "src.safetensors"
    mlplab.save_pretrained(_tiny_model(), path)
    return path


def _convert(capsys, *args):
    return _run(["convert", *map(str, args)], capsys)


def test_convert_refuses_to_overwrite_without_the_flag(tmp_path, capsys, tiny_weights):
    dst = tmp_path / "mine.safetensors"
    dst.write_bytes(b"my own file")
    rc, _, err = _convert(capsys, tiny_weights, dst)
    assert rc == 2
    _assert_message(err, r"mine\.safetensors already exists; pass --overwrite to replace it", "convert")
    assert dst.read_bytes() == b"my own file" and not _tmp_files(tmp_path)
    rc, out, err = _convert(capsys, tiny_weights, dst, "--overwrite")
    assert rc == 0, err
    assert mlplab.load_pretrained(dst) is not None


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_convert_never_writes_into_a_runs_checkpoint(tmp_path, capsys, overwrite):
    run_dir = _finished_run(tmp_path / "runs", capsys)
    before = _snapshot(run_dir)
    rc, _, err = _convert(capsys, FIXTURES / "timm_mixer.safetensors", run_dir / "checkpoint" / "model.safetensors",
                          *overwrite)
    assert rc == 2
    _assert_message(err, r"belongs to the checkpoint of run .*done; replacing it would break that run", "convert")
    assert _snapshot(run_dir) == before


def test_convert_onto_its_source_is_refused(tmp_path, capsys, tiny_weights):
    before = tiny_weights.read_bytes()
    rc, _, err = _convert(capsys, tiny_weights, tiny_weights, "--overwrite")
    assert rc == 2
    _assert_message(err, r"src\.safetensors is the file being converted; write the result to another file", "convert")
    assert tiny_weights.read_bytes() == before


def test_convert_onto_a_folder_is_refused(tmp_path, capsys, tiny_weights):
    (tmp_path / "outdir").mkdir()
    rc, _, err = _convert(capsys, tiny_weights, tmp_path / "outdir")
    assert rc == 2
    _assert_message(err, r"outdir is a folder; give the file to write, e\.g\. .*outdir/model\.safetensors", "convert")
    assert list((tmp_path / "outdir").iterdir()) == []


def test_convert_does_not_create_folders(tmp_path, capsys, tiny_weights):
    rc, _, err = _convert(capsys, tiny_weights, tmp_path / "no" / "such" / "w.safetensors")
    assert rc == 2
    _assert_message(err, r"the folder .*no/such does not exist; create it first", "convert")
    assert not (tmp_path / "no").exists()


def test_convert_reads_a_run_left_with_only_checkpoint_prev(tmp_path, capsys):
    out = tmp_path / "runs"
    assert _run(["train", *TINY, f"run.out_dir={out}", "run.name=p", "schedule.epochs=2"], capsys)[0] == 0
    import shutil
    shutil.rmtree(out / "p" / "checkpoint")
    rc, stdout, err = _convert(capsys, out / "p", tmp_path / "p.safetensors")
    assert rc == 0, err
    assert "(mlplab)" in stdout
    model = mlplab.load_pretrained(out / "p")
    assert model.config.hidden_dim == 16
    assert sorted(p.name for p in (out / "p").iterdir() if p.name.startswith("checkpoint")) == ["checkpoint.prev"]


@pytest.mark.parametrize("content, pattern", [
    (b"", r"bad\.pth is neither safetensors, \.npz nor a PyTorch file .*cut short or not a PyTorch file"),
    (b"\x00" * 100, r"bad\.pth is neither safetensors.*cut short or not a PyTorch file"),
    ("pickle", r"bad\.pth is neither safetensors.*holds objects other than tensors and plain types \(a pickled "
               r"torch\.nn\.modules\.linear\.Linear\)\)$"),
    ("pickle4", r"bad\.pth is neither safetensors.*cut short or not a PyTorch file"),
    ("cut", r"bad\.safetensors is not a readable safetensors file"),
], ids=["empty", "zeros", "pickled_module", "plain_pickle", "cut_safetensors"])
def test_convert_of_a_damaged_or_unsafe_file_names_it(tmp_path, capsys, tiny_weights, content, pattern):
    """A file torch refuses is named in one line: without torch's advice to allow-list the pickled
    class (which would run the file's code) and without the warnings it prints on the way (K03, K07)."""
    if content == "pickle":
        path = tmp_path / "bad.pth"
        torch.save({"model": torch.nn.Linear(2, 2)}, path)  # a pickled module: weights_only refuses it
    elif content == "pickle4":
        import pickle
        path = tmp_path / "bad.pth"
        path.write_bytes(pickle.dumps({"a": [1, 2]}, protocol=4))  # torch warns about the protocol, then refuses
    elif content == "cut":
        path = tmp_path / "bad.safetensors"
        path.write_bytes(tiny_weights.read_bytes()[:200])
    else:
        path = tmp_path / "bad.pth"
        path.write_bytes(content)
    import warnings
    with warnings.catch_warnings(record=True) as shown:  # what a user's terminal would show before the error
        warnings.simplefilter("always")
        rc, _, err = _convert(capsys, path, tmp_path / "out.safetensors")
    assert rc == 2 and [str(w.message) for w in shown] == []
    _assert_message(err, pattern, "convert")
    assert "weights_only` set to `False`" not in err and "\x1b[" not in err
    assert "safe_globals" not in err and "Warning" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.safetensors").exists()


def test_finetune_with_new_head_false_and_another_class_count_is_refused(tmp_path, capsys):
    run_dir = _finished_run(tmp_path / "runs", capsys)
    src = tmp_path / "five.safetensors"
    assert _convert(capsys, run_dir, src, "num_classes=5")[0] == 0
    rc, _, err = _run(["finetune", str(src), "synthetic_tiny", "model.new_head=false", "run.log=none",
                       "run.device=cpu", f"run.out_dir={tmp_path / 'ft'}"], capsys)
    assert rc == 2
    _assert_message(err, r"model\.new_head=false keeps the checkpoint's 5-class head, but synthetic has 10 "
                         r"classes; drop model\.new_head", "finetune")
    assert not (tmp_path / "ft").exists()


# ----------------------------------------------------------------------------- full disks and file-size limits

def test_a_write_error_inside_a_library_is_the_os_error_naming_the_target(tmp_path):
    from mlplab.utils.io import atomic_save

    def safetensors_like(tmp):
        Path(tmp).write_bytes(b"partial")
        raise Exception("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(OSError) as e:
        atomic_save(tmp_path / "w.safetensors", safetensors_like)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "w.safetensors")
    assert cli.explain(e.value)[1].startswith(f"cannot write {tmp_path / 'w.safetensors'}: No space left on device; "
                                             "free space")
    assert list(tmp_path.iterdir()) == []


def test_a_bug_inside_a_writer_is_not_disguised(tmp_path):
    from mlplab.utils.io import atomic_save

    def bug(tmp):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        atomic_save(tmp_path / "x.bin", bug)
    assert list(tmp_path.iterdir()) == []


def test_full_disk_from_the_start_names_the_path(tmp_path, capsys, monkeypatch):
    from mlplab.utils import io as mio

    def full(tmp):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real = mio.atomic_save
    monkeypatch.setattr(mio, "atomic_save", lambda path, writer: real(path, full))
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=f"], capsys)
    assert rc == 1
    _assert_message(err, r"cannot write .*runs/f/config\.json: No space left on device; free space", "train")
    assert not (tmp_path / "runs" / "f").exists()  # refused before the first file: nothing left


def _rlimit(limit: int):
    def child():
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return child


def test_a_disk_that_fills_during_a_checkpoint_keeps_the_last_one(tmp_path, capsys):
    """A file-size limit (``RLIMIT_FSIZE``) in a child process: ``state.pt`` grows with the run's
    history, so the limit lets epochs 1-2 through and stops epoch 3's checkpoint mid-write."""
    sizes = []
    probe = mlplab.train.make_config("synthetic_tiny", {"run.log": "none", "run.device": "cpu", "run.threads": 1,
                                                        "run.out_dir": str(tmp_path / "probe"), "schedule.epochs": 3})
    mlplab.train.train(probe, on_epoch_end=lambda rec: sizes.append(
        (tmp_path / "probe" / probe.run.name / "checkpoint" / ckpt.STATE_FILE).stat().st_size))
    assert sizes[0] < sizes[1] < sizes[2]
    out = tmp_path / "runs"
    argv = ["train", *TINY, f"run.out_dir={out}", "run.name=full", "schedule.epochs=3"]
    p = _mlplab(argv, preexec_fn=_rlimit(sizes[1]))
    _, err = p.communicate(timeout=600)
    assert p.returncode == 1, err
    _assert_message(err, r"cannot write the checkpoint of epoch 3 in .*full \(File too large\); the last good "
                         r"checkpoint \(epoch 2\) is kept\. Free space, then continue with --resume", "train")
    assert "SafetensorError" not in err
    run_dir = out / "full"
    assert _load_tiny(run_dir / "checkpoint")["epoch"] == 2
    assert not _tmp_files(run_dir) and not (run_dir / "results.json").exists()
    rc, _, err = _run([*argv, "--resume"], capsys)  # space again
    assert rc == 0, err
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 3


def test_a_file_size_limit_below_the_first_checkpoint_does_not_block_the_rerun(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["train", *TINY, f"run.out_dir={out}", "run.name=tiny_disk", "schedule.epochs=1"]
    p = _mlplab(argv, preexec_fn=_rlimit(4096))  # config.json fits, model.safetensors does not
    _, err = p.communicate(timeout=600)
    assert p.returncode == 1, err
    _assert_message(err, r"cannot write the checkpoint of epoch 1 .*\(File too large\); no earlier checkpoint "
                         r"exists", "train")
    assert ckpt.find_checkpoint(out / "tiny_disk") is None and not _tmp_files(out / "tiny_disk")
    rc, _, err = _run(argv, capsys)  # the same command, once there is room
    assert rc == 0, err


@pytest.mark.parametrize("code, pattern", [
    (errno.ENOSPC, r"cannot write /r/x: No space left on device; free space, then run the same command again"),
    (errno.EFBIG, r"cannot write /r/x: File too large; free space \(or raise the file-size limit, ulimit -f\)"),
    (errno.EACCES, r"cannot write /r/x: Permission denied; fix its permissions or choose another location"),
    (errno.EROFS, r"cannot write /r/x: Read-only file system; fix its permissions"),
    (errno.EISDIR, r"/r/x is a folder; give a file name"),
])
def test_os_errors_name_the_path_and_the_fix(code, pattern):
    status, message = cli.explain(OSError(code, os.strerror(code), "/r/x"))
    assert status == 1 and re.match(pattern, message), message


# ----------------------------------------------------------------------------- Ctrl-C and SIGTERM

def _wait_for(predicate, proc, timeout: float = 300.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"exited early ({proc.returncode}): {proc.stderr.read()}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _without_epoch_lines(err: str) -> str:
    """A child's stderr without its per-epoch lines: what is left says where a signal went."""
    return "\n".join(line for line in err.splitlines() if not re.match(r"\s*epoch \d+/\d+ step", line))


@pytest.mark.parametrize("sig, status", [(2, 130), (15, 143)])
def test_interrupting_train_says_where_it_stopped_and_how_to_continue(tmp_path, capsys, sig, status):
    import shlex

    out = tmp_path / "runs"
    argv = ["train", *TINY, f"run.out_dir={out}", "run.name=sig", "schedule.epochs=25"]
    p = _mlplab(argv)
    run_dir = out / "sig"
    _wait_for(lambda: (run_dir / "checkpoint" / ckpt.MODEL_FILE).exists(), p)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == status, _without_epoch_lines(err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    m = re.match(r"mlplab train: interrupted at epoch (\d+) of .*sig \(the checkpoint of epoch (\d+) is kept\); "
                 r"continue with (mlplab train .*--resume)$", lines[0])
    assert m, lines[0]
    epoch = _load_tiny(run_dir)["epoch"]
    assert int(m.group(2)) == epoch and int(m.group(1)) >= epoch + 1
    assert not _tmp_files(run_dir) and not (run_dir / "results.json").exists()
    command = shlex.split(m.group(3))[1:]
    assert command == [*argv, "--resume"]
    rc, stdout, err = _run(command, capsys)
    assert rc == 0, err
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 25


@pytest.mark.parametrize("sig, status, extra", [(2, 130, []), (15, 143, ["--jobs", "2"])])
def test_interrupting_reproduce_keeps_finished_runs_and_says_how_to_continue(tmp_path, capsys, sig, status, extra):
    import shlex

    out = tmp_path / "exp"
    # 600 epochs (~10 s a run on a quiet core): the first checkpoint comes at epoch 1, and the
    # signal must not find the sweep finished however late this process gets the CPU
    argv = ["reproduce", "fig6", "--scale", "smoke", "--out", str(out), "--no-report", "--set", "schedule.epochs=600",
            *extra]
    p = _mlplab(argv)
    _wait_for(lambda: any(out.glob("*/*/checkpoint/model.safetensors")), p)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == status, _without_epoch_lines(err)
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err, err
    m = re.match(r"mlplab reproduce: interrupted .*; continue with (mlplab reproduce .*)$", last)
    assert m, err
    assert shlex.split(m.group(1))[1:] == argv
    summary = json.loads(next(out.glob("*/summary.json")).read_text())
    assert summary["counts"].get("done", 0) < 4 and not any(out.rglob("results.json"))
    assert not any(out.rglob("*.tmp"))
    import time
    time.sleep(1)  # workers get SIGTERM with the executor: no one writes any more
    from mlplab.utils.io import folder_lock
    with folder_lock(out):  # released
        pass


# ----------------------------------------------------------------------------- sweeps repair themselves

def _echo_sweep(tmp_path: Path, **extra) -> Path:
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"name": "echo", "task": "mlplab.experiments.tasks:echo_task",
                             "axes": [["value", [1, 2, 3]]], **extra}))
    return f


@pytest.mark.parametrize("damage", ["empty", "cut", "list"])
def test_a_sweep_rereuns_a_run_whose_results_are_unreadable(tmp_path, capsys, damage):
    f = _echo_sweep(tmp_path)
    out = tmp_path / "out"
    assert _run(["sweep", str(f), "--out", str(out)], capsys)[0] == 0
    victim = sorted((out / "echo").glob("*/results.json"))[1]
    victim.write_bytes({"empty": b"", "cut": victim.read_bytes()[:10], "list": b"[1, 2]"}[damage])
    from mlplab.experiments.aggregate import load_runs

    runs = {r.run_dir: r for r in load_runs(out)}
    assert runs[victim.parent].status == "unfinished"
    assert re.match(r"results\.json (is empty|is not valid JSON|holds a JSON list)", runs[victim.parent].problem)
    rc, stdout, err = _run(["sweep", str(f), "--out", str(out)], capsys)
    assert rc == 0, err
    assert "1 done, 2 skipped" in stdout
    assert json.loads(victim.read_text())["echo"]["value"] in (1, 2, 3)
    assert (victim.parent / "results.unreadable.json").exists()  # kept for a look


def test_report_names_the_files_it_skipped(tmp_path, capsys):
    out = tmp_path / "s9"
    assert _run(["reproduce", "figS9", "--scale", "smoke", "--out", str(out), "--no-report"], capsys)[0] == 0
    victim = next(out.rglob("results.json"))
    victim.write_text('{"test_acc": 0.')
    rc, stdout, err = _run(["report", "figS9", "--out", str(out)], capsys)
    assert rc == 0, err
    assert re.search(r"skipped .*: results\.json is not valid JSON .*; `mlplab reproduce` runs it again", stdout)
    assert "results.json is not valid JSON" in (out / "report.md").read_text()
    assert victim.read_text() == '{"test_acc": 0.'  # report reads, never repairs


def test_a_cut_spec_json_is_rewritten_from_the_sweep(tmp_path, capsys):
    f = _echo_sweep(tmp_path)
    out = tmp_path / "out"
    assert _run(["sweep", str(f), "--out", str(out)], capsys)[0] == 0
    run_dir = sorted((out / "echo").glob("*/spec.json"))[0].parent
    (run_dir / "results.json").unlink()
    (run_dir / "spec.json").write_text('{"name": ')
    rc, stdout, err = _run(["sweep", str(f), "--out", str(out)], capsys)
    assert rc == 0, err
    assert json.loads((run_dir / "spec.json").read_text())["name"] == run_dir.name
    assert (run_dir / "results.json").exists()


def test_a_cut_run_config_in_a_sweep_is_rewritten_and_the_run_resumes(tmp_path, capsys):
    from mlplab.experiments import Sweep, product, run_sweep

    sw = Sweep("t", "synthetic_tiny", [product(("optim.lr", [0.003]))],
               base_overrides={"run.log": "none", "run.device": "cpu", "run.threads": 1, "schedule.epochs": 1})
    res = run_sweep(sw, tmp_path, verbose=False)
    run_dir = next(iter(res.run_dirs.values()))
    (run_dir / "results.json").unlink()
    (run_dir / "config.json").write_text('{"model": {')
    res = run_sweep(sw, tmp_path, verbose=False)
    assert list(res.status.values()) == ["done"]
    assert json.loads((run_dir / "config.json").read_text())["optim"]["lr"] == 0.003


@pytest.mark.parametrize("content, pattern", [
    ('{"name": "x", "axes": "optim.lr"}', r"sweep 'x': 'axes' must be a list of axes .*got 'optim\.lr'"),
    ('{"name": "x", "axes": [["optim.lr", 0.1]]}', r"sweep 'x': cannot read axis \['optim\.lr', 0\.1\]; an axis is"),
    ('{"name": "x", "axes": [{"zip": "ab"}]}', r"sweep 'x': zip takes \[\"key\", \[values\]\] pairs"),
    ('{"name": "x", "axes": [', r"sweep file .*s\.json is not valid JSON \(.* at line 1 column \d+\); fix it"),
    ("", r"sweep file .*s\.json is empty; fix it"),
])
def test_bad_sweep_files_name_the_file_or_the_axis(tmp_path, capsys, content, pattern):
    f = tmp_path / "s.json"
    f.write_text(content)
    rc, _, err = _run(["sweep", str(f), "--out", str(tmp_path / "out")], capsys)
    assert rc == 2
    _assert_message(err, pattern, "sweep")
    assert not (tmp_path / "out").exists()


def test_a_second_reproduce_of_the_same_out_is_refused_while_the_first_runs(tmp_path, capsys):
    out = tmp_path / "exp"
    argv = ["reproduce", "fig6", "--scale", "smoke", "--out", str(out), "--no-report", "--set", "schedule.epochs=8"]
    first = _mlplab(argv)
    _wait_for(lambda: (out / rundir.LOCK_FILE).exists() and (out / rundir.LOCK_FILE).read_text().strip(), first)
    rc, _, err = _run(argv, capsys)
    assert rc == 1
    _assert_message(err, rf"exp is in use by process {first.pid} \(mlplab reproduce fig6 --scale smoke --out .*exp "
                         r"--no-report --set schedule\.epochs=8\); another mlplab reproduce or sweep is writing there; "
                         r"wait for it to finish", "reproduce")
    _, err1 = first.communicate(timeout=600)
    assert first.returncode == 0, err1
    summary = json.loads(next(out.glob("*/summary.json")).read_text())
    assert summary["counts"] == {"done": 4}  # the first was not disturbed
    assert not any(r.read_text() for r in out.rglob("error.txt"))
    rc, stdout, err = _run(argv, capsys)  # afterwards: everything is skipped
    assert rc == 0, err


def test_a_sweep_into_a_folder_held_by_another_sweep_is_refused(tmp_path, capsys):
    from mlplab.utils.io import folder_lock

    f = _echo_sweep(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    import subprocess
    import sys
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(out / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'777\\n'); print('held', flush=True)\n"
                               "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rc, _, err = _run(["sweep", str(f), "--out", str(out)], capsys)
    finally:
        holder.kill()
        holder.wait()
    assert rc == 1
    _assert_message(err, r"out is in use by process 777; another mlplab reproduce or sweep", "sweep")
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    with folder_lock(out):  # the holder is gone: the kernel released its lock
        pass


@pytest.mark.parametrize("argv, started, expected", [
    (["train", "c.json", "--overwrite"], True, "mlplab train c.json --resume"),
    (["train", "c.json", "--overwrite"], False, "mlplab train c.json --overwrite"),  # nothing written yet
    (["train", "c.json", "run.name=a b", "--resume"], True, "mlplab train c.json 'run.name=a b' --resume"),
    (["reproduce", "fig6", "--out", "x"], True, "mlplab reproduce fig6 --out x"),
])
def test_the_continue_command(argv, started, expected):
    assert cli.continue_command(argv[0], argv, started) == expected


def test_ctrl_c_before_the_run_folder_exists_writes_nothing(tmp_path, capsys, monkeypatch):
    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "_prepare", lambda cfg, dist: interrupted(cfg))
    argv = ["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=k"]
    rc, _, err = _run(argv, capsys)
    assert rc == 130
    assert err.strip() == "mlplab train: interrupted; continue with mlplab " + " ".join(
        __import__("shlex").quote(a) for a in argv)
    assert not (tmp_path / "runs").exists()


def test_a_damaged_latest_checkpoint_points_at_the_intact_previous_one(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["train", *TINY, f"run.out_dir={out}", "run.name=two", "schedule.epochs=2"]
    assert _run(argv, capsys)[0] == 0
    run_dir = out / "two"
    (run_dir / "results.json").unlink()
    _cut(run_dir / "checkpoint" / ckpt.STATE_FILE, 0.9)
    before = _snapshot(run_dir)
    rc, _, err = _run([*argv, "--resume"], capsys)
    assert rc == 1
    _assert_message(err, r"checkpoint/state\.pt is unreadable .*The previous checkpoint is intact: to continue from "
                         r"it, replace .*two/checkpoint by .*two/checkpoint\.prev", "train")
    assert _snapshot(run_dir) == before
    import shutil
    shutil.rmtree(run_dir / "checkpoint")
    os.replace(run_dir / "checkpoint.prev", run_dir / "checkpoint")  # what the message says
    rc, _, err = _run([*argv, "--resume"], capsys)
    assert rc == 0, err
    assert json.loads((run_dir / "results.json").read_text())["epochs"] == 2


@pytest.mark.parametrize("resume", [[], ["--resume"]])
def test_a_run_folder_that_lost_its_config_says_so(tmp_path, capsys, resume):
    run_dir = _finished_run(tmp_path / "runs", capsys, "r")
    (run_dir / "results.json").unlink()
    (run_dir / "config.json").unlink()
    before = _snapshot(run_dir)
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=r", "schedule.epochs=1",
                       *resume], capsys)
    assert rc == 2
    _assert_message(err, r"r holds a checkpoint but no config\.json; restore config\.json to resume it, or pass "
                         r"--overwrite", "train")
    assert _snapshot(run_dir) == before


def test_report_with_a_cut_manifest_names_it_and_the_fix(tmp_path, capsys):
    out = tmp_path / "s9"
    assert _run(["reproduce", "figS9", "--scale", "smoke", "--out", str(out), "--no-report"], capsys)[0] == 0
    _cut(out / "experiment.json")
    before = _snapshot(out)
    rc, _, err = _run(["report", "figS9", "--out", str(out)], capsys)
    assert rc == 1
    _assert_message(err, r"experiment manifest .*s9/experiment\.json is not valid JSON .*run the same `mlplab "
                         r"reproduce \.\.\. --out .*s9` again", "report")
    assert _snapshot(out) == before
    rc, _, err = _run(["reproduce", "figS9", "--scale", "smoke", "--out", str(out)], capsys)  # the fix
    assert rc == 0, err
    assert json.loads((out / "experiment.json").read_text())["experiment"] == "figS9"


def test_resume_of_a_run_without_a_checkpoint_starts_it_with_the_new_config(tmp_path, capsys):
    run_dir = _finished_run(tmp_path / "runs", capsys, "r")
    import shutil
    for name in ("checkpoint", "checkpoint.prev"):
        shutil.rmtree(run_dir / name, ignore_errors=True)
    (run_dir / "results.json").unlink()
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=r", "schedule.epochs=1",
                       "optim.lr=0.001", "--resume"], capsys)
    assert rc == 0, err
    assert json.loads((run_dir / "config.json").read_text())["optim"]["lr"] == 0.001
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1


# ------------------------------------------------------------- data, memory and API cases (other owners' fixes)

def _image_folder(root: Path, classes=("a", "b"), n: int = 4, size: int = 12, seed: int = 0) -> Path:
    import numpy as np
    from PIL import Image

    g = np.random.default_rng(seed)
    for split in ("train", "val"):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(g.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(d / f"{i}.png")
    return root


def test_an_image_folder_trains_at_a_chosen_resolution(tmp_path, capsys):
    root = _image_folder(tmp_path / "flowers")
    out = tmp_path / "runs"
    rc, _, err = _run(["train", *TINY, "data.dataset=imagefolder", f"data.root={root}", "data.image_size=8",
                       "run.batch_size=4", "schedule.epochs=1", f"run.out_dir={out}", "run.name=if"], capsys)
    assert rc == 0, err
    res = json.loads((out / "if" / "results.json").read_text())
    assert (res["train_examples"] == 8
            and json.loads((out / "if" / "config.json").read_text())["data"]["image_size"] == 8)


def test_an_empty_class_folder_is_named(tmp_path, capsys):
    root = _image_folder(tmp_path / "flowers")
    (root / "train" / "c").mkdir()
    rc, _, err = _run(["train", *TINY, "data.dataset=imagefolder", f"data.root={root}", "data.image_size=8",
                       "run.batch_size=4", f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2
    _assert_message(err, r"flowers/train/c: class folder holds no images .*add images or remove the folder", "train")
    assert not (tmp_path / "runs").exists()


def test_an_explicit_data_root_that_does_not_exist_is_refused(tmp_path, capsys):
    rc, _, err = _run(["train", *TINY, "data.dataset=fashion_mnist", f"data.root={tmp_path / 'nope'}",
                       f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2
    _assert_message(err, r"data\.root=.*nope does not exist \(an explicit root is never skipped\)", "train")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "nope").exists()


@pytest.mark.parametrize("model", ["s_mixer", "mlp_mixer"])
def test_a_mixer_too_large_for_memory_is_refused_before_it_is_built(tmp_path, capsys, model):
    rc, _, err = _run(["train", *TINY, f"model.name={model}", "model.kwargs.hidden_dim=1000000",
                       f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2
    _assert_message(err, r"parameters, needing about [0-9.]+ GiB for weights, gradients and optimiser state; .*"
                         r"Choose a smaller model", "train")
    assert not (tmp_path / "runs").exists()


def test_train_takes_a_named_config_in_python(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = mlplab.train("synthetic_tiny")
    assert 0.0 <= res["test_acc"] <= 1.0
    assert Path(res["run_dir"], "results.json").exists()


@pytest.mark.parametrize("victim, pattern", [
    ("train-00000.images.npy", r"train-00000\.images\.npy: cannot read the shard .*truncated — pack again"),
    ("index.json", r"index\.json: cannot read .*the file is truncated or not a pack index — pack again"),
])
def test_a_cut_pack_names_the_file(tmp_path, capsys, victim, pattern):
    root = _image_folder(tmp_path / "flowers", size=8)
    assert _run(["pack", str(root), str(tmp_path / "pack"), "--image-size", "8"], capsys)[0] == 0
    _cut(tmp_path / "pack" / victim)
    rc, _, err = _run(["train", *TINY, "data.dataset=packed", f"data.root={tmp_path / 'pack'}", "run.batch_size=4",
                       f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2
    _assert_message(err, pattern, "train")
    assert not (tmp_path / "runs").exists()


# ============================================================================= issue 36: own data, safe
# Packs that cannot corrupt each other, a run that knows its data, the memory check for every dataset.

_SLOW_PACK = """
import sys, time
from mlplab.data import packing
real = packing._save_npy
def slow(path, array):  # a pack that takes its time, so that others can try to interleave
    time.sleep(0.2)
    return real(path, array)
packing._save_npy = slow
sys.argv = ["mlplab", *{argv!r}]
from mlplab import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _pack_argv(src: Path, dst: Path, *extra: str) -> list[str]:
    return ["pack", str(src), str(dst), "--image-size", "8", "--shard-size", "4", "--workers", "1",
            "--progress", "none", *extra]


def _done_shards(dst: Path) -> int:
    try:
        return len(json.loads((dst / ".pack-state.json").read_text())["done"])
    except (OSError, ValueError, KeyError):
        return 0


def test_a_second_pack_into_a_folder_in_use_is_refused_and_a_killed_pack_resumes(tmp_path, capsys):
    """The issue's interleaving: the first pack paused mid-way, a second pack of other images into
    the same folder is refused naming the first (changing nothing); the first is killed (SIGKILL:
    no handler runs); a rerun with other settings is refused and says how to finish or start
    over; the same command finishes the pack, identical to one never interrupted."""
    import signal
    import subprocess
    import sys

    from mlplab.data import verify_pack

    a, b = _image_folder(tmp_path / "A", n=6), _image_folder(tmp_path / "B", n=6, seed=1)
    dst = tmp_path / "pack"
    argv = _pack_argv(a, dst)
    first = subprocess.Popen([sys.executable, "-c", _SLOW_PACK.format(argv=argv)], env=_env(), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(lambda: _done_shards(dst) >= 1, first)
    first.send_signal(signal.SIGSTOP)  # paused mid-pack
    try:
        before = _snapshot(dst)
        rc, _, err = _run(_pack_argv(b, dst), capsys)
        assert rc == 1
        _assert_message(err, rf"pack is in use by process {first.pid} \(mlplab pack .*A .*pack --image-size 8 "
                             r"--shard-size 4 --workers 1 --progress none\); wait for it to finish \(or stop it\); "
                             r"a pack has one writer at a time", "pack")
        assert _snapshot(dst) == before
    finally:
        first.kill()  # SIGKILL, while stopped
        first.communicate()
    done = _done_shards(dst)
    assert 1 <= done < 6 and not (dst / "index.json").exists()
    before = _snapshot(dst)
    rc, _, err = _run(_pack_argv(a, dst)[:-4] + ["--image-size", "6"], capsys)  # other settings
    assert rc == 2
    _assert_message(err, rf"pack holds an unfinished pack of .*A at 8x8 \({done} shard\(s\) done\) with other settings "
                         r"than this command's; nothing was changed: finish it with `mlplab pack .*A .*pack "
                         r"--image-size 8 --shard-size 4`, or delete .*pack to start over", "pack")
    assert _snapshot(dst) == before
    rc, _, err = _run(argv, capsys)  # the same command finishes it
    assert rc == 0, err
    assert sorted(p.name for p in dst.iterdir() if not p.name.endswith(".npy")) == [".lock", "index.json"]
    index = json.loads((dst / "index.json").read_text())
    assert index["source"] == f"imagefolder:{a.resolve()}" and verify_pack(dst) == 12
    assert _run(_pack_argv(a, tmp_path / "fresh"), capsys)[0] == 0
    assert index == json.loads((tmp_path / "fresh" / "index.json").read_text())


@pytest.mark.parametrize("where, extra, pattern", [
    ("new/pack", ["--image-size", "100000"],
     r"--image-size 100000 needs about [0-9,.]+ GiB of memory to pack \(8 images of 28,610\.2 MiB per shard\), "
     r"more than the [0-9.]+ GiB available; choose a smaller --image-size"),
    ("A/packs/p", ["--image-size", "8"],
     r"A/packs/p is inside the source folder .*A; the pack's files would land among the images it packs: "
     r"give a destination outside .*A"),
])
def test_a_refused_pack_leaves_nothing_behind(tmp_path, capsys, where, extra, pattern):
    a = _image_folder(tmp_path / "A")
    before = _snapshot(tmp_path)
    rc, _, err = _run(["pack", str(a), str(tmp_path / where), *extra], capsys)
    assert rc == 2
    _assert_message(err, pattern, "pack")
    assert _snapshot(tmp_path) == before and not (tmp_path / where.split("/")[0] / where.split("/")[1]).exists()


def _packs(tmp_path: Path, capsys) -> tuple[Path, Path]:
    """Two packs of the same shapes and other images."""
    for name, seed in (("P1", 0), ("P2", 1)):
        src = _image_folder(tmp_path / f"src{seed}", n=4, size=8, seed=seed)
        assert _run(["pack", str(src), str(tmp_path / name), "--image-size", "8", "--progress", "none"], capsys)[0] == 0
    return tmp_path / "P1", tmp_path / "P2"


@pytest.mark.parametrize("damage, pattern", [
    ("another_packs_shard", r"train-00000\.images\.npy: its content differs from what index\.json records \(another "
                            r"pack's images, or changed since it was packed\); pack again into a new folder"),
    ("grown", r"train-00000\.images\.npy: \d+ bytes, but its header says \d+; the pack is damaged"),
])
def test_training_refuses_a_pack_whose_shards_do_not_match_its_index(tmp_path, capsys, damage, pattern):
    p1, p2 = _packs(tmp_path, capsys)
    shard = p1 / "train-00000.images.npy"
    if damage == "grown":
        with open(shard, "ab") as f:
            f.write(b"\0" * 64)
    else:
        shard.write_bytes((p2 / "train-00000.images.npy").read_bytes())  # same shape, other images
    rc, _, err = _run(["train", *TINY, "data.dataset=packed", f"data.root={p1}", "run.batch_size=4",
                       f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2
    _assert_message(err, pattern, "train")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("base, data", [
    (TINY + ["model.kwargs.hidden_dim=1000000"], ["data.dataset=imagefolder", "data.image_size=8"]),
    (TINY + ["model.kwargs.hidden_dim=1000000"], ["data.dataset=packed"]),
    (TINY + ["model.kwargs.hidden_dim=1000000"], ["data.dataset=packed", "data.stream=true"]),
    (["fmnist_fast", "run.log=none", "run.device=cpu", "run.threads=1"],  # the 51 GB allocation
     ["data.dataset=imagefolder", "data.image_size=4096", "data.stream=true"]),
], ids=["folder", "pack", "streamed_pack", "streamed_folder_at_4096"])
def test_the_memory_check_runs_for_folders_packs_and_streams(tmp_path, capsys, base, data):
    root = _image_folder(tmp_path / "A", size=8)
    if "data.dataset=packed" in data:
        assert _run(["pack", str(root), str(tmp_path / "P"), "--image-size", "8", "--progress", "none"], capsys)[0] == 0
        root = tmp_path / "P"
    rc, _, err = _run(["train", *base, *data, f"data.root={root}", "run.batch_size=4",
                       f"run.out_dir={tmp_path / 'runs'}"], capsys)
    assert rc == 2
    _assert_message(err, r"the model has [0-9.]+[GT] parameters, needing about [0-9.]+ GiB for weights, gradients and "
                         r"optimiser state; cpu has [0-9.]+ GiB available\. Choose a smaller model", "train")
    assert not (tmp_path / "runs").exists()


def test_a_run_knows_its_data(tmp_path, capsys):
    """The same command on a second pack is a second run; --resume on other data is refused in
    one sentence; results.json records the data; the datasets of the table keep their names."""
    import hashlib
    import shutil

    p1, p2 = _packs(tmp_path, capsys)
    out = tmp_path / "runs"
    argv = ["train", *TINY, "data.dataset=packed", "run.batch_size=4", "schedule.epochs=1", f"run.out_dir={out}"]
    assert _run([*argv, f"data.root={p1}"], capsys)[0] == 0
    assert _run([*argv, f"data.root={p2}"], capsys)[0] == 0
    first, second = sorted(out.iterdir(), key=lambda d: "P2" in d.name)
    assert first.name.startswith("synthetic_tiny,data=P1-") and second.name.startswith("synthetic_tiny,data=P2-")
    data = json.loads((first / "results.json").read_text())["data"]
    assert data == {"dataset": "packed", "root": str(p1.resolve()),
                    "index_sha256": hashlib.sha256((p1 / "index.json").read_bytes()).hexdigest()}
    assert json.loads((first / "data.json").read_text()) == data
    before = _snapshot(first)
    for extra, pattern in [(["--resume"],
                            rf"cannot resume .*{re.escape(first.name)}: it trained on the pack .*P1 \(index "
                            r"sha256 [0-9a-f]{12}\), not on the pack .*P2 \(index sha256 [0-9a-f]{12}\)\. "
                            r"Nothing was changed; give its data\.root, or a new run\.name"),
                           ([], rf"{re.escape(first.name)} holds a run trained on the pack .*P1 .*, not on the pack "
                                r".*P2 .*; choose another run\.name, or pass --overwrite to replace it")]:
        rc, _, err = _run([*argv, f"data.root={p2}", f"run.name={first.name}", *extra], capsys)
        assert rc == 2
        _assert_message(err, pattern, "train")
        assert _snapshot(first) == before
    shutil.copytree(p1, tmp_path / "moved")  # the same pack elsewhere is the same data
    rc, stdout, err = _run([*argv, f"data.root={tmp_path / 'moved'}", f"run.name={first.name}", "--resume"], capsys)
    assert rc == 0 and "finished before" in stdout + err
    from mlplab.train import make_config
    assert make_config("fmnist_fast").run.name == "fmnist_fast"
    assert make_config("fmnist_fast", ["data.root=/elsewhere"]).run.name == "fmnist_fast"  # checksummed files
    assert make_config("fmnist_s_mixer", ["optim.lr=0.1"]).run.name == "fmnist_s_mixer,lr=0.1"


@contextlib.contextmanager
def _as_nobody():
    """The body as user nobody when this process is root (for whom every folder is readable)."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.mark.parametrize("shape, pattern", [
    ("one_class", r"A/train holds one class folder \(a\); a classifier needs two or more: add a folder per class"),
    ("no_val", r"A has no val/ folder; an image folder holds train/ and val/ \(or test/\)"),
    ("flat", r"A has no train/ folder; an image folder holds train/<class>/<image> and val/<class>/<image> "
             r"\(or test/\): make one folder per class under each"),
    ("unreadable", r"A/train/b: cannot read the folder \(Permission denied\); fix its permissions \(chmod -R u\+rX "
                   r".*A/train/b\) or remove it"),
])
def test_a_misshapen_image_folder_is_bad_input(request, capsys, shape, pattern):
    """Exit 2 and one sentence for each, where an unreadable class folder was "empty", a one-class
    folder trained to 100% without a word, and a missing val/ or a flat folder exited 1."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="mlplab-catalogue-"))  # in /tmp: reachable for nobody (pytest's is not)
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    root = _image_folder(base / "A", classes=("a",) if shape == "one_class" else ("a", "b"))
    if shape == "no_val":
        shutil.rmtree(root / "val")
    elif shape == "flat":
        for f in (root / "train" / "a").iterdir():
            f.rename(root / f.name)
        shutil.rmtree(root / "train")
        shutil.rmtree(root / "val")
    elif shape == "unreadable":
        for d, _, files in os.walk(base):  # everything readable (whatever the umask) but the class folder b
            os.chmod(d, 0o777)
            for f in files:
                os.chmod(Path(d) / f, 0o644)
        os.chmod(root / "train" / "b", 0)
    try:
        with _as_nobody() if shape == "unreadable" else contextlib.nullcontext():
            rc, _, err = _run(["train", *TINY, "data.dataset=imagefolder", f"data.root={root}", "data.image_size=8",
                               "run.batch_size=4", f"run.out_dir={base / 'runs'}"], capsys)
    finally:
        if shape == "unreadable":
            os.chmod(root / "train" / "b", 0o755)
    assert rc == 2
    _assert_message(err, pattern, "train")
    assert not (base / "runs").exists()


def test_mfu_is_never_above_one(tmp_path, capsys, monkeypatch):
    """The GEMM rate measured on a busy machine is too low: the run, faster than it, measures it
    again and divides by the better one; still faster than that, it reports no MFU."""
    from mlplab.train import metrics

    rates = iter([1e3, 1e15])  # busy at the start, quiet later
    monkeypatch.setattr(metrics, "_RATES", {})
    monkeypatch.setattr(metrics, "_matmul_rate", lambda *key: next(rates))
    out = tmp_path / "runs"
    argv = ["train", *TINY, f"run.out_dir={out}", "schedule.epochs=2", "run.name=fast"]
    assert _run(argv, capsys)[0] == 0
    res = json.loads((out / "fast" / "results.json").read_text())
    assert res["matmul_flops_per_s"] == 1e15 and 0 < res["mfu"] <= 1
    assert all(0 < h["mfu"] <= 1 for h in res["history"])
    monkeypatch.setattr(metrics, "_RATES", {})
    monkeypatch.setattr(metrics, "_matmul_rate", lambda *key: 1e3)  # busy throughout
    rc, stdout, err = _run([*argv[:-1], "run.name=busy", "run.log=lines"], capsys)
    assert rc == 0
    res = json.loads((out / "busy" / "results.json").read_text())
    assert res["mfu"] is None and all(h["mfu"] is None for h in res["history"]) and " mfu " not in stdout + err


def test_report_finds_the_scale_folder_that_exists(tmp_path, capsys, monkeypatch):
    import shutil

    monkeypatch.chdir(tmp_path)
    rc, _, err = _run(["report", "fig6"], capsys)
    assert rc == 2
    _assert_message(err, r"no runs of fig6 in runs/experiments/fig6-\{smoke,quick,cpu,paper\}; make them with "
                         r"`mlplab reproduce fig6 --scale quick` \(or give their folder with --out\)", "report")
    assert "ID" not in err and not (tmp_path / "runs").exists()
    rc, _, err = _run(["report", "fig6", "--scale", "cpu"], capsys)
    assert rc == 2
    _assert_message(err, r"runs/experiments/fig6-cpu holds no runs of fig6 \(no experiment\.json\); make them with "
                         r"`mlplab reproduce fig6 --scale cpu`", "report")
    assert _run(["reproduce", "figS9", "--scale", "smoke", "--no-report"], capsys)[0] == 0
    rc, stdout, err = _run(["report", "figS9"], capsys)  # the smoke folder, the only one
    assert rc == 0, err
    assert (tmp_path / "runs" / "experiments" / "figS9-smoke" / "report.md").exists()
    experiments = tmp_path / "runs" / "experiments"
    shutil.copytree(experiments / "figS9-smoke", experiments / "figS9-quick")
    before = _snapshot(tmp_path / "runs")
    rc, _, err = _run(["report", "figS9"], capsys)
    assert rc == 2
    _assert_message(err, r"runs of figS9 are in runs/experiments/figS9-smoke, runs/experiments/figS9-quick; choose one "
                         r"with --scale smoke or --scale quick \(or give a folder with --out\)", "report")
    assert _snapshot(tmp_path / "runs") == before


def test_a_full_disk_at_the_run_folders_lock_names_it_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    from mlplab.utils import io as mio

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(mio.os, "pwrite", full)
    rc, _, err = _run(["train", *TINY, f"run.out_dir={tmp_path / 'runs'}", "run.name=f"], capsys)
    assert rc == 1
    _assert_message(err, r"cannot write .*runs/f/\.lock: No space left on device; free space", "train")
    assert not (tmp_path / "runs").exists()
