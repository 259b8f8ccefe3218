"""Every failure as OpenAI's error body ``{"error": {message, type, param, code}}``,
with the HTTP status a client expects for it."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
from starlette.responses import Response

from foliko_cli.errors import (
    ContextOverflowError,
    CorruptSessionError,
    FolikoError,
    Interrupted,
    InvalidReplyError,
    InvalidSessionIdError,
    ModelError,
    ModelRejectedError,
    NotInTrashError,
    SessionBusyError,
    SessionNotFoundError,
    StorageError,
    TurnTimeoutError,
    UnknownModelError,
    UsageError,
)
from foliko_cli.storage.base import ConflictError, SessionExistsError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
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
    *,
    retry: bool | None = None,
) -> Response:
    """The error as a response; ``retry`` False sends ``x-should-retry: false``,
    which the OpenAI SDKs obey, for a failure no retry can change."""
    headers = dict(headers or {})
    if status == 401:
        headers["www-authenticate"] = "Bearer"
    if retry is False:
        headers["x-should-retry"] = "false"
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


class Status(NamedTuple):
    status: int
    code: str
    retry: bool = False


def status_of(exc: FolikoError) -> Status:
    """The HTTP status and error code of a foliko error, and whether a retry may help."""
    if isinstance(exc, SessionNotFoundError | NotInTrashError):
        return Status(404, "not_found")
    if isinstance(exc, SessionExistsError):
        return Status(409, "session_exists")
    if isinstance(exc, ConflictError):
        return Status(409, "conflict")  # what was read is gone: read it again, then decide
    if isinstance(exc, SessionBusyError):
        return Status(409, "session_busy", retry=True)
    if isinstance(exc, InvalidSessionIdError):
        return Status(400, "invalid_session_id")
    if isinstance(exc, UnknownModelError):
        return Status(404, "model_not_found")
    if isinstance(exc, UsageError):
        return Status(400, "invalid_request")
    if isinstance(exc, TurnTimeoutError) or _provider_timeout(exc):
        return Status(504, "timeout", retry=True)
    if isinstance(exc, InvalidReplyError):
        return Status(502, "invalid_reply")
    if isinstance(exc, ContextOverflowError):
        return Status(400, "context_length_exceeded")
    if isinstance(exc, ModelRejectedError):
        if 400 <= exc.status < 500 and exc.status not in (401, 403):
            return Status(400, "model_rejected_request")
        return Status(502, "model_error")
    if isinstance(exc, ModelError):
        return Status(502, "model_error", retry=True)
    if isinstance(exc, CorruptSessionError):
        return Status(500, "session_damaged")  # no retry mends it: a repair or a delete does
    if isinstance(exc, StorageError):
        return Status(503, "storage_error", retry=True)
    if isinstance(exc, Interrupted):
        return Status(503, "shutting_down", retry=True)
    return Status(500, "internal_error")


def foliko_error_response(exc: FolikoError) -> Response:
    status = status_of(exc)
    return error_response(status.status, str(exc), status.code, retry=status.retry)


def error_event(exc: BaseException) -> dict[str, Any]:
    """The body of an error met after a stream has started."""
    if isinstance(exc, FolikoError):
        status = status_of(exc)
        kind = _TYPES.get(status.status, "server_error")
        return {"message": str(exc), "type": kind, "code": status.code}
    if isinstance(exc, ApiError):
        return {"message": exc.message, "type": _TYPES.get(exc.status), "code": exc.code}
    return {"message": "internal error", "type": "server_error", "code": "internal_error"}
