"""benchmarks/calibrate_cost.py --results: each CPU kind's constants fitted to the CPU seconds
its runs record recover the constants that made them."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrate_cost.py"


@pytest.fixture(scope="module")
def calibrate():
    spec = importlib.util.spec_from_file_location("calibrate_cost", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fit_machine_recovers_the_constants_and_the_rp_slowdown(calibrate):
    rate, kappa, tau, overhead, slow = 1.2e11, 2e-9, 4e-6, 7.0, 1.8

    def run(flops, acts, examples, rp):
        per = 3 * flops / rate + kappa * acts + tau
        return {"flops": flops, "activations": acts, "examples": examples, "rp_share": rp,
                "cpu_s": overhead + examples * per * (slow if rp else 1.0)}

    rows = [run(f, a, n, 0) for f, a, n in [(1e6, 1e4, 6e5), (4e6, 2e4, 6e5), (2e6, 8e4, 3e5), (8e6, 5e3, 1.2e6),
                                           (5e5, 3e4, 9e5)]] + [run(2e6, 2e4, 6e5, 1), run(3e6, 1e4, 6e5, 1)]
    fit = calibrate.fit_machine(rows)
    assert fit["rate"] == pytest.approx(rate, rel=1e-6) and fit["kappa"] == pytest.approx(kappa, rel=1e-6)
    assert fit["tau"] == pytest.approx(tau, rel=1e-6) and fit["overhead_s"] == pytest.approx(overhead, rel=1e-6)
    assert fit["rp_slowdown"] == pytest.approx(slow, rel=1e-6) and fit["runs"] == 7
    assert fit["measured_over_estimated"]["median"] == pytest.approx(1.0, rel=1e-6)
