"""Progress: a tqdm bar with rate and time left on a terminal, one line per epoch elsewhere; the
experiment tally's ``[k/N]`` and time left from the cost model's estimates."""
import io

from mlplab.utils import progress as P
from mlplab.utils.progress import Progress, RunTally, byte_bar, format_duration


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere():
    assert Progress("auto", _Tty()).mode == "bar"
    assert Progress("auto", io.StringIO()).mode == "lines"


def test_bar_shows_rate_and_time_left_and_lines_close_it():
    out = _Tty()
    p = Progress("bar", out, interval=0.0)
    assert p.due()
    for done in (1, 5, 10):
        p.update(2, 3, done, 20, f"loss {1 / done:.3f}")
    text = out.getvalue()
    assert "epoch 2/3" in text and "step/s" in text and "loss 0.100" in text and "run " in text and " left" in text
    p.line("epoch 2/3 step 40 train_loss 0.1")
    assert out.getvalue().endswith("epoch 2/3 step 40 train_loss 0.1\n")
    assert list(p.iterate(range(3), "test")) == [0, 1, 2]


def test_lines_mode_never_asks_for_updates_and_none_is_silent():
    out = io.StringIO()
    p = Progress("lines", out)
    assert not p.due()
    batches = [1, 2]
    assert p.iterate(batches, "test") is batches  # no bar, no wrapper
    p.line("epoch 1/1")
    assert out.getvalue() == "epoch 1/1\n"
    quiet = io.StringIO()
    Progress("none", quiet).line("x")
    assert quiet.getvalue() == ""


def test_run_tally_counts_every_stage_and_rescales_the_estimate(monkeypatch):
    clock = iter([100.0, 160.0, 200.0, 200.0])  # the first run starts at 100 s, ends at 160 s
    monkeypatch.setattr(P.time, "perf_counter", lambda: next(clock))
    t = RunTally({"a/1": 30.0, "a/2": 30.0, "b/1": 60.0, "b/2": 120.0}, jobs=2)
    t.track("d1", "a/1")
    t.skip("d1")  # finished before: done, no time
    assert t.seconds_left() == (30 + 60 + 120) / 2  # nothing timed yet: the estimate over 2 workers
    t.track("d2", "a/2")
    assert t.starting("d2", "run2").startswith("[2/4] run2 (~")
    # a/2 was estimated at 30 s and took 60 s of wall time: the rest (180 s estimated) takes ~360 s
    line = t.finish("d2", "done", "run2")
    assert line == "[2/4] done    run2 (~6 min left)"
    assert RunTally(total=2).finish("x", "failed", "r") == "[1/2] failed  r"  # no estimates: counts only


def test_run_tally_estimates_from_the_first_line_with_parallel_workers(monkeypatch):
    """``reproduce --jobs 2``: each start prints the cost model's estimate over 2 workers, and the
    first finish (the clock runs from the start, not from that line) the estimate rescaled by
    the pace so far, never "~0 s left" with runs to go."""
    now = [1000.0]
    monkeypatch.setattr(P.time, "perf_counter", lambda: now[0])
    t = RunTally({f"s/{i}": 60.0 for i in range(26)}, jobs=2)
    for i in range(26):
        t.track(f"d{i}", f"s/{i}")
    assert t.starting("d0", "r0") == "[1/26] r0 (~13 min left)"  # 26 x 60 s over 2 workers
    assert t.starting("d1", "r1") == "[2/26] r1 (~13 min left)"
    now[0] += 90.0  # the first run took 90 s (1.5 x its estimate)
    assert t.finish("d0", "done", "r0") == "[1/26] done    r0 (~38 min left)"  # 25 x 60 s x 90 / 60


def test_byte_bar_is_silent_off_a_terminal_and_format_duration():
    quiet = io.StringIO()
    with byte_bar(1000, "f.gz", quiet) as bar:
        bar.update(500)
    assert quiet.getvalue() == ""
    loud = _Tty()
    with byte_bar(1 << 20, "f.gz", loud) as bar:
        bar.update(1 << 19)
    assert "f.gz" in loud.getvalue() and "1.00M" in loud.getvalue() and "B/s" in loud.getvalue()
    assert [format_duration(s) for s in (45, 600, 9000, 3 * 86400)] == ["45 s", "10 min", "2.5 h", "3 d"]
