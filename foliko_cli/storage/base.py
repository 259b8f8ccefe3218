"""The storage adapter contract every backend implements (seed §11.3).

All methods are coroutines. Backends whose driver is synchronous and local
(SQLite, files) run their short I/O inline; they never hold a write
transaction while a model runs.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any, ClassVar, NamedTuple

from foliko_cli.clock import now_ms
from foliko_cli.errors import (
    CorruptSessionError,
    SessionNotFoundError,
    StorageError,
    UsageError,
)
from foliko_cli.storage.record import (
    SessionRecord,
    SessionState,
    SessionSummary,
    covered_messages,
)


class ConflictError(StorageError):
    """The stored session moved since it was loaded: a writer skipped the lock."""

    def __init__(self, session_id: str, expected: int, found: int):
        super().__init__(
            f"session {session_id!r} changed while this turn ran (revision {found}, "
            f"expected {expected}); the turn was not saved: run it again"
        )


class SessionExistsError(UsageError):
    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} already exists; choose another name or delete it first"
        )


class StoredProblem(NamedTuple):
    """A record that cannot be read: where it is and why."""

    session_id: str
    where: str
    reason: str


class SessionStorageAdapter(ABC):
    """Where sessions live.

    ``revision`` counts writes to a session; ``append`` refuses to write when
    the stored revision is not the one the caller loaded, so a lost update is
    an error, never silent. ``lock`` serialises turns on one session across
    processes; it must not depend on anything held only in this process.
    """

    name: ClassVar[str]

    @abstractmethod
    async def load(self, session_id: str) -> SessionRecord | None: ...

    @abstractmethod
    async def save(self, record: SessionRecord) -> int:
        """Replace the whole session; return its new revision.

        ``record.saved_at`` is kept when set (migration preserves it); 0 means now.
        """

    @abstractmethod
    async def append(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        state: SessionState,
        *,
        expected_revision: int,
    ) -> int:
        """Add ``messages`` after the stored ones and write ``state``, atomically.

        Creates the session when ``expected_revision`` is 0 and it does not
        exist. Returns the new revision; raises ConflictError on a mismatch.
        """

    @abstractmethod
    async def delete(self, session_id: str) -> bool: ...

    @abstractmethod
    async def list(self) -> list[str]: ...

    @abstractmethod
    async def list_summaries(self) -> list[SessionSummary]: ...

    async def revision(self, session_id: str) -> int | None:
        record = await self.load(session_id)
        return None if record is None else record.revision

    async def health_check(self) -> bool:
        try:
            await self.list()
        except Exception:
            return False
        return True

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        """Hold the session for one turn; raise SessionBusyError after ``timeout`` s."""
        yield

    async def copy(self, source_id: str, target_id: str) -> SessionRecord:
        record = await self.load(source_id)
        if record is None:
            raise SessionNotFoundError(source_id)
        if await self.revision(target_id) is not None:
            raise SessionExistsError(target_id)
        now = now_ms()
        copied = SessionRecord(
            session_id=target_id,
            messages=[dict(m) for m in record.messages],
            variables=dict(record.variables),
            metadata={**record.metadata, "created_at": now, "last_active": now},
            compression_state=dict(record.compression_state),
        )
        copied.revision = await self.save(copied)
        return copied

    async def rename(self, old_id: str, new_id: str) -> None:
        await self.copy(old_id, new_id)
        await self.delete(old_id)

    async def save_many(self, records: list[SessionRecord]) -> list[int]:
        """Replace several sessions; backends batch this for migration speed."""
        return [await self.save(record) for record in records]

    async def load_recent(self, session_id: str) -> SessionRecord | None:
        """The session with only the messages a turn sends: those after the
        compression summary (``compression_state.covered``); ``first_seq`` says
        where they start. Backends that can read a range override this, so a
        turn on a long, compressed session reads a bounded part of it (P2)."""
        record = await self.load(session_id)
        if record is not None:
            start = covered_messages(record, len(record.messages))
            record.messages = record.messages[start:]
            record.first_seq = start
        return record

    async def load_state(self, session_id: str) -> SessionRecord | None:
        """The session without its messages: variables, metadata, compression
        state and revision; ``first_seq`` is the message count. Backends that
        can read the session row alone override this, so updating a variable
        costs the same however long the history."""
        record = await self.load(session_id)
        if record is not None:
            record.first_seq = len(record.messages)
            record.metadata["message_count"] = len(record.messages)
            record.messages = []
        return record

    async def load_many(self, session_ids: list[str]) -> dict[str, SessionRecord]:
        """The sessions that exist among ``session_ids``; backends batch this."""
        found = {}
        for session_id in session_ids:
            record = await self.load(session_id)
            if record is not None:
                found[session_id] = record
        return found

    async def check(self) -> list[StoredProblem]:
        """Every record that cannot be read (``storage check``)."""
        problems = []
        for session_id in await self.list():
            try:
                await self.load(session_id)
            except CorruptSessionError as exc:
                problems.append(StoredProblem(session_id, exc.where, exc.reason))
        return problems

    async def quarantine(self, problem: StoredProblem) -> str:
        """Move an unreadable record aside (never delete it); return where it went."""
        raise StorageError(
            f"the {self.name} backend cannot move records aside; "
            f"remove session {problem.session_id!r} by hand"
        )

    async def info(self) -> dict[str, Any]:
        """What ``storage info`` prints: at least backend, location, sessions."""
        return {"backend": self.name, "location": self.location, "sessions": len(await self.list())}

    @property
    def location(self) -> str:
        return self.name

    async def close(self) -> None:
        return None
