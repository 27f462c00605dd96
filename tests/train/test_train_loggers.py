"""Loggers: metrics.jsonl always; TensorBoard and W&B (offline) when asked, read back with their
own formats — TensorBoard's EventAccumulator, and W&B's record protobufs from the offline
``.wandb`` file. Skipped when the optional extras are not installed."""
import json
from pathlib import Path

import pytest

from mlplab.train import make_config, train
from mlplab.train.loggers import hparams
from train_helpers import tiny_overrides


def _run(tmp_path, **extra):
    return train(make_config(None, tiny_overrides(tmp_path / "runs", "lg", **{"schedule.epochs": 2, **extra})))


def test_loggers_are_off_by_default_and_hparams_are_flat_scalars(tmp_path):
    cfg = make_config("synthetic_tiny")
    assert cfg.run.tensorboard is False and cfg.run.wandb is False
    hp = hparams(cfg)
    assert hp["optim.lr"] == 0.003 and hp["model.name"] == "s_mixer" and hp["schedule.steps"] == "null"
    assert all(isinstance(v, (bool, int, float, str)) for v in hp.values())
    res = _run(tmp_path)
    run_dir = Path(res["run_dir"])
    assert not (run_dir / "tb").exists() and not (run_dir / "wandb").exists()
    assert [json.loads(x)["epoch"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_tensorboard_events_read_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    res = _run(tmp_path, **{"run.tensorboard": True})
    acc = EventAccumulator(str(Path(res["run_dir"]) / "tb"))
    acc.Reload()
    losses = acc.Scalars("train_loss")
    assert [e.step for e in losses] == [h["step"] for h in res["history"]]
    assert [e.value for e in losses] == pytest.approx([h["train_loss"] for h in res["history"]], rel=1e-6)
    assert acc.Scalars("hparam/test_acc")[-1].value == pytest.approx(res["test_acc"], rel=1e-6)
    plugins = acc.PluginTagToContent("hparams")
    assert "_hparams_/experiment" in plugins and "_hparams_/session_start_info" in plugins
    assert b"optim.lr" in plugins["_hparams_/session_start_info"]


def _wandb_records(path: Path) -> list[bytes]:
    """The records of an offline ``.wandb`` file: a 7-byte W&B header, then LevelDB log records
    (32 KiB blocks; each chunk has crc32 (4), length (2, little-endian), type (1: full, 2: first,
    3: middle, 4: last))."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, buf = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:  # zero padding up to the block's end
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            out.append(buf)
            buf = b""
    return out


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def test_wandb_offline_run_reads_back(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2

    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    res = _run(tmp_path, **{"run.wandb": True})
    (path,) = (Path(res["run_dir"]) / "wandb").glob("offline-run-*/run-*.wandb")
    history, config, summary = [], {}, {}
    for raw in _wandb_records(path):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({_key(i): json.loads(i.value_json) for i in rec.history.item})
            history[-1].setdefault("_step", rec.history.step.num)
        elif kind in ("run", "config"):  # the config arrives with the run record, updates after it
            updates = rec.run.config.update if kind == "run" else rec.config.update
            config.update({_key(i): json.loads(i.value_json) for i in updates})
        elif kind == "summary":
            summary.update({_key(i): json.loads(i.value_json) for i in rec.summary.update})
    assert [h["train_loss"] for h in history] == pytest.approx([h["train_loss"] for h in res["history"]])
    assert [h["_step"] for h in history] == [h["step"] for h in res["history"]]
    assert config["optim"]["lr"] == 0.003 and config["model"]["name"] == "s_mixer"
    assert summary["test_acc"] == pytest.approx(res["test_acc"])
