"""Stop signals that cannot be lost (mlplab.utils.interrupts): a Ctrl-C or SIGTERM that Python
swallows where it landed (inside a weakref callback) is raised again at the next check, and
nothing of it outlives the command that received it."""
import json
import os
import signal
import subprocess
import sys

import pytest

from mlplab import cli
from mlplab.errors import Interrupted
from mlplab.experiments import tasks
from mlplab.utils.interrupts import raise_if_interrupted, stop_signals


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_swallowed_stop_signal_is_raised_at_the_next_check(swallow_signal, sig):
    with stop_signals():
        swallowed = swallow_signal(sig)
        assert [type(e) for e in swallowed] == [Interrupted]  # Python ignored it where it landed
        with pytest.raises(Interrupted) as e:
            raise_if_interrupted()
        assert e.value.signum == sig and e.value.message == ""
    raise_if_interrupted()  # forgotten with the command that received it


def test_a_stop_signal_raises_where_it_lands_and_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals():
        with pytest.raises(Interrupted) as e:
            signal.raise_signal(signal.SIGTERM)
        assert e.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
    raise_if_interrupted()


def test_a_nested_entry_keeps_the_signal_until_the_outermost_ends(swallow_signal):
    with stop_signals():
        with stop_signals((signal.SIGTERM,)):
            swallow_signal(signal.SIGTERM)
        with pytest.raises(Interrupted):  # the inner one ended; the command has not
            raise_if_interrupted()
    raise_if_interrupted()


def test_ctrl_c_inherited_as_ignored_stays_ignored():
    """A command started with ``&`` from a script ignores Ctrl-C, as the shell meant."""
    code = ("import signal, os\n"
            "from mlplab.utils.interrupts import stop_signals\n"
            "with stop_signals():\n"
            "    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "print('still here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0 and done.stdout.strip() == "still here", done.stderr


def test_a_sweep_stops_before_its_next_run_after_a_swallowed_ctrl_c(tmp_path, capsys, monkeypatch, swallow_signal):
    """The inline executor checks between runs: the run in which Ctrl-C was swallowed finishes,
    no later run starts, and the command says how to continue."""
    def swallowing(o, run_dir):
        swallow_signal(signal.SIGINT)
        return {"test_acc": 0.5}

    monkeypatch.setitem(tasks.TASKS, "swallowing", swallowing)
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"name": "s", "task": "swallowing", "axes": [["value", [1, 2, 3]]]}))
    out = tmp_path / "out"
    rc = cli.main(["sweep", str(f), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 130, err
    assert "interrupted with 1 of 3 run(s) finished" in err and "continue with mlplab sweep" in err, err
    assert len(list(out.rglob("results.json"))) == 1


def test_a_sweep_called_from_python_stops_before_its_next_run_after_a_swallowed_ctrl_c(tmp_path, monkeypatch,
                                                                                      swallow_signal):
    from mlplab.experiments.executors import run_sweep
    from mlplab.experiments.sweep import Sweep, product

    monkeypatch.setitem(tasks.TASKS, "swallowing", lambda o, run_dir: (swallow_signal(signal.SIGINT), {})[1])
    with pytest.raises(Interrupted) as e:
        run_sweep(Sweep("s", {}, [product(("value", [1, 2, 3]))], task="swallowing"), tmp_path, verbose=False)
    assert e.value.signum == signal.SIGINT and "interrupted with 1 of 3 run(s) finished" in e.value.message
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handler is back
