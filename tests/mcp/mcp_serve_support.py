"""What the tests of foliko's own MCP server share: the sessions and agents
they start from, clients of the official ``mcp`` package for stdio and
Streamable HTTP, and one walk through every tool, resource and prompt that
both transports must pass alike."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
from mcp_support import write_config
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION

from foliko_cli.service.facade import Foliko

FOLIKO_BIN = Path(sys.executable).with_name("foliko")
# What the installed SDK negotiates: its newest version of each protocol era.
MODES = {"auto": LATEST_MODERN_VERSION, "legacy": LATEST_HANDSHAKE_VERSION}
AGENTS = {
    "reviewer": {"system_prompt": "You review deployment plans.", "description": "Reviews plans"},
    "plain": {"model": "echo"},
}
READ_ONLY_TOOLS = ("list_sessions", "search_sessions", "read_session")
NOT_FOUND = "session 'nope' not found; call list_sessions to see the sessions that exist"


def configure(directory: Path) -> None:
    """The foliko.toml the servers read: two agents."""
    write_config(directory / "foliko.toml", {}, agents=AGENTS)


def seed(home: Path, user: str | None = None, prefix: str = "") -> None:
    """Two sessions: ``deploy-notes`` (two turns), then ``groceries`` (one)."""
    with Foliko(home=home, model="echo", user=user, notify=lambda message: None) as foliko:
        foliko.chat(prefix + "deploy-notes", "how do we deploy the app")
        foliko.chat(prefix + "deploy-notes", "and how do we roll back")
        foliko.chat(prefix + "groceries", "buy apples and pears")


def server_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "FOLIKO_MODEL": "echo", **extra}


@contextlib.asynccontextmanager
async def stdio_client(
    mode: str, *global_args: str, env: dict | None = None, serve_args=("--allow-write",)
):
    """``foliko [global_args] mcp serve [serve_args]`` as a subprocess, and a client on it."""
    from mcp import Client, StdioServerParameters

    parameters = StdioServerParameters(
        command=str(FOLIKO_BIN),
        args=[*global_args, "mcp", "serve", *serve_args],
        env=env or server_env(),
        cwd=os.getcwd(),
    )
    async with Client(parameters, mode=mode) as client:
        yield client


@contextlib.asynccontextmanager
async def http_client(url: str, mode: str, key: str | None = None) -> AsyncIterator:
    """A client on ``url`` over Streamable HTTP, sending ``key`` as the bearer token."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


async def call(client, name: str, arguments: dict | None = None):
    """A tool call that must succeed: its structured content, else its text."""
    result = await client.call_tool(name, arguments or {})
    assert not result.is_error, result.content
    assert [block.type for block in result.content] == ["text"]
    if result.structured_content is not None:
        assert orjson.loads(result.content[0].text) == result.structured_content
        return result.structured_content
    return result.content[0].text


async def failure(client, name: str, arguments: dict) -> str:
    """A tool call that must fail as a result (not a protocol error): its one line."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, result.content
    (block,) = result.content
    assert block.type == "text" and "\n" not in block.text
    return block.text


async def exercise(client, mode: str, prefix: str = "") -> None:
    """Every tool, resource and prompt, on the sessions ``seed`` made."""
    assert client.session.protocol_version == MODES[mode]
    deploy, groceries = prefix + "deploy-notes", prefix + "groceries"

    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == ["chat", "list_sessions", "read_session", "search_sessions"]
    for name, tool in tools.items():
        assert tool.annotations.read_only_hint is (name in READ_ONLY_TOOLS), name
        assert tool.description and tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
    assert tools["chat"].annotations.destructive_hint is False
    assert tools["chat"].input_schema["required"] == ["session_id", "message"]
    assert tools["search_sessions"].input_schema["required"] == ["query"]
    assert tools["read_session"].input_schema["required"] == ["session_id"]
    assert "required" not in tools["list_sessions"].input_schema

    listed = await call(client, "list_sessions")
    assert [row["session_id"] for row in listed["sessions"]] == [groceries, deploy]
    assert listed["has_more"] is False
    row = listed["sessions"][1]
    assert row["uri"] == f"foliko://sessions/{deploy}"
    assert (row["messages"], row["preview"]) == (4, "and how do we roll back")
    assert row["created_at"].endswith("Z") and row["updated_at"] >= row["created_at"]
    first = await call(client, "list_sessions", {"limit": 1})
    assert [r["session_id"] for r in first["sessions"]] == [groceries]
    assert first["has_more"] is True
    assert (await call(client, "list_sessions", {"since": "1d"}))["sessions"] == listed["sessions"]
    assert (await call(client, "list_sessions", {"since": "2999-01-01"}))["sessions"] == []

    found = (await call(client, "search_sessions", {"query": "deploy"}))["hits"]
    assert {(hit["session_id"], hit["message"], hit["role"]) for hit in found} == {
        (deploy, 1, "user"),
        (deploy, 2, "assistant"),
    }
    assert found[0]["marked"] == "how do we [deploy] the app"
    assert found[0]["uri"] == f"foliko://sessions/{deploy}"
    only_user = await call(client, "search_sessions", {"query": "deploy", "role": "user"})
    assert [hit["role"] for hit in only_user["hits"]] == ["user"]
    limited = await call(client, "search_sessions", {"query": "deploy", "limit": 1})
    assert len(limited["hits"]) == 1
    future = {"query": "apples", "since": "2999-01-01T00:00:00Z"}
    assert (await call(client, "search_sessions", future))["hits"] == []

    whole = await call(client, "read_session", {"session_id": deploy})
    assert whole.startswith(f"# Session {deploy}\n")
    assert "## 1. User" in whole and "## 4. Assistant · echo" in whole
    assert "how do we deploy the app" in whole
    last = await call(client, "read_session", {"session_id": deploy, "turns": 1})
    assert "## 3. User" in last and "## 1. User" not in last
    assert await call(client, "read_session", {"session_id": deploy, "turns": 9}) == whole

    reply = await call(client, "chat", {"session_id": deploy, "message": "any risks?"})
    assert reply == "any risks?"  # the echo model
    after = await call(client, "read_session", {"session_id": deploy, "turns": 1})
    assert "## 5. User" in after and "any risks?" in after
    assert await call(client, "chat", {"session_id": prefix + "fresh", "message": "hi"}) == "hi"
    names = [r["session_id"] for r in (await call(client, "list_sessions"))["sessions"]]
    assert names == [prefix + "fresh", deploy, groceries]

    resources = (await client.list_resources()).resources
    assert [r.name for r in resources] == sorted([prefix + "fresh", deploy, groceries])
    assert resources[0].uri == f"foliko://sessions/{resources[0].name}"
    assert {r.mime_type for r in resources} == {"text/markdown"}
    by_name = {r.name: r for r in resources}
    assert by_name[groceries].description == "buy apples and pears"
    assert by_name[groceries].annotations.last_modified.endswith("Z")
    read = await client.read_resource(f"foliko://sessions/{deploy}")
    (contents,) = read.contents
    assert (contents.uri, contents.mime_type) == (f"foliko://sessions/{deploy}", "text/markdown")
    assert contents.text == await call(client, "read_session", {"session_id": deploy})
    (template,) = (await client.list_resource_templates()).resource_templates
    assert template.uri_template == "foliko://sessions/{session_id}"
    assert template.mime_type == "text/markdown"

    prompts = {prompt.name: prompt for prompt in (await client.list_prompts()).prompts}
    assert sorted(prompts) == ["plain", "reviewer"]
    assert prompts["reviewer"].description == "Reviews plans"
    assert prompts["plain"].description == "The instructions of foliko's agent plain"
    (argument,) = prompts["reviewer"].arguments
    assert (argument.name, argument.required) == ("message", False)
    got = await client.get_prompt("reviewer", {"message": "check this plan"})
    assert got.description == "Reviews plans"
    assert [(m.role, m.content.text) for m in got.messages] == [
        ("user", "You review deployment plans."),
        ("user", "check this plan"),
    ]
    bare = await client.get_prompt("plain")
    assert [m.content.text for m in bare.messages] == ["Act as the agent plain."]


async def exercise_errors(client) -> None:
    """Unknown sessions and bad arguments are tool errors; unknown names protocol errors."""
    from mcp import MCPError
    from mcp_types import INVALID_PARAMS

    assert await failure(client, "read_session", {"session_id": "nope"}) == NOT_FOUND
    bad = {
        ("read_session", "{}"): "session_id is required",
        ("read_session", '{"session_id": "x", "turns": 0}'): (
            "turns must be a whole number of 1 or more, not 0"
        ),
        ("read_session", '{"session_id": 7}'): "session_id must be a non-empty string, not 7",
        ("list_sessions", '{"limit": 0}'): "limit must be a whole number from 1 to 1000, not 0",
        ("list_sessions", '{"limit": "ten"}'): (
            "limit must be a whole number from 1 to 1000, not 'ten'"
        ),
        ("list_sessions", '{"limit": 2.5}'): "limit must be a whole number from 1 to 1000, not 2.5",
        ("list_sessions", '{"since": "yesterday"}'): (
            "since must be a duration (7d, 12h, 30m) or an ISO 8601 time "
            "(2025-06-01T12:00:00Z), not 'yesterday'"
        ),
        ("list_sessions", '{"sort": "name"}'): (
            "unknown argument 'sort'; this tool takes limit, since"
        ),
        ("search_sessions", '{"query": " "}'): "query must be a non-empty string, not ' '",
        ("search_sessions", '{"query": "x", "role": "robot"}'): (
            "role must be one of assistant, system, tool, user, not 'robot'"
        ),
        ("search_sessions", '{"query": "x", "limit": 101}'): (
            "limit must be a whole number from 1 to 100, not 101"
        ),
        ("chat", '{"session_id": "s"}'): "message is required",
        ("chat", '{"session_id": "a\\u0007b", "message": "hi"}'): (
            "invalid session id 'a\\x07b': it contains the control character U+0007; "
            "use printable characters only"
        ),
    }
    for (name, arguments), expected in bad.items():
        assert await failure(client, name, orjson.loads(arguments)) == expected, (name, arguments)
    assert (await call(client, "list_sessions", {"limit": 3.0}))["has_more"] is False

    refusals = [
        lambda: client.call_tool("delete_sessions", {}),
        lambda: client.read_resource("foliko://sessions/nope"),
        lambda: client.read_resource("file:///etc/passwd"),
        lambda: client.get_prompt("nope"),
        lambda: client.get_prompt("reviewer", {"tone": "stern"}),
    ]
    messages = []
    for refused in refusals:
        try:
            await refused()
        except MCPError as exc:
            assert exc.code == INVALID_PARAMS
            messages.append(exc.message)
        else:
            raise AssertionError("no protocol error")
    assert messages == [
        "unknown tool 'delete_sessions'; the tools are list_sessions, search_sessions, "
        "read_session, chat",
        NOT_FOUND,
        "unknown resource 'file:///etc/passwd'; write foliko://sessions/{session_id}",
        "unknown prompt 'nope'; the prompts are the agents (plain, reviewer)",
        "prompt 'reviewer' has no argument 'tone'; it takes message",
    ]
    # the server goes on answering
    assert (await call(client, "list_sessions"))["has_more"] is False


def assert_extra_hint(line: str, what: str, extra: str) -> None:
    """``line`` says ``what`` needs ``extra`` and the command that installs it,
    for the interpreter running foliko (a process's own: the same file as this
    one, whichever name it went by)."""
    from foliko_cli.common.extras import install_command

    expected = install_command(extra)
    assert expected is not None
    head = f"foliko: error: {what} needs the {extra!r} extra; install it with: "
    assert line.startswith(head), line
    python, _, rest = line[len(head) :].partition(" ")
    assert rest == expected.partition(" ")[2], line
    assert os.path.samefile(python, expected.partition(" ")[0])
