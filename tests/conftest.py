"""Fixtures for every test."""
import pytest


@pytest.fixture(autouse=True)
def _estimates_independent_of_the_host(monkeypatch):
    """Cost estimates in tests use the module's constants, not the fit for this machine's CPU
    kind (``cost.cpu_machine``): a committed calibration must not change what a test expects."""
    from mlplab.experiments import cost

    monkeypatch.setattr(cost, "host_tag", lambda: "tests-host")


@pytest.fixture
def swallow_signal(monkeypatch):
    """``swallow_signal(sig)`` delivers ``sig`` inside a weakref callback, where the handler's
    exception is "ignored" (Python hands it to ``sys.unraisablehook`` and carries on): a Ctrl-C
    lost the way a real one is lost when it lands while a ``WeakSet`` forgets an object. Returns
    the exceptions so swallowed, to show the swallowing happened. Ctrl-C has its terminal
    disposition for the test (a suite started in the background, or by mutmut, ignores it)."""
    import signal
    import sys
    import weakref

    swallowed: list[BaseException] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_value))

    class _Freed:
        pass

    def swallow(sig=signal.SIGINT):
        obj = _Freed()
        weakref.finalize(obj, signal.raise_signal, sig)
        del obj  # the finalizer runs here; raise_signal runs the handler at once, inside it
        return swallowed

    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield swallow
    signal.signal(signal.SIGINT, inherited)
