"""``/mcp`` of ``foliko serve`` and ``foliko mcp serve --http``: the same MCP
server over Streamable HTTP, driven by the official ``mcp`` client, behind the
API keys and the guard of every route; each user sees only their own sessions."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from pathlib import Path

import httpx2
import orjson
import pytest
from mcp_serve_support import (
    MODES,
    NOT_FOUND,
    assert_extra_hint,
    call,
    configure,
    exercise,
    exercise_errors,
    failure,
    http_client,
    seed,
)
from mcp_support import write_config
from serve.servers import ServeProcess, foliko_env, run_cli

from foliko_cli.service.facade import Foliko

KEYS = """[keys]
"key-alice" = "alice"
"key-bob" = "bob"
"key-carol" = "carol"

[users.carol]
max_tokens_per_day = 1
"""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": MODES["legacy"],
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}
TIMEOUT = 60  # the first request to /mcp loads the SDK, slow on a loaded machine


def post(url: str, **options) -> httpx2.Response:
    return httpx2.post(url, timeout=TIMEOUT, **options)


def get(url: str, **options) -> httpx2.Response:
    return httpx2.get(url, timeout=TIMEOUT, **options)


COMMANDS = {
    "serve": ("serve",),
    "mcp-serve-http": ("mcp", "serve", "--http", "--allow-write"),
}


@pytest.fixture(params=sorted(COMMANDS))
def start(request, foliko_home: Path, tmp_path: Path) -> Iterator:
    """Start ``foliko serve ARGS``, and ``foliko mcp serve --http ARGS`` (``keyed``:
    with the API keys above)."""
    started: list[ServeProcess] = []
    command = COMMANDS[request.param]

    def run(*args: str, keyed: bool = True, env: dict[str, str] | None = None) -> ServeProcess:
        if keyed:
            keys = tmp_path / "keys.toml"
            keys.write_text(KEYS)
            keys.chmod(0o600)
            args = ("--api-keys", str(keys), *args)
        environment = foliko_env(foliko_home, env)
        server = ServeProcess(list(args), environment, [], home=foliko_home, command=command)
        started.append(server)
        return server.wait_ready()

    run.command = command  # type: ignore[attr-defined]
    yield run
    for server in started:
        server.kill()


def _messages(home: Path, user: str, session_id: str) -> list[str]:
    with Foliko(home=home, user=user) as foliko:
        return [m["content"] for m in foliko.get_session(session_id).messages]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_tool_resource_and_prompt(mode: str, start, tmp_path: Path, foliko_home: Path):
    configure(tmp_path)
    seed(foliko_home, user="alice")
    server = start()

    async def main() -> None:
        async with http_client(server.url + "/mcp", mode, "key-alice") as client:
            await exercise(client, mode)

    asyncio.run(main())
    assert server.stop() == 0  # its MCP session manager stops with it
    assert "Traceback" not in server.stderr


def test_unknown_sessions_and_bad_arguments_are_tool_errors(
    start, tmp_path: Path, foliko_home: Path
):
    configure(tmp_path)
    seed(foliko_home, user="alice")
    server = start()

    async def main() -> None:
        async with http_client(server.url + "/mcp", "auto", "key-alice") as client:
            await exercise_errors(client)

    asyncio.run(main())


def test_users_see_only_their_own_sessions(start, foliko_home: Path):
    seed(foliko_home, user="alice", prefix="alice-")
    seed(foliko_home, user="bob", prefix="bob-")
    server = start()
    url = server.url + "/mcp"

    async def as_alice() -> dict:
        from mcp import MCPError

        seen: dict = {}
        async with http_client(url, "auto", "key-alice") as client:
            listed = await call(client, "list_sessions")
            seen["listed"] = [row["session_id"] for row in listed["sessions"]]
            seen["read"] = await failure(client, "read_session", {"session_id": "bob-groceries"})
            hits = await call(client, "search_sessions", {"query": "apples"})
            seen["hits"] = [hit["session_id"] for hit in hits["hits"]]
            seen["resources"] = [r.name for r in (await client.list_resources()).resources]
            with pytest.raises(MCPError) as refused:
                await client.read_resource("foliko://sessions/bob-groceries")
            seen["resource"] = refused.value.message
            arguments = {"session_id": "bob-groceries", "message": "mine now?"}
            seen["chat"] = await call(client, "chat", arguments)
        return seen

    async def as_bob() -> list[str]:
        async with http_client(url, "legacy", "key-bob") as client:
            listed = await call(client, "list_sessions")
        return [row["session_id"] for row in listed["sessions"]]

    seen = asyncio.run(as_alice())
    assert seen["listed"] == ["alice-groceries", "alice-deploy-notes"]
    assert seen["read"] == NOT_FOUND.replace("'nope'", "'bob-groceries'")
    assert seen["hits"] == ["alice-groceries", "alice-groceries"]
    assert seen["resources"] == ["alice-deploy-notes", "alice-groceries"]
    assert seen["resource"] == seen["read"]
    # The chat started a session of alice's own; bob's is as it was.
    assert seen["chat"] == "mine now?"
    assert _messages(foliko_home, "alice", "bob-groceries") == ["mine now?", "mine now?"]
    assert _messages(foliko_home, "bob", "bob-groceries") == ["buy apples and pears"] * 2
    assert asyncio.run(as_bob()) == ["bob-groceries", "bob-deploy-notes"]


def test_a_missing_or_wrong_key_is_refused(start, foliko_home: Path):
    from mcp import MCPError

    seed(foliko_home, user="alice")
    server = start()
    url = server.url + "/mcp"

    async def connect(key: str | None) -> None:
        async with http_client(url, "auto", key) as client:
            await call(client, "list_sessions")

    for key in (None, "key-mallory"):
        with pytest.raises(ExceptionGroup) as refused:
            asyncio.run(connect(key))
        assert refused.group_contains(MCPError, depth=2)
    for headers, message in (
        ({}, "no API key: send Authorization: Bearer KEY"),
        ({"Authorization": "Bearer key-mallory"}, "the API key is wrong"),
    ):
        answer = post(url, json=INITIALIZE, headers={**ACCEPT, **headers})
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["error"]["message"] == message
        assert get(url, headers=headers).status_code == 401


def test_the_guard_keeps_other_sites_out(start):
    server = start()
    url = server.url + "/mcp"
    key = {"Authorization": "Bearer key-alice", **ACCEPT}
    foreign = post(url, json=INITIALIZE, headers={**key, "Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert foreign.json()["error"]["code"] == "cross_origin_refused"
    rebound = post(url, json=INITIALIZE, headers={**key, "Host": "evil.example"})
    assert rebound.status_code == 421
    form = post(url, content=b"{}", headers={**key, "Content-Type": "text/plain;charset=UTF-8"})
    assert form.status_code == 415
    allowed = post(url, json=INITIALIZE, headers=key)
    assert allowed.status_code == 200
    assert allowed.json()["result"]["serverInfo"]["name"] == "foliko"


def test_without_keys_it_serves_every_session(start, foliko_home: Path):
    seed(foliko_home)
    server = start(keyed=False)

    async def main() -> list[str]:
        async with http_client(server.url + "/mcp", "auto") as client:
            listed = await call(client, "list_sessions")
        return [row["session_id"] for row in listed["sessions"]]

    assert asyncio.run(main()) == ["groceries", "deploy-notes"]


def test_a_chat_counts_in_the_users_quota_and_the_metrics(start):
    server = start()
    today = datetime.datetime.now(datetime.UTC).date()

    async def main() -> tuple[str, str]:
        async with http_client(server.url + "/mcp", "auto", "key-carol") as client:
            first = await call(client, "chat", {"session_id": "s", "message": "count these"})
            second = await failure(client, "chat", {"session_id": "s", "message": "and these"})
        return first, second

    first, second = asyncio.run(main())
    if datetime.datetime.now(datetime.UTC).date() != today:
        pytest.skip("the UTC day ended during the test")
    assert first == "count these"
    assert second.startswith("carol has used ")
    assert second.endswith(" tokens today, the quota is 1 a day; try again after 00:00 UTC")
    metrics = get(server.url + "/metrics", headers={"Authorization": "Bearer key-carol"})
    assert 'foliko_turn_duration_seconds_count{api="mcp"} 1' in metrics.text.splitlines()


def test_foliko_uses_another_foliko_as_an_mcp_server(
    start, tmp_path: Path, foliko_home, run_foliko
):
    seed(foliko_home, user="alice")
    server = start()
    remote = {
        "url": server.url + "/mcp",
        "headers": {"Authorization": "Bearer ${ALICE_KEY}"},
        "startup_timeout": 60,  # a loaded machine
    }
    write_config(tmp_path / "foliko.toml", {"remote": remote})
    env = {"ALICE_KEY": "key-alice", "FOLIKO_MODEL": "echo"}
    listed = run_foliko("mcp", "tools", "remote", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [row["name"] for row in orjson.loads(listed.stdout)] == [
        "remote__list_sessions",
        "remote__search_sessions",
        "remote__read_session",
        "remote__chat",
    ]
    asked = run_foliko(
        "chat", "-s", "local", '/tool remote__read_session {"session_id": "groceries"}', env=env
    )
    assert asked.returncode == 0, asked.stderr
    reply = asked.stdout.decode()
    assert reply.startswith("remote__read_session returned: # Session groceries")
    assert "buy apples and pears" in reply


def test_without_the_mcp_package_it_answers_501(start, tmp_path: Path, foliko_home: Path):
    """An ``mcp`` package that cannot be imported stands in for one not installed;
    the rest of foliko serve works as ever, and foliko mcp serve --http, which
    is nothing else, does not start (exit 2, one line)."""
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'mcp'\")\n")
    env = {"PYTHONPATH": str(shadow.parent)}
    if start.command[0] == "mcp":
        refused = run_cli(foliko_home, *start.command, "--port", "0", env=env)
        assert refused.returncode == 2
        (line,) = refused.stderr.decode().splitlines()
        assert_extra_hint(line, "foliko mcp serve", "mcp")
        return
    server = start(keyed=False, env=env)
    answer = post(server.url + "/mcp", json=INITIALIZE, headers=ACCEPT)
    assert answer.status_code == 501
    assert answer.json()["error"]["message"] == (
        "the MCP endpoint needs foliko's 'mcp' extra, which this server lacks"
    )
    assert get(server.url + "/healthz").json() == {"status": "ok"}


def test_mcp_serve_http_serves_nothing_else(start):
    server = start()
    key = {"Authorization": "Bearer key-alice"}
    answer = post(server.url + "/v1/responses", json={"input": "x"}, headers=key)
    assert answer.status_code == (404 if start.command[0] == "mcp" else 200)
    assert get(server.url + "/healthz").json() == {"status": "ok"}


def test_listening_options_need_http(foliko_home: Path):
    for option in (("--port", "9"), ("--host", "0.0.0.0"), ("--api-keys", "keys.toml")):
        refused = run_cli(foliko_home, "mcp", "serve", *option)
        assert refused.returncode == 2
        assert refused.stderr.decode() == (
            f"foliko: error: {option[0]} is for serving over HTTP; add --http\n"
        )
    exposed = run_cli(foliko_home, "mcp", "serve", "--http", "--host", "0.0.0.0", "--port", "0")
    assert exposed.returncode == 2
    assert "without --api-keys" in exposed.stderr.decode()
