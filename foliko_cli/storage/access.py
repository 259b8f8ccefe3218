"""What a client may do: a ``Scope`` (write or only read; which sessions), and
``ScopedStorage``, the view of a storage that holds a service to it.

A session outside the scope is absent from the view: ``load`` finds
nothing, listings and search leave it out before they count or cut, a
write or a lock on it is ``SessionNotFoundError`` — exactly what a session
that does not exist gives, whether it exists or not. A view that may not
write refuses every write and every lock (every write holds its session's
lock first, so a turn is refused before its model runs) with
``ScopeError``. A trash entry is in scope when the session it was is;
foliko's other own records (``.foliko/``: a background response's journal)
are passed through, listings never show them.

While ``touching()`` collects, the view adds the id of every session in
scope a call reads or writes to the collected set: what an audit entry
names. Several views on one store never share a set: it belongs to the
task (a ``ContextVar``).
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from foliko_cli.common.clock import since_ms
from foliko_cli.errors import ScopeError, SessionNotFoundError, UsageError
from foliko_cli.messages.ids import is_internal
from foliko_cli.messages.record import Messages, SessionRecord, SessionState, SessionSummary
from foliko_cli.storage import capabilities
from foliko_cli.storage.base import SessionStorageAdapter, StoredProblem
from foliko_cli.storage.view import StorageView

if TYPE_CHECKING:
    from foliko_cli.storage.search import SearchHit, SearchQuery

_touched: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "foliko_touched", default=None
)

SINCE = "since:"


class Scope(NamedTuple):
    """``write``: may change sessions; ``sessions``: the patterns a session's id
    must match one of (globs, or ``since:DATE`` for sessions created since),
    none for every session. ``within`` holds further groups of patterns a
    narrowed scope must also match (one pattern of each)."""

    write: bool = True
    sessions: tuple[str, ...] = ()
    within: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def of(cls, write: bool, sessions: Any = ()) -> Scope:
        """A scope from what a flag or a key file gives; a bad pattern is a UsageError."""
        patterns = tuple(sessions or ())
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern.strip():
                raise UsageError(f"session pattern {pattern!r} is empty or not a string")
            if pattern.startswith(SINCE):
                since_of(pattern)
        return cls(bool(write), patterns)

    @property
    def full(self) -> bool:
        return self.write and not self.sessions and not self.within

    @property
    def name(self) -> str:
        """``read`` or ``write``, as errors and the key file say it."""
        return "write" if self.write else "read"

    def narrowed(self, other: Scope) -> Scope:
        """What both allow."""
        groups = [g for g in (*self.within, self.sessions, *other.within, other.sessions) if g]
        first = groups[0] if groups else ()
        return Scope(self.write and other.write, first, tuple(groups[1:]))

    @property
    def dated(self) -> bool:
        return any(p.startswith(SINCE) for group in self._groups() for p in group)

    def _groups(self) -> tuple[tuple[str, ...], ...]:
        return tuple(g for g in (self.sessions, *self.within) if g)

    def sees(self, session_id: str, created_at: int | None = None) -> bool:
        """Whether ``session_id`` (created at ``created_at`` ms, when a pattern
        asks for it) is in scope."""
        if is_internal(session_id):
            from foliko_cli.storage.trash import parse

            entry = parse(session_id)
            if entry is None:
                return True
            session_id = entry.session_id
        return all(_matches(group, session_id, created_at) for group in self._groups())


def _matches(group: tuple[str, ...], session_id: str, created_at: int | None) -> bool:
    for pattern in group:
        if pattern.startswith(SINCE):
            if created_at is not None and created_at >= since_of(pattern):
                return True
        elif fnmatch.fnmatchcase(session_id, pattern):
            return True
    return False


def since_of(pattern: str) -> int:
    """The ms time of ``since:WHEN``: an ISO 8601 date or time (UTC unless it
    says), or a duration (``30d``: that long ago, a window that moves)."""
    text = pattern[len(SINCE) :].strip()
    found = since_ms(text) if text else None
    if found is None:
        raise UsageError(
            f"session pattern {pattern!r}: {text!r} is not a date",
            fix="write since:2026-01-31 (an ISO 8601 date or time) or since:30d",
        )
    return found


@contextlib.contextmanager
def touching() -> Iterator[set[str]]:
    """Collect the sessions the views read or write in this task (and the tasks
    it starts) until the block ends."""
    found: set[str] = set()
    token = _touched.set(found)
    try:
        yield found
    finally:
        _touched.reset(token)


def _touch(*session_ids: str) -> None:
    found = _touched.get()
    if found is not None:
        found.update(s for s in session_ids if not is_internal(s))


class ScopedStorage(StorageView):
    """``inner`` as ``scope`` lets a client see it; ``close`` closes ``inner``
    when ``owns_inner``."""

    def __init__(self, inner: SessionStorageAdapter, scope: Scope, *, owns_inner: bool = True):
        super().__init__(inner, owns_inner=owns_inner)
        self.scope = scope

    async def visible(self, session_id: str) -> bool:
        created_at = None
        if self.scope.dated and not is_internal(session_id):
            state = await capabilities.load_state(self.inner, session_id)
            created_at = None if state is None else _created(state)
        seen = self.scope.sees(session_id, created_at)
        if seen:
            _touch(session_id)
        return seen

    def _sees_summary(self, summary: SessionSummary) -> bool:
        return self.scope.sees(summary.session_id, summary.created_at)

    async def check_write(self, *session_ids: str) -> None:
        if not self.scope.write:
            raise ScopeError("write")
        for session_id in session_ids:
            if not await self.visible(session_id):
                raise SessionNotFoundError(session_id)

    async def load(self, session_id: str) -> SessionRecord | None:
        return await self.inner.load(session_id) if await self.visible(session_id) else None

    async def load_recent(self, session_id: str) -> SessionRecord | None:
        if not await self.visible(session_id):
            return None
        return await capabilities.load_recent(self.inner, session_id)

    async def load_state(self, session_id: str) -> SessionRecord | None:
        if not await self.visible(session_id):
            return None
        return await capabilities.load_state(self.inner, session_id)

    async def load_window(
        self, session_id: str, start: int, stop: int | None
    ) -> SessionRecord | None:
        if not await self.visible(session_id):
            return None
        return await capabilities.load_window(self.inner, session_id, start, stop)

    async def load_many(self, session_ids: list[str]) -> dict[str, SessionRecord]:
        return await capabilities.load_many(self.inner, await self._seen(session_ids))

    async def content_digests(
        self, session_ids: list[str]
    ) -> dict[str, capabilities.ContentDigest]:
        return await capabilities.content_digests(self.inner, await self._seen(session_ids))

    async def _seen(self, session_ids: list[str]) -> list[str]:
        return [s for s in session_ids if await self.visible(s)]

    async def revision(self, session_id: str) -> int | None:
        return await self.inner.revision(session_id) if await self.visible(session_id) else None

    async def exists(self) -> bool:
        return await self.inner.exists()

    async def save(self, record: SessionRecord, *, expected_revision: int | None = None) -> int:
        await self.check_write(record.session_id)
        return await self.inner.save(record, expected_revision=expected_revision)

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        await self.check_write(*(r.session_id for r in records))
        return await capabilities.save_many(
            self.inner, records, expected_revisions=expected_revisions
        )

    async def copy_loaded(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> dict[str, str]:
        await self.check_write(*(r.session_id for r in records))
        return await capabilities.copy_loaded(
            self.inner, records, expected_revisions=expected_revisions
        )

    async def append(
        self, session_id: str, messages: Messages, state: SessionState, *, expected_revision: int
    ) -> int:
        await self.check_write(session_id)
        return await self.inner.append(
            session_id, messages, state, expected_revision=expected_revision
        )

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        if not self.scope.write:
            raise ScopeError("write")
        if not await self.visible(session_id):
            if expected_revision:
                raise SessionNotFoundError(session_id)
            return False
        return await self.inner.delete(session_id, expected_revision=expected_revision)

    async def copy(self, source_id: str, target_id: str) -> SessionRecord:
        await self.check_write(source_id, target_id)
        return await capabilities.copy(self.inner, source_id, target_id)

    async def rename(self, old_id: str, new_id: str) -> None:
        await self.check_write(old_id, new_id)
        await capabilities.rename(self.inner, old_id, new_id)

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        await self.check_write(session_id)
        async with self.inner.lock(session_id, timeout):
            yield

    async def session_ids(self) -> list[str]:
        if not self.scope.dated:
            found = [s for s in await self.inner.session_ids() if self.scope.sees(s)]
        else:
            found = [s.session_id for s in await self.list_summaries(touch=False)]
        return found

    async def list_summaries(self, *, touch: bool = True) -> list[SessionSummary]:
        found = [s for s in await self.inner.list_summaries() if self._sees_summary(s)]
        if touch:
            _touch(*(s.session_id for s in found))
        return found

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """The inner search kept to the scope, cut to the limit after it is kept:
        asked again for more until enough are in scope or there are no more."""
        from foliko_cli.storage.search import search

        if query.session_id is not None:
            return await search(self.inner, query) if await self.visible(query.session_id) else []
        asked = max(query.limit, 1) * 4
        while True:
            hits = await search(self.inner, query._replace(limit=asked))
            kept = [hit for hit in hits if await self.visible(hit.session_id)]
            if len(kept) >= query.limit or len(hits) < asked:
                return kept[: query.limit]
            asked *= 4

    async def check(self) -> list[StoredProblem]:
        return [p for p in await capabilities.check(self.inner) if self.scope.sees(p.session_id)]

    async def quarantine(self, problem: StoredProblem) -> str:
        await self.check_write(problem.session_id)
        return await capabilities.quarantine(self.inner, problem)


def _created(record: SessionRecord) -> int:
    created = record.metadata.get("created_at", record.saved_at)
    return created if isinstance(created, int) else 0
