"""Config files in JSON, YAML and TOML: the same config from each, YAML's dotless floats, the
printed YAML reads back, and every malformed file is one sentence naming it."""
import json
import sys

import pytest

from mlplab.errors import BadInput
from mlplab.train import CONFIGS, make_config
from mlplab.train.config import to_dict
from mlplab.utils.configfile import format_config, read_config_file

YAML = """\
# the habit of timm / Lightning users
model:
  name: s_mixer
  kwargs: {patch_size: 4, hidden_dim: 8, depth: 2}
data:
  dataset: synthetic
  image_size: 8
optim:
  name: adamw
  lr: 1e-3          # PyYAML alone reads this as the string "1e-3"
  betas: [0.9, 0.95]
schedule:
  steps: 20
run:
  batch_size: 32
  ema_decay: null
"""

TOML = """\
# the habit of torchtitan users; TOML has no null: a key left out keeps its default
[model]
name = "s_mixer"
kwargs = { patch_size = 4, hidden_dim = 8, depth = 2 }

[data]
dataset = "synthetic"
image_size = 8

[optim]
name = "adamw"
lr = 1e-3
betas = [0.9, 0.95]

[schedule]
steps = 20

[run]
batch_size = 32
"""


def test_yaml_toml_and_json_files_give_the_same_config(tmp_path):
    (tmp_path / "a.yaml").write_text(YAML)
    (tmp_path / "a.toml").write_text(TOML)
    d = read_config_file(tmp_path / "a.yaml")
    assert d["optim"]["lr"] == 1e-3 and isinstance(d["optim"]["lr"], float)
    (tmp_path / "a.json").write_text(json.dumps(d))
    cfgs = [make_config(str(tmp_path / f"a.{ext}")) for ext in ("json", "yaml", "toml")]
    assert cfgs[0] == cfgs[1] == cfgs[2]
    assert cfgs[0].optim.lr == 1e-3 and cfgs[0].optim.betas == (0.9, 0.95) and cfgs[0].run.name == "a"
    (tmp_path / "b.yml").write_text(YAML)
    assert make_config(str(tmp_path / "b.yml"), ["optim.lr=0.5"]).optim.lr == 0.5


@pytest.mark.parametrize("text,value", [("1e-3", 1e-3), ("-2E+4", -2e4), ("1_000e-3", 1.0), ("12", 12),
                                        ("1.5e-3", 1.5e-3), ("'1e-3'", "1e-3"), ("1e", "1e")])
def test_yaml_numbers_read_as_json_would(tmp_path, text, value):
    (tmp_path / "n.yaml").write_text(f"optim:\n  lr: {text}\n")
    got = read_config_file(tmp_path / "n.yaml")["optim"]["lr"]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("name", sorted(n for n, c in CONFIGS.items() if "name" in c.get("model", {})))
def test_printed_yaml_reads_back_as_the_same_dict(tmp_path, name):
    d = to_dict(make_config(name))
    for fmt in ("json", "yaml"):
        path = tmp_path / f"c.{fmt}"
        path.write_text(format_config(d, fmt))
        assert read_config_file(path) == d


BAD = [
    ("a.yaml", "", r"config file '.*a\.yaml' is empty; it must hold the config's sections \(YAML\)"),
    ("a.yaml", "optim: [1, 2\n", r"config file '.*a\.yaml' is not valid YAML \(.* at line \d+\)"),
    ("a.yaml", "- 1\n- 2\n", r"config file '.*a\.yaml' holds a YAML list; it must hold one mapping of sections"),
    ("a.toml", "[optim\nlr = 1\n", r"config file '.*a\.toml' is not valid TOML \(.*line 1.*\)"),
    ("a.toml", "   \n", r"config file '.*a\.toml' is empty"),
    ("a.json", "{", r"config file '.*a\.json' is not valid JSON"),
]


@pytest.mark.parametrize("file,text,message", BAD)
def test_a_malformed_file_is_one_sentence_naming_it(tmp_path, file, text, message):
    (tmp_path / file).write_text(text)
    with pytest.raises(BadInput, match=message) as e:
        make_config(str(tmp_path / file))
    assert "\n" not in str(e.value)


def test_wrong_keys_and_types_in_yaml_are_the_usual_errors(tmp_path):
    (tmp_path / "k.yaml").write_text("optim:\n  lrr: 0.1\n")
    with pytest.raises(ValueError, match="unknown config key 'optim.lrr'; did you mean 'optim.lr'"):
        make_config(str(tmp_path / "k.yaml"))
    (tmp_path / "t.toml").write_text("[run]\nbatch_size = 'big'\n")
    with pytest.raises(ValueError, match="config key 'run.batch_size'"):
        make_config(str(tmp_path / "t.toml"))
    with pytest.raises(FileNotFoundError, match="config file '.*missing.yaml' does not exist"):
        make_config(str(tmp_path / "missing.yaml"))


def test_toml_on_python_3_10_without_tomli_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tomllib", None)  # import fails as on 3.10
    monkeypatch.setitem(sys.modules, "tomli", None)
    (tmp_path / "a.toml").write_text(TOML)
    with pytest.raises(BadInput, match=r"'.*a\.toml' is TOML, which needs Python 3\.11 or the tomli package "
                                       r"\(pip install tomli\); or give the config as JSON or YAML"):
        read_config_file(tmp_path / "a.toml")


def test_format_config_refuses_other_formats():
    with pytest.raises(BadInput, match="--format must be one of json, yaml, got 'toml'"):
        format_config({}, "toml")
