"""The command a person explores: --version, python -m mlplab, the top-level help, train's key
list and ``mlplab info``."""
import json
import subprocess
import sys

import pytest

from mlplab import __version__, cli


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"mlplab {__version__} (torch ")


def test_python_dash_m_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "mlplab", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith(f"mlplab {__version__}")


def test_top_level_help_says_what_mlplab_is_and_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert cli.DESCRIPTION in " ".join(out.split())
    for name, (_, help_) in cli.COMMANDS.items():
        assert name in out
        assert help_[0].islower() and not help_.endswith(".")  # one line, not a docstring cut off
    assert "--list-keys" in out and "mlplab info" in out


def test_train_help_shows_how_to_list_configs_and_keys(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--list " in out and "--list-keys" in out


def test_train_list_keys_covers_every_config_key(capsys):
    from mlplab.train.config import RunConfig, flatten, to_dict

    assert cli.main(["train", "--list-keys"]) == 0
    lines = capsys.readouterr().out.splitlines()
    keys = [line.split()[0] for line in lines]
    assert set(keys) == set(flatten(to_dict(RunConfig()))) | {"model.kwargs"}  # an empty dict flattens to nothing
    row = next(line for line in lines if line.startswith("optim.lr "))
    assert "float" in row and "0.02" in row and "peak lr" in row


def test_info_json_reports_the_machine(capsys, monkeypatch):
    from mlplab.train import machine

    assert cli.main(["info", "--json", "--no-compile-check"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["mlplab"] == __version__ and info["torch"]
    assert isinstance(info["cpu"]["native_bf16"], bool) and info["threads"] >= 1
    assert info["compile"] is None
    assert set(info["fused_kernels"]) == {"available", "reason", "library"}
    assert isinstance(info["cuda"], list)
    assert "fashion_mnist" in info["datasets"]
    assert isinstance(info["cached_weights"], list)
    # the text form names every part, and a kernel that is off says why
    monkeypatch.setattr(machine.fused, "status", lambda: {"available": False, "reason": "no C compiler found",
                                                          "library": None})
    monkeypatch.setattr(machine, "check_compile", lambda timeout: {"works": False, "seconds": 1.5,
                                                                   "reason": "InductorError: boom"})
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for word in ("torch", "CPU", "bf16", "threads", "torch.compile", "fused kernels", "CUDA", "data cache"):
        assert word in out
    assert "off: no C compiler found" in out and "does not work: InductorError: boom (after 1.5 s)" in out


def test_info_bad_timeout_is_one_sentence(capsys):
    assert cli.main(["info", "--timeout", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--timeout" in err


def test_resume_of_a_finished_run_says_so(tmp_path, capsys):
    args = ["train", "synthetic_tiny", f"run.out_dir={tmp_path}", "run.name=done", "run.log=lines",
            "schedule.epochs=null", "schedule.steps=2"]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args + ["--resume"]) == 0
    out, err = capsys.readouterr()
    assert "finished before" in out and "nothing to do" in out and out.count("\n") == 1 and err == ""


def test_models_lists_published_weights_and_filters_by_pattern(capsys):
    assert cli.main(["models", "--pretrained", "*l16*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["mixer_l16_224.goog_in21k", "mixer_l16_224.goog_in21k_ft_in1k"]
    assert "hf-hub:timm/mixer_l16_224.goog_in21k " in lines[0] and "21843 classes" in lines[0]
    assert cli.main(["models", "--json", "s_mix*"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["s_mixer"]
