"""Run config: strict dotted overrides, durations, named configs, JSON round trip, run names."""
import json

import pytest

from mlplab.models import list_models
from mlplab.train import CONFIGS, from_dict, make_config, parse_overrides, to_dict
from mlplab.train.config import config_diff, parse_value


def test_cli_values_are_typed():
    assert parse_value("0.1") == 0.1 and parse_value("3") == 3
    assert parse_value("true") is True and parse_value("True") is True
    assert parse_value("null") is None and parse_value("None") is None
    assert parse_value("[0.9, 0.95]") == [0.9, 0.95] and parse_value("(1, 2)") == (1, 2)
    assert parse_value("adamw") == "adamw"
    assert parse_overrides(["optim.lr=1e-3", "run.name=a=b"]) == {"optim.lr": 1e-3, "run.name": "a=b"}
    with pytest.raises(ValueError, match="override .optim.lr. is not of the form KEY=VALUE"):
        parse_overrides(["optim.lr"])


def test_overrides_apply_and_coerce():
    cfg = make_config("cifar10_s_mixer", ["optim.lr=1", "optim.betas=[0.9, 0.95]", "model.kwargs.depth=4",
                                          "schedule.epochs=null", "schedule.steps=100"])
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert cfg.optim.betas == (0.9, 0.95)
    assert cfg.model.kwargs["depth"] == 4 and cfg.model.kwargs["hidden_dim"] == 64
    assert cfg.schedule.steps == 100 and cfg.schedule.epochs is None


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError, match=r"'optim\.lrr'.*optim\.lr,"):
        make_config("cifar10_s_mixer", ["optim.lrr=0.1"])
    with pytest.raises(ValueError, match="valid sections"):
        make_config(None, {"optimizer.lr": 0.1})
    with pytest.raises(ValueError, match=r"model\.kwargs\.depth"):
        make_config(None, {"model.depth": 3})
    with pytest.raises(ValueError, match="valid overrides are"):
        make_config(None, {"model.kwargs.dpth": 3})
    with pytest.raises(ValueError, match="valid keys in section 'augment'"):
        make_config(None, {"augment.flip": True})


def test_wrong_type_names_the_key():
    with pytest.raises(TypeError, match=r"optim\.lr"):
        make_config(None, {"optim.lr": "fast"})
    with pytest.raises(TypeError, match=r"run\.batch_size"):
        make_config(None, {"run.batch_size": 1.5})
    with pytest.raises(TypeError, match=r"optim\.name"):
        make_config(None, {"optim.name": "adam"})
    with pytest.raises(TypeError, match="hidden_dim"):
        make_config(None, {"model.kwargs.hidden_dim": "64"})
    with pytest.raises(ValueError, match="autoaugment"):
        make_config(None, {"augment.autoaugment": "yes"})


def test_ambiguous_durations_are_refused():
    with pytest.raises(ValueError, match="exactly one training length"):
        make_config("cifar10_s_mixer", {"schedule.steps": 10})
    with pytest.raises(ValueError, match="exactly one training length"):
        make_config(None, {"schedule.epochs": None})
    with pytest.raises(ValueError, match="warmup in epochs or steps"):
        make_config(None, {"schedule.warmup_epochs": 1, "schedule.warmup_steps": 5})
    assert make_config(None, {"schedule.epochs": None, "schedule.examples": 1000}).schedule.examples == 1000


def test_named_configs_and_spec_defaults():
    for name in CONFIGS:
        if "name" not in CONFIGS[name]["model"]:
            continue  # fine-tuning configs: the model comes from a checkpoint (tests/train/test_finetune.py)
        if CONFIGS[name]["model"]["name"] not in list_models():
            continue  # a family another module adds (e.g. the plain MLP)
        make_config(name)
    c = make_config("cifar10_s_mixer")
    assert (c.optim.name, c.optim.lr, c.optim.momentum, c.optim.nesterov) == ("sgd", 0.02, 0.9, True)
    assert (c.run.batch_size, c.schedule.epochs, c.schedule.schedule) == (128, 200, "cosine")
    assert c.model.kwargs["patch_size"] == 4 and c.augment.crop_padding == 4 and c.augment.hflip
    s = CONFIGS["scaling_mlp"]
    assert s["optim"]["name"] == "lion" and s["augment"]["label_smoothing"] == 0.3 and s["augment"]["mixup"] == 0.8
    with pytest.raises(ValueError, match="not a named config"):
        make_config("no_such_config")


def test_json_round_trip_and_file_configs(tmp_path):
    cfg = make_config("cifar10_mixer_adamw", ["optim.lr=0.005"])
    d = to_dict(cfg)
    json.dumps(d)  # plain types only
    assert from_dict(d) == cfg
    path = tmp_path / "my_run.json"
    path.write_text(json.dumps(d))
    assert make_config(str(path)) == cfg
    with pytest.raises(FileNotFoundError):
        make_config(str(tmp_path / "missing.json"))


def test_run_name_derived_from_overrides():
    a = make_config("cifar10_s_mixer", ["optim.lr=0.1", "model.kwargs.depth=4", "run.log=none"])
    assert a.run.name == "cifar10_s_mixer,depth=4,lr=0.1"
    assert make_config("cifar10_s_mixer").run.name == "cifar10_s_mixer"
    assert make_config("cifar10_s_mixer", ["run.name=mine"]).run.name == "mine"
    b = make_config("cifar10_s_mixer", ["optim.lr=0.2", "model.kwargs.depth=4"])
    assert set(config_diff(a, b)) == {"optim.lr"}  # run.name / run.log are not semantic



@pytest.mark.parametrize("scaling, batch, expected", [
    ("linear", 1024, 4e-3), ("sqrt", 1024, 2e-3), ("linear", 128, 5e-4), ("sqrt", 64, 5e-4), ("linear", 256, 1e-3)])
def test_peak_lr_scales_with_the_batch_only_when_lr_batch_is_set(scaling, batch, expected):
    from mlplab.train.config import durations, peak_lr
    cfg = make_config("synthetic_tiny", ["optim.lr=1e-3", "optim.lr_batch=256", f"optim.lr_scaling={scaling}",
                                         f"run.batch_size={batch}"])
    assert peak_lr(cfg) == pytest.approx(expected, rel=1e-12)
    assert durations(cfg, n_train=4096).peak_lr == pytest.approx(expected, rel=1e-12)
    plain = make_config("synthetic_tiny", ["optim.lr=1e-3", f"run.batch_size={batch}"])
    assert peak_lr(plain) == 1e-3  # no lr_batch: the lr is used as given


def test_lr_batch_must_be_a_batch_size():
    with pytest.raises(ValueError, match="optim.lr_batch must be a batch size"):
        make_config("synthetic_tiny", ["optim.lr_batch=0"])


def test_image_folders_and_packs_are_named_by_their_folder_and_the_table_by_its_name(tmp_path, monkeypatch):
    import hashlib

    from mlplab.train.config import data_name

    monkeypatch.chdir(tmp_path)
    tag = hashlib.sha256(str(tmp_path / "packs" / "in21k").encode()).hexdigest()[:6]
    assert data_name("packed", "packs/in21k") == {"data": f"in21k-{tag}"}  # the resolved path decides
    assert data_name("imagefolder", str(tmp_path / "packs" / "in21k")) == {"data": f"in21k-{tag}"}
    assert data_name("packed", "packs/other")["data"].startswith("other-")
    assert data_name("fashion_mnist", "/data") == data_name("packed", None) == {}
    cfg = make_config("synthetic_tiny", ["data.dataset=packed", "data.root=packs/in21k"])
    assert cfg.run.name == f"synthetic_tiny,data=in21k-{tag},dataset=packed"
    assert make_config("synthetic_tiny", ["data.dataset=packed", "data.root=packs/in21k", "run.name=x"]).run.name == "x"
