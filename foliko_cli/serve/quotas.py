"""Quotas per user: turns a minute and tokens a day, counted in the storage.

The API key file may give a user of ``[keys]`` limits in a table of its own::

    [keys]
    "sk-alice" = "alice"

    [users.alice]
    max_turns_per_minute = 60
    max_tokens_per_day = 200000

A turn is one model turn: ``POST /v1/responses`` (background ones too),
``POST /v1/chat/completions`` and a WebSocket ``response.create``. Before a
turn starts it is refused (429, ``rate_limit_exceeded``) when its user has
run ``max_turns_per_minute`` turns in this minute, or has used
``max_tokens_per_day`` tokens (input + output) today; otherwise it counts as
one turn, whether it then succeeds or not. Its tokens are counted when it
has finished, so the turn that goes over the daily limit completes and the
next is refused. A turn that fails counts no tokens.

Windows are fixed: the minute of the clock and the UTC day. The counters
are the variables of foliko's own session ``.foliko/quota/USER`` in the
shared storage (outside every user's view), each change a compare-and-set
on its revision, so all workers and servers on one storage count together
(with the memory storage, each process counts alone), and their clocks must
agree. A user without limits costs nothing: no storage access at all.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
from starlette.requests import Request
from starlette.responses import Response

from foliko_cli.errors import ConflictError, SessionExistsError, UsageError
from foliko_cli.messages.record import SessionState, new_metadata
from foliko_cli.messages.usage import spent_tokens
from foliko_cli.serve.errors import ApiError
from foliko_cli.service.common import INTERNAL_PREFIX

if TYPE_CHECKING:
    from foliko_cli.messages.record import SessionRecord
    from foliko_cli.service import AsyncFoliko

QUOTA_PREFIX = INTERNAL_PREFIX + "quota/"
LIMIT_NAMES = ("max_turns_per_minute", "max_tokens_per_day")
DAY_S = 86400

_log = logging.getLogger("foliko.serve")


class Limits(NamedTuple):
    max_turns_per_minute: int | None = None
    max_tokens_per_day: int | None = None


def limits_from(users: Any, known: Iterable[str], path: str) -> dict[str, Limits]:
    """The ``[users]`` table of the key file, checked: each entry a user of
    ``[keys]`` with limits that are positive integers."""
    if users is None:
        return {}
    where = f"the API key file {path!r}"
    if not isinstance(users, dict):
        raise UsageError(
            f"{where}: users must be a table of [users.NAME] tables",
            fix="write [users.alice] max_turns_per_minute = 60",
        )
    known = set(known)
    found: dict[str, Limits] = {}
    for user, table in users.items():
        entry = f"{where}: [users.{user}]"
        if user not in known:
            raise UsageError(f"{entry} names no user of [keys]", fix="give the user a key first")
        if not isinstance(table, dict):
            raise UsageError(f"{entry} must be a table", fix="write max_turns_per_minute = 60")
        for name, value in table.items():
            if name not in LIMIT_NAMES:
                raise UsageError(
                    f"{entry} has an unknown setting {name!r}",
                    fix="use " + " or ".join(LIMIT_NAMES),
                )
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                example = 60 if name == "max_turns_per_minute" else 100000
                raise UsageError(
                    f"{entry} {name} = {value!r} is not a positive integer",
                    fix=f"write {name} = {example}, or leave it out for no limit",
                )
        if table:
            found[user] = Limits(**table)
    return found


class QuotaExceeded(ApiError):
    """A 429 as OpenAI sends it: ``type`` is ``requests`` or ``tokens``, and
    ``Retry-After`` (seconds) says when the window ends."""

    def __init__(self, message: str, kind: str, retry_after: float):
        super().__init__(429, message, code="rate_limit_exceeded")
        self.kind = kind
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        headers = {
            "retry-after": str(max(1, math.ceil(self.retry_after))),
            "retry-after-ms": str(max(1, math.ceil(self.retry_after * 1000))),
        }
        if self.retry_after > 60:  # the SDKs would retry in seconds, to no avail
            headers["x-should-retry"] = "false"
        return headers


async def quota_response(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, QuotaExceeded)
    error = {"message": exc.message, "type": exc.kind, "param": None, "code": exc.code}
    return Response(
        orjson.dumps({"error": error}),
        status_code=429,
        media_type="application/json",
        headers=exc.headers(),
    )


def _windows(now: float) -> tuple[int, str]:
    day = datetime.datetime.fromtimestamp(now, datetime.UTC).date().isoformat()
    return int(now // 60), day


class Quotas:
    """The limits of the users that have some, counted in ``storage`` (the
    server's unscoped one)."""

    def __init__(self, limits: dict[str, Limits]):
        self.limits = limits

    @classmethod
    def of(cls, limits: dict[str, Limits] | None) -> Quotas | None:
        return cls(limits) if limits else None

    def limits_of(self, user: str | None) -> Limits | None:
        return None if user is None else self.limits.get(user)

    async def admit(self, svc: AsyncFoliko, user: str | None) -> None:
        """Count one turn of ``user``, or raise QuotaExceeded."""
        limits = self.limits_of(user)
        if limits is None:
            return
        assert user is not None
        while True:
            now = time.time()
            minute, day = _windows(now)
            record = await svc.get_state(QUOTA_PREFIX + user)
            counters = dict(record.variables) if record is not None else {}
            tokens = counters.get("tokens", 0) if counters.get("day") == day else 0
            daily = limits.max_tokens_per_day
            if daily is not None and tokens >= daily:
                raise QuotaExceeded(
                    f"{user} has used {tokens:,} tokens today, the quota is {daily:,} a day; "
                    "try again after 00:00 UTC",
                    "tokens",
                    DAY_S - now % DAY_S,
                )
            per_minute = limits.max_turns_per_minute
            if per_minute is None:
                return
            turns = counters.get("turns", 0) if counters.get("minute") == minute else 0
            if turns >= per_minute:
                wait = 60 - now % 60
                raise QuotaExceeded(
                    f"{user} has run {turns:,} turns this minute, the quota is {per_minute:,} "
                    f"a minute; try again in {math.ceil(wait)} s",
                    "requests",
                    wait,
                )
            counters.update(minute=minute, turns=turns + 1)
            if await _written(svc, user, record, counters):
                return

    async def charge(self, svc: AsyncFoliko, user: str | None, tokens: int) -> None:
        """Add a finished turn's tokens to ``user``'s day (a failed write is logged)."""
        limits = self.limits_of(user)
        if limits is None or limits.max_tokens_per_day is None or tokens <= 0:
            return
        assert user is not None
        try:
            while True:
                _, day = _windows(time.time())
                record = await svc.get_state(QUOTA_PREFIX + user)
                counters = dict(record.variables) if record is not None else {}
                used = counters.get("tokens", 0) if counters.get("day") == day else 0
                counters.update(day=day, tokens=used + tokens)
                if await _written(svc, user, record, counters):
                    return
        except Exception as exc:
            _log.warning("the token count of %s was not saved: %s", user, exc)


async def _written(
    svc: AsyncFoliko, user: str, record: SessionRecord | None, counters: dict[str, Any]
) -> bool:
    """Compare-and-set the counters; False when another write came first."""
    if record is None:
        state = SessionState(counters, new_metadata(), {})
        expected = 0
    else:
        state = SessionState(counters, record.metadata, record.compression_state)
        expected = record.revision
    try:
        await svc.storage.append(QUOTA_PREFIX + user, [], state, expected_revision=expected)
    except (ConflictError, SessionExistsError):
        return False
    return True


def turn_tokens(usage: dict[str, Any] | None) -> int:
    return sum(spent_tokens(usage))
