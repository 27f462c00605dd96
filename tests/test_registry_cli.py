"""The registry's strictness and the CLI's dispatch (model-specific tests live in tests/models)."""
import pytest

import mlplab
from mlplab import cli
from mlplab.models.registry import model_config


def test_unknown_model_lists_valid_names():
    with pytest.raises(ValueError, match="registered models are: .*s_mixer"):
        mlplab.create_model("no_such_mixer")


def test_unknown_override_lists_valid_overrides():
    with pytest.raises(ValueError, match="valid overrides are: .*num_tokens"):
        mlplab.create_model("s_mixer", num_token=3)


def test_wrong_type_names_the_field():
    with pytest.raises(TypeError, match="hidden_dim"):
        mlplab.create_model("s_mixer", hidden_dim="64")
    with pytest.raises(TypeError, match="rp_blocks"):
        mlplab.create_model("rp_s_mixer", rp_blocks="some")


def test_int_accepted_for_float_and_list_for_tuple():
    cfg = model_config("mlp_mixer", expansion=2, rp_blocks=[0, 1])
    assert isinstance(cfg.expansion, float) and cfg.rp_blocks == (0, 1)


def test_cli_without_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_cli_every_listed_command_exists():
    # every subcommand in the table has a module with the two entry points
    import importlib

    for name, (mod, _) in cli.COMMANDS.items():
        m = importlib.import_module(mod)
        assert callable(m.add_arguments) and callable(m.run), name


def test_top_level_entry_points(tmp_path):
    # the Python functions mirror the CLI subcommands
    for name in ("effective_mlp", "plan_budget", "models_table", "load_dataset", "make_config",
                 "reproduce", "run_sweep", "write_report"):
        assert callable(getattr(mlplab, name)), name
    cfg = mlplab.make_config("synthetic_tiny", {"run.out_dir": str(tmp_path), "run.log": "none",
                                                "schedule.epochs": None, "schedule.steps": 2})
    res = mlplab.train(cfg)  # the package is callable
    assert res["steps"] == 2
    assert (tmp_path / res["run_dir"] / "results.json").exists()
    with pytest.raises(AttributeError):
        mlplab.no_such_function
