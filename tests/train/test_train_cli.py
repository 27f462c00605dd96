"""``mlplab train``: named configs and JSON files, overrides, --print-config, --resume/--overwrite."""
import json

import pytest
from train_helpers import tiny_overrides

from mlplab import cli
from mlplab.train import CONFIGS
from mlplab.train.config import from_dict, make_config, to_dict


def _args(tmp_path, **extra):
    return [f"{k}={json.dumps(v)}" for k, v in tiny_overrides(tmp_path / "runs", "cli", **extra).items()]


def test_print_config_resolves_named_config(capsys):
    assert cli.main(["train", "cifar10_s_mixer", "optim.lr=0.1", "--print-config"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["optim"]["lr"] == 0.1 and d["run"]["name"] == "cifar10_s_mixer,lr=0.1"


# the named configs that `mlplab train` runs; the others are fine-tuning recipes whose model comes
# from a checkpoint (`mlplab finetune`, tests/train/test_finetune.py)
TRAIN_PRESETS = sorted(n for n, c in CONFIGS.items() if "name" in c.get("model", {}))


def test_train_presets_are_all_but_the_fine_tuning_recipes():
    assert set(CONFIGS) - set(TRAIN_PRESETS) == {"fmnist_finetune", "fmnist_linear_probe", "in21k_finetune_cifar10",
                                                 "in21k_finetune_cifar100", "in21k_finetune_imagefolder"}


@pytest.mark.parametrize("name", TRAIN_PRESETS)
def test_print_config_file_round_trips_every_preset(tmp_path, capsys, name):
    """README: `mlplab train NAME --print-config > my.json`, then `mlplab train my.json` is the same
    run (same config, same run folder)."""
    from mlplab.data import DATASETS

    if CONFIGS[name]["data"]["dataset"] not in DATASETS:
        pytest.skip(f"data.dataset={CONFIGS[name]['data']['dataset']} comes with the data branch")
    assert cli.main(["train", name, "--print-config"]) == 0
    printed = capsys.readouterr().out
    path = tmp_path / "my.json"
    path.write_text(printed)
    assert cli.main(["train", str(path), "--print-config"]) == 0
    assert capsys.readouterr().out == printed
    assert make_config(str(path)) == make_config(name)


def test_overrides_may_follow_a_flag(capsys):
    # argparse's plain parse_args stops taking positionals at the first flag ("unrecognized arguments")
    assert cli.main(["train", "cifar10_s_mixer", "--print-config", "optim.lr=0.2", "run.seed=3"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["optim"]["lr"] == 0.2 and d["run"]["seed"] == 3
    args = cli.parse_args(["train", "--overwrite", "synthetic_tiny", "--resume", "optim.lr=1"])
    assert (args.command, args.config, args.overrides, args.overwrite, args.resume) == \
        ("train", "synthetic_tiny", ["optim.lr=1"], True, True)
    args = cli.parse_args(["convert", "a.npz", "--to", "timm", "b.pth", "num_classes=3"])
    assert (args.src, args.dst, args.to, args.overrides) == ("a.npz", "b.pth", "timm", ["num_classes=3"])


def test_list_and_errors(capsys):
    assert cli.main(["train", "--list"]) == 0
    assert "fmnist_s_mixer" in capsys.readouterr().out
    assert cli.main(["train", "cifar10_s_mixer", "optim.lrr=1"]) == 2
    assert "unknown config key 'optim.lrr'" in capsys.readouterr().err
    assert cli.main(["train", "cifar10_s_mixer", "run.batch_size=big"]) == 2
    assert "run.batch_size" in capsys.readouterr().err


def test_train_from_json_file_then_resume_and_overwrite(tmp_path, capsys):
    cfg_file = tmp_path / "c.json"
    cfg_file.write_text(json.dumps({"schedule": {"epochs": 1}}))
    args = ["train", str(cfg_file), *_args(tmp_path, **{"schedule.epochs": 1})]
    assert cli.main(args) == 0
    run_dir = tmp_path / "runs" / "cli"
    res = json.loads((run_dir / "results.json").read_text())
    assert res["epochs"] == 1
    assert cli.main(args) == 2  # a finished run is not overwritten ...
    assert "--resume" in capsys.readouterr().err
    assert cli.main([*args, "--resume"]) == 0  # ... resuming it is a no-op
    assert cli.main([*args, "--overwrite"]) == 0
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["run"]["name"] == "cli" and saved == to_dict(from_dict(saved))
