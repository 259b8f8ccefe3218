"""``foliko mcp serve``: the server over stdin and stdout, one service for
every request, until stdin ends or SIGINT/SIGTERM.

While it serves, the SDK points descriptor 1 at stderr (and 0 at the null
device), so stdout carries protocol messages only, whatever a tool or a
child process writes.
"""

from __future__ import annotations

import contextlib
from typing import Any

from foliko_cli.mcp_server.server import build_server
from foliko_cli.service import AsyncFoliko


class LocalBackend:
    """The one service of the process answers every request."""

    def __init__(self, service: AsyncFoliko):
        self._service = service

    def service(self, request: Any) -> contextlib.AbstractAsyncContextManager[AsyncFoliko]:
        return contextlib.nullcontext(self._service)

    async def turn(self, request: Any, service: AsyncFoliko, session_id: str, message: str):
        return await service.chat(session_id, message)


async def serve_stdio(service: AsyncFoliko) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(LocalBackend(service))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
