"""timm's model API: names and wildcards, pretrained tags and their Hub repositories, the
architectures timm builds under those names, ``pretrained_cfg``, ``reset_classifier`` and
``forward_intermediates(indices=)``."""
import json
from pathlib import Path

import pytest
import torch

import mlplab
from mlplab.models.registry import get_pretrained, model_config

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "interop"
# written by timm's own code (tests/fixtures/interop/make_fixtures.py timm_names): per architecture
# its state dict's shapes, LayerNorm eps and GELU form; per published weight its pretrained_cfg
TIMM = json.loads((FIX / "timm_mixer_names.json").read_text())
TIMM_SIZES = TIMM["architectures"]
TIMM_WEIGHTS = {k: v["num_classes"] for k, v in TIMM["weights"].items()}


def test_list_models_wildcards():
    assert set(TIMM_SIZES) <= set(mlplab.list_models("mixer*"))
    assert mlplab.list_models("mixer_b16*") == ["mixer_b16", "mixer_b16_224"]
    assert mlplab.list_models(["s_mix*", "rp_s*"]) == ["rp_s_mixer", "s_mixer"]
    assert mlplab.list_models("no_such*") == []
    assert mlplab.list_models() == sorted(mlplab.list_models())  # everything, as before
    assert mlplab.list_models(family="sw_mlp") == ["sw_mlp", "sw_mlp_block"]
    assert mlplab.list_models(pretrained=True) == sorted(TIMM_WEIGHTS)
    assert mlplab.list_models("*in1k", pretrained=True) == sorted(n for n in TIMM_WEIGHTS if n.endswith("in1k"))


@pytest.mark.parametrize("name", sorted(TIMM_SIZES))
def test_timm_names_build_timms_architecture(name):
    from mlplab.analysis.cost import skip_init
    from mlplab.interop import to_timm

    timm = TIMM_SIZES[name]
    with skip_init():  # shapes only
        model = mlplab.create_model(name)
    assert {k: list(v.shape) for k, v in to_timm(model).items()} == timm["shapes"]
    assert timm["norm_eps"] == [model.config.norm_eps] and timm["gelu"] == ["none"] and model.config.act == "gelu"
    del model


def test_timm_b16_has_timms_parameter_count():
    from mlplab.analysis.cost import model_summary

    assert model_summary("mixer_b16_224")["params"] == 59_880_472  # timm: mixer_b16_224 59.88M


@pytest.mark.parametrize("name", sorted(TIMM_WEIGHTS))
def test_pretrained_tags_are_timms(name):
    timm, ours = TIMM["weights"][name], get_pretrained(name)
    assert ours["hf_hub_id"] == timm["hf_hub_id"] == f"timm/{name}" and ours["num_classes"] == timm["num_classes"]
    assert (list(ours["mean"]), list(ours["std"])) == (timm["mean"], timm["std"])
    assert (ours["crop_pct"], ours["interpolation"]) == (timm["crop_pct"], timm["interpolation"])
    assert model_config(name).num_classes == timm["num_classes"]
    assert [model_config(name).in_chans] + [model_config(name).image_size] * 2 == timm["input_size"]


def test_pretrained_cfg_of_a_fresh_and_a_tagged_model():
    m = mlplab.create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=8, depth=1, in_chans=1, num_classes=3)
    assert m.pretrained_cfg["input_size"] == (1, 8, 8) and m.pretrained_cfg["num_classes"] == 3
    assert m.pretrained_cfg["source"] is None and m.pretrained_cfg["mean"] is None
    t = mlplab.create_model("mixer_b16_224.miil_in21k", image_size=32, hidden_dim=8, depth=1, token_hidden=4,
                            channel_hidden=8)
    assert t.model_name == "mixer_b16_224" and t.config.num_classes == 11221
    assert t.pretrained_cfg["tag"] == "miil_in21k" and t.pretrained_cfg["interpolation"] == "bilinear"


@pytest.mark.parametrize("name,kw", [
    ("mlp_mixer", dict(image_size=8, patch_size=2, hidden_dim=8, depth=3, zero_head=False)),
    ("sw_mlp", dict(image_size=8, patch_size=2, width=32, depth=3, density=0.25)),
    ("mlp", dict(image_size=4, width=16, depth=3)),
])
def test_forward_intermediates_indices_and_reset_classifier(name, kw):
    model = mlplab.create_model(name, num_classes=5, **kw)
    x = torch.randn(2, model.config.in_chans, model.config.image_size, model.config.image_size)
    logits, every = model.forward_intermediates(x)
    blocks = lambda feats: sorted({k.split(".")[1] for k in feats})  # noqa: E731
    _, last2 = model.forward_intermediates(x, indices=2)
    assert blocks(last2) == ["1", "2"] and all(torch.equal(v, every[k]) for k, v in last2.items())
    _, some = model.forward_intermediates(x, indices=[0, -1])
    assert blocks(some) == ["0", "2"]
    for bad in (0, 4, [3], [-4]):
        with pytest.raises(ValueError, match="blocks"):
            model.forward_intermediates(x, indices=bad)
    with pytest.raises(TypeError):
        model.forward_intermediates(x, indices="last")
    model.reset_classifier(7)
    assert model(x).shape == (2, 7) and model.config.num_classes == 7 and model.pretrained_cfg["num_classes"] == 7
    pooled = model.forward_head(model.forward_features(x), pre_logits=True)  # (the fused path: to rounding)
    assert torch.allclose(pooled, every["pre_logits"], atol=1e-5)
    model.reset_classifier(0)
    assert torch.equal(model(x), pooled)  # no head: the pooled features
    with pytest.raises(ValueError, match="num_classes"):
        model.reset_classifier(-1)


def test_expand_resolution_keeps_pretrained_cfg_at_the_new_size():
    m = mlplab.create_model("mixer_b16_224.goog_in21k", image_size=32, hidden_dim=8, depth=1, token_hidden=4,
                            channel_hidden=8)
    big = mlplab.expand_resolution(m, 2)
    assert big.pretrained_cfg["input_size"] == (3, 64, 64) and big.pretrained_cfg["mean"] == (0.5, 0.5, 0.5)
    assert m.pretrained_cfg["input_size"] == (3, 32, 32)


def test_registering_timms_names_from_scratch(monkeypatch):
    """register_timm_mixers on an empty registry: the Mixer paper's sizes (Tolstikhin et al. 2021,
    Table 1: width C, depth L, token/channel hidden C/2 and 4C) under timm's names, and timm's
    weights with their Hub settings (the Hub's model cards: Apache 2.0)."""
    from mlplab.models import registry
    from mlplab.models.mixer import MixerConfig, build_mixer
    from mlplab.models.timm_names import register_timm_mixers

    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_PRETRAINED", {})
    register_timm_mixers()
    sizes = {"s": (512, 8), "b": (768, 12), "l": (1024, 24)}
    assert sorted(registry._REGISTRY) == sorted(f"mixer_{k}{p}_224" for k in sizes for p in (16, 32))
    for name, e in registry._REGISTRY.items():
        size, p = name[6], int(name[7:9])
        C, L = sizes[size]
        assert (e.name, e.family, e.config_cls, e.builder) == (name, "mlp_mixer", MixerConfig, build_mixer)
        assert e.defaults == dict(image_size=224, in_chans=3, num_classes=1000, patch_size=p, hidden_dim=C, depth=L,
                                  token_hidden=C // 2, channel_hidden=4 * C, block="mlp", norm_eps=1e-6, act="gelu")
        assert e.description == (f"timm's {name}: MLP-Mixer {size.upper()}{p} (P={p}, C={C}, L={L}), "
                                 "LayerNorm eps 1e-6, 224x224")
    assert sorted(registry._PRETRAINED) == sorted(TIMM_WEIGHTS)
    for name, w in TIMM["weights"].items():
        assert registry._PRETRAINED[name] == {
            "tag": name.partition(".")[2], "hf_hub_id": w["hf_hub_id"], "num_classes": w["num_classes"],
            "mean": tuple(w["mean"]), "std": tuple(w["std"]), "interpolation": w["interpolation"],
            "crop_pct": w["crop_pct"], "license": "apache-2.0"}
