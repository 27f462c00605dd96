"""Every duration key of a config against its closed form, in exact rational arithmetic.

A length given in epochs is the decimal the config holds times the full batches per epoch,
rounded up (``schedule.epochs=1.1`` at 50 steps per epoch is 55 steps, not the 56 that
``ceil(1.1 * 50)`` gives in floats); in examples it is the fewest steps of the global batch that
see them all; a warmup in epochs is the nearest whole step (ties to even, as Python's ``round``).
Each of P processes reads ⌊N/P⌋ examples in full batches of B/P, and the evaluation batch is
``run.eval_batch_size``, else 4B capped at 1024, split over the processes.
"""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlplab.errors import BadInput
from mlplab.train import make_config
from mlplab.train.config import durations


def exact(x: float) -> Fraction:
    """The decimal a config value was written as (1.1, not the float nearest to it)."""
    return Fraction(repr(float(x)))


def oracle(n, world, batch, accumulate, length, warmup, eval_batch=None, lr_batch=None, scaling="linear", lr=0.1):
    per_rank = batch // world
    steps_per_epoch = (n // world) // per_rank
    unit, value = length
    if unit == "epochs":
        total = max(1, math.ceil(exact(value) * steps_per_epoch))
    elif unit == "steps":
        total = value
    else:
        total = next(s for s in range(1, value + 1) if s * batch >= value)
    w_unit, w_value = warmup
    w = 0 if w_value is None else (round(exact(w_value) * steps_per_epoch) if w_unit == "epochs" else w_value)
    epochs = next(e for e in range(1, total + 1) if e * steps_per_epoch >= total)
    ratio = 1 if lr_batch is None else Fraction(batch, lr_batch)
    peak = lr * (float(ratio) if scaling == "linear" else math.sqrt(ratio))
    return dict(batch_per_rank=per_rank, eval_batch_per_rank=max(1, (eval_batch or min(1024, 4 * batch)) // world),
                steps_per_epoch=steps_per_epoch, total_steps=total, total_epochs=epochs,
                warmup_steps=min(w, total), peak_lr=peak)


def _run(n, world, batch, accumulate, length, warmup, eval_batch=None, lr_batch=None, scaling="linear"):
    unit, value = length
    w_unit, w_value = warmup
    cfg = make_config(None, {"schedule.epochs": None, f"schedule.{unit}": value,
                             f"schedule.warmup_{w_unit}": w_value, "run.batch_size": batch,
                             "run.accumulate_steps": accumulate, "run.eval_batch_size": eval_batch,
                             "optim.lr": 0.1, "optim.lr_batch": lr_batch, "optim.lr_scaling": scaling})
    got = vars(durations(cfg, n, world))
    want = oracle(n, world, batch, accumulate, length, warmup, eval_batch, lr_batch, scaling)
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("n,world,batch,length,warmup,want_steps,want_warmup", [
    (50 * 32, 1, 32, ("epochs", 1.1), ("epochs", 0.1), 55, 5),  # ceil(1.1 * 50) is 56 in floats
    (25 * 64, 2, 64, ("epochs", 2.2), ("steps", 3), 55, 3),  # 2.2 * 25 = 55.00000000000001 in floats
    (45 * 32, 1, 32, ("steps", 100), ("epochs", 0.7), 100, 32),  # 0.7 * 45 = 31.5, 31.499999999999996 in floats
    (100 * 8 + 7, 4, 8, ("epochs", 2.5), ("epochs", 0.25), 250, 25),  # 807 // 4 = 201 per rank: 100 steps
    (320, 1, 32, ("examples", 321), ("epochs", 0.25), 11, 2),  # 0.25 * 10 = 2.5: ties to even
    (320, 1, 32, ("steps", 4), ("epochs", 1.0), 4, 4),  # warmup never longer than the run
    (2048, 2, 512, ("steps", 3), ("steps", None), 3, 0),  # evaluation batch 4 x 512 capped at 1024
    (2000, 1, 200, ("epochs", 0.01), ("steps", None), 1, 0),  # at least one step; evaluation batch 800
])
def test_durations_of_worked_examples(n, world, batch, length, warmup, want_steps, want_warmup):
    _run(n, world, batch, 1, length, warmup)
    o = oracle(n, world, batch, 1, length, warmup)
    assert (o["total_steps"], o["warmup_steps"]) == (want_steps, want_warmup)


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(world=st.sampled_from([1, 2, 4]), per_rank=st.integers(1, 9), accumulate=st.sampled_from([1, 2, 3]),
       batches=st.integers(1, 60), spare=st.integers(0, 30),
       length=st.one_of(st.tuples(st.just("epochs"), st.integers(1, 400).map(lambda k: k / 20)),
                        st.tuples(st.just("steps"), st.integers(1, 500)),
                        st.tuples(st.just("examples"), st.integers(1, 5000))),
       warmup=st.one_of(st.tuples(st.just("epochs"), st.integers(0, 60).map(lambda k: k / 20)),
                        st.tuples(st.just("steps"), st.integers(0, 50)), st.just(("steps", None))),
       eval_batch=st.one_of(st.none(), st.integers(1, 3000)), lr_batch=st.one_of(st.none(), st.integers(1, 512)),
       scaling=st.sampled_from(["linear", "sqrt"]))
def test_every_duration_key_is_its_closed_form(world, per_rank, accumulate, batches, spare, length, warmup,
                                               eval_batch, lr_batch, scaling):
    batch = world * per_rank * accumulate
    n = batch * batches + spare  # at least one full batch per process
    _run(n, world, batch, accumulate, length, warmup, eval_batch, lr_batch, scaling)


def test_sizes_that_do_not_divide_are_refused():
    with pytest.raises(BadInput, match="divisible by the 3 processes"):
        _run(100, 3, 32, 1, ("steps", 1), ("steps", None))
    with pytest.raises(BadInput, match="does not divide"):
        _run(100, 2, 32, 3, ("steps", 1), ("steps", None))
    with pytest.raises(BadInput, match="fewer than one batch"):
        _run(31, 2, 32, 1, ("steps", 1), ("steps", None))  # 15 per process, batches of 16


def test_a_run_has_exactly_one_length_and_at_most_one_warmup_each_in_range():
    """Each refusal of a duration, in its whole sentence: two lengths (or none), two warmups, a
    length ≤ 0, a negative warmup, floor or start, and a floor above the peak."""
    def refused(overrides, sentence):
        with pytest.raises(ValueError) as e:
            make_config(None, {"schedule.epochs": None, **overrides})
        assert str(e.value) == sentence

    refused({"schedule.steps": 5, "schedule.examples": 9},
            "schedule: give exactly one training length of schedule.epochs, schedule.steps, schedule.examples "
            "(got epochs=None, steps=5, examples=9); to switch units, null the other, e.g. schedule.epochs=null "
            "schedule.steps=500")
    refused({}, "schedule: give exactly one training length of schedule.epochs, schedule.steps, schedule.examples "
                "(got epochs=None, steps=None, examples=None); to switch units, null the other, e.g. "
                "schedule.epochs=null schedule.steps=500")
    refused({"schedule.epochs": 1, "schedule.steps": 5, "schedule.examples": 9},
            "schedule: give exactly one training length of schedule.epochs, schedule.steps, schedule.examples "
            "(got epochs=1.0, steps=5, examples=9); to switch units, null the other, e.g. schedule.epochs=null "
            "schedule.steps=500")
    refused({"schedule.steps": 5, "schedule.warmup_epochs": 0.5, "schedule.warmup_steps": 0},
            "schedule: give warmup in epochs or steps, not both (warmup_epochs=0.5, warmup_steps=0)")
    for key, bad in (("epochs", 0.0), ("steps", 0), ("examples", -3)):
        refused({f"schedule.{key}": bad}, f"schedule.{key} must be > 0, got {bad}")
    for key in ("warmup_epochs", "warmup_steps", "min_lr", "warmup_start_lr"):
        bad = -1 if key == "warmup_steps" else -0.5
        refused({"schedule.steps": 5, f"schedule.{key}": bad}, f"schedule.{key} must be >= 0, got {bad}")
    refused({"schedule.steps": 5, "schedule.min_lr": 0.2, "optim.lr": 0.1},
            "schedule.min_lr=0.2 is above optim.lr=0.1")
    ok = make_config(None, {"schedule.epochs": None, "schedule.steps": 5, "schedule.min_lr": 0.1, "optim.lr": 0.1,
                            "schedule.warmup_steps": 0, "schedule.warmup_start_lr": 0.0})
    assert (ok.schedule.min_lr, ok.schedule.warmup_steps) == (0.1, 0)  # a floor at the peak, no warmup: allowed


@pytest.mark.parametrize("world,eval_batch,want", [(4, 3, 1), (2, 3, 1), (1, 1, 1), (4, 1, 1), (2, 1025, 512)])
def test_the_evaluation_batch_per_process_is_at_least_one(world, eval_batch, want):
    cfg = make_config(None, {"schedule.epochs": None, "schedule.steps": 1, "run.batch_size": 4 * world,
                             "run.eval_batch_size": eval_batch})
    assert durations(cfg, 64 * world, world).eval_batch_per_rank == want


@pytest.mark.parametrize("batch,want", [(3, 12), (255, 1020), (256, 1024), (300, 1024)])
def test_one_process_by_default_and_an_evaluation_batch_of_four_batches_up_to_1024(batch, want):
    cfg = make_config(None, {"schedule.epochs": None, "schedule.steps": 1, "run.batch_size": batch})
    d = durations(cfg, 2 * batch)  # one process unless told: an odd batch is not split
    assert (d.batch_per_rank, d.steps_per_epoch, d.eval_batch_per_rank) == (batch, 2, want)
