"""FLOPs two ways (analytic walk vs FlopCounterMode), activations two ways (Mixer config vs the
walked forward), the Mixer count from configs, the table and the ``mlplab models`` command."""
import dataclasses
import json

import pytest
import torch.nn as nn

import mlplab
from mlplab import cli
from mlplab.analysis import cost
from mlplab.analysis.cost import (
    config_activations,
    config_flops,
    count_activations,
    count_flops,
    count_params,
    measured_flops,
    mixer_counts,
    model_summary,
    models_table,
    state_bytes,
    sw_mlp_counts,
)
from mlplab.layers.masked import SparseLinear
from mlplab.models import registry
from mlplab.models.registry import model_config

TOL = 1e-3  # relative; the two counts agree exactly for everything they both see

CASES = [
    ("mlp_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=2)),
    ("mlp_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=2, num_tokens=6)),  # skip layer W̃
    ("rp_mlp_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=2)),
    ("s_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=2, num_tokens=9)),
    ("rp_s_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=2)),
    ("mixer_s32", dict(image_size=64, hidden_dim=16, depth=1, token_hidden=8, channel_hidden=32)),
    ("sw_mlp", dict(image_size=8, patch_size=2, width=32, depth=2)),
    ("sw_mlp", dict(image_size=8, patch_size=2, width=30, depth=2)),  # dense stem
    ("sw_mlp_block", dict(image_size=8, patch_size=2, width=32, depth=2)),
    ("mlp", dict(image_size=8, width=16, depth=2)),
    ("bottleneck_mlp", dict(image_size=8, width=16, depth=2)),
    ("monarch_mlp", dict(image_size=6)),
    ("monarch_mlp", dict(image_size=6, width=24)),
    ("kronecker_mlp", dict(image_size=6, width=20)),
]


@pytest.mark.parametrize("name, overrides", CASES)
def test_analytic_flops_agree_with_flop_counter(name, overrides):
    model = mlplab.create_model(name, **overrides)
    c = model.config
    shape = (c.in_chans, c.image_size, c.image_size)
    analytic, measured = count_flops(model, shape), measured_flops(model, shape)
    assert analytic > 0
    assert abs(analytic - measured) <= TOL * measured, (analytic, measured)
    assert count_flops(model, (5,) + shape) == analytic  # a batch dimension is per example


def test_sparse_storage_counts_nnz_which_the_flop_counter_cannot_see():
    kw = dict(image_size=8, patch_size=2, width=64, depth=2, density=0.25)
    masked = mlplab.create_model("sw_mlp", storage="masked", **kw)
    sparse = mlplab.create_model("sw_mlp", storage="sparse", **kw)
    layers = [m for m in sparse.modules() if isinstance(m, SparseLinear)]
    nnz_flops = sum(2 * m.nnz for m in layers)
    dense_flops = sum(2 * m.in_features * m.out_features for m in layers)
    assert count_flops(sparse) == count_flops(masked) - dense_flops + nnz_flops
    # FlopCounterMode sees the CSR product by its shape, as if it were dense: only the analytic
    # count knows the nonzeros
    assert measured_flops(sparse) == count_flops(masked)
    assert count_params(sparse) == count_params(masked, effective=True)
    assert state_bytes(sparse) < state_bytes(masked)


def test_count_flops_checks_the_input_shape():
    model = mlplab.create_model("mlp", image_size=8, width=16, depth=1)
    with pytest.raises(ValueError, match=r"expects inputs of shape \(3, 8, 8\)"):
        count_flops(model, (3, 32, 32))


@pytest.mark.parametrize("name, overrides",
                         [c for c in CASES if model_config(c[0], **c[1]).__class__.__name__ == "MixerConfig"]
                         + [("mlp_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=2, skip=False,
                                                num_tokens=3, token_hidden=5, norm=False)),
                            # W̃ at S = S0
                            ("mlp_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=2, skip_layer=True)),
                            ("rp_s_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=3, num_tokens=5,
                                                rp_blocks=(1,)))])  # J1, J2 buffers of block 1 only
def test_mixer_counts_from_config_equal_the_built_model(name, overrides):
    model = mlplab.create_model(name, **overrides)
    c = mixer_counts(model.config)
    assert all(type(v) is int for v in c.values()), c
    assert c["params"] == count_params(model)
    assert c["flops"] == count_flops(model)
    assert 4 * c["params"] + 8 * c["buffer_entries"] == state_bytes(model)
    assert model_summary(name, **overrides) == model_summary(name, build=True, **overrides)


MIXER_ACT_CASES = [c for c in CASES if model_config(c[0], **c[1]).__class__.__name__ == "MixerConfig"] + [
    ("s_mixer", dict(image_size=8, patch_size=2, hidden_dim=40, depth=2)),  # C >= 32: left GEMMs in training
    ("rp_s_mixer", dict(image_size=8, patch_size=2, hidden_dim=40, depth=3, num_tokens=5, rp_blocks=(1,))),
    ("mlp_mixer", dict(image_size=8, patch_size=2, hidden_dim=36, depth=2, num_tokens=9, expansion=4.0)),  # W̃
    ("mlp_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=2, norm=False, act="identity",
                       drop_rate=0.1, drop_path_rate=0.1, skip=False, num_tokens=3)),
]


@pytest.mark.parametrize("name, overrides", MIXER_ACT_CASES)
def test_mixer_activations_from_config_equal_the_walked_forward(name, overrides):
    model = mlplab.create_model(name, **overrides)
    walked = count_activations(model)
    assert walked > 0 and mixer_counts(model.config)["activations"] == walked
    assert config_activations(name, **overrides) == walked
    assert model.training  # the counter restores the mode


def test_count_activations_sums_leaf_outputs():
    # stem 16, per block LN 16 + fc1 64 + GELU 64 + fc2 16 (Identity dropouts write nothing), head 10
    model = mlplab.create_model("bottleneck_mlp", image_size=8, width=16, depth=2)
    assert count_activations(model, (3, 8, 8)) == 16 + 2 * (16 + 64 + 64 + 16) + 10
    assert config_activations("bottleneck_mlp", image_size=8, width=16, depth=2) == count_activations(model)


@pytest.mark.parametrize("name, overrides", [c for c in CASES if c[0].startswith("sw_mlp")]
                         + [("sw_mlp", dict(image_size=8, patch_size=2, omega=300.0, density=0.3, depth=1, norm=False)),
                            ("sw_mlp_block", dict(image_size=8, patch_size=4, width=28, expansion=1.5, bias=False)),
                            ("sw_mlp", dict(image_size=8, patch_size=2, width=32, stem="dense")),
                            ("sw_mlp", dict(image_size=8, patch_size=2, width=32, depth=1, stem="patch",
                                            act="identity")),
                            ("sw_mlp_block", dict(image_size=8, patch_size=2, omega=3000.0, density=0.5, expansion=2.0,
                                                  depth=1)),  # m = round(√(Ω/(γp))) = 55, hidden 110
                            ("sw_mlp", dict(image_size=8, patch_size=2, depth=1))])  # neither width nor Ω: m = 1024
def test_sw_mlp_counts_from_config_equal_the_built_model(name, overrides):
    model = mlplab.create_model(name, **overrides)
    c = sw_mlp_counts(model.cfg)
    assert all(type(v) is int for v in c.values()), c
    assert (c["params"], c["flops"], c["effective_width"]) == (count_params(model), count_flops(model), model.width)
    assert config_flops(name, **overrides) == count_flops(model)
    assert c["activations"] == count_activations(model) == config_activations(name, **overrides)


def test_config_flops_builds_what_it_cannot_count_from_the_config():
    for name, overrides in CASES:
        assert config_flops(name, **overrides) == count_flops(mlplab.create_model(name, **overrides)), name
    with pytest.raises(ValueError, match=r"^sw_mlp_counts counts masked SW-MLPs only; build a sparse one and use "
                                         r"count_flops$"):
        sw_mlp_counts(model_config("sw_mlp", storage="sparse"))


def test_mixers_and_masked_sw_mlps_are_counted_from_the_config_without_a_build(monkeypatch):
    def no_build(name, **overrides):
        raise AssertionError(f"built {name}")

    monkeypatch.setattr(cost, "create_model", no_build)
    mix, sw = dict(image_size=8, patch_size=2, hidden_dim=8, depth=2), dict(image_size=8, patch_size=2, width=32)
    c, s = mixer_counts(model_config("mlp_mixer", **mix)), sw_mlp_counts(model_config("sw_mlp", **sw))
    assert (config_flops("mlp_mixer", **mix), config_activations("mlp_mixer", **mix)) == (c["flops"], c["activations"])
    assert (config_flops("sw_mlp", **sw), config_activations("sw_mlp", **sw)) == (s["flops"], s["activations"])
    row = model_summary("mlp_mixer", **mix)
    assert (row["params"], row["flops"], row["effective_width"]) == (c["params"], c["flops"], 16 * 8)
    with pytest.raises(AssertionError, match="built sw_mlp"):  # sparse: its nonzeros are known once drawn
        config_flops("sw_mlp", storage="sparse", **sw)
    with pytest.raises(AssertionError, match="built mlp_mixer"):
        model_summary("mlp_mixer", build=True, **mix)


def test_model_summary_of_a_model_without_image_shape_or_width(monkeypatch):
    """Every key of a row, by hand, for a registered model outside the families: y = Linear(n, 3)(x)."""
    @dataclasses.dataclass
    class Probe:
        n: int = 5

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register_model("probe_linear", family="probe", config_cls=Probe, description="a probe",
                            builder=lambda cfg: nn.Sequential(nn.Linear(cfg.n, 3)))
    assert model_summary("probe_linear", n=4) == {
        "name": "probe_linear", "family": "probe", "description": "a probe", "params": 4 * 3 + 3,
        "effective_params": 15, "flops": 2 * 4 * 3, "input_shape": None, "effective_width": None,
        "state_bytes": 4 * 15, "overrides": {"n": 4}}
    assert models_table("probe") == [model_summary("probe_linear")]


def test_models_table_lists_every_registered_model():
    rows = models_table()
    assert [r["name"] for r in rows] == mlplab.list_models()
    for r in rows:
        assert r["params"] > 0 and r["flops"] > 0 and r["family"] and r["description"]
    by = {r["name"]: r for r in rows}
    assert by["mixer_b16"]["params"] == 59_880_472 and by["mixer_b16"]["effective_width"] == 196 * 768
    assert by["sw_mlp"]["effective_width"] == 1024
    assert by["sw_mlp"]["effective_params"] < by["sw_mlp"]["params"]


def test_models_command(capsys):
    assert cli.main(["models", "--family", "shallow"]) == 0
    out = capsys.readouterr().out
    assert "monarch_mlp" in out and "kronecker_mlp" in out and "FLOPs/ex" in out
    assert cli.main(["models", "--family", "shallow", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == {"monarch_mlp", "kronecker_mlp"}
    assert cli.main(["models", "--family", "nope"]) == 2
    assert "unknown family" in capsys.readouterr().err
