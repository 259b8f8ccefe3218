"""``foliko mcp serve``'s scopes and audit, in-process: every tool, resource and
prompt the server lists is called by a client held to a read-only scope of
some sessions; nothing is written, nothing out of scope shows (not in a
listing, a count, a search hit or an error), and each call is in the audit
log without its content."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from foliko_cli.mcp_server.server import build_server
from foliko_cli.mcp_server.stdio import LocalBackend
from foliko_cli.service import AsyncFoliko
from foliko_cli.service.audit import Scope
from foliko_cli.storage.memory import MemoryStorage

SECRET, MISSING = "secret-x", "never-x"
HIDDEN_WORD = "kumquat"
AGENTS = {"reviewer": {"system_prompt": "You review plans.", "description": "Reviews plans"}}


async def _seeded(home: Path) -> MemoryStorage:
    store = MemoryStorage()
    async with AsyncFoliko(store, "echo", home=home) as owner:
        await owner.chat("proj-a", "the plan for the launch")
        await owner.chat("proj-b", "groceries")
        for _ in range(15):  # more and better hits than proj-a's: the limit is cut after
            await owner.chat(SECRET, f"plan plan plan {HIDDEN_WORD}")
    return store


def _snapshot(store: MemoryStorage) -> dict:
    return {sid: (r.revision, len(r.messages)) for sid, r in store._records.items()}


def _arguments(schema: dict, session_id: str, query: str) -> dict:
    given = {"session_id": session_id, "query": query, "message": "hi"}
    return {name: given[name] for name in schema.get("required", [])}


async def _answer(client, name: str, arguments: dict) -> str:
    from mcp import MCPError

    try:
        result = await client.call_tool(name, arguments)
    except MCPError as exc:
        return f"protocol error {exc.code}: {exc.message}"
    return orjson.dumps(result.model_dump(mode="json")).decode()


async def _read(client, uri: str) -> str:
    from mcp import MCPError

    try:
        return (await client.read_resource(uri)).model_dump_json()
    except MCPError as exc:
        return f"protocol error {exc.code}: {exc.message}"


def _enumerate(home: Path, scope: Scope):
    """Every listed tool (twice: an out-of-scope session and a missing one), every
    resource and template, every prompt; what each answered, and the audit."""
    from mcp import Client

    async def main():
        store = await _seeded(home)
        before = _snapshot(store)
        service = AsyncFoliko(store, "echo", home=home, agents=AGENTS, scope=scope)
        seen: dict = {}
        async with service, Client(build_server(LocalBackend(service))) as client:
            tools = (await client.list_tools()).tools
            seen["tools"] = {tool.name: tool for tool in tools}
            for tool in tools:
                for session_id in (SECRET, MISSING):
                    arguments = _arguments(tool.input_schema, session_id, HIDDEN_WORD)
                    answer = await _answer(client, tool.name, arguments)
                    seen[(tool.name, session_id)] = answer.replace(session_id, "ID")
                seen[(tool.name, "proj-a")] = await _answer(
                    client, tool.name, _arguments(tool.input_schema, "proj-a", "plan")
                )
            seen["chat"] = await _answer(client, "chat", {"session_id": "proj-a", "message": "x"})
            seen["nothing"] = await _answer(client, "nothing", {})
            seen["limited"] = await client.call_tool(
                "search_sessions", {"query": "plan", "limit": 1}
            )
            seen["listed"] = await client.call_tool("list_sessions", {"limit": 2})
            seen["resources"] = (await client.list_resources()).model_dump_json()
            seen["templates"] = (await client.list_resource_templates()).model_dump_json()
            for session_id in (SECRET, MISSING):
                read = await _read(client, f"foliko://sessions/{session_id}")
                seen[("resource", session_id)] = read.replace(session_id, "ID")
            seen["prompts"] = (await client.list_prompts()).model_dump_json()
            seen["prompt"] = (
                await client.get_prompt("reviewer", {"message": "m"})
            ).model_dump_json()
        assert _snapshot(store) == before or scope.write
        return seen, before, _snapshot(store), await capabilities_read(store)

    return asyncio.run(main())


async def capabilities_read(store):
    from foliko_cli.storage import capabilities

    return await capabilities.audit_read(store)


def test_a_read_only_client_of_some_sessions_writes_nothing_and_sees_nothing_else(tmp_path):
    seen, before, after, audit = _enumerate(tmp_path, Scope.of(False, ["proj-*"]))
    assert after == before  # nothing written by any call
    tools = seen["tools"]
    assert sorted(tools) == ["list_sessions", "read_session", "search_sessions"]
    for tool in tools.values():
        hints = tool.annotations
        assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
            True,
            False,
            True,
        )
    for name in tools:  # an out-of-scope session answers exactly as a missing one
        assert seen[(name, SECRET)] == seen[(name, MISSING)], name
    assert seen[("resource", SECRET)] == seen[("resource", MISSING)]
    assert "not found" in seen[("resource", SECRET)]
    # chat is not offered: calling it is calling a tool that does not exist
    assert seen["chat"].replace("'chat'", "'X'") == seen["nothing"].replace("'nothing'", "'X'")
    assert "unknown tool" in seen["chat"]
    hits = seen["limited"].structured_content["hits"]
    assert [hit["session_id"] for hit in hits] == ["proj-a"]  # kept, then cut to the limit
    listed = seen["listed"].structured_content
    assert [row["session_id"] for row in listed["sessions"]] == ["proj-b", "proj-a"]
    assert listed["has_more"] is False  # the count leaves the hidden one out
    everything = repr(list(seen.values()))
    assert SECRET not in everything and HIDDEN_WORD not in seen[("search_sessions", MISSING)]
    assert "secret" not in everything
    assert "proj-a" in seen["resources"] and SECRET not in seen["resources"]

    # the audit: every call, by the host's name, the sessions it read, no content
    calls = [entry.call for entry in audit]
    assert calls.count("tools/call read_session") == 3
    assert "resources/read foliko://sessions/proj-a" not in calls
    assert {"tools/list", "resources/list", "prompts/get reviewer"} <= set(calls)
    reads = [e for e in audit if e.call == "tools/call read_session" and e.session_ids]
    assert [e.session_ids for e in reads] == [("proj-a",)]
    assert {entry.client for entry in audit} == {"mcp:mcp"}
    assert all(len(entry.result_sha256) == 64 for entry in audit)
    assert HIDDEN_WORD not in repr(audit) and "the plan for" not in repr(audit)
    assert all(SECRET not in entry.session_ids for entry in audit)
    outcome = {e.call: e.outcome for e in audit}
    assert outcome["tools/call chat"] == "error" and outcome["tools/list"] == "ok"


def test_with_write_allowed_chat_is_offered_and_still_kept_in_scope(tmp_path):
    seen, before, after, audit = _enumerate(tmp_path, Scope.of(True, ["proj-*"]))
    chat = seen["tools"]["chat"].annotations
    assert (chat.read_only_hint, chat.destructive_hint, chat.idempotent_hint) == (
        False,
        False,
        False,
    )
    assert seen[("chat", SECRET)] == seen[("chat", MISSING)]
    assert "not found" in seen[("chat", SECRET)]
    assert after[SECRET] == before[SECRET] and MISSING not in after
    assert after["proj-a"][1] == before["proj-a"][1] + 4  # its two chats
    assert ("proj-a",) in [e.session_ids for e in audit if e.call == "tools/call chat"]


def test_session_patterns_by_date_and_bad_patterns():
    assert Scope.of(False, ["since:2026-01-01"]).sees("x", 1_767_225_600_000)
    assert not Scope.of(False, ["since:2026-01-01"]).sees("x", 1_767_225_599_999)
    assert not Scope.of(False, ["since:2026-01-01", "a*"]).sees("b", None)
    assert Scope.of(False, ["since:2026-01-01", "a*"]).sees("ab", None)
    both = Scope.of(True, ["a*"]).narrowed(Scope.of(False, ["*b"]))
    assert (both.write, both.sees("ab"), both.sees("a"), both.sees("b")) == (
        False,
        True,
        False,
        False,
    )
    assert Scope.of(False, ["a*"]).sees(".foliko/trash/delete/abc12345/a1")
    assert not Scope.of(False, ["a*"]).sees(".foliko/trash/delete/abc12345/b1")
    from foliko_cli.errors import UsageError

    with pytest.raises(UsageError, match="'since:someday': 'someday' is not a date"):
        Scope.of(False, ["since:someday"])
    with pytest.raises(UsageError, match="is empty"):
        Scope.of(False, [" "])
