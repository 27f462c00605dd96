"""The Scaling-MLPs presets at scale: ImageNet-21k pre-training of B-6/B-12 x Wi-256/512/1024 at
64x64 and fine-tuning on CIFAR-10/100 and image folders; sizes against the published counts, and
2-step smoke runs (data.dataset=synthetic stands in for the pack)."""
import pytest
import torch

from mlplab import create_model
from mlplab.commands.finetune import finetune_config
from mlplab.interop import save_pretrained
from mlplab.models.counting import count_flops, count_params
from mlplab.models.mlp import SCALING_MLP_CLASSES, SCALING_MLP_PRESETS
from mlplab.train import make_config, train
from mlplab.train.presets import _MFLOP, SCALING_PRETRAIN
from mlplab.train.runplan import plan_run


def _smoke(tmp_path, name="smoke"):
    """Overrides that keep a preset's recipe but run 2 steps of a 16-image batch on synthetic data."""
    return {"data.dataset": "synthetic", "data.train_subset": 64, "data.test_subset": 32, "schedule.epochs": None,
            "schedule.steps": 2, "run.batch_size": 16, "run.eval_batch_size": 32, "run.device": "cpu",
            "run.log": "none", "run.threads": 1, "run.out_dir": str(tmp_path), "run.name": name}


@pytest.mark.parametrize("size", sorted(SCALING_PRETRAIN))
def test_pretraining_presets_are_the_published_recipe_and_sizes(size):
    name = f"in21k_{size}"
    cfg = make_config(name)
    assert (cfg.optim.name, cfg.optim.lr, cfg.optim.weight_decay) == ("lion", 1e-5, 1e-3)
    assert (cfg.augment.mixup, cfg.augment.label_smoothing, cfg.augment.hflip) == (0.8, 0.3, True)
    assert cfg.run.batch_size == 16384 and cfg.run.batch_size % cfg.run.accumulate_steps == 0
    assert (cfg.data.dataset, cfg.data.image_size) == ("packed", 64)
    assert cfg.schedule.epochs == SCALING_PRETRAIN[size][1]
    with torch.device("meta"):  # the preset's model on its data: 64x64x3, the paper's 11,230 classes
        model = create_model(cfg.model.name, image_size=64, in_chans=3, num_classes=SCALING_MLP_CLASSES)
    published = SCALING_MLP_PRESETS[cfg.model.name][2]
    assert count_params(model) // 10**6 == published  # docs/science.md §7: 9, 12, 24, 37, 74, 124 M
    assert count_flops(model, (3, 64, 64)) / 1e6 == pytest.approx(_MFLOP[size], abs=0.05)  # the Time lines
    from mlplab.train.presets import DESCRIPTIONS
    assert all(f"{k}:" in DESCRIPTIONS[name] for k in ("Run", "Expect", "Time"))
    plan_run(make_config(name, {"data.dataset": "synthetic"}), here=False)  # model vs data, meta build


@pytest.mark.slow
@pytest.mark.parametrize("size", ["b6_wi256", "b12_wi256"])
def test_pretraining_presets_run_two_accumulated_steps(tmp_path, size):
    res = train(make_config(f"in21k_{size}", _smoke(tmp_path, size)))
    assert res["steps"] == 2 and res["params"] > 5e6
    assert make_config(f"in21k_{size}").run.accumulate_steps == 4  # the smoke run kept the accumulation


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_finetune_presets_run_from_a_64px_checkpoint(tmp_path, dataset):
    ckpt = save_pretrained(create_model("bottleneck_mlp", image_size=64, width=32, depth=2, num_classes=7),
                           tmp_path / "pre.safetensors")
    cfg = finetune_config(str(ckpt), f"in21k_finetune_{dataset}", _smoke(tmp_path, dataset))
    assert (cfg.optim.name, cfg.optim.lr, cfg.optim.head_lr, cfg.schedule.epochs) == ("sgd", 1e-3, 1e-2, None)
    assert make_config(f"in21k_finetune_{dataset}").schedule.epochs == 50
    res = train(cfg)
    assert res["steps"] == 2 and res["history"][-1]["train_loss"] > 0


def _image_folder(root, classes=3, per_class=6, size=(40, 48)):
    """``root/{train,val}/class<c>/<i>.png``: small RGB images of another size than the models'."""
    import numpy as np

    from mlplab.data.formats import png_bytes

    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", 2)):
        for c in range(classes):
            d = root / split / f"class{c}"
            d.mkdir(parents=True)
            for i in range(n):
                (d / f"{i}.png").write_bytes(png_bytes(rng.integers(0, 256, (3, *size), dtype=np.uint8)))
    return root


@pytest.mark.slow
def test_pretraining_preset_on_a_pack_then_eval_reproduces_it(tmp_path, capsys):
    """The IN-21k preset as it is meant to run (data.dataset=packed data.root=DST, its own
    RandomResizedCrop, mixup and accumulation), 2 steps on a 64x64 pack of a generated folder; then
    `mlplab eval RUN` reproduces its test accuracy and loss."""
    import json

    from mlplab import cli
    from mlplab.data import pack

    pack(_image_folder(tmp_path / "folder"), tmp_path / "pack", 64, workers=1, progress="none")
    ov = {**_smoke(tmp_path, "packed"), "data.root": str(tmp_path / "pack"), "run.batch_size": 8}
    del ov["data.dataset"], ov["data.train_subset"], ov["data.test_subset"]
    cfg = make_config("in21k_b6_wi256", ov)
    assert cfg.data.dataset == "packed" and cfg.augment.random_resized_crop and cfg.run.accumulate_steps == 4
    res = train(cfg)
    assert res["steps"] == 2 and res["train_examples"] == 18
    assert cli.main(["eval", res["run_dir"], "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["acc"], got["loss"], got["images"]) == (res["test_acc"], res["test_loss"], 6)


def test_finetune_imagefolder_preset_runs_on_a_folder(tmp_path):
    ckpt = save_pretrained(create_model("bottleneck_mlp", image_size=64, width=32, depth=2, num_classes=7),
                           tmp_path / "pre.safetensors")
    ov = {**_smoke(tmp_path, "folder"), "data.root": str(_image_folder(tmp_path / "images"))}
    del ov["data.dataset"], ov["data.train_subset"], ov["data.test_subset"]
    cfg = finetune_config(str(ckpt), "in21k_finetune_imagefolder", ov)
    assert cfg.data.dataset == "imagefolder" and cfg.augment.rrc_scale == (0.4, 1.0)
    res = train(cfg)  # 3 classes from the folder: a new head; images resized to the model's 64x64
    assert res["steps"] == 2 and res["train_examples"] == 18
