import json
import os
import re
from pathlib import Path

import pytest

from mlplab.utils.io import atomic_save, atomic_write_json, atomic_write_text


def test_atomic_write_replaces_whole_file(tmp_path):
    p = tmp_path / "sub" / "results.json"
    atomic_write_json(p, {"a": 1})
    atomic_write_json(p, {"a": 2})
    assert json.loads(p.read_text()) == {"a": 2}
    assert [f.name for f in p.parent.iterdir()] == ["results.json"]  # no temp files left


def test_crash_during_write_keeps_old_file_and_no_temp(tmp_path):
    p = tmp_path / "ckpt.bin"
    atomic_write_text(p, "old")

    def writer(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError):
        atomic_save(p, writer)
    assert p.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["ckpt.bin"]


def test_files_get_the_mode_the_umask_gives(tmp_path):
    from mlplab.utils.io import file_mode

    old = os.umask(0o027)
    try:
        assert file_mode() == 0o640
        p = atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert p.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("data, reason", [
    (b"", "is empty"),
    (b'{"a": ', r"is not valid JSON \(Expecting value at line 1 column 7\)"),
    (b"\xff\xfe", r"is not UTF-8 text \(byte 0\)"),
    (b"[1]", "holds a JSON list, not an object"),
])
def test_read_json_names_the_file_and_what_is_wrong(tmp_path, data, reason):
    from mlplab.errors import BadInput, UnreadableFile
    from mlplab.utils.io import read_json

    p = tmp_path / "results.json"
    p.write_bytes(data)
    with pytest.raises(UnreadableFile, match=rf"results file .*results\.json {reason}; it was cut short"):
        read_json(p, "results file")
    with pytest.raises(BadInput, match=rf"sweep file .*results\.json {reason}; fix it"):
        read_json(p, "sweep file", users=True)


def test_folder_lock_is_exclusive_across_processes_and_reentrant_within_one(tmp_path):
    import subprocess
    import sys

    from mlplab.errors import FolderInUse
    from mlplab.utils.io import folder_lock

    with folder_lock(tmp_path):
        with folder_lock(tmp_path):  # the same process again (reproduce, then its sweeps)
            pass
        code = (f"from mlplab.utils.io import folder_lock\nwith folder_lock({str(tmp_path)!r}):\n    pass\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert r.returncode == 1 and f"is in use by process {os.getpid()}" in r.stderr
    with folder_lock(tmp_path):  # released
        pass
    assert FolderInUse.__mro__[1].__name__ == "RunFailure"


def _holder(lock: Path, content: bytes):
    """Another process holding ``lock`` (plain fcntl, as any mlplab writer does), having written ``content``."""
    import subprocess
    import sys

    code = ("import fcntl, os, sys, time\n"
            f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
            f"fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, {content!r}); print('held', flush=True)\n"
            "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.mark.parametrize("content, holder", [(b"777\nmlplab pack A P\n", "process 777 (mlplab pack A P)"),
                                             (b"4242\n", "process 4242"),  # an older mlplab wrote its PID only
                                             (b"", "another process")])
def test_a_refused_second_writer_is_told_the_holders_pid_and_command(tmp_path, monkeypatch, content, holder):
    import sys

    from mlplab.errors import FolderInUse
    from mlplab.utils.io import folder_lock

    monkeypatch.setattr(sys, "argv", ["/venv/bin/mlplab", "pack", "my images", "p"])
    with folder_lock(tmp_path):
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\nmlplab pack 'my images' p\n"
    p = _holder(tmp_path / ".lock", content)
    try:
        with pytest.raises(FolderInUse, match=rf"^{tmp_path} is in use by {re.escape(holder)}; wait for it to finish "
                                              r"\(or stop it\)$"):
            with folder_lock(tmp_path):
                pass
    finally:
        p.kill()
        p.wait()


def test_the_command_line_a_second_writer_is_told(monkeypatch):
    import sys

    from mlplab.utils.io import command_line

    for argv, expected in [(["/venv/bin/mlplab", "pack", "my images", "p"], "mlplab pack 'my images' p"),
                           (["/src/mlplab/cli.py", "train", "x"], "mlplab train x"),  # python -m mlplab.cli
                           (["/src/mlplab/experiments/worker.py", "/r"], "python -m mlplab.experiments.worker /r"),
                           (["/usr/bin/pytest", "-q"], "pytest -q"), ([], "python")]:
        monkeypatch.setattr(sys, "argv", argv)
        assert command_line() == expected
    monkeypatch.setattr(sys, "argv", ["tool.py", "a" * 600])
    assert len(command_line()) == 500 and command_line().endswith("...")


def test_a_full_disk_at_the_lock_names_the_lock_file(tmp_path, monkeypatch):
    import errno

    from mlplab.utils import io as mio

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(mio.os, "pwrite", full)
    with pytest.raises(OSError) as e:
        with mio.folder_lock(tmp_path):
            pass
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / ".lock")


def test_a_claimed_folder_that_the_call_fails_in_is_left_as_it_was(tmp_path):
    from mlplab.utils.io import claimed_folder

    new = tmp_path / "a" / "b" / "c"
    with pytest.raises(ValueError):
        with claimed_folder(new):
            raise ValueError("refused")
    assert list(tmp_path.iterdir()) == []  # the folder, its parents and the lock: gone
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("x")
    with pytest.raises(ValueError):
        with claimed_folder(mine):
            assert (mine / ".lock").exists()
            raise ValueError("refused")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    with pytest.raises(ValueError):
        with claimed_folder(new):
            (new / "result.json").write_text("{}")  # written before the failure: kept, with its folders
            raise ValueError("crashed")
    assert sorted(p.name for p in new.iterdir()) == ["result.json"]
    with claimed_folder(new):
        pass
    assert sorted(p.name for p in new.iterdir()) == [".lock", "result.json"]
