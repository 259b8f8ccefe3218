"""One ASGI layer in front of every route: trace ids, the API key, the body
limit, ids in the path, and a JSON 500 for anything unexpected.

Each request gets a request id of the server's own (``x-request-id`` on the
answer): it is what the turn's messages store and what groups them into one
response, so no client can merge two turns by sending one id twice. A
client's ``X-Client-Request-Id`` is sent back as it came; a W3C
``traceparent`` becomes the trace id the turn stores. Every answer says
``X-Content-Type-Options: nosniff``. With API keys, every
route but the page (and its ``/app/`` files), ``/healthz`` and ``/openapi.json`` needs
``Authorization: Bearer KEY``; the user it names is put in the scope's state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import Any, cast
from urllib.parse import unquote

from starlette.datastructures import Headers

from foliko_cli.common.clock import new_request_id, new_trace_id
from foliko_cli.serve.auth import KeyRing
from foliko_cli.serve.errors import BodyTooLarge, error_body
from foliko_cli.service.audit import Scope

PUBLIC_PATHS = frozenset({"/", "/healthz", "/openapi.json", "/favicon.ico"})
PUBLIC_PREFIX = "/app/"  # the web app's scripts and style sheet
_TRACEPARENT = re.compile(r"\A00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}\Z")
_CLIENT_ID = re.compile(r"\A[\x21-\x7e]{1,512}\Z")

_log = logging.getLogger("foliko.serve")
NOSNIFF = (b"x-content-type-options", b"nosniff")


def segment_path(raw_path: bytes) -> str:
    """The path decoded segment by segment, a ``/`` or ``%`` inside a segment
    kept encoded, so routing splits where the client's slashes are and the
    ``id`` convertor decodes the rest (see common.py)."""
    segments = raw_path.decode("ascii", "replace").split("/")
    return "/".join(unquote(s).replace("%", "%25").replace("/", "%2F") for s in segments)


def _public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX)


class TraceIds:
    __slots__ = ("client_request_id", "parent_span_id", "request_id", "span_id", "trace_id")

    def __init__(self, headers: Headers):
        self.request_id = new_request_id()
        given = headers.get("x-client-request-id", "")
        self.client_request_id = given if _CLIENT_ID.match(given) else None
        parent = _TRACEPARENT.match(headers.get("traceparent", "").strip().lower())
        if parent and parent[1] != "0" * 32 and parent[2] != "0" * 16:
            self.trace_id, self.parent_span_id = parent[1], parent[2]
        else:
            self.trace_id, self.parent_span_id = new_trace_id(), None
        self.span_id = os.urandom(8).hex()

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [
            (b"x-request-id", self.request_id.encode()),
            (b"traceparent", f"00-{self.trace_id}-{self.span_id}-01".encode()),
        ]
        if self.client_request_id is not None:
            headers.append((b"x-client-request-id", self.client_request_id.encode()))
        return headers


class RequestMiddleware:
    def __init__(
        self, app: Any, *, keys: KeyRing | None, max_body: int, scope: Scope | None = None
    ):
        self.app = app
        self.keys = keys
        self.max_body = max_body
        self.scope = scope
        """What every request may do at most (``foliko mcp serve --http``'s flags)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw_path = scope.get("raw_path")
        if raw_path and b"%" in raw_path:
            scope["path"] = segment_path(raw_path)
        headers = Headers(scope=scope)
        ids = TraceIds(headers)
        state = scope.setdefault("state", {})
        state["ids"] = ids
        state["user"] = None
        state["scope"] = self.scope  # None: every session, and changes too
        state["client"] = None  # an API key's name, for the audit log
        extra = ids.headers()

        async def send_with_ids(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), *extra]
                if not any(key.lower() == NOSNIFF[0] for key, _ in headers):
                    headers.append(NOSNIFF)  # no answer is read as another type than it says
                message["headers"] = headers
            await send(message)

        if self.keys is not None and not _public(scope["path"]):
            grant = self.keys.grant_for(headers.get("authorization"))
            if grant is None:
                message = (
                    "the API key is wrong"
                    if headers.get("authorization")
                    else "no API key: send Authorization: Bearer KEY"
                )
                await _reject(send_with_ids, 401, message, "invalid_api_key", scope["type"])
                return
            state["user"] = grant.user
            state["client"] = "key:" + grant.name
            # a view even for a key that may do everything: it tells the audit the sessions
            given = grant.scope or Scope()
            state["scope"] = given if self.scope is None else self.scope.narrowed(given)
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            error = BodyTooLarge(self.max_body)
            await _reject(send_with_ids, 413, error.message, error.code)
            return
        started = False

        async def send_tracked(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send_with_ids(message)

        try:
            await self.app(scope, self._limited(receive), send_tracked)
        except Exception as exc:
            # Answered here, not re-raised: uvicorn would close the connection.
            _log.error("internal error on %s %s: %r", scope["method"], scope["path"], exc)
            if not started:
                await _reject(send_with_ids, 500, "internal error", "internal_error")

    def _limited(self, receive: Any) -> Any:
        received = 0
        limit = self.max_body

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return cast("dict[str, Any]", message)

        return limited_receive


async def _reject(
    send: Any, status: int, message: str, code: str | None, kind: str = "http"
) -> None:
    """The error as an HTTP answer (to a WebSocket upgrade too: ASGI's
    websocket.http.response, which uvicorn implements)."""
    body = error_body(status, message, code)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    prefix = "websocket.http" if kind == "websocket" else "http"
    await send({"type": prefix + ".response.start", "status": status, "headers": headers})
    await send({"type": prefix + ".response.body", "body": body})


class EndsWhenCancelled:
    """The outermost layer: a request whose task is cancelled ends quietly.

    Only the server cancels a request's task (a client going away is an
    ``http.disconnect``), and only when its graceful shutdown has waited its
    grace: then a streamed answer is ended where it was (the turn it carried
    is not saved), one not yet started is a 503, and uvicorn logs no
    traceback (it logged two for every stream cut)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "ended": False}

        async def tracked(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                state["ended"] = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            _log.info("%s %s was cut: the server is stopping", scope["method"], scope["path"])
            if not state["started"]:
                body = error_body(503, "the server is stopping; try again", "server_stopping")
                await send(
                    {
                        "type": "http.response.start",
                        "status": 503,
                        "headers": [(b"content-type", b"application/json"), NOSNIFF],
                    }
                )
                await send({"type": "http.response.body", "body": body})
            elif not state["ended"]:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
