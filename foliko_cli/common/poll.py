"""Waiting for what another process does (a lock it holds, a record it
writes): try, sleep, try again."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from foliko_cli.common.loop import require_loop

FIRST_DELAY = 0.002
MAX_DELAY = 0.1


async def poll(
    attempt: Callable[[], bool | Awaitable[bool]],
    deadline: float,
    *,
    first_delay: float = FIRST_DELAY,
    max_delay: float = MAX_DELAY,
) -> bool:
    """Call ``attempt`` (a function or a coroutine function) until it returns
    true (then True) or the ``time.monotonic`` ``deadline`` has passed (then
    False). The sleeps between tries double from ``first_delay`` up to
    ``max_delay`` and never reach past the deadline. Waiting needs an event
    loop (``NeedsLoop`` without one, see common/loop.py)."""
    import inspect

    async def tried() -> bool:
        result = attempt()
        return bool(await result) if inspect.isawaitable(result) else bool(result)

    delay = first_delay
    while not await tried():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        require_loop("waiting for another process")
        import asyncio

        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, max_delay)
    return True
