"""A small MCP server over stdio, written with the ``mcp`` package's server API.

The tests start it as a subprocess (``python stdio_server.py``).
"""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("foliko-test")

TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def slow(seconds: float) -> str:
    """Sleep for a while, then answer."""
    time.sleep(seconds)
    return f"slept {seconds}s"


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def env() -> dict[str, str]:
    """The server process's environment."""
    return dict(os.environ)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def refuse(reason: str) -> str:
    """Fail with the given reason (an isError result)."""
    raise ToolError(reason)


@server.tool()
def picture() -> list:
    """A caption and a tiny PNG image."""
    return ["a tiny picture", Image(data=TINY_PNG, format="png")]


if __name__ == "__main__":
    server.run()
