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
