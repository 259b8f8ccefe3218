"""serve/sse.py in process: framing, keep-alives, a client that leaves, a
server that stops (an ASGI call with a receive and a send of the test's)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from foliko_cli.serve import sse
from foliko_cli.serve.sse import DONE, KEEP_ALIVE, EventStream


class Peer:
    """The ASGI server's side: what was sent, and a disconnect when asked."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.sent = asyncio.Event()
        self.leave = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            self.bodies.append(message["body"])
            self.sent.set()

    async def until(self, body: bytes) -> None:
        async with asyncio.timeout(10):  # a deadline, not a wait: it fails the test
            while body not in self.bodies:
                self.sent.clear()
                await self.sent.wait()


SCOPE = {"type": "http", "method": "POST", "asgi": {"spec_version": "2.3"}}


def run(stream: EventStream, peer: Peer) -> asyncio.Task[None]:
    return asyncio.ensure_future(stream(SCOPE, peer.receive, peer.send))


def test_events_are_framed_and_an_idle_stream_is_kept_alive(monkeypatch):
    monkeypatch.setattr(sse, "KEEP_ALIVE_S", 0.01)
    asyncio.run(_kept_alive())


async def _kept_alive() -> None:
    peer = Peer()
    idle = asyncio.Event()

    async def events():
        yield {"type": "response.created", "n": 1}
        await idle.wait()
        yield DONE

    task = run(EventStream(events(), named=True), peer)
    await peer.until(KEEP_ALIVE)
    idle.set()
    await task
    assert peer.bodies[0] == b'event: response.created\ndata: {"type":"response.created","n":1}\n\n'
    assert peer.bodies[-2:] == [b"data: [DONE]\n\n", b""]
    assert set(peer.bodies[1:-2]) == {KEEP_ALIVE}


def test_a_client_that_leaves_closes_the_events():
    asyncio.run(_client_leaves())


async def _client_leaves() -> None:
    peer = Peer()
    closed = asyncio.Event()

    async def events():
        try:
            yield {"a": 1}
            await asyncio.Event().wait()  # a turn that would run on
        finally:
            closed.set()

    task = run(EventStream(events()), peer)
    await peer.until(b'data: {"a":1}\n\n')
    peer.leave.set()
    await task
    assert closed.is_set()


def test_a_stream_the_server_stops_ends_with_its_ending():
    asyncio.run(_server_stops())


async def _server_stops() -> None:
    peer = Peer()

    async def events():
        yield {"a": 1}
        await asyncio.Event().wait()

    def ending():
        return [{"error": "shutting down"}, DONE]

    task = run(EventStream(events(), ending=ending), peer)
    await peer.until(b'data: {"a":1}\n\n')
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert peer.bodies[-1] == b'data: {"error":"shutting down"}\n\ndata: [DONE]\n\n'
