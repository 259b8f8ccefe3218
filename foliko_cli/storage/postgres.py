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
runs again, now finding the row. A turn's reads and its append are one
statement each (postgres_turn.py). The per-turn session lock is a
session-level advisory lock on a connection the turn then reads and writes
on (one connection, five statements a cold turn): when the holding process
dies, the server closes that connection and releases the lock.

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
import contextvars
import logging
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from typing import Any, TypeVar, cast
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
    Messages,
    SessionRecord,
    SessionState,
    SessionSummary,
    checked_append,
    checked_for_write,
    next_revision,
)
from foliko_cli.storage import postgres_turn as turn
from foliko_cli.storage.base import (
    AuditEntry,
    SavesInBatches,
    SessionStorageAdapter,
    StoredProblem,
    expected_list,
)
from foliko_cli.storage.search import SearchHit, SearchQuery
from foliko_cli.storage.sql import schema, writes
from foliko_cli.storage.sql.dialect import PostgresDialect, advisory_key
from foliko_cli.storage.sql.executor import PostgresExecutor, one_row
from foliko_cli.storage.sql.migrations import Step, migrate
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


async def create_interrupts(db: PostgresExecutor, dialect: PostgresDialect) -> None:
    """Requests that a session's lock holder stop its turn (base.py rule 10)."""
    await db.execute(
        f"""CREATE TABLE IF NOT EXISTS {dialect.prefix}interrupts (
            session_id TEXT PRIMARY KEY, until_ms BIGINT NOT NULL)"""
    )


MIGRATIONS: list[Step[PostgresExecutor, PostgresDialect]] = [
    schema.create_sessions_and_messages,
    schema.create_quarantine,
    create_search_index,
    bound_search_text,
    keep_indexed_text,
    schema.create_fragments,
    create_interrupts,
    schema.create_audit,
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
    indexes = ("PostgreSQL GIN index messages_text_search (messages.search_vector)",)

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

    async def _open(self, application_name: str | None = None) -> Any:
        """A new connection, named after this process unless told otherwise (so a
        busy session names who holds its lock: ``_holder``)."""
        if application_name is None:
            application_name = f"foliko: pid {os.getpid()} on {socket.gethostname()}"
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
    async def _connection(self, session_id: str | None = None) -> AsyncIterator[PostgresExecutor]:
        """One bounded operation, the schema migrated: on the connection that holds
        ``session_id``'s lock when this task holds it (a turn's reads and write
        go where its lock is: one connection a turn), else on one of the pool.
        A pool connection goes back when the operation leaves it sound and
        idle, and is closed otherwise (a cancelled or broken one)."""
        held = _HELD.get()
        if held is not None and held.serves(self, session_id) and self._reusable(held.conn):
            held.busy = True
            try:
                async with self._bounded() as deadline:
                    deadline.watch(held.conn)
                    yield PostgresExecutor(held.conn)
            finally:
                held.busy = False
            return
        pool = self._pool()
        async with self._bounded() as deadline, pool.slots:
            conn = await self._reused(pool.idle) or await self._open()
            deadline.watch(conn)
            try:
                if not self._migrated:
                    await self._migrate(pool, conn)
                yield PostgresExecutor(conn)
            finally:
                await self._give_back(pool, conn)

    async def _give_back(self, pool: _Pool, conn: Any) -> None:
        """Keep ``conn`` for the next operation when it is sound and idle (up to
        ``POOL_SIZE``), else close it."""
        reusable = self._reusable(conn) and self._pools.get(pool.loop) is pool
        if reusable and len(pool.idle) < POOL_SIZE:
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
    async def _transaction(self, session_id: str | None = None) -> AsyncIterator[PostgresExecutor]:
        async with self._connection(session_id) as db, db.connection.transaction():
            yield db

    async def _write(
        self,
        write: Callable[[PostgresExecutor], Awaitable[T]],
        session_id: str | None = None,
        *,
        single: bool = False,
    ) -> T:
        """``write(db)`` in one transaction (``single``: ``write`` is one statement,
        a transaction of its own), run again when it created a session that another
        writer created meanwhile (the next run finds its row)."""
        async with self._connection(session_id) as db:
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                try:
                    if single:
                        return await write(db)
                    async with db.connection.transaction():
                        return await write(db)
                except self._pg.errors.UniqueViolation:
                    if attempt == WRITE_ATTEMPTS:
                        raise
        raise AssertionError("unreachable")

    # contract

    async def load(self, session_id: str) -> SessionRecord | None:
        return await self._read(session_id, "at", 0)

    async def load_recent(self, session_id: str) -> SessionRecord | None:
        """The messages after the compression summary, in one statement: a turn on a
        long compressed session reads what it sends (postgres_turn.py)."""
        record = await self._read(session_id, "recent")
        if record is not None and record.first_seq != turn.python_start(record):
            record = await self._read(session_id, "at", turn.python_start(record))
        return record

    async def load_state(self, session_id: str) -> SessionRecord | None:
        """The session row alone, the positions of the messages a turn would read
        checked from an aggregate over the primary key (as SQLite does)."""
        self._check_id(session_id)
        async with self._connection(session_id) as db:
            row = await self._fetch_read(db, session_id, "recent", bodies=False)
        return None if row is None else turn.state_of(session_id, row, self.location)

    async def load_window(
        self, session_id: str, start: int, stop: int | None
    ) -> SessionRecord | None:
        """Only ``messages[start:stop]``, in one statement."""
        return await self._read(session_id, "window", turn.window(start, stop))

    async def _read(
        self, session_id: str, start: str, at: int | tuple[int | None, ...] = 0
    ) -> SessionRecord | None:
        """The session with its messages from ``start`` (postgres_turn.STARTS; ``at``
        the parameters of a position or a window) on, in one statement."""
        self._check_id(session_id)
        async with self._connection(session_id) as db:
            row = await self._fetch_read(db, session_id, start, at=at)
        return None if row is None else turn.record_of(session_id, row, self.location)

    async def _fetch_read(
        self,
        db: PostgresExecutor,
        session_id: str,
        start: str,
        *,
        at: int | tuple[int | None, ...] = 0,
        bodies: bool = True,
    ) -> tuple[Any, ...] | None:
        if start == "at" or start == "window":
            params = (*(at if isinstance(at, tuple) else (at,)), session_id)
        else:
            params = (session_id,)
        try:
            return await db.fetchone(turn.read_sql(self._dialect, start, bodies=bodies), params)
        except self._pg.errors.DataError:
            if start != "recent":
                raise
        # a compression state that is not JSON: read from 0, whose parse reports it
        return await db.fetchone(turn.read_sql(self._dialect, "at", bodies=bodies), (0, session_id))

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

        async def replace(db: PostgresExecutor) -> list[int]:
            written = await writes.replace_records(
                db, self._dialect, records, expected, where=self.location
            )
            return written.revisions

        return await self._write(replace, records[0].session_id if len(records) == 1 else None)

    async def append(
        self, session_id: str, messages: Messages, state: SessionState, *, expected_revision: int
    ) -> int:
        """One statement (postgres_turn.py): the checks and the write in one round trip."""
        self._check_id(session_id)
        checked_append(session_id, messages, state)
        params = turn.append_params(
            self._dialect,
            session_id,
            messages,
            state,
            expected_revision,
            now_ms(),
            next_revision(None),
        )

        async def write(db: PostgresExecutor) -> int:
            return await turn.append(db, self._dialect, session_id, params, self.location)

        return await self._write(write, session_id, single=True)

    async def forget(
        self,
        records: list[SessionRecord],
        deletions: dict[str, int | None],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> None:
        """One transaction; the search vectors are columns of the message rows,
        so they go with them."""
        expected = expected_list(records, expected_revisions)
        for session_id in [*deletions, *(record.session_id for record in records)]:
            self._check_id(session_id)
        for record in records:
            checked_for_write(record)

        async def write(db: PostgresExecutor) -> None:
            await writes.forget_records(
                db, self._dialect, records, expected, deletions, where=self.location
            )

        await self._write(write)

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        self._check_id(session_id)
        return await self._write(
            lambda db: writes.delete_session(db, self._dialect, session_id, expected_revision),
            session_id,
        )

    async def audit_append(self, entries: list[AuditEntry]) -> None:
        from foliko_cli.storage.sql import audit as sql_audit

        async with self._transaction() as db:
            await sql_audit.append(db, self._dialect, entries)

    async def audit_read(self, since: int | None = None) -> list[AuditEntry]:
        from foliko_cli.storage.sql import audit as sql_audit

        async with self._connection() as db:
            return await sql_audit.read(db, self._dialect, since)

    async def audit_prune(self, *, before: int | None = None, keep: int | None = None) -> int:
        from foliko_cli.storage.sql import audit as sql_audit

        async with self._transaction() as db:
            return await sql_audit.prune(db, self._dialect, before, keep)

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

    async def put_fragments(self, texts: Mapping[str, str]) -> bool:
        if texts:
            await self._write(lambda db: writes.put_fragments(db, self._dialect, texts))
        return True

    async def get_fragments(self, hashes: Collection[str]) -> dict[str, str]:
        if not hashes:
            return {}
        async with self._connection() as db:
            return await writes.get_fragments(db, self._dialect, hashes)

    async def revision(self, session_id: str) -> int | None:
        self._check_id(session_id)
        async with self._connection(session_id) as db:
            return await writes.stored_revision(db, self._dialect, session_id)

    async def set_interrupt(self, session_id: str, until_ms: int) -> None:
        self._check_id(session_id)
        table = self._dialect.prefix + "interrupts"
        async with self._connection() as db:
            if until_ms:
                await db.execute(
                    f"""INSERT INTO {table} (session_id, until_ms) VALUES (%s, %s)
                        ON CONFLICT (session_id) DO UPDATE SET until_ms = EXCLUDED.until_ms""",
                    (session_id, until_ms),
                )
            else:
                await db.execute(f"DELETE FROM {table} WHERE session_id = %s", (session_id,))

    async def interrupt_requested(self, session_id: str) -> bool:
        self._check_id(session_id)
        statement = f"SELECT 1 FROM {self._dialect.prefix}interrupts WHERE session_id = %s"
        async with self._connection(session_id) as db:
            row = await db.fetchone(statement + " AND until_ms > %s", (session_id, now_ms()))
        return row is not None

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
        async with self._transaction(source_id) as db:
            read = turn.read_sql(d, "at", bodies=True, lock=" FOR SHARE OF s")
            row = await db.fetchone(read, (0, source_id))
            if row is None:
                raise SessionNotFoundError(source_id)
            source = turn.record_of(source_id, row, self.location)
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
        async with self._connection(old_id) as db:
            try:
                async with db.connection.transaction():
                    await writes.rename_session(
                        db, self._dialect, old_id, new_id, where=self.location
                    )
            except self._pg.errors.UniqueViolation:
                raise SessionExistsError(new_id) from None  # created while we renamed

    async def quarantine(self, problem: StoredProblem) -> str:
        d = self._dialect
        async with self._transaction(problem.session_id) as db:
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
        """A session-level advisory lock on a connection taken out of the pool for
        the turn (outside its slots, so a turn waiting on a model never holds one):
        a dead holder's connection closes and frees it. While the lock is held,
        this task's operations on the session run on that connection (one
        connection a turn, where another process would need two).

        A transaction-scoped lock would end with the transaction, but the lock
        spans the model call: the transaction would stay open for minutes (idle
        in transaction, its snapshot held), and the turn's write would commit
        only at the release, after the engine took it as saved."""
        self._check_id(session_id)
        key = advisory_key("session", self.schema, session_id)
        pool = self._pool()
        conn = await self._lock_connection(pool)
        try:
            await self._acquire(conn, key, session_id, timeout)
        except BaseException:
            await _closed(conn)
            raise
        held = _Held(self, session_id, conn)
        _HELD.set(held)
        try:
            yield
        finally:
            held.active = False  # the release may run in another task (a copy of the context)
            await asyncio.shield(self._release(pool, conn, key))

    async def _lock_connection(self, pool: _Pool) -> Any:
        conn = await self._reused(pool.idle)
        if conn is not None:
            return conn
        async with self._bounded():
            return await self._open()

    async def _acquire(self, conn: Any, key: int, session_id: str, timeout: float) -> None:
        db = PostgresExecutor(conn)
        first = not self._migrated

        async def locked() -> bool:
            nonlocal first
            async with self._bounded() as deadline:
                deadline.watch(conn)
                if first:
                    first = False
                    return await self._lock_and_check_schema(conn, key)
                return cast(bool, (await one_row(db, "SELECT pg_try_advisory_lock(%s)", (key,)))[0])

        if not await poll(locked, time.monotonic() + timeout):
            raise SessionBusyError(session_id, timeout, await self._holder(db, key))

    async def _lock_and_check_schema(self, conn: Any, key: int) -> bool:
        """The first attempt to lock also reads which migration steps the schema has
        had (one round trip for both: a cold turn's first statement); a schema
        that lacks one is migrated on this connection before the turn goes on."""
        statement = self._dialect.sql(
            "SELECT pg_try_advisory_lock(%s), (SELECT array_agg(version) FROM {schema_migrations})"
        )
        taken, versions = False, None
        # No schema yet: the statement fails before it takes the lock.
        with contextlib.suppress(self._pg.errors.UndefinedTable):
            taken, versions = await one_row(PostgresExecutor(conn), statement, (key,))
        if set(versions or ()) != set(range(1, len(MIGRATIONS) + 1)):
            await self._migrate(self._pool(), conn)
        self._migrated = True
        return bool(taken)

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
            return cast(str, application.removeprefix("foliko: "))
        return f"server process {pid}" + (f" from {address}" if address else "")

    async def _release(self, pool: _Pool, conn: Any, key: int) -> None:
        try:
            async with self._bounded() as deadline:
                deadline.watch(conn)
                query = "SELECT pg_advisory_unlock(%s)"
                released = (await one_row(PostgresExecutor(conn), query, (key,)))[0]
        except StorageError:
            released = False  # closing the connection below releases it on the server
        if released:
            await self._give_back(pool, conn)
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
            for conn in pool.idle:
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
    """One event loop's connections: the idle ones, and the slots that bound how
    many operations run at once (a turn's lock connection is outside them)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.idle: list[Any] = []
        self.slots = asyncio.Semaphore(POOL_SIZE)
        self.migration = asyncio.Lock()


class _Held:
    """A session lock a task holds, and the connection it holds it on."""

    def __init__(self, storage: PostgresStorage, session_id: str, conn: Any):
        self.storage = storage
        self.session_id = session_id
        self.conn = conn
        self.active = True
        self.busy = False

    def serves(self, storage: PostgresStorage, session_id: str | None) -> bool:
        """Whether an operation of ``storage`` on ``session_id`` may use the connection now."""
        return (
            self.active
            and not self.busy
            and storage is self.storage
            and session_id == self.session_id
        )


_HELD: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("foliko_pg_held", default=None)
"""The session lock the running task holds (the innermost, when it holds several)."""


async def _closed(conn: Any) -> None:
    """Close ``conn`` (an AsyncConnection), whatever state it is in."""
    with contextlib.suppress(Exception):
        await conn.close()
