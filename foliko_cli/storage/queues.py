"""Per-session FIFO queues for this process (the in-process half of F2)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from foliko_cli.common.loop import running_loop
from foliko_cli.errors import SessionBusyError

IN_THIS_PROCESS = "another turn in this process"


class _Queue:
    def __init__(self) -> None:
        self.lock: Any = None  # an asyncio.Lock, made when a loop runs
        self.users = 0


class SessionQueues:
    """One asyncio.Lock per session, which wakes its waiters in arrival order.

    A session's entry is dropped as soon as nobody holds or waits for it, so a
    long-lived process keeps no state for idle sessions. Held without an event
    loop (see common/loop.py), a session needs no lock: nothing else runs in
    the process meanwhile.
    """

    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}

    def __len__(self) -> int:
        return len(self._queues)

    def busy(self, session_id: str) -> bool:
        """Whether a turn holds or waits for ``session_id`` in this process now."""
        return session_id in self._queues

    @contextlib.asynccontextmanager
    async def hold(self, session_id: str, wait: float) -> AsyncIterator[None]:
        queue = self._queues.get(session_id)
        if queue is None:
            queue = self._queues[session_id] = _Queue()
        queue.users += 1
        try:
            if running_loop() is None:
                yield
                return
            import asyncio

            if queue.lock is None:
                queue.lock = asyncio.Lock()
            if queue.users == 1:  # no one else holds or waits: taken at once
                await queue.lock.acquire()
            else:
                try:
                    async with asyncio.timeout(wait):
                        await queue.lock.acquire()
                except TimeoutError:
                    raise SessionBusyError(session_id, wait, IN_THIS_PROCESS) from None
            try:
                yield
            finally:
                queue.lock.release()
        finally:
            queue.users -= 1
            if queue.users == 0:
                del self._queues[session_id]
