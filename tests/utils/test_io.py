import json
import os

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
