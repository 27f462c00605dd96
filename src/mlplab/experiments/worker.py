"""Worker process of the local executor: ``python -m mlplab.experiments.worker RUN_DIR``.

Runs ``<RUN_DIR>/spec.json`` (see :func:`mlplab.experiments.executors.execute_run`); exit code 0
when the run finished (or had finished before), 1 when it failed (traceback in ``error.txt``),
128 + the signal when a signal stopped it (the message says what was kept). Under torchrun every
process runs it (``<RUN_DIR>/job.sbatch``: :mod:`mlplab.experiments.slurm`); rank 0 keeps the files.
"""
from __future__ import annotations

import signal
import sys


def _stop(signum, frame) -> None:
    """SIGTERM as an exception, so that a file being written is removed, not left half-done
    (``utils.io.atomic_save`` cleans up on any exception); the run stays unfinished."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m mlplab.experiments.worker RUN_DIR", file=sys.stderr)
        return 2
    from .executors import execute_run

    signal.signal(signal.SIGTERM, _stop)  # the executor stops its workers with SIGTERM
    try:
        status = execute_run(argv[0])
    except KeyboardInterrupt as e:  # Ctrl-C, or a cluster's stop signal after the checkpoint (train.preemption)
        print(f"mlplab worker: {getattr(e, 'message', '') or 'interrupted'}", file=sys.stderr, flush=True)
        return 128 + int(getattr(e, "signum", None) or signal.SIGINT)
    print(f"mlplab worker: {status} {argv[0]}", flush=True)
    return 0 if status in ("done", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
