"""scripts/gpu_check.py stays runnable: its checks run small on the CPU (the sync check is
vacuous there; the meta-device test in tests/data covers it), and without a GPU it says so."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_without_a_gpu_it_says_so(gpu_check, capsys, monkeypatch):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--quick"]) == 2
    assert "no CUDA device visible" in capsys.readouterr().err


@pytest.mark.slow
def test_checks_run_on_the_cpu(gpu_check, tmp_path, capsys):
    out = tmp_path / "summary.json"
    rc = gpu_check.main(["--device", "cpu", "--quick", "--only", "sync,train", "--no-compile", "--out", str(out)])
    printed = capsys.readouterr().out
    summary = json.loads(out.read_text())
    assert rc == 0, printed
    assert set(summary["checks"]) == {f"sync_free[{r}]" for r in gpu_check.RECIPES} | \
        {f"train[{m},eager]" for m in gpu_check.MODELS}
    assert all(c["pass"] for c in summary["checks"].values())
    assert printed.count("PASS ") == len(summary["checks"]) and f"{len(summary['checks'])} passed, 0 failed" in printed
