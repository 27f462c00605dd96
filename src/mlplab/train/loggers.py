"""Where a run's metrics go: ``metrics.jsonl`` always; TensorBoard and Weights & Biases when asked
for (``run.tensorboard=true``, ``run.wandb=true``; both off by default, both optional extras:
``pip install -e ".[tensorboard]"`` / ``".[wandb]"``).

Each logger receives every epoch's record (scalars at the global step) and the resolved config as
hyperparameters (TensorBoard's HParams tab; W&B's run config). W&B runs in offline mode unless
``WANDB_MODE`` says otherwise, writing under ``<run>/wandb`` (``wandb sync`` uploads it later).

With ``run.log_every_steps=N`` (:class:`StepLog`) every N steps also get a record of kind
``"step"``: in ``metrics.jsonl`` it carries ``"kind": "step"`` (epoch records carry no kind, so
whatever reads epochs skips it by that key), in TensorBoard and W&B its scalars are named
``step/train_loss``, ``step/lr``, ... beside the epoch records' ``train_loss``, ``lr``.
"""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ..errors import BadInput
from .config import RunConfig, flatten, to_dict
from .distributed import DistInfo, all_reduce_sum
from .metrics import MatmulPeak

__all__ = ["STEP_KIND", "Loggers", "StepLog", "hparams", "open_loggers"]

#: the ``kind`` of a per-step record in ``metrics.jsonl`` (epoch records have no ``kind``)
STEP_KIND = "step"


def hparams(cfg: RunConfig) -> dict[str, bool | int | float | str]:
    """The resolved config as flat scalar hyperparameters (``optim.lr`` -> 0.1; None and lists as text)."""
    out: dict[str, bool | int | float | str] = {}
    for k, v in flatten(to_dict(cfg)).items():
        out[k] = v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
    return out


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _tagged(record: dict[str, Any]) -> dict[str, float]:
    """A record's scalars as TensorBoard/W&B names: a step record's under ``step/``, without its
    step and epoch (the x-axis already)."""
    if record.get("kind") != STEP_KIND:
        return _scalars(record)
    return {f"step/{k}": v for k, v in _scalars(record).items() if k not in ("step", "epoch")}


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
        for k, v in _tagged(record).items():
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
        self._run.log(_tagged(record), step=step)

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


class StepLog:
    """Per-step records (``run.log_every_steps=N``; timm's ``--log-interval``, big_vision's
    ``log_training_steps``): after every N-th optimiser step one record of kind ``"step"`` with
    the mean training loss and accuracy over the steps since the previous record (across epoch
    boundaries), the lr, images/s over the whole batch of all processes, MFU, and ``time_s``, the
    run's wall time (``clock()``: over resumes, as ``results.json``'s ``wall_s``).

    Host syncs: between records the steps' sums stay on the device (one add per step); a record
    reads them once (under DDP after one all-reduce, so the numbers are the global batch's).
    Every process calls :meth:`after_step`; only rank 0's ``loggers`` write. With N = 0 it does
    nothing. :meth:`state_dict` goes into each checkpoint, so a resumed run logs the same records."""

    def __init__(self, every: int, loggers: Loggers, dist: DistInfo, device: torch.device,
                 optimizer: torch.optim.Optimizer, train_flops_per_example: float, peak: MatmulPeak,
                 clock: Callable[[], float]):
        self.every, self._loggers, self._dist, self._optimizer = every, loggers, dist, optimizer
        self._fpe, self._peak, self._clock = train_flops_per_example, peak, clock
        self._sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss x examples, correct
        self._seen = 0  # examples of this process since the last record (host: no sync)
        self._interval_s = 0.0  # seconds of the interval before this process started (a resumed run)
        self._t_last = time.perf_counter()

    def after_step(self, step: int, epoch: int, batch: torch.Tensor, n: int) -> None:
        """Account one step: ``batch`` = [loss x n, correct] on the device, ``n`` its examples;
        ``step`` the steps done (1-based), ``epoch`` the epoch it belongs to (1-based)."""
        if not self.every:
            return
        self._sums += batch
        self._seen += n
        if step % self.every == 0:
            self._record(step, epoch)

    def _record(self, step: int, epoch: int) -> None:
        sums = all_reduce_sum(self._sums.clone(), self._dist) if self._dist.enabled else self._sums
        loss_sum, correct = sums.tolist()  # the one host sync of a record
        now = time.perf_counter()
        seen = self._seen * self._dist.world_size  # every process runs equal batches
        ips = seen / max(self._interval_s + now - self._t_last, 1e-9)
        rec: dict[str, Any] = {"kind": STEP_KIND, "epoch": epoch, "step": step,
                               "lr": self._optimizer.param_groups[0]["lr"],
                               "train_loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1),
                               "images_per_s": ips, "time_s": self._clock()}
        if self._fpe:
            rec["mfu"] = self._peak.mfu(self._fpe * ips, self._dist.world_size)
        self._loggers.log(rec, step)
        self._sums.zero_()
        self._seen, self._interval_s, self._t_last = 0, 0.0, now

    def state_dict(self) -> dict[str, Any]:
        return {"sums": self._sums.detach().cpu().clone(), "seen": self._seen,
                "interval_s": self._interval_s + time.perf_counter() - self._t_last}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        self._sums.copy_(state["sums"])
        self._seen, self._interval_s = int(state["seen"]), float(state["interval_s"])
        self._t_last = time.perf_counter()
