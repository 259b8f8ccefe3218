"""Every protocol version the ``mcp`` SDK speaks, negotiated by foliko: with
a server written with the SDK pinned to each (versioned_server.py: the
handshake versions through ``initialize``, 2026-07-28 through
``server/discover``), and with the reference server from npm."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from mcp_support import HERE, write_config
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, KNOWN_PROTOCOL_VERSIONS

from foliko_cli.mcp.connection import ServerConnection
from foliko_cli.mcp.server_config import server_config

VERSIONED_SERVER = HERE / "versioned_server.py"


def test_the_sdk_speaks_the_versions_these_tests_name():
    assert {"2025-11-25", "2026-07-28"} <= set(KNOWN_PROTOCOL_VERSIONS)


@pytest.mark.parametrize("version", KNOWN_PROTOCOL_VERSIONS)
def test_foliko_negotiates_the_version_a_pinned_server_speaks(
    version: str, tmp_path: Path, run_foliko
):
    write_config(
        tmp_path / "foliko.toml",
        {
            "v": {
                "command": sys.executable,
                "args": [str(VERSIONED_SERVER), version],
                "approve": "always",
            }
        },
    )
    env = {"FOLIKO_MODEL": "echo"}
    said = run_foliko("chat", "-s", "v", "/tool v__version {}", env=env)
    assert said.returncode == 0, said.stderr
    assert said.stdout.decode().strip() == f"v__version returned: {version}"
    assert said.stderr == b""
    added = run_foliko("chat", "-s", "v", '/tool v__add {"a": 2, "b": 3}', env=env)
    assert added.returncode == 0, added.stderr
    assert added.stdout.decode().strip() == "v__add returned: 5"


async def _negotiated(table: dict) -> tuple[str | None, list[str]]:
    connection = ServerConnection(server_config("ref", table))
    try:
        assert await connection.start(), connection.error
        return connection.protocol_version, [tool.name for tool in connection.tools]
    finally:
        await connection.aclose()


def test_the_reference_server_over_stdio_negotiates_the_latest_handshake(everything_bin: Path):
    version, tools = asyncio.run(
        _negotiated({"command": str(everything_bin), "args": ["stdio"], "startup_timeout": 60})
    )
    assert version == HANDSHAKE_PROTOCOL_VERSIONS[-1] == "2025-11-25"
    assert "get-sum" in tools


def test_the_reference_server_over_http_negotiates_the_latest_handshake(everything_http: str):
    version, tools = asyncio.run(_negotiated({"url": everything_http, "startup_timeout": 60}))
    assert version == HANDSHAKE_PROTOCOL_VERSIONS[-1]
    assert "get-sum" in tools
