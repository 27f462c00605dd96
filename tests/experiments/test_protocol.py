"""Protocols: a hash over everything that decides a verdict, fresh seeds for a confirmatory run,
a confirmatory run refused unless its exact protocol was frozen first."""
from __future__ import annotations

import json

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
