"""Optional storage capabilities, each a runtime-checkable protocol of one method,
and the one generic way to do each over the contract (``SessionStorageAdapter``).

A backend has a capability by defining its method. Callers do not call those
methods themselves: they call the functions here, which use the backend's own
when ``isinstance(storage, Capability)`` and otherwise the generic version,
written once over the contract (load, save, append, delete, session_ids,
lock). So an adapter that implements only the required methods is complete,
and a native version is an optimisation (a batch in one transaction, a range
read, a rename in one statement) that must mean the same as the generic one
and keep every rule of ``storage/base.py``: the conformance suite runs these
functions on every backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, runtime_checkable

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import (
    CorruptSessionError,
    FolikoError,
    SessionExistsError,
    SessionNotFoundError,
    StorageError,
)
from foliko_cli.messages.record import SessionRecord, covered_messages, relabelled
from foliko_cli.messages.stored import content_hash, stored_content_hash
from foliko_cli.storage.base import (
    AuditEntry,
    AuditLog,
    SessionStorageAdapter,
    StoredProblem,
    check_expected,
    expected_list,
)

ContentDigest = tuple[int, str]
"""What a migration compares between a session and its copy: the message count
and the content hash."""


def digest_of(record: SessionRecord) -> ContentDigest:
    return len(record.messages), content_hash(record)


def stored_digest(
    session_id: str, bodies: list[bytes | str], variables: bytes | str, where: str
) -> ContentDigest:
    """A native ``content_digests`` entry, from the stored JSON texts of the
    session's messages (in order) and variables."""
    try:
        return len(bodies), stored_content_hash(bodies, variables)
    except ValueError as exc:
        raise CorruptSessionError(session_id, where, str(exc)) from None


@runtime_checkable
class BatchSave(Protocol):
    async def save_many(
        self, records: list[SessionRecord], *, expected_revisions: list[int | None] | None = None
    ) -> list[int]: ...


@runtime_checkable
class BatchLoad(Protocol):
    async def load_many(self, session_ids: list[str]) -> dict[str, SessionRecord]: ...


@runtime_checkable
class ContentDigests(Protocol):
    async def content_digests(self, session_ids: list[str]) -> dict[str, ContentDigest]: ...


@runtime_checkable
class LoadedCopy(Protocol):
    async def copy_loaded(
        self, records: list[SessionRecord], *, expected_revisions: list[int | None] | None = None
    ) -> dict[str, str]: ...


@runtime_checkable
class DeferredIndex(Protocol):
    def index_after(self) -> contextlib.AbstractAsyncContextManager[None]: ...


@runtime_checkable
class RecentLoad(Protocol):
    async def load_recent(self, session_id: str) -> SessionRecord | None: ...


@runtime_checkable
class StateLoad(Protocol):
    async def load_state(self, session_id: str) -> SessionRecord | None: ...


@runtime_checkable
class WindowLoad(Protocol):
    async def load_window(
        self, session_id: str, start: int, stop: int | None
    ) -> SessionRecord | None: ...


_Load = Callable[[str], Awaitable[SessionRecord | None]]
"""``load_recent`` or ``load_state``: a turn asks for one, so it is looked up, not
checked with ``isinstance`` (a protocol's check walks its members every time)."""
_Window = Callable[[str, int, int | None], Awaitable[SessionRecord | None]]


@runtime_checkable
class NativeCopy(Protocol):
    async def copy(self, source_id: str, target_id: str) -> SessionRecord: ...


@runtime_checkable
class AtomicRename(Protocol):
    async def rename(self, old_id: str, new_id: str) -> None: ...


@runtime_checkable
class ProblemScan(Protocol):
    async def check(self) -> list[StoredProblem]: ...


@runtime_checkable
class Quarantine(Protocol):
    async def quarantine(self, problem: StoredProblem) -> str: ...


async def save_many(
    storage: SessionStorageAdapter,
    records: list[SessionRecord],
    *,
    expected_revisions: list[int | None] | None = None,
) -> list[int]:
    """Replace several sessions, each by the rule of ``save``, all or none: a native
    batch in one transaction; the generic one checks every expected revision before
    it writes any (each write still checks its own)."""
    if isinstance(storage, BatchSave):
        return await storage.save_many(records, expected_revisions=expected_revisions)
    expected = expected_list(records, expected_revisions)
    for record, revision in zip(records, expected, strict=True):
        if revision is not None:
            check_expected(
                record.session_id, revision, await storage.revision(record.session_id) or 0
            )
    return [
        await storage.save(record, expected_revision=revision)
        for record, revision in zip(records, expected, strict=True)
    ]


async def load_many(
    storage: SessionStorageAdapter, session_ids: list[str]
) -> dict[str, SessionRecord]:
    """The sessions that exist among ``session_ids``."""
    if isinstance(storage, BatchLoad):
        return await storage.load_many(session_ids)
    found = {}
    for session_id in session_ids:
        record = await storage.load(session_id)
        if record is not None:
            found[session_id] = record
    return found


DIFFERS = "verification failed: the copy differs from the source"


async def copy_loaded(
    storage: SessionStorageAdapter,
    records: list[SessionRecord],
    *,
    expected_revisions: list[int | None] | None = None,
) -> dict[str, str]:
    """Write ``records``, as a load of another store returned them, by the rule of
    ``save_many`` (all or none; ConflictError, SessionExistsError or
    CorruptSessionError write none), then read them back: the sessions whose
    copy is not their record, with why (none: every one verified). A native
    version compares what is stored with the exact text it wrote; the generic
    one compares ``content_digests`` with the records' (what a migration does
    with every batch)."""
    if isinstance(storage, LoadedCopy):
        return await storage.copy_loaded(records, expected_revisions=expected_revisions)
    await save_many(storage, records, expected_revisions=expected_revisions)
    ids = [record.session_id for record in records]
    try:
        found = await content_digests(storage, ids)
    except FolikoError:
        found = None
    differing = {}
    for record in records:
        try:
            digests = (
                found if found is not None else await content_digests(storage, [record.session_id])
            )
        except FolikoError as exc:
            differing[record.session_id] = f"verification failed: {exc}"
            continue
        if digests.get(record.session_id) != digest_of(record):
            differing[record.session_id] = DIFFERS
    return differing


@contextlib.asynccontextmanager
async def index_after(storage: SessionStorageAdapter) -> AsyncIterator[None]:
    """Writes inside may leave a search index the backend keeps itself to be
    completed once when the block ends (a bulk copy); a search never misses
    what they wrote, even if the block ends by an error. Generic: nothing
    changes (each write indexes what it writes)."""
    if isinstance(storage, DeferredIndex):
        async with storage.index_after():
            yield
    else:
        yield


async def content_digests(
    storage: SessionStorageAdapter, session_ids: list[str]
) -> dict[str, ContentDigest]:
    """The ``digest_of`` each session that exists among ``session_ids``; natively,
    from the stored text without building the records (a migration reads back
    everything it writes). A session whose messages or variables are not JSON
    raises CorruptSessionError; the rest of a record is not checked."""
    if isinstance(storage, ContentDigests):
        return await storage.content_digests(session_ids)
    found = await load_many(storage, session_ids)
    return {session_id: digest_of(record) for session_id, record in found.items()}


async def load_recent(storage: SessionStorageAdapter, session_id: str) -> SessionRecord | None:
    """The session with only the messages a turn sends: those after the compression
    summary (``compression_state.covered``); ``first_seq`` says where they start.
    A range read keeps a turn on a long, compressed session bounded (P2)."""
    native: _Load | None = getattr(storage, "load_recent", None)  # isinstance(RecentLoad), fast
    if native is not None:
        return await native(session_id)
    record = await storage.load(session_id)
    if record is not None:
        start = covered_messages(record, len(record.messages))
        record.messages = record.messages[start:]
        record.first_seq = start
    return record


async def load_window(
    storage: SessionStorageAdapter, session_id: str, start: int, stop: int | None
) -> SessionRecord | None:
    """The session with only ``messages[start:stop]`` (a slice's rules, negative
    positions counting from the end); ``first_seq`` says where they start and
    ``metadata["message_count"]`` how many the whole history holds. Read natively,
    a page of a long conversation reads the page."""
    native: _Window | None = getattr(storage, "load_window", None)  # isinstance(WindowLoad)
    if native is not None:
        return await native(session_id, start, stop)
    record = await storage.load(session_id)
    if record is not None:
        count = len(record.messages)
        start, stop, _ = slice(start, stop).indices(count)
        record.messages = record.messages[start:stop]
        record.first_seq = start
        record.metadata["message_count"] = count
    return record


async def load_state(storage: SessionStorageAdapter, session_id: str) -> SessionRecord | None:
    """The session without its messages (variables, metadata, compression state,
    revision); ``first_seq`` is the message count. Read natively, a variable update
    costs the same however long the history. A native one checks the positions
    of the messages ``load_recent`` would read (without reading them) or the
    count against what is stored."""
    native: _Load | None = getattr(storage, "load_state", None)  # isinstance(StateLoad), fast
    if native is not None:
        return await native(session_id)
    record = await storage.load(session_id)
    if record is not None:
        record.first_seq = len(record.messages)
        record.metadata["message_count"] = len(record.messages)
        record.messages = []
    return record


async def copy(storage: SessionStorageAdapter, source_id: str, target_id: str) -> SessionRecord:
    """A new session ``target_id`` with ``source_id``'s history and state, created
    now; SessionExistsError when the target exists."""
    if isinstance(storage, NativeCopy):
        return await storage.copy(source_id, target_id)
    record = await storage.load(source_id)
    if record is None:
        raise SessionNotFoundError(source_id)
    if await storage.revision(target_id) is not None:
        raise SessionExistsError(target_id)
    now = now_ms()
    copied = SessionRecord(
        session_id=target_id,
        messages=[dict(m) for m in record.messages],
        variables=dict(record.variables),
        metadata={**record.metadata, "created_at": now, "last_active": now},
        compression_state=dict(record.compression_state),
    )
    copied.revision = await storage.save(copied, expected_revision=0)
    return copied


async def rename(storage: SessionStorageAdapter, old_id: str, new_id: str) -> None:
    """Move the session to ``new_id``: everything kept (``created_at`` too) but the
    revision, which is new, so no cache of either id matches it. The caller holds
    both sessions' locks; the generic version creates the new one (create-only)
    before it deletes the old one (compare-and-set), so a crash between the two
    leaves both, never neither."""
    if isinstance(storage, AtomicRename):
        await storage.rename(old_id, new_id)
        return
    source = await storage.load(old_id)
    if source is None:
        raise SessionNotFoundError(old_id)
    await storage.save(relabelled(source, new_id, saved_at=source.saved_at), expected_revision=0)
    await storage.delete(old_id, expected_revision=source.revision)


async def check(storage: SessionStorageAdapter) -> list[StoredProblem]:
    """Every record that cannot be read (``storage check``); file backends also
    report stray files (orphan lock files, temporary files of killed writes),
    which ``quarantine`` removes."""
    if isinstance(storage, ProblemScan):
        return await storage.check()
    return await unreadable_sessions(storage)


async def unreadable_sessions(storage: SessionStorageAdapter) -> list[StoredProblem]:
    """The generic check: every listed session that fails to load (a native check
    starts from this and adds what only its backend can see)."""
    problems = []
    for session_id in await storage.session_ids():
        try:
            await storage.load(session_id)
        except CorruptSessionError as exc:
            problems.append(StoredProblem(session_id, exc.where, exc.reason))
    return problems


async def quarantine(storage: SessionStorageAdapter, problem: StoredProblem) -> str:
    """Move an unreadable record aside (never delete it); return where it went."""
    if isinstance(storage, Quarantine):
        return await storage.quarantine(problem)
    raise StorageError(
        f"the {storage.name} backend cannot move records aside; "
        f"remove session {problem.session_id!r} by hand"
    )


def _audit_log(storage: SessionStorageAdapter) -> AuditLog:
    if not isinstance(storage, AuditLog):
        raise StorageError(f"the {storage.name} backend keeps no audit log")
    return storage


async def audit_append(storage: SessionStorageAdapter, entries: list[AuditEntry]) -> None:
    """Add ``entries`` to the audit log (base.py, rule 13)."""
    if entries:
        await _audit_log(storage).audit_append(entries)


async def audit_read(storage: SessionStorageAdapter, since: int | None = None) -> list[AuditEntry]:
    return await _audit_log(storage).audit_read(since)


async def audit_prune(
    storage: SessionStorageAdapter, *, before: int | None = None, keep: int | None = None
) -> int:
    return await _audit_log(storage).audit_prune(before=before, keep=keep)
