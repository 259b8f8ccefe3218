"""A streamed turn: the turn runs in a task of its own, its events queued for
whoever reads them.

This is the one pump between a turn and its reader. The turn does not wait
for its reader: it runs to its end (and its ``TurnRequest.on_done`` runs) even
when nobody reads, so a server can answer once the turn holds its session
(``started``) and still account for a turn whose client stopped reading.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from foliko_cli.context.request import RequestContext
    from foliko_cli.engine.turn import TurnResult


class TurnEvents(Protocol):
    """Where a running turn writes its events, and that it has started."""

    async def put(self, event: dict[str, Any]) -> None: ...

    def start(self, position: int) -> None:
        """The turn holds its session; its messages begin at ``position``."""


class CallbackEvents:
    """Each event handed to a callback as it happens (``chat(on_event=...)``)."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.on_event = on_event

    async def put(self, event: dict[str, Any]) -> None:
        self.on_event(event)

    def start(self, position: int) -> None:
        pass


class QueuedEvents:
    """A ``TurnStream``'s: the events queued for its reader."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        self.started: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def put(self, event: dict[str, Any]) -> None:
        await self.queue.put(event)

    def start(self, position: int) -> None:
        if not self.started.done():
            self.started.set_result(position)


class TurnStream:
    """``delta``, ``tool_call`` and ``tool_result`` events as they happen, then
    ``done`` (whose ``result`` is the TurnResult); a failure is raised where
    the events stop. ``run`` is the turn, writing to the TurnEvents it is given.

    The turn starts at the first read or at ``start``. Closing the stream
    (``aclose``) before the turn is saved stops it; a reader cancelled after
    the turn was saved still gets its ``done``.
    """

    def __init__(
        self,
        run: Callable[[TurnEvents], Awaitable[TurnResult]],
        request: RequestContext,
    ) -> None:
        self._run = run
        self._request = request
        self._events: QueuedEvents | None = None
        self._task: asyncio.Task[None] | None = None
        self.result: TurnResult | None = None

    def start(self) -> None:
        """Start the turn (once), without waiting for any of its events."""
        if self._task is not None:
            return
        self._events = QueuedEvents()
        self._task = asyncio.ensure_future(self._produce(self._events))
        self._request.on_cancel(self._task.cancel)

    async def started(self) -> int:
        """Start the turn and wait until it holds its session: the position its
        messages begin at. Raises what ended the turn before that."""
        self.start()
        assert self._task is not None and self._events is not None
        started = self._events.started
        either: list[asyncio.Future[Any]] = [started, self._task]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if started.done():
            return started.result()
        queue = self._events.queue
        while (event := queue.get_nowait()) is not None:
            if isinstance(event, BaseException):
                raise event
        raise RuntimeError("the turn ended without starting")

    async def _produce(self, events: QueuedEvents) -> None:
        try:
            self.result = await self._run(events)
            await events.put({"type": "done", "result": self.result})
        except BaseException as exc:
            await events.queue.put(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            await events.queue.put(None)

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._read()

    async def _read(self) -> AsyncIterator[dict[str, Any]]:
        """What ``async for`` reads: a reader that leaves the loop early stops the
        turn, as leaving any async generator early closes it."""
        try:
            while True:
                try:
                    event = await self.__anext__()
                except StopAsyncIteration:
                    return
                yield event
        finally:
            await self.aclose()

    async def __anext__(self) -> dict[str, Any]:
        self.start()
        assert self._task is not None and self._events is not None
        while True:
            try:
                event = await self._events.queue.get()
            except asyncio.CancelledError:
                if not await self._committed_anyway():
                    raise
                continue
            if event is None:
                self._events.queue.put_nowait(None)  # every later read ends too
                await self.aclose()
                raise StopAsyncIteration
            if isinstance(event, BaseException):
                await self.aclose()
                raise event
            return event

    async def _committed_anyway(self) -> bool:
        """After the reader was cancelled: stop the turn, and say whether it had
        been saved (its ``done`` event is then waiting in the queue)."""
        assert self._task is not None and self._events is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        queue = self._events.queue
        pending = [queue.get_nowait() for _ in range(queue.qsize())]
        for event in pending:
            queue.put_nowait(event)
        return any(isinstance(e, dict) and e.get("type") == "done" for e in pending)

    async def aclose(self) -> None:
        """Stop the turn if it still runs (unsaved, nothing of it is kept)."""
        task = self._task
        if task is None:
            return
        self._request.remove_on_cancel(task.cancel)
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
