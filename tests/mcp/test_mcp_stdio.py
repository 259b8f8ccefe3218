"""MCP tools over stdio, against the real server in stdio_server.py."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from mcp_support import stdio_server

from foliko_cli.errors import TurnTimeoutError
from foliko_cli.service.facade import Foliko

CALL_TIMEOUT = 1.5
EXIT_WAIT_S = 15


def _facade(home: Path, servers: dict, **options) -> Foliko:
    """Every call approved, as with --yes: these tests are about calls (approval
    has test_mcp_approval.py)."""
    return Foliko("memory", "echo", home=home, mcp_servers=servers, approve_all=True, **options)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Foliko]:
    """One facade for the module, as a long-lived process keeps one."""
    home = tmp_path_factory.mktemp("mcp-home")
    facade = _facade(home, {"t": stdio_server(call_timeout=CALL_TIMEOUT)}, notify=lambda m: None)
    yield facade
    facade.close()


def _tool_messages(facade: Foliko, session_id: str) -> list[dict]:
    return [m for m in facade.get_session(session_id).messages if m["role"] == "tool"]


def _pid(facade: Foliko, session_id: str) -> int:
    return int(facade.chat(session_id, "/tool t__pid").message.split(": ", 1)[1])


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_turn_calls_the_tool_and_the_call_is_stored(shared: Foliko):
    result = shared.chat("sum", '/tool t__add {"a": 2, "b": 3}')
    assert result.message == "t__add returned: 5"
    call, answer = [m for m in shared.get_session("sum").messages if m["role"] != "user"][:2]
    assert call["tool_calls"][0]["name"] == "t__add"
    assert call["tool_calls"][0]["arguments"] == {"a": 2, "b": 3}
    assert answer["role"] == "tool"
    assert answer["tool_call_id"] == call["tool_calls"][0]["id"]
    assert answer["content"] == "5"
    assert "is_error" not in answer
    assert answer["request_id"] == result.request_id
    assert answer["trace_id"] == result.trace_id


def test_the_server_is_started_once_and_reused_across_turns(shared: Foliko):
    first = _pid(shared, "reuse")
    assert _pid(shared, "reuse") == first
    assert _pid(shared, "other-session") == first


def test_an_is_error_result_goes_back_to_the_model_as_an_error(shared: Foliko):
    shared.chat("refused", '/tool t__refuse {"reason": "no way"}')
    (message,) = _tool_messages(shared, "refused")
    assert message["is_error"] is True
    assert "no way" in message["content"]
    assert "reported an error" in message["content"]


def test_bad_arguments_are_a_tool_error_before_the_server_is_called(shared: Foliko):
    shared.chat("bad-args", '/tool t__add {"a": "two"}')
    (message,) = _tool_messages(shared, "bad-args")
    assert message["is_error"] is True
    assert "invalid arguments for 't__add'" in message["content"]


def test_an_image_is_described_in_the_result_text(shared: Foliko):
    shared.chat("picture", "/tool t__picture")
    (message,) = _tool_messages(shared, "picture")
    assert message["content"].splitlines() == ["a tiny picture", "[image: image/png, 67 bytes]"]


def test_a_call_past_its_timeout_is_cancelled_and_reported(shared: Foliko):
    before = _pid(shared, "slow")
    result = shared.chat("slow", '/tool t__slow {"seconds": 30}')
    assert result.success
    message = _tool_messages(shared, "slow")[-1]
    assert message["is_error"] is True
    assert (
        f"did not finish within {CALL_TIMEOUT:g}s (call_timeout) and was cancelled"
        in (message["content"])
    )
    assert _pid(shared, "slow") == before, "the connection survives a timed-out call"


def test_a_server_that_exits_mid_call_is_a_tool_error_and_is_restarted(shared: Foliko):
    before = _pid(shared, "crash")
    result = shared.chat("crash", "/tool t__crash")
    assert result.success
    message = _tool_messages(shared, "crash")[-1]
    assert message["is_error"] is True
    assert "went away during the call to crash" in message["content"]
    assert _wait_gone(before)
    assert shared.chat("crash", '/tool t__add {"a": 1, "b": 1}').message == "t__add returned: 2"
    assert _pid(shared, "crash") != before
    status = shared.mcp.status("t")
    assert (status["state"], status["restarts"]) == ("ready", 1)


def test_the_child_gets_only_the_safe_environment_and_close_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("FOLIKO_STORAGE", "postgresql://u:pw@127.0.0.1/db")
    monkeypatch.setenv("MCP_TEST_TOKEN", "token-from-the-environment")
    facade = _facade(
        tmp_path,
        {"t": stdio_server(env={"LOG_LEVEL": "warn", "TOKEN": "${MCP_TEST_TOKEN}"})},
    )
    try:
        facade.chat("env", "/tool t__env")
        (message,) = _tool_messages(facade, "env")
        environment = orjson.loads(message["content"])
        pid = _pid(facade, "env")
        stored = orjson.dumps(facade.get_session("env").messages).decode()
    finally:
        facade.close()
    assert environment["LOG_LEVEL"] == "warn"
    assert environment["PATH"] == os.environ["PATH"]
    assert not {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "FOLIKO_STORAGE", "MCP_TEST_TOKEN"} & set(
        environment
    )
    assert environment["TOKEN"] == "***", "a value read from ${VAR} is not stored"
    assert "token-from-the-environment" not in stored
    assert _wait_gone(pid), "close() stops the server"


def test_a_server_that_does_not_start_in_time_fails_and_the_chat_goes_on(tmp_path: Path):
    warnings: list[str] = []
    hung = {
        "command": sys.executable,
        "args": ["-c", "import sys; sys.stdin.read()"],
        "startup_timeout": 0.5,
    }
    with _facade(tmp_path, {"hung": hung}, notify=warnings.append) as facade:
        assert facade.chat("s1", "hello").message == "hello"
        assert warnings == [
            "MCP server 'hung' failed to start: did not start within 0.5s; its tools are left out"
        ]
        status = facade.mcp_status()
    assert status[0]["state"] == "failed"
    assert status[0]["error"] == "did not start within 0.5s"


def test_an_enabled_false_server_is_only_for_the_agents_that_name_it(tmp_path: Path):
    agents = {"helper": {"mcp_servers": ["t"]}}
    servers = {"t": stdio_server(enabled=False, tools=["add", "pid", "nope"])}
    warnings: list[str] = []
    with _facade(tmp_path, servers, agents=agents, notify=warnings.append) as facade:
        plain = [t["name"] for t in facade.dry_run("s1", "hi")["tools"]]
        assert facade.mcp.status("t")["state"] == "idle", "a chat that does not need it"
        helper = {t["name"]: t for t in facade.dry_run("s1", "hi", agent="helper")["tools"]}
        facade.chat("s2", "/tool t__env", agent="helper")
        (refused,) = _tool_messages(facade, "s2")
    assert not [name for name in plain if name.startswith("t__")]
    assert [name for name in helper if name.startswith("t__")] == ["t__add", "t__pid"]
    assert helper["t__add"]["input_schema"]["properties"]["a"]["type"] == "integer"
    assert refused["is_error"] is True
    assert "unknown tool 't__env'" in refused["content"]
    assert warnings == [
        "MCP server 't' has no tool 'nope' (named in its 'tools'); list the tools it has"
    ]


def test_the_turn_deadline_bounds_a_call_and_the_server_stays_usable(shared: Foliko):
    before = _pid(shared, "deadline")
    with pytest.raises(TurnTimeoutError):
        shared.chat("deadline", '/tool t__slow {"seconds": 30}', timeout=0.5)
    assert not [m for m in shared.get_session("deadline").messages if "slow" in str(m)]
    assert _pid(shared, "deadline") == before
