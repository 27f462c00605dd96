"""Fixtures for every test."""
import pytest


@pytest.fixture(autouse=True)
def _estimates_independent_of_the_host(monkeypatch):
    """Cost estimates in tests use the module's constants, not the fit for this machine's CPU
    kind (``cost.cpu_machine``): a committed calibration must not change what a test expects."""
    from mlplab.experiments import cost

    monkeypatch.setattr(cost, "host_tag", lambda: "tests-host")
