"""Where a run's per-epoch metrics go: ``metrics.jsonl`` always; TensorBoard and Weights & Biases
when asked for (``run.tensorboard=true``, ``run.wandb=true``; both off by default, both optional
extras: ``pip install -e ".[tensorboard]"`` / ``".[wandb]"``).

Each logger receives every epoch's record (scalars at the global step) and the resolved config as
hyperparameters (TensorBoard's HParams tab; W&B's run config). W&B runs in offline mode unless
``WANDB_MODE`` says otherwise, writing under ``<run>/wandb`` (``wandb sync`` uploads it later).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator

from ..errors import BadInput
from .config import RunConfig, flatten, to_dict

__all__ = ["Loggers", "open_loggers", "hparams"]


def hparams(cfg: RunConfig) -> dict[str, bool | int | float | str]:
    """The resolved config as flat scalar hyperparameters (``optim.lr`` -> 0.1; None and lists as text)."""
    out: dict[str, bool | int | float | str] = {}
    for k, v in flatten(to_dict(cfg)).items():
        out[k] = v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
    return out


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class _JsonLines:
    def __init__(self, run_dir: Path):
        self._f = open(run_dir / "metrics.jsonl", "a")

    def log(self, record: dict[str, Any], step: int) -> None:
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()

    def finish(self, results: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        self._f.close()


class _TensorBoard:
    def __init__(self, run_dir: Path, cfg: RunConfig):
        try:
            from torch.utils.tensorboard import SummaryWriter
            from torch.utils.tensorboard.summary import hparams as hparams_summary
        except ImportError:
            raise BadInput('run.tensorboard=true needs TensorBoard: pip install -e ".[tensorboard]" '
                           "(or set run.tensorboard=false)") from None
        self._w = SummaryWriter(log_dir=str(run_dir / "tb"))
        self._hp = hparams(cfg)
        self._summary = hparams_summary
        self._w.add_text("config", "```\n" + json.dumps(to_dict(cfg), indent=2) + "\n```", 0)

    def log(self, record: dict[str, Any], step: int) -> None:
        for k, v in _scalars(record).items():
            self._w.add_scalar(k, v, step)
        self._w.flush()

    def finish(self, results: dict[str, Any]) -> None:
        # hyperparameters with the final metrics: TensorBoard's HParams tab compares runs by them
        metrics = {f"hparam/{k}": v for k, v in _scalars(results).items() if k.startswith(("test_", "val_"))}
        for summary in self._summary(self._hp, metrics):
            self._w.file_writer.add_summary(summary)
        for k, v in metrics.items():
            self._w.add_scalar(k, v)
        self._w.flush()

    def close(self) -> None:
        self._w.close()


class _WandB:
    def __init__(self, run_dir: Path, cfg: RunConfig):
        try:
            import wandb
        except ImportError:
            raise BadInput('run.wandb=true needs Weights & Biases: pip install -e ".[wandb]" '
                           "(or set run.wandb=false)") from None
        import os

        self._wandb = wandb
        (run_dir / "wandb").mkdir(exist_ok=True)
        self._run = wandb.init(project=cfg.run.wandb_project, name=cfg.run.name, dir=str(run_dir),
                               config=to_dict(cfg), mode=os.environ.get("WANDB_MODE", "offline"),
                               reinit=True)

    def log(self, record: dict[str, Any], step: int) -> None:
        self._run.log(_scalars(record), step=step)

    def finish(self, results: dict[str, Any]) -> None:
        for k, v in _scalars(results).items():
            if k.startswith(("test_", "val_")):
                self._run.summary[k] = v

    def close(self) -> None:
        # finish() returns before wandb-core's writer has flushed the run file; teardown() waits
        # for the service to exit, so the offline .wandb file is complete when training returns
        self._run.finish()
        self._wandb.teardown()


class Loggers:
    """Fans each record out to every open logger."""

    def __init__(self, loggers: list):
        self._loggers = loggers

    def log(self, record: dict[str, Any], step: int) -> None:
        for lg in self._loggers:
            lg.log(record, step)

    def finish(self, results: dict[str, Any]) -> None:
        for lg in self._loggers:
            lg.finish(results)


@contextlib.contextmanager
def open_loggers(run_dir: Path, cfg: RunConfig, enabled: bool = True) -> Iterator[Loggers]:
    """The run's loggers (none on ranks other than 0: ``enabled=False``); closed on exit."""
    opened: list = []
    try:
        if enabled:
            opened.append(_JsonLines(Path(run_dir)))
            if cfg.run.tensorboard:
                opened.append(_TensorBoard(Path(run_dir), cfg))
            if cfg.run.wandb:
                opened.append(_WandB(Path(run_dir), cfg))
        yield Loggers(opened)
    finally:
        for lg in opened:
            lg.close()
