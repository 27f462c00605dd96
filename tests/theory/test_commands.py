"""`mlplab plan` and `mlplab demo` through the CLI entry point."""
import json
import time

import pytest

import mlplab
from mlplab import cli


def test_plan_table_reproduces_paper_pairs(capsys):
    assert cli.main(["plan", "--omega", "2^18", "--channels", "16,32,48", "--symmetric"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("budget Ω = 2^18 = 262144")
    pairs = [tuple(int(t) for t in l.split()[1:3]) for l in lines[3:9]]
    assert pairs == [(16, 173), (32, 113), (48, 83), (83, 48), (113, 32), (173, 16)]
    assert lines[-1].startswith("optimum: C* = S* = (Ω/γ)^(1/3) = 64.00")


def test_plan_json_equals_library(capsys):
    from mlplab.theory import plan_budget

    assert cli.main(["plan", "--omega", "524288", "--gamma", "2", "--family", "mlp_mixer",
                     "--tokens", "4,8,64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == json.loads(plan_budget(2**19, gamma=2, family="mlp_mixer", tokens=[4, 8, 64]).to_json())
    assert [(r["tokens"], r["channels"]) for r in data["rows"]] == [(4, 360), (8, 252), (64, 64)]


def test_plan_sw_mlp(capsys):
    assert cli.main(["plan", "--omega", "2^18", "--family", "sw_mlp", "--density", "0.9,0.7,0.5,0.3,0.1",
                     "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["width"] for r in data["rows"]] == [540, 612, 724, 935, 1619]
    assert data["optimum"] is None


@pytest.mark.parametrize(
    "argv, match",
    [
        (["plan", "--omega", "100", "--channels", "64"], "raise Ω to at least 2080"),
        (["plan", "--omega", "2^18", "--family", "sw_mlp", "--density", "1.5"], r"\(0, 1\]"),
        (["plan", "--omega", "2^18", "--gamma", "0"], "gamma"),
    ],
)
def test_plan_errors_are_messages(argv, match, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mlplab plan: error:")
    import re
    assert re.search(match, err)


@pytest.mark.parametrize("argv", [["plan", "--omega", "2^x"], ["plan", "--omega", "0"],
                                  ["plan", "--omega", "2^18", "--channels", "a,b"],
                                  ["plan", "--omega", "2^18", "--channels", "16", "--tokens", "16"]])
def test_plan_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_demo_small(capsys):
    assert cli.main(["demo", "--omega", "2^12", "--channels", "4,16", "--depth", "1", "--image-size", "16",
                     "--summary"]) == 0
    out = capsys.readouterr().out
    assert "effective wide MLP of s_mixer" in out
    table = out.split("Mixer vs its effective wide MLP")[1]
    rows = [l.split() for l in table.splitlines() if l.startswith(("s_mixer ", "rp_s_mixer "))]
    assert [(r[0], r[1], r[2]) for r in rows] == [("s_mixer", "43", "4"), ("rp_s_mixer", "43", "4"),
                                                  ("s_mixer", "16", "16"), ("rp_s_mixer", "16", "16")]
    for r in rows:
        assert float(r[6]) <= 1e-10
    assert "-> equal" in out
    sw = [l.split() for l in table.splitlines() if l.startswith("sw_mlp ")]
    if "sw_mlp" in mlplab.list_models():  # an SW-MLP of the same width and budget per pair
        assert [r[3] for r in sw] == ["172", "256"] and all(r[5].startswith("p=") for r in sw)
    else:
        assert not sw


@pytest.mark.slow
def test_demo_default_is_fast(capsys):
    t0 = time.process_time()  # CPU time: the test machine is shared
    assert cli.main(["demo"]) == 0
    assert time.process_time() - t0 < 20
    out = capsys.readouterr().out
    assert " 173  16   2768" in out and "-> equal" in out
