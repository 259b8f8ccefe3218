"""The server of ``foliko mcp serve`` in-process, a client of the ``mcp``
package on it and no transport: resource pages, ids a URI must encode,
``since``, and the failures a real process can hardly be made to show."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from mcp_serve_support import MODES, failure

from foliko_cli.mcp_server.arguments import since_ms
from foliko_cli.mcp_server.resources import PAGE_SIZE
from foliko_cli.mcp_server.server import build_server
from foliko_cli.mcp_server.stdio import LocalBackend
from foliko_cli.service import AsyncFoliko
from foliko_cli.storage.jsonfile import file_name


async def _with_client(service: AsyncFoliko, work, *, mode: str = "auto", backend=None):
    from mcp import Client

    async with service, Client(build_server(backend or LocalBackend(service)), mode=mode) as client:
        return await work(client)


async def _created(service: AsyncFoliko, session_ids: list[str]) -> AsyncFoliko:
    for session_id in session_ids:
        await service.create_session(session_id, messages=[])
    return service


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

    async def main():
        service = await _created(AsyncFoliko("memory", "echo", home=foliko_home), names[::-1])
        return await _with_client(service, pages, mode=mode)

    found = asyncio.run(main())
    assert [len(page) for page in found] == [PAGE_SIZE, PAGE_SIZE, 30]
    assert [name for page in found for name in page] == names


def test_a_session_id_is_percent_encoded_in_its_uri(foliko_home: Path):
    odd = "notes/2025 q1 ü?#"

    async def work(client):
        (resource,) = (await client.list_resources()).resources
        read = await client.read_resource(resource.uri)
        return resource, read.contents[0].text

    async def main():
        service = await _created(AsyncFoliko("memory", "echo", home=foliko_home), [odd])
        return await _with_client(service, work)

    resource, text = asyncio.run(main())
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


def test_a_corrupt_session_is_listed_as_unreadable_and_reads_as_an_error(tmp_path: Path):
    from mcp import MCPError
    from mcp_types import INTERNAL_ERROR

    store = tmp_path / "store"

    async def work(client):
        listed = await client.call_tool("list_sessions", {})
        read = await failure(client, "read_session", {"session_id": "broken"})
        (resource,) = (await client.list_resources()).resources
        with pytest.raises(MCPError) as refused:
            await client.read_resource("foliko://sessions/broken")
        return listed.structured_content["sessions"], read, resource, refused.value

    async def main():
        service = await _created(AsyncFoliko({"type": "json", "path": str(store)}), ["broken"])
        (store / file_name("broken")).write_bytes(b"{bad")
        return await _with_client(service, work)

    (row,), read, resource, refused = asyncio.run(main())
    assert row["session_id"] == "broken" and "corrupt" in row["error"]
    assert read.startswith("session 'broken' is damaged (") and "nothing was written" in read
    assert resource.description == f"UNREADABLE: {row['error']}"
    assert (refused.code, refused.message) == (INTERNAL_ERROR, read)


def test_an_agent_the_config_gets_wrong_fails_the_prompts_naming_it(foliko_home: Path):
    from mcp import MCPError
    from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

    agents = {"bad": {"colour": "red"}}

    async def work(client):
        errors = []
        for ask in (client.list_prompts, lambda: client.get_prompt("bad")):
            with pytest.raises(MCPError) as refused:
                await ask()
            errors.append((refused.value.code, refused.value.message))
        return errors

    service = AsyncFoliko("memory", "echo", home=foliko_home, agents=agents)
    problem = (
        "unknown key 'colour' in [agents.bad] (known: system_prompt, model, tools, skills, "
        "description, mcp_servers); fix or remove it"
    )
    assert asyncio.run(_with_client(service, work)) == [
        (INTERNAL_ERROR, problem),
        (INVALID_PARAMS, problem),
    ]


def test_an_unexpected_failure_is_an_error_result_and_a_log_line(
    foliko_home: Path, caplog: pytest.LogCaptureFixture
):
    class Broken(LocalBackend):
        async def turn(self, request, service, session_id, message, if_busy):
            raise RuntimeError("the wiring is loose")

    service = AsyncFoliko("memory", "echo", home=foliko_home)

    async def work(client):
        return await failure(client, "chat", {"session_id": "s", "message": "hi"})

    with caplog.at_level(logging.ERROR, logger="foliko.mcp_server"):
        text = asyncio.run(_with_client(service, work, backend=Broken(service)))
    assert text == "chat failed: internal error"
    assert "the wiring is loose" in caplog.text


def test_chat_takes_a_busy_policy_and_refuses_an_unknown_one(foliko_home: Path):
    service = AsyncFoliko("memory", "echo", home=foliko_home)

    async def work(client):
        bad = {"session_id": "s", "message": "hi", "if_busy": "later"}
        unknown = await failure(client, "chat", bad)
        async with service.storage.lock("s", 30):  # another turn holds it
            busy = {"session_id": "s", "message": "hi", "if_busy": "reject"}
            rejected = await failure(client, "chat", busy)
        sent = await client.call_tool("chat", {**busy, "if_busy": "interrupt"})
        return unknown, rejected, sent

    unknown, rejected, sent = asyncio.run(_with_client(service, work))
    assert "if_busy must be one of wait, reject, interrupt, not 'later'" in unknown
    assert "session 's' is busy with another turn" in rejected
    assert not sent.is_error and sent.content[0].text == "hi"
