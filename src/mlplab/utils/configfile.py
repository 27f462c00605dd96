"""Config files in the formats researchers bring: JSON, YAML (timm, Lightning) and TOML (torchtitan).

:func:`read_config_file` turns a file into a plain dict by its suffix (``.json``; ``.yaml``/``.yml``;
``.toml``; any other suffix is read as JSON) or raises one sentence naming the file and what is
wrong with it. :func:`format_config` prints a dict as JSON or YAML (``--print-config --format``).

Two YAML habits are made to mean what a user means: ``lr: 1e-3`` is the float 0.001 (PyYAML's
YAML 1.1 resolver reads a number without a dot as the string ``"1e-3"``), and the YAML written by
:func:`format_config` reads back as the same dict. TOML has no null: leave a key out to keep its
default. TOML needs Python 3.11 (``tomllib``) or the ``tomli`` package on 3.10.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import BadInput

__all__ = ["CONFIG_SUFFIXES", "read_config_file", "format_config", "FORMATS"]

CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".toml")
#: what ``format_config`` writes (TOML is read only: it cannot write the config's nulls)
FORMATS = ("json", "yaml")

# numbers with an exponent and no dot (1e-3, 5E4): floats in YAML 1.2 and JSON, strings to PyYAML
_DOTLESS_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")


def _yaml_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _DOTLESS_FLOAT, list("-+0123456789"))
    return Loader


def _parse_yaml(text: str, name: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInput(f"config file {name!r} is not valid YAML ({getattr(e, 'problem', None) or e}{where}); "
                       "it must hold one mapping of sections") from None


def _parse_toml(text: str, name: str) -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise BadInput(f"config file {name!r} is TOML, which needs Python 3.11 or the tomli package "
                           "(pip install tomli); or give the config as JSON or YAML") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"config file {name!r} is not valid TOML ({e}); it must hold one table per section") from None


def _parse_json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"config file {name!r} is not valid JSON ({e.msg} at line {e.lineno}); "
                       "it must hold one JSON object of sections") from None


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A config file as a dict of sections, or one sentence naming the file and what is wrong."""
    path = Path(path)
    name = str(path)
    if path.is_dir():
        raise BadInput(f"config {name!r} is a folder; give a JSON config file (or a YAML or TOML one) "
                       "or a named config")
    if not path.is_file():
        raise FileNotFoundError(f"config file {name!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"config file {name!r} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    suffix = path.suffix.lower()
    kind = {".yaml": "YAML", ".yml": "YAML", ".toml": "TOML"}.get(suffix, "JSON")
    if not text.strip():
        raise BadInput(f"config file {name!r} is empty; it must hold the config's sections ({kind})")
    parse = {"YAML": _parse_yaml, "TOML": _parse_toml, "JSON": _parse_json}[kind]
    d = parse(text, name)
    if not isinstance(d, dict):
        raise BadInput(f"config file {name!r} holds a {kind} {type(d).__name__}; it must hold one mapping of "
                       "sections (model, data, augment, optim, schedule, run)")
    return d


def format_config(d: dict[str, Any], fmt: str = "json") -> str:
    """``d`` as JSON (indented) or YAML (a block per section, lists inline): what
    :func:`read_config_file` reads back as ``d``."""
    if fmt == "json":
        return json.dumps(d, indent=2)
    if fmt == "yaml":
        import yaml

        class Dumper(yaml.SafeDumper):
            pass

        Dumper.add_representer(list, lambda dumper, v: dumper.represent_sequence("tag:yaml.org,2002:seq", v,
                                                                                    flow_style=True))
        return yaml.dump(d, Dumper=Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True).rstrip("\n")
    raise BadInput(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
