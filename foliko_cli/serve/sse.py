"""Server-sent events, in one place: framing, keep-alives, ``[DONE]``, a client
that leaves and a server that stops.

A stream is an async iterator of events, each a msgspec type or a plain
JSON value sent as one ``data:`` line (``named``: an ``event: TYPE`` line
first, as the Responses API sends them); ``DONE`` is ``data: [DONE]``. A
stream with nothing to send for KEEP_ALIVE_S sends a comment line, which
every SSE client skips, so proxies keep the connection open and a client
that left is noticed. When the client leaves, the iterator is closed (a
turn it owns stops). When shutdown's grace runs out, uvicorn cancels the
requests still running: a plain stream would just stop, and the client
could not tell a cut from an end, so this one sends its ``ending`` (an
error saying the server is shutting down, then ``[DONE]`` where the API
ends with one), shielded from the cancellation that is ending it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any

import anyio
import msgspec
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Send

KEEP_ALIVE_S = 15.0
KEEP_ALIVE = b": keep-alive\n\n"


class _Done:
    def __repr__(self) -> str:
        return "DONE"


DONE: Any = _Done()
"""The event that is ``data: [DONE]``."""

_encode = msgspec.json.Encoder().encode


def frame(event: Any, named: bool = False) -> bytes:
    if event is DONE:
        return b"data: [DONE]\n\n"
    data = b"data: " + _encode(event) + b"\n\n"
    return b"event: " + event["type"].encode() + b"\n" + data if named else data


class EventStream(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterable[Any],
        *,
        ending: Callable[[], Iterable[Any]] = tuple,
        named: bool = False,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(
            self._frames(events), headers={"cache-control": "no-store", **(headers or {})}
        )
        self.ending = ending
        self.named = named
        self.client_left = False
        self._ended = False
        self._sent_at = time.monotonic()

    async def _frames(self, events: AsyncIterable[Any]) -> AsyncIterator[bytes]:
        async with contextlib.aclosing(aiter(events)) as source:  # type: ignore[type-var]
            async for event in source:
                yield frame(event, self.named)

    async def listen_for_disconnect(self, receive: Receive) -> None:
        await super().listen_for_disconnect(receive)
        self.client_left = True

    async def stream_response(self, send: Send) -> None:
        lock = anyio.Lock()

        async def send_one(message: Message) -> None:
            async with lock:
                if self._ended:
                    return
                await send(message)
                self._sent_at = time.monotonic()
                self._ended = message["type"] == "http.response.body" and not message["more_body"]

        async def keep_alive() -> None:
            while True:
                await anyio.sleep(self._sent_at + KEEP_ALIVE_S - time.monotonic())
                if time.monotonic() - self._sent_at >= KEEP_ALIVE_S:
                    body = {"type": "http.response.body", "body": KEEP_ALIVE, "more_body": True}
                    await send_one(body)

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(keep_alive)
                await super().stream_response(send_one)
                group.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            if self.client_left or self._ended:
                raise
            ending = b"".join(frame(event, self.named) for event in self.ending())
            with anyio.CancelScope(shield=True):
                await send({"type": "http.response.body", "body": ending, "more_body": False})
            raise
