"""``reproduce`` resolves an experiment once: each sweep expanded once, each run checked once."""
from collections import Counter

from mlplab.experiments import cost, executors, registry
from mlplab.experiments.registry import plan_experiment, reproduce


def test_reproduce_expands_and_checks_each_sweep_once(tmp_path, monkeypatch):
    expanded, checked = Counter(), Counter()
    real_expand, real_check = registry.expand, executors.check_specs

    def counting_expand(sw):
        expanded[sw.name] += 1
        return real_expand(sw)

    def counting_check(specs, out_dir):
        checked.update(f"{s.sweep}/{s.name}" for s in specs if s.task == "train")
        return real_check(specs, out_dir)

    for module in (registry, cost):
        monkeypatch.setattr(module, "expand", counting_expand)
    for module in (registry, executors):
        monkeypatch.setattr(module, "check_specs", counting_check)
    res = reproduce("fig2a-c", "smoke", out_dir=tmp_path, report=False, verbose=False)
    _, _, plan = plan_experiment("fig2a-c", "smoke")
    train_runs = sum(len(real_expand(sw)) for sw in plan.sweeps if sw.task == "train")
    assert res["failed"] == [] and len(plan.stages) == 2
    assert expanded == Counter({sw.name: 1 for sw in plan.sweeps})
    assert len(checked) == train_runs and set(checked.values()) == {1}
