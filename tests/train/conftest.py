"""Fixtures for the training tests: tiny configs on synthetic data, a subprocess environment."""
import os

import pytest
from train_helpers import SRC, tiny_overrides

from mlplab.train import make_config


@pytest.fixture(autouse=True)
def _process_local_tqdm_lock(monkeypatch):
    """tqdm's write lock holds a semaphore shared with every forked process: mutation testing
    forks one process per mutant, and one stopped while it held the lock would hang every later
    one at its first progress bar. A lock of the process alone behaves the same within it."""
    import threading

    from tqdm import tqdm

    monkeypatch.setattr(tqdm, "_lock", threading.RLock(), raising=False)


@pytest.fixture
def tiny(tmp_path):
    def make(name="run", **extra):
        return make_config(None, tiny_overrides(tmp_path / "runs", name, **extra))
    return make


@pytest.fixture
def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.pop("WORLD_SIZE", None)
    return env
