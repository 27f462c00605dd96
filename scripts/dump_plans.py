"""Write every experiment's expanded runs per (id, scale, dataset) as JSON, to compare a change
to the specs before and after: a refactoring leaves every file identical (the ``.cost`` files hold
the estimates, which may move).

    python scripts/dump_plans.py /tmp/plans-before [ID ...]
    # change the specs
    python scripts/dump_plans.py /tmp/plans-after [ID ...]
    diff -r /tmp/plans-before /tmp/plans-after
"""
import json
import sys
from pathlib import Path

from mlplab.experiments import expand, list_experiments, plan_experiment
from mlplab.experiments.cost import estimate_cost

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
CASES = [("smoke", None, True), ("quick", None, True), ("cpu", None, True), ("quick", None, False),
         ("cpu", None, False), ("paper", None, False)]
for ds in ("cifar10", "cifar100", "stl10", "imagefolder", "mnist", "fashion_mnist"):
    CASES.append(("paper", ds, False))
    CASES.append(("cpu", ds, False))


def canon(v):
    return json.loads(json.dumps(v, sort_keys=True, default=repr))


ids = sys.argv[2:] or list_experiments()
for id in ids:
    for scale, ds, avail in CASES:
        tag = f"{id}__{scale}__{ds or 'default'}__{'avail' if avail else 'noavail'}"
        try:
            exp, sc, plan = plan_experiment(id, scale, ds, check_available=avail)
        except Exception as e:
            (out / f"{tag}.json").write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}, indent=1))
            continue
        runs = []
        for si, stage in enumerate(plan.stages):
            for sw in stage:
                for s in expand(sw):
                    runs.append({"stage": si, "sweep": s.sweep, "name": s.name, "task": s.task, "base": s.base,
                                 "overrides": {k: s.overrides[k] for k in sorted(s.overrides)}})
        runs.sort(key=lambda r: (r["stage"], r["sweep"], r["name"]))
        meta = {"settings": plan.settings, "notes": plan.notes, "scale": sc.to_dict(),
                "sweeps": [{"name": s.name, "task": s.task, "epochs": s.epochs, "description": s.description,
                            "name_keys": list(s.name_keys) if s.name_keys is not None else None,
                            "seed_keys": list(s.seed_keys)} for s in plan.sweeps]}
        (out / f"{tag}.json").write_text(json.dumps(canon({"runs": runs, "meta": meta}), indent=1, sort_keys=True))
        try:
            est = estimate_cost(plan, scale)
        except Exception as e:
            est = {"error": f"{type(e).__name__}: {e}"}
        (out / f"{tag}.cost").write_text(json.dumps(canon(est), sort_keys=True))
print("dumped", len(ids), "ids to", out)
