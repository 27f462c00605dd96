"""``train.evaluation`` piece by piece, on one tiny run (a second of training): what a run folder,
its checkpoint folder and files resolve to, the config and data an evaluation follows, the
numbers against a loop written here (eval mode, test-time mirror images), and each refusal's
sentence. (test_eval.py drives the same through ``mlplab eval`` on longer runs.)"""
from __future__ import annotations

import io
import json
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mlplab import create_model
from mlplab.data.formats import png_bytes
from mlplab.errors import BadInput
from mlplab.interop import save_pretrained
from mlplab.train import evaluation as E


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A one-epoch Mixer with dropout and stochastic depth (eval mode matters), an EMA, a held-out
    val split, test-time mirror images and an evaluation batch that splits the test set."""
    from train_helpers import tiny_overrides

    from mlplab.train import make_config, train

    out = tmp_path_factory.mktemp("evaluation")
    cfg = make_config(None, tiny_overrides(out / "runs", "r", **{
        "model.name": "mlp_mixer", "model.kwargs.drop_rate": 0.3, "model.kwargs.drop_path_rate": 0.3,
        "model.kwargs.zero_head": False, "schedule.epochs": 1, "data.train_subset": 64, "data.test_subset": 24,
        "data.val_fraction": 0.25, "run.ema_decay": 0.8, "augment.test_hflip": True, "run.eval_batch_size": 10}))
    res = train(cfg)
    return Path(res["run_dir"]), res


def _hand_metrics(model, split, info, hflip):
    """Top-1, top-5 and mean cross-entropy in eval mode; images normalised here, statistics in numpy."""
    x = split.images.double() / 255
    x = ((x - torch.tensor(info.mean).view(1, -1, 1, 1)) / torch.tensor(info.std).view(1, -1, 1, 1)).float()
    model.eval()
    with torch.no_grad():
        logits = model(x).double()
        if hflip:
            logits = (logits + model(x.flip(-1)).double()) / 2
    logits, y = logits.numpy(), split.labels.numpy()
    order = np.argsort(-logits, axis=1, kind="stable")
    shifted = logits - logits.max(1, keepdims=True)
    ce = np.log(np.exp(shifted).sum(1)) - shifted[np.arange(len(y)), y]
    return {"acc": float(np.mean(order[:, 0] == y)), "top5": float(np.mean((order[:, :5] == y[:, None]).any(1))),
            "loss": float(ce.mean())}


def test_a_run_folder_its_checkpoint_folder_and_file_resolve_to_the_run(run):
    run_dir, _ = run
    model_file = run_dir / "checkpoint" / "model.safetensors"
    for given in (run_dir, run_dir / "checkpoint", model_file):
        setup = E.load_for_eval(given)
        assert setup.run_dir == run_dir and setup.weights == model_file
        assert setup.cfg.data.val_fraction == 0.25 and setup.cfg.augment.test_hflip  # the run's own config
        assert not setup.model.training  # EvalSetup.model is in eval mode
    ema = E.load_for_eval(run_dir, ema=True)
    assert ema.weights == run_dir / "checkpoint" / "ema.safetensors"
    assert E.load_for_eval(run_dir / "checkpoint" / "ema.safetensors", ema=True).weights == ema.weights
    assert not torch.equal(next(ema.model.parameters()), next(setup.model.parameters()))


def test_the_setup_describes_what_is_evaluated_on_what(run):
    run_dir, _ = run
    setup = E.load_for_eval(run_dir)
    assert setup.split is setup.data.test and setup.split_name == "test" and setup.trained_classes
    assert setup.head_fits and setup.device == torch.device("cpu") and setup.precision == "fp32"
    assert setup.describe() == {"images": 24, "split": "test", "dataset": "synthetic", "image_size": 8,
                                "weights": str(run_dir / "checkpoint" / "model.safetensors"), "model": "mlp_mixer",
                                "precision": "fp32", "device": "cpu"}
    val = E.load_for_eval(run_dir, split="val")
    assert val.split is val.data.val and val.split_name == "val"
    assert len(val.split) == 1024 // 4  # a quarter of the synthetic set's 1024 training images
    train = E.load_for_eval(run_dir, split="train")
    assert train.split is train.data.train and len(train.split) == 64  # data.train_subset


def test_the_numbers_are_the_eval_mode_loop_with_mirror_images_and_the_runs_own(run):
    run_dir, res = run
    setup = E.load_for_eval(run_dir)
    setup.model.train()  # evaluate_setup measures in eval mode whatever mode it is handed
    t0 = time.perf_counter()
    got = E.evaluate_setup(setup, progress=False)
    took = time.perf_counter() - t0
    want = _hand_metrics(setup.model, setup.split, setup.data.info, hflip=True)
    assert got["acc"] == pytest.approx(want["acc"], abs=1e-12) and got["top5"] == pytest.approx(want["top5"], abs=1e-12)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    assert _hand_metrics(setup.model, setup.split, setup.data.info, hflip=False) != want  # the mirror images count
    assert (got["acc"], got["loss"], got["top5"]) == (res["test_acc"], res["test_loss"], res["test_top5"])
    assert got["images_per_s"] == pytest.approx(24 / got["seconds"], rel=1e-9) and 0 < got["seconds"] <= took
    assert {k: got[k] for k in setup.describe()} == setup.describe()
    assert E.evaluate_checkpoint(run_dir, split="val", progress=False)["acc"] == res["val_acc"]
    ema = E.evaluate_checkpoint(run_dir, ema=True, progress=False)
    assert (ema["acc"], ema["loss"]) == (res["test_acc_ema"], res["test_loss_ema"])
    flat = E.evaluate_checkpoint(run_dir, ["augment.test_hflip=false"], progress=False)
    assert flat["loss"] == pytest.approx(_hand_metrics(setup.model, setup.split, setup.data.info, False)["loss"],
                                         rel=1e-5)


def test_a_progress_bar_only_when_asked(run, capsys):
    setup = E.load_for_eval(run[0])
    for progress, shown in ((True, True), (False, False), (None, False)):  # None: only on a terminal
        E.evaluate_setup(setup, progress=progress)
        err = capsys.readouterr().err
        assert ("eval test" in err) == shown, progress
        if shown:  # batches counted, and the bar cleared when done: the result's line stands alone
            assert re.search(r"0/3 \[[^]]*batch/s\]", err), err
            assert err.endswith("\r") and err.rsplit("\r", 2)[1].strip() == "", err
        E.evaluate_checkpoint(run[0], split="val", progress=progress)
        assert ("eval val" in capsys.readouterr().err) == shown, progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_progress_bar_by_default_on_a_terminal(run, monkeypatch):
    setup = E.load_for_eval(run[0])
    monkeypatch.setattr(sys, "stderr", _Terminal())
    E.evaluate_setup(setup)
    assert "eval test" in sys.stderr.getvalue()


def test_bf16_evaluates_under_autocast_and_fp32_without(run):
    bf16 = E.load_for_eval(run[0], ["run.precision=bf16"])
    assert bf16.precision == "bf16"
    with bf16.autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with E.load_for_eval(run[0]).autocast():
        assert not torch.is_autocast_enabled("cpu")


def test_bf16_autocast_names_its_dtype(run, monkeypatch):
    """torch.autocast's default dtype is bfloat16 on a CPU but float16 on a GPU: the setup names it."""
    setup = E.load_for_eval(run[0], ["run.precision=bf16"])
    seen = []
    monkeypatch.setattr(torch, "autocast", lambda device_type, **kw: seen.append((device_type, kw)))
    setup.autocast()
    assert seen == [("cpu", {"dtype": torch.bfloat16})]


class _Pool(torch.nn.Module):
    """A model of no mlplab family: no config, no model_name, any image size."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 10)

    def forward(self, x):
        return self.fc(x.mean((2, 3)))


def test_a_model_without_a_config_on_images_that_are_not_square(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for c in range(3):
            (tmp_path / "f" / split / f"c{c}").mkdir(parents=True)
            for i in range(2):
                (tmp_path / "f" / split / f"c{c}" / f"{i}.png").write_bytes(
                    png_bytes(rng.integers(0, 256, (3, 6, 10), dtype=np.uint8)))  # 6 high, 10 wide
    weights = tmp_path / "pool.pt"
    weights.write_bytes(b"read by the patched loader")
    monkeypatch.setattr(E, "_load_model", lambda path: _Pool())
    setup = E.load_for_eval(weights, ["data.dataset=imagefolder", f"data.root={tmp_path / 'f'}",
                                      "data.stream=false"])  # a folder streams at one square size only
    assert setup.head_fits and setup.data.info.image_size == (6, 10)
    described = setup.describe()
    assert described["model"] == "_Pool" and described["image_size"] == 6  # the images' height
    assert E.evaluate_setup(setup, progress=False)["images"] == 6


def test_the_evaluation_threads_are_set(run, monkeypatch):
    """Recorded, not set: a process forked from one that ran torch (mutation testing) hangs in
    its first parallel region when it raises the thread count."""
    seen = []
    monkeypatch.setattr(torch, "set_num_threads", seen.append)
    E.load_for_eval(run[0], ["run.threads=3"])
    assert seen == [3]
    E.load_for_eval(run[0], ["run.threads=null"])  # torch's own choice: left alone
    assert seen == [3]


def test_the_model_goes_to_the_configs_device(run, monkeypatch):
    """Recorded: on a machine with a GPU, run.device=cpu must not evaluate there, and the model
    goes where the data is."""
    seen, moved, real, load = [], [], E.resolve_device, E._load_model
    monkeypatch.setattr(E, "resolve_device", lambda device: seen.append(device) or real(device))

    def loaded(path):
        model = load(path)
        to = model.to
        model.to = lambda *a, **kw: moved.append((a, kw)) or to(*a, **kw)
        return model

    monkeypatch.setattr(E, "_load_model", loaded)
    assert E.load_for_eval(run[0], ["run.device=cpu"]).device == torch.device("cpu")
    assert seen == ["cpu"] and moved == [((torch.device("cpu"),), {})]


def test_a_checkpoint_file_outside_a_run_is_resized_to_its_model(tmp_path):
    path = save_pretrained(create_model("bottleneck_mlp", image_size=8, width=16, depth=1), tmp_path / "m.safetensors")
    setup = E.load_for_eval(path, ["data.dataset=synthetic", "data.test_subset=12"])
    assert setup.run_dir is None and setup.weights == path and setup.cfg.run.name == "eval"
    assert setup.cfg.data.image_size == 8 and setup.data.info.image_size == (8, 8)
    assert tuple(setup.split.images.shape) == (12, 3, 8, 8)
    folder = tmp_path / "weights"  # a folder of weights that is no run: its one weights file
    folder.mkdir()
    shutil.copy(path, folder / "mixer.safetensors")
    assert E.load_for_eval(folder, ["data.dataset=synthetic"]).weights == folder / "mixer.safetensors"
    with pytest.raises(FileNotFoundError, match=r"weights holds no checkpoint \(model.safetensors\)"):
        E.load_for_eval(folder, ["data.dataset=synthetic"], ema=True)  # no run: no EMA to read
    native = save_pretrained(create_model("bottleneck_mlp", image_size=32, width=16, depth=1),
                             tmp_path / "n.safetensors")  # the dataset's native size: nothing to resize
    assert E.load_for_eval(native, ["data.dataset=synthetic"]).cfg.data.image_size is None


def _refusal(excinfo, exc=BadInput):
    assert excinfo.type is exc
    return str(excinfo.value)


def test_each_refusal_says_what_to_change(run, tmp_path):
    run_dir, _ = run
    with pytest.raises(BadInput) as e:
        E.load_for_eval(run_dir, split="tset")
    assert _refusal(e) == "--split must be one of train, val, test, not 'tset'"
    with pytest.raises(FileNotFoundError, match=r"missing does not exist; give a run folder or a checkpoint file$"):
        E.load_for_eval(tmp_path / "missing")
    with pytest.raises(BadInput) as e:
        E.load_for_eval(run_dir, ["optim.lr=0.1", "model.name=mlp", "data.image_size=8"])
    assert _refusal(e) == ("mlplab eval takes data.* keys and run.eval_batch_size, run.precision, run.device, "
                           "run.threads, augment.test_hflip, not model.name, optim.lr; the model comes from the "
                           "checkpoint")
    five = save_pretrained(create_model("bottleneck_mlp", image_size=8, width=16, depth=1, num_classes=5),
                           tmp_path / "five.safetensors")
    with pytest.raises(BadInput) as e:
        E.load_for_eval(five)
    assert _refusal(e) == ("a checkpoint file outside a run folder says nothing about its data; add "
                           "data.dataset=NAME (e.g. data.dataset=cifar10)")
    with pytest.raises(BadInput) as e:
        E.load_for_eval(five, ["data.dataset=synthetic"])
    assert _refusal(e) == (f"the model in {five} has 5 classes but synthetic has 10; evaluate it on a dataset "
                           "with 5 classes (mlplab finetune trains a new head)")
    assert E.load_for_eval(five, ["data.dataset=synthetic"], head=False).model.config.num_classes == 5
    gray = save_pretrained(create_model("bottleneck_mlp", image_size=8, width=16, depth=1, in_chans=1),
                           tmp_path / "gray.safetensors")
    for head in (True, False):
        with pytest.raises(BadInput) as e:
            E.load_for_eval(gray, ["data.dataset=synthetic"], head=head)
        assert _refusal(e) == (f"the model in {gray} has 1 image channels but synthetic has 3; evaluate it on a "
                               "dataset with 1 image channels (mlplab finetune trains a new head)")
    with pytest.raises(BadInput) as e:
        E.load_for_eval(five, ["data.dataset=synthetic", "data.image_size=16"])
    assert _refusal(e) == (f"data.image_size=16 but the model in {five} takes 8x8 images; drop data.image_size "
                           "(the data is resized to the model's resolution)")
    with pytest.raises(BadInput) as e:
        E.load_for_eval(five, ["data.dataset=synthetic"], ema=True)
    assert _refusal(e) == (f"--ema reads a run's ema.safetensors; give the run folder or that file, not {five}")
    with pytest.raises(BadInput) as e:
        E.load_for_eval(run_dir, ["data.val_fraction=0"], split="val")
    assert _refusal(e) == ("--split val evaluates the part of the training split a run held out; this config holds "
                           "out none (data.val_fraction=0): add data.val_fraction=F, or use --split test")


def _copy_run(run_dir, dest, edit=None, drop=()):
    shutil.copytree(run_dir, dest)
    for name in drop:
        (dest / name).unlink()
    if edit:
        cfg = json.loads((dest / "config.json").read_text())
        edit(cfg)
        (dest / "config.json").write_text(json.dumps(cfg))
    return dest


def test_a_run_without_an_ema_or_a_checkpoint_is_refused(run, tmp_path):
    no_ema = _copy_run(run[0], tmp_path / "no_ema", drop=["checkpoint/ema.safetensors"])
    with pytest.raises(BadInput) as e:
        E.load_for_eval(no_ema, ema=True)
    assert _refusal(e) == (f"{no_ema / 'checkpoint'} has no ema.safetensors: the run kept no EMA of its weights "
                           "(run.ema_decay); drop --ema")
    assert E.load_for_eval(no_ema).weights == no_ema / "checkpoint" / "model.safetensors"
    prev = _copy_run(run[0], tmp_path / "prev")  # only the previous checkpoint is complete
    (prev / "checkpoint").rename(prev / "checkpoint.prev")
    assert E.load_for_eval(prev).weights == prev / "checkpoint.prev" / "model.safetensors"
    (prev / "checkpoint.prev" / "state.pt").unlink()
    for ema in (False, True):
        with pytest.raises(FileNotFoundError) as e:
            E.load_for_eval(prev, ema=ema)
        assert _refusal(e, FileNotFoundError) == (f"{prev} holds no checkpoint (model.safetensors); give a run "
                                                  "folder that has written one, or a checkpoint file")


def test_the_head_is_refused_on_other_classes_than_it_was_trained_on(run, tmp_path):
    """A run trained on data.classes 0..9 in this order, evaluated on another order of the same 10
    classes: a head of the right size that predicts other classes."""
    ten = list(range(10))
    run_dir = _copy_run(run[0], tmp_path / "ordered", edit=lambda c: c["data"].update(classes=ten))
    other = ["data.classes=[1,0,2,3,4,5,6,7,8,9]"]
    with pytest.raises(BadInput) as e:
        E.load_for_eval(run_dir, other)
    assert _refusal(e) == (f"the model was trained on data.classes={ten} and its head predicts those, not "
                           "data.classes=[1, 0, 2, 3, 4, 5, 6, 7, 8, 9]; add --few-shot K or --probe to evaluate its "
                           "features on them")
    features = E.load_for_eval(run_dir, other, head=False)
    assert not features.trained_classes and not features.head_fits
    same = E.load_for_eval(run_dir)
    assert same.trained_classes and same.head_fits
    assert E.EvalSetup(same.model, same.cfg, same.weights, run_dir, "test", same.split, same.data, same.device,
                       "fp32").trained_classes  # the default: the classes the run trained on
