"""Blocking work run from a coroutine without holding the event loop or the exit."""

import contextlib
from collections.abc import Callable
from typing import Any


async def in_worker_thread(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a daemon thread.

    Unlike ``asyncio.to_thread``, a cancelled wait abandons the thread: the
    process neither waits for it at exit nor keeps the turn waiting.
    """
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    def work() -> None:
        value, error = None, None
        try:
            value = function(*args)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name="foliko-tool", daemon=True).start()
    return await future
