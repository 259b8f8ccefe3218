"""The storage adapter contract every backend implements (seed §11.3).

All methods are coroutines. Backends whose driver is synchronous and local
(SQLite, files) run their short I/O inline; they never hold a write
transaction while a model runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
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
    """A compare-and-set write found another revision than the one it expected.

    ``found`` is 0 when the session no longer exists. Nothing was written.
    """

    def __init__(self, session_id: str, expected: int, found: int):
        self.session_id = session_id
        self.expected = expected
        self.found = found
        if found:
            what = f"changed while this operation ran (revision {found}, expected {expected})"
        else:
            what = f"was deleted while this operation ran (expected revision {expected})"
        super().__init__(f"session {session_id!r} {what}; nothing was saved: run it again")


def check_expected(session_id: str, expected: int | None, found: int) -> None:
    """The compare-and-set rule of ``save``/``delete``; ``found`` is 0 when absent."""
    if expected is None:
        return
    if expected == 0:
        if found:
            raise SessionExistsError(session_id)
        return
    if found != expected:
        raise ConflictError(session_id, expected, found)


def expected_list(
    records: list[SessionRecord], expected_revisions: list[int | None] | None
) -> list[int | None]:
    """``expected_revisions`` checked against ``records`` (None: every write unconditional)."""
    if expected_revisions is None:
        return [None] * len(records)
    if len(expected_revisions) != len(records):
        raise ValueError("save_many needs one expected revision per record")
    return list(expected_revisions)


class SessionExistsError(UsageError):
    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} already exists; choose another name or delete it first"
        )


class StoredProblem(NamedTuple):
    """A record that cannot be read: where it is and why. A ``stray`` problem is
    litter that holds no session (an orphan lock file, a killed write's
    temporary file): worth removing, but nothing is lost or unreadable."""

    session_id: str
    where: str
    reason: str
    stray: bool = False


class SessionStorageAdapter(ABC):
    """Where sessions live.

    ``revision`` counts writes to a session. Every write of a whole record
    (``save``, ``save_many``, ``delete``) and every ``append`` is a
    compare-and-set on it, checked and written atomically (in one
    transaction, one Lua script, or under the session's file write lock):

    * ``expected_revision=None``: unconditional (an explicit overwrite);
    * ``0``: the session must not exist, else SessionExistsError (``append``:
      ConflictError);
    * ``N > 0``: the stored revision must be N, else ConflictError, also when
      the session is gone (``found`` 0).

    So a lost update is an error, never silent. ``lock`` serialises turns on
    one session across processes; it must not depend on anything held only in
    this process.
    """

    name: ClassVar[str]

    @abstractmethod
    async def load(self, session_id: str) -> SessionRecord | None: ...

    @abstractmethod
    async def save(self, record: SessionRecord, *, expected_revision: int | None = None) -> int:
        """Replace the whole session; return its new revision.

        ``expected_revision`` follows the compare-and-set rule of the class
        docstring. ``record.saved_at`` is kept when set (migration preserves
        it); 0 means now. A record that does not have the canonical shape
        (record.check_record) raises InvalidRecordError and writes nothing.
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
    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        """Remove the session; False when there was none (with ``expected_revision``
        None). ``expected_revision`` N > 0 must match the stored revision, else
        ConflictError (also when absent); 0 is refused unless absent."""

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

    @abstractmethod
    def lock(self, session_id: str, timeout: float) -> AbstractAsyncContextManager[None]:
        """Hold the session exclusively, across processes (and machines, for a
        shared server); raise SessionBusyError after ``timeout`` s. It must not
        rest on anything held only in this process: there is no default."""

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
        copied.revision = await self.save(copied, expected_revision=0)
        return copied

    async def rename(self, old_id: str, new_id: str) -> None:
        """Move the session to ``new_id``: everything kept (``created_at`` too)
        but the revision, which is new, so no cache of either id matches it."""
        source = await self.load(old_id)
        if source is None:
            raise SessionNotFoundError(old_id)
        moved = SessionRecord(
            session_id=new_id,
            messages=source.messages,
            variables=source.variables,
            metadata=source.metadata,
            compression_state=source.compression_state,
            saved_at=source.saved_at,
        )
        await self.save(moved, expected_revision=0)
        await self.delete(old_id, expected_revision=source.revision)

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        """Replace several sessions, each by the rule of ``save``; backends batch
        this for migration speed. Backends with transactions write all or none."""
        expected = expected_list(records, expected_revisions)
        return [
            await self.save(record, expected_revision=rev)
            for record, rev in zip(records, expected, strict=True)
        ]

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

    async def exists(self) -> bool:
        """Whether the store itself is there (a file, a directory, a schema); it
        may be empty. Creates nothing. A migration from a store that does not
        exist is a typo, not an empty copy."""
        return True

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
        """Every record that cannot be read (``storage check``); file backends also
        report stray files (orphan lock files, temporary files of killed writes),
        which ``quarantine`` and ``repair_files`` remove."""
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

    async def repair_files(self) -> list[str]:
        """Remove the stray files ``check`` reports (never a session); return their paths."""
        return []

    async def info(self) -> dict[str, Any]:
        """What ``storage info`` prints: at least backend, location, sessions."""
        return {"backend": self.name, "location": self.location, "sessions": len(await self.list())}

    @property
    def location(self) -> str:
        return self.name

    async def close(self) -> None:
        """Release every connection and file this adapter holds."""
        return None
