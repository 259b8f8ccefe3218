"""``/mcp``: the MCP server of foliko_cli/mcp_server over Streamable HTTP.

The middlewares of every route run first: the guard (Host, Origin, the
JSON content type) and the API key. Each request is answered with its
user's service, as on the other routes, and a ``chat`` turn counts in the
user's quotas and metrics like any turn. The transport is stateless and
answers in JSON, so any worker of ``--workers N`` answers any request and
nothing is kept between them (no server-to-client requests are needed).

The SDK is imported, and its session manager started, on the first request
to ``/mcp``: a server never asked for it pays nothing at start-up. The import
(seconds on a loaded machine) runs in a worker thread, so that the event loop
goes on answering the other requests meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from foliko_cli.mcp_server.arguments import ToolFailure
from foliko_cli.serve.common import request_context
from foliko_cli.serve.errors import ApiError, error_response
from foliko_cli.serve.turns import Turn
from foliko_cli.service import AsyncFoliko
from foliko_cli.service.audit import AuditRecorder, Scope

if TYPE_CHECKING:
    from foliko_cli.service.values import TurnResult


class ServeBackend:
    """The request's user's service, held to its key's scope; turns run as the
    other routes run them; calls are recorded under the key's name."""

    @contextlib.asynccontextmanager
    async def service(self, request: Any) -> AsyncIterator[AsyncFoliko]:
        services = request.app.state.services
        user, scope = request.state.user, request.state.scope
        # a view even where everything is allowed: it tells the audit the sessions
        lease = services.lease(user, Scope() if scope is None else scope)
        try:
            yield lease.service
        finally:
            lease.release()

    def audit(self, request: Any) -> tuple[AuditRecorder, str | None]:
        return request.app.state.services.base.audit, request.state.client

    async def turn(
        self, request: Any, service: AsyncFoliko, session_id: str, message: str, if_busy: str
    ) -> TurnResult:
        try:
            context = request_context(request, service)
            turn = Turn(service, session_id, message, api="mcp", request=context, if_busy=if_busy)
            return await turn.run(request.app.state.services)
        except ApiError as exc:  # a quota, a bad x-foliko-timeout
            raise ToolFailure(exc.message) from None


def load_sdk() -> tuple[Any, Any]:
    """The SDK's session manager class and foliko's server builder (imported
    here, off the event loop)."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from foliko_cli.mcp_server.server import build_server

    return StreamableHTTPSessionManager, build_server


class MCPEndpoint:
    """The ASGI app at ``/mcp``; ``aclose`` stops its session manager."""

    def __init__(self, *, max_body: int):
        self.max_body = max_body
        self._manager: Any = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            manager = await self._started()
        except ImportError:
            message = "the MCP endpoint needs foliko's 'mcp' extra, which this server lacks"
            await error_response(501, message, "not_implemented")(scope, receive, send)
            return
        await manager.handle_request(scope, receive, send)

    async def _started(self) -> Any:
        if self._manager is not None:
            return self._manager
        async with self._lock:
            if self._manager is None:
                manager_class, build_server = await asyncio.to_thread(load_sdk)
                manager = manager_class(
                    build_server(ServeBackend()),
                    stateless=True,
                    json_response=True,
                    max_request_body_size=self.max_body,
                )
                running = asyncio.get_running_loop().create_future()
                self._task = asyncio.ensure_future(self._run(manager, running))
                await running
                self._manager = manager
        return self._manager

    async def _run(self, manager: Any, running: asyncio.Future[Any]) -> None:
        """The manager's task group lives in this task, from start to ``aclose``."""
        try:
            async with manager.run():
                running.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not running.done():
                running.set_exception(exc)
            raise
        finally:
            if not running.done():
                running.cancel()

    async def aclose(self) -> None:
        if self._task is not None:
            self._stop.set()
            await asyncio.gather(self._task, return_exceptions=True)
