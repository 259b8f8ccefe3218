"""A small HTTP/1.1 client for model servers reached over plain HTTP.

A local model server (llama.cpp, vLLM, Ollama) answers in milliseconds, and
the general-purpose client's own work for one small POST (its request and
response models, a timeout scope around every read and write, a pure-Python
parser) cost more CPU than the rest of a served turn (bench/README.md, P7).
This client writes each request in one ``write``, parses the answer with
httptools (llhttp, in C) on an asyncio ``Protocol``, and waits on one future
per step of the exchange.

It does only what a model call needs: a POST of a body already encoded to a
plain ``http://`` URL for which no proxy is configured; keep-alive
connections reused newest first while younger than ``KEEPALIVE_EXPIRY``;
answers delimited by ``Content-Length``, chunks or the end of the
connection, gzip or deflate decoded. ``endpoint`` says whether a URL and
its headers can take this path; everything else (https, proxies, a test
transport) goes through httpx2 (models/http.py decides).
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
import zlib
from collections import deque
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import httptools

KEEPALIVE_EXPIRY = 5.0
"""Seconds an idle connection is reused for (httpx's default): servers close
idle ones after a while, and a request must not race that close."""
MAX_IDLE = 20


class TransportError(Exception):
    """The exchange failed below HTTP: nothing usable was received."""


class ConnectError(TransportError):
    pass


class ReadTimeout(TransportError):
    pass


class RemoteProtocolError(TransportError):
    pass


class Headers:
    """Response headers by lower-cased name; the last value of a repeated one wins."""

    def __init__(self, items: list[tuple[bytes, bytes]]):
        self._values = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in items
        }

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._values.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values


class Endpoint:
    """Where requests to one URL go: the server's address, and everything of
    the request before its Content-Length (built once)."""

    def __init__(self, host: str, port: int, head: bytes):
        self.host = host
        self.port = port
        self.head = head


def endpoint(url: str, headers: Mapping[str, str]) -> Endpoint | None:
    """The endpoint for POSTs to ``url`` with ``headers``, when this client can
    send them; None when they need the general client."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.username or parts.password:
        return None
    if not url.isascii() or any(c in url for c in " \r\n\t"):
        return None
    if not all(_header_safe(k) and _header_safe(v) for k, v in headers.items()):
        return None
    host = parts.hostname
    proxies = urllib.request.getproxies_environment()
    # proxy_bypass_environment is undocumented and not in typeshed
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if ("http" in proxies or "all" in proxies) and not bypass(host):
        return None
    try:
        port = parts.port or 80
    except ValueError:
        return None
    shown = f"[{host}]" if ":" in host else host
    if port != 80:
        shown = f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Endpoint(host, port, _head(target, shown, headers))


def _header_safe(text: str) -> bool:
    return text.isascii() and "\r" not in text and "\n" not in text and "\0" not in text


def _head(target: str, host: str, headers: Mapping[str, str]) -> bytes:
    lines = [f"POST {target} HTTP/1.1", f"Host: {host}"]
    given = {name.lower() for name in headers}
    if "accept" not in given:
        lines.append("Accept: */*")
    if "user-agent" not in given:
        lines.append("User-Agent: foliko")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return "\r\n".join(lines).encode() + b"\r\n"


class _Connection(asyncio.Protocol):
    """One connection: at most one exchange at a time, its answer parsed as it arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.header_items: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.until_close = False
        self.body: deque[bytes] = deque()
        self.error: TransportError | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = RemoteProtocolError(f"the server's answer is not valid HTTP ({exc})")
            self.close()
        self._wake()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and self.until_close and not self.complete:
            self.complete = True
        elif not self.complete and self.error is None:
            what = "in the middle of its answer" if self.headers_done else "without answering"
            self.error = RemoteProtocolError(f"the server closed the connection {what}")
        self._wake()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_items.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        names = {name.lower() for name, _ in self.header_items}
        self.until_close = (
            b"content-length" not in names
            and b"transfer-encoding" not in names
            and self.status not in (204, 304)
            and self.status >= 200
        )
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # waiting
    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until something arrives (or the connection ends), at most ``timeout`` seconds."""
        if self.closed and not self.complete and self.error is None:
            self.error = RemoteProtocolError("the connection was closed")
        if self.closed or self.error is not None:
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            self.close()
            raise ReadTimeout(f"no answer within {timeout:.1f} s") from None

    def send(self, data: bytes) -> None:
        self._reset()
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def reusable(self) -> bool:
        return (
            not self.closed
            and self.keep_alive
            and self.complete
            and self.error is None
            and self.transport is not None
            and not self.transport.is_closing()
        )


class Response:
    """An answer whose body is read as it arrives; ``aclose`` ends the exchange."""

    def __init__(self, pool: Pool, connection: _Connection, timeout: float):
        self._pool = pool
        self._connection = connection
        self._timeout = timeout
        self.status_code = connection.status
        self.headers = Headers(connection.header_items)
        encoding = (self.headers.get("content-encoding") or "").strip().lower()
        self._decoder = _decoder(encoding)
        self._done = False

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        connection = self._connection
        while True:
            while connection.body:
                chunk = connection.body.popleft()
                yield self._decoder.decompress(chunk) if self._decoder else chunk
            if connection.complete:
                if self._decoder:
                    yield self._decoder.flush()
                self._done = True
                return
            if connection.error is not None:
                raise connection.error
            await connection.wait(self._timeout)

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    async def aiter_lines(self) -> AsyncIterator[str]:
        pending = ""
        async for chunk in self.aiter_bytes():
            pending += chunk.decode("utf-8", errors="replace")
            lines = pending.splitlines(keepends=True)
            pending = lines.pop() if lines and not lines[-1].endswith(("\n", "\r")) else ""
            for line in lines:
                yield line.rstrip("\r\n")
        if pending:
            yield pending

    async def aclose(self) -> None:
        """Gives the connection back when the answer was read whole, else closes it."""
        connection, self._connection = self._connection, None  # type: ignore[assignment]
        if connection is None:
            return
        if self._done and connection.reusable():
            self._pool.release(connection)
        else:
            connection.close()


def _decoder(encoding: str) -> zlib._Decompress | None:
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise RemoteProtocolError(f"the server answered in an encoding not asked for ({encoding})")


class Pool:
    """Keep-alive connections to one server, on one event loop."""

    def __init__(self) -> None:
        self._idle: list[_Connection] = []

    async def post(self, endpoint: Endpoint, body: bytes, timeout: float) -> Response:
        """Sends ``body``; returns once the answer's headers are in. ``timeout``
        bounds each wait (connecting, then each arrival), as httpx2's does."""
        connection = self._reused() or await self._connect(endpoint, timeout)
        connection.send(endpoint.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        try:
            while not connection.headers_done:
                if connection.error is not None:
                    raise connection.error
                await connection.wait(timeout)
            return Response(self, connection, timeout)
        except BaseException:
            connection.close()
            raise

    def _reused(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.reusable() and now - connection.idle_since < KEEPALIVE_EXPIRY:
                return connection
            connection.close()
        return None

    async def _connect(self, endpoint: Endpoint, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    _Connection, endpoint.host, endpoint.port
                )
        except TimeoutError:
            raise ConnectError(f"no connection within {timeout:.1f} s") from None
        except OSError as exc:
            raise ConnectError(str(exc) or type(exc).__name__) from None
        return connection

    def release(self, connection: _Connection) -> None:
        connection.idle_since = time.monotonic()
        self._idle.append(connection)
        while len(self._idle) > MAX_IDLE:
            self._idle.pop(0).close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
