"""Servers start on first use: a turn offers a server's cached tool list without
starting it, the list follows tools/list_changed, the startup timeout is the
server's, a server's process group ends with it, and tool names that would
collide are refused."""

from __future__ import annotations

import shutil
import stat
import sys
import time
from pathlib import Path

import orjson
import pytest
from mcp_support import asking_server, write_config

from foliko_cli.mcp import connection as connection_module
from foliko_cli.mcp.cache import DIRECTORY, TTL_SECONDS
from foliko_cli.service.facade import Foliko

WAIT_S = 15
BARE_SERVER = Path(__file__).parent / "bare_server.py"


def _facade(home: Path, servers: dict, **options) -> Foliko:
    options.setdefault("notify", lambda message: None)
    return Foliko("memory", "echo", home=home, mcp_servers=servers, approve_all=True, **options)


def _offered(facade: Foliko) -> list[str]:
    return [t["name"] for t in facade.dry_run("s", "hi")["tools"] if "__" in t["name"]]


def _entries(home: Path) -> list[Path]:
    return sorted((home / DIRECTORY).glob("*.json"))


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return fields[0] != "Z"


def test_a_turn_offers_the_cached_tools_and_a_call_starts_the_server(tmp_path: Path):
    servers = {"u": asking_server()}
    with _facade(tmp_path, servers) as first:
        listed = _offered(first)
        assert first.mcp.status("u")["state"] == "ready", "no cache yet: started to list"
    (entry,) = _entries(tmp_path)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o700
    assert "u__look" in listed and "u__note" in listed
    with _facade(tmp_path, servers) as second:
        assert _offered(second) == listed
        assert second.chat("s1", "hello").message == "hello"
        assert second.mcp.status("u")["state"] == "cached", "a turn without a call starts nothing"
        reply = second.chat("s1", '/tool u__text {"value": "hi"}')
        assert reply.message == "u__text returned: hi"
        assert second.mcp.status("u")["state"] == "ready"


def test_a_stale_entry_or_a_changed_config_starts_the_server(tmp_path: Path):
    with _facade(tmp_path, {"u": asking_server()}) as first:
        _offered(first)
    (entry,) = _entries(tmp_path)
    cached = orjson.loads(entry.read_bytes())
    cached["listed_at"] -= TTL_SECONDS + 60
    entry.write_bytes(orjson.dumps(cached))
    with _facade(tmp_path, {"u": asking_server()}) as stale:
        _offered(stale)
        assert stale.mcp.status("u")["state"] == "ready"
    with _facade(tmp_path, {"u": asking_server(env={"MODE": "other"})}) as changed:
        _offered(changed)
        assert changed.mcp.status("u")["state"] == "ready"
    assert len(_entries(tmp_path)) == 2, "one entry per server config"


def test_a_cached_server_that_no_longer_starts_loses_its_entry(tmp_path: Path):
    place = tmp_path / "place"
    place.mkdir()
    servers = {"u": asking_server(cwd=str(place))}
    with _facade(tmp_path, servers) as first:
        _offered(first)
    shutil.rmtree(place)
    warnings: list[str] = []
    with _facade(tmp_path, servers, notify=warnings.append) as second:
        assert "u__text" in _offered(second)
        second.chat("s", '/tool u__text {"value": "hi"}')
        message = second.get_session("s").messages[-2]
    assert message["is_error"] is True
    assert f"working directory not found: {place}" in message["content"]
    assert warnings == [
        f"MCP server 'u' failed to start: working directory not found: {place}; "
        "its tools are left out"
    ]
    [entry] = _entries(tmp_path)  # the list gone, the failure kept (tried again after a while)
    assert "tools" not in orjson.loads(entry.read_bytes())
    with _facade(tmp_path, servers) as third:
        assert _offered(third) == []


def test_tools_list_changed_refreshes_the_list_and_the_next_turn(tmp_path: Path):
    servers = {"u": asking_server()}
    with _facade(tmp_path, servers) as facade:
        assert "u__grown" not in _offered(facade)
        assert facade.chat("s", "/tool u__grow").message == "u__grow returned: grew"
        # the list is fetched again in the background: each turn gives the loop a moment
        _wait(lambda: "u__grown" in _offered(facade), "the next turn to be offered the new tool")
        assert facade.chat("s", "/tool u__grown").message == "u__grown returned: grown here"
    assert b'"grown"' in _entries(tmp_path)[0].read_bytes()
    with _facade(tmp_path, servers) as later:
        assert "u__grown" in _offered(later)
        assert later.mcp.status("u")["state"] == "cached"


def test_a_process_that_ends_right_after_tools_list_changed_leaves_no_stale_list(
    tmp_path: Path, invoke
):
    write_config(tmp_path / "foliko.toml", {"u": asking_server(approve="always")})
    assert invoke("chat", "-s", "s", "/tool u__grow").stdout == "u__grow returned: grew\n"
    offered = orjson.loads(invoke("chat", "-s", "s", "--dry-run", "hi").stdout)["tools"]
    assert "u__grown" in [tool["name"] for tool in offered]


def test_the_startup_timeout_does_not_count_loading_the_mcp_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    loaded = connection_module._load_sdk

    def slow_import() -> None:
        time.sleep(1.5)  # importing the SDK on a loaded machine: foliko's time, not the server's
        loaded()

    monkeypatch.setattr(connection_module, "_load_sdk", slow_import)
    bare = {"command": sys.executable, "args": [str(BARE_SERVER)], "startup_timeout": 1}
    with _facade(tmp_path, {"bare": bare}) as facade:
        assert _offered(facade) == ["bare__hello"]
        assert facade.mcp.status("bare")["state"] == "ready"


def test_a_helper_the_server_started_ends_with_it(tmp_path: Path):
    with _facade(tmp_path, {"u": asking_server()}) as facade:
        pid = int(facade.chat("s", "/tool u__spawn").message.rpartition(" ")[2])
        assert _running(pid)
    _wait(lambda: not _running(pid), "the helper process to end")


def test_tool_names_that_would_collide_are_refused_naming_both(tmp_path: Path, invoke):
    clash = {"x": asking_server(), "x__echo": asking_server()}
    write_config(tmp_path / "foliko.toml", clash)
    refused = invoke("chat", "-s", "s", "hello")
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[-1] == (
        "foliko: error: MCP server 'x' tool 'echo__text' and MCP server 'x__echo' tool 'text' "
        "are both named 'x__echo__text' for the model; rename one of the servers or add one "
        "tool to its 'exclude'"
    )
    assert invoke("sessions", "list", "--json").stdout.strip() == "[]"
    for words in (["mcp", "tools"], ["mcp", "tools", "x"], ["tools", "list"]):
        listed = invoke(*words)  # was: both listed, exit 0
        assert listed.exit_code == 2, words
        assert listed.stderr.splitlines()[-1] == refused.stderr.splitlines()[-1]
    clash["x__echo"]["exclude"] = ["text"]
    write_config(tmp_path / "foliko.toml", clash)
    assert invoke("chat", "-s", "s", "hello").exit_code == 0
    assert invoke("mcp", "tools").exit_code == 0
