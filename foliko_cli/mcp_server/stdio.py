"""``foliko mcp serve``: the server over stdin and stdout, one service for
every request, until stdin ends or the task is cancelled (SIGINT, SIGTERM).

While it serves, descriptor 0 is the null device and descriptor 1 stderr
(the SDK does it for stdout), so a tool or a child process reads no
protocol message and writes none: stdout carries protocol messages only.
stdin is read on the event loop, not in a thread, so a cancel ends the
server at once even while its client keeps stdin open.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from foliko_cli.errors import UsageError
from foliko_cli.mcp_server.server import build_server
from foliko_cli.service import AsyncFoliko
from foliko_cli.service.audit import AuditRecorder

if TYPE_CHECKING:
    from foliko_cli.service.values import TurnResult

MAX_LINE = 16 * 1024 * 1024  # as foliko serve's largest request body


class LocalBackend:
    """The one service of the process answers every request."""

    def __init__(self, service: AsyncFoliko):
        self._service = service

    def service(self, request: Any) -> contextlib.AbstractAsyncContextManager[AsyncFoliko]:
        return contextlib.nullcontext(self._service)

    async def turn(
        self, request: Any, service: AsyncFoliko, session_id: str, message: str, if_busy: str
    ) -> TurnResult:
        return await service.chat(session_id, message, if_busy=if_busy)

    def audit(self, request: Any) -> tuple[AuditRecorder, str | None]:
        return self._service.audit, None


class _Lines:
    """The lines of a stream, as the SDK's stdio transport iterates them."""

    def __init__(self, reader: asyncio.StreamReader):
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self._reader.readline()
        except ValueError:  # longer than MAX_LINE: dropped, as the SDK drops a line not JSON
            return "\n"
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


@contextlib.asynccontextmanager
async def _stdin_lines() -> AsyncIterator[_Lines | None]:
    """stdin's lines read on the event loop, descriptor 0 pointed at the null
    device meanwhile; None when stdin is a regular file (the SDK reads it)."""
    if sys.stdin is None:  # descriptor 0 was closed when Python started: another file has it now
        raise UsageError(
            "standard input is closed; the MCP server reads its requests from it",
            fix="start it with its client's pipe as standard input",
        )
    if stat.S_ISREG(os.fstat(0).st_mode):
        yield None
        return
    saved = os.dup(0)
    try:
        wire = os.dup(0)  # the transport closes it (at the end of input too)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        reader = asyncio.StreamReader(limit=MAX_LINE)
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire, "rb", buffering=0)
        )
        try:
            yield _Lines(reader)
        finally:
            transport.close()
    finally:
        os.dup2(saved, 0)
        os.close(saved)


async def serve_stdio(service: AsyncFoliko) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(LocalBackend(service))
    async with _stdin_lines() as lines, stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
        await server.run(read, write, server.create_initialization_options())
