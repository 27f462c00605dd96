"""The training loop on tiny synthetic runs: results, files, determinism, NaN guard, run folders."""
import contextlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import mlplab.train.loop as loop
import mlplab.train.runplan as runplan
from mlplab.models import create_model
from mlplab.train import NonFiniteError, RunExistsError, train
from mlplab.train.config import to_dict

DESIGN_KEYS = {"test_acc", "test_top5", "test_loss", "train_loss", "epochs", "steps", "wall_s", "epoch_time_s",
               "images_per_s", "params", "flops_per_example", "run_dir", "history"}


def _weights(run_dir):
    return load_file(str(run_dir / "checkpoint" / "model.safetensors"))


def test_train_writes_run_folder_and_results(tiny):
    cfg = tiny("a")
    res = train(cfg)
    assert DESIGN_KEYS <= set(res)
    assert res["epochs"] == 3 and res["steps"] == 3 * (256 // 32)
    assert res["test_acc"] > 0.3  # 10 classes: well above chance after 24 steps
    assert res["flops_per_example"] > 0 and 0 < res["mfu"] < 1.5
    run_dir = Path(res["run_dir"])
    assert json.loads((run_dir / "config.json").read_text()) == to_dict(cfg)
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved["test_acc"] == res["test_acc"]
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2, 3] and "test_acc" in lines[-1]
    state = torch.load(run_dir / "checkpoint" / "state.pt", weights_only=True)
    assert state["epoch"] == 3 and state["step"] == 24


def test_same_seed_same_result_on_cpu(tiny):
    a, b = train(tiny("a")), train(tiny("b"))
    wa, wb = _weights(Path(a["run_dir"])), _weights(Path(b["run_dir"]))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]
    c = train(tiny("c", **{"run.seed": 1}))
    wc = _weights(Path(c["run_dir"]))
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)


def test_non_finite_loss_stops_with_the_step(tiny, monkeypatch):
    def poisoned(name, **kw):
        model = create_model(name, **kw)
        forward, calls = model.forward, [0]

        def fwd(x):
            out = forward(x)
            if model.training:
                calls[0] += 1
                if calls[0] == 6:  # step 5 (0-based)
                    out = out * float("nan")
            return out

        model.forward = fwd
        return model

    monkeypatch.setattr(runplan, "create_model", poisoned)
    with pytest.raises(NonFiniteError, match=r"non-finite loss or gradient at step 6 \(epoch 1\)"):
        train(tiny("nan", **{"run.nan_check_every": 3}))
    assert not (Path(tiny("nan").run.out_dir) / "nan" / "checkpoint").exists()  # none from bad weights


def test_grad_norm_check_catches_non_finite_gradients(tiny, monkeypatch):
    def poisoned(name, **kw):
        model = create_model(name, **kw)
        model.head.weight.register_hook(lambda g: g * float("inf"))
        return model

    monkeypatch.setattr(runplan, "create_model", poisoned)
    with pytest.raises(NonFiniteError, match="at step 1 "):
        train(tiny("inf", **{"optim.grad_clip": 1.0}))


def test_existing_run_folder_is_protected(tiny):
    cfg = tiny("x")
    res = train(cfg)
    with pytest.raises(RunExistsError, match="finished run.*--resume"):
        train(cfg)
    again = train(cfg, resume=True)  # finished: nothing to do, same results
    assert again["test_acc"] == res["test_acc"]
    assert train(cfg, overwrite=True)["test_acc"] == res["test_acc"]


def test_resume_with_a_different_config_is_refused_and_changes_nothing(tiny):
    cfg = tiny("y")
    res = train(cfg)
    run_dir = Path(res["run_dir"])
    before = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(RunExistsError, match=r"optim\.lr: saved 0\.003, now 0\.01"):
        train(tiny("y", **{"optim.lr": 0.01}), resume=True)
    after = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert before == after


def test_model_and_dataset_shapes_must_agree(tiny):
    with pytest.raises(ValueError, match=r"model\.kwargs\.image_size=32 .*data\.image_size=32"):
        train(tiny("m", **{"model.kwargs.image_size": 32}))
    with pytest.raises(ValueError, match=r"model\.kwargs\.in_chans=1"):
        train(tiny("m2", **{"model.kwargs.in_chans": 1}))


def test_durations_in_steps_and_examples(tiny):
    r = train(tiny("s", **{"schedule.epochs": None, "schedule.steps": 10}))
    assert r["steps"] == 10 and r["epochs"] == 2  # 8 steps per epoch: one full, one partial
    r = train(tiny("e", **{"schedule.epochs": None, "schedule.examples": 300}))
    assert r["steps"] == 10  # ceil(300 / 32)


def test_soft_targets_val_split_and_rp_buffers(tiny):
    cfg = tiny("soft", **{"model.name": "rp_s_mixer", "augment.mixup": 0.8, "augment.label_smoothing": 0.1,
                          "augment.hflip": True, "augment.crop_padding": 1, "data.val_fraction": 0.25,
                          "optim.name": "lion", "optim.lr": 1e-3, "schedule.epochs": 2})
    r = train(cfg)
    assert 0 <= r["val_acc"] <= 1 and "val_loss" in r["history"][-1]
    w = _weights(Path(r["run_dir"]))
    perms = [k for k in w if "perm" in k]
    assert perms, "RP permutations must be saved with the weights"
    model = create_model("rp_s_mixer", **{**cfg.model.kwargs, "image_size": 8, "in_chans": 3, "num_classes": 10})
    assert set(w) == set(model.state_dict())


def test_the_loop_trains_with_the_batch_scaled_peak_lr(tiny):
    # lr 1e-3 tuned for batch 8, run at batch 32 with the linear rule: a constant 4e-3 every step
    res = train(tiny("scaled", **{"optim.lr": 1e-3, "optim.lr_batch": 8, "optim.lr_scaling": "linear",
                                  "schedule.schedule": "constant", "schedule.warmup_steps": None}))
    assert [h["lr"] for h in res["history"]] == pytest.approx([4e-3] * 3, rel=1e-12)


def test_results_count_a_masked_sw_mlp_by_its_nonzeros(tiny):
    """``effective_params`` (what the experiment tables show) counts a masked weight by its mask's
    nonzeros; ``params`` stays the dense storage."""
    from mlplab.models.counting import count_params

    cfg = tiny("sw", **{"model.name": "sw_mlp", "model.kwargs": {"width": 64, "density": 0.1, "depth": 2,
                                                                 "patch_size": 4}, "schedule.epochs": 1})
    res = train(cfg)
    model = create_model("sw_mlp", width=64, density=0.1, depth=2, patch_size=4, image_size=8, in_chans=3,
                         num_classes=10)
    assert res["params"] == count_params(model) > res["effective_params"] == count_params(model, effective=True)


def test_evaluate_with_test_hflip_averages_the_mirror_images_logits():
    from mlplab.train.distributed import DistInfo

    torch.manual_seed(0)
    model = create_model("s_mixer", image_size=8, in_chans=1, patch_size=2, hidden_dim=8, depth=1, num_classes=3)
    with torch.no_grad():
        for p in model.parameters():  # the head starts at zero: logits must depend on x
            p.normal_(0, 0.5)
    x, y = torch.randn(20, 1, 8, 8), torch.randint(0, 3, (20,))
    batches = [(x[:12], y[:12]), (x[12:], y[12:])]
    plain = loop.evaluate(model, batches, DistInfo(), contextlib.nullcontext)
    tta = loop.evaluate(model, batches, DistInfo(), contextlib.nullcontext, hflip=True)
    with torch.no_grad():
        mean = (model.eval()(x) + model(x.flip(-1))) / 2
    assert tta["acc"] == pytest.approx((mean.argmax(-1) == y).double().mean().item(), abs=1e-12)
    assert tta["loss"] == pytest.approx(torch.nn.functional.cross_entropy(mean.double(), y).item(), rel=1e-6)
    assert plain["loss"] != pytest.approx(tta["loss"], rel=1e-6)  # the mirror image changes the logits


def test_a_run_with_test_hflip_reports_the_test_time_augmented_accuracy(tiny, monkeypatch):
    seen = []
    evaluate = loop.evaluate
    monkeypatch.setattr(loop, "evaluate", lambda *a, **k: seen.append(a[4:]) or evaluate(*a, **k))
    res = train(tiny("tta", **{"augment.test_hflip": True, "run.eval_every": 0}))
    assert seen == [(True,)] and 0 <= res["test_acc"] <= 1
