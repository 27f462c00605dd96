"""Gradient accumulation (run.accumulate_steps) and the EMA of the weights (run.ema_decay)."""
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mlplab import create_model
from mlplab.data.augment import AugmentConfig, build_augment
from mlplab.errors import BadInput
from mlplab.interop import load_pretrained
from mlplab.train import train
from mlplab.train.config import OptimSection
from mlplab.train.ema import WeightEMA
from mlplab.train.loop import accumulated_backward
from mlplab.train.optim import build_optimizer


class _Stop(Exception):
    pass


def _soft_batch(n=24, size=8, classes=10):
    """A float64 batch with mixup + label-smoothed soft targets that span the whole batch."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    aug = build_augment(AugmentConfig(mixup=0.8, label_smoothing=0.3, hflip=True), num_classes=classes,
                        mean=(0.5,) * 3, std=(0.25,) * 3)
    x, t = aug(x, y, torch.Generator().manual_seed(1))
    assert t.ndim == 2  # soft targets
    return x.double(), t.double()


def _updates(model_name, kwargs, optim, k, x, t, steps=2):
    torch.manual_seed(0)
    model = create_model(model_name, **kwargs).double()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer(model, optim)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        accumulated_backward(model, x, t, k)
        opt.step()
    return {n: p.detach() - before[n] for n, p in model.named_parameters()}


@pytest.mark.parametrize("optim", [
    OptimSection(name="sgd", lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    OptimSection(name="adamw", lr=1e-2, weight_decay=0.05),
    OptimSection(name="lion", lr=1e-3, weight_decay=1e-3, betas=(0.9, 0.99)),
], ids=["sgd", "adamw", "lion"])
@pytest.mark.parametrize("model_name,kwargs", [
    ("s_mixer", {"image_size": 8, "patch_size": 4, "hidden_dim": 8, "num_tokens": 6, "depth": 2}),
    ("bottleneck_mlp", {"image_size": 8, "width": 16, "depth": 2}),
], ids=["s_mixer", "bottleneck_mlp"])
def test_accumulated_step_equals_the_unsplit_step_in_float64(optim, model_name, kwargs):
    x, t = _soft_batch()
    whole = _updates(model_name, kwargs, optim, 1, x, t)
    for k in (2, 4):
        split = _updates(model_name, kwargs, optim, k, x, t)
        for n, d in whole.items():
            assert d.abs().max() > 0, n  # every parameter moved: the comparison is not vacuous
            rel = (split[n] - d).norm() / d.norm()
            assert rel <= 1e-10, (k, n, float(rel))


def test_accumulated_backward_returns_the_batch_mean_loss_and_all_logits():
    x, t = _soft_batch(n=12)
    model = create_model("bottleneck_mlp", image_size=8, width=16, depth=2).double()
    loss1, logits1 = accumulated_backward(model, x, t, 1)
    loss3, logits3 = accumulated_backward(model, x, t, 3)
    assert logits3.shape == (12, 10) and torch.allclose(logits3, logits1, rtol=0, atol=1e-12)
    assert float(loss3) == pytest.approx(float(loss1), rel=1e-12)


def test_accumulation_in_the_loop_matches_one_big_batch(tiny):
    """Soft targets without random draws (label smoothing): each micro-batch is exactly its part of
    the batch, so K = 4 takes K = 1's steps up to summation order. (With random augmentation each
    micro-batch draws its own stream: tests/data/test_data_staging.py.)"""
    base = {"augment.label_smoothing": 0.1, "schedule.epochs": 2, "optim.lr_batch": 16}
    one = train(tiny("one", **base))
    acc = train(tiny("acc", **base, **{"run.accumulate_steps": 4}))
    assert acc["steps"] == one["steps"]  # the optimiser steps once per global batch
    # the lr is scaled for the global batch 32 (2x optim.lr_batch), not for the micro-batch of 8
    assert [h["lr"] for h in acc["history"]] == [h["lr"] for h in one["history"]]
    w1 = load_file(str(Path(one["run_dir"]) / "checkpoint" / "model.safetensors"))
    w4 = load_file(str(Path(acc["run_dir"]) / "checkpoint" / "model.safetensors"))
    for k in w1:  # fp32: equal up to summation order
        torch.testing.assert_close(w4[k], w1[k], rtol=1e-4, atol=1e-5, msg=k)
    for a, b in zip(acc["history"], one["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)


def test_accumulation_bad_input(tiny):
    with pytest.raises(ValueError, match="run.accumulate_steps must be >= 1"):
        tiny(**{"run.accumulate_steps": 0})
    with pytest.raises(BadInput, match="does not divide"):
        train(tiny("odd", **{"run.accumulate_steps": 5}))  # batch 32


def test_ema_update_is_the_formula_and_keeps_fp32_for_bf16_models():
    torch.manual_seed(0)
    model = create_model("sw_mlp", image_size=8, patch_size=4, width=16, depth=2, density=0.5).double()
    ema = WeightEMA(model, 0.9)
    start = {k: v.clone() for k, v in ema.model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    ema.update()
    for k, v in model.state_dict().items():
        if v.is_floating_point():
            torch.testing.assert_close(ema.model.state_dict()[k], 0.9 * start[k] + 0.1 * v, rtol=0, atol=1e-12)
        else:
            assert torch.equal(ema.model.state_dict()[k], v)
    assert not any(p.requires_grad for p in ema.model.parameters()) and not ema.model.training
    bf = WeightEMA(create_model("bottleneck_mlp", image_size=8, width=16, depth=1).bfloat16(), 0.99)
    assert {p.dtype for p in bf.model.parameters()} == {torch.float32}
    with pytest.raises(ValueError, match="decay"):
        WeightEMA(model, 1.0)


def test_ema_resumed_mid_run_is_bit_identical(tiny):
    extra = {"run.ema_decay": 0.9, "schedule.epochs": 4, "model.kwargs.drop_path_rate": 0.1,
             "augment.hflip": True, "run.accumulate_steps": 2}
    cfg = tiny("stopped", **extra)

    def stop(rec):
        if rec["epoch"] == 2:
            raise _Stop

    with pytest.raises(_Stop):
        train(cfg, on_epoch_end=stop)
    resumed = train(cfg, resume=True)
    reference = train(tiny("reference", **extra))
    for name in ("ema.safetensors", "model.safetensors"):
        a = load_file(str(Path(resumed["run_dir"]) / "checkpoint" / name))
        b = load_file(str(Path(reference["run_dir"]) / "checkpoint" / name))
        for k in b:
            assert torch.equal(a[k], b[k]), (name, k)
    for key in ("test_acc", "test_loss", "test_acc_ema", "test_loss_ema", "test_top5_ema"):
        assert resumed[key] == reference[key], key
    assert resumed["test_loss_ema"] != resumed["test_loss"]  # the average is another model
    # the averaged weights are a model file like any other
    ema_model = load_pretrained(Path(resumed["run_dir"]) / "checkpoint" / "ema.safetensors")
    assert ema_model.model_name == cfg.model.name


def test_ema_bad_input(tiny):
    for bad in (0.0, 1.0, -0.5):
        with pytest.raises(ValueError, match="run.ema_decay must be in"):
            tiny(**{"run.ema_decay": bad})


@pytest.mark.slow
def test_accumulation_and_ema_under_torch_compile(tiny):
    from mlplab.train import backend

    if backend.cpp_compiler() is None:
        pytest.skip("torch.compile on CPU needs a C++ compiler")
    extra = {"run.accumulate_steps": 2, "run.ema_decay": 0.9, "schedule.epochs": 1, "model.kwargs.depth": 1}
    eager = train(tiny("eager", **extra, **{"run.compile": False}))
    compiled = train(tiny("compiled", **extra, **{"run.compile": True}))
    assert compiled["compiled"] and not eager["compiled"]
    assert compiled["dynamo"]["graph_breaks"] == compiled["dynamo"]["skipped_frames"] == 0 and eager["dynamo"] is None
    assert compiled["train_loss"] == pytest.approx(eager["train_loss"], rel=1e-4)
    assert compiled["test_loss_ema"] == pytest.approx(eager["test_loss_ema"], rel=1e-4)


def test_lr_scaling_names_the_global_batch_not_the_micro_batch(tiny):
    from mlplab.train.config import durations

    for k in (1, 4):
        cfg = tiny(**{"optim.lr_batch": 16, "run.accumulate_steps": k})  # batch 32 = 2 x lr_batch
        d = durations(cfg, 256)
        assert d.peak_lr == pytest.approx(2 * cfg.optim.lr) and d.steps_per_epoch == 8
