"""Worker process of the local executor: ``python -m mlplab.experiments.worker RUN_DIR [RUN_DIR ...]``.

Runs ``<RUN_DIR>/spec.json`` (see :func:`mlplab.experiments.executors.execute_run`), or with
several folders the seeds of one sweep point in lockstep
(:func:`mlplab.experiments.executors.execute_group`); exit code 0 when every run finished (or had
finished before), 1 when one failed (traceback in its ``error.txt``), 128 + the signal when a
signal stopped it (the message says what was kept). Under torchrun every process runs it
(``<RUN_DIR>/job.sbatch``: :mod:`mlplab.experiments.slurm`); rank 0 keeps the files.
"""
from __future__ import annotations

import signal
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m mlplab.experiments.worker RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    from ..utils.interrupts import stop_signals
    from .executors import execute_group, execute_run

    try:
        # the executor stops its workers with SIGTERM: as an exception, so that a file being written
        # is removed, not left half-done (utils.io.atomic_save); the run stays unfinished
        with stop_signals((signal.SIGTERM,)):
            status = {argv[0]: execute_run(argv[0])} if len(argv) == 1 else execute_group(argv)
    except KeyboardInterrupt as e:  # SIGTERM, Ctrl-C, or a cluster's stop signal after its checkpoint (preemption)
        print(f"mlplab worker: {getattr(e, 'message', '') or 'interrupted'}", file=sys.stderr, flush=True)
        return 128 + int(getattr(e, "signum", None) or signal.SIGINT)
    for d, st in status.items():
        print(f"mlplab worker: {st} {d}", flush=True)
    return 0 if all(st in ("done", "skipped") for st in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
