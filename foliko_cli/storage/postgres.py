"""PostgreSQL: sessions shared by several machines (F6, R2).

The tables, the migration runner and the writers are the SQL layer's
(storage/sql/), shared with SQLite; this module keeps the connections, the
transactions, the locks, error translation and the bounds on every wait.
All tables live in one schema (``foliko`` unless told otherwise); the
migration runs under a transaction-level advisory lock, so several machines
starting at once apply each step once.

A writer reads the revision it compares with ``SELECT ... FOR UPDATE``, so
of two concurrent writers exactly one wins, and a message's ``seq`` is
assigned after the session row is locked, so sequences are gap-free in
commit order. Two writers creating one session at once both find no row to
lock; the second one's INSERT fails on the primary key, and its transaction
runs again, now finding the row. The per-turn session lock is a
session-level advisory lock held on its own connection: when the holding
process dies, the server closes that connection and releases the lock.

No call waits without bound. Connections use ``connect_timeout``, TCP
keepalives (idle 5 s, every 2 s, 3 probes) and ``tcp_user_timeout`` on the
client, the same keepalives on the server (so a lock holder that vanishes
behind a network stall loses its advisory lock within about 11 s), and
``statement_timeout``/``lock_timeout``. A stall the kernel cannot see (a
proxy that stops forwarding) is bounded by a watchdog: an operation that
overruns ``operation_timeout`` has its socket shut down and fails with a
StorageError.

psycopg 3 is imported when a storage is created, never at module import.
Its calls are synchronous; every operation runs on a thread of the storage's
own pool (at most ``THREADS``), never on the event loop, on a connection of
its own: the one that became idle last, or a new one. So a stalled
connection holds only the operation running on it, and the event loop and
the other threads go on serving. A cancelled operation still ends on its
thread (within its bound); its connection is then given back or closed.

This is the intermediate step of issue 23 item 6. The end state, psycopg's
``AsyncConnection`` with a connection pool, still needs the shared writers
(storage/sql/writes.py, migrations.py, postgres_search.py, the dialect's
``COPY``) split into the statements they build and a sync or an async
executor that runs them, and the watchdog replaced by a per-operation
``asyncio`` timeout that cancels the query on the server.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import unquote

from foliko_cli.clock import now_ms
from foliko_cli.errors import (
    SessionBusyError,
    SessionNotFoundError,
    StorageConfigError,
    StorageError,
    UsageError,
)
from foliko_cli.storage import watchdog
from foliko_cli.storage.base import (
    SessionExistsError,
    SessionStorageAdapter,
    StoredProblem,
    expected_list,
)
from foliko_cli.storage.integrity import check_sequence
from foliko_cli.storage.poll import poll
from foliko_cli.storage.record import (
    SessionRecord,
    SessionState,
    SessionSummary,
    check_session_id,
    checked_append,
    checked_for_write,
    next_revision,
)
from foliko_cli.storage.search import SearchHit, SearchQuery
from foliko_cli.storage.sql import schema, writes
from foliko_cli.storage.sql.dialect import PostgresDialect, advisory_key
from foliko_cli.storage.sql.migrations import Step, migrate
from foliko_cli.storage.sql.rows import RECORD_COLUMNS, record_from_row
from foliko_cli.storage.urls import hide, parse_server_url

DEFAULT_SCHEMA = "foliko"
CONNECT_TIMEOUT_S = 10
OPERATION_TIMEOUT_S = 30.0
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}
TCP_USER_TIMEOUT_MS = 20_000
SUMMARY_PAGE = 1000
IDLE_LOCK_CONNECTIONS = 2
THREADS = 8
"""Operations that run at once, and so connections they keep open (session locks aside)."""
WRITE_ATTEMPTS = 3
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_EXTRA_HINT = "PostgreSQL storage needs the 'postgres' extra: pip install 'foliko-cli[postgres]'"

T = TypeVar("T")


def create_search_index(db: Any, dialect: PostgresDialect) -> None:
    """The full-text index over message text (postgres_search.py)."""
    from foliko_cli.storage.postgres_search import create_index

    create_index(db, dialect.quoted)


def bound_search_text(db: Any, dialect: PostgresDialect) -> None:
    """The index takes a bounded prefix of each message (postgres_search.py)."""
    from foliko_cli.storage.postgres_search import bound_indexed_text

    bound_indexed_text(db, dialect.quoted)


MIGRATIONS: list[Step] = [
    schema.create_sessions_and_messages,
    schema.create_quarantine,
    create_search_index,
    bound_search_text,
]


def _reason(exc: BaseException, password: str | None) -> str:
    """The driver's message on one line, without the connection preamble or a password."""
    text = " ".join(str(exc).split("\n")[0].split())
    if "failed: " in text:
        text = text.rsplit("failed: ", 1)[1]
    text = text.removeprefix("FATAL: ").strip() or type(exc).__name__
    return hide(text, password)


_BAD_OPTION = re.compile(
    r'invalid (?:integer )?value "[^"]*" for connection option "(?P<value>\w+)"'
    r'|invalid (?P<enum>\w+) value: "'
    r'|invalid URI query parameter: "(?P<unknown>\w+)"'
    r'|invalid connection option "(?P<option>\w+)"'
    r"|bad value for (?P<psycopg>\w+):"
    r'|invalid value for parameter "(?P<server>\w+)"'
    r'|unrecognized configuration parameter "(?P<setting>\w+)"'
)
"""What libpq, psycopg and the server say of a connection option of the URL
that is unknown or has a bad value (libpq checks them as it connects)."""


def _option_error(exc: BaseException, password: str | None = None) -> StorageConfigError | None:
    """A usage error naming the URL's bad option, when ``exc`` is about one."""
    found = _BAD_OPTION.search(str(exc))
    if found is None:
        return None
    name = next(value for value in found.groups() if value)
    detail = _reason(exc, password).removeprefix("connection is bad: ")
    return StorageConfigError(
        f"bad option {name!r} in the PostgreSQL URL: {detail}; "
        "fix it or leave it out (see libpq's connection parameters)"
    )


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StorageConfigError(_EXTRA_HINT) from None
    return psycopg


class PostgresStorage(SessionStorageAdapter):
    name = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        operation_timeout: float = OPERATION_TIMEOUT_S,
    ):
        self._pg = _import_psycopg()
        parsed = parse_server_url(
            url,
            schemes=("postgresql", "postgres"),
            default_port=5432,
            own_options=("schema",),
            example="postgresql://user@host:5432/database",
        )
        if schema is not None and not schema.strip():
            raise StorageConfigError(
                "the PostgreSQL schema name is empty; give one or leave it out"
            )
        self.schema = schema or parsed.options.get("schema") or DEFAULT_SCHEMA
        if not _SCHEMA_NAME.fullmatch(self.schema):
            raise StorageConfigError(
                f"invalid PostgreSQL schema name {self.schema!r}; "
                "use letters, digits and underscores (at most 63)"
            )
        if not operation_timeout > 0:
            raise StorageConfigError("the PostgreSQL operation timeout must be positive")
        self.operation_timeout = float(operation_timeout)
        self._dialect = PostgresDialect(self.schema)
        self._password = parsed.password
        self._conninfo = parsed.driver_url("postgresql")
        try:
            self._pg.conninfo.conninfo_to_dict(self._conninfo)
        except self._pg.Error as exc:
            raise _option_error(exc) or StorageConfigError(str(exc)) from None
        self._connect_kwargs = self._connection_settings({k for k, _ in parsed.query})
        self.host = parsed.host
        self.port = parsed.port
        self.user = parsed.user
        self.database = unquote(parsed.path.lstrip("/")) or self.user or "postgres"
        user = f"{self.user}@" if self.user else ""
        self._where = parsed.where
        self._url = f"postgresql://{user}{parsed.where}/{self.database}"
        self._local = threading.local()
        self._connections: list[Any] = []
        self._idle: list[Any] = []
        self._idle_lock_connections: list[Any] = []
        self._guard_lock = threading.Lock()
        self._threads: Any = None
        self._migrated = False
        self._watchdog = watchdog.shared()

    def _connection_settings(self, given: set[str]) -> dict[str, Any]:
        """Bounds on every wait, unless the URL sets them itself."""
        settings: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S, **KEEPALIVES}
        if self._pg.pq.version() >= 120000:
            settings["tcp_user_timeout"] = TCP_USER_TIMEOUT_MS
        bound_ms = int(self.operation_timeout * 1000)
        server = {
            "statement_timeout": bound_ms,
            "lock_timeout": bound_ms,
            "idle_in_transaction_session_timeout": max(bound_ms, 60_000),
            "tcp_keepalives_idle": KEEPALIVES["keepalives_idle"],
            "tcp_keepalives_interval": KEEPALIVES["keepalives_interval"],
            "tcp_keepalives_count": KEEPALIVES["keepalives_count"],
        }
        settings["options"] = " ".join(f"-c {key}={value}" for key, value in server.items())
        return {key: value for key, value in settings.items() if key not in given}

    def __repr__(self) -> str:
        return f"PostgresStorage({self._url!r}, schema={self.schema!r})"

    @property
    def location(self) -> str:
        return f"{self._url} (schema {self.schema})"

    # threads and connections

    def _pool(self) -> Any:
        with self._guard_lock:
            if self._threads is None:
                from concurrent.futures import ThreadPoolExecutor

                self._threads = ThreadPoolExecutor(THREADS, thread_name_prefix="foliko-postgres")
            return self._threads

    def _run(self, call: Callable[..., T], *args: Any) -> Any:
        """``call(*args)`` on a thread of the pool, as an asyncio future."""
        import asyncio

        return asyncio.get_running_loop().run_in_executor(
            self._pool(), functools.partial(self._on_connection, call, *args)
        )

    def _on_connection(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` with ``self.db`` the connection that became idle last (a
        new one once it is needed), given back afterwards unless it broke."""
        with self._guard_lock:
            self._local.db = self._idle.pop() if self._idle else None
        try:
            return call(*args)
        finally:
            db, self._local.db = getattr(self._local, "db", None), None
            if db is not None:
                self._give_back(db)

    def _give_back(self, db: Any) -> None:
        with self._guard_lock:
            if db in self._connections and not (db.closed or db.broken):
                self._idle.append(db)
                return
            with contextlib.suppress(ValueError):
                self._connections.remove(db)
        db.close()

    def _open(self, application_name: str) -> Any:
        try:
            return self._pg.connect(
                self._conninfo,
                autocommit=True,
                application_name=application_name[:63],
                **self._connect_kwargs,
            )
        except self._pg.Error as exc:
            raise _option_error(exc, self._password) or StorageError(
                f"cannot connect to PostgreSQL at {self._where} (database {self.database}"
                f"{', user ' + self.user if self.user else ''}): "
                f"{_reason(exc, self._password)}; is the server running? check the URL"
            ) from None

    @property
    def db(self) -> Any:
        db = getattr(self._local, "db", None)
        if db is None or db.closed or db.broken:
            if db is not None:
                self._local.db = None
                self._give_back(db)
            db = self._open("foliko")
            try:
                if not self._migrated:
                    with self._guard(db):
                        self._migrate(db)
                    self._migrated = True
            except BaseException:
                db.close()
                raise
            with self._guard_lock:
                self._connections.append(db)
            self._local.db = db
        self._watch(db)
        return db

    def _watch(self, conn: Any) -> None:
        """Put ``conn`` under the bound of the operation running in this thread."""
        operation = getattr(self._local, "operation", None)
        if operation is not None:
            self._watchdog.watch(operation, conn.pgconn.socket)

    def _ready(self) -> None:
        with self._guard():
            self.db  # noqa: B018 — connects and migrates once

    def _migrate(self, db: Any) -> None:
        migrate(db, self._dialect, MIGRATIONS, f"PostgreSQL schema {self.schema} at {self._where}")

    def _error(self, exc: BaseException) -> StorageError:
        if isinstance(exc, self._pg.OperationalError):
            return StorageError(
                f"PostgreSQL at {self._where} failed: {_reason(exc, self._password)}; "
                "is the server running? check the URL"
            )
        return StorageError(
            f"PostgreSQL at {self._where} (schema {self.schema}) failed: "
            f"{_reason(exc, self._password)}; check the server log"
        )

    @contextlib.contextmanager
    def _guard(self, conn: Any = None) -> Iterator[None]:
        """One bounded operation: driver errors become StorageError, and the socket
        of a connection it uses (``conn``, or ``self.db``) is shut down if the
        operation overruns ``operation_timeout``."""
        outer = getattr(self._local, "operation", None)
        operation = self._local.operation = self._watchdog.start(self.operation_timeout)
        try:
            if conn is not None:
                self._watch(conn)
            yield
        except self._pg.Error as exc:
            if self._watchdog.stop(operation):
                raise StorageError(
                    f"PostgreSQL at {self._where} did not answer within "
                    f"{self.operation_timeout:g}s (a network stall or an overloaded server); "
                    "check the server and the network, then retry"
                ) from None
            raise self._error(exc) from None
        finally:
            self._watchdog.stop(operation)
            self._local.operation = outer

    # contract

    async def load(self, session_id: str) -> SessionRecord | None:
        self._check_id(session_id)
        row = await self._run(self._load_row, session_id)
        if row is None:
            return None
        return self._record(session_id, row)

    def _load_row(self, session_id: str) -> tuple[Any, ...] | None:
        with self._guard():
            return self.db.execute(self._load_sql(), (session_id,)).fetchone()

    def _load_sql(self, *, lock: str = "") -> str:
        return self._dialect.sql(
            f"""SELECT {RECORD_COLUMNS}, s.message_count,
                   (SELECT array_agg(m.seq ORDER BY m.seq) FROM {{messages}} m
                    WHERE m.session_id = s.session_id),
                   (SELECT array_agg(m.body ORDER BY m.seq) FROM {{messages}} m
                    WHERE m.session_id = s.session_id)
               FROM {{sessions}} s WHERE s.session_id = %s {lock}"""
        )

    def _record(self, session_id: str, row: tuple[Any, ...]) -> SessionRecord:
        *columns, count, seqs, bodies = row
        check_sequence(session_id, self.location, seqs or (), count=count)
        return record_from_row(session_id, tuple(columns), bodies or (), self.location)

    def _write(self, write: Callable[[Any], T]) -> T:
        """``write(cursor)`` in one transaction, run again when it created a session
        that another writer created meanwhile (the next run finds its row)."""
        with self._guard():
            for _ in range(WRITE_ATTEMPTS - 1):
                suppressed = contextlib.suppress(self._pg.errors.UniqueViolation)
                with suppressed, self.db.transaction(), self.db.cursor() as cur:
                    return write(cur)
            with self.db.transaction(), self.db.cursor() as cur:
                return write(cur)

    async def save(self, record: SessionRecord, *, expected_revision: int | None = None) -> int:
        return (await self.save_many([record], expected_revisions=[expected_revision]))[0]

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        """All in one transaction, rows locked in session-id order (no deadlocks);
        one failed revision check writes none of them."""
        if not records:
            return []
        expected = expected_list(records, expected_revisions)
        for record in records:
            self._check_id(record.session_id)
            checked_for_write(record)
        return await self._run(
            self._write,
            lambda cur: writes.replace_records(
                cur, self._dialect, records, expected, where=self.location
            ),
        )

    async def append(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        state: SessionState,
        *,
        expected_revision: int,
    ) -> int:
        self._check_id(session_id)
        checked_append(session_id, messages, state)
        return await self._run(
            self._write,
            lambda cur: writes.append_messages(
                cur,
                self._dialect,
                session_id,
                messages,
                state,
                expected_revision,
                where=self.location,
            ),
        )

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        self._check_id(session_id)
        return await self._run(
            self._write,
            lambda cur: writes.delete_session(cur, self._dialect, session_id, expected_revision),
        )

    async def list(self) -> list[str]:
        return await self._run(self._list)

    def _list(self) -> list[str]:
        with self._guard():
            rows = self.db.execute(
                self._dialect.sql("SELECT session_id FROM {sessions} ORDER BY session_id")
            ).fetchall()
        return [row[0] for row in rows]

    async def list_summaries(self) -> list[SessionSummary]:
        """Newest first, read page by page along the index, all from one snapshot."""
        return await self._run(self._summaries)

    def _summaries(self) -> list[SessionSummary]:
        with self._guard(), self.db.transaction():
            self.db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return writes.summaries(self.db, self._dialect, page=SUMMARY_PAGE)

    async def revision(self, session_id: str) -> int | None:
        self._check_id(session_id)
        return await self._run(self._revision, session_id)

    def _revision(self, session_id: str) -> int | None:
        with self._guard():
            return writes.stored_revision(self.db, self._dialect, session_id)

    async def exists(self) -> bool:
        """The schema is there; creates nothing."""
        return await self._run(self._exists)

    def _exists(self) -> bool:
        conn = self._open("foliko: exists")
        try:
            with self._guard(conn):
                found = conn.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
                ).fetchone()
        finally:
            conn.close()
        return found is not None

    async def health_check(self) -> bool:
        """The server answers; creates nothing (no schema, no table)."""
        return await self._run(self._health_check)

    def _health_check(self) -> bool:
        try:
            conn = self._open("foliko: health check")
        except StorageError:
            return False
        try:
            with self._guard(conn):
                conn.execute("SELECT 1").fetchall()
        except StorageError:
            return False
        finally:
            conn.close()
        return True

    async def copy(self, source_id: str, target_id: str) -> SessionRecord:
        """One transaction: the target is created only if it does not exist yet, and
        the messages are copied by the server, never read and written again."""
        self._check_id(source_id)
        self._check_id(target_id)
        return await self._run(self._copy, source_id, target_id)

    def _copy(self, source_id: str, target_id: str) -> SessionRecord:
        now = now_ms()
        d = self._dialect
        with self._guard(), self.db.transaction(), self.db.cursor() as cur:
            row = cur.execute(self._load_sql(lock="FOR SHARE"), (source_id,)).fetchone()
            if row is None:
                raise SessionNotFoundError(source_id)
            source = self._record(source_id, row)
            copied = SessionRecord(
                session_id=target_id,
                messages=source.messages,
                variables=source.variables,
                metadata={**source.metadata, "created_at": now, "last_active": now},
                compression_state=source.compression_state,
                saved_at=now,
                revision=next_revision(None),
            )
            if writes.stored_revision(cur, d, target_id) is not None:
                raise SessionExistsError(target_id)
            try:
                writes.insert_session(cur, d, copied, copied.revision)
            except self._pg.errors.UniqueViolation:
                raise SessionExistsError(target_id) from None  # created since the check
            cur.execute(
                d.sql(
                    """INSERT INTO {messages} (session_id, seq, role, created_at, body)
                    SELECT %s, seq, role, created_at, body FROM {messages}
                    WHERE session_id = %s"""
                ),
                (target_id, source_id),
            )
        return copied

    async def rename(self, old_id: str, new_id: str) -> None:
        self._check_id(old_id)
        self._check_id(new_id)
        await self._run(self._rename, old_id, new_id)

    def _rename(self, old_id: str, new_id: str) -> None:
        with self._guard():
            try:
                with self.db.transaction(), self.db.cursor() as cur:
                    writes.rename_session(cur, self._dialect, old_id, new_id, where=self.location)
            except self._pg.errors.UniqueViolation:
                raise SessionExistsError(new_id) from None  # created while we renamed

    async def quarantine(self, problem: StoredProblem) -> str:
        return await self._run(self._quarantine, problem)

    def _quarantine(self, problem: StoredProblem) -> str:
        d = self._dialect
        with self._guard(), self.db.transaction(), self.db.cursor() as cur:
            row = cur.execute(
                d.sql("SELECT row_to_json(s)::text FROM {sessions} s WHERE session_id = %s"),
                (problem.session_id,),
            ).fetchone()
            bodies = cur.execute(
                d.sql(
                    """SELECT COALESCE(json_agg(m ORDER BY m.seq), '[]')::text
                    FROM {messages} m WHERE session_id = %s"""
                ),
                (problem.session_id,),
            ).fetchone()
            writes.quarantine_row(
                cur, d, problem.session_id, problem.reason, row[0] if row else "{}", bodies[0]
            )
            writes.remove_sessions(cur, d, [problem.session_id])
        return f"{self.location} (table {self.schema}.quarantine)"

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """Through the GIN index on the messages' text (postgres_search.py)."""
        return await self._run(self._search, query)

    def _search(self, query: SearchQuery) -> list[SearchHit]:
        from foliko_cli.storage.postgres_search import search

        with self._guard():
            try:
                return search(self.db, self._dialect.quoted, query)
            except (self._pg.errors.SyntaxError, self._pg.errors.DataException) as exc:
                raise UsageError(
                    f"PostgreSQL cannot read the search query {query.text!r}: {_reason(exc, None)}",
                    fix="search for plain words",
                ) from None

    async def info(self) -> dict[str, Any]:
        return await self._run(self._info)

    def _info(self) -> dict[str, Any]:
        with self._guard():
            sessions, messages = writes.counts(self.db, self._dialect)
            version = max(self._dialect.applied_steps(self.db), default=0)
            size = self.db.execute(
                """SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = %s AND c.relkind = 'r'""",
                (self.schema,),
            ).fetchone()[0]
            server = self.db.execute("SHOW server_version").fetchone()[0]
        return {
            "backend": self.name,
            "location": self.location,
            "sessions": sessions,
            "messages": messages,
            "schema": self.schema,
            "schema_version": version,
            "server_version": server,
            "size_bytes": int(size),
        }

    # the per-turn session lock

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        """An advisory lock on a connection of its own, so a dead holder frees it.
        A call on that connection that is cancelled is waited for before the
        connection is closed: two threads never use one connection."""
        self._check_id(session_id)
        import asyncio

        key = advisory_key("session", self.schema, session_id)
        conn = await self._settled(self._lock_connection, undo=lambda conn: conn.close())
        try:
            await self._acquire(conn, key, session_id, timeout)
        except BaseException:
            conn.close()
            raise
        try:
            yield
        finally:
            await asyncio.shield(self._run(self._release, conn, key))

    async def _settled(
        self, call: Callable[..., T], *args: Any, undo: Callable[[T], object] | None = None
    ) -> T:
        """``call(*args)`` on the pool; when the caller is cancelled, the call is
        waited for (and its result undone) before the cancellation goes on."""
        import asyncio

        future = self._run(call, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                result = await future
                if undo is not None:
                    undo(result)
            raise

    def _lock_connection(self) -> Any:
        with self._guard_lock:
            while self._idle_lock_connections:
                conn = self._idle_lock_connections.pop()
                if not conn.closed:
                    return conn
        self._ready()  # the schema exists before anyone waits on it
        return self._open(f"foliko: pid {os.getpid()} on {socket.gethostname()}")

    async def _acquire(self, conn: Any, key: int, session_id: str, timeout: float) -> None:
        def locked() -> bool:
            with self._guard(conn):
                return conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]

        if not await poll(lambda: self._settled(locked), time.monotonic() + timeout):
            holder = await self._settled(self._holder, conn, key)
            raise SessionBusyError(session_id, timeout, holder)

    def _holder(self, conn: Any, key: int) -> str:
        """Who holds ``key``: the application name foliko gives its lock connections."""
        try:
            with self._guard(conn):
                row = conn.execute(
                    """SELECT l.pid, a.application_name, host(a.client_addr)
                   FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                   WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                     AND l.database = (SELECT oid FROM pg_database
                                       WHERE datname = current_database())
                     AND l.classid::bigint = %s AND l.objid::bigint = %s""",
                    ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
                ).fetchone()
        except StorageError:
            return "another connection"
        if row is None:
            return "another connection"
        pid, application, address = row
        if application and application.startswith("foliko: "):
            return application.removeprefix("foliko: ")
        return f"server process {pid}" + (f" from {address}" if address else "")

    def _release(self, conn: Any, key: int) -> None:
        try:
            with self._guard(conn):
                released = conn.execute("SELECT pg_advisory_unlock(%s)", (key,)).fetchone()[0]
        except StorageError:
            released = False  # closing the connection below releases it on the server
        with self._guard_lock:
            if released and len(self._idle_lock_connections) < IDLE_LOCK_CONNECTIONS:
                self._idle_lock_connections.append(conn)
                return
        conn.close()

    def _check_id(self, session_id: str) -> None:
        if "\x00" in session_id:
            check_session_id(session_id)  # raises: PostgreSQL text cannot hold NUL

    async def close(self) -> None:
        with self._guard_lock:
            connections = self._connections + self._idle_lock_connections
            self._connections, self._idle, self._idle_lock_connections = [], [], []
            threads, self._threads = self._threads, None
        for conn in connections:
            conn.close()
        self._local = threading.local()
        if threads is not None:
            threads.shutdown(wait=False)
