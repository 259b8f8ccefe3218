"""What every route needs: its service, its RequestContext, JSON in and out."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from foliko_cli.context.request import RequestContext
from foliko_cli.serve.errors import ApiError
from foliko_cli.service import AsyncFoliko

TIMEOUT_HEADER = "x-foliko-timeout"


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


def service(request: Request) -> AsyncFoliko:
    return request.app.state.services.for_user(request.state.user)


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
