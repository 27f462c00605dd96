"""``train_curves.png``: written into every finished run's folder from its ``metrics.jsonl``
(epoch and step records told apart by ``kind``), without matplotlib at import time."""
import json
from pathlib import Path

from train_helpers import tiny_overrides

from mlplab.train import make_config, train
from mlplab.train.curves import CURVES_FILE, read_metrics, save_curves

PNG = b"\x89PNG\r\n\x1a\n"


def test_a_finished_run_holds_its_curves(tmp_path):
    res = train(make_config(None, tiny_overrides(tmp_path, "c", **{"run.log_every_steps": 2, "schedule.epochs": 2})))
    png = Path(res["run_dir"]) / CURVES_FILE
    assert png.read_bytes()[:8] == PNG
    epochs, steps = read_metrics(res["run_dir"])
    assert [r["step"] for r in epochs] == [8, 16] and [r["step"] for r in steps] == list(range(2, 17, 2))
    assert all(r["time_s"] > 0 for r in epochs + steps)


def test_records_of_older_runs_and_cut_lines_still_draw(tmp_path):
    """Epoch records without ``time_s`` (written before it existed) are placed at the sum of the
    epoch times; a line cut by a kill is left out; no records at all draw nothing."""
    assert save_curves(tmp_path) is None
    recs = [{"epoch": 1, "step": 4, "train_loss": 2.0, "train_acc": 0.2, "epoch_time_s": 1.5, "val_loss": 2.1,
             "val_acc": 0.1},
            {"epoch": 2, "step": 8, "train_loss": 1.5, "train_acc": 0.4, "epoch_time_s": 1.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"kind": "step", "st')
    assert read_metrics(tmp_path) == (recs, [])
    assert save_curves(tmp_path).read_bytes()[:8] == PNG
