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
    from mlplab.train import make_config
    from train_helpers import tiny_overrides

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
