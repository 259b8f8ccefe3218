"""``foliko mcp list``, ``foliko tools list`` and ``agents show`` with the stdio test server."""

from __future__ import annotations

from pathlib import Path

from mcp_support import stdio_server, write_config


def test_mcp_list_as_a_table(tmp_path: Path, invoke):
    write_config(
        tmp_path / "foliko.toml",
        {
            "t": stdio_server(exclude=["crash"]),
            "off": {"command": "/nonexistent/x", "enabled": False},
        },
    )
    result = invoke("mcp", "list", "--format", "table")
    assert result.exit_code == 0, result.stderr
    rows = [line.split(None, 5) for line in result.stdout.splitlines()[2:]]
    assert rows == [
        ["off", "stdio", "no", "failed", "0", "command not found: /nonexistent/x"],
        ["t", "stdio", "yes", "ready", "6"],
    ]


def test_tools_list_and_agents_show_include_mcp_tools(tmp_path: Path, invoke):
    write_config(
        tmp_path / "foliko.toml",
        {"t": stdio_server(enabled=False, tools=["add"])},
        agents={"helper": {"mcp_servers": ["t"], "system_prompt": "Be brief."}},
    )
    listed = invoke("tools", "list", "--format", "table")
    assert listed.exit_code == 0, listed.stderr
    assert ["t__add", "mcp", "t", "no", "Add", "two", "whole", "numbers."] in [
        line.split() for line in listed.stdout.splitlines()
    ]
    assert "MCP servers marked 'no' only for agents that list them" in listed.stderr
    shown = invoke("agents", "show", "helper")
    assert shown.exit_code == 0, shown.stderr
    assert "tools    t__add" in shown.stdout.splitlines()
    assert "- t__add: Add two whole numbers." in shown.stdout.splitlines()
