"""Where foliko's layer makes up for the ``mcp`` SDK (see docs/mcp.md, Conformance):
a 2025-03-26 server's metadata whose issuer sits under a path of its origin,
and the server's GET stream answered before foliko's first request. The
conformance suite runs both for real (test_mcp_conformance.py)."""

from __future__ import annotations

import asyncio

import httpx2
import pytest

from foliko_cli.mcp.oauth.provider import legacy_metadata
from foliko_cli.mcp.transport import ListenGate

ORIGIN = "http://mcp.example:8080"
LEGACY = f"{ORIGIN}/.well-known/oauth-authorization-server"


async def _handed_on(url: str, body: dict, status: int = 200) -> dict | None:
    request = httpx2.Request("GET", url)
    response = httpx2.Response(status, json=body, request=request)
    handed = await legacy_metadata(request, response)
    return handed.json() if handed.status_code == 200 else None


def _metadata(issuer: str) -> dict:
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
    }


def test_an_issuer_under_the_origin_is_the_origins_on_the_legacy_path():
    handed = asyncio.run(_handed_on(LEGACY, _metadata(f"{ORIGIN}/oauth")))
    assert handed == {**_metadata(f"{ORIGIN}/oauth"), "issuer": ORIGIN}


@pytest.mark.parametrize(
    ("url", "issuer"),
    [
        (LEGACY, "http://elsewhere.example/oauth"),  # another origin: the SDK refuses it
        (LEGACY, "http://mcp.example:9090/oauth"),  # another port is another origin
        (LEGACY, "https://mcp.example:8080/oauth"),  # and another scheme
        (LEGACY, ORIGIN),  # the origin itself: nothing to do
        (f"{ORIGIN}/.well-known/oauth-authorization-server/oauth", f"{ORIGIN}/oauth"),
        (f"{ORIGIN}/.well-known/openid-configuration", f"{ORIGIN}/oauth"),
    ],
)
def test_anything_else_is_handed_on_as_it_came(url: str, issuer: str):
    assert asyncio.run(_handed_on(url, _metadata(issuer))) == _metadata(issuer)


def test_a_refusal_or_a_body_that_is_not_metadata_is_handed_on():
    assert asyncio.run(_handed_on(LEGACY, _metadata(f"{ORIGIN}/oauth"), status=404)) is None
    assert asyncio.run(_handed_on(LEGACY, {"no": "issuer"})) == {"no": "issuer"}


def _answer(method: str, url: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    return httpx2.Response(200, headers=headers, request=httpx2.Request(method, url))


def test_the_first_request_waits_for_the_servers_stream_once_it_gave_a_session():
    async def main() -> list[str]:
        gate = ListenGate(f"{ORIGIN}/mcp")
        order: list[str] = []
        await gate.on_response(_answer("GET", f"{ORIGIN}/.well-known/oauth-protected-resource"))
        await gate.on_response(_answer("POST", f"{ORIGIN}/mcp", {"mcp-session-id": "s1"}))

        async def first_request() -> None:
            await gate.wait()
            order.append("request")

        waiting = asyncio.ensure_future(first_request())
        await asyncio.sleep(0)  # let it reach the gate
        assert not waiting.done()  # not past it: no GET of /mcp was answered yet
        order.append("stream")
        await gate.on_response(_answer("GET", f"{ORIGIN}/mcp"))
        await waiting
        return order

    assert asyncio.run(main()) == ["stream", "request"]


def test_without_a_session_nothing_waits():
    async def main() -> None:
        gate = ListenGate(f"{ORIGIN}/mcp")
        await gate.on_response(_answer("POST", f"{ORIGIN}/mcp"))
        await asyncio.wait_for(gate.wait(), 1)

    asyncio.run(main())
