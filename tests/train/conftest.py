"""Fixtures for the training tests: tiny configs on synthetic data, a subprocess environment."""
import os
import signal

import pytest
from train_helpers import SRC, tiny_overrides

from mlplab.errors import Interrupted
from mlplab.train import make_config


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """A run that stops as if a cluster's stop signal came (``Interrupted``, a KeyboardInterrupt)
    where the test did not expect it fails that test: left alone, pytest ends the whole session as
    interrupted by the user (exit 2), which mutation testing cannot count as a detected mutant. A
    Ctrl-C (SIGINT, or no signal) still ends the session."""
    try:
        return (yield)
    except Interrupted as e:
        if e.signum in (None, signal.SIGINT):
            raise
        raise AssertionError(f"the run stopped as if signalled ({signal.Signals(e.signum).name}): {e}") from e


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
