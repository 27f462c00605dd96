"""Loggers: metrics.jsonl always; TensorBoard and W&B (offline) when asked, read back with their
own formats — TensorBoard's EventAccumulator, and W&B's record protobufs from the offline
``.wandb`` file. Skipped when the optional extras are not installed. Per-step records
(``run.log_every_steps``): their values against the epoch records, one host read per record, and
their state across a checkpoint."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from train_helpers import tiny_overrides

from mlplab.train import make_config, train
from mlplab.train.distributed import DistInfo
from mlplab.train.loggers import Loggers, StepLog, hparams
from mlplab.train.rundir import _last_logged_epoch, truncate_metrics


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

    res = _run(tmp_path, **{"run.tensorboard": True, "run.log_every_steps": 3})
    acc = EventAccumulator(str(Path(res["run_dir"]) / "tb"))
    acc.Reload()
    losses = acc.Scalars("train_loss")
    assert [e.step for e in losses] == [h["step"] for h in res["history"]]
    assert [e.step for e in acc.Scalars("step/train_loss")] == [3, 6, 9, 12, 15]  # 2 epochs of 8 steps
    assert {"step/lr", "step/train_acc", "step/images_per_s", "step/mfu"} <= set(acc.Tags()["scalars"])
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


# ----------------------------------------------------------------------------- per-step records

def _records(run_dir):
    lines = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if "kind" not in r], [r for r in lines if r.get("kind") == "step"]


def test_a_step_record_every_epoch_equals_the_epoch_record(tmp_path):
    """N = steps per epoch (8): each step record averages exactly its epoch's steps, summed in the
    same order as the epoch's sums, so the loss and accuracy are equal to the last bit."""
    res = _run(tmp_path, **{"run.log_every_steps": 8})
    epochs, steps = _records(res["run_dir"])
    assert [(r["epoch"], r["step"]) for r in steps] == [(1, 8), (2, 16)]
    for e, s in zip(epochs, steps):
        assert (s["train_loss"], s["train_acc"], s["lr"]) == (e["train_loss"], e["train_acc"], e["lr"])
        assert s["images_per_s"] > 0 and 0 < s["mfu"] < 1 and s["time_s"] <= e["time_s"]


def test_step_records_span_epoch_boundaries_and_cover_every_step_once(tmp_path):
    res = _run(tmp_path, **{"run.log_every_steps": 4, "schedule.epochs": 4, "data.train_subset": 192})  # 6 steps/epoch
    epochs, steps = _records(res["run_dir"])
    assert [(r["epoch"], r["step"]) for r in steps] == [(1, 4), (2, 8), (2, 12), (3, 16), (4, 20), (4, 24)]
    # 24 steps of 32 examples: the records (4 steps each) and the epochs (6) sum the same losses
    for key in ("train_loss", "train_acc"):
        assert sum(r[key] for r in steps) * 4 == pytest.approx(sum(r[key] for r in epochs) * 6, rel=1e-12)


class _Sink:
    def __init__(self):
        self.records = []

    def log(self, record, step):
        self.records.append(dict(record))


def _step_log(every, sink, device="cpu"):
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.5)
    peak = SimpleNamespace(mfu=lambda flops_per_s, world_size=1: flops_per_s / 1e3 / world_size)  # a 1 kFLOP/s device
    return StepLog(every, Loggers([sink]), DistInfo(), torch.device(device), opt, 10.0, peak, lambda: 7.0)


def test_the_sums_stay_on_the_device_between_records():
    """Steps that end no record never read the device (a meta tensor cannot be read); the N-th
    step reads it once. N = 0 does nothing at all."""
    log = _step_log(3, _Sink(), "meta")
    batch = torch.zeros(2, dtype=torch.float64, device="meta")
    log.after_step(1, 1, batch, 32)
    log.after_step(2, 1, batch, 32)
    with pytest.raises((NotImplementedError, RuntimeError)):
        log.after_step(3, 1, batch, 32)
    _step_log(0, _Sink(), "meta").after_step(3, 1, "not even a tensor", 32)


def test_a_checkpoint_between_records_carries_the_partial_sums():
    batches = [torch.tensor([2.0 * 32, 5.0 + i], dtype=torch.float64) for i in range(6)]
    whole, cut = _Sink(), _Sink()
    a = _step_log(4, whole)
    for i, b in enumerate(batches):
        a.after_step(i + 1, 1, b, 32)
    first = _step_log(4, cut)
    for i, b in enumerate(batches[:2]):
        first.after_step(i + 1, 1, b, 32)
    second = _step_log(4, cut)
    second.load_state_dict(first.state_dict())
    for i, b in enumerate(batches[2:], 2):
        second.after_step(i + 1, 1, b, 32)

    def timeless(recs):
        return [{k: v for k, v in r.items() if k not in ("images_per_s", "mfu")} for r in recs]

    assert timeless(cut.records) == timeless(whole.records) == [
        {"kind": "step", "epoch": 1, "step": 4, "lr": 0.5, "train_loss": 2.0, "train_acc": (5 + 6 + 7 + 8) / 128,
         "time_s": 7.0}]


def test_a_resume_keeps_step_records_up_to_its_checkpoint_step(tmp_path):
    recs = [{"kind": "step", "epoch": 1, "step": 4}, {"epoch": 1, "step": 6}, {"kind": "step", "epoch": 2, "step": 8},
            {"kind": "step", "epoch": 2, "step": 12}, {"epoch": 2, "step": 12}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"epoch": 3, "st')
    assert _last_logged_epoch(tmp_path) == 2  # the cut line is skipped, step records are not epochs
    truncate_metrics(tmp_path, 1, 9)  # the checkpoint of step 9, in epoch 2
    assert [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == recs[:3]
    (tmp_path / "metrics.jsonl").write_text(json.dumps(recs[2]) + "\n")
    assert _last_logged_epoch(tmp_path) == 0
