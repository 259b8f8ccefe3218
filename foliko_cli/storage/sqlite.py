"""SQLite: the default backend. One row per message, WAL, versioned schema.

The tables, the migration runner and the writers are the SQL layer's
(storage/sql/), shared with PostgreSQL; this module keeps the connections,
the transactions, the locks and what only SQLite has.

Every write is one ``BEGIN IMMEDIATE`` transaction, so concurrent processes
queue on SQLite's own lock (with a busy timeout) and never interleave; the
compare-and-set of ``save``/``delete`` reads the revision inside it. The
per-turn session lock is a lock file beside the database (``<db>.locks/``),
removed with its session.

A database file with more than one hard link is refused: SQLite finds its
``-wal`` and ``-shm`` files by the path, so two paths to one database would
each get their own and corrupt it. Every read checks the messages' positions
against the session's count (storage/integrity.py). ``check`` runs ``PRAGMA
quick_check`` and reports damaged sessions, messages left without their
session row and orphan lock files; ``health_check`` opens the file read-only and
creates nothing. Sessions in the original foliko's single-table layout are
imported once, and the rows that cannot be are reported, never skipped.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from foliko_cli.errors import CorruptSessionError, Hint, StorageError
from foliko_cli.messages.exact_json import loads
from foliko_cli.messages.record import (
    Messages,
    SessionRecord,
    SessionState,
    SessionSummary,
    checked_append,
    checked_for_write,
    next_revision,
)
from foliko_cli.messages.seed import record_from_seed
from foliko_cli.storage.base import (
    AuditEntry,
    ProblemKind,
    SavesInBatches,
    SessionStorageAdapter,
    StoredProblem,
    check_expected,
    checked_shape,
    expected_list,
)
from foliko_cli.storage.filelock import SessionFileLocks, os_error
from foliko_cli.storage.integrity import (
    SESSION_ROW,
    check_sequence,
    check_span,
    orphan_reason,
    orphaned,
)
from foliko_cli.storage.names import session_id_from_stem
from foliko_cli.storage.paths import make_private_dirs
from foliko_cli.storage.sql import schema, writes
from foliko_cli.storage.sql.dialect import SQLITE, Dialect
from foliko_cli.storage.sql.executor import SQLiteExecutor, run_now
from foliko_cli.storage.sql.migrations import Step, migrate, refuse_newer
from foliko_cli.storage.sql.rows import RECORD_COLUMNS, record_from_row
from foliko_cli.storage.sqlite_search import (
    Connection,
    bound_indexed_text,
    complete_pending,
    create_index,
    create_pending,
    index_problems,
    keep_text,
    optimize_index,
    pending,
    rebuild_index,
)
from foliko_cli.storage.sqlite_search import search as sqlite_search

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from foliko_cli.storage.capabilities import ContentDigest
    from foliko_cli.storage.search import SearchHit, SearchQuery

BUSY_TIMEOUT_MS = 30_000
UNREADABLE_SEED = "a row of the original foliko's table that is not valid session JSON"
SEED_WHERE = " (seed_sessions)"
SQLITE_INT_MAX = 2**63 - 1


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


async def create_sessions_and_messages(db: SQLiteExecutor, dialect: Dialect) -> None:
    """The shared tables, after moving the seed's single-table ``sessions`` aside."""
    if "data" in _columns(db.connection, "sessions"):
        await db.execute("ALTER TABLE sessions RENAME TO seed_sessions")
    await schema.create_sessions_and_messages(db, dialect)


async def import_seed_sessions(db: SQLiteExecutor, dialect: Dialect) -> None:
    """Copy sessions from the seed's single-table layout, leaving that table as it was."""
    if not _columns(db.connection, "seed_sessions"):
        return
    rows = await db.fetchall("SELECT session_id, data, created_at, updated_at FROM seed_sessions")
    for session_id, data, created_at, updated_at in rows:
        if await writes.stored_revision(db, dialect, session_id) is not None:
            continue
        try:
            document = loads(data)
            record = record_from_seed(document, session_id, values=False)
        except (ValueError, TypeError):
            continue  # left in seed_sessions; `storage check` reports it
        record.session_id = session_id
        if not (document.get("metadata") or {}).get("createdAt"):
            record.metadata["created_at"] = created_at
        record.saved_at = updated_at
        await writes.insert_record(db, dialect, record, next_revision(None))


async def create_search_index(db: SQLiteExecutor, dialect: Dialect) -> None:
    """The full-text index over message text (sqlite_search.py); built from what is stored."""
    create_index(db.connection)


async def bound_search_text(db: SQLiteExecutor, dialect: Dialect) -> None:
    """The index takes a bounded prefix of each message (sqlite_search.py)."""
    bound_indexed_text(db.connection)


async def keep_indexed_text(db: SQLiteExecutor, dialect: Dialect) -> None:
    """Snippets read a stored copy of the indexed text (sqlite_search.py)."""
    keep_text(db.connection)


async def mark_search_pending(db: SQLiteExecutor, dialect: Dialect) -> None:
    """Where a bulk copy marks the index behind until it is completed (sqlite_search.py)."""
    create_pending(db.connection)


MIGRATIONS: list[Step[SQLiteExecutor, Dialect]] = [
    create_sessions_and_messages,
    import_seed_sessions,
    schema.create_quarantine,
    create_search_index,
    bound_search_text,
    keep_indexed_text,
    schema.create_fragments,
    schema.create_audit,
    mark_search_pending,
]


def _differing(db: sqlite3.Connection, texts: dict[str, tuple[str, list[str]]]) -> list[str]:
    """The sessions whose stored variables, message positions or bodies are not the
    ``writes.Written`` texts that were written: a read-back of the exact text,
    with no JSON parsed (a migration reads back everything it writes)."""
    stored: dict[str, tuple[list[Any], list[Any], list[Any]]] = {sid: ([], [], []) for sid in texts}
    for chunk, marks in writes.in_chunks(list(texts)):
        for session_id, variables in db.execute(
            f"SELECT session_id, variables FROM sessions WHERE session_id IN ({marks})", chunk
        ):
            stored[session_id][0].append(variables)
        for session_id, seq, body in db.execute(
            f"SELECT session_id, seq, body FROM messages WHERE session_id IN ({marks}) "
            "ORDER BY session_id, seq",
            chunk,
        ):
            stored[session_id][1].append(seq)
            stored[session_id][2].append(body)
    return [
        session_id
        for session_id, (variables, bodies) in texts.items()
        if stored[session_id] != ([variables], list(range(len(bodies))), bodies)
    ]


def _text_row(row: sqlite3.Row) -> dict[str, Any]:
    """A message row as JSON-safe values (older databases hold bodies as BLOBs)."""
    return {
        key: value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
        for key, value in dict(row).items()
    }


class SQLiteStorage(SavesInBatches, SessionStorageAdapter):
    name = "sqlite"
    answers_at_once = True
    indexes = ("SQLite FTS5 index messages_fts",)

    def __init__(self, path: str | os.PathLike[str]):
        self.path = str(path)
        self.in_memory = self.path == ":memory:"
        self._local = threading.local()
        self._locks = None if self.in_memory else SessionFileLocks(Path(self.path + ".locks"))
        self._shared: sqlite3.Connection | None = None
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()
        self._has_seed_table: bool | None = None
        self._defer_index = False

    def __repr__(self) -> str:
        return f"SQLiteStorage({self.path!r})"

    # connections

    def _connect(self) -> sqlite3.Connection:
        if not self.in_memory:
            self._create_file()
            self._refuse_hard_links()
        try:
            # Each thread uses its own connection; close() may close them all from one.
            db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, factory=Connection
            )
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        try:
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            # Refused before anything writes, so a newer database is left untouched.
            refuse_newer(run_now(SQLITE.applied_steps(SQLiteExecutor(db))), MIGRATIONS, self.path)
            if not self.in_memory:
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
            run_now(migrate(SQLiteExecutor(db), SQLITE, MIGRATIONS, self.path))
        except sqlite3.DatabaseError as exc:
            db.close()
            raise self._error(exc) from None
        except BaseException:
            db.close()
            raise
        with self._opened_lock:
            self._opened.append(db)
        return db

    @staticmethod
    def _complete_index(db: sqlite3.Connection) -> None:
        """Index what a bulk copy left out, if one was stopped before it did
        (sqlite_search.py, ``complete_pending``): before a search or a check
        reads the index, never on open (a turn pays nothing for it)."""
        if pending(db):
            with SQLITE.transaction(db):
                complete_pending(db)

    @contextlib.asynccontextmanager
    async def index_after(self) -> AsyncIterator[None]:
        """The batches saved inside leave their messages out of the search index,
        marked behind in the same transactions, and the index is completed once
        at the end (a bulk copy builds the index in two statements instead of
        two per batch). A block that ends by an error leaves the mark: the next
        search, check or bulk copy completes it."""
        self._defer_index = True
        try:
            yield
        finally:
            self._defer_index = False
        if not self._absent():
            with self._guard():
                self._complete_index(self.db)

    def _refuse_hard_links(self) -> None:
        try:
            links = os.stat(self.path).st_nlink
        except OSError as exc:
            raise os_error("open the database", self.path, exc) from None
        if links > 1:
            raise StorageError(
                f"refusing the database {self.path}: the file has {links} hard links, and "
                "SQLite finds its -wal and -shm files by path, so two paths to one database "
                "corrupt it; copy the file instead of linking it"
            )

    def _create_file(self) -> None:
        path = Path(self.path)
        if path.exists():
            return
        try:
            make_private_dirs(path.parent)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except OSError as exc:
            raise StorageError(
                f"cannot create the database {self.path}: {exc.strerror}",
                fix="choose a writable location (the storage setting or FOLIKO_HOME)",
                hint=Hint.STORAGE,
            ) from None

    def _absent(self) -> bool:
        """True when the database file does not exist yet: reads find nothing, create nothing."""
        return (
            not self.in_memory
            and getattr(self._local, "db", None) is None
            and not os.path.exists(self.path)
        )

    @property
    def db(self) -> sqlite3.Connection:
        if self.in_memory:
            if self._shared is None:
                self._shared = self._connect()
            return self._shared
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self._connect()
        return db

    def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return SQLITE.transaction(self.db)

    def _error(self, exc: sqlite3.Error) -> StorageError:
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return StorageError(
                f"cannot write the SQLite database {self.path}: the disk is full "
                "(nothing of the failed write was kept)",
                fix="free space or choose another storage location",
            )
        return StorageError(
            f"SQLite database {self.path} failed: {exc}",
            fix="check the file or use another database",
            hint=Hint.STORAGE,
        )

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        except OverflowError as exc:  # an integer SQLite cannot bind
            raise self._error(sqlite3.DataError(str(exc))) from None
        except OSError as exc:
            raise os_error("use the database", self.path, exc) from None

    # the audit log (base.py, rule 13)

    async def audit_append(self, entries: list[AuditEntry]) -> None:
        from foliko_cli.storage.sql import audit as sql_audit

        with self._guard(), self._write() as db:
            await sql_audit.append(SQLiteExecutor(db), SQLITE, entries)

    async def audit_read(self, since: int | None = None) -> list[AuditEntry]:
        from foliko_cli.storage.sql import audit as sql_audit

        if self._absent():
            return []
        with self._guard():
            return await sql_audit.read(SQLiteExecutor(self.db), SQLITE, since)

    async def audit_prune(self, *, before: int | None = None, keep: int | None = None) -> int:
        from foliko_cli.storage.sql import audit as sql_audit

        if self._absent():
            return 0
        with self._guard(), self._write() as db:
            return await sql_audit.prune(SQLiteExecutor(db), SQLITE, before, keep)

    # contract

    async def load(self, session_id: str) -> SessionRecord | None:
        return self._load_from(session_id, lambda session_id, columns, count: (0, count))

    async def load_recent(self, session_id: str) -> SessionRecord | None:
        """Only the messages after the compression summary: one range read by seq."""
        return self._load_from(
            session_id,
            lambda session_id, columns, count: (self._covered(session_id, columns, count), count),
        )

    async def load_window(
        self, session_id: str, start: int, stop: int | None
    ) -> SessionRecord | None:
        """Only ``messages[start:stop]``: one range read by seq."""
        return self._load_from(
            session_id, lambda session_id, columns, count: slice(start, stop).indices(count)[:2]
        )

    async def load_state(self, session_id: str) -> SessionRecord | None:
        """The session row alone: the positions of the messages a turn would read
        (after the compression summary) are checked from an aggregate over the
        primary key, and no message is read."""
        with self._guard():
            row = self._session_row(session_id)
            if row is None:
                return None
            *columns, count = row
            start = self._covered(session_id, columns, count)
            found, first, last = await writes.message_span(
                SQLiteExecutor(self.db), SQLITE, session_id, start
            )
        check_span(
            session_id, self.path, count=count, found=found, first=first, last=last, start=start
        )
        return self._record(session_id, columns, [], first_seq=count)

    def _session_row(self, session_id: str) -> tuple[Any, ...] | None:
        """The state columns and message_count; None when absent (CorruptSessionError
        when what is stored of it has no session row)."""
        if self._absent():
            return None
        row: tuple[Any, ...] | None = self.db.execute(
            f"SELECT {RECORD_COLUMNS}, message_count FROM sessions WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        if row is None:
            self._raise_if_stored_without_row(session_id)
        return row

    def _load_from(
        self, session_id: str, span_of: Callable[[str, list[Any], int], tuple[int, int]]
    ) -> SessionRecord | None:
        """The session with its messages from ``start`` up to ``stop``
        (``span_of(id, columns, count)``), their positions checked."""
        with self._guard():
            row = self._session_row(session_id)
            if row is None:
                return None
            *columns, count = row
            start, stop = span_of(session_id, columns, count)
            stop = max(start, stop)
            # to the end, a row past the count is read too: the check sees it
            rows = self.db.execute(
                "SELECT seq, body FROM messages WHERE session_id = ? AND seq >= ? AND seq < ? "
                "ORDER BY seq",
                (session_id, start, stop if stop < count else SQLITE_INT_MAX),
            ).fetchall()
        seqs = [seq for seq, _ in rows]
        check_sequence(session_id, self.path, seqs, count=stop, start=start)
        bodies = [body for _, body in rows]
        return record_from_row(
            session_id, tuple(columns), bodies, self.path, first_seq=start, count=count
        )

    def _covered(self, session_id: str, columns: list[Any], count: int) -> int:
        """Where the messages after the compression summary start."""
        try:
            covered = orjson.loads(columns[2]).get("covered", 0)
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise CorruptSessionError(session_id, self.path, str(exc)) from None
        return covered if isinstance(covered, int) and 0 <= covered <= count else 0

    async def load_many(self, session_ids: list[str]) -> dict[str, SessionRecord]:
        """Two queries per 500 sessions, however many there are."""
        return {
            session_id: self._record(session_id, row, bodies)
            for session_id, row, bodies in self._rows_with_bodies(session_ids, RECORD_COLUMNS)
        }

    async def content_digests(self, session_ids: list[str]) -> dict[str, ContentDigest]:
        """From the stored texts, no record built (migration checks)."""
        from foliko_cli.storage.capabilities import stored_digest

        return {
            session_id: stored_digest(session_id, bodies, variables, self.path)
            for session_id, (variables,), bodies in self._rows_with_bodies(session_ids, "variables")
        }

    def _rows_with_bodies(
        self, session_ids: list[str], columns: str
    ) -> Iterator[tuple[str, tuple[Any, ...], list[Any]]]:
        """Each existing session's ``columns`` and message bodies in order (their
        positions checked), two queries per 500 sessions."""
        if self._absent():
            return
        with self._guard():
            for chunk, marks in writes.in_chunks(session_ids):
                rows = self.db.execute(
                    f"SELECT session_id, message_count, {columns} FROM sessions "
                    f"WHERE session_id IN ({marks})",
                    chunk,
                ).fetchall()
                seqs: dict[str, list[Any]] = {row[0]: [] for row in rows}
                bodies: dict[str, list[Any]] = {row[0]: [] for row in rows}
                for session_id, seq, body in self.db.execute(
                    f"SELECT session_id, seq, body FROM messages WHERE session_id IN ({marks}) "
                    "ORDER BY session_id, seq",
                    chunk,
                ):
                    if session_id not in seqs:
                        self._raise_if_stored_without_row(session_id)
                    seqs[session_id].append(seq)
                    bodies[session_id].append(body)
                for session_id, count, *row in rows:
                    check_sequence(session_id, self.path, seqs[session_id], count=count)
                    yield session_id, tuple(row), bodies[session_id]

    def _record(
        self, session_id: str, row: Iterable[Any], bodies: list[Any], *, first_seq: int = 0
    ) -> SessionRecord:
        return record_from_row(session_id, tuple(row), bodies, self.path, first_seq=first_seq)

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        """All in one transaction: a migration batch costs one commit; one failed
        revision check writes none of them."""
        for record in records:
            checked_for_write(record)
        written, _ = self._replace(records, expected_list(records, expected_revisions))
        return written.revisions

    async def copy_loaded(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> dict[str, str]:
        """``save_many`` of records a load returned (their values checked by that
        load, their shape checked again here), then each read back in the same
        transaction and compared with the exact texts written: no JSON parsed,
        no record built (a migration reads back everything it writes)."""
        for record in records:
            checked_shape(record)
        expected = expected_list(records, expected_revisions)
        _, differing = self._replace(records, expected, read_back=True)
        return {session_id: await self._why_differs(session_id) for session_id in differing}

    def _replace(
        self, records: list[SessionRecord], expected: list[int | None], *, read_back: bool = False
    ) -> tuple[writes.Written, list[str]]:
        """``writes.replace_records`` in one transaction; with ``read_back``, also the
        sessions whose stored texts are not those written (``_differing``)."""
        with self._guard(), self._write() as db:
            written = run_now(
                writes.replace_records(
                    SQLiteExecutor(db, defer_index=self._defer_index),
                    SQLITE,
                    records,
                    expected,
                    where=self.path,
                )
            )
            return written, _differing(db, written.texts) if read_back else []

    async def _why_differs(self, session_id: str) -> str:
        """Why a copy read back is not what was written: its damage, when a load
        says (a message lost, a body that is not JSON), else that it differs."""
        from foliko_cli.storage.capabilities import DIFFERS

        try:
            await self.load(session_id)
        except CorruptSessionError as exc:
            return f"verification failed: {exc}"
        return DIFFERS

    async def append(
        self, session_id: str, messages: Messages, state: SessionState, *, expected_revision: int
    ) -> int:
        checked_append(session_id, messages, state)
        with self._guard(), self._write() as db:
            return await writes.append_messages(
                SQLiteExecutor(db),
                SQLITE,
                session_id,
                messages,
                state,
                expected_revision,
                where=self.path,
            )

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        """Remove the session (an unreadable row of the seed's table too) and its lock file."""
        if self._absent():
            check_expected(session_id, expected_revision, 0)
            return False
        with self._guard(), self._write() as db:
            existed = await writes.delete_session(
                SQLiteExecutor(db), SQLITE, session_id, expected_revision
            )
            existed = self._drop_seed_row(db, session_id) or existed
        self._remove_lock_file(session_id)
        return existed

    async def forget(
        self,
        records: list[SessionRecord],
        deletions: dict[str, int | None],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> None:
        """One transaction, with ``secure_delete`` on (freed pages are zeroed) and
        the FTS5 index merged into one segment (``optimize``), so the words are
        gone from the file, not only from the answers; then the WAL is
        checkpointed and truncated, as far as no reader holds it."""
        for record in records:
            checked_for_write(record)
        expected = expected_list(records, expected_revisions)
        with self._guard():
            db = self.db
            (before,) = db.execute("PRAGMA secure_delete").fetchone()
            db.execute("PRAGMA secure_delete = ON")
            try:
                with self._write():
                    await writes.forget_records(
                        SQLiteExecutor(db), SQLITE, records, expected, deletions, where=self.path
                    )
                    for session_id in deletions:
                        self._drop_seed_row(db, session_id)
                    optimize_index(db)
            finally:
                db.execute(f"PRAGMA secure_delete = {int(before)}")
            if not self.in_memory:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for session_id in deletions:
            self._remove_lock_file(session_id)

    def _drop_seed_row(self, db: sqlite3.Connection, session_id: str) -> bool:
        """Forget the seed's row of a session that leaves ``sessions``: left behind, it
        would read as an unreadable session."""
        if not self._seed_table():
            return False
        cursor = db.execute("DELETE FROM seed_sessions WHERE session_id = ?", (session_id,))
        return cursor.rowcount > 0

    def _seed_table(self) -> bool:
        if self._has_seed_table is None:
            self._has_seed_table = bool(_columns(self.db, "seed_sessions"))
        return self._has_seed_table

    def _exists(self, session_id: str) -> bool:
        if self._absent():
            return False
        row = self.db.execute(
            "SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return row is not None or bool(self._unreadable_seed_rows(session_id))

    def _remove_lock_file(self, session_id: str) -> None:
        if self._locks is not None:
            self._locks.remove_if_free(session_id, lambda: not self._exists(session_id))

    def _nothing_stored(self) -> bool:
        """Whether the database file is not there yet: nothing to list (or, named
        and strict, an error: ``nothing_to_list``)."""
        if not self._absent():
            return False
        self.nothing_to_list("SQLite database")
        return True

    async def session_ids(self) -> list[str]:
        if self._nothing_stored():
            return []
        with self._guard():
            return [row[0] for row in self.db.execute("SELECT session_id FROM sessions")]

    async def list_summaries(self) -> list[SessionSummary]:
        if self._nothing_stored():
            return []
        with self._guard():
            summaries = await writes.summaries(SQLiteExecutor(self.db), SQLITE)
            unreadable = self._unreadable_seed_rows()
        summaries.extend(
            SessionSummary(sid, created, updated, 0, "", error=UNREADABLE_SEED)
            for sid, created, updated in unreadable
        )
        return summaries

    def _unreadable_seed_rows(self, session_id: str | None = None) -> list[tuple[Any, ...]]:
        """Rows of the seed's table that could not be imported (never silently skipped)."""
        if not self._seed_table():
            return []
        query = """SELECT session_id, created_at, updated_at FROM seed_sessions
                   WHERE session_id NOT IN (SELECT session_id FROM sessions)"""
        if session_id is None:
            return self.db.execute(query).fetchall()
        return self.db.execute(query + " AND session_id = ?", (session_id,)).fetchall()

    def _raise_if_stored_without_row(self, session_id: str) -> None:
        """A session with no ``sessions`` row is absent, unless an unreadable row of
        the seed's table or message rows of it remain (orphans: damaged)."""
        if self._unreadable_seed_rows(session_id):
            raise CorruptSessionError(session_id, self.path + SEED_WHERE, UNREADABLE_SEED)
        orphans = run_now(writes.message_span(SQLiteExecutor(self.db), SQLITE, session_id))[0]
        if orphans:
            raise orphaned(session_id, self.path, orphans, SESSION_ROW)

    def _orphans(self) -> list[StoredProblem]:
        rows = self.db.execute(
            """SELECT session_id, COUNT(*) FROM messages
               WHERE session_id NOT IN (SELECT session_id FROM sessions) GROUP BY session_id"""
        ).fetchall()
        return [StoredProblem(sid, self.path, orphan_reason(n, SESSION_ROW)) for sid, n in rows]

    async def put_fragments(self, texts: Mapping[str, str]) -> bool:
        if texts:
            with self._guard(), self._write() as db:
                run_now(writes.put_fragments(SQLiteExecutor(db), SQLITE, texts))
        return True

    async def get_fragments(self, hashes: Collection[str]) -> dict[str, str]:
        if not hashes or self._absent():
            return {}
        with self._guard():
            return run_now(writes.get_fragments(SQLiteExecutor(self.db), SQLITE, hashes))

    async def revision(self, session_id: str) -> int | None:
        if self._absent():
            return None
        with self._guard():
            revision = await writes.stored_revision(SQLiteExecutor(self.db), SQLITE, session_id)
            if revision is None:
                self._raise_if_stored_without_row(session_id)
        return revision

    async def exists(self) -> bool:
        return self.in_memory or os.path.exists(self.path)

    async def health_check(self) -> bool:
        """The database answers, read-only; a missing one can be created. Creates nothing."""
        if self.in_memory:
            return True
        if not os.path.exists(self.path):
            parent = Path(self.path).parent
            while not parent.exists():
                if parent.parent == parent:
                    return False
                parent = parent.parent
            return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)
        try:
            self._refuse_hard_links()
            uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
            db = sqlite3.connect(uri, uri=True)
            try:
                db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            finally:
                db.close()
        except (sqlite3.Error, StorageError, OSError):
            return False
        return True

    def lock(self, session_id: str, timeout: float) -> AbstractAsyncContextManager[None]:
        if self._locks is None:
            return contextlib.nullcontext()

        def gone() -> bool:
            with self._guard():
                return not self._exists(session_id)

        return self._locks.hold(session_id, timeout, remove_if=gone)

    async def set_interrupt(self, session_id: str, until_ms: int) -> None:
        if self._locks is None:
            return await super().set_interrupt(session_id, until_ms)
        self._locks.set_interrupt(session_id, until_ms)

    async def interrupt_requested(self, session_id: str) -> bool:
        if self._locks is None:
            return await super().interrupt_requested(session_id)
        return self._locks.interrupt_requested(session_id)

    async def rename(self, old_id: str, new_id: str) -> None:
        with self._guard(), self._write() as db:
            await writes.rename_session(SQLiteExecutor(db), SQLITE, old_id, new_id, where=self.path)
            self._drop_seed_row(db, old_id)
        self._remove_lock_file(old_id)

    async def check(self) -> list[StoredProblem]:
        from foliko_cli.storage.capabilities import unreadable_sessions

        problems = await unreadable_sessions(self)
        if not self._absent():
            with self._guard():
                problems.extend(
                    StoredProblem(
                        sid, self.path + SEED_WHERE, UNREADABLE_SEED, ProblemKind.SEED_ROW
                    )
                    for sid, _, _ in self._unreadable_seed_rows()
                )
                problems.extend(self._orphans())
                self._complete_index(self.db)
                problems.extend(
                    StoredProblem("", self.path, reason, ProblemKind.INDEX)
                    for reason in index_problems(self.db, whole=not problems)
                )
            failures = self._quick_check()
            if failures:
                reason = f"PRAGMA quick_check: {'; '.join(failures[:5])}"
                problems.append(StoredProblem("", self.path, reason, ProblemKind.STORE))
        problems.extend(
            StoredProblem(session_id, str(path), f"a stray file: {why}", ProblemKind.STRAY)
            for path, session_id, why in self._stray_locks()
        )
        return problems

    def _quick_check(self) -> list[str]:
        """What ``PRAGMA quick_check`` finds wrong, one line each."""
        try:
            rows = self.db.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as exc:
            return [str(exc)]
        return [" ".join(str(row[0]).split()) for row in rows if row[0] != "ok"]

    def _live_lock(self, key: str | None) -> bool:
        if key is None:
            return False
        with self._guard():
            return self._exists(key)

    def _stray_locks(self) -> list[tuple[Path, str, str]]:
        if self._locks is None:
            return []
        return [
            (path, session_id_from_stem(path.name.removesuffix(".lock")) or "", why)
            for path, why in self._locks.stray(self._live_lock)
        ]

    async def quarantine(self, problem: StoredProblem) -> str:
        """Move the unreadable session (or seed row) to the quarantine table; remove a
        stray lock file; a failed ``quick_check`` cannot be moved and is left as it is."""
        if problem.kind == ProblemKind.STORE:
            return f"nowhere: {self.path} left as it is; restore it from a backup"
        if problem.kind == ProblemKind.STRAY:
            path = Path(problem.where)
            removed = self._locks is not None and self._locks.remove_stray(path, self._live_lock)
            return f"nowhere: {path} removed" if removed else f"nowhere: {path} kept (in use)"
        if problem.kind == ProblemKind.SEED_ROW:
            return self._quarantine_seed_row(problem)
        if problem.kind == ProblemKind.INDEX:
            with self._guard(), self._write() as db:
                rebuild_index(db)
            return f"nowhere: the search index of {self.path} rebuilt"
        with self._guard(), self._write() as db:
            db.row_factory = sqlite3.Row
            try:
                row = db.execute(
                    "SELECT * FROM sessions WHERE session_id = ?", (problem.session_id,)
                ).fetchone()
                bodies = db.execute(
                    "SELECT seq, role, created_at, body FROM messages WHERE session_id = ?",
                    (problem.session_id,),
                ).fetchall()
            finally:
                db.row_factory = None
            await writes.quarantine_row(
                SQLiteExecutor(db),
                SQLITE,
                problem.session_id,
                problem.reason,
                orjson.dumps(dict(row) if row else {}).decode(),
                orjson.dumps([_text_row(b) for b in bodies]).decode(),
            )
            await writes.remove_sessions(SQLiteExecutor(db), SQLITE, [problem.session_id])
            self._drop_seed_row(db, problem.session_id)
        self._remove_lock_file(problem.session_id)
        return f"{self.path} (table quarantine)"

    def _quarantine_seed_row(self, problem: StoredProblem) -> str:
        with self._guard(), self._write() as db:
            db.row_factory = sqlite3.Row
            try:
                rows = db.execute(
                    """SELECT * FROM seed_sessions WHERE session_id = ?
                       AND session_id NOT IN (SELECT session_id FROM sessions)""",
                    (problem.session_id,),
                ).fetchall()
            finally:
                db.row_factory = None
            if not rows:
                raise StorageError(
                    f"session {problem.session_id!r} is no longer an unreadable row of "
                    f"{self.path + SEED_WHERE}",
                    fix="check the storage again",
                )
            for row in rows:
                run_now(
                    writes.quarantine_row(
                        SQLiteExecutor(db),
                        SQLITE,
                        problem.session_id,
                        problem.reason,
                        orjson.dumps(_text_row(row)).decode(),
                        "[]",
                    )
                )
            self._drop_seed_row(db, problem.session_id)
        return f"{self.path} (table quarantine)"

    @property
    def location(self) -> str:
        return self.path

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """Through the FTS5 index; a scan where this SQLite has none."""
        if self._nothing_stored():
            return []
        from foliko_cli.storage.search import scan_search

        with self._guard():
            self._complete_index(self.db)
            hits = sqlite_search(self.db, query, self.path)
        return hits if hits is not None else await scan_search(self, query)

    async def info(self) -> dict[str, Any]:
        self._nothing_stored()  # a named database is not created by looking at it
        with self._guard():
            sessions, messages = await writes.counts(SQLiteExecutor(self.db), SQLITE)
            version = SQLITE.version(self.db)
            journal = self.db.execute("PRAGMA journal_mode").fetchone()[0]
        size = 0 if self.in_memory else os.path.getsize(self.path)
        return {
            "backend": self.name,
            "location": self.path,
            "sessions": sessions,
            "messages": messages,
            "schema_version": version,
            "journal_mode": journal,
            "size_bytes": size,
        }

    async def close(self) -> None:
        """Close every connection, those opened by other threads included."""
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for db in opened:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        self._local = threading.local()
        self._shared = None
