"""Sweep expansion: product / zip / seeds / derived fan-out, folder names, sweep files."""
import json

import pytest

from mlplab.experiments.sweep import (
    RunSpec,
    Sweep,
    expand,
    flatten_overrides,
    load_sweep_file,
    nest_overrides,
    product,
    run_name,
    sweep_from_dict,
    zip_axes,
)


def test_product_zip_and_seeds():
    sw = Sweep("s", {"optim.name": "sgd"},
               [product(("optim.lr", [0.1, 0.01]), ("run.batch_size", [64, 128])),
                zip_axes(("model.kwargs.num_tokens", [16, 32]), ("model.kwargs.hidden_dim", [173, 113]))],
               seeds=[0, 1])
    specs = expand(sw)
    assert len(specs) == 2 * 2 * 2 * 2
    pairs = {(s.overrides["model.kwargs.num_tokens"], s.overrides["model.kwargs.hidden_dim"]) for s in specs}
    assert pairs == {(16, 173), (32, 113)}  # zipped, not crossed
    assert all(s.overrides["optim.name"] == "sgd" for s in specs)
    assert {s.overrides["run.seed"] for s in specs} == {0, 1}
    assert len({s.name for s in specs}) == len(specs)
    assert all(s.sweep == "s" and s.task == "train" for s in specs)


def test_zip_needs_equal_lengths():
    with pytest.raises(ValueError, match="equal lengths"):
        expand(Sweep("s", axes=[zip_axes(("a", [1, 2]), ("b", [1]))]))


def test_bare_pairs_and_bad_axes():
    assert len(expand(Sweep("s", axes=[("a", [1, 2, 3])]))) == 3
    with pytest.raises(TypeError):
        product(("a", 3))
    with pytest.raises(TypeError):
        product(("a", "abc"))


def test_derived_fan_out_and_dependent_keys():
    def pairs(o):  # every (S, C) pair of a budget: a fan-out
        return [{"model.kwargs.num_tokens": s, "model.kwargs.hidden_dim": o["meta.omega"] // s} for s in (2, 4)]

    def lr(o):  # a dependent key
        return {"optim.lr": 0.1 / o["model.kwargs.num_tokens"]}

    specs = expand(Sweep("b", axes=[("meta.omega", [64, 128])], seeds=[0, 1, 2], derived=[pairs, lr]))
    assert len(specs) == 2 * 3 * 2
    for s in specs:
        o = s.overrides
        assert o["model.kwargs.hidden_dim"] == o["meta.omega"] // o["model.kwargs.num_tokens"]
        assert o["optim.lr"] == pytest.approx(0.1 / o["model.kwargs.num_tokens"])


def test_derived_from_the_budget_planner():
    from mlplab.experiments.specs.common import pairs_for

    specs = expand(Sweep("p", axes=[("meta.omega", [2**18])],
                         derived=[lambda o: [{"meta.C": c, "meta.S": s} for c, s in
                                             pairs_for(o["meta.omega"], channels=[16, 32, 48])]]))
    got = [(s.overrides["meta.C"], s.overrides["meta.S"]) for s in specs]
    assert got == [(16, 173), (32, 113), (48, 83), (83, 48), (113, 32), (173, 16)]  # docs/science.md §3


def test_folder_names_from_varying_overrides():
    specs = expand(Sweep("n", {"optim.name": "sgd", "model.kwargs.depth": 4},
                         [("optim.lr", [0.1, 1e-4]), ("model.kwargs.rp_blocks", ["none", [0, 2]])], seeds=[3]))
    names = [s.name for s in specs]
    assert names[0] == "lr=0.1,rp_blocks=none"  # only what varies; the single seed is not named
    assert "lr=0.0001,rp_blocks=0-2" in names
    for n in names:
        assert "/" not in n and " " not in n
    assert run_name({"a.x": 1, "b.x": 2}, ["a.x", "b.x"]) == "a.x=1,b.x=2"  # ambiguous short names
    long = run_name({"k": "v" * 400}, ["k"])
    assert len(long) <= 150 and "~" in long


def test_seed_in_name_and_collisions_hashed():
    specs = expand(Sweep("c", axes=[("a", [1, 2])], seeds=[0, 1]))
    assert specs[0].name.endswith("seed=0")
    same = expand(Sweep("c", axes=[("a", [1, 1.0000000001])], name_keys=["x"]))
    assert len({s.name for s in same}) == 2


def test_model_kwargs_dicts_are_flattened():
    o = flatten_overrides({"model.kwargs": {"depth": 2}, "optim.lr": 1})
    assert o == {"model.kwargs.depth": 2, "optim.lr": 1}
    assert nest_overrides(o) == {"model.kwargs": {"depth": 2}, "optim.lr": 1}
    specs = expand(Sweep("d", {"model.kwargs": {"depth": 2}}, [("model.kwargs.hidden_dim", [4, 8])]))
    assert specs[0].overrides["model.kwargs.depth"] == 2


def test_runspec_json_round_trip():
    s = RunSpec("a=1", {"a": 1}, "sw", "mod:fn", None)
    assert RunSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_sweep_files(tmp_path):
    d = {"name": "f", "base": {"optim.name": "sgd"}, "seeds": [0, 1],
         "axes": [{"product": [["optim.lr", [0.1, 0.2]]]}, {"zip": [["a", [1, 2]], ["b", [3, 4]]]}, ["c", [5]]]}
    (tmp_path / "s.json").write_text(json.dumps(d))
    (sw,) = load_sweep_file(str(tmp_path / "s.json"))
    assert len(expand(sw)) == 2 * 2 * 2
    (tmp_path / "s.py").write_text("from mlplab.experiments import Sweep\nSWEEP = Sweep('py', axes=[('a', [1, 2])])\n")
    (sw2,) = load_sweep_file(str(tmp_path / "s.py"))
    assert sw2.name == "py"
    with pytest.raises(ValueError, match="unknown sweep field"):
        sweep_from_dict({"name": "x", "axis": []})
    with pytest.raises(FileNotFoundError):
        load_sweep_file(str(tmp_path / "missing.json"))


def test_named_base_config_reaches_make_config():
    from mlplab.train import CONFIGS, make_config

    name = sorted(CONFIGS)[0]
    (spec,) = expand(Sweep("b", name, [("optim.lr", [0.05])]))
    assert spec.base == name
    assert make_config(spec.base, spec.overrides).optim.lr == 0.05
