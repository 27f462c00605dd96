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
    rate, kappa, tau, step, overhead, slow = 1.2e11, 2e-9, 4e-6, 3e-3, 7.0, 1.8

    def run(flops, acts, examples, batch, rp):
        per = 3 * flops / rate + kappa * acts + tau
        return {"flops": flops, "activations": acts, "examples": examples, "rp_share": rp, "steps": examples / batch,
                "cpu_s": overhead + examples / batch * step + examples * per * (slow if rp else 1.0)}

    rows = [run(f, a, n, b, 0) for f, a, n, b in [(1e6, 1e4, 6e5, 256), (4e6, 2e4, 6e5, 256), (2e6, 8e4, 3e5, 256),
                                                 (8e6, 5e3, 1.2e6, 256), (5e5, 3e4, 9e5, 256), (5e5, 3e4, 9e4, 16),
                                                 (5e5, 3e4, 9e4, 64)]] + [run(2e6, 2e4, 6e5, 256, 1),
                                                                          run(3e6, 1e4, 6e5, 32, 1)]
    fit = calibrate.fit_machine(rows)
    assert fit["rate"] == pytest.approx(rate, rel=1e-6) and fit["kappa"] == pytest.approx(kappa, rel=1e-6)
    assert fit["tau"] == pytest.approx(tau, rel=1e-6) and fit["overhead_s"] == pytest.approx(overhead, rel=1e-6)
    assert fit["step_s"] == pytest.approx(step, rel=1e-6)
    assert fit["rp_slowdown"] == pytest.approx(slow, rel=1e-6) and fit["runs"] == 9
    assert fit["measured_over_estimated"]["median"] == pytest.approx(1.0, rel=1e-6)


def test_runs_that_recorded_a_shared_process_total_are_left_out_by_folder(calibrate, tmp_path):
    """A sweep folder where some run's CPU seconds exceed its wall time plus a start-up ran several
    runs in one process (results.json's cpu_s was the process's total): none of its runs is fitted."""
    import json

    def write(folder, name, cpu, wall, threads=1):
        d = tmp_path / folder / name
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps({"cpu_s": cpu, "wall_s": wall, "threads": threads}))
        return d / "results.json"

    found = [write("own", "a", 130.0, 100.0), write("own", "b", 40.0, 120.0),  # start-up, load
             write("threads", "a", 250.0, 100.0, threads=2),
             write("shared", "a", 100.0, 100.0), write("shared", "b", 161.0, 100.0)]
    assert calibrate.shared_process_folders(found) == {tmp_path / "shared"}
    assert calibrate.shared_process_folders(found[:3] + [write("edge", "a", 160.0, 100.0)]) == set()


def _lockstep_result(path: Path, machine: str = "kind-a") -> Path:
    """A bench_lockstep.py --mode process result of fmnist_fast (16 epochs) timed at 2 epochs, at half
    a core: sequentially 100 CPU s of start-up and 50 per epoch, in lockstep 20 and 52.5."""
    import json

    def run(fixed, per_epoch):
        return {"cpu_s": fixed + 2 * per_epoch, "wall_s": 2 * (fixed + 2 * per_epoch), "train_s": 2 * 2 * per_epoch,
                "epochs": 2, "loadavg": [3.0, 3.0, 3.0]}

    ratio = {"median": 0.6, "lo": 0.5, "hi": 0.7, "n": 2}
    path.write_text(json.dumps({
        "benchmark": "bench_lockstep", "machine": machine, "command": "python benchmarks/bench_lockstep.py",
        "args": {"mode": "process", "seeds": "5"},
        "results": {"fmnist_fast": {"runs": {"off": [run(100, 50)] * 2, "on": [run(20, 52.5)] * 2},
                                    "cpu_ratio": ratio, "wall_ratio": ratio, "recipe_epochs": 16.0}}}))
    return path


def test_the_lockstep_factor_is_the_cpu_ratio_at_the_recipes_epochs(calibrate, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    table = calibrate.lockstep_table([_lockstep_result(tmp_path / "a.json")])
    at_16 = (20 + 16 * 52.5) / (100 + 16 * 50)
    assert table["factor"] == {"bottleneck_mlp": round(at_16, 3)} and table["machine"] == "kind-a"
    x = table["measured"]["bottleneck_mlp"]
    assert x["cpu_at_recipe_epochs"] == pytest.approx(at_16) and x["wall_at_recipe_epochs"] == pytest.approx(at_16)
    assert x["recipe"] == "fmnist_fast" and x["seeds"] == 5 and x["epochs"] == 2 and table["loadavg"] == [3.0, 3.0]


def test_lockstep_results_of_two_cpu_kinds_are_refused(calibrate, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    files = [_lockstep_result(tmp_path / "a.json"), _lockstep_result(tmp_path / "b.json", machine="kind-b")]
    with pytest.raises(SystemExit, match="2 CPU kinds"):
        calibrate.lockstep_table(files)


def test_fit_linear_eval_recovers_its_units_and_writes_them(calibrate, tmp_path, monkeypatch):
    """``--results`` also fits the ``linear_eval`` task's units (per example, per few-shot fit) to
    its runs' wall seconds, from the examples they recorded and the fits their spec asks for."""
    import json

    per_example, per_fit = 1e-4, 2e-3

    def write(name, train, test, shots=None, draws=None):
        d = tmp_path / "exp" / "runs" / "probe" / name
        d.mkdir(parents=True)
        o = {"probe": True, **({"shots": shots} if shots else {}), **({"draws": draws} if draws else {})}
        fits = (draws or 5) * len(shots or [])
        (d / "spec.json").write_text(json.dumps({"name": name, "task": "linear_eval", "overrides": o}))
        (d / "results.json").write_text(json.dumps({"train_examples": train, "test_examples": test,
                                                    "wall_s": per_example * (train + test) + per_fit * fits}))

    write("a", 5000, 5000)
    write("b", 3000, 5000)
    write("c", 30000, 5000, shots=[1, 5, 10, 25], draws=20)
    write("d", 30000, 5000, shots=[1, 5])  # draws: the task's default, 5
    other = tmp_path / "exp" / "runs" / "pretrain" / "x"  # a training run: not a probe
    other.mkdir(parents=True)
    (other / "spec.json").write_text(json.dumps({"name": "x", "task": "train", "overrides": {}}))
    (other / "results.json").write_text(json.dumps({"wall_s": 99.0, "train_examples": 1, "test_examples": 1}))
    calib = tmp_path / "cost_calibration.json"
    calib.write_text(json.dumps({"task_units": {"spectrum": {"s": 0.5}}}))
    monkeypatch.setattr(calibrate, "CALIBRATION_FILE", calib)

    out = calibrate.fit_linear_eval([tmp_path], write=True)
    assert out["linear_eval"]["s"] == pytest.approx(per_example, rel=1e-9)
    assert out["linear_eval_fit"]["s"] == pytest.approx(per_fit, rel=1e-9)
    assert "4 runs" in out["linear_eval"]["measured"]
    written = json.loads(calib.read_text())["task_units"]
    assert written["spectrum"] == {"s": 0.5} and written["linear_eval"]["s"] == pytest.approx(per_example, rel=1e-9)
    assert calibrate.fit_linear_eval([tmp_path / "exp" / "runs" / "pretrain"], write=False) == {}
