"""Every failure as OpenAI's error body ``{"error": {message, type, param, code}}``,
with the HTTP status a client expects for it."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from foliko_cli.errors import (
    FolikoError,
    Interrupted,
    InvalidReplyError,
    InvalidSessionIdError,
    ModelError,
    SessionBusyError,
    SessionNotFoundError,
    StorageError,
    TurnTimeoutError,
    UnknownModelError,
    UsageError,
)
from foliko_cli.storage.base import SessionExistsError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, code: str | None = None, param=None):
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        super().__init__(message)


class BodyTooLarge(ApiError):
    def __init__(self, limit: int):
        super().__init__(
            413,
            f"the request body is over the limit of {limit:,} bytes; send less",
            code="body_too_large",
        )


def error_body(status: int, message: str, code: str | None = None, param=None) -> bytes:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = {"message": message, "type": kind, "param": param, "code": code}
    return orjson.dumps({"error": error})


def error_response(
    status: int,
    message: str,
    code: str | None = None,
    param=None,
    headers: dict[str, str] | None = None,
) -> Response:
    if status == 401:
        headers = {**(headers or {}), "www-authenticate": "Bearer"}
    return Response(
        error_body(status, message, code, param),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _provider_timeout(exc: FolikoError) -> bool:
    """A provider that ran out of the turn's time (models/http.py raises a plain
    ModelError for it, whichever of the two deadlines fires first)."""
    return isinstance(exc, ModelError) and "did not answer in time" in str(exc)


def status_of(exc: FolikoError) -> tuple[int, str]:
    """The HTTP status and error code of a foliko error."""
    if isinstance(exc, SessionNotFoundError):
        return 404, "session_not_found"
    if isinstance(exc, SessionExistsError):
        return 409, "session_exists"
    if isinstance(exc, SessionBusyError):
        return 409, "session_busy"
    if isinstance(exc, InvalidSessionIdError):
        return 400, "invalid_session_id"
    if isinstance(exc, UnknownModelError):
        return 400, "model_not_found"
    if isinstance(exc, UsageError):
        return 400, "invalid_request"
    if isinstance(exc, TurnTimeoutError) or _provider_timeout(exc):
        return 504, "timeout"
    if isinstance(exc, InvalidReplyError):
        return 502, "invalid_reply"
    if isinstance(exc, ModelError):
        return 502, "model_error"
    if isinstance(exc, StorageError):
        return 503, "storage_error"
    if isinstance(exc, Interrupted):
        return 503, "shutting_down"
    return 500, "internal_error"


def foliko_error_response(exc: FolikoError) -> Response:
    status, code = status_of(exc)
    return error_response(status, str(exc), code)


def error_event(exc: BaseException) -> dict[str, Any]:
    """The body of an error met after a stream has started."""
    if isinstance(exc, FolikoError):
        status, code = status_of(exc)
        return {"message": str(exc), "type": _TYPES.get(status, "server_error"), "code": code}
    if isinstance(exc, ApiError):
        return {"message": exc.message, "type": _TYPES.get(exc.status), "code": exc.code}
    return {"message": "internal error", "type": "server_error", "code": "internal_error"}
