"""The ASGI layer that keeps other web sites out, before routing and before
any body is read.

A browser lets any page send a "simple" request (a ``text/plain`` or form
POST) to any address without asking first, and lets a page on a name the
attacker points at 127.0.0.1 (DNS rebinding) read the answers. So:

- the ``Host`` must be a loopback name or address, the address the
  connection arrived at, or a name given with ``--allowed-host``: else 421;
- a request that says it comes from another site (an ``Origin`` other than
  the server's own, ``"null"`` included, or ``Sec-Fetch-Site`` cross-site or
  same-site) is 403 unless its origin was given with ``--allow-origin``;
  those origins get the CORS headers and their preflights a 204. A link
  from another site to the page at ``/`` still opens it;
- a POST, PUT, PATCH or DELETE carries ``Content-Type: application/json``,
  or no body at all: else 415.

WebSocket upgrades get the Host and Origin checks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers

from foliko_cli.serve.errors import error_body

LOOPBACK_NAMES = frozenset({"localhost"})
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_TYPE = "application/json"
ALLOWED_METHODS = b"GET, POST, PUT, PATCH, DELETE, OPTIONS"
ALLOWED_HEADERS = (
    "authorization",
    "content-type",
    "x-session-id",
    "x-foliko-timeout",
    "x-client-request-id",
    "traceparent",
    "idempotency-key",
)
EXPOSED_HEADERS = (
    b"x-request-id, x-client-request-id, traceparent, x-should-retry, retry-after, "
    b"x-foliko-tools-not-hosted"
)
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_FOREIGN_FETCH_SITES = frozenset({"cross-site", "same-site"})
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def host_name(value: str) -> str:
    """The name of a ``Host`` value, without port or brackets, lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(name.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_loopback_name(name: str) -> bool:
    """localhost, a name under .localhost (browsers resolve those to loopback
    themselves, RFC 6761), or a loopback address."""
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    address = _ip(name)
    return address is not None and address.is_loopback


def origin_of(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin (``scheme://host[:port]``), None if it is not one."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.username is not None or parts.query or parts.fragment:
        return None
    return scheme, parts.hostname.lower().rstrip("."), port or _DEFAULT_PORTS[scheme]


def normalize_origin(value: str) -> str:
    """An ``--allow-origin`` value as browsers send it, or ValueError saying why not."""
    origin = origin_of(value)
    if origin is None:
        raise ValueError(
            f"{value!r} is not an origin: write scheme://host[:port], e.g. http://localhost:3000"
        )
    scheme, host, port = origin
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if port == _DEFAULT_PORTS[scheme] else f":{port}")


class HostPolicy:
    """Which ``Host`` names the server answers to."""

    def __init__(self, allowed: Iterable[str] = ()):
        self.names: set[str] = set()
        self.suffixes: list[str] = []
        for given in allowed:
            name = host_name(given)
            if name.startswith("*."):
                self.suffixes.append(name[1:])
            elif name and name not in WILDCARD_HOSTS:
                self.names.add(name)

    def allows(self, name: str, local_address: str | None) -> bool:
        if name in self.names or is_loopback_name(name):
            return True
        if any(name.endswith(suffix) for suffix in self.suffixes):
            return True
        address = _ip(name)
        return address is not None and local_address is not None and address == _ip(local_address)


class GuardMiddleware:
    def __init__(
        self, app: Any, *, allowed_hosts: Iterable[str] = (), allow_origins: Iterable[str] = ()
    ) -> None:
        self.app = app
        self.hosts = HostPolicy(allowed_hosts)
        self.origins = frozenset(normalize_origin(origin) for origin in allow_origins)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is not None:
            name = host_name(host)
            server = scope.get("server")
            if not self.hosts.allows(name, server[0] if server else None):
                shown = name[:100]
                message = (
                    f"this server does not answer to the Host {shown!r}: "
                    f"start foliko serve with --allowed-host {shown} to allow it"
                )
                await reject(send, 421, message, "misdirected_request", kind)
                return
        origin = headers.get("origin")
        allowed_origin = None
        if self._foreign(scope, headers, host, origin):
            allowed_origin = self._allowed(origin)
            if allowed_origin is None and not _navigation_to_page(scope, headers, origin):
                await reject(send, 403, _foreign_message(origin), "cross_origin_refused", kind)
                return
        if kind == "websocket":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        if allowed_origin is not None and _preflight(method, headers):
            await send(_preflight_start(allowed_origin, headers))
            await send({"type": "http.response.body", "body": b""})
            return
        if allowed_origin is not None:
            send = _with_cors(send, allowed_origin)
        if method in STATE_CHANGING:
            problem = _content_type_problem(method, headers)
            if problem is not None:
                await reject(send, 415, problem, "unsupported_media_type", kind)
                return
        await self.app(scope, receive, send)

    def _foreign(
        self, scope: dict[str, Any], headers: Headers, host: str | None, origin: str | None
    ) -> bool:
        if headers.get("sec-fetch-site", "").strip().lower() in _FOREIGN_FETCH_SITES:
            return True
        if origin is None:
            return False
        given = origin_of(origin)
        if given is None or host is None:
            return True
        scheme = {"ws": "http", "wss": "https"}.get(scope["scheme"], scope["scheme"])
        own = origin_of(f"{scheme}://{host.strip()}")
        return own is None or given != own

    def _allowed(self, origin: str | None) -> str | None:
        if origin is None or origin_of(origin) is None:
            return None
        normalized = normalize_origin(origin)
        return origin.strip() if normalized in self.origins else None


def _navigation_to_page(scope: dict[str, Any], headers: Headers, origin: str | None) -> bool:
    """A link on another site that opens the page: the browser reads it, no script does."""
    return (
        origin is None
        and scope["type"] == "http"
        and scope["method"] in ("GET", "HEAD")
        and scope["path"] == "/"
        and headers.get("sec-fetch-mode", "").lower() == "navigate"
    )


def _foreign_message(origin: str | None) -> str:
    if origin is None or origin.strip() == "null" or origin_of(origin) is None:
        return "requests from other web sites are refused"
    shown = origin.strip()[:200]
    return (
        f"requests from {shown} are refused: start foliko serve with "
        f"--allow-origin {shown} to allow that site"
    )


def _content_type_problem(method: str, headers: Headers) -> str | None:
    given = headers.get("content-type")
    if given is None:
        length = headers.get("content-length")
        if "transfer-encoding" not in headers and (length is None or length.strip() == "0"):
            return None
        return f"{method} needs Content-Type: {JSON_TYPE} on its body"
    media_type = given.partition(";")[0].strip().lower()
    if media_type == JSON_TYPE:
        return None
    return f"{method} needs Content-Type: {JSON_TYPE}, not {given.strip()[:100]!r}"


def _preflight(method: str, headers: Headers) -> bool:
    return method == "OPTIONS" and "access-control-request-method" in headers


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", EXPOSED_HEADERS),
        (b"vary", b"Origin"),
    ]


def _with_cors(send: Any, origin: str) -> Any:
    """``send`` adding the CORS headers to the answer, so the page can read it."""
    cors = _cors_headers(origin)

    async def send_with_cors(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), *cors]
        await send(message)

    return send_with_cors


def _preflight_start(origin: str, headers: Headers) -> dict[str, Any]:
    asked = headers.get("access-control-request-headers", "")
    names = list(ALLOWED_HEADERS)
    for name in asked.lower().split(","):
        name = name.strip()
        if name and set(name) <= _TOKEN_CHARS and name not in names:
            names.append(name)
    return {
        "type": "http.response.start",
        "status": 204,
        "headers": [
            *_cors_headers(origin),
            (b"access-control-allow-methods", ALLOWED_METHODS),
            (b"access-control-allow-headers", ", ".join(names).encode()),
            (b"access-control-max-age", b"600"),
        ],
    }


async def reject(send: Any, status: int, message: str, code: str, kind: str = "http") -> None:
    """The error as an HTTP answer (to a WebSocket upgrade too: ASGI's
    websocket.http.response, which uvicorn implements)."""
    body = error_body(status, message, code)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    prefix = "websocket.http" if kind == "websocket" else "http"
    await send({"type": prefix + ".response.start", "status": status, "headers": headers})
    await send({"type": prefix + ".response.body", "body": body})
