"""A Ctrl-C that Python swallowed where it landed (mlplab.utils.interrupts) still stops a run
called from Python within one step: solo and in lockstep, with the last checkpoint kept and no
results written; a caller's own Ctrl-C handler is left in place."""
import signal
from pathlib import Path

import pytest

from mlplab.errors import Interrupted
from mlplab.train import train
from mlplab.train.lockstep import train_lockstep
from mlplab.train.rundir import checkpoint_epoch


def _swallow_after_epoch(swallow_signal, epoch):
    def on_epoch_end(rec):
        if rec["epoch"] == epoch:
            assert swallow_signal(signal.SIGINT)  # swallowed: the handler's exception went nowhere
    return on_epoch_end


def test_a_run_stops_one_step_after_a_swallowed_ctrl_c(tiny, swallow_signal):
    cfg = tiny("solo", **{"schedule.epochs": 3})
    with pytest.raises(Interrupted) as e:
        train(cfg, on_epoch_end=_swallow_after_epoch(swallow_signal, 1))
    run_dir = Path(cfg.run.out_dir) / cfg.run.name
    assert e.value.signum == signal.SIGINT
    assert e.value.message.startswith(f"interrupted at epoch 2 of {run_dir} (the checkpoint of epoch 1"), e.value
    assert checkpoint_epoch(run_dir) == 1 and not (run_dir / "results.json").exists()


def test_seeds_in_lockstep_stop_one_step_after_a_swallowed_ctrl_c(tiny, swallow_signal):
    cfgs = [tiny(f"seed={s}", **{"schedule.epochs": 3, "run.seed": s, "model.kwargs.seed": s}) for s in (0, 1)]
    with pytest.raises(Interrupted) as e:
        train_lockstep(cfgs, on_epoch_end=_swallow_after_epoch(swallow_signal, 1))
    assert e.value.signum == signal.SIGINT
    for c in cfgs:
        d = Path(c.run.out_dir) / c.run.name
        assert checkpoint_epoch(d) == 1 and not (d / "results.json").exists()


def test_a_run_interrupted_after_its_last_epoch_says_so(tiny):
    """Not "epoch 4" of a 3-epoch run: the final test and files were what it was doing."""
    cfg = tiny("late", **{"schedule.epochs": 3})

    def stop(rec):
        if rec["epoch"] == 3:
            raise KeyboardInterrupt
    with pytest.raises(Interrupted) as e:
        train(cfg, on_epoch_end=stop)
    run_dir = Path(cfg.run.out_dir) / cfg.run.name
    assert e.value.message == (f"interrupted after the last epoch (3) of {run_dir}, before its results were written "
                               "(the checkpoint of epoch 3 is kept)")


def test_a_callers_own_ctrl_c_handler_and_sigterm_are_left_in_place(tiny, swallow_signal):
    """A notebook or an application that handles SIGINT itself keeps it while the run trains, and
    SIGTERM keeps whatever the caller gave it (only the mlplab commands make it a Ctrl-C)."""
    seen = []

    def own(signum, frame):
        seen.append(signum)
    signal.signal(signal.SIGINT, own)  # swallow_signal puts the previous handler back afterwards
    term = signal.getsignal(signal.SIGTERM)
    res = train(tiny("own", **{"schedule.epochs": 2}),
                on_epoch_end=lambda rec: seen.append((signal.getsignal(signal.SIGINT) is own,
                                                      signal.getsignal(signal.SIGTERM) is term)))
    assert seen == [(True, True), (True, True)] and res["epochs"] == 2
