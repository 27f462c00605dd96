"""Test accuracy is measured in eval mode, against a loop written here.

A model with dropout and stochastic depth gives other logits on every call in training mode, so
an evaluation that forgets ``model.eval()`` is not reproducible and disagrees with the loop
below: top-1 / top-5 / mean cross-entropy of ``model.eval()`` under ``no_grad``, in float64
numpy, on images normalised here as ``(x / 255 − mean) / std``. The same holds for the numbers a
run reports (``test_acc``, ``val_acc``), for ``mlplab eval`` and for the frozen features of the
few-shot evaluation and the linear probe.
"""
import contextlib
from pathlib import Path

import numpy as np
import pytest
import torch
from test_train_loop_parts import _np_metrics  # top-1, top-5, cross-entropy in numpy

import mlplab
from mlplab.analysis.fewshot import extract_features
from mlplab.data import load_dataset
from mlplab.train import train
from mlplab.train.distributed import DistInfo
from mlplab.train.loop import evaluate

DROPPY = {"drop_rate": 0.5, "drop_path_rate": 0.5}  # active in training mode: logits differ per call


def _droppy_model(name="mlp_mixer", classes=7, **kw):
    torch.manual_seed(0)
    model = mlplab.create_model(name, image_size=8, in_chans=1, num_classes=classes, **kw)
    return model.train()


def _hand_metrics(model, x, y):
    """Top-1, top-5 and mean cross-entropy of ``model`` in eval mode, the statistics in numpy."""
    was = model.training
    with torch.no_grad():
        logits = model.eval()(x).double().numpy()
    model.train(was)
    return _np_metrics(logits, y.numpy())


def _assert_metrics(got, want, loss_rel=1e-6):
    assert got["acc"] == pytest.approx(want["acc"], abs=1e-12)
    assert got["top5"] == pytest.approx(want["top5"], abs=1e-12)
    assert got["loss"] == pytest.approx(want["loss"], rel=loss_rel)


@pytest.mark.parametrize("name,kw", [
    ("mlp_mixer", dict(patch_size=2, hidden_dim=8, depth=2, zero_head=False, **DROPPY)),
    ("mlp", dict(width=32, depth=2, drop_rate=0.5)),
    ("sw_mlp", dict(width=32, depth=2, density=0.5, drop_rate=0.5, zero_head=False)),
])
def test_evaluate_is_the_eval_mode_loop_and_restores_the_mode(name, kw):
    model = _droppy_model(name, **kw)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 1, 8, 8, generator=g), torch.randint(0, 7, (40,), generator=g)
    batches = [(x[:16], y[:16]), (x[16:], y[16:])]
    with torch.no_grad():
        assert not torch.equal(model(x), model(x)), "the dropout must be active in training mode"
    first = evaluate(model, batches, DistInfo(), contextlib.nullcontext)
    assert model.training  # the caller's mode comes back
    second = evaluate(model, batches, DistInfo(), contextlib.nullcontext)
    assert first == second
    _assert_metrics(first, _hand_metrics(model, x, y))
    model.eval()
    assert evaluate(model, batches, DistInfo(), contextlib.nullcontext) == first and not model.training


def test_extract_features_are_the_eval_mode_pre_logits():
    model = _droppy_model(patch_size=2, hidden_dim=8, depth=2, zero_head=False, **DROPPY)
    x = torch.randn(12, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    y = torch.arange(12) % 7
    a, la = extract_features(model, [(x[:5], y[:5]), (x[5:], y[5:])])
    b, _ = extract_features(model, [(x, y)])
    assert model.training
    with torch.no_grad():
        want = model.eval().forward_intermediates(x)[1]["pre_logits"].double().numpy()
    np.testing.assert_allclose(a, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(la, y.numpy())


def _split_tensors(cfg, split):
    """The images and labels a run evaluates on ``split``, loaded and normalised here."""
    d = cfg.data
    data = load_dataset(d.dataset, split, image_size=d.image_size, val_fraction=d.val_fraction, seed=0)
    x, y = data.images, data.labels
    first = {"train": d.train_subset, "test": d.test_subset}.get(split)  # data.subset=first
    x, y = x[:first], y[:first]
    mean = torch.tensor(data.info.mean, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(data.info.std, dtype=torch.float64).view(1, -1, 1, 1)
    return ((x.double() / 255 - mean) / std).float(), y


@pytest.fixture(scope="module")
def droppy_run(tmp_path_factory):
    """A finished run of a Mixer with dropout and stochastic depth, with a held-out val split."""
    from train_helpers import tiny_overrides

    from mlplab.train import make_config

    out = tmp_path_factory.mktemp("droppy")
    cfg = make_config(None, tiny_overrides(out / "runs", "droppy", **{
        "model.name": "mlp_mixer", "model.kwargs.drop_rate": 0.3, "model.kwargs.drop_path_rate": 0.3,
        "model.kwargs.zero_head": False, "data.val_fraction": 0.25, "schedule.epochs": 2}))
    return cfg, train(cfg)


def test_a_runs_test_and_val_accuracy_are_the_eval_mode_loop_on_its_weights(droppy_run):
    cfg, res = droppy_run
    model = mlplab.load_pretrained(Path(res["run_dir"]) / "checkpoint" / "model.safetensors")
    for split in ("test", "val"):
        x, y = _split_tensors(cfg, split)
        want = _hand_metrics(model, x, y)
        got = {k: res[f"{split}_{k}"] for k in ("acc", "top5", "loss")}
        _assert_metrics(got, want, loss_rel=1e-5)


def test_mlplab_eval_and_its_linear_evaluation_use_eval_mode(droppy_run):
    from mlplab.analysis.fewshot import linear_few_shot, linear_probe
    from mlplab.experiments.linear_eval import linear_eval
    from mlplab.train.evaluation import evaluate_setup, load_for_eval

    cfg, res = droppy_run
    setup = load_for_eval(res["run_dir"])
    x, y = _split_tensors(cfg, "test")
    _assert_metrics(evaluate_setup(setup, progress=False), _hand_metrics(setup.model, x, y), loss_rel=1e-5)
    # the shots and the probe come from the training split, the accuracy from the split evaluated
    setup = load_for_eval(res["run_dir"], split="val", head=False)
    setup.model.train()  # the features must not depend on the mode the model is handed in
    got = linear_eval(setup, (1, 2), probe=True, draws=2)
    with torch.no_grad():
        feats = [(setup.model.eval().forward_intermediates(x)[1]["pre_logits"].double().numpy(), y.numpy())
                 for x, y in (_split_tensors(cfg, "train"), _split_tensors(cfg, "val"))]
    shots = linear_few_shot(*feats[0], *feats[1], shots=(1, 2), draws=2)
    n = len(feats[1][1])
    assert got["test_examples"] == n and got["train_examples"] == len(feats[0][1])
    for k in (1, 2):
        assert got["few_shot"][str(k)]["mean"] == pytest.approx(shots[k].mean, abs=1.5 / n)
    assert got["probe"]["acc"] == pytest.approx(linear_probe(*feats[0], *feats[1]).acc, abs=1.5 / n)
