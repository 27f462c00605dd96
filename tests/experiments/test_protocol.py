"""Protocols: a hash over everything that decides a verdict, fresh seeds for a confirmatory run,
a confirmatory run refused unless its exact protocol was frozen first."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mlplab.errors import BadInput
from mlplab.experiments import protocol as P
from mlplab.experiments import registry


def test_the_hash_covers_runs_seeds_and_claims_and_nothing_else():
    content, h = registry.experiment_protocol("fig5", "smoke")
    assert h == P.protocol_hash(json.loads(json.dumps(content)))  # stable through JSON
    assert content["seeds"] == [0] and content["role"] == "exploratory" and content["claims"]
    changed = {**content, "claims": content["claims"][:-1]}
    assert P.protocol_hash(changed) != h
    more_epochs = json.loads(json.dumps(content))
    more_epochs["runs"][0]["overrides"]["schedule.epochs"] = 99
    assert P.protocol_hash(more_epochs) != h


def test_a_confirmatory_protocol_has_fresh_seeds_only():
    content, h = registry.experiment_protocol("fig5", "smoke", role="confirmatory")
    assert content["seeds"] == list(range(P.CONFIRM_FIRST, P.CONFIRM_FIRST + P.CONFIRM_SEEDS))
    assert not set(content["seeds"]) & set(P.EXPLORE_SEEDS)
    assert h != registry.experiment_protocol("fig5", "smoke")[1]


def test_a_confirmatory_run_without_a_frozen_protocol_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "frozen_protocol", lambda id, scale: None)
    with pytest.raises(BadInput, match="no frozen smoke protocol"):
        registry.reproduce("fig5", "smoke", out_dir=tmp_path / "out", role="confirmatory", verbose=False)
    assert not (tmp_path / "out").exists()


def test_a_confirmatory_run_whose_protocol_changed_since_it_was_frozen_is_refused(tmp_path, monkeypatch):
    content, h = registry.experiment_protocol("fig5", "smoke", role="confirmatory")
    monkeypatch.setattr(registry, "frozen_protocol",
                        lambda id, scale: {"hash": "0" * 16, "frozen": "2026-01-01", "reason": "r",
                                           "content": {**content, "claims": []}})
    with pytest.raises(BadInput, match="has changed since it was frozen.*claims"):
        registry.reproduce("fig5", "smoke", out_dir=tmp_path / "out", role="confirmatory", verbose=False)


def test_freezing_writes_the_content_and_hash_and_needs_a_reason(tmp_path, monkeypatch):
    f = tmp_path / "fig5.json"
    monkeypatch.setattr(registry, "protocol_file", lambda id: f)
    with pytest.raises(BadInput, match="--reason"):
        registry.freeze_protocol("fig5", "smoke", reason=" ")
    h = registry.freeze_protocol("fig5", "smoke", reason="proxy explored on seeds 0-2")
    data = json.loads(f.read_text())
    assert data["frozen"]["smoke"]["hash"] == h
    assert P.protocol_hash(data["frozen"]["smoke"]["content"]) == h
    assert data["frozen"]["smoke"]["content"]["role"] == "confirmatory"


def test_every_experiment_declares_its_claims_with_a_class():
    for id in registry.list_experiments():
        exp = registry.get_experiment(id)
        assert exp.claims, f"{id} declares no claim"
        for c in exp.claims:
            assert c.cls in ("trained", "identity", "measurement") and c.rule and c.text


def test_the_history_files_are_well_formed():
    keys = {"scale", "when", "commit", "role", "seeds", "protocol", "gave", "changed"}
    for id in registry.list_experiments():
        for h in P.protocol_history(id):
            assert keys <= set(h), (id, h)


def test_every_frozen_protocol_is_the_one_the_code_runs():
    """A change to the runs, claims or rules of a frozen protocol (the code drifting from what
    was committed) fails here, before a confirmatory run would refuse it."""
    for id in registry.list_experiments():
        frozen = json.loads(P.protocol_file(id).read_text(encoding="utf-8")).get("frozen", {})
        for scale, rec in frozen.items():
            content, h = registry.experiment_protocol(id, scale, rec["content"]["dataset"], role="confirmatory")
            diff = [k for k in sorted(set(content) | set(rec["content"])) if content.get(k) != rec["content"].get(k)]
            assert h == rec["hash"], f"{id} at {scale}: the code's protocol differs from the frozen one in {diff}"


def test_canonical_json_sorts_keys_keeps_non_ascii_and_writes_other_values_by_their_repr():
    from fractions import Fraction

    assert P.canonical({"b": Fraction(1, 3), "a": ["Ω", 1.5, None]}) == '{"a":["Ω",1.5,null],"b":"Fraction(1, 3)"}'
    hand = hashlib.sha256('{"a":["Ω",1.5,null],"b":"Fraction(1, 3)"}'.encode("utf-8")).hexdigest()[:16]
    assert P.protocol_hash({"b": Fraction(1, 3), "a": ["Ω", 1.5, None]}) == hand


def test_an_unknown_role_is_refused_naming_the_roles():
    with pytest.raises(ValueError, match=r"^role must be one of exploratory, confirmatory, not 'final'$"):
        P.protocol_content(None, None, [], "final")


class _Utf8File:
    """A protocol file as a package resource whose text is UTF-8 bytes, read in the locale's
    encoding (here Latin-1, as on a machine whose locale is not UTF-8) unless one is named."""

    def __init__(self, data):
        self.raw = json.dumps(data, ensure_ascii=False).encode("utf-8")

    def is_file(self):
        return True

    def read_text(self, encoding=None):
        return self.raw.decode(encoding or "latin-1")


class _Missing:
    def is_file(self):
        return False

    def read_text(self, encoding=None):
        raise FileNotFoundError("no such protocol file")


def test_the_frozen_protocol_and_history_are_read_from_the_ids_file_as_utf8(monkeypatch):
    frozen = {"hash": "0123456789abcdef", "frozen": "2026-01-01", "reason": "Ω = 2^18 explored", "content": {}}
    history = [{"scale": "cpu", "when": "2026-01-01", "changed": "γ chosen"}]
    files = {"x": _Utf8File({"experiment": "x", "frozen": {"cpu": frozen}, "history": history})}
    monkeypatch.setattr(P, "protocol_file", lambda id: files.get(id, _Missing()))
    assert P.frozen_protocol("x", "cpu") == frozen and P.frozen_protocol("x", "smoke") is None
    assert P.protocol_history("x") == history


def test_an_id_without_a_file_or_without_frozen_protocols_and_history_has_none(monkeypatch):
    files = {"bare": _Utf8File({"experiment": "bare"})}
    monkeypatch.setattr(P, "protocol_file", lambda id: files.get(id, _Missing()))
    for id in ("bare", "nothing-committed"):
        assert P.frozen_protocol(id, "cpu") is None and P.protocol_history(id) == []


def test_the_protocol_file_is_the_packages_data_file_of_the_id():
    f = P.protocol_file("fig5")
    here = Path(P.__file__).parent / "data" / "protocols" / "fig5.json"
    assert Path(str(f)) == here and f.is_file()
    assert P.protocol_history("fig5") == json.loads(here.read_text(encoding="utf-8"))["history"]
