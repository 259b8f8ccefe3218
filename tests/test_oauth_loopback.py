"""The OAuth loopback listener takes only the redirect of the authorization it
started (its ``state``): any other callback, code or error, is answered 400
and ignored until the right one comes."""

from __future__ import annotations

import asyncio

from foliko_cli.mcp.oauth.loopback import Loopback


async def call(port: int, query: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /callback?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer.split(b"\r\n", 1)[0]


def test_only_the_callback_with_the_authorizations_state_counts():
    async def scenario() -> None:
        loopback = Loopback()
        await loopback.start()
        try:
            loopback.expect("https://as.example/authorize?client_id=c&state=s-123&scope=x")
            waiting = asyncio.ensure_future(loopback.result())
            for forged in ("code=evil&state=other", "code=evil", "error=access_denied&state=x"):
                assert await call(loopback.port, forged) == b"HTTP/1.1 400 Bad Request"
            await asyncio.sleep(0)
            assert not waiting.done()
            assert await call(loopback.port, "code=good&state=s-123") == b"HTTP/1.1 200 OK"
            assert await asyncio.wait_for(waiting, 5) == {"code": "good", "state": "s-123"}
        finally:
            await loopback.close()

    asyncio.run(scenario())
