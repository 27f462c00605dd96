"""A run resolved once (mlplab.train.runplan): one validation, one meta build and one checkpoint
read per command; the memory check for every family; the plan's parts."""
import re

import pytest
import torch
from train_helpers import tiny_overrides

import mlplab
from mlplab import cli
from mlplab.interop import api as interop_api
from mlplab.models.impl import Impl
from mlplab.models.registry import create_model, list_models
from mlplab.train import config as config_mod
from mlplab.train import make_config, runplan
from mlplab.train.runplan import as_plan, meta_model, meta_param_count, plan_run


def _argv(ov):
    return [f"{k}={v}" for k, v in ov.items()]


def _count(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_train_plans_once_and_builds_on_meta_once(tmp_path, monkeypatch):
    """make_config checks the config it makes, plan_run the config it is given: two validations,
    no mark left on the config; one build on the meta device."""
    validations = _count(monkeypatch, config_mod, "validate")
    meta_builds = _count(monkeypatch, runplan, "meta_model")
    ov = tiny_overrides(tmp_path, "once", **{"schedule.epochs": 1})
    assert cli.main(["train", "synthetic_tiny", *_argv(ov)]) == 0
    assert len(validations) == 2 and len(meta_builds) == 1
    assert (tmp_path / "once" / "results.json").exists()


def test_a_pack_is_checked_for_memory_once_its_data_is_opened(tmp_path, monkeypatch):
    """A pack's image size and classes are known only once it is opened: the plan leaves the
    count to the loop, which builds on meta once, with the opened sizes, before the model."""
    import numpy as np

    from mlplab.data import pack
    from mlplab.data.formats import png_bytes

    g = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in ("a", "b"):
            (tmp_path / "src" / split / c).mkdir(parents=True)
            (tmp_path / "src" / split / c / "0.png").write_bytes(png_bytes(g.integers(0, 256, (3, 8, 8), np.uint8)))
    pack(tmp_path / "src", tmp_path / "p", 8, workers=1, progress="none")
    meta_builds = _count(monkeypatch, runplan, "meta_param_count")
    checks = _count(monkeypatch, runplan, "check_memory")
    ov = tiny_overrides(tmp_path, "p1", **{"schedule.epochs": 1, "data.dataset": "packed", "data.root": tmp_path / "p",
                                           "run.batch_size": 2, "data.image_size": None})
    assert cli.main(["train", "synthetic_tiny", *_argv(ov)]) == 0
    kwargs = meta_builds[0][1]
    assert len(meta_builds) == 1 and (kwargs["image_size"], kwargs["num_classes"], kwargs["in_chans"]) == (8, 2, 3)
    assert len(checks) == 1 and checks[0][0] == meta_param_count("s_mixer", kwargs)


def test_a_plan_checks_its_config_and_keeps_a_copy():
    cfg = make_config(None, {"schedule.epochs": 1})
    assert "_validated" not in vars(cfg)  # no hidden mark: the plan validates what it is given
    plan = plan_run(cfg)
    cfg.optim.lr = -1.0  # changed after make_config validated it
    assert plan.cfg.optim.lr > 0  # the plan holds what it checked
    with pytest.raises(ValueError, match="optim.lr must be"):
        plan_run(cfg)


@pytest.mark.parametrize("impl, model, message", [
    ("fused", "mlp", "model.impl=fused: mlp has no 'fused' implementation; use impl=auto or module"),
    ("definition", "mlp", "model.impl=definition: mlp has no 'definition' implementation"),
    ("fused", "s_mixer", "model.impl=fused, but the fused seams cannot run this training step: a Mixer without "
                         "LayerNorms or skips has no seams; use model.impl=auto"),
])
def test_an_impossible_impl_is_refused_by_the_plan_before_any_data(tmp_path, capsys, impl, model, message):
    """--print-config and check_specs (a plan for another machine) refuse it: no data is read."""
    ov = {k: v for k, v in tiny_overrides(tmp_path, "impl").items() if not k.startswith("model.")}
    ov.update({"model.name": model, "model.impl": impl, "model.kwargs": {"norm": False} if model == "s_mixer" else {}})
    assert cli.main(["train", "synthetic_tiny", *_argv(ov), "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and not (tmp_path / "impl").exists()
    with pytest.raises(ValueError, match=re.escape(message.split(";")[0])):
        plan_run(make_config("synthetic_tiny", ov), here=False)
    assert plan_run(make_config("synthetic_tiny", {**ov, "model.impl": "module"}), here=False).impl is Impl.MODULE


def test_finetune_reads_the_checkpoint_once(tmp_path, monkeypatch, capsys):
    model = create_model("mlp_mixer", image_size=8, patch_size=4, in_chans=3, num_classes=10, hidden_dim=8,
                         depth=1, token_hidden=4, channel_hidden=8)
    ckpt = mlplab.save_pretrained(model, tmp_path / "pre.safetensors")
    reads = _count(monkeypatch, interop_api, "read_tensors")
    ov = {k: v for k, v in tiny_overrides(tmp_path, "ft", **{"schedule.epochs": 1}).items()
          if not k.startswith(("model.", "data.image_size"))}
    assert cli.main(["finetune", str(ckpt), "synthetic_tiny", *_argv(ov)]) == 0
    assert len(reads) == 1
    assert (tmp_path / "ft" / "results.json").exists()
    reads.clear()
    assert cli.main(["finetune", str(ckpt), "synthetic_tiny", *_argv(ov), "--print-config"]) == 0
    assert len(reads) == 1 and '"init_from"' in capsys.readouterr().out


@pytest.mark.parametrize("name,kwargs", [
    ("mlp_mixer", {"hidden_dim": 10**6}), ("s_mixer", {"hidden_dim": 10**6}), ("rp_mlp_mixer", {"hidden_dim": 10**6}),
    ("mlp", {"width": 10**8}), ("sw_mlp", {"width": 10**8}), ("sw_mlp", {"width": 10**8, "storage": "sparse"}),
    ("monarch_mlp", {"width": 10**8})])
def test_an_absurd_model_is_refused_before_any_allocation(tmp_path, capsys, name, kwargs):
    ov = {k: v for k, v in tiny_overrides(tmp_path, "huge").items() if not k.startswith("model.")}
    ov["model.name"] = name
    ov["model.kwargs"] = kwargs
    assert cli.main(["train", "synthetic_tiny", *_argv(ov)]) == 2
    err = capsys.readouterr().err.strip()
    assert "parameters, needing about" in err and "Choose a smaller model" in err and "\n" not in err
    assert not (tmp_path / "huge").exists()


SMALL = ["mlp", "bottleneck_mlp", "bottleneck_mlp_b6_wi256", "sw_mlp", "sw_mlp_block", "monarch_mlp", "kronecker_mlp",
         "mlp_mixer", "s_mixer", "rp_mlp_mixer", "rp_s_mixer"]  # every family, under 15M parameters


@pytest.mark.parametrize("name", SMALL)
def test_meta_count_is_the_real_count(name):
    """Every family builds on the meta device (the Mixers' PK layers included) and counts the
    parameters the real model has."""
    torch.manual_seed(0)
    meta = meta_model(name, {})
    assert sum(p.numel() for p in meta.parameters()) == sum(p.numel() for p in create_model(name).parameters())
    assert all(p.is_meta for p in meta.parameters())


def test_every_registered_model_builds_on_meta():
    assert all(sum(p.numel() for p in meta_model(n, {}).parameters()) > 0 for n in list_models())


def test_plan_for_another_machine_has_no_device_and_train_replans_it(tmp_path):
    cfg = make_config(None, tiny_overrides(tmp_path, "elsewhere", **{"schedule.epochs": 1}))
    away = plan_run(cfg, here=False)
    assert away.device is None and away.precision is None and away.n_params > 0
    here = as_plan(away)
    assert here.device == torch.device("cpu") and here.precision == "fp32" and here.cfg == cfg
    assert mlplab.train(away)["test_acc"] >= 0


def test_train_takes_a_named_config_and_refuses_other_things(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = mlplab.train("synthetic_tiny")
    assert res["run_dir"].endswith("synthetic_tiny") and res["epochs"] == 3
    with pytest.raises(ValueError, match="train takes a RunConfig .* not a dict"):
        mlplab.train({"optim": {"lr": 0.1}})


def test_the_rank_gpu_comes_from_torchrun_before_the_process_group(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert runplan._torchrun_local_rank() == 1
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert runplan._torchrun_local_rank() is None
    if torch.cuda.device_count() > 1:
        assert runplan.resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    elif not torch.cuda.is_available():
        with pytest.raises(ValueError, match="run.device=cuda but CUDA is not available"):
            runplan.resolve_device("cuda", local_rank=1)


def test_a_plan_builds_its_pretrained_model_twice_from_the_one_read(tmp_path, monkeypatch):
    model = create_model("mlp", image_size=8, in_chans=3, num_classes=10, width=16, depth=1)
    ckpt = mlplab.save_pretrained(model, tmp_path / "pre.safetensors")
    cfg = make_config(None, {**tiny_overrides(tmp_path, "ft"), "model.name": "mlp", "model.kwargs": {},
                             "model.init_from": str(ckpt), "data.image_size": None})
    plan = plan_run(cfg)
    reads = _count(monkeypatch, interop_api, "read_tensors")
    assert plan.n_params == sum(p.numel() for p in model.parameters()) and plan.data_cfg.data.image_size == 8
    first, second = plan.build_model(plan.info), plan.build_model(plan.info)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))
    assert torch.equal(first.stem.weight, model.stem.weight) and not reads  # the plan is not changed by a build
