"""One user's view of a storage: their sessions only, under their own names.

``UserScopedStorage`` stores user ``alice``'s session ``work`` as
``~alice~/work`` in the storage it wraps, strips that prefix from every id
it hands back and leaves every other session out of listings. Another
user's session cannot be named at all: ``~bob~/work`` seen from alice is
her own ``~alice~/~bob~/work``. Locks are taken on the stored id, so turns
on one session serialise across users' views and processes exactly as
they do unscoped.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from foliko_cli.errors import (
    ConflictError,
    CorruptSessionError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
)
from foliko_cli.messages.ids import check_user_name
from foliko_cli.messages.record import Messages, SessionRecord, SessionState, SessionSummary
from foliko_cli.storage import capabilities
from foliko_cli.storage.base import SessionStorageAdapter, StoredProblem
from foliko_cli.storage.view import StorageView

if TYPE_CHECKING:
    from foliko_cli.storage.search import SearchHit, SearchQuery


def user_prefix(user: str) -> str:
    return f"~{check_user_name(user)}~/"


class UserScopedStorage(StorageView):
    """``inner`` seen by one user; ``owns_inner`` says whether ``close`` closes it."""

    def __init__(self, inner: SessionStorageAdapter, user: str, *, owns_inner: bool = True):
        super().__init__(inner, owns_inner=owns_inner)
        self.user = user
        self.prefix = user_prefix(user)
        self.indexes = inner.indexes  # type: ignore[misc]

    def _stored(self, session_id: str) -> str:
        return self.prefix + session_id

    def _own(self, stored_id: str) -> str | None:
        return stored_id[len(self.prefix) :] if stored_id.startswith(self.prefix) else None

    def _seen(self, record: SessionRecord | None) -> SessionRecord | None:
        if record is not None:
            record.session_id = record.session_id[len(self.prefix) :]
        return record

    def _stored_record(self, record: SessionRecord) -> SessionRecord:
        copy = SessionRecord(*(getattr(record, name) for name in SessionRecord.FIELDS))
        copy.session_id = self._stored(record.session_id)
        return copy

    def _fragment_key(self, key: str) -> str:
        """Where the inner store keeps this user's fragment ``key``: users never
        share a fragment, not even one of the same text."""
        import hashlib

        return hashlib.sha256(f"{self.prefix}{key}".encode()).hexdigest()

    async def put_fragments(self, texts: Mapping[str, str]) -> bool:
        return await self.inner.put_fragments(
            {self._fragment_key(key): text for key, text in texts.items()}
        )

    async def get_fragments(self, hashes: Collection[str]) -> dict[str, str]:
        inner = {self._fragment_key(key): key for key in hashes}
        found = await self.inner.get_fragments(list(inner))
        return {inner[key]: text for key, text in found.items()}

    async def load(self, session_id: str) -> SessionRecord | None:
        with self._own_name():
            return self._seen(await self.inner.load(self._stored(session_id)))

    async def load_recent(self, session_id: str) -> SessionRecord | None:
        with self._own_name():
            return self._seen(await capabilities.load_recent(self.inner, self._stored(session_id)))

    async def load_state(self, session_id: str) -> SessionRecord | None:
        with self._own_name():
            return self._seen(await capabilities.load_state(self.inner, self._stored(session_id)))

    async def load_window(
        self, session_id: str, start: int, stop: int | None
    ) -> SessionRecord | None:
        stored = self._stored(session_id)
        with self._own_name():
            return self._seen(await capabilities.load_window(self.inner, stored, start, stop))

    async def exists(self) -> bool:
        return await self.inner.exists()

    @contextlib.contextmanager
    def _own_name(self) -> Iterator[None]:
        """A damaged session is named as the user knows it."""
        try:
            yield
        except CorruptSessionError as exc:
            raise self._owned(exc) from None

    def _owned(self, exc: CorruptSessionError) -> CorruptSessionError:
        own = self._own(exc.session_id) or exc.session_id
        return CorruptSessionError(own, exc.where, exc.reason)

    async def load_many(self, session_ids: list[str]) -> dict[str, SessionRecord]:
        with self._own_name():
            found = await capabilities.load_many(self.inner, [self._stored(s) for s in session_ids])
        return {self._own(k) or k: self._seen(v) for k, v in found.items()}  # type: ignore[misc]

    async def content_digests(
        self, session_ids: list[str]
    ) -> dict[str, capabilities.ContentDigest]:
        with self._own_name():
            found = await capabilities.content_digests(
                self.inner, [self._stored(s) for s in session_ids]
            )
        return {self._own(k) or k: v for k, v in found.items()}

    async def save(self, record: SessionRecord, *, expected_revision: int | None = None) -> int:
        with self._own_names(record.session_id, record.session_id):
            return await self.inner.save(
                self._stored_record(record), expected_revision=expected_revision
            )

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        with self._own_name():
            return await capabilities.save_many(
                self.inner,
                [self._stored_record(r) for r in records],
                expected_revisions=expected_revisions,
            )

    async def copy_loaded(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> dict[str, str]:
        with self._own_name():
            differing = await capabilities.copy_loaded(
                self.inner,
                [self._stored_record(r) for r in records],
                expected_revisions=expected_revisions,
            )
        return {self._own(k) or k: v for k, v in differing.items()}

    @contextlib.asynccontextmanager
    async def index_after(self) -> AsyncIterator[None]:
        async with capabilities.index_after(self.inner):
            yield

    async def append(
        self, session_id: str, messages: Messages, state: SessionState, *, expected_revision: int
    ) -> int:
        with self._own_names(session_id, session_id):
            return await self.inner.append(
                self._stored(session_id), messages, state, expected_revision=expected_revision
            )

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        with self._own_names(session_id, session_id):
            return await self.inner.delete(
                self._stored(session_id), expected_revision=expected_revision
            )

    async def forget(
        self,
        records: list[SessionRecord],
        deletions: dict[str, int | None],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> None:
        with self._own_name():
            await self.inner.forget(
                [self._stored_record(r) for r in records],
                {self._stored(s): want for s, want in deletions.items()},
                expected_revisions=expected_revisions,
            )

    async def session_ids(self) -> list[str]:
        return [own for s in await self.inner.session_ids() if (own := self._own(s)) is not None]

    async def list_summaries(self) -> list[SessionSummary]:
        return [
            summary._replace(session_id=own)
            for summary in await self.inner.list_summaries()
            if (own := self._own(summary.session_id)) is not None
        ]

    async def revision(self, session_id: str) -> int | None:
        with self._own_name():
            return await self.inner.revision(self._stored(session_id))

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        held = self.inner.lock(self._stored(session_id), timeout)
        try:
            await held.__aenter__()
        except SessionBusyError as exc:
            raise SessionBusyError(session_id, timeout, exc.holder) from None
        try:
            yield
        except BaseException as exc:
            if not await held.__aexit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            await held.__aexit__(None, None, None)

    async def set_interrupt(self, session_id: str, until_ms: int) -> None:
        await self.inner.set_interrupt(self._stored(session_id), until_ms)

    async def interrupt_requested(self, session_id: str) -> bool:
        return await self.inner.interrupt_requested(self._stored(session_id))

    async def copy(self, source_id: str, target_id: str) -> SessionRecord:
        with self._own_names(source_id, target_id):
            record = await capabilities.copy(
                self.inner, self._stored(source_id), self._stored(target_id)
            )
        return self._seen(record)  # type: ignore[return-value]

    async def rename(self, old_id: str, new_id: str) -> None:
        with self._own_names(old_id, new_id):
            await capabilities.rename(self.inner, self._stored(old_id), self._stored(new_id))

    @contextlib.contextmanager
    def _own_names(self, source_id: str, target_id: str) -> Iterator[None]:
        """Errors name the ids the user gave, never the stored ones."""
        try:
            yield
        except SessionNotFoundError:
            raise SessionNotFoundError(source_id) from None
        except SessionExistsError:
            raise SessionExistsError(target_id) from None
        except ConflictError as exc:
            raise ConflictError(source_id, exc.expected, exc.found) from None
        except CorruptSessionError as exc:
            raise self._owned(exc) from None

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """Through the index of what it wraps, kept to this user's sessions;
        else a scan of this user's sessions alone."""
        from foliko_cli.storage.search import Searchable, scan_search

        if not isinstance(self.inner, Searchable):
            return await scan_search(self, query)
        told = query.on_unreadable
        asked = query._replace(
            session_id=None if query.session_id is None else self._stored(query.session_id),
            session_prefix=self.prefix,
            on_unreadable=None if told is None else (lambda exc: told(self._owned(exc))),
        )
        with self._own_name():
            hits = await self.inner.search(asked)
        return [
            hit._replace(session_id=own)
            for hit in hits
            if (own := self._own(hit.session_id)) is not None  # always: the prefix was asked
        ]

    async def check(self) -> list[StoredProblem]:
        return [
            problem._replace(session_id=own)
            for problem in await capabilities.check(self.inner)
            if (own := self._own(problem.session_id)) is not None
        ]

    async def quarantine(self, problem: StoredProblem) -> str:
        return await capabilities.quarantine(
            self.inner, problem._replace(session_id=self._stored(problem.session_id))
        )

    async def info(self) -> dict[str, Any]:
        return {
            **await self.inner.info(),
            "user": self.user,
            "sessions": len(await self.session_ids()),
        }
