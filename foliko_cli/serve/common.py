"""What every route needs: its service, its RequestContext and its ids from
the path (its body and answer: schema.py).

One path segment is one id: routes name ids as ``{name:id}``, which matches
a single segment and is percent-decoded after matching (the middleware
keeps an encoded ``/`` inside its segment), so ``/v1/sessions/a%2Fb/vars``
is the variables of session ``a/b`` and ``/v1/sessions/a/b`` no route.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast
from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request

from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.state import principal
from foliko_cli.serve.user_services import SCOPE_KEY
from foliko_cli.service import AsyncFoliko
from foliko_cli.service.values import IF_BUSY, RequestContext

TIMEOUT_HEADER = "x-foliko-timeout"
IF_BUSY_HEADER = "Foliko-If-Busy"


class IdConvertor(Convertor[str]):
    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("id", IdConvertor())


def service(request: Request) -> AsyncFoliko:
    """The service of the request's user, held to its key's scope."""
    leases = request.scope.get(SCOPE_KEY)
    state = request.state
    return cast(AsyncFoliko, request.app.state.services.for_user(state.user, leases, state.scope))


def keep_service(request: Request) -> Callable[[], None]:
    """One more lease on the service this request uses, for work that outlives
    the request; call the result when that work is done."""
    state = request.state
    if state.user is None and state.scope is None:
        return lambda: None
    lease = request.scope.get(SCOPE_KEY, {}).get(principal(state.user, state.scope))
    if lease is None:
        return lambda: None
    lease.uses += 1
    return cast("Callable[[], None]", lease.release)


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


def seconds(ms: Any) -> int:
    return int(ms or 0) // 1000


def if_busy(request: Request) -> str:
    """What a turn naming a session does when another turn holds it: the
    ``Foliko-If-Busy`` header (wait, reject or interrupt; wait when absent)."""
    raw = request.headers.get(IF_BUSY_HEADER)
    if raw is None:
        return "wait"
    value = raw.strip().lower()
    if value not in IF_BUSY:
        raise ApiError(
            400,
            f"{IF_BUSY_HEADER} must be wait, reject or interrupt, not {raw!r}",
            param=IF_BUSY_HEADER,
        )
    return value
