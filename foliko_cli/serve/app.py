"""The ASGI application of ``foliko serve`` (Starlette).

``create_app(options)`` builds it; its lifespan opens one ``Services`` (one
AsyncFoliko on the configured storage, see state.py) per worker process and
closes it at shutdown. ``app_from_environment`` is the factory each worker
of ``--workers N`` imports: the options travel in FOLIKO_SERVE_OPTIONS.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from foliko_cli.errors import FolikoError
from foliko_cli.serve import (
    compaction,
    completions,
    conversations,
    live_turns,
    page,
    responses,
    search,
    session_routes,
    session_settings,
    stored_completions,
    trash,
    websocket,
)
from foliko_cli.serve.access_log import AccessLogMiddleware
from foliko_cli.serve.audit import AuditMiddleware
from foliko_cli.serve.errors import ApiError, error_response, foliko_error_response
from foliko_cli.serve.guard import GuardMiddleware
from foliko_cli.serve.mcp import MCPEndpoint
from foliko_cli.serve.metrics import CONTENT_TYPE, METRICS, metrics
from foliko_cli.serve.middleware import EndsWhenCancelled, RequestMiddleware
from foliko_cli.serve.native_types import Health
from foliko_cli.serve.quotas import QuotaExceeded, Quotas, quota_response
from foliko_cli.serve.schema import JSON, Api
from foliko_cli.serve.user_services import LeaseMiddleware
from foliko_cli.service.audit import Scope

if TYPE_CHECKING:
    from foliko_cli.serve.state import Services

OPTIONS_ENV = "FOLIKO_SERVE_OPTIONS"
MAX_BODY = 16 * 1024 * 1024

_log = logging.getLogger("foliko.serve")


class ServeOptions(NamedTuple):
    storage: str | None = None
    api_keys: str | None = None
    user: str | None = None
    max_body: int = MAX_BODY
    access_log: str | None = "text"  # "text", "json", or None: no access log
    parent_pid: int | None = None  # of --workers N: each worker ends with it (lifetime.py)
    grace: float = 10.0
    allowed_hosts: tuple[str, ...] = ()  # besides loopback and the connection's own address
    allow_origins: tuple[str, ...] = ()  # other sites whose pages may call the server
    mcp_only: bool = False  # foliko mcp serve --http: /mcp, /healthz and /metrics only
    allow_write: bool = False  # with mcp_only: tools that change sessions are offered
    sessions: tuple[str, ...] = ()  # with mcp_only: the only sessions seen (id patterns)

    def to_env(self) -> str:
        return orjson.dumps(self._asdict()).decode()

    @classmethod
    def from_env(cls) -> ServeOptions:
        return cls(**orjson.loads(os.environ.get(OPTIONS_ENV, "{}")))


def _services(options: ServeOptions) -> Services:
    from foliko_cli.common.settings import load_settings
    from foliko_cli.serve.state import Services

    return Services(load_settings(storage=options.storage), notify=_log.warning)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, exc.code, exc.param)


async def _foliko_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, FolikoError)
    return foliko_error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no route {request.url.path}"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    code = "not_found" if exc.status_code == 404 else None
    return error_response(exc.status_code, message, code, headers=exc.headers)


service_api = Api("Service")


@service_api.get("/healthz", answer=Health, public=True)
async def healthz(request: Request) -> Any:
    """Liveness and storage health (503 when the storage does not answer)."""
    healthy = await request.app.state.services.base.storage.health_check()
    return JSON(Health(status="ok" if healthy else "storage unavailable"), 200 if healthy else 503)


@service_api.get("/metrics", content={CONTENT_TYPE: {"schema": {"type": "string"}}})
async def prometheus(request: Request) -> Any:
    """The worker's counters in Prometheus's text format (0.0.4)."""
    return await metrics(request)


HEALTHZ, METRICS_ROUTE = service_api.routes


async def openapi(request: Request) -> JSON:
    from foliko_cli.serve.openapi import document

    if not hasattr(request.app.state, "openapi"):
        request.app.state.openapi = document(request.app.routes)
    return JSON(request.app.state.openapi)


def _routes(mcp_route: Route) -> list[Any]:
    return [
        # the turns first: each request tries the routes in order
        *completions.routes,
        *compaction.routes,
        *responses.routes,
        *live_turns.routes,
        *websocket.routes,
        HEALTHZ,
        Route("/openapi.json", openapi, methods=["GET"]),
        *page.routes,
        *conversations.routes,
        *stored_completions.routes,
        *session_routes.routes,
        *session_settings.routes,
        *search.routes,
        *trash.routes,
        mcp_route,
        METRICS_ROUTE,  # last: routing others tries it never
    ]


def server_scope(options: ServeOptions) -> Scope | None:
    """What every request may do at most: ``foliko mcp serve --http``'s flags
    (read only unless allowed); None for ``foliko serve`` (each key's own)."""
    if not options.mcp_only:
        return None
    return Scope.of(options.allow_write, options.sessions)


def create_app(options: ServeOptions | None = None) -> Starlette:
    options = options or ServeOptions()
    keys = None
    if options.api_keys:
        from foliko_cli.serve.auth import load_keys

        keys = load_keys(Path(options.api_keys))

    mcp = MCPEndpoint(max_body=options.max_body)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.services = _services(options)
        app.state.services.quotas = Quotas.of(keys.limits if keys else None)
        try:
            yield
        finally:
            try:
                await mcp.aclose()
            finally:
                await app.state.services.aclose()

    mcp_route = Route("/mcp", mcp, methods=["POST"])  # stateless: no GET stream, no DELETE
    routes = [mcp_route, HEALTHZ, METRICS_ROUTE] if options.mcp_only else _routes(mcp_route)
    app = Starlette(
        routes=routes,
        exception_handlers={
            QuotaExceeded: quota_response,
            ApiError: _api_error,
            FolikoError: _foliko_error,
            HTTPException: _http_error,
        },
        lifespan=lifespan,
    )
    app.add_middleware(AuditMiddleware)  # what each API key read or wrote
    app.add_middleware(
        RequestMiddleware, keys=keys, max_body=options.max_body, scope=server_scope(options)
    )
    app.add_middleware(LeaseMiddleware)  # per-user services, released after the response
    app.add_middleware(
        GuardMiddleware, allowed_hosts=options.allowed_hosts, allow_origins=options.allow_origins
    )  # before the key check, so preflights and foreign hosts never reach it
    app.add_middleware(  # it counts every request for /metrics
        AccessLogMiddleware, format=options.access_log or None, metrics=METRICS
    )
    app.add_middleware(EndsWhenCancelled)  # outermost: the shutdown's cut, quietly
    return app


def app_from_environment() -> Any:
    options = ServeOptions.from_env()
    if options.parent_pid is not None:
        from foliko_cli.serve.lifetime import follow_parent

        follow_parent(options.parent_pid, options.grace)
    return create_app(options)
