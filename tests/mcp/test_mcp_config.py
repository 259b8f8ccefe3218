"""[mcp_servers.NAME] tables: every mistake exits 2 naming the table and the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from mcp_support import stdio_server, write_config

from foliko_cli.cli.main import cli
from foliko_cli.errors import UsageError
from foliko_cli.mcp.names import MAX_LENGTH, exposed_name
from foliko_cli.mcp.server_config import server_config
from foliko_cli.mcp.transport import child_environment


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"command": "x", "comand": "y"}, "unknown key 'comand' in [mcp_servers.bad]"),
        ({"command": "x", "url": "http://h/mcp"}, "has both 'command' and 'url'"),
        ({"args": ["x"]}, "has neither"),
        ({"command": ["npx"]}, "'command' must be a non-empty string"),
        ({"command": "x", "args": "a b"}, "'args' must be a list of strings"),
        ({"command": "x", "env": {"A": 1}}, "'env' must be a table of strings"),
        ({"command": "x", "env": {"A": "${not a name}"}}, "'env.A' refers to ${not a name}"),
        ({"command": "x", "startup_timeout": 0}, "'startup_timeout' must be a number of seconds"),
        ({"command": "x", "call_timeout": "60"}, "'call_timeout' must be a number of seconds"),
        ({"command": "x", "enabled": "yes"}, "'enabled' must be true or false"),
        ({"command": "x", "per_user": 1}, "'per_user' must be true or false"),
        ({"command": "x", "headers": {"A": "b"}}, "'headers' applies only to a server with 'url'"),
        ({"url": "http://h/mcp", "cwd": "/srv"}, "'cwd' applies only to a server with 'command'"),
        ({"url": "ftp://h/mcp"}, "'url' must start with http:// or https://"),
        ({"command": "x", "tools": ["a"], "exclude": ["b"]}, "cannot be combined with 'tools'"),
        (
            {"command": "x", "approve": "sometimes"},
            '\'approve\' must be "ask", "always" or a list of tool names',
        ),
        ({"command": "x", "approve": ["a", 1]}, "'approve' must be a list of strings"),
        (
            {"command": "x", "elicitation": "yes"},
            '\'elicitation\' must be "ask", "defaults" or "decline"',
        ),
    ],
)
def test_a_bad_table_exits_2_naming_table_and_key(tmp_path: Path, table: dict, message: str):
    write_config(tmp_path / "foliko.toml", {"bad": table})
    result = invoke("chat", "-s", "s1", "hello")
    assert result.exit_code == 2
    assert message in result.stderr
    assert "[mcp_servers.bad]" in result.stderr
    assert "Traceback" not in result.stderr
    assert invoke("sessions", "list", "--json").stdout.strip() == "[]"


def test_mcp_servers_must_hold_tables(tmp_path: Path):
    (tmp_path / "foliko.toml").write_text('mcp_servers = "files"\n')
    result = invoke("mcp", "list")
    assert result.exit_code == 2
    assert "[mcp_servers] must hold tables like [mcp_servers.NAME]" in result.stderr


def test_a_server_name_must_fit_tool_names():
    with pytest.raises(UsageError, match=r"\[mcp_servers.my files\]: a server name"):
        server_config("my files", {"command": "x"})


def test_an_agent_naming_an_unknown_server_exits_2(tmp_path: Path):
    write_config(
        tmp_path / "foliko.toml",
        {"files": stdio_server(enabled=False)},
        agents={"helper": {"mcp_servers": ["web"]}},
    )
    result = invoke("chat", "-s", "s1", "--agent", "helper", "hello")
    assert result.exit_code == 2
    assert "agent 'helper': unknown MCP server 'web' (known: files)" in result.stderr


def test_an_agents_mcp_servers_must_be_names(tmp_path: Path):
    write_config(tmp_path / "foliko.toml", {}, agents={"helper": {"mcp_servers": [1]}})
    result = invoke("chat", "-s", "s1", "--agent", "helper", "hello")
    assert result.exit_code == 2
    assert "agent 'helper': 'mcp_servers' must be a list of names" in result.stderr


def test_mcp_tools_for_an_unknown_server_exits_2(tmp_path: Path):
    write_config(tmp_path / "foliko.toml", {"files": stdio_server()})
    result = invoke("mcp", "tools", "web")
    assert result.exit_code == 2
    assert "unknown MCP server 'web'" in result.stderr


def test_no_servers_configured_lists_nothing_and_says_how():
    result = invoke("mcp", "list", "--json")
    assert result.exit_code == 0
    assert result.stdout.strip() == "[]"
    assert "add [mcp_servers.NAME] to foliko.toml" in result.stderr


_PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_a_name_that_fits_is_kept():
    assert exposed_name("everything", "get-sum") == "everything__get-sum"


@pytest.mark.parametrize(
    ("server", "tool"),
    [
        ("files", "read.file"),
        ("files", "a" * 80),
        ("s" * 40, "t" * 40),
        ("web", "search/все"),
    ],
)
def test_a_name_that_does_not_fit_is_shortened_deterministically(server: str, tool: str):
    name = exposed_name(server, tool)
    assert _PROVIDER_NAME.match(name)
    assert len(name) <= MAX_LENGTH
    assert name == exposed_name(server, tool)
    assert name != exposed_name(server, tool + "x")


def test_two_tools_that_differ_only_in_a_replaced_character_get_distinct_names():
    assert exposed_name("files", "read.file") != exposed_name("files", "read_file!")
    assert exposed_name("files", "read.file") != exposed_name("files", "read_file")


def test_the_child_environment_is_the_safe_base_and_its_own_env():
    config = server_config(
        "files", {"command": "x", "env": {"LOG_LEVEL": "warn", "TOKEN": "${MY_TOKEN}"}}
    )
    parent = {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LC_ALL": "C",
        "OPENAI_API_KEY": "sk-parent",
        "FOLIKO_STORAGE": "postgresql://u:pw@h/db",
        "MY_TOKEN": "t0k3n",
    }
    assert child_environment(config, parent) == {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LC_ALL": "C",
        "LOG_LEVEL": "warn",
        "TOKEN": "t0k3n",
    }
