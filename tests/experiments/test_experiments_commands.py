"""The ``mlplab sweep`` / ``reproduce`` / ``report`` commands."""
import json

from mlplab.cli import main


def test_reproduce_list(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert "fig5" in out and "tableS3" in out and "smoke" in out and "paper" in out


def test_unknown_id_is_an_error(capsys):
    assert main(["reproduce", "fig99"]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'fig99'" in err and "fig2a-c" in err


def test_sweep_dry_run_of_an_experiment(capsys, tmp_path):
    assert main(["sweep", "fig6", "--scale", "paper", "--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "18 runs" in out and "S=504,C=16" in out
    assert not any(tmp_path.iterdir())


def test_sweep_file_and_report_commands(tmp_path, capsys):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"name": "echo", "task": "mlplab.experiments.tasks:echo_task",
                             "axes": [["value", [1, 2]]]}))
    assert main(["sweep", str(f), "--out", str(tmp_path / "out")]) == 0
    assert len(list((tmp_path / "out" / "echo").glob("*/results.json"))) == 2
    out = tmp_path / "s9"
    capsys.readouterr()
    assert main(["reproduce", "figS9", "--scale", "smoke", "--out", str(out)]) == 0
    assert "[1/1] run (~" in capsys.readouterr().out  # runs done / total and the cost model's time left
    assert (out / "report.md").exists()
    (out / "report.md").unlink()
    assert main(["report", "figS9", "--out", str(out)]) == 0
    assert "Verdict:" in (out / "report.md").read_text()
    assert main(["report", "fig6", "--out", str(out)]) == 2  # the folder holds another experiment


def test_sweep_dry_run_with_overrides(capsys, tmp_path):
    assert main(["sweep", "fig7", "--scale", "smoke", "--dry-run", "--set", "schedule.epochs=3",
                 "--out", str(tmp_path)]) == 0
    assert "4 runs" in capsys.readouterr().out
