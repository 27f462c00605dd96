"""pyproject.toml names the oldest torch the code runs on: the newest of the torch APIs it calls.

A GPU node's image often holds its own CUDA torch (scripts/gpu_check.sh uses it as it is, when it
meets this floor), so the floor must be the real one: neither an older version the code fails on,
nor a newer one that would send such a node to pip for nothing."""
from __future__ import annotations

import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

#: torch APIs (a regular expression over src/) and the first torch release that has them
APIS = {
    r"torch\.library\.custom_op": (2, 4),
    r"\.register_fake\b": (2, 4),
    r"torch\.get_autocast_dtype": (2, 4),
    r"torch\.is_autocast_enabled\([^)]": (2, 4),  # the device-type argument
    r"fused_update\(": (2, 4),  # fused=True for CPU parameters (SGD, AdamW)
    r"init_process_group\([^)]*device_id=": (2, 3),
    r"torch\.get_default_device": (2, 3),
    r"torch\.compiler\.is_compiling": (2, 3),
    r"torch\.compiler\.disable": (2, 1),
    r"torch\.utils\.flop_counter": (2, 1),
}


def floor_in_pyproject() -> tuple[int, int]:
    m = re.search(r'"torch>=(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text())
    assert m, "pyproject.toml names no torch floor"
    return int(m.group(1)), int(m.group(2))


def test_the_floor_is_the_newest_api_the_code_calls():
    code = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    used = {pattern: v for pattern, v in APIS.items() if re.search(pattern, code)}
    assert r"torch\.library\.custom_op" in used and r"init_process_group\([^)]*device_id=" in used
    assert floor_in_pyproject() == max(used.values())


def test_this_torch_meets_the_floor():
    here = tuple(int(v) for v in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
    assert here >= floor_in_pyproject()
