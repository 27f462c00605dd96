"""``mlplab train``: named configs and JSON files, overrides, --print-config, --resume/--overwrite."""
import json

from mlplab import cli
from mlplab.train.config import from_dict, to_dict

from train_helpers import tiny_overrides


def _args(tmp_path, **extra):
    return [f"{k}={json.dumps(v)}" for k, v in tiny_overrides(tmp_path / "runs", "cli", **extra).items()]


def test_print_config_resolves_named_config(capsys):
    assert cli.main(["train", "cifar10_s_mixer", "optim.lr=0.1", "--print-config"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["optim"]["lr"] == 0.1 and d["run"]["name"] == "cifar10_s_mixer-lr0.1"


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
