"""Servers that cannot be reached: the chat goes on, the listing says why, no secret leaks."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import orjson
import pytest
from mcp_support import write_config

from foliko_cli.common.extras import install_command
from foliko_cli.service.facade import Foliko

MISSING = "/nonexistent/bin/mcp-server"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_missing_command_leaves_the_chat_working(tmp_path: Path, run_foliko):
    write_config(tmp_path / "foliko.toml", {"files": {"command": MISSING, "args": ["/srv"]}})
    done = run_foliko("chat", "-s", "s1", "hello")
    assert done.returncode == 0
    assert done.stdout.decode().strip() == "hello"
    stderr = done.stderr.decode()
    assert (
        f"foliko: MCP server 'files' failed to start: command not found: {MISSING}; "
        "its tools are left out"
    ) in stderr.splitlines()
    assert "Traceback" not in stderr
    listed = run_foliko("mcp", "list", "--json")
    assert listed.returncode == 0
    (server,) = orjson.loads(listed.stdout)
    assert (server["state"], server["tools"]) == ("failed", 0)
    assert server["error"] == f"command not found: {MISSING}"


def test_mcp_tools_for_a_failed_server_exits_1_with_the_reason(tmp_path: Path, invoke):
    write_config(tmp_path / "foliko.toml", {"files": {"command": MISSING}})
    result = invoke("mcp", "tools", "files")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"foliko: error: MCP server 'files' is not available: command not found: {MISSING}; "
        "see 'foliko mcp list' and fix its [mcp_servers] table"
    ]


def test_an_unset_header_variable_fails_the_server_naming_it(tmp_path: Path, invoke):
    server = {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${NO_SUCH}"}}
    write_config(tmp_path / "foliko.toml", {"web": server})
    (status,) = orjson.loads(invoke("mcp", "list", "--json").stdout)
    assert status["state"] == "failed"
    assert status["error"] == (
        "[mcp_servers.web] headers.Authorization uses ${NO_SUCH}, which is not set; export it"
    )


def test_a_header_secret_never_appears_in_errors_or_the_session(
    tmp_path: Path, invoke, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("WEB_TOKEN", "header-secret-value")
    url = f"http://user:url-password@127.0.0.1:{_closed_port()}/mcp?key=url-query-key"
    server = {"url": url, "headers": {"Authorization": "Bearer ${WEB_TOKEN}"}}
    write_config(tmp_path / "foliko.toml", {"web": server})
    listed = invoke("mcp", "list", "--json")
    chat = invoke("chat", "-s", "s1", "--json", "hello")
    shown = invoke("sessions", "show", "s1", "--json")
    (status,) = orjson.loads(listed.stdout)
    assert status["state"] == "failed"
    assert status["error"]
    assert chat.exit_code == 0
    assert "MCP server 'web' failed to start" in chat.stderr
    for output in (listed.stdout, listed.stderr, chat.stdout, chat.stderr, shown.stdout):
        for secret in ("header-secret-value", "url-password", "url-query-key"):
            assert secret not in output


def test_a_server_that_speaks_no_mcp_fails_without_a_traceback(tmp_path: Path, invoke):
    junk = "import sys; print('not json', flush=True); sys.stdin.read()"
    server = {"command": sys.executable, "args": ["-c", junk], "startup_timeout": 1}
    write_config(tmp_path / "foliko.toml", {"junk": server})
    result = invoke("chat", "-s", "s1", "hello")
    assert result.exit_code == 0
    assert result.stdout == "hello\n"
    assert result.stderr.splitlines()[-1] == (
        "foliko: MCP server 'junk' failed to start: did not start within 1s; its tools are left out"
    )
    assert "Traceback" not in result.stderr


def test_without_the_mcp_package_a_server_fails_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "mcp", None)
    warnings: list[str] = []
    servers = {"files": {"command": MISSING}}
    with Foliko("memory", "echo", home=tmp_path, mcp_servers=servers, notify=warnings.append) as f:
        assert f.chat("s1", "hello").message == "hello"
    assert warnings == [
        "MCP server 'files' failed to start: an MCP server needs the 'mcp' extra; "
        f"install it with: {install_command('mcp')}; its tools are left out"
    ]


def test_a_missing_working_directory_is_named(tmp_path: Path):
    warnings: list[str] = []
    server = {"command": sys.executable, "cwd": str(tmp_path / "gone")}
    with Foliko(
        "memory", "echo", home=tmp_path, mcp_servers={"t": server}, notify=warnings.append
    ) as f:
        assert f.chat("s1", "hello").message == "hello"
    assert warnings == [
        f"MCP server 't' failed to start: working directory not found: {tmp_path / 'gone'}; "
        "its tools are left out"
    ]


def test_a_server_that_failed_to_start_is_left_out_until_the_back_off_or_a_change(
    tmp_path: Path, invoke, foliko_home
):
    """Was: a broken server was started again by every turn (13.7-15 s a plain turn)."""
    counter = tmp_path / "starts"
    script = f"echo start >> {counter}; exit 1"
    write_config(
        tmp_path / "foliko.toml", {"broken": {"command": "/bin/sh", "args": ["-c", script]}}
    )

    def starts() -> int:
        return len(counter.read_text().splitlines()) if counter.exists() else 0

    def turn() -> list[str]:
        done = invoke("chat", "-s", "s", "hello")
        assert done.exit_code == 0, done.stderr
        assert done.stdout == "hello\n"
        return [line for line in done.stderr.splitlines() if "'broken'" in line]

    [first] = turn()
    assert starts() == 1 and "failed to start" in first
    [second] = turn()
    assert starts() == 1, "tried again within the back-off"
    assert "is tried again" in second and "its tools are left out" in second
    listed = invoke("mcp", "list", "--json")  # the listing tries it: it says what is wrong now
    assert starts() == 2 and orjson.loads(listed.stdout)[0]["state"] == "failed"

    for entry in (foliko_home / "mcp-tools").iterdir():  # a minute later
        data = orjson.loads(entry.read_bytes())
        entry.write_bytes(orjson.dumps({**data, "failed_at": data["failed_at"] - 61}))
    turn()
    assert starts() == 3
    write_config(  # a change of its config: tried at once
        tmp_path / "foliko.toml",
        {"broken": {"command": "/bin/sh", "args": ["-c", script + " # edited"]}},
    )
    turn()
    assert starts() == 4
