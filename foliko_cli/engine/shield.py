"""Running an awaitable to its end even when the task awaiting it is cancelled.

A storage commit or a lock release that a signal interrupts half-way leaves
the caller unable to say what happened (was the turn saved?) or leaves a
lock held. These run shielded: the cancellation waits for them and is then
reported to the caller, which decides what it means.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from foliko_cli.common.loop import running_loop

T = TypeVar("T")


async def run_to_completion(awaitable: Awaitable[T]) -> tuple[T, bool]:
    """Await ``awaitable`` to its end; return its value and whether a
    cancellation arrived meanwhile (it is held back, not raised). Without an
    event loop nothing can cancel it: it is simply awaited."""
    if running_loop() is None:
        return await awaitable, False
    import asyncio

    task = asyncio.ensure_future(awaitable)
    cancelled = False
    while True:
        try:
            return await asyncio.shield(task), cancelled
        except asyncio.CancelledError:
            cancelled = True
            if task.done():
                if task.cancelled():
                    raise
                return task.result(), True
