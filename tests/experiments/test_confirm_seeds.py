"""A confirmatory run never re-trains an exploratory seed: for every id with a cpu scale, the seeds
of the trained runs of its confirmatory plan and of its exploratory plan are disjoint. (Analysis
sweeps over those runs — CKA, probes, k-shot draws — keep their own seed 0: they analyse fresh
models.)"""
import pytest

from mlplab.experiments.recipes import Scale
from mlplab.experiments.registry import get_experiment, list_experiments, plan_experiment
from mlplab.experiments.sweep import expand


def _seeds(plan) -> set[tuple[str, object]]:
    out = set()
    for sw in plan.sweeps:
        if sw.task != "train":
            continue
        for s in expand(sw):
            out |= {(k, s.overrides[k]) for k in sw.seed_keys if k in s.overrides}
    return out


@pytest.mark.parametrize("id", [i for i in list_experiments() if "cpu" in get_experiment(i).scales])
def test_confirmatory_seeds_are_fresh(id):
    explore = _seeds(plan_experiment(id, "cpu", check_available=False)[2])
    confirm = _seeds(plan_experiment(id, "cpu", check_available=False, role="confirmatory")[2])
    assert not explore & confirm, sorted(explore & confirm, key=str)
    assert bool(confirm) == bool(explore)  # an id that trains confirms on trained runs


def test_scale_seeds_start_after_the_exploration():
    explore, confirm = Scale("cpu", "fashion_mnist"), Scale("cpu", "fashion_mnist", role="confirmatory")
    assert explore.seeds(3) == [0, 1, 2] and confirm.seeds(3) == [3, 4, 5, 6, 7]
    assert confirm.seeds(5) == [5, 6, 7, 8, 9] and confirm.seeds(3, confirm=8) == list(range(3, 11))
    assert explore.one_seed() == [0] and confirm.one_seed() == [3]
