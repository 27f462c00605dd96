"""Sweeps are data (big_vision): a base, axes of ``("key", [values])`` lists combined as a
product or a zip, seeds, and *derived* keys computed from each point (e.g. every (S, C) pair that
the budget planner gives for an Ω). ``expand`` turns a :class:`Sweep` into a list of
:class:`RunSpec`, each with a folder name derived from the overrides that vary
(``mlplab.train.config.run_name``, the one naming scheme); ``run_sweep`` executes them, one folder per run, resumable.

Override keys are dotted paths of the run config (``"optim.lr"``, ``"model.kwargs.hidden_dim"``),
passed as they are to ``mlplab.train.make_config``; a ``"model.kwargs": {...}`` dict is flattened
into such keys, so axes can vary single model hyperparameters. Keys starting with ``meta.`` label
a run for the analysis (Ω, family, S, C, ...) and are not passed to the trainer.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..errors import BadInput, BadType
from ..train.config import run_name
from ..utils.io import read_json

__all__ = [
    "Axis", "product", "zip_axes", "Sweep", "RunSpec", "expand", "name_keys", "run_name",
    "flatten_overrides", "nest_overrides", "run_dir_overrides", "DICT_KEYS", "sweep_from_dict", "load_sweep_file",
    "seed_groups",
]

# Override keys whose value is a dict in the run config; ``key.sub`` entries fold into ``key``.
DICT_KEYS: tuple[str, ...] = ("model.kwargs",)


@dataclass(frozen=True)
class Axis:
    """A group of ``("key", [values])`` lists, combined as a product or a zip (equal lengths)."""

    mode: str  # "product" | "zip"
    lists: tuple[tuple[str, tuple[Any, ...]], ...]

    def points(self) -> list[dict[str, Any]]:
        keys = [k for k, _ in self.lists]
        vals = [v for _, v in self.lists]
        if self.mode == "product":
            combos: Iterable = itertools.product(*vals)
        elif self.mode == "zip":
            lengths = {len(v) for v in vals}
            if len(lengths) > 1:
                raise ValueError(f"zip axes need equal lengths, got { {k: len(v) for k, v in self.lists} }")
            combos = zip(*vals)
        else:
            raise ValueError(f"axis mode must be 'product' or 'zip', got {self.mode!r}")
        return [dict(zip(keys, c)) for c in combos]


def _lists(pairs: Sequence[tuple[str, Sequence[Any]]]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    out = []
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
            raise BadType(f"an axis is a ('key', [values]) pair, got {pair!r}")
        k, v = pair
        if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
            raise BadType(f"axis {k!r}: values must be a list, got {v!r}")
        out.append((k, tuple(v)))
    return tuple(out)


def product(*pairs: tuple[str, Sequence[Any]]) -> Axis:
    """Every combination of the lists: ``product(("a", [1, 2]), ("b", [3, 4]))`` → 4 points."""
    return Axis("product", _lists(pairs))


def zip_axes(*pairs: tuple[str, Sequence[Any]]) -> Axis:
    """Lists walked together: ``zip_axes(("S", [16, 32]), ("C", [173, 113]))`` → 2 points."""
    return Axis("zip", _lists(pairs))


# A derived entry maps a point to extra overrides (dict) or to several alternatives (list of
# dicts, each becoming its own run: a fan-out such as "every (S, C) pair of this budget").
Derived = Callable[[dict[str, Any]], "dict[str, Any] | list[dict[str, Any]]"]


@dataclass
class Sweep:
    """A set of runs described as data.

    name: the sweep's folder under the output directory.
    base: overrides shared by every run (dotted keys), or a config name understood by
        ``mlplab.train.make_config``; with ``base_overrides`` for a named base.
    axes: a list of :class:`Axis` (or bare ``("key", [values])`` pairs = one-list products);
        the groups are combined as a product.
    seeds: one run per seed for every point; the seed goes into each key of ``seed_keys``.
    derived: callables applied in order to each point (after axes and seed).
    task: ``"train"`` (``mlplab.train.train``) or ``"module:function"`` taking
        ``(overrides, run_dir)`` and returning a results dict (analysis-only runs).
    name_keys: keys that name the folder; default: every key whose value varies.
    """

    name: str
    base: dict[str, Any] | str = field(default_factory=dict)
    axes: list[Axis | tuple[str, Sequence[Any]]] = field(default_factory=list)
    seeds: Sequence[int] = (0,)
    derived: list[Derived] = field(default_factory=list)
    seed_keys: tuple[str, ...] = ("run.seed",)
    task: str = "train"
    base_overrides: dict[str, Any] = field(default_factory=dict)
    name_keys: Sequence[str] | None = None
    description: str = ""
    est_epoch_s: float = 0.0  # estimated seconds per run per epoch (for ``reproduce --list``)
    epochs: float = 1.0  # epochs per run (1 for analysis-only tasks), for the cost estimate

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9._=+-]+", self.name):
            raise ValueError(f"sweep name {self.name!r}: use letters, digits and ._=+- only")
        if len(list(self.seeds)) == 0:
            raise ValueError(f"sweep {self.name!r}: seeds must not be empty")

    def base_dict(self) -> dict[str, Any]:
        base = {} if isinstance(self.base, str) else self.base
        return flatten_overrides({**base, **self.base_overrides})

    def base_name(self) -> str | None:
        return self.base if isinstance(self.base, str) else None


@dataclass(frozen=True)
class RunSpec:
    """One run: its folder name, the full flat overrides, and what executes it."""

    name: str
    overrides: dict[str, Any]
    sweep: str = ""
    task: str = "train"
    base: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sweep": self.sweep, "task": self.task, "base": self.base,
                "overrides": self.overrides}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RunSpec":
        return cls(d["name"], dict(d["overrides"]), d.get("sweep", ""), d.get("task", "train"), d.get("base"))


def flatten_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """``{"model.kwargs": {"a": 1}}`` → ``{"model.kwargs.a": 1}`` (only for :data:`DICT_KEYS`)."""
    out: dict[str, Any] = {}
    for k, v in overrides.items():
        if k in DICT_KEYS and isinstance(v, dict):
            for kk, vv in v.items():
                out[f"{k}.{kk}"] = vv
        else:
            out[k] = v
    return out


def nest_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`flatten_overrides`: fold ``model.kwargs.x`` into ``"model.kwargs"``."""
    out: dict[str, Any] = {}
    for k, v in overrides.items():
        for dk in DICT_KEYS:
            if k.startswith(dk + "."):
                out.setdefault(dk, {})[k[len(dk) + 1:]] = v
                break
        else:
            out[k] = v
    return out


def run_dir_overrides(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run-config keys that put a run's files in ``run_dir`` (``run.out_dir/run.name``)."""
    run_dir = Path(run_dir)
    return {"run.out_dir": str(run_dir.parent), "run.name": run_dir.name}


def _json_eq_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def _name_keys(sweep: Sweep, rows: list[dict[str, Any]]) -> list[str]:
    """The keys that name a sweep's runs: ``sweep.name_keys``, else every key whose value varies
    (seeds last, so the runs of one point sort together)."""
    if sweep.name_keys is not None:
        return [k for k in sweep.name_keys if any(k in r for r in rows)]
    all_keys: list[str] = []
    for r in rows:
        for k in r:
            if k not in all_keys:
                all_keys.append(k)
    keys = [k for k in all_keys if len({_json_eq_key(r.get(k)) for r in rows}) > 1]
    return [k for k in keys if k not in sweep.seed_keys] + [k for k in sweep.seed_keys if k in keys]


def expand(sweep: Sweep) -> list[RunSpec]:
    """All runs of a sweep: product of the axis groups × seeds, then the derived keys.

    Folder names use the keys whose value differs between runs (or ``sweep.name_keys``);
    should two runs still collide, a hash of their overrides is appended.
    """
    rows = _rows(sweep)
    if not rows:
        return []
    keys = _name_keys(sweep, rows)
    names = [run_name({k: r.get(k) for k in keys}, keys) for r in rows]
    counts = Counter(names)
    specs = []
    for n, r in zip(names, rows):
        if counts[n] > 1:
            n = f"{n}~{hashlib.sha1(_json_eq_key(r).encode()).hexdigest()[:8]}"
        specs.append(RunSpec(n, r, sweep.name, sweep.task, sweep.base_name()))
    seen = set()
    out = []
    for s in specs:  # identical runs (same overrides) are one run
        if s.name in seen:
            continue
        seen.add(s.name)
        out.append(s)
    return out


def name_keys(sweep: Sweep) -> list[str]:
    """The keys that name the runs of ``sweep`` (as :func:`expand` names them)."""
    return _name_keys(sweep, _rows(sweep))


def _rows(sweep: Sweep) -> list[dict[str, Any]]:
    """Every run's overrides: the product of the axis groups × seeds, then the derived keys."""
    base = sweep.base_dict()
    groups: list[list[dict[str, Any]]] = []
    for ax in sweep.axes:
        if isinstance(ax, tuple):
            ax = product(ax)
        if not isinstance(ax, Axis):
            raise BadType(f"sweep {sweep.name!r}: axes must be Axis or ('key', [values]), got {ax!r}")
        groups.append(ax.points())
    points: list[dict[str, Any]] = []
    for combo in itertools.product(*groups):
        p: dict[str, Any] = {}
        for d in combo:
            p.update(d)
        points.append(p)
    rows: list[dict[str, Any]] = []
    for p in points:
        for seed in sweep.seeds:
            o = dict(base)
            o.update(flatten_overrides(p))
            for sk in sweep.seed_keys:
                o[sk] = seed
            alts = [o]
            for fn in sweep.derived:
                nxt = []
                for a in alts:
                    extra = fn(dict(a))
                    for e in (extra if isinstance(extra, list) else [extra]):
                        b = dict(a)
                        b.update(flatten_overrides(e or {}))
                        nxt.append(b)
                alts = nxt
            rows.extend(alts)
    return rows


def seed_groups(specs: Sequence[RunSpec]) -> list[list[RunSpec]]:
    """The runs of each sweep point: runs of one sweep and task whose overrides differ only in
    their seed (``mlplab.train.lockstep.SEED_KEYS``: ``run.seed`` and the model's ``seed``), in
    the order their first run appears. What trains in lockstep (``executors``), and what the cost
    estimate counts as one job."""
    from ..train.lockstep import SEED_KEYS

    groups: dict[str, list[RunSpec]] = {}
    for s in specs:
        point = {k: v for k, v in s.overrides.items() if k not in SEED_KEYS}
        groups.setdefault(_json_eq_key([s.sweep, s.task, s.base, point]), []).append(s)
    return list(groups.values())


def sweep_from_dict(d: dict[str, Any]) -> Sweep:
    """A sweep from JSON data::

        {"name": "lr", "base": {"model.name": "s_mixer"}, "seeds": [0, 1],
         "axes": [{"product": [["optim.lr", [0.01, 0.1]]]}, {"zip": [["a", [1, 2]], ["b", [3, 4]]]},
                  ["run.batch_size", [64, 128]]],
         "task": "train"}
    """
    if not isinstance(d, dict) or "name" not in d:
        raise ValueError("a sweep file needs an object with at least a 'name'")
    known = {"name", "base", "base_overrides", "axes", "seeds", "seed_keys", "task", "name_keys", "description",
             "est_epoch_s", "epochs"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown sweep field(s) {unknown}; valid fields: {', '.join(sorted(known))}")
    axes: list[Axis | tuple[str, Sequence[Any]]] = []
    if not isinstance(d.get("axes", []), list):
        raise BadInput(f"sweep {d['name']!r}: 'axes' must be a list of axes such as [[\"optim.lr\", [0.01, 0.1]]], "
                       f"got {d['axes']!r}")
    for a in d.get("axes", []):
        if isinstance(a, dict):
            if len(a) != 1 or next(iter(a)) not in ("product", "zip"):
                raise ValueError(f"an axis object is {{'product': [...]}} or {{'zip': [...]}}, got {a!r}")
            mode, lists = next(iter(a.items()))
            if not isinstance(lists, list) or not all(isinstance(x, list) and len(x) == 2 and isinstance(x[1], list)
                                                      for x in lists):
                raise BadInput(f"sweep {d['name']!r}: {mode} takes [\"key\", [values]] pairs, got {lists!r}")
            pairs = [(str(k), list(v)) for k, v in lists]
            axes.append(product(*pairs) if mode == "product" else zip_axes(*pairs))
        elif isinstance(a, (list, tuple)) and len(a) == 2 and isinstance(a[1], list):
            axes.append(product((str(a[0]), list(a[1]))))
        else:
            raise BadInput(f"sweep {d['name']!r}: cannot read axis {a!r}; an axis is [\"key\", [values]] or "
                           "{\"product\"|\"zip\": [[\"key\", [values]], ...]}")
    kw = {k: d[k] for k in ("base", "base_overrides", "task", "name_keys", "description", "est_epoch_s", "epochs")
          if k in d}
    if "seed_keys" in d:
        kw["seed_keys"] = tuple(d["seed_keys"])
    return Sweep(d["name"], axes=axes, seeds=list(d.get("seeds", [0])), **kw)


def load_sweep_file(path: str) -> list[Sweep]:
    """Sweeps from a ``.json`` file (one sweep object or a list) or a ``.py`` file defining
    ``SWEEP`` / ``SWEEPS`` (a Sweep or a list of them) or ``sweeps() -> list[Sweep]``."""
    import importlib.util
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"sweep file {path!r} does not exist")
    if p.suffix == ".json":
        data = read_json(p, "sweep file", expect=None, users=True)
        return [sweep_from_dict(x) for x in (data if isinstance(data, list) else [data])]
    if p.suffix == ".py":
        spec = importlib.util.spec_from_file_location(f"mlplab_sweep_{p.stem}", p)
        mod = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        obj = getattr(mod, "SWEEPS", None) or getattr(mod, "SWEEP", None)
        if obj is None and callable(getattr(mod, "sweeps", None)):
            obj = mod.sweeps()
        if obj is None:
            raise ValueError(f"{path} defines none of SWEEP, SWEEPS or sweeps()")
        out = [obj] if isinstance(obj, Sweep) else list(obj)
        if not all(isinstance(s, Sweep) for s in out):
            raise BadType(f"{path}: SWEEP(S) must be Sweep objects")
        return out
    raise ValueError(f"sweep file {path!r}: expected .json or .py")
