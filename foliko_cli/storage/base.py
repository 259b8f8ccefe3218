"""The storage adapter contract: what a backend implements, and every rule it keeps.

A backend is a subclass of ``SessionStorageAdapter`` that implements five
methods (``load``, ``save``, ``delete``, ``session_ids``, ``lock``); every
other method has a generic version over those five, which a backend
replaces only to be faster (``append``, ``list_summaries``, ``revision``)
or to make one step (``forget``),
and ``storage/capabilities.py`` adds optional abilities, each a protocol of
one method detected at run time (batches, ranged reads, copy, rename,
check, quarantine; ``storage/search.py``: search). A backend that lacks one
is complete: the generic version is used. The shared conformance suite
(``tests/storage/test_conformance.py``) proves each rule below on every
backend registered in ``tests/storage/backends.py``.

The rules, each next to the method it constrains:

1. **One canonical record** (``messages/record.py``). ``save`` and ``append``
   refuse a record that is not canonical (``InvalidRecordError``) and write
   nothing; a read returns exactly what was written (every JSON type, 64-bit
   integers, NUL, any Unicode), with ``metadata["message_count"]`` the number
   of messages stored.
2. **Every write is a compare-and-set on the revision** (R7): see the class
   docstring. The check and the write are one atomic step (a transaction, a
   script, a file written under its lock); a lost update is an error, never
   silent.
3. **Integrity on every read and every write** (R9, ``storage/integrity.py``):
   what is stored must add up: message positions exactly 0 .. n - 1 (a read
   of the recent messages checks them from its start), the count kept beside
   the messages equal to how many there are, the metadata present while
   messages remain. A read of a session that does not add up, or that cannot
   be parsed, raises ``CorruptSessionError`` naming the session and where it
   is; it is never taken for absent and never skipped silently. Every write
   first makes sure what it replaces or extends is whole and refuses a
   damaged session (``CorruptSessionError``, nothing written): a damaged
   session is never written over. Only ``delete`` and a quarantine remove it.
4. **Safe names** (R5): any id ``messages.ids.check_session_id`` accepts is
   stored under its own key, and no id addresses anything outside the
   backend's space (file names escaped, key tags escaped, SQL parameters).
5. **The lock** (R2, R8): ``lock`` serialises turns on a session across
   processes (and machines, for a shared server), never by anything held
   only in this process; a waiter gives up after ``timeout`` with
   ``SessionBusyError`` naming the holder (``"pid N on HOST"`` where the
   backend can tell); a holder that dies frees the session within 30 s, and
   the lock is released when the block is left, also by a cancellation.
6. **Bounded waits** (R8): a backend that talks to a server bounds every call
   (a stall ends in ``StorageError``, not a hang) and honours cancellation,
   so the turn's deadline and SIGTERM end any wait.
7. **Quarantine** (``capabilities.Quarantine``): ``storage check`` reports
   what cannot be read (``StoredProblem``); a repair moves a damaged session
   aside, never deletes it, and says where it went.
8. **Listing reads no message** (P3): ``list_summaries`` comes from what is
   kept beside the messages; a damaged session is listed, marked, where the
   listing can see it.
9. **Privacy** (R6): files and directories a backend creates are the owner's
   only (0600, 0700).
10. **Fragments stored once** (``put_fragments``, ``get_fragments``): a text
    a message refers to by its SHA-256 (``messages/fragments.py``) is kept
    once under that hash, however many messages, sessions or turns use it; a
    second put of it writes nothing, a put is atomic per text (all of it or
    none), and nothing but a put writes it: a session's delete, rename or
    repair leaves the texts alone (another session may use them). A backend
    that keeps no texts returns False from ``put_fragments``: the caller then
    keeps each text inline in its reference, so the session is complete
    either way.
11. **Forgetting is one step** (``forget``): the records it replaces and the
   sessions it deletes change together or not at all, every search index
   (``indexes``) in the same step, and no copy of what went is kept (no
   trash, no quarantine). A crash part way leaves the store as it was
   before or, once the step is committed, as it is after: the next use of
   the store completes it (a transaction, one MULTI, a committed intent).
12. **Interrupts** (``if_busy="interrupt"``): ``set_interrupt`` leaves a
   request beside the session, where every process and machine that shares
   the store sees it, that whoever holds the session's lock stop its turn;
   ``interrupt_requested`` is true while one stands (until its time, or until
   withdrawn). It is not the lock and never takes it: the holder checks it
   while it holds the lock (``engine/framework.py``) and stops unsaved.
13. **The audit log** (optional: ``AuditLog``, three methods; every backend of
    foliko has it): who read or wrote which sessions through ``foliko mcp
    serve`` or an API key, one ``AuditEntry`` per call, kept beside the
    sessions and never among them (no listing, search, check or migration
    sees it). An entry holds no content (ids, names and a hash only) and is
    never changed: ``audit_append`` adds a batch at once (all or none, in
    the order given, from any number of processes at once, taking no
    session's lock and waiting for none); ``audit_read`` gives the entries
    at or after ``since`` (ms), oldest first; ``audit_prune`` removes the
    entries before ``before`` and then all but the newest ``keep``, and says
    how many went. A backend without it records nothing (``foliko audit``
    says so).
14. **Any Python int**: a window's positions, a search's limit and time, an
    audit time or count may lie beyond what the backend's integers hold; they
    mean what they say (a SQL backend binds them through
    ``sql.executor.bounded``).

All methods are coroutines. Backends whose driver is synchronous and local
(SQLite, files) run their short I/O inline; none holds a write transaction
while a model runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

from foliko_cli.errors import (
    ConflictError,
    CorruptSessionError,
    Hint,
    InvalidRecordError,
    SessionExistsError,
    StoreNotFoundError,
)
from foliko_cli.messages.record import (
    Messages,
    SessionRecord,
    SessionState,
    SessionSummary,
    check_record,
    checked_append,
    preview_of,
    title_of,
)


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


def checked_shape(record: SessionRecord) -> SessionRecord:
    """``record.checked_for_write`` of a record a load returned: its values were
    checked by that load (``exact_json.loads``), so only its shape is checked
    again (the whole walk of every value costs a migration a third of its time)."""
    try:
        return check_record(record, values=False)
    except ValueError as exc:
        raise InvalidRecordError(record.session_id, str(exc)) from None


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
    FORGOTTEN = "forgotten"
    """A copy of what a forget removed (a trash entry, a server's journal)
    made before it: removed, as the forget would have."""
    INDEX = "index"
    """A search index holding what the sessions no longer do: rebuilt."""
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


class AuditEntry(NamedTuple):
    """One call of a client (rule 10): when (ms), which ``client`` (an API key's
    name, an MCP host's name; never a secret), which ``call`` (a tool, a
    route), the ``session_ids`` it read or wrote, the SHA-256 of its result
    (hex) and its ``outcome`` (``ok``, or the error's code)."""

    at: int
    client: str
    call: str
    session_ids: tuple[str, ...]
    result_sha256: str
    outcome: str = "ok"

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "session_ids": list(self.session_ids)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuditEntry:
        return cls(
            int(data["at"]),
            str(data["client"]),
            str(data["call"]),
            tuple(data["session_ids"]),
            str(data["result_sha256"]),
            str(data.get("outcome", "ok")),
        )


@runtime_checkable
class AuditLog(Protocol):
    """Rule 10: the audit log, kept by the backend beside its sessions."""

    async def audit_append(self, entries: list[AuditEntry]) -> None: ...

    async def audit_read(self, since: int | None = None) -> list[AuditEntry]: ...

    async def audit_prune(self, *, before: int | None = None, keep: int | None = None) -> int: ...


def kept_entries(
    entries: list[AuditEntry], before: int | None, keep: int | None
) -> list[AuditEntry]:
    """What ``audit_prune`` leaves of ``entries`` (oldest first)."""
    if before is not None:
        entries = [entry for entry in entries if entry.at >= before]
    if keep is not None:
        entries = entries[len(entries) - keep :] if keep else []
    return entries


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

    A new session's first revision is fresh (``record.next_revision``): one
    deleted and created again never repeats a revision a cache may hold.

    Required: ``load``, ``save``, ``delete``, ``session_ids``, ``lock`` (and
    the class attribute ``name``). The rest has a generic version.
    """

    name: ClassVar[str]
    """The backend's name, as ``storage info`` and errors show it."""
    answers_at_once: ClassVar[bool] = False
    """Every call completes without suspending (no network I/O): a turn over
    this storage may run without an event loop (see common/loop.py). Only the
    class that sets it has it (``answers_at_once(storage)``): a subclass's own
    methods may wait, so it says so again if they never do."""
    named: bool = False
    """Set by ``open_storage`` for a SQLite or JSON store at a place the user named
    (a URL, a path), not the default in the home: its directory must exist."""
    indexes: ClassVar[tuple[str, ...]] = ()
    """The search indexes the backend keeps beside the sessions (for people:
    ``forget``'s receipt names them); none: a search reads the sessions."""
    strict_reads: bool = False
    """Set by the command line: listing a ``named`` store that does not exist is a
    StoreNotFoundError (a mistyped path must not look like a store without
    sessions); left off, as a server does, a new store lists empty."""

    @abstractmethod
    async def load(self, session_id: str) -> SessionRecord | None:
        """The whole session, or None when there is none.

        Checks integrity (rule 3): CorruptSessionError, never None, for a
        session that is stored but does not add up or cannot be parsed.
        ``first_seq`` is 0."""

    @abstractmethod
    async def save(self, record: SessionRecord, *, expected_revision: int | None = None) -> int:
        """Replace the whole session; return its new revision.

        ``expected_revision`` follows the compare-and-set rule of the class
        docstring. ``record.saved_at`` is kept when set (migration preserves
        it); 0 means now. A record that does not have the canonical shape
        (record.check_record) raises InvalidRecordError and writes nothing; a
        stored session that is damaged raises CorruptSessionError and is left
        as it is, also when ``expected_revision`` is None.
        """

    async def append(
        self, session_id: str, messages: Messages, state: SessionState, *, expected_revision: int
    ) -> int:
        """Add ``messages`` after the stored ones and write ``state`` (variables,
        metadata, compression state: replaced, not merged), atomically.

        Creates the session when ``expected_revision`` is 0 and it does not
        exist. Returns the new revision; raises ConflictError on a mismatch and
        CorruptSessionError, writing nothing, when the stored session is
        damaged. Generic: a read of the whole session and a compare-and-set
        ``save``; a backend that keeps one row or element per message writes
        only the new ones (P2)."""
        checked_append(session_id, messages, state)
        stored = await self.load(session_id)
        found = 0 if stored is None else stored.revision
        if found != expected_revision:
            raise ConflictError(session_id, expected_revision, found)
        record = SessionRecord(
            session_id,
            messages=(stored.messages if stored else []) + list(messages),
            variables=state.variables,
            metadata=dict(state.metadata),
            compression_state=state.compression_state,
        )
        try:
            return await self.save(record, expected_revision=expected_revision)
        except SessionExistsError:
            revision = await self.revision(session_id)
            raise ConflictError(session_id, expected_revision, revision or 0) from None

    @abstractmethod
    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        """Remove the session, damaged or not (and anything it leaves behind: a lock
        file, orphaned messages); False when there was none (with
        ``expected_revision`` None). ``expected_revision`` N > 0 must match the
        stored revision, else ConflictError (also when absent); 0 is refused
        unless absent."""

    async def forget(
        self,
        records: list[SessionRecord],
        deletions: dict[str, int | None],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> None:
        """Replace ``records`` (each by the rule of ``save``) and delete the sessions
        ``deletions`` names (each by the rule of ``delete`` with the expected
        revision given, None: whatever is there, if anything), as one step
        (rule 10): a stale revision, a damaged record or a failure writes
        nothing. What the deleted sessions and the replaced messages held is
        gone from every index in that step. Generic: every expected revision
        is checked first, then each record is written and each session deleted
        in turn (not one step: every backend here makes it one)."""
        expected = expected_list(records, expected_revisions)
        pairs = [(r.session_id, e) for r, e in zip(records, expected, strict=True)]
        for session_id, revision in [*pairs, *deletions.items()]:
            if revision is not None:
                check_expected(session_id, revision, await self.revision(session_id) or 0)
        for record, revision in zip(records, expected, strict=True):
            await self.save(record, expected_revision=revision)
        for session_id, revision in deletions.items():
            await self.delete(session_id, expected_revision=revision)

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
        """The ids of every stored session (damaged ones included)."""

    async def list_summaries(self) -> list[SessionSummary]:
        """One summary per session, a damaged one marked (``error``) rather than
        left out. Natively from what is kept beside the messages (rule 8);
        generic: each session loaded."""
        summaries = []
        for session_id in await self.session_ids():
            try:
                record = await self.load(session_id)
            except CorruptSessionError as exc:
                summaries.append(SessionSummary(session_id, 0, 0, 0, "", error=exc.reason))
                continue
            if record is not None:
                summaries.append(summary_of(record))
        return summaries

    async def put_fragments(self, texts: Mapping[str, str]) -> bool:
        """Keep each text of ``texts`` (its SHA-256 in hex: text) once, unless it is
        kept already (rule 10); True when they are all kept. Generic: False, this
        backend keeps no texts (they travel inline in their references)."""
        return False

    async def get_fragments(self, hashes: Collection[str]) -> dict[str, str]:
        """The texts kept under ``hashes`` (rule 10), by hash; a hash not kept is
        left out. The caller checks each text against its hash."""
        return {}

    async def revision(self, session_id: str) -> int | None:
        """The stored revision, None when absent; CorruptSessionError where the
        backend sees the session is damaged without reading its messages."""
        record = await self.load(session_id)
        return None if record is None else record.revision

    async def health_check(self) -> bool:
        """Whether the store answers; creates nothing."""
        try:
            await self.session_ids()
        except Exception:
            return False
        return True

    @abstractmethod
    def lock(self, session_id: str, timeout: float) -> AbstractAsyncContextManager[None]:
        """Hold the session exclusively, across processes (and machines, for a
        shared server): rule 5. Raise SessionBusyError(session_id, timeout,
        holder) after ``timeout`` s (0: one attempt), ``holder`` saying who holds
        it. It must not rest on anything held only in this process, and must be
        released when the block is left, a cancellation included; a dead
        holder's lock frees itself (a closed connection, an expired lease, a
        lock file whose process is gone). There is no default."""

    async def set_interrupt(self, session_id: str, until_ms: int) -> None:
        """Ask the holder of ``session_id``'s lock to stop its turn (rule 10),
        until the wall clock's ``until_ms`` (``common.clock.now_ms``); 0 withdraws
        the request. Generic: kept in this adapter, so seen in this process
        only: a backend shared by processes keeps it in the store."""
        interrupts = self.__dict__.setdefault("_interrupts", {})
        if until_ms:
            interrupts[session_id] = until_ms
        else:
            interrupts.pop(session_id, None)

    async def interrupt_requested(self, session_id: str) -> bool:
        """Whether a ``set_interrupt`` request on ``session_id`` stands now."""
        from foliko_cli.common.clock import now_ms

        until: int = self.__dict__.get("_interrupts", {}).get(session_id, 0)
        return until > now_ms()

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
        """Where the store is, for people (a path, a URL without its password)."""
        return self.name

    def nothing_to_list(self, what: str) -> None:
        """A backend listing a store that does not exist yet calls this: it returns
        (nothing to list), or raises StoreNotFoundError for a ``named`` store where
        reads are ``strict_reads``; ``what`` names the store for people."""
        if self.named and self.strict_reads:
            raise StoreNotFoundError(
                f"the {what} {self.location} does not exist",
                fix="check the path, or create it (its first write would too)",
                hint=Hint.INIT,
            )

    async def close(self) -> None:
        """Release every connection and file this adapter holds."""
        return None


def summary_of(record: SessionRecord) -> SessionSummary:
    """The ``sessions list`` row of a loaded record."""
    return SessionSummary(
        record.session_id,
        record.metadata.get("created_at", record.saved_at),
        record.saved_at,
        len(record.messages),
        preview_of(record.messages),
        title=title_of(record.metadata),
    )


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
