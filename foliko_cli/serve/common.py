"""What every route needs: its service, its RequestContext, JSON in and out,
and its ids from the path.

One path segment is one id: routes name ids as ``{name:id}``, which matches
a single segment and is percent-decoded after matching (the middleware
keeps an encoded ``/`` inside its segment), so ``/v1/sessions/a%2Fb/vars``
is the variables of session ``a/b`` and ``/v1/sessions/a/b`` no route.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

import orjson
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response

from foliko_cli.context.request import RequestContext
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.user_services import SCOPE_KEY
from foliko_cli.service import AsyncFoliko

TIMEOUT_HEADER = "x-foliko-timeout"
MAX_METADATA_PAIRS = 16


class IdConvertor(Convertor):
    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("id", IdConvertor())


def check_metadata(value: Any) -> dict[str, str]:
    """OpenAI's metadata: at most 16 pairs of strings, keys up to 64 and values
    up to 512 characters."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_METADATA_PAIRS:
        raise ApiError(
            400,
            f"metadata must be an object of at most {MAX_METADATA_PAIRS} pairs",
            param="metadata",
        )
    for key, text in value.items():
        if not isinstance(text, str) or len(key) > 64 or len(text) > 512:
            raise ApiError(
                400,
                "metadata values must be strings (keys up to 64, values up to 512 characters)",
                param="metadata",
            )
    return value


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


def service(request: Request) -> AsyncFoliko:
    leases = request.scope.get(SCOPE_KEY)
    return request.app.state.services.for_user(request.state.user, leases)


def keep_service(request: Request) -> Callable[[], None]:
    """One more lease on the service this request uses, for work that outlives
    the request; call the result when that work is done."""
    lease = request.scope.get(SCOPE_KEY, {}).get(request.state.user)
    if lease is None:
        return lambda: None
    lease.uses += 1
    return lease.release


def turn_timeout(request: Request) -> float | None:
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise ApiError(400, f"{TIMEOUT_HEADER} must be a number of seconds in (0, 3600]")
    return value


def request_context(request: Request, svc: AsyncFoliko) -> RequestContext:
    ids = request.state.ids
    return svc.request(
        turn_timeout(request),
        request_id=ids.request_id,
        trace_id=ids.trace_id,
        parent_span_id=ids.parent_span_id,
        user_id=request.state.user,
    )


async def json_body(request: Request) -> dict[str, Any]:
    body = await request.body()
    if not body.strip():
        return {}
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return data


def field(data: dict[str, Any], name: str, kinds: type | tuple[type, ...], default: Any = None):
    value = data.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ApiError(400, f"{name} has the wrong type", param=name)
    if not isinstance(value, kinds):
        raise ApiError(400, f"{name} has the wrong type", param=name)
    return value


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer", param=name) from None
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be between {low} and {high}", param=name)
    return value


def seconds(ms: Any) -> int:
    return int(ms or 0) // 1000
