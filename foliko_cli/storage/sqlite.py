"""SQLite: the default backend. One row per message, WAL, versioned schema.

Every write is one ``BEGIN IMMEDIATE`` transaction, so concurrent processes
queue on SQLite's own lock (with a busy timeout) and never interleave; the
compare-and-set of ``save``/``delete`` reads the revision inside it. The
per-turn session lock is a lock file beside the database (``<db>.locks/``),
removed with its session.

A database file with more than one hard link is refused: SQLite finds its
``-wal`` and ``-shm`` files by the path, so two paths to one database would
each get their own and corrupt it. ``check`` runs ``PRAGMA quick_check`` and
reports orphan lock files; ``health_check`` opens the file read-only and
creates nothing.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from foliko_cli.clock import now_ms
from foliko_cli.errors import CorruptSessionError, Hint, SessionNotFoundError, StorageError
from foliko_cli.storage.base import (
    ConflictError,
    SessionExistsError,
    SessionStorageAdapter,
    StoredProblem,
    check_expected,
    expected_list,
)
from foliko_cli.storage.filelock import SessionFileLocks, os_error
from foliko_cli.storage.names import session_id_from_stem
from foliko_cli.storage.paths import make_private_dirs
from foliko_cli.storage.record import (
    SessionRecord,
    SessionState,
    SessionSummary,
    checked_append,
    checked_for_write,
    encode_message,
    loads,
    new_metadata,
    next_revision,
    preview_of,
    record_from_seed,
)
from foliko_cli.storage.sqlite_search import (
    create_index,
    index_messages,
    index_records,
    rename_indexed,
    unindex,
)
from foliko_cli.storage.sqlite_search import search as sqlite_search
from foliko_cli.storage.sqlrows import record_from_row

if TYPE_CHECKING:
    from foliko_cli.storage.search import SearchHit, SearchQuery

BUSY_TIMEOUT_MS = 30_000
UNREADABLE_SEED = "a row of the original foliko's table that is not valid session JSON"
SEED_WHERE = " (seed_sessions)"
STRAY_LOCK = "a stray file"
DATABASE_PROBLEM = "PRAGMA quick_check"

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[Migration] = []


def migration(function: Migration) -> Migration:
    """Register a schema step; steps run in order, each once, each idempotent."""
    MIGRATIONS.append(function)
    return function


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


@migration
def create_sessions_and_messages(db: sqlite3.Connection) -> None:
    if "data" in _columns(db, "sessions"):
        db.execute("ALTER TABLE sessions RENAME TO seed_sessions")
    db.execute(
        """CREATE TABLE IF NOT EXISTS sessions (
            session_id TEXT PRIMARY KEY,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            revision INTEGER NOT NULL DEFAULT 0,
            preview TEXT NOT NULL DEFAULT '',
            variables TEXT NOT NULL DEFAULT '{}',
            metadata TEXT NOT NULL DEFAULT '{}',
            compression_state TEXT NOT NULL DEFAULT '{}'
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS messages (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS sessions_by_updated ON sessions(updated_at)")


@migration
def import_seed_sessions(db: sqlite3.Connection) -> None:
    """Copy sessions from the seed's single-table layout, leaving that table as it was."""
    if not _columns(db, "seed_sessions"):
        return
    rows = db.execute("SELECT session_id, data, created_at, updated_at FROM seed_sessions")
    for session_id, data, created_at, updated_at in rows.fetchall():
        if db.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone():
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
        _insert_record(db, record, revision=next_revision(None))


@migration
def create_quarantine(db: sqlite3.Connection) -> None:
    """Where ``storage check --repair`` moves unreadable sessions: aside, never deleted."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS quarantine (
            session_id TEXT NOT NULL,
            moved_at INTEGER NOT NULL,
            reason TEXT NOT NULL,
            session_row TEXT NOT NULL,
            messages TEXT NOT NULL
        )"""
    )


@migration
def create_search_index(db: sqlite3.Connection) -> None:
    """The full-text index over message text (sqlite_search.py); built from what is stored."""
    create_index(db)


_INSERT_SESSION = """INSERT INTO sessions (session_id, created_at, updated_at, message_count,
    revision, preview, variables, metadata, compression_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"""
_INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, seq, role, created_at, body) VALUES (?, ?, ?, ?, ?)"
)
_SESSION_COLUMNS = "variables, metadata, compression_state, updated_at, revision"


def _session_row(record: SessionRecord, revision: int) -> tuple:
    metadata = {**new_metadata(), **record.metadata, "message_count": len(record.messages)}
    return (
        record.session_id,
        metadata["created_at"],
        record.saved_at or now_ms(),
        len(record.messages),
        revision,
        preview_of(record.messages),
        orjson.dumps(record.variables).decode(),
        orjson.dumps(metadata).decode(),
        orjson.dumps(record.compression_state).decode(),
    )


def _message_rows(session_id: str, first_seq: int, messages: list[dict[str, Any]]) -> list:
    return [
        (session_id, first_seq + i, m["role"], m.get("created_at", 0), encode_message(m).decode())
        for i, m in enumerate(messages)
    ]


def _insert_record(db: sqlite3.Connection, record: SessionRecord, *, revision: int) -> None:
    db.execute(_INSERT_SESSION, _session_row(record, revision))
    db.executemany(_INSERT_MESSAGE, _message_rows(record.session_id, 0, record.messages))


def _in_chunks(ids: list[str], size: int = 500):
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        yield chunk, ",".join("?" * len(chunk))


def _write_records(
    db: sqlite3.Connection, records: list[SessionRecord], expected: list[int | None]
) -> list[int]:
    """Replace ``records`` with one statement per kind of row (migration batches),
    after checking each expected revision (the caller's transaction)."""
    ids = [record.session_id for record in records]
    if len(set(ids)) != len(ids):
        return [_replace_record(db, r, e) for r, e in zip(records, expected, strict=True)]
    current: dict[str, int] = {}
    for chunk, marks in _in_chunks(ids):
        current.update(
            db.execute(
                f"SELECT session_id, revision FROM sessions WHERE session_id IN ({marks})", chunk
            ).fetchall()
        )
    for session_id, revision in zip(ids, expected, strict=True):
        check_expected(session_id, revision, current.get(session_id, 0))
    if current:
        unindex(db, list(current))
        gone = [(session_id,) for session_id in current]
        db.executemany("DELETE FROM messages WHERE session_id = ?", gone)
        db.executemany("DELETE FROM sessions WHERE session_id = ?", gone)
    revisions = [next_revision(current.get(session_id)) for session_id in ids]
    db.executemany(_INSERT_SESSION, map(_session_row, records, revisions))
    db.executemany(
        _INSERT_MESSAGE,
        (row for r in records for row in _message_rows(r.session_id, 0, r.messages)),
    )
    index_records(db, [(r.session_id, 0, r.messages) for r in records])
    return revisions


def _text_row(row: sqlite3.Row) -> dict[str, Any]:
    """A message row as JSON-safe values (older databases hold bodies as BLOBs)."""
    return {
        key: value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
        for key, value in dict(row).items()
    }


def _replace_record(db: sqlite3.Connection, record: SessionRecord, expected: int | None) -> int:
    row = db.execute(
        "SELECT revision FROM sessions WHERE session_id = ?", (record.session_id,)
    ).fetchone()
    check_expected(record.session_id, expected, row[0] if row else 0)
    revision = next_revision(row[0] if row else None)
    unindex(db, [record.session_id])
    db.execute("DELETE FROM sessions WHERE session_id = ?", (record.session_id,))
    db.execute("DELETE FROM messages WHERE session_id = ?", (record.session_id,))
    _insert_record(db, record, revision=revision)
    index_messages(db, record.session_id, 0, record.messages)
    return revision


class SQLiteStorage(SessionStorageAdapter):
    name = "sqlite"

    def __init__(self, path: str | os.PathLike[str]):
        self.path = str(path)
        self.in_memory = self.path == ":memory:"
        self._local = threading.local()
        self._locks = None if self.in_memory else SessionFileLocks(Path(self.path + ".locks"))
        self._shared: sqlite3.Connection | None = None
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()
        self._has_seed_table: bool | None = None

    def __repr__(self) -> str:
        return f"SQLiteStorage({self.path!r})"

    # connections

    def _connect(self) -> sqlite3.Connection:
        if not self.in_memory:
            self._create_file()
            self._refuse_hard_links()
        try:
            # Each thread uses its own connection; close() may close them all from one.
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        try:
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._refuse_newer_schema(db)
            if not self.in_memory:
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
            self._migrate(db)
        except sqlite3.DatabaseError as exc:
            db.close()
            raise self._error(exc) from None
        except BaseException:
            db.close()
            raise
        with self._opened_lock:
            self._opened.append(db)
        return db

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

    def _refuse_newer_schema(self, db: sqlite3.Connection) -> None:
        """Checked before anything writes, so a newer database is left untouched."""
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise StorageError(
                f"{self.path} has schema version {version}, newer than this foliko knows "
                f"({len(MIGRATIONS)}); upgrade foliko"
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

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == len(MIGRATIONS):
            return
        with self._write(db):
            db.execute(
                """CREATE TABLE IF NOT EXISTS schema_migrations (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL
                )"""
            )
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for number, step in enumerate(MIGRATIONS[version:], start=version + 1):
                step(db)
                db.execute(
                    "INSERT OR REPLACE INTO schema_migrations VALUES (?, ?, ?)",
                    (number, step.__name__, now_ms()),
                )
            db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")

    @contextlib.contextmanager
    def _write(self, db: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        db = db or self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _error(self, exc: sqlite3.Error) -> StorageError:
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

    # contract

    async def load(self, session_id: str) -> SessionRecord | None:
        if self._absent():
            return None
        with self._guard():
            row = self.db.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is None:
                self._raise_if_unreadable_seed(session_id)
                return None
            bodies = self.db.execute(
                "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
        return self._record(session_id, row, [body for (body,) in bodies])

    async def load_recent(self, session_id: str) -> SessionRecord | None:
        """Only the messages after the compression summary: one range read by seq."""
        return self._load_from(session_id, self._covered)

    async def load_state(self, session_id: str) -> SessionRecord | None:
        """The session row alone, however long the history (the range read from
        message_count on finds nothing)."""
        return self._load_from(session_id, lambda session_id, columns, count: count)

    def _load_from(self, session_id: str, start_of) -> SessionRecord | None:
        """The session with its messages from ``start_of(id, columns, count)`` on."""
        if self._absent():
            return None
        with self._guard():
            row = self.db.execute(
                f"SELECT {_SESSION_COLUMNS}, message_count FROM sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                self._raise_if_unreadable_seed(session_id)
                return None
            *columns, count = row
            start = start_of(session_id, columns, count)
            bodies = self.db.execute(
                "SELECT body FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (session_id, start),
            ).fetchall()
        record = self._record(session_id, columns, [body for (body,) in bodies])
        record.first_seq = start
        record.metadata["message_count"] = start + len(record.messages)
        return record

    def _covered(self, session_id: str, columns: list, count: int) -> int:
        """Where the messages after the compression summary start."""
        try:
            covered = orjson.loads(columns[2]).get("covered", 0)
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise CorruptSessionError(session_id, self.path, str(exc)) from None
        return covered if isinstance(covered, int) and 0 <= covered <= count else 0

    async def load_many(self, session_ids: list[str]) -> dict[str, SessionRecord]:
        """Two queries per 500 sessions, however many there are (migration checks)."""
        if self._absent():
            return {}
        found: dict[str, SessionRecord] = {}
        with self._guard():
            for chunk, marks in _in_chunks(session_ids):
                rows = self.db.execute(
                    f"SELECT session_id, {_SESSION_COLUMNS} FROM sessions "
                    f"WHERE session_id IN ({marks})",
                    chunk,
                ).fetchall()
                bodies: dict[str, list] = {row[0]: [] for row in rows}
                for session_id, body in self.db.execute(
                    f"SELECT session_id, body FROM messages WHERE session_id IN ({marks}) "
                    "ORDER BY session_id, seq",
                    chunk,
                ):
                    bodies[session_id].append(body)
                for session_id, *row in rows:
                    found[session_id] = self._record(session_id, row, bodies[session_id])
        return found

    def _record(self, session_id: str, row, bodies: list) -> SessionRecord:
        return record_from_row(session_id, tuple(row), bodies, self.path)

    async def save(self, record: SessionRecord, *, expected_revision: int | None = None) -> int:
        return (await self.save_many([record], expected_revisions=[expected_revision]))[0]

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        """All in one transaction: a migration batch costs one commit; one failed
        revision check writes none of them."""
        expected = expected_list(records, expected_revisions)
        for record in records:
            checked_for_write(record)
        with self._guard(), self._write() as db:
            return _write_records(db, records, expected)

    async def append(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        state: SessionState,
        *,
        expected_revision: int,
    ) -> int:
        checked_append(session_id, messages, state)
        now = now_ms()
        with self._guard(), self._write() as db:
            row = db.execute(
                "SELECT revision, message_count, preview FROM sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            found, count, preview = row if row else (0, 0, "")
            if found != expected_revision:
                raise ConflictError(session_id, expected_revision, found)
            total = count + len(messages)
            metadata = {**state.metadata, "message_count": total}
            revision = next_revision(row[0] if row else None)
            db.execute(
                """INSERT INTO sessions (session_id, created_at, updated_at, message_count,
                       revision, preview, variables, metadata, compression_state)
                   VALUES (?1, ?2, ?3, ?4, ?9, ?5, ?6, ?7, ?8)
                   ON CONFLICT (session_id) DO UPDATE SET
                       updated_at = ?3, message_count = ?4, revision = ?9,
                       preview = ?5, variables = ?6, metadata = ?7, compression_state = ?8""",
                (
                    session_id,
                    metadata.get("created_at", now),
                    now,
                    total,
                    preview_of(messages) or preview,
                    orjson.dumps(state.variables).decode(),
                    orjson.dumps(metadata).decode(),
                    orjson.dumps(state.compression_state).decode(),
                    revision,
                ),
            )
            db.executemany(_INSERT_MESSAGE, _message_rows(session_id, count, messages))
            index_messages(db, session_id, count, messages)
        return revision

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        """Remove the session (an unreadable row of the seed's table too) and its lock file."""
        if self._absent():
            check_expected(session_id, expected_revision, 0)
            return False
        with self._guard(), self._write() as db:
            row = db.execute(
                "SELECT revision FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            check_expected(session_id, expected_revision, row[0] if row else 0)
            unindex(db, [session_id])
            db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            existed = (
                db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,)).rowcount > 0
            )
            existed = self._drop_seed_row(db, session_id) or existed
        self._remove_lock_file(session_id)
        return existed

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

    async def list(self) -> list[str]:
        if self._absent():
            return []
        with self._guard():
            return [row[0] for row in self.db.execute("SELECT session_id FROM sessions")]

    async def list_summaries(self) -> list[SessionSummary]:
        if self._absent():
            return []
        with self._guard():
            rows = self.db.execute(
                """SELECT session_id, created_at, updated_at, message_count, preview
                   FROM sessions ORDER BY updated_at DESC, session_id"""
            ).fetchall()
            unreadable = self._unreadable_seed_rows()
        summaries = [SessionSummary(*row) for row in rows]
        summaries.extend(
            SessionSummary(sid, created, updated, 0, "", error=UNREADABLE_SEED)
            for sid, created, updated in unreadable
        )
        return summaries

    def _unreadable_seed_rows(self, session_id: str | None = None) -> list[tuple]:
        """Rows of the seed's table that could not be imported (never silently skipped)."""
        if not self._seed_table():
            return []
        query = """SELECT session_id, created_at, updated_at FROM seed_sessions
                   WHERE session_id NOT IN (SELECT session_id FROM sessions)"""
        if session_id is None:
            return self.db.execute(query).fetchall()
        return self.db.execute(query + " AND session_id = ?", (session_id,)).fetchall()

    def _raise_if_unreadable_seed(self, session_id: str) -> None:
        if self._unreadable_seed_rows(session_id):
            raise CorruptSessionError(session_id, self.path + SEED_WHERE, UNREADABLE_SEED)

    async def revision(self, session_id: str) -> int | None:
        if self._absent():
            return None
        with self._guard():
            row = self.db.execute(
                "SELECT revision FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is None:
                self._raise_if_unreadable_seed(session_id)
        return None if row is None else row[0]

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

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        if self._locks is None:
            yield
            return

        def gone() -> bool:
            with self._guard():
                return not self._exists(session_id)

        async with self._locks.hold(session_id, timeout, remove_if=gone):
            yield

    async def rename(self, old_id: str, new_id: str) -> None:
        with self._guard(), self._write() as db:
            if db.execute("SELECT 1 FROM sessions WHERE session_id = ?", (new_id,)).fetchone():
                raise SessionExistsError(new_id)
            if (
                db.execute(
                    "UPDATE sessions SET session_id = ? WHERE session_id = ?", (new_id, old_id)
                ).rowcount
                == 0
            ):
                raise SessionNotFoundError(old_id)
            db.execute("UPDATE messages SET session_id = ? WHERE session_id = ?", (new_id, old_id))
            rename_indexed(db, old_id, new_id)
            db.execute(
                "UPDATE sessions SET revision = ? WHERE session_id = ?",
                (next_revision(None), new_id),
            )
            self._drop_seed_row(db, old_id)
        self._remove_lock_file(old_id)

    async def check(self) -> list[StoredProblem]:
        problems = []
        for session_id in await self.list():
            try:
                await self.load(session_id)
            except CorruptSessionError as exc:
                problems.append(StoredProblem(session_id, exc.where, exc.reason))
        if not self._absent():
            with self._guard():
                problems.extend(
                    StoredProblem(sid, self.path + SEED_WHERE, UNREADABLE_SEED)
                    for sid, _, _ in self._unreadable_seed_rows()
                )
            failures = self._quick_check()
            if failures:
                reason = f"{DATABASE_PROBLEM}: {'; '.join(failures[:5])}"
                problems.append(StoredProblem("", self.path, reason))
        problems.extend(
            StoredProblem(session_id, str(path), f"{STRAY_LOCK}: {why}", stray=True)
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

    async def repair_files(self) -> list[str]:
        """Remove the orphan lock files ``check`` reports; sessions are never touched."""
        if self._locks is None:
            return []
        return [
            str(path)
            for path, _, _ in self._stray_locks()
            if self._locks.remove_stray(path, self._live_lock)
        ]

    async def quarantine(self, problem: StoredProblem) -> str:
        """Move the unreadable session (or seed row) to the quarantine table; remove a
        stray lock file; a failed ``quick_check`` cannot be moved and is left as it is."""
        if problem.reason.startswith(DATABASE_PROBLEM):
            return f"nowhere: {self.path} left as it is; restore it from a backup"
        if problem.reason.startswith(STRAY_LOCK):
            path = Path(problem.where)
            removed = self._locks is not None and self._locks.remove_stray(path, self._live_lock)
            return f"nowhere: {path} removed" if removed else f"nowhere: {path} kept (in use)"
        if problem.where.endswith(SEED_WHERE):
            return self._quarantine_seed_row(problem)
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
            db.execute(
                "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?)",
                (
                    problem.session_id,
                    now_ms(),
                    problem.reason,
                    orjson.dumps(dict(row) if row else {}).decode(),
                    orjson.dumps([_text_row(b) for b in bodies]).decode(),
                ),
            )
            unindex(db, [problem.session_id])
            db.execute("DELETE FROM messages WHERE session_id = ?", (problem.session_id,))
            db.execute("DELETE FROM sessions WHERE session_id = ?", (problem.session_id,))
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
                db.execute(
                    "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?)",
                    (
                        problem.session_id,
                        now_ms(),
                        problem.reason,
                        orjson.dumps(_text_row(row)).decode(),
                        "[]",
                    ),
                )
            self._drop_seed_row(db, problem.session_id)
        return f"{self.path} (table quarantine)"

    @property
    def location(self) -> str:
        return self.path

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """Through the FTS5 index; a scan where this SQLite has none."""
        if self._absent():
            return []
        from foliko_cli.storage.search import scan_search

        with self._guard():
            hits = sqlite_search(self.db, query)
        return hits if hits is not None else await scan_search(self, query)

    async def info(self) -> dict[str, Any]:
        with self._guard():
            sessions, messages = self.db.execute(
                "SELECT COUNT(*), COALESCE(SUM(message_count), 0) FROM sessions"
            ).fetchone()
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
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
