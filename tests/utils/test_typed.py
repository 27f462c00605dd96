"""``describe_fields``: the config schema as rows of key, type, default and meaning."""
from dataclasses import dataclass, field
from typing import Literal

from mlplab.utils.typed import describe_fields, type_name


@dataclass
class _Inner:
    # said above the field
    a: int = 3
    b: Literal["x", "y"] = "x"  # said beside the field
    c: float | None = None


@dataclass
class _Outer:
    inner: _Inner = field(default_factory=lambda: _Inner(a=5))
    name: str = "n"  # a name


def test_describe_fields_reads_types_defaults_and_comments():
    rows = {r["key"]: r for r in describe_fields(_Outer)}
    assert list(rows) == ["inner.a", "inner.b", "inner.c", "name"]
    assert rows["inner.a"] == {"key": "inner.a", "type": "int", "default": "5", "meaning": "said above the field"}
    assert rows["inner.b"]["type"] == "x|y" and rows["inner.b"]["meaning"] == "said beside the field"
    assert rows["inner.c"]["type"] == "float | None" and rows["inner.c"]["meaning"] == ""
    assert rows["name"]["default"] == "'n'"


def test_type_name():
    assert type_name(tuple[float, float]) == "tuple[float, float]"
    assert type_name(bool | Literal["auto"]) == "bool | auto"
