"""Fine-tuning and linear probes: init_from, expand, new head, head/body lr groups, frozen body."""
import json

import pytest
import torch
import torch.nn as nn
from train_helpers import tiny_overrides

import mlplab
from mlplab import cli
from mlplab.commands.finetune import finetune_config
from mlplab.train import make_config, train
from mlplab.train.config import OptimSection
from mlplab.train.optim import build_optimizer, param_groups, set_lr


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny MLP-Mixer trained 1 epoch on synthetic 8x8 images: its run folder."""
    out = tmp_path_factory.mktemp("pre")
    ov = tiny_overrides(out, "pre", **{"model.name": "mlp_mixer", "model.kwargs.token_hidden": 4,
                                       "schedule.epochs": 1})
    res = train(make_config(None, ov))
    return res["run_dir"]


def _ft(tmp_path, ckpt, name, **extra):
    ov = {k: v for k, v in tiny_overrides(tmp_path, name).items() if not k.startswith(("model.", "data.image_size"))}
    ov.update(extra)
    return finetune_config(ckpt, "synthetic_tiny", ov)


def test_finetune_at_twice_the_resolution_through_expand(tmp_path, pretrained):
    cfg = _ft(tmp_path, pretrained, "ft", **{"model.expand": 2, "optim.name": "sgd", "optim.lr": 1e-3,
                                              "optim.head_lr": 1e-2, "schedule.epochs": 1})
    assert cfg.model.name == "mlp_mixer" and cfg.model.init_from == str(pretrained)
    res = train(cfg)
    model = mlplab.load_pretrained(res["run_dir"])
    assert model.config.image_size == 16 and model.num_tokens == 16  # 8x8 patches of 4 -> 16x16: 4 -> 16 tokens
    assert model.config.token_hidden == 16  # x K²


def test_linear_probe_moves_only_the_new_head(tmp_path, pretrained):
    cfg = _ft(tmp_path, pretrained, "probe", **{"model.new_head": True, "optim.name": "lion", "optim.lr": 1e-3,
                                                 "optim.freeze": "body", "schedule.epochs": 1})
    res = train(cfg)
    before, after = mlplab.load_pretrained(pretrained).state_dict(), mlplab.load_pretrained(res["run_dir"]).state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"head.weight", "head.bias"}
    # the 3 x forward FLOP rule does not hold with a frozen body: no MFU rather than a wrong one (was 126%)
    assert res["flops_per_example"] > 0 and res["mfu"] is None and res["flops_per_s"] is None


def test_head_and_body_groups():
    m = mlplab.create_model("bottleneck_mlp", width=4, depth=1, image_size=2, in_chans=1, num_classes=3)
    groups = param_groups(m, 0.1, head_lr_scale=10.0)
    head = {id(p) for p in m.head.parameters()}
    assert [(g["weight_decay"], g["lr_scale"]) for g in groups] == [(0.1, 1.0), (0.0, 1.0), (0.1, 10.0), (0.0, 10.0)]
    assert {id(p) for g in groups[2:] for p in g["params"]} == head
    opt = build_optimizer(m, OptimSection(name="sgd", lr=1e-3, head_lr=1e-2))
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([1e-3, 1e-3, 1e-2, 1e-2])  # from construction on
    set_lr(opt, 5e-4)  # the schedule's value at some step: the head's is 10x
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([5e-4, 5e-4, 5e-3, 5e-3])
    probe = build_optimizer(m, OptimSection(name="lion", lr=1e-5, freeze="body"))
    assert {id(p) for g in probe.param_groups for p in g["params"]} == head
    assert not any(p.requires_grad for n, p in m.named_parameters() if not n.startswith("head"))


def test_bad_fine_tuning_configs(tmp_path, pretrained):
    with pytest.raises(ValueError, match="set model.init_from too"):
        make_config(None, {"model.expand": 2})
    with pytest.raises(ValueError, match="optim.head_lr must be"):
        make_config(None, {"optim.head_lr": 0})
    with pytest.raises(ValueError, match="model.expand must be >= 1"):
        make_config(None, {"model.expand": 0, "model.init_from": "x"})
    cfg = make_config(None, tiny_overrides(tmp_path, "wrong", **{"model.init_from": str(pretrained)}))
    with pytest.raises(ValueError, match="holds a 'mlp_mixer'"):  # model.name is s_mixer
        train(cfg)
    cfg = _ft(tmp_path, pretrained, "size", **{"data.image_size": 12})
    with pytest.raises(ValueError, match="drop data.image_size"):
        train(cfg)
    with pytest.raises(ValueError, match="freeze=body needs a model with a classifier head"):
        build_optimizer(nn.Linear(2, 2), OptimSection(freeze="body"))


def test_finetune_cli_print_config(tmp_path, pretrained, capsys):
    argv = ["finetune", str(pretrained), "fmnist_linear_probe", "data.dataset=synthetic", "--print-config"]
    assert cli.main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"]["init_from"] == str(pretrained) and d["model"]["name"] == "mlp_mixer"
    assert d["optim"]["freeze"] == "body" and d["run"]["name"].startswith("fmnist_linear_probe-from-pre")
    assert cli.main(["finetune", str(tmp_path / "nothing"), "fmnist_finetune"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_finetune_refuses_bad_input_before_writing(tmp_path, pretrained, capsys):
    out = tmp_path / "runs"
    # the synthetic pre-training is 3-channel; Fashion-MNIST has 1 channel: refused from the checkpoint alone
    assert cli.main(["finetune", str(pretrained), "fmnist_linear_probe", f"run.out_dir={out}"]) == 2
    assert "takes 3-channel images but fashion_mnist has 1" in capsys.readouterr().err
    mlp = tmp_path / "mlp.safetensors"
    mlplab.save_pretrained(mlplab.create_model("bottleneck_mlp", width=4, depth=1, image_size=8, in_chans=3,
                                               num_classes=10), mlp)
    assert cli.main(["finetune", str(mlp), "fmnist_finetune", "data.dataset=synthetic", f"run.out_dir={out}"]) == 2
    assert "model.expand=2 works on Mixers" in capsys.readouterr().err
    assert not out.exists()


def test_the_two_recipes_are_scaling_mlps():
    """fmnist_finetune: SGD momentum 0.9, lr 0.001 body / 0.01 head, twice the resolution;
    fmnist_linear_probe: frozen body, new head, LION 1e-5."""
    from mlplab.train.config import load_config

    ft = make_config(load_config("fmnist_finetune")[0], {"model.init_from": "x"})
    assert (ft.optim.name, ft.optim.momentum, ft.optim.lr, ft.optim.head_lr, ft.model.expand) == \
        ("sgd", 0.9, 1e-3, 1e-2, 2)
    lp = make_config(load_config("fmnist_linear_probe")[0], {"model.init_from": "x"})
    assert (lp.optim.name, lp.optim.lr, lp.optim.freeze, lp.model.new_head) == ("lion", 1e-5, "body", True)
    m = mlplab.create_model("mlp_mixer", image_size=8, patch_size=4, hidden_dim=4, depth=1, num_classes=3)
    opt = build_optimizer(m, ft.optim)
    assert isinstance(opt, torch.optim.SGD) and {g["momentum"] for g in opt.param_groups} == {0.9}
    assert {g["lr"] for g in opt.param_groups} == {1e-3, 1e-2}


def test_plain_mlp_checkpoint_data_resized_and_new_head(tmp_path):
    """A Scaling-MLPs BottleneckMLP (3x8x8 inputs, 5 classes) fine-tuned on the synthetic 32x32,
    10-class data: the images are resized to 8x8 and the head is new (10 classes)."""
    from pathlib import Path

    from mlplab.train.init import with_model_resolution

    fix = Path(__file__).resolve().parents[1] / "fixtures" / "interop" / "scaling_bottleneck.pth"
    cfg = _ft(tmp_path, fix, "mlp-ft", **{"optim.name": "sgd", "optim.lr": 1e-3, "optim.head_lr": 1e-2,
                                          "schedule.epochs": 1})
    assert cfg.model.name == "bottleneck_mlp" and cfg.data.image_size is None
    assert with_model_resolution(cfg).data.image_size == 8  # synthetic images are 32x32
    res = train(cfg)
    model = mlplab.load_pretrained(res["run_dir"])
    before = mlplab.load_pretrained(fix)
    assert model.config.image_size == 8 and model.head.weight.shape == (10, before.head.weight.shape[1])
    assert model.stem.weight.shape == before.stem.weight.shape


def test_finetune_cli_from_a_flax_checkpoint_at_twice_the_resolution(tmp_path):
    """The Flax fixture (32x32, patch 8, 5 classes) fine-tuned on synthetic 10-class data at 64x64:
    the original's options (tanh GELU, eps 1e-6) survive, the head is new, S = 16 -> 64 tokens."""
    from pathlib import Path

    fix = Path(__file__).resolve().parents[1] / "fixtures" / "interop" / "flax_mixer.npz"
    argv = ["finetune", str(fix), "synthetic_tiny", "model.expand=2", "optim.name=sgd", "optim.lr=0.001",
            "optim.head_lr=0.01", "schedule.epochs=1", "data.train_subset=64", "data.test_subset=32",
            "run.batch_size=32", "run.log=none", "run.device=cpu", f"run.out_dir={tmp_path}", "run.name=ft"]
    assert cli.main(argv) == 0
    m = mlplab.load_pretrained(tmp_path / "ft")
    cfg = m.config
    assert (cfg.image_size, cfg.act, cfg.norm_eps, cfg.num_classes, m.num_tokens) == (64, "gelu_tanh", 1e-6, 10, 64)
