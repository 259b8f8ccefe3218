"""Every failure as OpenAI's error body ``{"error": {message, type, param, code}}``,
with the HTTP status a client expects for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec
from starlette.responses import Response

from foliko_cli.errors import (
    FolikoError,
    Hint,
    Interrupted,
)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
}


SHUTTING_DOWN = Interrupted(
    "the server is shutting down and stopped this turn; nothing of it was saved: send it again",
    signal_number=15,
)


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, *, code: str | None = None, param: str | None = None
    ) -> None:
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


class ErrorDetail(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(msgspec.Struct):
    """Every error answer: OpenAI's error object."""

    error: ErrorDetail


def error_body(
    status: int, message: str, code: str | None = None, param: str | None = None
) -> bytes:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return msgspec.json.encode(ErrorBody(ErrorDetail(message, kind, param, code)))


def error_response(
    status: int,
    message: str,
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    retry: bool | None = None,
) -> Response:
    """The error as a response; ``retry`` False sends ``x-should-retry: false``,
    which the OpenAI SDKs obey, for a failure no retry can change."""
    sent = dict(headers or {})
    if status == 401:
        sent["www-authenticate"] = "Bearer"
    if retry is False:
        sent["x-should-retry"] = "false"
    return Response(
        error_body(status, message, code, param),
        status_code=status,
        media_type="application/json",
        headers=sent,
    )


class Status(NamedTuple):
    status: int
    code: str
    retry: bool = False


def status_of(exc: FolikoError) -> Status:
    """The HTTP status and error code of a foliko error, and whether a retry may
    help: what the error's class says (errors.py)."""
    return Status(exc.http_status, exc.code, exc.retryable)


def said(exc: FolikoError) -> str:
    """The error's message, naming the header its fix is about."""
    if exc.hint == Hint.IF_BUSY:
        return f"{exc} (the Foliko-If-Busy header: wait or interrupt)"
    return str(exc)


def foliko_error_response(exc: FolikoError) -> Response:
    status = status_of(exc)
    return error_response(status.status, said(exc), status.code, retry=status.retry)


def error_event(exc: BaseException) -> dict[str, Any]:
    """The body of an error met after a stream has started."""
    if isinstance(exc, FolikoError):
        status = status_of(exc)
        kind = _TYPES.get(status.status, "server_error")
        return {"message": said(exc), "type": kind, "code": status.code}
    if isinstance(exc, ApiError):
        return {"message": exc.message, "type": _TYPES.get(exc.status), "code": exc.code}
    return {"message": "internal error", "type": "server_error", "code": "internal_error"}
