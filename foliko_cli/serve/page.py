"""The web app: ``/`` is its page, ``/app/NAME`` its scripts (JavaScript modules)
and style sheet, all from the package's ``static`` folder, served as they are:
there is no build step, and the page loads nothing from anywhere else.

Each file is read once per process and sent with an ETag, so a reload that
finds it unchanged costs a 304.
"""

from __future__ import annotations

import functools
import hashlib
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from foliko_cli.serve.errors import ApiError

ASSET_PREFIX = "/app/"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
SECURITY_HEADERS = {
    # the page runs only its own scripts: a message's HTML could not run even
    # if the renderer let it through
    "content-security-policy": "default-src 'self'; img-src 'self' data: blob:; "
    "style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


@functools.cache
def _file(name: str) -> tuple[bytes, str] | None:
    """The static file's bytes and ETag; None when there is no such file."""
    suffix = name[name.rfind(".") :] if "." in name else ""
    if suffix not in MEDIA_TYPES or "/" in name or name.startswith("."):
        return None
    resource = files("foliko_cli.serve").joinpath("static", name)
    if not resource.is_file():
        return None
    body = resource.read_bytes()
    return body, '"' + hashlib.sha256(body).hexdigest()[:20] + '"'


def _send(request: Request, name: str) -> Response:
    found = _file(name)
    if found is None:
        raise ApiError(404, f"no file {name[:100]!r} in the web app", code="not_found")
    body, etag = found
    headers = {"cache-control": "no-cache", "etag": etag, **SECURITY_HEADERS}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    media_type = MEDIA_TYPES[name[name.rfind(".") :]]
    return Response(body, media_type=media_type, headers=headers)


async def index(request: Request) -> Response:
    return _send(request, "index.html")


async def asset(request: Request) -> Response:
    return _send(request, request.path_params["name"])


async def favicon(request: Request) -> Response:
    return Response(status_code=204)


routes = [
    Route("/", index, methods=["GET"]),
    Route(ASSET_PREFIX + "{name}", asset, methods=["GET"]),
    Route("/favicon.ico", favicon, methods=["GET"]),
]
