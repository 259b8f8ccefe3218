"""A stdio server's whole process group ends with it.

The SDK starts a stdio server in a session (and process group) of its own
and, at the end, closes its stdin, waits, and kills the group only if the
server is still running. A server that exits by itself (on end of input, or
by crashing) leaves whatever it started running: a language server, a
browser, a build. So when the transport has closed, every process still in
the server's group gets SIGTERM, and SIGKILL after ``GRACE_SECONDS``.

The SDK does not expose the process it spawned; it is the ``process`` local
of its ``stdio_client`` generator, read while the transport is open. Where
that ever fails (another SDK version), the server's own end is left to the
SDK as before and the test of this module fails.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

GRACE_SECONDS = 1.0
POLL_SECONDS = 0.02


def server_pid(transport: Any) -> int | None:
    """The pid of the process ``stdio_client`` (an open transport) started."""
    frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
    process = frame.f_locals.get("process") if frame is not None else None
    pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None


def _signal_group(group: int, signal_number: int) -> bool:
    """Send the signal to the group; False when no process is left in it."""
    try:
        os.killpg(group, signal_number)
    except ProcessLookupError:
        return False
    except PermissionError:  # the group id was taken by a process not ours: leave it
        return False
    return True


async def end_group(group: int) -> None:
    """SIGTERM to every process left in the group, SIGKILL to those still there after
    the grace period; shielded, so a cancelled close still ends them."""
    import anyio

    with anyio.CancelScope(shield=True):
        if not _signal_group(group, signal.SIGTERM):
            return
        with anyio.move_on_after(GRACE_SECONDS):
            while _signal_group(group, 0):
                await anyio.sleep(POLL_SECONDS)
            return
        _signal_group(group, signal.SIGKILL)


@asynccontextmanager
async def ending_group(transport: Any) -> AsyncIterator[Any]:
    """``transport`` (the SDK's stdio transport) whose server's group is ended after it closes."""
    group = None
    try:
        async with transport as streams:
            group = server_pid(transport) if hasattr(os, "killpg") else None
            yield streams
    finally:
        if group is not None:
            await end_group(group)
