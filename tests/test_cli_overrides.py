"""The researcher's override habits on the command line: ``--section.key=value`` and
``--section.key value`` beside ``section.key=value`` for every command that takes overrides,
``--print-config --format yaml``, and the same typed errors."""
import json

import pytest
import yaml

from mlplab import cli
from mlplab.cli import dotted_options


def test_dotted_options_become_the_commands_own_override_items():
    argv = ["cfg", "--optim.lr=0.1", "--overwrite", "--run.seed", "3", "data.root=x", "--data.classes", "[0,1]"]
    assert dotted_options(argv, "positional") == ["cfg", "--overwrite", "data.root=x", "optim.lr=0.1", "run.seed=3",
                                                  "data.classes=[0,1]"]
    assert dotted_options(argv, "--set") == ["cfg", "--overwrite", "data.root=x", "--set", "optim.lr=0.1", "--set",
                                             "run.seed=3", "--set", "data.classes=[0,1]"]
    # a negative value, an option without a dot, a value with a dot, and everything after `--`
    assert dotted_options(["--optim.lr", "-1e-3", "--out", "runs/a.b", "--", "--x.y=1"], "positional") == \
        ["--out", "runs/a.b", "--", "--x.y=1", "optim.lr=-1e-3"]
    assert dotted_options(["--optim.lr=0.1"], None) == ["--optim.lr=0.1"]  # a command without overrides


def test_every_command_with_overrides_takes_the_dotted_forms():
    a = cli.parse_args(["train", "--optim.lr=0.1", "cifar10_s_mixer", "--run.seed", "3", "run.name=x"])
    assert (a.config, a.overrides) == ("cifar10_s_mixer", ["run.name=x", "optim.lr=0.1", "run.seed=3"])
    a = cli.parse_args(["finetune", "runs/a", "fmnist_finetune", "--optim.head_lr", "0.01"])
    assert (a.checkpoint, a.config, a.overrides) == ("runs/a", "fmnist_finetune", ["optim.head_lr=0.01"])
    a = cli.parse_args(["eval", "runs/a", "--data.dataset", "cifar10", "--split", "test"])
    assert (a.checkpoint, a.overrides, a.split) == ("runs/a", ["data.dataset=cifar10"], "test")
    for command in ("reproduce", "sweep"):
        a = cli.parse_args([command, "fig6", "--schedule.epochs=2", "--set", "run.seed=1", "--optim.lr", "0.1"])
        assert a.overrides == ["run.seed=1", "schedule.epochs=2", "optim.lr=0.1"]
    a = cli.parse_args(["convert", "a.npz", "b.pth", "num_classes=3"])  # model overrides: no dotted keys
    assert a.overrides == ["num_classes=3"]


def test_all_forms_give_the_same_config(capsys):
    printed = []
    for form in (["optim.lr=0.2", "run.seed=3"], ["--optim.lr=0.2", "--run.seed=3"],
                 ["--optim.lr", "0.2", "--run.seed", "3"]):
        assert cli.main(["train", "cifar10_s_mixer", *form, "--print-config"]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] == printed[2]
    assert json.loads(printed[0])["optim"]["lr"] == 0.2


def test_print_config_as_yaml_trains_the_same_run(tmp_path, capsys):
    assert cli.main(["train", "cifar10_s_mixer", "--optim.lr", "0.2", "--print-config", "--format", "yaml"]) == 0
    text = capsys.readouterr().out
    assert yaml.safe_load(text)["optim"]["lr"] == 0.2 and "optim:\n  name: sgd\n" in text
    (tmp_path / "my.yaml").write_text(text)
    assert cli.main(["train", "cifar10_s_mixer", "optim.lr=0.2", "--print-config"]) == 0
    expected = capsys.readouterr().out
    assert cli.main(["train", str(tmp_path / "my.yaml"), "--print-config"]) == 0
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize("argv,message", [
    (["train", "cifar10_s_mixer", "--optim.lrr=1"], "error: unknown config key 'optim.lrr'; did you mean 'optim.lr'"),
    (["train", "cifar10_s_mixer", "--run.batch_size", "big"], "error: config key 'run.batch_size'"),
    (["train", "cifar10_s_mixer", "--optim.lr"],
     "error: --optim.lr needs a value: --optim.lr=VALUE or --optim.lr VALUE"),
    (["train", "cifar10_s_mixer", "--optim.lr", "--print-config"], "error: --optim.lr needs a value"),
    (["train", "cifar10_s_mixer", "--format", "yaml"], "error: --format yaml says how --print-config prints the "
                                                       "config; add --print-config"),
    (["train", "cifar10_s_mixer", "--print-config", "--format", "toml"], "argument --format: invalid choice: 'toml'"),
    (["eval", "{tmp}", "--optim.lr=0.1"], "error: mlplab eval takes data.* keys and"),
])
def test_the_same_one_sentence_errors(argv, message, capsys, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = None
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's own errors: usage, one sentence, exit 2
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
