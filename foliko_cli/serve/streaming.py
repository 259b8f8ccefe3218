"""A server-sent-events answer that ends properly when the server stops.

When shutdown's grace runs out, uvicorn cancels the requests still running:
a plain stream would just stop, and the client could not tell a cut from an
end. This one sends its ``ending`` (an error event saying the server is
shutting down, then ``[DONE]``) before it goes, shielded from the
cancellation that is ending it (unless the client left: then there is
no one to tell).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Send


class EventStream(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterable[bytes], ending: Callable[[], bytes], **kwargs):
        super().__init__(events, headers={"cache-control": "no-store", **kwargs.pop("headers", {})})
        self.ending = ending
        self.client_left = False

    async def listen_for_disconnect(self, receive: Receive) -> None:
        await super().listen_for_disconnect(receive)
        self.client_left = True

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except anyio.get_cancelled_exc_class():
            if self.client_left:
                raise
            with anyio.CancelScope(shield=True):
                body = {"type": "http.response.body", "body": self.ending(), "more_body": False}
                await send(body)
            raise
