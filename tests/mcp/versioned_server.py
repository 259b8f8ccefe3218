"""An MCP server (the ``mcp`` package's MCPServer) pinned to one protocol
version: ``python versioned_server.py VERSION`` (over stdio).

Pinned to a handshake-era version (up to 2025-11-25) it answers
``initialize`` with that version only, and has no ``server/discover``, as a
server of that time would; pinned to a 2026-07-28 one it serves
``server/discover`` and refuses ``initialize``, as a modern-only server. Its
tool ``version`` says what the connection negotiated.
"""

from __future__ import annotations

import sys

import mcp.server.runner as runner
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

VERSION = sys.argv[1]
if VERSION in HANDSHAKE_PROTOCOL_VERSIONS:
    runner.HANDSHAKE_PROTOCOL_VERSIONS = (VERSION,)
    runner.LATEST_HANDSHAKE_VERSION = VERSION
    runner._has_modern_envelope = lambda params: False  # every connection is of the handshake era
    ABSENT = "server/discover"
elif VERSION in MODERN_PROTOCOL_VERSIONS:
    ABSENT = "initialize"
else:
    raise SystemExit(f"unknown protocol version {VERSION}")


async def pinned(ctx, call_next):
    if ctx.method == ABSENT:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
    return await call_next(ctx)


server = MCPServer("foliko-versioned-test", middleware=[pinned])


@server.tool()
def version(ctx: Context) -> str:
    """The protocol version of this connection."""
    return str(ctx.protocol_version)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    server.run()
