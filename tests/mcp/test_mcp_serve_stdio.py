"""``foliko mcp serve``: foliko's sessions as an MCP server over stdio, a real
subprocess driven by the official ``mcp`` client in each protocol era."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from cli.children import default_sigint
from mcp_serve_support import (
    FOLIKO_BIN,
    MODES,
    assert_extra_hint,
    call,
    configure,
    exercise,
    exercise_errors,
    seed,
    server_env,
    stdio_client,
)
from trusting import trust


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_tool_resource_and_prompt(mode: str, tmp_path: Path, foliko_home: Path):
    configure(tmp_path)
    seed(foliko_home)

    async def main() -> None:
        async with stdio_client(mode) as client:
            await exercise(client, mode)

    asyncio.run(main())


def test_unknown_sessions_and_bad_arguments_are_tool_errors(tmp_path: Path, foliko_home: Path):
    configure(tmp_path)
    seed(foliko_home)

    async def main() -> None:
        async with stdio_client("auto") as client:
            await exercise_errors(client)

    asyncio.run(main())


def test_with_user_it_serves_that_users_sessions(foliko_home: Path):
    seed(foliko_home, user="alice", prefix="alice-")
    seed(foliko_home, prefix="shared-")

    async def main() -> tuple[list[str], str]:
        async with stdio_client("auto", "--user", "alice") as client:
            listed = await call(client, "list_sessions")
            await call(client, "chat", {"session_id": "alice-groceries", "message": "and milk"})
            missing = await client.call_tool("read_session", {"session_id": "shared-groceries"})
        return [row["session_id"] for row in listed["sessions"]], missing.content[0].text

    names, missing = asyncio.run(main())
    assert names == ["alice-groceries", "alice-deploy-notes"]
    assert missing.startswith("session 'shared-groceries' not found")
    from foliko_cli.service.facade import Foliko

    with Foliko(home=foliko_home, user="alice") as alice:
        assert alice.get_session("alice-groceries").messages[-1]["content"] == "and milk"


def _rpc(number: int, method: str, params: dict) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params})


@contextlib.contextmanager
def _served(env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """``foliko mcp serve`` on pipes, killed at the end (or when it hangs)."""
    server = subprocess.Popen(
        [str(FOLIKO_BIN), "mcp", "serve", "--allow-write"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env or server_env(),
        preexec_fn=default_sigint,
    )
    watchdog = threading.Timer(120, server.kill)  # a server that never answers fails the test
    watchdog.start()
    try:
        yield server
    finally:
        watchdog.cancel()
        server.kill()
        server.wait()


def _answers(server: subprocess.Popen, lines: list[bytes], count: int) -> list[dict]:
    """Send ``lines``, read ``count`` answers, keeping stdin open until then
    (the end of its input cancels what is still running)."""
    server.stdin.write(b"".join(line + b"\n" for line in lines))
    server.stdin.flush()
    return [orjson.loads(server.stdout.readline()) for _ in range(count)]


def test_stdout_carries_protocol_messages_only(tmp_path: Path, foliko_home: Path):
    """A tool that prints, to sys.stdout and to descriptor 1, and foliko's own
    notice about the offline model: all of it goes to stderr."""
    (tmp_path / "noisy.py").write_text(
        "import os\n\n"
        "def shout(text: str) -> str:\n"
        '    """Print, then answer."""\n'
        '    print("noise from print")\n'
        '    os.write(1, b"noise on descriptor 1\\n")\n'
        '    return "shouted " + text\n'
    )
    (tmp_path / "foliko.toml").write_text('tools = ["noisy:shout"]\n')
    trust(tmp_path / "foliko.toml")
    initialize = {
        "protocolVersion": MODES["legacy"],
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    }
    message = '/tool shout {"text": "hi"}'
    lines = [
        _rpc(1, "initialize", initialize),
        orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        _rpc(
            2, "tools/call", {"name": "chat", "arguments": {"session_id": "s", "message": message}}
        ),
    ]
    environment = server_env()
    del environment["FOLIKO_MODEL"]  # foliko notes the offline model it uses instead
    with _served(environment) as server:
        answers = _answers(server, lines, 2)
        server.stdin.close()  # the end of its input ends it
        rest, stderr = server.stdout.read(), server.stderr.read()
        assert server.wait(60) == 0, stderr
    assert rest == b""
    assert [answer["id"] for answer in answers] == [1, 2]
    assert answers[0]["result"]["serverInfo"]["name"] == "foliko"
    result = answers[1]["result"]
    assert result["isError"] is False
    assert result["content"] == [{"type": "text", "text": "shout returned: shouted hi"}]
    stderr = stderr.decode()
    assert "noise from print" in stderr and "noise on descriptor 1" in stderr
    assert "using the offline 'echo' model" in stderr


def test_it_ends_with_its_input(foliko_home: Path):
    done = subprocess.run(
        [str(FOLIKO_BIN), "mcp", "serve"],
        input=b"",
        capture_output=True,
        env=server_env(),
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


@pytest.mark.parametrize(("signal_number", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_it_with_the_documented_code(signal_number: int, code: int):
    """At once, though its client keeps stdin open."""
    with _served() as server:
        assert _answers(server, [_rpc(1, "ping", {})], 1)[0]["id"] == 1  # it is serving
        server.send_signal(signal_number)
        assert server.wait(60) == code
        assert server.stderr.read().decode().splitlines() == [
            "foliko: error: interrupted before the operation finished"
        ]


def test_a_line_too_long_is_dropped_and_the_next_answered(foliko_home: Path):
    from foliko_cli.mcp_server.stdio import MAX_LINE

    huge = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"y" * MAX_LINE
    with _served() as server:
        (answer,) = _answers(server, [huge + b'"}}', _rpc(2, "ping", {})], 1)
    assert answer == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_a_closed_stdin_exits_2_naming_it(foliko_home: Path):
    done = subprocess.run(
        [str(FOLIKO_BIN), "mcp", "serve"],
        capture_output=True,
        env=server_env(),
        timeout=60,
        preexec_fn=lambda: os.close(0),
    )
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().splitlines() == [
        "foliko: error: standard input is closed; the MCP server reads its requests from it; "
        "start it with its client's pipe as standard input"
    ]


def test_without_the_mcp_package_it_exits_2_saying_what_to_install(tmp_path: Path):
    """An ``mcp`` package that cannot be imported stands in for one not installed."""
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'mcp'\")\n")
    done = subprocess.run(
        [str(FOLIKO_BIN), "mcp", "serve"],
        input=b"",
        capture_output=True,
        env=server_env(PYTHONPATH=str(shadow.parent)),
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert_extra_hint(line, "foliko mcp serve", "mcp")
