"""``mlplab eval``: a finished run's test accuracy reproduced exactly; checkpoint files; bad input."""
import json
from pathlib import Path

import pytest

from mlplab import cli, create_model
from mlplab.interop import save_pretrained
from mlplab.train import train
from mlplab.train.evaluation import evaluate_checkpoint


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run with an EMA, a random test subset, mirror-image test-time augmentation and a
    held-out val split, so that eval must follow the run's own config to reproduce its numbers."""
    from train_helpers import tiny_overrides

    from mlplab.train import make_config

    out = tmp_path_factory.mktemp("eval")
    cfg = make_config(None, tiny_overrides(out / "runs", "done", **{
        "run.ema_decay": 0.8, "data.subset": "random", "data.val_fraction": 0.1, "augment.test_hflip": True,
        "augment.hflip": True, "schedule.epochs": 2, "run.eval_every": 1}))
    return train(cfg)


def _eval_json(capsys, *argv):
    assert cli.main(["eval", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_reproduces_the_runs_test_accuracy_exactly(finished, capsys):
    run_dir = finished["run_dir"]
    got = _eval_json(capsys, run_dir)
    assert got["acc"] == finished["test_acc"] and got["loss"] == finished["test_loss"]
    assert got["top5"] == finished["test_top5"] and got["images"] == 128 and got["split"] == "test"
    ema = _eval_json(capsys, run_dir, "--ema")
    assert ema["acc"] == finished["test_acc_ema"] and ema["loss"] == finished["test_loss_ema"]
    assert ema["weights"].endswith("ema.safetensors")
    # the checkpoint folder and file of the run evaluate under the run's config too
    assert _eval_json(capsys, str(Path(run_dir) / "checkpoint"))["loss"] == finished["test_loss"]
    val = _eval_json(capsys, run_dir, "--split", "val")
    assert val["acc"] == finished["val_acc"] and val["split"] == "val"


def test_eval_prints_one_line_without_json(finished, capsys):
    assert cli.main(["eval", finished["run_dir"]]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "acc " in out[0] and "img/s" in out[0] and "synthetic test" in out[0]


def test_eval_of_a_checkpoint_file_resizes_the_data_to_the_model(tmp_path, capsys):
    model = create_model("bottleneck_mlp", image_size=8, width=16, depth=1)
    path = save_pretrained(model, tmp_path / "mlp.safetensors")
    got = _eval_json(capsys, str(path), "data.dataset=synthetic", "data.test_subset=64")
    assert got["image_size"] == 8 and got["images"] == 64 and 0.0 <= got["acc"] <= 1.0
    assert got["model"] == "bottleneck_mlp"
    same = evaluate_checkpoint(path, {"data.dataset": "synthetic", "data.test_subset": 64, "data.image_size": 8},
                               progress=False)
    assert same["loss"] == got["loss"]


def _refused(capsys, *argv):
    assert cli.main(["eval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_eval_bad_input_is_one_sentence_exit_2(tmp_path, finished, capsys):
    assert "does not exist" in _refused(capsys, str(tmp_path / "missing"))
    five = save_pretrained(create_model("bottleneck_mlp", image_size=8, width=16, depth=1, num_classes=5),
                           tmp_path / "five.safetensors")
    assert "has 5 classes but synthetic has 10" in _refused(capsys, str(five), "data.dataset=synthetic")
    assert "data.dataset=NAME" in _refused(capsys, str(five))
    assert "unknown dataset 'nosuchdata'" in _refused(capsys, str(five), "data.dataset=nosuchdata")
    assert "takes 8x8 images" in _refused(capsys, str(five), "data.dataset=synthetic", "data.image_size=16")
    assert "not optim.lr" in _refused(capsys, finished["run_dir"], "optim.lr=0.1")
    plain = save_pretrained(create_model("bottleneck_mlp", image_size=8, width=16, depth=1),
                            tmp_path / "plain.safetensors")
    assert "--ema reads" in _refused(capsys, str(plain), "data.dataset=synthetic", "--ema")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "weight files" in _refused(capsys, str(empty), "data.dataset=synthetic")


def test_eval_refuses_ema_of_a_run_without_one(tiny, capsys):
    res = train(tiny("noema", **{"schedule.epochs": 1}))
    assert "no ema.safetensors" in _refused(capsys, res["run_dir"], "--ema")
    assert "holds out none" in _refused(capsys, res["run_dir"], "--split", "val")


def test_eval_few_shot_equals_the_library_on_the_same_features(finished, capsys):
    """``--few-shot`` is analysis.fewshot on the run's frozen pre-logit features: training split
    for the shots, the evaluated split for the accuracy."""
    from mlplab.analysis.fewshot import extract_features, linear_few_shot
    from mlplab.train.config import eval_batch_size
    from mlplab.train.data import eval_loader
    from mlplab.train.distributed import DistInfo
    from mlplab.train.evaluation import load_for_eval

    got = _eval_json(capsys, finished["run_dir"], "--few-shot", "1,5", "--draws", "3")["few_shot"]
    setup = load_for_eval(finished["run_dir"])
    batch = eval_batch_size(setup.cfg.run)
    train_f = extract_features(setup.model, eval_loader(setup.data.train, setup.data, batch, DistInfo()),
                               autocast=setup.autocast)
    test_f = extract_features(setup.model, eval_loader(setup.split, setup.data, batch, DistInfo()),
                              autocast=setup.autocast)
    want = linear_few_shot(*train_f, *test_f, shots=(1, 5), draws=3)
    assert set(got) == {"1", "5"}
    for k in (1, 5):
        assert got[str(k)]["accuracies"] == list(want[k].accuracies) and got[str(k)]["mean"] == want[k].mean
    assert cli.main(["eval", finished["run_dir"]]) == 0 and "shot" not in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["0", "1,x", ""])
def test_eval_few_shot_bad_counts_are_one_sentence(finished, capsys, bad):
    assert cli.main(["eval", finished["run_dir"], "--few-shot", bad]) == 2
    err = capsys.readouterr().err
    assert "--few-shot takes" in err and "Traceback" not in err


def test_eval_few_shot_on_data_with_other_classes_uses_the_features_only(tmp_path, capsys):
    """Transfer: a 5-class model's frozen features on the 10-class synthetic set; the head's
    metrics would be meaningless there, so only the few-shot accuracy is reported."""
    five = save_pretrained(create_model("bottleneck_mlp", image_size=8, width=16, depth=1, num_classes=5),
                           tmp_path / "five.safetensors")
    got = _eval_json(capsys, str(five), "data.dataset=synthetic", "data.test_subset=40", "--few-shot", "1,2",
                     "--draws", "2")
    assert "acc" not in got and got["images"] == 40 and set(got["few_shot"]) == {"1", "2"}
    assert all(0.0 <= r["mean"] <= 1.0 for r in got["few_shot"].values())
    assert "has 5 classes but synthetic has 10" in _refused(capsys, str(five), "data.dataset=synthetic")


@pytest.fixture(scope="module")
def first_half(tmp_path_factory):
    """A run trained on the first 5 of the synthetic set's 10 classes (data.classes)."""
    from train_helpers import tiny_overrides

    from mlplab.train import make_config

    out = tmp_path_factory.mktemp("classes")
    return train(make_config(None, tiny_overrides(out / "runs", "c04", **{"data.classes": [0, 1, 2, 3, 4],
                                                                          "schedule.epochs": 1})))


def test_eval_probe_and_few_shot_on_classes_the_run_never_saw(first_half, capsys):
    """A model trained on classes 0-4 evaluated on 5-9: its 5-way head would fit in size but
    predicts other classes, so only the linear accuracies are reported, and they are the
    library's on the relabelled classes' features."""
    from mlplab.analysis.fewshot import extract_features, linear_probe
    from mlplab.train.config import eval_batch_size
    from mlplab.train.data import eval_loader
    from mlplab.train.distributed import DistInfo
    from mlplab.train.evaluation import load_for_eval

    other = ["data.classes=[5,6,7,8,9]", "data.train_subset=null"]
    got = _eval_json(capsys, first_half["run_dir"], *other, "--probe", "--few-shot", "2", "--draws", "2")
    assert "acc" not in got and set(got["few_shot"]) == {"2"} and 0.0 <= got["probe"]["acc"] <= 1.0
    setup = load_for_eval(first_half["run_dir"], other, head=False)
    assert not setup.head_fits and set(setup.data.train.labels.tolist()) == {0, 1, 2, 3, 4}
    batch = eval_batch_size(setup.cfg.run)
    feats = [extract_features(setup.model, eval_loader(s, setup.data, batch, DistInfo()), autocast=setup.autocast)
             for s in (setup.data.train, setup.split)]
    assert got["probe"]["acc"] == linear_probe(*feats[0], *feats[1]).acc
    assert got["train_examples"] == len(feats[0][1]) and got["features"] == feats[0][0].shape[1]
    # the head alone on other classes of the same dataset is refused in one sentence
    assert "add --few-shot K or --probe" in _refused(capsys, first_half["run_dir"], "data.classes=[5,6,7,8,9]")
    # on its own classes the head is evaluated as usual
    assert _eval_json(capsys, first_half["run_dir"])["acc"] == first_half["test_acc"]
