"""The sessions as resources, in-process (the server of ``foliko mcp serve``
with a client of the ``mcp`` package on it, no transport): pages, and ids
that a URI must encode."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp_serve_support import MODES

from foliko_cli.mcp_server.arguments import since_ms
from foliko_cli.mcp_server.resources import PAGE_SIZE
from foliko_cli.mcp_server.server import build_server
from foliko_cli.mcp_server.stdio import LocalBackend
from foliko_cli.service import AsyncFoliko


async def _with_client(home: Path, mode: str, work, session_ids: list[str]):
    from mcp import Client

    async with AsyncFoliko("memory", "echo", home=home) as service:
        for session_id in session_ids:
            await service.create_session(session_id, messages=[])
        async with Client(build_server(LocalBackend(service)), mode=mode) as client:
            return await work(client)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_resources_come_by_name_a_page_at_a_time(mode: str, foliko_home: Path):
    names = [f"s{number:03}" for number in range(2 * PAGE_SIZE + 30)]

    async def pages(client) -> list[list[str]]:
        found, cursor = [], None
        while True:
            page = await client.list_resources(cursor=cursor)
            found.append([resource.name for resource in page.resources])
            cursor = page.next_cursor
            if cursor is None:
                return found

    found = asyncio.run(_with_client(foliko_home, mode, pages, list(reversed(names))))
    assert [len(page) for page in found] == [PAGE_SIZE, PAGE_SIZE, 30]
    assert [name for page in found for name in page] == names


def test_a_session_id_is_percent_encoded_in_its_uri(foliko_home: Path):
    odd = "notes/2025 q1 ü?#"

    async def work(client):
        (resource,) = (await client.list_resources()).resources
        read = await client.read_resource(resource.uri)
        return resource, read.contents[0].text

    resource, text = asyncio.run(_with_client(foliko_home, "auto", work, [odd]))
    assert resource.uri == "foliko://sessions/notes%2F2025%20q1%20%C3%BC%3F%23"
    assert resource.name == odd
    assert text.startswith(f"# Session {odd}\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", 1_000_000 - 90_000),
        ("1d12h", 1_000_000 - 129_600_000),
        ("2025-06-01", 1_748_736_000_000),
        ("2025-06-01T12:00:00Z", 1_748_779_200_000),
        ("2025-06-01T14:00:00+02:00", 1_748_779_200_000),
        ("yesterday", None),
        ("7 days", None),
        ("", None),
    ],
)
def test_since_is_a_duration_ago_or_an_iso_time(text: str, expected: int | None):
    assert since_ms(text, now=1_000_000) == expected
