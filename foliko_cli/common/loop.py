"""Coroutines that run with or without an event loop.

A turn with an offline model over SQLite, JSON files or memory never waits
on anything: its coroutines can be driven to their end without asyncio,
whose import alone costs more than half of a ``foliko chat`` process (P1).
Code on that path that would wait (a lock another process holds, a model
or a tool that may do anything, a URL) calls ``require_loop`` first: the
caller that drove it without a loop gets ``NeedsLoop`` before anything was
written, and runs it again on one. ``run_to_completion`` shields what must
not stop half-way (a commit, a lock's release) on a loop and simply awaits it
without one.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

T = TypeVar("T")


class NeedsLoop(Exception):
    """Raised when code that needs an event loop runs without one."""


def running_loop() -> Any:
    """The asyncio loop running in this thread, or None (without importing asyncio:
    no loop can run before it is imported)."""
    asyncio = sys.modules.get("asyncio")
    return None if asyncio is None else asyncio._get_running_loop()


def require_loop(what: str) -> None:
    """Raise ``NeedsLoop`` when no event loop runs: ``what`` needs one."""
    if running_loop() is None:
        raise NeedsLoop(what)


def run_without_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Drive ``coroutine`` to its end with no event loop. ``NeedsLoop`` when it
    needed one after all: ``require_loop`` said so, asyncio itself failed for
    want of one (code foliko does not own, such as a tool or a model of one's
    own, awaited something), or it suspended."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    except (RuntimeError, AttributeError) as exc:
        if _raised_by_asyncio(exc):
            raise NeedsLoop(f"asyncio: {exc}") from exc
        raise
    coroutine.close()
    raise NeedsLoop("a coroutine suspended")


def _raised_by_asyncio(exc: BaseException) -> bool:
    traceback = exc.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    where = traceback.tb_frame.f_code.co_filename if traceback is not None else ""
    return f"{os.sep}asyncio{os.sep}" in where


async def run_to_completion(awaitable: Awaitable[T]) -> tuple[T, bool]:
    """Await ``awaitable`` to its end; return its value and whether a
    cancellation arrived meanwhile (it is held back, not raised): a storage
    commit or a lock release a signal interrupts half-way would leave the
    caller unable to say what happened. Without an event loop nothing can
    cancel it: it is simply awaited."""
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
