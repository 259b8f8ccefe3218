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

Connections are psycopg 3's ``AsyncConnection``: a query in flight yields
the event loop, so a stalled connection holds only the operation on it. They
come from the storage's own small pool (at most ``POOL_SIZE``, the one that
became idle last first, a new one when none is idle): psycopg_pool reports a
server that refuses connections only as a pool timeout after its whole wait,
and its background reconnection tasks outlive a one-turn CLI command.

No call waits without bound. Connections use ``connect_timeout``, TCP
keepalives (idle 5 s, every 2 s, 3 probes) and ``tcp_user_timeout`` on the
client, the same keepalives on the server (so a lock holder that vanishes
behind a network stall loses its advisory lock within about 11 s), and
``statement_timeout``/``lock_timeout``. A stall the kernel cannot see (a
proxy that stops forwarding) is bounded by ``operation_timeout``: the
operation is cancelled, psycopg asks the server to cancel its query and
closes a connection that does not answer within seconds, and the caller gets
a StorageError.

psycopg 3 is imported when a storage is created, never at module import.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import unquote

from foliko_cli.common.clock import now_ms
from foliko_cli.common.poll import poll
from foliko_cli.errors import (
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
    StorageConfigError,
    StorageError,
    UsageError,
)
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.record import (
    SessionRecord,
    SessionState,
    SessionSummary,
    checked_append,
    checked_for_write,
    next_revision,
)
from foliko_cli.storage.base import (
    SavesInBatches,
    SessionStorageAdapter,
    StoredProblem,
    expected_list,
)
from foliko_cli.storage.integrity import check_sequence
from foliko_cli.storage.search import SearchHit, SearchQuery
from foliko_cli.storage.sql import schema, writes
from foliko_cli.storage.sql.dialect import PostgresDialect, advisory_key
from foliko_cli.storage.sql.executor import PostgresExecutor, one_row
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
POOL_SIZE = 8
"""Operations that run at once, and so connections kept open (session locks aside)."""
WRITE_ATTEMPTS = 3
CUT_GRACE_S = 2.0
"""After an operation's deadline has cut its connections, how long until
anything it still awaits is cancelled."""
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

T = TypeVar("T")


async def create_search_index(db: PostgresExecutor, dialect: PostgresDialect) -> None:
    """The full-text index over message text (postgres_search.py)."""
    from foliko_cli.storage.postgres_search import create_index

    await create_index(db, dialect.quoted)


async def bound_search_text(db: PostgresExecutor, dialect: PostgresDialect) -> None:
    """The index takes a bounded prefix of each message (postgres_search.py)."""
    from foliko_cli.storage.postgres_search import bound_indexed_text

    await bound_indexed_text(db, dialect.quoted)


async def keep_indexed_text(db: PostgresExecutor, dialect: PostgresDialect) -> None:
    """Snippets read a stored copy of the indexed text (postgres_search.py)."""
    from foliko_cli.storage.postgres_search import keep_indexed_text

    await keep_indexed_text(db, dialect.quoted)


MIGRATIONS: list[Step[PostgresExecutor, PostgresDialect]] = [
    schema.create_sessions_and_messages,
    schema.create_quarantine,
    create_search_index,
    bound_search_text,
    keep_indexed_text,
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


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise StorageConfigError(
            f"bad option 'operation_timeout' in the PostgreSQL URL: {value!r}; "
            "give a positive number of seconds, such as operation_timeout=10"
        )
    return seconds


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        from foliko_cli.common.extras import extra_hint

        raise StorageConfigError(extra_hint("PostgreSQL storage", "postgres")) from None
    # A cancelled query's warnings: the StorageError the caller gets says it all.
    logger = logging.getLogger("psycopg")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    return psycopg


class PostgresStorage(SavesInBatches, SessionStorageAdapter):
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
            own_options=("schema", "operation_timeout"),
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
        given = parsed.options.get("operation_timeout")
        if given is not None:
            operation_timeout = _seconds(given)
        if not operation_timeout > 0:
            raise StorageConfigError(
                "the PostgreSQL operation timeout must be a positive number of seconds"
            )
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
        self._pools: dict[asyncio.AbstractEventLoop, _Pool] = {}
        self._migrated = False

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

    # connections

    async def _open(self, application_name: str) -> Any:
        try:
            return await self._pg.AsyncConnection.connect(
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

    def _reusable(self, conn: Any) -> bool:
        """Open, sound and outside any transaction: fit for the next operation."""
        idle = self._pg.pq.TransactionStatus.IDLE
        return not (conn.closed or conn.broken) and conn.info.transaction_status == idle

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[PostgresExecutor]:
        """One bounded operation on a connection of the pool, the schema migrated.
        The connection goes back to the pool when the operation leaves it
        sound and idle, and is closed otherwise (a cancelled or broken one)."""
        pool = self._pool()
        async with self._bounded() as deadline, pool.slots:
            conn = await self._reused(pool.idle) or await self._open("foliko")
            deadline.watch(conn)
            try:
                if not self._migrated:
                    await self._migrate(pool, conn)
                yield PostgresExecutor(conn)
            finally:
                if self._reusable(conn) and self._pools.get(pool.loop) is pool:
                    pool.idle.append(conn)
                else:
                    await _closed(conn)

    def _pool(self) -> _Pool:
        """The running event loop's pool (asyncio's locks and psycopg's waits
        belong to one loop), made on first use."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            for closed in [other for other in self._pools if other.is_closed()]:
                del self._pools[closed]  # its connections died with their loop
            pool = self._pools[loop] = _Pool(loop)
        return pool

    async def _reused(self, idle: list[Any]) -> Any:
        """The connection of ``idle`` that became idle last and is still sound."""
        while idle:
            conn = idle.pop()
            if self._reusable(conn):
                return conn
            await _closed(conn)
        return None

    async def _migrate(self, pool: _Pool, conn: Any) -> None:
        """Once per storage (and, under the migration's lock, once per schema)."""
        async with pool.migration:
            if not self._migrated:
                where = f"PostgreSQL schema {self.schema} at {self._where}"
                await migrate(PostgresExecutor(conn), self._dialect, MIGRATIONS, where)
                self._migrated = True

    @contextlib.asynccontextmanager
    async def _bounded(self) -> AsyncIterator[_Deadline]:
        """At most ``operation_timeout`` (the connections given to the deadline
        are cut when it passes; anything else is cancelled soon after); driver
        errors become StorageError."""
        deadline = _Deadline(self.operation_timeout)
        try:
            async with asyncio.timeout(self.operation_timeout + CUT_GRACE_S):
                yield deadline
        except TimeoutError:
            raise self._stalled() from None
        except self._pg.Error as exc:
            raise (self._stalled() if deadline.passed else self._error(exc)) from None
        finally:
            deadline.disarm()

    def _stalled(self) -> StorageError:
        return StorageError(
            f"PostgreSQL at {self._where} did not answer within "
            f"{self.operation_timeout:g}s (a network stall or an overloaded server); "
            "check the server and the network, then retry"
        )

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

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[PostgresExecutor]:
        async with self._connection() as db, db.connection.transaction():
            yield db

    async def _write(self, write: Callable[[PostgresExecutor], Awaitable[T]]) -> T:
        """``write(db)`` in one transaction, run again when it created a session
        that another writer created meanwhile (the next run finds its row)."""
        async with self._connection() as db:
            for _ in range(WRITE_ATTEMPTS - 1):
                with contextlib.suppress(self._pg.errors.UniqueViolation):
                    async with db.connection.transaction():
                        return await write(db)
            async with db.connection.transaction():
                return await write(db)

    # contract

    async def load(self, session_id: str) -> SessionRecord | None:
        self._check_id(session_id)
        async with self._connection() as db:
            row = await db.fetchone(self._load_sql(), (session_id,))
        return None if row is None else self._record(session_id, row)

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
        return await self._write(
            lambda db: writes.replace_records(
                db, self._dialect, records, expected, where=self.location
            )
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
        return await self._write(
            lambda db: writes.append_messages(
                db,
                self._dialect,
                session_id,
                messages,
                state,
                expected_revision,
                where=self.location,
            )
        )

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        self._check_id(session_id)
        return await self._write(
            lambda db: writes.delete_session(db, self._dialect, session_id, expected_revision)
        )

    async def session_ids(self) -> list[str]:
        async with self._connection() as db:
            rows = await db.fetchall(
                self._dialect.sql("SELECT session_id FROM {sessions} ORDER BY session_id")
            )
        return [row[0] for row in rows]

    async def list_summaries(self) -> list[SessionSummary]:
        """Newest first, read page by page along the index, all from one snapshot."""
        async with self._transaction() as db:
            await db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return await writes.summaries(db, self._dialect, page=SUMMARY_PAGE)

    async def revision(self, session_id: str) -> int | None:
        self._check_id(session_id)
        async with self._connection() as db:
            return await writes.stored_revision(db, self._dialect, session_id)

    async def exists(self) -> bool:
        """The schema is there; creates nothing."""
        async with self._bounded() as deadline:
            conn = await self._open("foliko: exists")
            deadline.watch(conn)
            try:
                found = await PostgresExecutor(conn).fetchone(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
                )
            finally:
                await _closed(conn)
        return found is not None

    async def health_check(self) -> bool:
        """The server answers; creates nothing (no schema, no table)."""
        try:
            async with self._bounded() as deadline:
                conn = await self._open("foliko: health check")
                deadline.watch(conn)
                try:
                    await PostgresExecutor(conn).fetchall("SELECT 1")
                finally:
                    await _closed(conn)
        except StorageError:
            return False
        return True

    async def copy(self, source_id: str, target_id: str) -> SessionRecord:
        """One transaction: the target is created only if it does not exist yet, and
        the messages are copied by the server, never read and written again."""
        self._check_id(source_id)
        self._check_id(target_id)
        now = now_ms()
        d = self._dialect
        async with self._transaction() as db:
            row = await db.fetchone(self._load_sql(lock="FOR SHARE"), (source_id,))
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
            if await writes.stored_revision(db, d, target_id) is not None:
                raise SessionExistsError(target_id)
            try:
                await writes.insert_session(db, d, copied, copied.revision)
            except self._pg.errors.UniqueViolation:
                raise SessionExistsError(target_id) from None  # created since the check
            await db.execute(
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
        async with self._connection() as db:
            try:
                async with db.connection.transaction():
                    await writes.rename_session(
                        db, self._dialect, old_id, new_id, where=self.location
                    )
            except self._pg.errors.UniqueViolation:
                raise SessionExistsError(new_id) from None  # created while we renamed

    async def quarantine(self, problem: StoredProblem) -> str:
        d = self._dialect
        async with self._transaction() as db:
            row = await db.fetchone(
                d.sql("SELECT row_to_json(s)::text FROM {sessions} s WHERE session_id = %s"),
                (problem.session_id,),
            )
            bodies = await one_row(
                db,
                d.sql(
                    """SELECT COALESCE(json_agg(m ORDER BY m.seq), '[]')::text
                    FROM {messages} m WHERE session_id = %s"""
                ),
                (problem.session_id,),
            )
            await writes.quarantine_row(
                db, d, problem.session_id, problem.reason, row[0] if row else "{}", bodies[0]
            )
            await writes.remove_sessions(db, d, [problem.session_id])
        return f"{self.location} (table {self.schema}.quarantine)"

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """Through the GIN index on the messages' text (postgres_search.py)."""
        from foliko_cli.storage.postgres_search import search

        async with self._connection() as db:
            try:
                return await search(db, self._dialect.quoted, query)
            except (self._pg.errors.SyntaxError, self._pg.errors.DataException) as exc:
                raise UsageError(
                    f"PostgreSQL cannot read the search query {query.text!r}: {_reason(exc, None)}",
                    fix="search for plain words",
                ) from None

    async def info(self) -> dict[str, Any]:
        async with self._connection() as db:
            sessions, messages = await writes.counts(db, self._dialect)
            version = max(await self._dialect.applied_steps(db), default=0)
            (size,) = await one_row(
                db,
                """SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = %s AND c.relkind = 'r'""",
                (self.schema,),
            )
            (server,) = await one_row(db, "SHOW server_version")
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
        """An advisory lock on a connection of its own (not the pool's), so a dead
        holder frees it and a turn never holds a pooled connection."""
        self._check_id(session_id)
        key = advisory_key("session", self.schema, session_id)
        pool = self._pool()
        conn = await self._lock_connection(pool)
        try:
            await self._acquire(conn, key, session_id, timeout)
        except BaseException:
            await _closed(conn)
            raise
        try:
            yield
        finally:
            await asyncio.shield(self._release(pool, conn, key))

    async def _lock_connection(self, pool: _Pool) -> Any:
        conn = await self._reused(pool.idle_lock)
        if conn is not None:
            return conn
        if not self._migrated:
            async with self._connection():
                pass  # the schema exists before anyone waits on it
        async with self._bounded():
            return await self._open(f"foliko: pid {os.getpid()} on {socket.gethostname()}")

    async def _acquire(self, conn: Any, key: int, session_id: str, timeout: float) -> None:
        db = PostgresExecutor(conn)

        async def locked() -> bool:
            async with self._bounded() as deadline:
                deadline.watch(conn)
                return (await one_row(db, "SELECT pg_try_advisory_lock(%s)", (key,)))[0]

        if not await poll(locked, time.monotonic() + timeout):
            raise SessionBusyError(session_id, timeout, await self._holder(db, key))

    async def _holder(self, db: PostgresExecutor, key: int) -> str:
        """Who holds ``key``: the application name foliko gives its lock connections."""
        try:
            async with self._bounded() as deadline:
                deadline.watch(db.connection)
                row = await db.fetchone(
                    """SELECT l.pid, a.application_name, host(a.client_addr)
                   FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                   WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                     AND l.database = (SELECT oid FROM pg_database
                                       WHERE datname = current_database())
                     AND l.classid::bigint = %s AND l.objid::bigint = %s""",
                    ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
                )
        except StorageError:
            return "another connection"
        if row is None:
            return "another connection"
        pid, application, address = row
        if application and application.startswith("foliko: "):
            return application.removeprefix("foliko: ")
        return f"server process {pid}" + (f" from {address}" if address else "")

    async def _release(self, pool: _Pool, conn: Any, key: int) -> None:
        try:
            async with self._bounded() as deadline:
                deadline.watch(conn)
                query = "SELECT pg_advisory_unlock(%s)"
                released = (await one_row(PostgresExecutor(conn), query, (key,)))[0]
        except StorageError:
            released = False  # closing the connection below releases it on the server
        if released and len(pool.idle_lock) < IDLE_LOCK_CONNECTIONS:
            pool.idle_lock.append(conn)
        else:
            await _closed(conn)

    def _check_id(self, session_id: str) -> None:
        if "\x00" in session_id:
            check_session_id(session_id)  # raises: PostgreSQL text cannot hold NUL

    async def close(self) -> None:
        """Close the running loop's idle connections and forget every pool; a
        connection still in use is closed when it is given back."""
        pools, self._pools = self._pools, {}
        pool = pools.get(asyncio.get_running_loop())
        if pool is not None:
            for conn in pool.idle + pool.idle_lock:
                await _closed(conn)


class _Deadline:
    """When an operation's time is up, the sockets of the connections it uses
    are shut down: the query in flight fails at once. (Cancelling the task
    instead would have psycopg send a cancel request and wait for its answer,
    seconds more behind a stall that answers nothing.)"""

    def __init__(self, seconds: float):
        self._loop = asyncio.get_running_loop()
        self._when = self._loop.time() + seconds
        self._timers: list[asyncio.TimerHandle] = []
        self.passed = False

    def watch(self, conn: Any) -> None:
        self._timers.append(self._loop.call_at(self._when, self._cut, conn))

    def _cut(self, conn: Any) -> None:
        self.passed = True
        if not conn.closed:  # so the descriptor is still this connection's
            _shutdown(conn.pgconn.socket)

    def disarm(self) -> None:
        for timer in self._timers:
            timer.cancel()


def _shutdown(fd: int) -> None:
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()


class _Pool:
    """One event loop's connections: idle ones, idle lock connections, and the
    slots that bound how many operations run at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.idle: list[Any] = []
        self.idle_lock: list[Any] = []
        self.slots = asyncio.Semaphore(POOL_SIZE)
        self.migration = asyncio.Lock()


async def _closed(conn: Any) -> None:
    """Close ``conn`` (an AsyncConnection), whatever state it is in."""
    with contextlib.suppress(Exception):
        await conn.close()
