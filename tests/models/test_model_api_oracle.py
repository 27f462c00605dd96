"""The shared model API at its edges (base.py, impl.py, registry.py, shallow.py): timm's block
selection, a new classifier, how ``impl`` is named and refused, registering and looking up
names and weights, a config's coercion, the seed's scope, and the shallow MLPs' factorisations
and features. Tiny models."""
from __future__ import annotations

import dataclasses
import types

import pytest
import torch
import torch.nn as nn

import mlplab
from mlplab.layers.pk import PKMixing
from mlplab.models import registry
from mlplab.models.base import VisionMLP, take_indices
from mlplab.models.impl import Impl, compute_by_definition


def test_take_indices_is_timms_selection():
    assert take_indices(1, 4) == [3] and take_indices(4, 4) == [0, 1, 2, 3]
    assert take_indices([3, -4, 3, 0], 4) == [0, 3] and take_indices((-1,), 4) == [3]
    with pytest.raises(ValueError, match=r"^indices=5 asks for the last 5 blocks of a model with 4; use 1\.\.4$"):
        take_indices(5, 4)
    with pytest.raises(ValueError, match="indices=0 asks"):
        take_indices(0, 4)
    with pytest.raises(ValueError, match=r"^block indices \[4, -5\] are out of range for a model with 4 blocks; "
                                         r"use -4\.\.3$"):
        take_indices([4, -5, 1], 4)
    with pytest.raises(ValueError, match=r"block indices \[True\]"):
        take_indices([True], 4)
    with pytest.raises(ValueError, match=r"block indices \[1\.0\]"):
        take_indices([1.0], 4)
    for bad in (True, "2", None, 2.0):
        with pytest.raises(TypeError, match="^indices is an int"):
            take_indices(bad, 4)


def test_reset_classifier_follows_the_model():
    m = mlplab.create_model("mlp_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=1, num_classes=3).double()
    m.reset_classifier(5, global_pool="avg")
    assert (m.head.in_features, m.head.out_features) == (4, 5) and m.head.weight.dtype == torch.float64
    assert not m.head.weight.any() and not m.head.bias.any()  # zero_head
    assert m.config.num_classes == m.cfg.num_classes == 5 and m.pretrained_cfg["num_classes"] == 5
    m.reset_classifier(0)
    assert isinstance(m.head, nn.Identity) and m.num_features == 4 and m.config.num_classes == 0
    m.reset_classifier(2)  # from no head: the features it remembered
    assert m.head.in_features == 4 and m(torch.zeros(1, 3, 8, 8, dtype=torch.float64)).shape == (1, 2)
    p = mlplab.create_model("mlp", image_size=4, width=6, depth=1)
    torch.manual_seed(0)
    p.reset_classifier(300)
    assert p.head.weight.abs().max() > 0.9 / 6 ** 0.5  # torch's default: zero_head is not set
    for bad, err in ((True, "num_classes must be an int >= 0, got True"), (-1, "got -1"), (2.0, "got 2.0")):
        with pytest.raises(ValueError, match=err):
            p.reset_classifier(bad)
    with pytest.raises(ValueError, match=r"^global_pool='max': mlplab's models pool by averaging only \('avg'\)$"):
        p.reset_classifier(3, global_pool="max")


def test_impl_names_and_refusals():
    assert Impl.parse("fused") is Impl.FUSED and Impl.parse(Impl.MODULE) is Impl.MODULE and str(Impl.AUTO) == "auto"
    assert Impl.FUSED == "fused"
    with pytest.raises(ValueError, match="^impl must be one of auto, module, fused, definition; got 'fast'$"):
        Impl.parse("fast")
    m = mlplab.create_model("mlp", image_size=4, width=6, depth=1)
    assert m.impl is Impl.AUTO
    m.impl = "module"
    assert m.impl is Impl.MODULE
    with pytest.raises(ValueError, match="^mlp has no 'definition' implementation; use impl=auto or module$"):
        m.impl = "definition"
    del m.model_name
    with pytest.raises(ValueError, match="^PlainMLP has no 'fused' implementation"):
        m.impl = "fused"
    pk = PKMixing(nn.Linear(4, 4), (4, 3), (4, 3), "columns")
    seq = compute_by_definition(nn.Sequential(pk, nn.ReLU()))
    assert pk.by_definition and isinstance(seq, nn.Sequential)
    mixer = mlplab.create_model("s_mixer", image_size=8, patch_size=2, hidden_dim=4, depth=1)
    assert compute_by_definition(mixer) is mixer and mixer.impl is Impl.DEFINITION


@dataclasses.dataclass
class _Cfg:
    width: float = 1.0
    sizes: tuple[int, ...] = (1,)
    seed: int = 0


def test_register_and_look_up(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_PRETRAINED", dict(registry._PRETRAINED))
    built = []

    def build(cfg):
        built.append((cfg, torch.rand(1)))
        m = nn.Linear(1, 1)
        return m

    e = registry.register_model("toy_net", family="toy", config_cls=_Cfg, builder=build, description="d", width=2.0)
    assert (e.name, e.family, e.defaults, e.description) == ("toy_net", "toy", {"width": 2.0}, "d")
    with pytest.raises(ValueError, match="^model 'toy_net' is registered twice$"):
        registry.register_model("toy_net", family="toy", config_cls=_Cfg, builder=build)
    with pytest.raises(TypeError, match="^config_cls for 'toy2' must be a dataclass$"):
        registry.register_model("toy2", family="toy", config_cls=dict, builder=build)
    with pytest.raises(ValueError, match=r"^unknown override\(s\) \['widht'\] for model 'toy3'; did you mean 'width'"):
        registry.register_model("toy3", family="toy", config_cls=_Cfg, builder=build, widht=1.0)
    cfg = registry.model_config("toy_net", width=3, sizes=[2, 3])  # JSON's int and list: coerced
    assert cfg == _Cfg(3.0, (2, 3), 0) and isinstance(cfg.width, float)
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    m = registry.create_model("toy_net", seed=4)
    assert torch.equal(torch.rand(1), before)  # the caller's stream is left alone
    torch.manual_seed(4)
    assert torch.equal(built[-1][1], torch.rand(1))  # the builder ran under manual_seed(seed)
    assert m.model_name == "toy_net" and m.config == _Cfg(2.0, (1,), 4)
    assert m.pretrained_cfg["architecture"] == "toy_net" and m.pretrained_cfg["input_size"] is None
    assert registry.list_models(family="toy") == ["toy_net"] and registry.list_models(["toy*", ""]) == ["toy_net"]

    registry.register_pretrained("toy_net.v1", hf_hub_id="org/toy", num_classes=7, mean=[0.1], std=[0.2])
    registry.register_pretrained("toy_net.v2", hf_hub_id="org/toy2", num_classes=8, mean=(0.0,), std=(1.0,),
                                 interpolation="bilinear", crop_pct=0.9, license="mit")
    with pytest.raises(ValueError, match="^pretrained weights 'toy_net.v1' are registered twice$"):
        registry.register_pretrained("toy_net.v1", hf_hub_id="x", num_classes=1, mean=(0,), std=(1,))
    for bad in ("toy_net", "nope.v1"):
        msg = f"^pretrained weights are named ARCH.TAG of a registered ARCH, not '{bad}'$"
        with pytest.raises(ValueError, match=msg):
            registry.register_pretrained(bad, hf_hub_id="x", num_classes=1, mean=(0,), std=(1,))
    assert registry.get_pretrained("toy_net.v1") == {"tag": "v1", "hf_hub_id": "org/toy", "num_classes": 7,
                                                     "mean": (0.1,), "std": (0.2,), "interpolation": "bicubic",
                                                     "crop_pct": 1.0, "license": None}
    assert registry.list_models("toy*", pretrained=True) == ["toy_net.v1", "toy_net.v2"]
    assert registry.list_models(family="toy", pretrained=True) == ["toy_net.v1", "toy_net.v2"]
    assert registry.default_pretrained_tag("toy_net") == "toy_net.v1"
    assert registry.default_pretrained_tag("toy_net.v2") == "toy_net.v2"
    with pytest.raises(ValueError, match="^no pretrained weights 'toy_net.v3'; toy_net has: toy_net.v1, toy_net.v2$"):
        registry.get_pretrained("toy_net.v3")
    cfg2 = registry.make_pretrained_cfg("toy_net.v2", _Cfg(), source="file.pt", extra=1)  # classes: the config's
    assert cfg2 == {"architecture": "toy_net", "tag": "v2", "hf_hub_id": "org/toy2", "source": "file.pt",
                    "input_size": None, "num_classes": None, "mean": (0.0,), "std": (1.0,),
                    "interpolation": "bilinear", "crop_pct": 0.9, "license": "mit", "extra": 1}


def test_unknown_names_and_weights_say_what_exists():
    with pytest.raises(ValueError, match="^unknown model 's_mixr'; did you mean 's_mixer'"):
        mlplab.create_model("s_mixr")
    with pytest.raises(ValueError, match="^no pretrained weights 's_mixer.x'; s_mixer has none"):
        registry.get_pretrained("s_mixer.x")
    with pytest.raises(ValueError, match="^s_mixer has no published weights"):
        registry.default_pretrained_tag("s_mixer")
    assert registry.get_model_entry("mixer_b16_224.goog_in21k").name == "mixer_b16_224"
    cfg = registry.model_config("mixer_b16_224.goog_in21k", num_classes=5)
    assert cfg.num_classes == 5 and registry.model_config("mixer_b16_224.goog_in21k").num_classes == 21843
    pc = registry.make_pretrained_cfg("mixer_b16_224.goog_in21k", registry.model_config("mixer_b16_224", num_classes=3))
    assert pc["num_classes"] == 3 and pc["input_size"] == (3, 224, 224) and pc["mean"] == (0.5, 0.5, 0.5)


def test_shallow_factorisations_and_features():
    m = mlplab.create_model("monarch_mlp", image_size=6, in_chans=1, width=12)  # 36 = 6·6 -> 12: q = 6 divides 12
    assert (m.fc1.nblocks, m.fc1.block_in, m.fc1.mid_block) == (6, 6, 6)
    assert (m.fc2.nblocks, m.fc2.block_in, m.fc2.mid_block) == (3, 4, 4)  # 12 = 3·4; q = b = 4 divides 12
    r = mlplab.create_model("monarch_mlp", image_size=6, in_chans=1, width=10, nblocks=4)  # b = 9; 9 ∤ 10 -> q = 2
    assert (r.fc1.nblocks, r.fc1.block_in, r.fc1.mid_block) == (4, 9, 2)
    assert m.in_features == 36 and m.width == m.effective_width == 12
    full = mlplab.create_model("kronecker_mlp", image_size=4, in_chans=1)
    assert full.width == 16 and full.fc1.out_features == 16 and full.head.in_features == 16
    torch.manual_seed(0)
    x = torch.randn(2, 1, 6, 6)
    _, feats = m.forward_intermediates(x)
    h1 = torch.relu(m.fc1(x.flatten(1)))
    torch.testing.assert_close(feats["stem"], x.flatten(1))
    torch.testing.assert_close(feats["blocks.0"], h1)
    torch.testing.assert_close(feats["blocks.1"], m.fc2(h1))
    assert type(mlplab.create_model("monarch_mlp", image_size=4, in_chans=1, act="gelu").act) is nn.GELU
    nb = mlplab.create_model("kronecker_mlp", image_size=4, in_chans=1, bias=False)
    assert nb.fc1.bias is None and nb.fc2.bias is None
    for key in ("num_classes", "in_chans", "image_size"):
        with pytest.raises(ValueError, match=f"^{key} must be >= 1, got 0$"):
            mlplab.create_model("monarch_mlp", **{key: 0})
    with pytest.raises(ValueError, match="^nblocks=0 must be >= 1 and divide the layer input size 784$"):
        mlplab.create_model("monarch_mlp", nblocks=0)


def test_a_new_classifier_on_a_bare_model_and_on_an_accelerator():
    """reset_classifier on a Mixer built without the registry (no ``config``, no ``pretrained_cfg``):
    zero-initialised as its ``cfg`` asks, and its class count follows; on the meta device (an
    accelerator's stand-in) the new head lives there too."""
    from mlplab.models.mixer import Mixer, MixerConfig

    bare = Mixer(MixerConfig(image_size=8, patch_size=4, hidden_dim=4, depth=1, num_classes=3))
    bare.reset_classifier(300)
    assert bare.cfg.num_classes == 300 and bare.head.out_features == 300
    assert not bare.head.weight.any() and not bare.head.bias.any() and not hasattr(bare, "pretrained_cfg")
    m = mlplab.create_model("mlp", image_size=4, width=6, depth=1).to("meta")
    m.reset_classifier(3)
    assert m.head.weight.device.type == m.head.bias.device.type == "meta"


def test_images_of_another_shape_are_refused_with_the_models_shape():
    m = mlplab.create_model("mlp", image_size=4, in_chans=2, width=6, depth=1)
    for shape in ((1, 2, 4), (1, 3, 4, 4), (1, 2, 5, 4), (1, 2, 4, 5), (1, 1, 2, 4, 4)):
        msg = (rf"^expected images of shape \(N, 2, 4, 4\), got \({', '.join(map(str, shape))}\); "
               r"set image_size/in_chans to match the data$")
        with pytest.raises(ValueError, match=msg):
            m(torch.zeros(shape))
    assert m(torch.zeros(1, 2, 4, 4)).shape == (1, 10)


@dataclasses.dataclass
class _Unseeded:
    width: int = 1
    depth: int = 2


def test_every_refusal_of_the_registry_in_full(monkeypatch):
    """On a registry of two toy names: each message whole (what was asked, what exists), the
    listing filters, and a family without ``seed`` built on the caller's own random stream."""
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_PRETRAINED", {})
    draws = []

    def build(cfg):
        draws.append(torch.rand(1))
        return nn.Identity()  # draws nothing itself

    defaults = {"width": 3}
    registry.register_model("toy_a", family="f1", config_cls=_Unseeded, builder=build, **defaults)
    defaults["width"] = 5  # the entry keeps its own copy
    registry.register_model("toy_b", family="f2", config_cls=_Unseeded, builder=build, description="b")
    assert registry.get_model_entry("toy_a").defaults == {"width": 3}
    assert registry.list_models() == ["toy_a", "toy_b"] and registry.list_models(family="f2") == ["toy_b"]
    assert registry.list_models(["", "*_b"]) == ["toy_b"] and registry.list_models(["", ""]) == ["toy_a", "toy_b"]
    assert registry.list_models("toy_?", family="f1") == ["toy_a"] and registry.list_models("TOY*") == []
    with pytest.raises(ValueError, match=r"^unknown model 'toy_bb'; did you mean 'toy_b'\? registered models are: "
                                         r"toy_a, toy_b$"):
        registry.create_model("toy_bb")
    with pytest.raises(ValueError, match=r"^unknown model 'zzz\.v1'; registered models are: toy_a, toy_b$"):
        registry.get_pretrained("zzz.v1")
    with pytest.raises(ValueError, match=r"^unknown override\(s\) \['depht', 'wdth'\] for model 'toy_a'; did you mean "
                                         r"'depth'\? valid overrides are: width, depth$"):
        registry.model_config("toy_a", wdth=1, depht=2)
    with pytest.raises(ValueError, match=r"^no pretrained weights 'toy_a\.v1'; toy_a has none \(list_models\("
                                         r"pretrained=True\) lists the published weights\); give a file or "
                                         r"'hf-hub:ORG/NAME' as pretrained=$"):
        registry.get_pretrained("toy_a.v1")
    with pytest.raises(ValueError, match=r"^toy_a has no published weights \(list_models\(pretrained=True\) lists "
                                         r"them\); give a file or 'hf-hub:ORG/NAME' as pretrained=, or "
                                         r"pretrained=False for random weights$"):
        registry.default_pretrained_tag("toy_a")
    with pytest.raises(ValueError, match=r"^unknown model 'toy_c'"):
        registry.default_pretrained_tag("toy_c")
    registry.register_pretrained("toy_b.x", hf_hub_id="o/b", num_classes=2, mean=(0,), std=(1,))
    assert registry.list_models(family="f1", pretrained=True) == []
    assert registry.default_pretrained_tag("toy_b") == "toy_b.x"
    with pytest.raises(ValueError, match=r"^no pretrained weights 'toy_b\.z'; toy_b has: toy_b\.x$"):
        registry.get_pretrained("toy_b.z")
    got = registry.get_pretrained("toy_b.x")
    got["num_classes"] = 9  # a copy
    assert registry.get_pretrained("toy_b.x")["num_classes"] == 2
    torch.manual_seed(7)
    want = torch.rand(2)
    torch.manual_seed(7)
    m = registry.create_model("toy_a", depth=4)
    assert torch.equal(draws[-1], want[:1]) and torch.equal(torch.rand(1), want[1:])  # the caller's stream, used
    assert m.config == _Unseeded(3, 4) and m.model_name == "toy_a" and m.pretrained_cfg["input_size"] is None


class _Toy(VisionMLP):
    """A family of the base's contract with only what reset_classifier reads: a Linear head and,
    as given, ``config`` (timm's name) and/or ``cfg``."""

    def __init__(self, **configs):
        super().__init__()
        self.head = nn.Linear(3, 2)
        for k, v in configs.items():
            setattr(self, k, v)

    def forward_features(self, x, feats=None):
        return x


def test_a_new_classifier_reads_either_config_and_updates_both():
    """zero_head from ``config`` or, without one, ``cfg``; the class count written into each of two
    distinct configs; no config at all is fine; one class is a Linear head like any other."""
    only_config = _Toy(config=types.SimpleNamespace(zero_head=True, num_classes=2))
    only_config.reset_classifier(4)
    assert not only_config.head.weight.any() and only_config.config.num_classes == 4
    both = _Toy(config=types.SimpleNamespace(num_classes=2), cfg=types.SimpleNamespace(num_classes=2))
    both.reset_classifier(5)
    assert both.config.num_classes == both.cfg.num_classes == 5
    none = _Toy()
    torch.manual_seed(0)
    none.reset_classifier(300)
    assert none.head.weight.shape == (300, 3) and none.head.weight.abs().max() > 0.9 / 3 ** 0.5
    m = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1).double()
    m.reset_classifier(1)
    assert isinstance(m.head, nn.Linear) and m.head.out_features == 1 and m.head.weight.dtype == torch.float64
    assert not m.head.weight.any() and m.config.num_classes == 1


@dataclasses.dataclass
class _Sized:
    image_size: int = 8
    num_classes: int = 3


def test_names_split_at_the_first_dot_and_pretrained_cfg_defaults(monkeypatch):
    """ARCH.TAG splits at the first dot (timm's split_model_name_tag: a tag may hold dots);
    a model without published weights gets pretrained_cfg's defaults (bicubic, no crop, nothing
    known about mean, std, Hub or license); its config's class count wins over one passed in."""
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_PRETRAINED", {})
    e = registry.register_model("toy_a", family="f", config_cls=_Sized, builder=lambda cfg: nn.Identity())
    assert e.description == ""
    registry.register_pretrained("toy_a.in1k.v2", hf_hub_id="o/a", num_classes=2, mean=(0,), std=(1,))
    assert registry.get_pretrained("toy_a.in1k.v2")["tag"] == "in1k.v2"
    with pytest.raises(ValueError, match=r"^no pretrained weights 'toy_a\.in1k\.v3'; toy_a has: toy_a\.in1k\.v2$"):
        registry.get_pretrained("toy_a.in1k.v3")
    assert registry.make_pretrained_cfg("toy_a", _Sized()) == {
        "architecture": "toy_a", "tag": None, "hf_hub_id": None, "source": None, "input_size": (None, 8, 8),
        "num_classes": 3, "mean": None, "std": None, "interpolation": "bicubic", "crop_pct": 1.0, "license": None}
    local = registry.make_pretrained_cfg("toy_a.mine", _Sized(), source="w.pt", num_classes=7)
    assert (local["tag"], local["source"], local["num_classes"]) == ("mine", "w.pt", 3)
    assert registry.make_pretrained_cfg("toy_a", _Unseeded(), num_classes=7)["num_classes"] == 7
    assert registry.make_pretrained_cfg("toy_a", _Unseeded())["num_classes"] is None


def test_lookups_and_types_name_the_model_and_the_seed_forks_the_cpu_stream_only(monkeypatch):
    """An unknown ARCH.TAG is matched on its ARCH; a wrong type names the model; the seed's fork
    saves and restores the CPU stream only (no accelerator is initialised)."""
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "_PRETRAINED", {})
    registry.register_model("toy_a", family="f", config_cls=_Cfg, builder=lambda cfg: nn.Identity())
    with pytest.raises(ValueError, match=r"^unknown model 'toy_aa\.some_long_tag'; did you mean 'toy_a'\? "):
        registry.get_model_entry("toy_aa.some_long_tag")
    with pytest.raises(TypeError, match=r"^model 'toy_a': seed='x' has type str"):
        registry.model_config("toy_a", seed="x")
    forks, real = [], torch.random.fork_rng

    def recording(*args, **kw):
        forks.append((args, kw))
        return real(*args, **kw)

    monkeypatch.setattr(torch.random, "fork_rng", recording)
    registry.create_model("toy_a", seed=1)
    assert forks == [((), {"devices": []})]
