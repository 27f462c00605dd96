"""The processes mlplab starts die with the process that started them.

A worker that outlives its parent keeps computing for no one and holds whatever it inherited:
a folder's lock (``mlplab.utils.io.folder_lock``) that the rerun then finds taken. On Linux the
kernel sends a signal to a child when its parent dies, even by SIGKILL, which no handler sees
(``prctl(PR_SET_PDEATHSIG)``); the experiment executor's workers and ``pack``'s decoders ask
for it as they start.
"""
from __future__ import annotations

import ctypes
import os
import signal

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """In a child process: receive ``sig`` when its parent dies (Linux), and exit now if the
    parent ``parent`` died before the request took effect. Elsewhere a no-op."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:
        os._exit(1)
