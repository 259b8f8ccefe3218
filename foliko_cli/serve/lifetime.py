"""A worker of ``foliko serve --workers N`` ends with its parent, however the
parent ends (kill -9 included), so no orphan keeps the port.

On Linux the kernel sends SIGTERM when the parent dies (PR_SET_PDEATHSIG).
That fires when the parent *thread* that forked the worker ends; uvicorn's
supervisor starts and restarts workers from the parent's main thread, which
lives as long as the parent. Everywhere, a thread also watches the parent
pid: when the worker is re-parented, it sends itself SIGTERM. Either way the
worker shuts down as on a SIGTERM (it stops listening at once) and is
ended outright if that takes longer than ``grace`` plus a few seconds.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import cast

POLL_S = 0.5
PR_SET_PDEATHSIG = 1
_EXTRA_S = 5.0


def follow_parent(parent_pid: int, grace: float) -> None:
    """In a worker: end when ``parent_pid`` is no longer our parent."""
    signalled = sys.platform == "linux" and _die_with_parent()
    signalled = signalled and os.getppid() == parent_pid  # else it died before prctl
    threading.Thread(
        target=_watch, args=(parent_pid, grace, signalled), name="foliko-parent", daemon=True
    ).start()


def _die_with_parent() -> bool:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return cast(bool, libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int, grace: float, signalled: bool) -> None:
    stop = threading.Event()
    while os.getppid() == parent_pid:
        stop.wait(POLL_S)
    if not signalled:
        os.kill(os.getpid(), signal.SIGTERM)
    stop.wait(grace + _EXTRA_S)
    os._exit(1)
