"""Fine-tuning's model (train/init.py) without training: the checkpoint read with the run's
format, the data's resolution = the pretrained model's × model.expand, each refusal in its
sentence, the loaded model's weights, overrides, expansion and head (new where asked: zeros
for a Mixer, nn.Linear's own initialisation otherwise)."""
import dataclasses
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

import mlplab.interop as interop
from mlplab import create_model
from mlplab.errors import BadInput
from mlplab.interop.common import Imported
from mlplab.train import init
from mlplab.train.config import DataSection, ModelSection, RunConfig

MIXER = {"image_size": 8, "patch_size": 4, "hidden_dim": 8, "num_tokens": 6, "depth": 1, "num_classes": 5}
MLP = {"image_size": 6, "in_chans": 3, "width": 8, "depth": 1, "num_classes": 4}


def _cfg(name="s_mixer", image_size=None, **model):
    return RunConfig(model=ModelSection(name=name, **{"init_from": "/ck/pre.safetensors", **model}),
                     data=DataSection(dataset="synthetic", image_size=image_size))


def _checkpoint(name, kwargs, seed=0):
    torch.manual_seed(seed)
    m = create_model(name, **kwargs)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.5)  # no weight at its initial value: a head kept is told from a head made
    return Imported(name, dict(kwargs), {k: v.clone() for k, v in m.state_dict().items()}, "mlplab"), m


def test_read_init_checkpoint_reads_init_from_in_init_format(monkeypatch):
    seen = []
    monkeypatch.setattr(interop, "read_checkpoint", lambda path, fmt: seen.append((path, fmt)) or "read")
    assert init.read_init_checkpoint(_cfg(init_format="timm")) == "read"
    assert seen == [("/ck/pre.safetensors", "timm")]


def test_resolution_is_the_pretrained_models_times_expand(monkeypatch):
    imp = Imported("s_mixer", dict(MIXER), {}, "mlplab")
    cfg = _cfg(expand=3)
    out = init.with_model_resolution(cfg, imp)
    assert out.data.image_size == 24 and out.model == cfg.model
    assert dataclasses.replace(out, data=cfg.data) == cfg  # nothing else changed
    assert init.with_model_resolution(_cfg(image_size=8), imp).data.image_size == 8  # a given size that agrees
    assert init.with_model_resolution(_cfg(expand=2, image_size=16), imp).data.image_size == 16
    mlp = Imported("bottleneck_mlp", dict(MLP), {}, "mlplab")
    assert init.with_model_resolution(_cfg("bottleneck_mlp"), mlp).data.image_size == 6
    # read here when not given
    monkeypatch.setattr(interop, "read_checkpoint", lambda path, fmt: imp)
    assert init.with_model_resolution(_cfg(expand=2)).data.image_size == 16


def test_resolution_left_alone_without_init_from_or_a_known_size():
    cfg = RunConfig(data=DataSection(image_size=12))
    assert init.with_model_resolution(cfg, "never read") is cfg
    no_size = Imported("s_mixer", {"hidden_dim": 8}, {}, "mlplab")
    cfg = _cfg(image_size=12, expand=2)
    assert init.with_model_resolution(cfg, no_size) is cfg


def test_resolution_refusals():
    imp = Imported("s_mixer", dict(MIXER), {}, "mlplab")
    with pytest.raises(BadInput, match=r"^model.name='sw_mlp' but /ck/pre.safetensors holds a 's_mixer'; "
                                       r"set model.name=s_mixer \(mlplab finetune does this\)$"):
        init.with_model_resolution(_cfg("sw_mlp"), imp)
    with pytest.raises(BadInput, match=r"^data.image_size=32 but the pretrained model takes 16x16 images "
                                       r"\(image_size 8 x model.expand 2\); drop data.image_size, the data is "
                                       r"resized to the model's resolution$"):
        init.with_model_resolution(_cfg(image_size=32, expand=2), imp)
    mlp = Imported("bottleneck_mlp", dict(MLP), {}, "mlplab")
    with pytest.raises(BadInput, match=r"^model.expand=2 works on Mixers \(expand_resolution, docs/science.md §7\) "
                                       r"but /ck/pre.safetensors holds a 'bottleneck_mlp'; drop model.expand$"):
        init.with_model_resolution(_cfg("bottleneck_mlp", expand=2), mlp)


def test_check_pretrained_channels_and_classes():
    imp = Imported("bottleneck_mlp", dict(MLP), {}, "mlplab")
    assert init.check_pretrained(_cfg("bottleneck_mlp"), 3, imp, 10).data.image_size == 6
    with pytest.raises(BadInput, match=r"^the pretrained model takes 3-channel images but synthetic has 1; "
                                       r"fine-tune on data with 3 channels$"):
        init.check_pretrained(_cfg("bottleneck_mlp"), 1, imp)
    no_chans = Imported("bottleneck_mlp", {k: v for k, v in MLP.items() if k != "in_chans"}, {}, "mlplab")
    assert init.check_pretrained(_cfg("bottleneck_mlp"), 1, no_chans).data.image_size == 6  # nothing to check
    keep = _cfg("bottleneck_mlp", new_head=False)
    with pytest.raises(BadInput, match=r"^model.new_head=false keeps the checkpoint's 4-class head, but synthetic has "
                                       r"10 classes; drop model.new_head \(a new head is made when the counts differ\) "
                                       r"or fine-tune on data with 4 classes$"):
        init.check_pretrained(keep, 3, imp, 10)
    assert init.check_pretrained(keep, 3, imp, 4).data.image_size == 6  # the counts agree
    assert init.check_pretrained(keep, 3, imp, 0).data.image_size == 6  # an image folder: counted later
    assert init.check_pretrained(keep, 3, imp).data.image_size == 6
    no_classes = Imported("bottleneck_mlp", {k: v for k, v in MLP.items() if k != "num_classes"}, {}, "mlplab")
    assert init.check_pretrained(keep, 3, no_classes, 10).data.image_size == 6
    for new_head in ("auto", True):  # a new head takes any count
        assert init.check_pretrained(_cfg("bottleneck_mlp", new_head=new_head), 3, imp, 10).data.image_size == 6
    with pytest.raises(BadInput, match="data.image_size=5 but"):  # the resolution is checked too
        init.check_pretrained(_cfg("bottleneck_mlp", image_size=5), 3, imp, 10)


def _same(a: nn.Module, b_state: dict, skip=()) -> None:
    for k, v in a.state_dict().items():
        if not k.startswith(skip):
            assert torch.equal(v, b_state[k]), k


def test_pretrained_model_loads_the_checkpoint_with_the_runs_overrides():
    imp, source = _checkpoint("s_mixer", MIXER)
    model = init.pretrained_model(_cfg(kwargs={"drop_path_rate": 0.25}), SimpleNamespace(num_classes=5), imp)
    _same(model, imp.state)  # every weight, the head included (same class count, new_head auto)
    assert model.config.drop_path_rate == 0.25 and model.config.num_classes == 5
    # another class count: the dataset's, with a new (Mixer: zero) head on the same body
    model = init.pretrained_model(_cfg(), SimpleNamespace(num_classes=7), imp)
    assert model.head.weight.shape == (7, 8) and not model.head.weight.any() and not model.head.bias.any()
    _same(model, imp.state, skip=("head.",))


def test_pretrained_model_expands_the_resolution():
    imp, _ = _checkpoint("s_mixer", MIXER)
    model = init.pretrained_model(_cfg(expand=2), SimpleNamespace(num_classes=5), imp)
    assert model.config.image_size == 16 and model(torch.zeros(1, 3, 16, 16)).shape == (1, 5)
    torch.testing.assert_close(model.head.weight, imp.state["head.weight"], rtol=0, atol=0)
    same = init.pretrained_model(_cfg(expand=1), SimpleNamespace(num_classes=5), imp)
    assert same.config.image_size == 8


def test_new_head_true_resets_a_head_of_the_same_count():
    imp, _ = _checkpoint("s_mixer", MIXER)
    model = init.pretrained_model(_cfg(new_head=True), SimpleNamespace(num_classes=5), imp)
    assert not model.head.weight.any() and not model.head.bias.any()  # a Mixer's head starts at zero
    _same(model, imp.state, skip=("head.",))
    imp, _ = _checkpoint("bottleneck_mlp", MLP)
    torch.manual_seed(3)
    model = init.pretrained_model(_cfg("bottleneck_mlp", new_head=True), SimpleNamespace(num_classes=4), imp)
    _same(model, imp.state, skip=("head.",))
    assert not torch.equal(model.head.weight, imp.state["head.weight"])


def test_a_config_without_num_classes_gets_none(monkeypatch):
    """The dataset's class count is passed only to an architecture that has one."""
    from mlplab.models import registry

    @dataclasses.dataclass
    class NoClasses:
        image_size: int = 4

    built = []

    def builder(cfg):
        built.append(cfg)
        m = nn.Linear(1, 1)
        m.config = cfg
        return m

    entry = dataclasses.replace(registry.get_model_entry("bottleneck_mlp"), name="no_classes", config_cls=NoClasses,
                                builder=builder, defaults={})
    monkeypatch.setitem(registry._REGISTRY, "no_classes", entry)
    m = nn.Linear(1, 1)
    imp = Imported("no_classes", {"image_size": 4}, {k: v.clone() for k, v in m.state_dict().items()}, "mlplab")
    model = init.pretrained_model(_cfg("no_classes"), SimpleNamespace(num_classes=9), imp)
    assert built[-1] == NoClasses(4) and torch.equal(model.weight, imp.state["weight"])


def test_reset_head_zeros_a_mixer_and_reinitialises_other_heads_as_nn_linear():
    mixer = create_model("s_mixer", **MIXER)
    with torch.no_grad():
        mixer.head.weight.fill_(3.0)
        mixer.head.bias.fill_(3.0)
    init.reset_head(mixer)
    assert not mixer.head.weight.any() and not mixer.head.bias.any()
    mlp = create_model("bottleneck_mlp", **MLP)
    with torch.no_grad():
        mlp.head.weight.fill_(3.0)
        mlp.head.bias.fill_(3.0)
    torch.manual_seed(11)
    init.reset_head(mlp)
    torch.manual_seed(11)
    ref = nn.Linear(mlp.head.in_features, mlp.head.out_features)  # nn.Linear's own initialisation
    assert torch.equal(mlp.head.weight, ref.weight) and torch.equal(mlp.head.bias, ref.bias)
    assert not getattr(mlp.config, "zero_head", False)
