"""The storage adapter contract every backend implements (seed §11.3).

All methods are coroutines. Backends whose driver is synchronous and local
(SQLite, files) run their short I/O inline; they never hold a write
transaction while a model runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from foliko_cli.errors import ConflictError, SessionExistsError
from foliko_cli.messages.record import SessionRecord, SessionState, SessionSummary


def answers_at_once(storage: object) -> bool:
    """Whether ``storage``'s own class declares that its calls never suspend."""
    return bool(type(storage).__dict__.get("answers_at_once", False))


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


class ProblemKind:
    """What a ``StoredProblem`` is, and so what ``quarantine`` does with it."""

    SESSION = "session"
    """A stored session that cannot be read: moved aside, never deleted."""
    SEED_ROW = "seed-row"
    """An unreadable row of a table the store imports from (SQLite's seed layout): moved aside."""
    STRAY = "stray"
    """Litter that holds no session (an orphan lock file, a killed write's
    temporary file): removed; nothing is lost or unreadable."""
    STORE = "store"
    """The store itself fails its integrity check: nothing to move, left as it is."""


class StoredProblem(NamedTuple):
    """Something ``storage check`` found: which session (``""`` when none), what
    kind of thing (``ProblemKind``), where it is (for people: a path, a table,
    a key) and why it cannot be read."""

    session_id: str
    where: str
    reason: str
    kind: str = ProblemKind.SESSION

    @property
    def stray(self) -> bool:
        return self.kind == ProblemKind.STRAY

    @property
    def holds_session(self) -> bool:
        """Whether a session's data is in it (what a repair must re-read under its lock)."""
        return self.kind in (ProblemKind.SESSION, ProblemKind.SEED_ROW)


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

    This is the core every backend implements. Batches, range reads, copy,
    rename, check and quarantine are optional capabilities (protocols in
    ``storage.capabilities``, whose functions callers use and which fall back
    to a generic version over this core).
    """

    name: ClassVar[str]
    answers_at_once: ClassVar[bool] = False
    """Every call completes without suspending (no network I/O): a turn over
    this storage may run without an event loop (see common/loop.py). Only the
    class that sets it has it (``answers_at_once(storage)``): a subclass's own
    methods may wait, so it says so again if they never do."""

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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """An adapter written for the first contract, whose ``list`` is now
        ``session_ids``, still works (with a DeprecationWarning)."""
        super().__init_subclass__(**kwargs)
        legacy = cls.__dict__.get("list")
        missing = getattr(getattr(cls, "session_ids", None), "__isabstractmethod__", False)
        if legacy is not None and missing:
            import warnings

            warnings.warn(
                f"{cls.__name__}.list() is now called session_ids(); rename it",
                DeprecationWarning,
                stacklevel=2,
            )
            cls.session_ids = legacy  # type: ignore[method-assign]

    @abstractmethod
    async def session_ids(self) -> list[str]:
        """The ids of every stored session."""

    @abstractmethod
    async def list_summaries(self) -> list[SessionSummary]: ...

    async def revision(self, session_id: str) -> int | None:
        record = await self.load(session_id)
        return None if record is None else record.revision

    async def health_check(self) -> bool:
        try:
            await self.session_ids()
        except Exception:
            return False
        return True

    @abstractmethod
    def lock(self, session_id: str, timeout: float) -> AbstractAsyncContextManager[None]:
        """Hold the session exclusively, across processes (and machines, for a
        shared server); raise SessionBusyError after ``timeout`` s. It must not
        rest on anything held only in this process: there is no default."""

    async def exists(self) -> bool:
        """Whether the store itself is there (a file, a directory, a schema); it
        may be empty. Creates nothing. A migration from a store that does not
        exist is a typo, not an empty copy."""
        return True

    async def info(self) -> dict[str, Any]:
        """What ``storage info`` prints: at least backend, location, sessions."""
        return {
            "backend": self.name,
            "location": self.location,
            "sessions": len(await self.session_ids()),
        }

    @property
    def location(self) -> str:
        return self.name

    async def close(self) -> None:
        """Release every connection and file this adapter holds."""
        return None


class SavesInBatches:
    """For a backend whose native write is ``save_many`` (``BatchSave``): ``save``
    is a batch of one, so the two can never mean different things."""

    if TYPE_CHECKING:  # the backend's own

        async def save_many(
            self,
            records: list[SessionRecord],
            *,
            expected_revisions: list[int | None] | None = None,
        ) -> list[int]: ...

    async def save(self, record: SessionRecord, *, expected_revision: int | None = None) -> int:
        return (await self.save_many([record], expected_revisions=[expected_revision]))[0]
