"""The plain-HTTP client (models/http1.py) against a scripted raw server.

The server is asyncio's own, answering with bytes a test writes, so each
framing (Content-Length, chunks, the end of the connection), keep-alive,
closes at every point and malformed answers can be produced exactly.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from foliko_cli.errors import ModelError, ModelTimeoutError
from foliko_cli.models import http1
from foliko_cli.models.http import HttpModelClient

JSON = {"content-type": "application/json"}


class RawServer:
    """Answers each request with what ``answer(n, request)`` returns (bytes, or
    None to close the connection without a word); records requests and connections."""

    def __init__(self, answer: Callable[[int, bytes], bytes | None]):
        self.answer = answer
        self.requests: list[bytes] = []
        self.connections = 0
        self.closed = asyncio.Event()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                reply = self.answer(len(self.requests), request)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if b"connection: close" in reply.lower() or reply.startswith(b"HTTP/1.0"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.closed.set()


def ok(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"".join(extra)
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def chunked(*chunks: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for chunk in chunks:
        out += b"%x\r\n%s\r\n" % (len(chunk), chunk)
    return out + b"0\r\n\r\n"


def client(port: int, headers: dict[str, str] = JSON, base: str = "") -> HttpModelClient:
    url = base or f"http://127.0.0.1:{port}/v1"
    return HttpModelClient("openai", url, headers, key_hint=None, secret="sekrit")


def deadline(seconds: float = 10.0) -> float:
    return asyncio.get_running_loop().time() + seconds


def run(coroutine):
    return asyncio.run(coroutine)


def failure_for(reply: bytes) -> str:
    """The error of one POST that the server answers with ``reply`` every time."""

    async def scenario():
        async with RawServer(lambda n, _: reply) as server:
            http = client(server.port)
            with pytest.raises(ModelError) as failure:
                await http.post_json("/x", {}, deadline())
            return str(failure.value)

    return run(scenario())


def test_requests_go_out_in_one_piece_and_connections_are_reused():
    async def scenario():
        async with RawServer(lambda n, _: ok(b'{"n": %d}' % n)) as server:
            http = client(server.port, {**JSON, "authorization": "Bearer sekrit"})
            answers = [
                await http.post_json("/chat/completions", {"i": i}, deadline()) for i in range(3)
            ]
            await http.aclose()
            return server, answers

    server, answers = run(scenario())
    assert answers == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nauthorization: Bearer sekrit\r\n" in first
    assert first.endswith(b'\r\n\r\n{"i":0}')


@pytest.mark.parametrize(
    "reply",
    [
        chunked(b'{"a": ', b'"b"}'),
        b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"a": "b"}',
        b"HTTP/1.0 200 OK\r\n\r\n" + b'{"a": "b"}',
        ok(gzip.compress(b'{"a": "b"}'), b"Content-Encoding: gzip\r\n"),
    ],
    ids=["chunked", "until-close", "http-1.0", "gzip"],
)
def test_every_framing_of_an_answer(reply):
    async def scenario():
        async with RawServer(lambda n, _: reply) as server:
            http = client(server.port)
            answers = [await http.post_json("/x", {}, deadline()) for _ in range(2)]
            await http.aclose()
            return answers

    assert run(scenario()) == [{"a": "b"}] * 2


def test_a_connection_the_server_closed_while_idle_is_not_reused():
    async def scenario():
        async with RawServer(lambda n, _: ok(b"{}", b"Connection: close\r\n")) as server:
            http = client(server.port)
            await http.post_json("/x", {}, deadline())
            async with asyncio.timeout(10):
                await server.closed.wait()
            await http.post_json("/x", {}, deadline())
            await http.aclose()
            return server.connections

    assert run(scenario()) == 2


def test_an_idle_connection_past_its_expiry_is_replaced(monkeypatch):
    monkeypatch.setattr(http1, "KEEPALIVE_EXPIRY", 0.0)

    async def scenario():
        async with RawServer(lambda n, _: ok(b"{}")) as server:
            http = client(server.port)
            for _ in range(2):
                await http.post_json("/x", {}, deadline())
            await http.aclose()
            return server.connections

    assert run(scenario()) == 2


def test_an_answer_cut_in_the_middle_is_a_cut_off():
    reply = b'HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 100\r\n\r\n{"partial": '

    assert "ended before the reply was complete" in failure_for(reply)


@pytest.mark.parametrize(
    ("reply", "detail"),
    [(None, "RemoteProtocolError"), (b"SPDY/9 what\r\n\r\n", "not valid HTTP")],
    ids=["closed-without-answering", "not-http"],
)
def test_no_usable_answer_is_retried_then_named(monkeypatch, reply, detail):
    monkeypatch.setattr("foliko_cli.models.http.backoff", lambda attempt: 0.0)
    monkeypatch.setattr("foliko_cli.models.http.MAX_ATTEMPTS", 2)

    async def scenario():
        async with RawServer(lambda n, _: reply) as server:
            http = client(server.port)
            with pytest.raises(ModelError) as failure:
                await http.post_json("/x", {}, deadline())
            return server, str(failure.value)

    server, message = run(scenario())
    assert len(server.requests) == 2
    assert "cannot reach openai at http://127.0.0.1" in message
    assert detail in message
    assert "sekrit" not in message


def test_a_server_that_never_answers_runs_into_the_deadline():
    """A wait bounded by what is left of the turn is the turn's timeout (504 when
    served), never a failure to reach the server, whichever timer fires first."""

    async def scenario():
        async def serve(reader, writer):
            await reader.read(1000)
            await never.wait()

        never = asyncio.Event()
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        http = client(server.sockets[0].getsockname()[1])
        with pytest.raises(ModelTimeoutError) as failure:
            await http.post_json("/x", {}, deadline(0.3))
        server.close()
        return str(failure.value)

    assert "did not answer in time; raise the turn's timeout" in run(scenario())


@pytest.mark.parametrize(
    "reply",
    [
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\ndata: {"n": 0}\n\n\r\n',
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{",
    ],
    ids=["stream", "body"],
)
def test_a_reply_that_stops_coming_runs_into_the_deadline(reply):
    """Headers came, then nothing: the turn's time ran out (not a broken stream)."""

    async def scenario():
        async with RawServer(lambda n, _: reply) as server:
            http = client(server.port)
            with pytest.raises(ModelTimeoutError) as failure:
                if b"chunked" in reply:
                    async for _ in http.events("/x", {}, deadline(0.3)):
                        pass
                else:
                    await http.post_json("/x", {}, deadline(0.3))
            return str(failure.value)

    assert "did not answer in time" in run(scenario())


def test_a_stream_is_read_as_it_arrives_and_closing_early_drops_the_connection():
    events = [b'data: {"n": %d}\n\n' % i for i in range(3)]

    async def scenario():
        async with RawServer(lambda n, _: chunked(*events)) as server:
            http = client(server.port)
            seen = []
            async for event in http.events("/x", {}, deadline()):
                seen.append(event)
                break
            async with asyncio.timeout(10):
                await server.closed.wait()
            return seen

    assert run(scenario()) == [("message", {"n": 0})]


def test_status_errors_keep_their_meaning():
    body = orjson.dumps({"error": {"message": "no such model"}})
    reply = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    assert "does not know this model or endpoint (404: no such model)" in failure_for(reply)


@pytest.mark.parametrize(
    ("url", "headers", "env"),
    [
        ("https://api.example.com/v1", JSON, {}),
        ("http://127.0.0.1:9/v1", {"authorization": "Bearer a\r\nx-evil: 1"}, {}),
        ("http://127.0.0.1:9/v1", JSON, {"HTTP_PROXY": "http://proxy.test:3128"}),
        ("http://127.0.0.1:9/v1", JSON, {"ALL_PROXY": "http://proxy.test:3128"}),
        ("http://127.0.0.1:9/v1/ü", JSON, {}),
    ],
    ids=["https", "header-with-newline", "http-proxy", "all-proxy", "non-ascii-path"],
)
def test_what_it_leaves_to_the_general_client(monkeypatch, url, headers, env):
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert http1.endpoint(url, headers) is None


def test_no_proxy_lets_a_local_server_through(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.test:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    assert http1.endpoint("http://127.0.0.1:8080/v1/chat/completions", JSON) is not None
