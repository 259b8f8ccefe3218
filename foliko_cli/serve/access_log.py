"""The access log of ``foliko serve``: one line per HTTP request on stderr.

A line holds the request's start time (UTC), method, route template (never
the raw path, so ids and query strings stay out and lines group; ``-`` when
no route matched), the status sent, the duration, the API-key user, the
request id sent back in ``X-Request-Id`` and the session the request
touched. It is written when the response ends (a stream: when it closes)
in one write(2) of well under PIPE_BUF bytes, so the lines of several
workers never interleave. A response the client left before its end is
marked ``disconnected``; one the server did not finish, ``incomplete``.
Headers other than ``X-Session-Id``, keys, query strings and bodies are
never read.

The session is, in order: what the route put in ``request.state.log_session``
(for the sessions only the body names, e.g. a Responses ``conversation``),
the ``conversation_id`` or ``session_id`` path parameter, the
``X-Session-Id`` header.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, cast

import orjson
from starlette.requests import ClientDisconnect

FORMATS = ("text", "json")
LOG_SESSION = "log_session"
_PATH_SESSION = ("conversation_id", "session_id")
_SESSION_HEADER = b"x-session-id"
_MAX_VALUE = 200
_MAX_METHOD = 32


def write_stderr(line: bytes) -> None:
    try:  # noqa: SIM105 - a try costs nothing here, contextlib.suppress does
        os.write(2, line)
    except OSError:
        pass  # a line that cannot be written must not fail the request it describes


_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))


class _Timestamps:
    """ISO 8601 UTC with milliseconds; the second's text is made once per second."""

    __slots__ = ("prefix", "second")

    def __init__(self) -> None:
        self.second = -1
        self.prefix = ""

    def __call__(self, wall_ns: int) -> str:
        second, ns = divmod(wall_ns, 1_000_000_000)
        if second != self.second:
            self.prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self.second = second
        return self.prefix + _MILLIS[ns // 1_000_000]


class AccessLogMiddleware:
    """Writes the line (none when ``format`` is None) and tells ``metrics``
    (an object with ``request(scope, status)``, see metrics.py) of the request."""

    def __init__(
        self,
        app: Any,
        *,
        format: str | None = "text",
        write: Callable[[bytes], object] = write_stderr,
        metrics: Any = None,
    ):
        if format is not None and format not in FORMATS:
            raise ValueError(f"unknown access log format {format!r}")
        self.app = app
        self.write = write
        self.metrics = metrics
        self.timestamp = _Timestamps()
        self.line = (
            None if format is None else self._json_line if format == "json" else self._text_line
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await self._socket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        wall_ns = time.time_ns()
        began = time.perf_counter()
        status: int | None = None
        complete = disconnected = False

        async def logged_send(message: dict[str, Any]) -> None:
            nonlocal status, complete
            if message["type"] == "http.response.start":
                status = message["status"]
                await send(message)
            elif message.get("more_body", False) or message["type"] != "http.response.body":
                await send(message)
            else:
                await send(message)
                complete = True

        async def logged_receive() -> dict[str, Any]:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect" and not complete:
                disconnected = True
            return cast("dict[str, Any]", message)

        try:
            await self.app(scope, logged_receive, logged_send)
        except (OSError, ClientDisconnect):
            disconnected = not complete
            raise
        except Exception:
            if status is None:
                status = 500  # what Starlette's outermost error handler then sends
            raise
        finally:
            if self.metrics is not None:
                self.metrics.request(scope, status)
            if self.line is not None:
                ms = (time.perf_counter() - began) * 1000
                outcome = (
                    "complete" if complete else "disconnected" if disconnected else "incomplete"
                )
                self.write(self.line(scope, wall_ns, ms, status, outcome))

    async def _socket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A WebSocket session: counted once its handshake is answered (101, or
        the refusal's status), its line written when it ends."""
        wall_ns = time.time_ns()
        began = time.perf_counter()
        status: int | None = None

        def answered(code: int) -> None:
            nonlocal status
            status = code
            if self.metrics is not None:
                self.metrics.request(scope, code)

        async def logged_send(message: dict[str, Any]) -> None:
            if status is None:
                kind = message["type"]
                if kind == "websocket.accept":
                    answered(101)
                elif kind == "websocket.http.response.start":
                    answered(message["status"])
                elif kind == "websocket.close":
                    answered(403)  # a close before the accept: uvicorn refuses with 403
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            if status is None:
                answered(500)
            if self.line is not None:
                ms = (time.perf_counter() - began) * 1000
                self.write(self.line(scope, wall_ns, ms, status, "closed"))

    def _text_line(
        self, scope: dict[str, Any], wall_ns: int, ms: float, status: int | None, outcome: str
    ) -> bytes:
        route, user, request_id, session = _identities(scope)
        line = (
            f"{self.timestamp(wall_ns)} {_method(scope)} {route or '-'}"
            f" {'-' if status is None else status} {ms:.1f}ms user={_text(user)}"
            f" request_id={_text(request_id)} session_id={_text(session)}"
        )
        if outcome != "complete":
            line += " " + outcome
        return (line + "\n").encode()

    def _json_line(
        self, scope: dict[str, Any], wall_ns: int, ms: float, status: int | None, outcome: str
    ) -> bytes:
        route, user, request_id, session = _identities(scope)
        return orjson.dumps(
            {
                "time": self.timestamp(wall_ns),
                "method": _method(scope),
                "route": route,
                "status": status,
                "duration_ms": round(ms, 3),
                "user": _cut(user),
                "request_id": _cut(request_id),
                "session_id": _cut(session),
                "outcome": outcome,
            },
            option=orjson.OPT_APPEND_NEWLINE,
        )


def _method(scope: dict[str, Any]) -> str:
    """The request's method; a WebSocket session's is its handshake's, GET."""
    return cast(str, scope.get("method", "GET")[:_MAX_METHOD])


def route_template(scope: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The matched route's path with ``{name}`` for each parameter (None when
    no route matched) and the path parameters.

    A request refused before routing (401, 413) is matched here, off the hot path.
    """
    route = scope.get("route")
    params = scope.get("path_params") or {}
    if route is None and "router" not in scope:
        route, params = _match(scope)
    return getattr(route, "path_format", None), params


def _match(scope: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    router = getattr(scope.get("app"), "router", None)
    if router is None:
        return None, {}
    from starlette.routing import Match

    partial: tuple[Any, dict[str, Any]] = (None, {})
    for route in router.routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            return route, child.get("path_params", {})
        if match is Match.PARTIAL and partial[0] is None:
            partial = (route, child.get("path_params", {}))
    return partial


def _identities(scope: dict[str, Any]) -> tuple[str | None, str | None, str | None, str | None]:
    """The route template, user, request id and session id of a finished request."""
    route, params = route_template(scope)
    state = scope.get("state") or {}
    ids = state.get("ids")
    request_id = ids.request_id if ids is not None else None
    return route, state.get("user"), request_id, _session(state, params, scope["headers"])


def _session(state: dict[str, Any], params: dict[str, Any], headers: list[Any]) -> str | None:
    named = state.get(LOG_SESSION)
    if named:
        return str(named)
    for name in _PATH_SESSION:
        if params.get(name):
            return str(params[name])
    for key, value in headers:
        if key == _SESSION_HEADER and value:
            return cast(str, value.decode("latin-1"))
    return None


def _cut(value: str | None) -> str | None:
    return value if value is None or len(value) <= _MAX_VALUE else value[:_MAX_VALUE]


def _text(value: str | None) -> str:
    """The value as is when it is one plain word, else as a JSON string."""
    if value is None:
        return "-"
    if (
        value.isascii()
        and value.isprintable()
        and " " not in value
        and 0 < len(value) <= _MAX_VALUE
        and value[0] != '"'
        and value != "-"
    ):
        return value
    return orjson.dumps(value[:_MAX_VALUE]).decode()
