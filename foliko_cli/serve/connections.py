"""The limits on a connection to ``foliko serve``, which uvicorn lacks or
answers in plain text: uvicorn's httptools protocol, with

- a header timeout: a connection whose request headers are not all in
  within ``header_timeout`` seconds of its first byte (or of connecting) is
  closed (408 once it sent something);
- a header-size limit: past ``max_header_bytes`` of request head, 431;
- a cap on connections: over ``max_connections`` open connections (or as
  many requests running), a request (a WebSocket upgrade too) gets 503 and
  the connection closes: uvicorn's ``limit_concurrency``, checked here since
  uvicorn answers in plain text and counts the asking connection (N would
  let N - 1 in);

every refusal in OpenAI's error shape. The idle keep-alive timeout is
uvicorn's own (``timeout_keep_alive``). The limits hold per worker.

The protocol also sends what it writes in one loop iteration as one write
(``CoalescedWrites``): uvicorn writes a response's head and its body apart,
which costs a second system call and wakes the client twice for one answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from foliko_cli.serve.errors import error_body

if TYPE_CHECKING:
    from uvicorn.server import ServerState

LINGER_S = 2.0  # a refused client still sending gets this long to read the answer


class Limits(NamedTuple):
    header_timeout: float = 10.0
    keep_alive: float = 15.0  # above the 5 s after which common clients drop an idle one
    max_connections: int = 1000
    max_header_bytes: int = 64 * 1024


class ServeConfig(uvicorn.Config):
    """uvicorn's Config carrying ``limits`` (it is pickled to each worker)."""

    def __init__(self, app: Any, *, limits: Limits, **kwargs: Any):
        super().__init__(
            app,
            http=LimitedHttpProtocol,
            timeout_keep_alive=limits.keep_alive,  # type: ignore[arg-type]  # a float works too
            limit_concurrency=limits.max_connections,
            **kwargs,
        )
        self.limits = limits


def _overloaded_app(limit: int) -> Callable[[Any, Any, Any], Awaitable[None]]:
    body = error_body(
        503,
        f"the server is at its limit of {limit:,} connections; retry in a moment",
        "server_overloaded",
    )

    async def overloaded(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", b"1"),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return overloaded


class CoalescedWrites:
    """A connection's transport whose writes wait for the end of the loop
    iteration, then go out joined; every other call goes to the transport
    (closing sends what is pending first)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class LimitedHttpProtocol(HttpToolsProtocol):
    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits: Limits = getattr(config, "limits", Limits())
        self.max_connections = self.limit_concurrency
        self.limit_concurrency = None  # checked in on_headers_complete
        self.over_limit = False
        self.header_timer: asyncio.TimerHandle | None = None
        self.reading_headers = True
        self.header_bytes = 0
        self.refused = False
        self.overloaded = _overloaded_app(self.max_connections or 0)

    # uvicorn's own connection_made takes an asyncio.Transport, narrower than
    # BaseProtocol's BaseTransport (uvicorn ignores the override error too).
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # CoalescedWrites stands in for the transport it wraps (not a subclass)
        super().connection_made(CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.reading_headers:
            self.header_bytes += len(data)
            if self.header_timer is None:
                self._arm_header_timer()
        super().data_received(data)
        if (
            self.reading_headers
            and self.header_bytes > self.limits.max_header_bytes
            and not self.transport.is_closing()
        ):
            self._refuse(
                431,
                f"the request headers are over the limit of {self.limits.max_header_bytes:,} "
                "bytes; send smaller headers",
                "request_header_fields_too_large",
            )

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, "the request is not valid HTTP/1.1", "invalid_http_request")

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.reading_headers = True
        self.header_bytes = 0

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        self.reading_headers = False
        self.header_bytes = 0
        limit = self.max_connections
        self.over_limit = limit is not None and (
            len(self.connections) > limit or len(self.tasks) >= limit
        )
        if not self.over_limit:
            super().on_headers_complete()
            return
        self.logger.warning("over the limit of %d connections: 503", limit)
        app, self.app = self.app, self.overloaded
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def _should_upgrade(self) -> bool:
        return not self.over_limit and super()._should_upgrade()

    def _unsupported_upgrade_warning(self) -> None:
        if not self.over_limit:
            super()._unsupported_upgrade_warning()

    def _arm_header_timer(self) -> None:
        self.header_timer = self.loop.call_later(
            self.limits.header_timeout, self._header_timeout_reached
        )

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _header_timeout_reached(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or not self.reading_headers:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm_header_timer()  # a pipelined request waits for the one running
            return
        if self.header_bytes == 0:
            self.transport.close()
            return
        self._refuse(
            408,
            f"the request headers did not arrive within {self.limits.header_timeout:g} s",
            "request_timeout",
        )

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer and close; a client still sending is read (and ignored) for
        a moment first, since closing on unread data resets the connection
        and loses the answer."""
        self.refused = True
        self._cancel_header_timer()
        self._unset_keepalive_if_required()
        body = error_body(status, message, code)
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.append(
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % len(body)
        )
        self.transport.write(b"".join(head) + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()
