"""PostgreSQL: sessions shared by several machines (F6, R2).

The layout is SQLite's: a ``sessions`` row per session with denormalised
``message_count``, ``updated_at``, ``preview`` and ``revision``, and one
``messages`` row per message keyed by ``(session_id, seq)``. All tables live in
one schema (``foliko`` unless told otherwise), created and upgraded by an
ordered list of idempotent migrations that run under a transaction-level
advisory lock, so several machines starting at once apply each step once.

A message's ``seq`` is assigned inside the writing transaction, after the
session row is locked (``SELECT ... FOR UPDATE``), so sequences are gap-free
in commit order. The per-turn session lock is a session-level advisory lock
held on its own connection: when the holding process dies, the server closes
that connection and releases the lock.

``save``, ``save_many`` and ``delete`` compare the expected revision in the
statement that writes (``UPDATE ... WHERE revision = N``, ``INSERT ... ON
CONFLICT DO NOTHING``), so of two concurrent writers exactly one wins.

No call waits without bound. Connections use ``connect_timeout``, TCP
keepalives (idle 5 s, every 2 s, 3 probes) and ``tcp_user_timeout`` on the
client, the same keepalives on the server (so a lock holder that vanishes
behind a network stall loses its advisory lock within about 11 s), and
``statement_timeout``/``lock_timeout``. A stall the kernel cannot see (a
proxy that stops forwarding) is bounded by a watchdog: an operation that
overruns ``operation_timeout`` has its socket shut down and fails with a
StorageError.

psycopg 3 is imported when a storage is created, never at module import.
Its calls are synchronous and short; they run inline, as SQLite's do, on one
connection per thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import unquote

import orjson

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
    ConflictError,
    SessionExistsError,
    SessionStorageAdapter,
    StoredProblem,
    check_expected,
    expected_list,
)
from foliko_cli.storage.record import (
    SessionRecord,
    SessionState,
    SessionSummary,
    check_session_id,
    checked_append,
    checked_for_write,
    encode_message,
    new_metadata,
    next_revision,
    preview_of,
)
from foliko_cli.storage.search import SearchHit, SearchQuery
from foliko_cli.storage.sqlrows import record_from_row
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
_FIRST_DELAY = 0.002
_MAX_DELAY = 0.1
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_EXTRA_HINT = "PostgreSQL storage needs the 'postgres' extra: pip install 'foliko-cli[postgres]'"

Migration = Callable[[Any, str], None]
MIGRATIONS: list[Migration] = []


def migration(function: Migration) -> Migration:
    """Register a schema step; steps run in order, each once, each idempotent.

    A step gets the connection (inside the migration transaction) and the
    quoted schema name.
    """
    MIGRATIONS.append(function)
    return function


@migration
def create_sessions_and_messages(db: Any, schema: str) -> None:
    db.execute(
        f"""CREATE TABLE IF NOT EXISTS {schema}.sessions (
            session_id TEXT PRIMARY KEY,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            revision BIGINT NOT NULL DEFAULT 0,
            preview TEXT NOT NULL DEFAULT '',
            variables TEXT NOT NULL DEFAULT '{{}}',
            metadata TEXT NOT NULL DEFAULT '{{}}',
            compression_state TEXT NOT NULL DEFAULT '{{}}'
        )"""
    )
    db.execute(
        f"""CREATE TABLE IF NOT EXISTS {schema}.messages (
            session_id TEXT NOT NULL REFERENCES {schema}.sessions (session_id)
                ON DELETE CASCADE ON UPDATE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        )"""
    )
    db.execute(
        f"""CREATE INDEX IF NOT EXISTS sessions_by_updated
            ON {schema}.sessions (updated_at DESC, session_id)"""
    )


@migration
def create_quarantine(db: Any, schema: str) -> None:
    """Where ``storage check --repair`` moves unreadable sessions: aside, never deleted."""
    db.execute(
        f"""CREATE TABLE IF NOT EXISTS {schema}.quarantine (
            session_id TEXT NOT NULL,
            moved_at BIGINT NOT NULL,
            reason TEXT NOT NULL,
            session_row TEXT NOT NULL,
            messages TEXT NOT NULL
        )"""
    )


@migration
def create_search_index(db: Any, schema: str) -> None:
    """The full-text index over message text (postgres_search.py)."""
    from foliko_cli.storage.postgres_search import create_index

    create_index(db, schema)


def advisory_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key for ``parts``."""
    digest = hashlib.blake2b(
        "\0".join(parts).encode("utf-8", "surrogatepass"), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


def _as_int(value: Any) -> int:
    """A BIGINT timestamp column; what is not a number in range stores as 0.

    The column only serves queries: the exact value stays in the JSON.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not -(2**63) <= value < 2**63:
        return 0
    return int(value)


def _pg_text(text: str) -> str:
    """PostgreSQL text cannot hold NUL; JSON bodies escape it, previews drop it."""
    return text.replace("\x00", "")


def _reason(exc: BaseException, password: str | None) -> str:
    """The driver's message on one line, without the connection preamble or a password."""
    text = " ".join(str(exc).split("\n")[0].split())
    if "failed: " in text:
        text = text.rsplit("failed: ", 1)[1]
    text = text.removeprefix("FATAL: ").strip() or type(exc).__name__
    return hide(text, password)


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
        self._q = f'"{self.schema}"'
        self._password = parsed.password
        self._conninfo = parsed.driver_url("postgresql")
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
        self._idle_lock_connections: list[Any] = []
        self._guard_lock = threading.Lock()
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

    # connections

    def _open(self, application_name: str) -> Any:
        try:
            return self._pg.connect(
                self._conninfo,
                autocommit=True,
                application_name=application_name[:63],
                **self._connect_kwargs,
            )
        except self._pg.Error as exc:
            raise StorageError(
                f"cannot connect to PostgreSQL at {self._where} (database {self.database}"
                f"{', user ' + self.user if self.user else ''}): "
                f"{_reason(exc, self._password)}; is the server running? check the URL"
            ) from None

    @property
    def db(self) -> Any:
        db = getattr(self._local, "db", None)
        if db is None or db.closed:
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
        """Apply the missing steps; an existing schema needs no CREATE privilege."""
        s = self._q
        table = f"{s}.schema_migrations"
        if db.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is not None:
            version, steps = db.execute(
                f"SELECT COALESCE(MAX(version), 0), COUNT(*) FROM {table}"
            ).fetchone()
            self._check_version(version)
            if steps == version == len(MIGRATIONS):
                return
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("migrate", self.schema),))
            exists = db.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
            ).fetchone()
            if not exists:
                db.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            db.execute(
                f"""CREATE TABLE IF NOT EXISTS {table} (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL
                )"""
            )
            applied = {row[0] for row in db.execute(f"SELECT version FROM {table}")}
            self._check_version(max(applied, default=0))
            for number, step in enumerate(MIGRATIONS, start=1):
                if number in applied:
                    continue
                step(db, s)
                db.execute(
                    f"INSERT INTO {table} (version, name, applied_at) VALUES (%s, %s, %s)",
                    (number, step.__name__, now_ms()),
                )

    def _check_version(self, version: int) -> None:
        if version > len(MIGRATIONS):
            raise StorageError(
                f"PostgreSQL schema {self.schema} at {self._where} has version {version}, "
                f"newer than this foliko knows ({len(MIGRATIONS)}); upgrade foliko"
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
            db = getattr(self._local, "db", None)
            if db is not None and (db.closed or db.broken):
                self._local.db = None
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
        with self._guard():
            row = self.db.execute(self._load_sql(), (session_id,)).fetchone()
        if row is None:
            return None
        return self._record(session_id, row)

    def _load_sql(self, *, lock: str = "") -> str:
        s = self._q
        return f"""SELECT variables, metadata, compression_state, updated_at, revision,
                       (SELECT array_agg(m.body ORDER BY m.seq) FROM {s}.messages m
                        WHERE m.session_id = s.session_id)
                   FROM {s}.sessions s WHERE s.session_id = %s {lock}"""

    def _record(self, session_id: str, row: tuple[Any, ...]) -> SessionRecord:
        *columns, bodies = row
        return record_from_row(session_id, tuple(columns), bodies or (), self.location)

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
        order = sorted(range(len(records)), key=lambda i: records[i].session_id)
        if any(revision is not None for revision in expected):
            return self._save_checked(records, expected, order)
        rows = [
            (*self._session_row(records[i], records[i].messages), next_revision(None))
            for i in order
        ]
        last = {records[i].session_id: records[i] for i in order}  # a repeated id: the last wins
        messages = [
            row
            for record in last.values()
            for row in self._message_rows(record.session_id, 0, record.messages)
        ]
        s = self._q
        revisions: list[int] = []
        with self._guard(), self.db.transaction(), self.db.cursor() as cur:
            cur.executemany(
                f"""INSERT INTO {s}.sessions AS t (session_id, created_at, updated_at,
                       message_count, preview, variables, metadata, compression_state, revision)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
                    ON CONFLICT (session_id) DO UPDATE SET
                       created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
                       message_count = EXCLUDED.message_count, revision = t.revision + 1,
                       preview = EXCLUDED.preview, variables = EXCLUDED.variables,
                       metadata = EXCLUDED.metadata,
                       compression_state = EXCLUDED.compression_state
                    RETURNING revision""",
                rows,
                returning=True,
            )
            while True:
                revisions.append(cur.fetchone()[0])
                if not cur.nextset():
                    break
            cur.execute(f"DELETE FROM {s}.messages WHERE session_id = ANY(%s)", (list(last),))
            self._copy_messages(cur, messages)
        result = [0] * len(records)
        for position, revision in zip(order, revisions, strict=True):
            result[position] = revision
        return result

    def _save_checked(
        self, records: list[SessionRecord], expected: list[int | None], order: list[int]
    ) -> list[int]:
        """Row by row, each write conditional on its expected revision."""
        s = self._q
        result = [0] * len(records)
        with self._guard(), self.db.transaction(), self.db.cursor() as cur:
            for i in order:
                record, want = records[i], expected[i]
                sid, *values = self._session_row(record, record.messages)
                if want is None:
                    row = cur.execute(
                        f"""INSERT INTO {s}.sessions AS t (session_id, created_at, updated_at,
                               message_count, preview, variables, metadata, compression_state,
                               revision)
                            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
                            ON CONFLICT (session_id) DO UPDATE SET
                               created_at = EXCLUDED.created_at,
                               updated_at = EXCLUDED.updated_at,
                               message_count = EXCLUDED.message_count,
                               revision = t.revision + 1,
                               preview = EXCLUDED.preview, variables = EXCLUDED.variables,
                               metadata = EXCLUDED.metadata,
                               compression_state = EXCLUDED.compression_state
                            RETURNING revision""",
                        (sid, *values, next_revision(None)),
                    ).fetchone()
                elif want == 0:
                    row = cur.execute(
                        f"""INSERT INTO {s}.sessions (session_id, created_at, updated_at,
                               message_count, preview, variables, metadata, compression_state,
                               revision)
                            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
                            ON CONFLICT (session_id) DO NOTHING RETURNING revision""",
                        (sid, *values, next_revision(None)),
                    ).fetchone()
                    if row is None:
                        raise SessionExistsError(sid)
                else:
                    row = cur.execute(
                        f"""UPDATE {s}.sessions SET created_at = %s, updated_at = %s,
                               message_count = %s, preview = %s, variables = %s, metadata = %s,
                               compression_state = %s, revision = revision + 1
                            WHERE session_id = %s AND revision = %s RETURNING revision""",
                        (*values, sid, want),
                    ).fetchone()
                    if row is None:
                        raise ConflictError(sid, want, self._stored_revision(cur, sid))
                result[i] = row[0]
                cur.execute(f"DELETE FROM {s}.messages WHERE session_id = %s", (sid,))
                self._copy_messages(cur, self._message_rows(sid, 0, record.messages))
        return result

    def _stored_revision(self, cur: Any, session_id: str) -> int:
        row = cur.execute(
            f"SELECT revision FROM {self._q}.sessions WHERE session_id = %s", (session_id,)
        ).fetchone()
        return row[0] if row else 0

    def _session_row(self, record: SessionRecord, messages: list[dict[str, Any]]) -> tuple:
        metadata = {**new_metadata(), **record.metadata, "message_count": len(messages)}
        return (
            record.session_id,
            _as_int(metadata["created_at"]),
            record.saved_at or now_ms(),
            len(messages),
            _pg_text(preview_of(messages)),
            orjson.dumps(record.variables).decode(),
            orjson.dumps(metadata).decode(),
            orjson.dumps(record.compression_state).decode(),
        )

    @staticmethod
    def _message_rows(
        session_id: str, first_seq: int, messages: list[dict[str, Any]]
    ) -> list[tuple]:
        return [
            (
                session_id,
                first_seq + i,
                _pg_text(str(m["role"])),
                _as_int(m.get("created_at", 0)),
                encode_message(m).decode(),
            )
            for i, m in enumerate(messages)
        ]

    def _copy_messages(self, cur: Any, rows: list[tuple]) -> None:
        if not rows:
            return
        with cur.copy(
            f"COPY {self._q}.messages (session_id, seq, role, created_at, body) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row(row)

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
        now = now_ms()
        s = self._q
        with self._guard(), self.db.transaction(), self.db.cursor() as cur:
            row = cur.execute(
                f"""SELECT revision, message_count FROM {s}.sessions
                    WHERE session_id = %s FOR UPDATE""",
                (session_id,),
            ).fetchone()
            found, count = row if row else (0, 0)
            if found != expected_revision:
                raise ConflictError(session_id, expected_revision, found)
            total = count + len(messages)
            revision = next_revision(found)
            metadata = {**state.metadata, "message_count": total}
            values = (
                _as_int(metadata.get("created_at", now)),
                now,
                total,
                _pg_text(preview_of(messages)),
                orjson.dumps(state.variables).decode(),
                orjson.dumps(metadata).decode(),
                orjson.dumps(state.compression_state).decode(),
            )
            if row is None:
                created = cur.execute(
                    f"""INSERT INTO {s}.sessions (created_at, updated_at, message_count,
                           preview, variables, metadata, compression_state, revision,
                           session_id)
                        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
                        ON CONFLICT (session_id) DO NOTHING RETURNING revision""",
                    (*values, revision, session_id),
                ).fetchone()
                if created is None:  # another writer created it since the SELECT
                    found = cur.execute(
                        f"SELECT revision FROM {s}.sessions WHERE session_id = %s",
                        (session_id,),
                    ).fetchone()
                    raise ConflictError(session_id, expected_revision, found[0] if found else 0)
            else:
                cur.execute(
                    f"""UPDATE {s}.sessions SET updated_at = %s,
                           message_count = %s,
                           preview = CASE WHEN %s = '' THEN preview ELSE %s END,
                           variables = %s, metadata = %s, compression_state = %s,
                           revision = %s
                        WHERE session_id = %s""",
                    (values[1], total, values[3], values[3], *values[4:], revision, session_id),
                )
            self._copy_messages(cur, self._message_rows(session_id, count, messages))
        return revision

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        self._check_id(session_id)
        s = self._q
        with self._guard(), self.db.cursor() as cur:
            if expected_revision is None:
                cur.execute(f"DELETE FROM {s}.sessions WHERE session_id = %s", (session_id,))
                return cur.rowcount > 0
            if expected_revision == 0:
                check_expected(session_id, 0, self._stored_revision(cur, session_id))
                return False
            cur.execute(
                f"DELETE FROM {s}.sessions WHERE session_id = %s AND revision = %s",
                (session_id, expected_revision),
            )
            if cur.rowcount == 0:
                found = self._stored_revision(cur, session_id)
                raise ConflictError(session_id, expected_revision, found)
            return True

    async def list(self) -> list[str]:
        with self._guard():
            rows = self.db.execute(
                f"SELECT session_id FROM {self._q}.sessions ORDER BY session_id"
            ).fetchall()
        return [row[0] for row in rows]

    async def list_summaries(self) -> list[SessionSummary]:
        """Newest first, read page by page along the index, all from one snapshot."""
        s = self._q
        columns = "session_id, created_at, updated_at, message_count, preview"
        summaries: list[SessionSummary] = []
        with self._guard(), self.db.transaction():
            db = self.db
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            rows = db.execute(
                f"""SELECT {columns} FROM {s}.sessions
                    ORDER BY updated_at DESC, session_id LIMIT %s""",
                (SUMMARY_PAGE,),
            ).fetchall()
            while rows:
                summaries.extend(SessionSummary(*row) for row in rows)
                if len(rows) < SUMMARY_PAGE:
                    break
                last_id, last_updated = rows[-1][0], rows[-1][2]
                rows = db.execute(
                    f"""SELECT {columns} FROM {s}.sessions
                        WHERE updated_at < %s OR (updated_at = %s AND session_id > %s)
                        ORDER BY updated_at DESC, session_id LIMIT %s""",
                    (last_updated, last_updated, last_id, SUMMARY_PAGE),
                ).fetchall()
        return summaries

    async def revision(self, session_id: str) -> int | None:
        self._check_id(session_id)
        with self._guard():
            row = self.db.execute(
                f"SELECT revision FROM {self._q}.sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
        return None if row is None else row[0]

    async def exists(self) -> bool:
        """The schema is there; creates nothing."""
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
        """One transaction: the target is created only if it does not exist yet."""
        self._check_id(source_id)
        self._check_id(target_id)
        s = self._q
        now = now_ms()
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
            )
            created = cur.execute(
                f"""INSERT INTO {s}.sessions (session_id, created_at, updated_at, message_count,
                       preview, variables, metadata, compression_state, revision)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
                    ON CONFLICT (session_id) DO NOTHING RETURNING revision""",
                (*self._session_row(copied, copied.messages), next_revision(None)),
            ).fetchone()
            if created is None:
                raise SessionExistsError(target_id)
            cur.execute(
                f"""INSERT INTO {s}.messages (session_id, seq, role, created_at, body)
                    SELECT %s, seq, role, created_at, body FROM {s}.messages
                    WHERE session_id = %s""",
                (target_id, source_id),
            )
        copied.revision = created[0]
        return copied

    async def rename(self, old_id: str, new_id: str) -> None:
        self._check_id(old_id)
        self._check_id(new_id)
        s = self._q
        with self._guard():
            try:
                with self.db.transaction():
                    exists = self.db.execute(
                        f"SELECT 1 FROM {s}.sessions WHERE session_id = %s", (new_id,)
                    ).fetchone()
                    if exists:
                        raise SessionExistsError(new_id)
                    moved = self.db.execute(
                        f"""UPDATE {s}.sessions SET session_id = %s,
                               revision = GREATEST(revision + 1, %s) WHERE session_id = %s""",
                        (new_id, next_revision(None), old_id),
                    ).rowcount
                    if moved == 0:
                        raise SessionNotFoundError(old_id)
            except self._pg.errors.UniqueViolation:
                raise SessionExistsError(new_id) from None  # created while we renamed

    async def quarantine(self, problem: StoredProblem) -> str:
        s = self._q
        with self._guard(), self.db.transaction():
            row = self.db.execute(
                f"SELECT row_to_json(s)::text FROM {s}.sessions s WHERE session_id = %s",
                (problem.session_id,),
            ).fetchone()
            bodies = self.db.execute(
                f"""SELECT COALESCE(json_agg(m ORDER BY m.seq), '[]')::text
                    FROM {s}.messages m WHERE session_id = %s""",
                (problem.session_id,),
            ).fetchone()
            self.db.execute(
                f"""INSERT INTO {s}.quarantine (session_id, moved_at, reason, session_row,
                       messages) VALUES (%s, %s, %s, %s, %s)""",
                (
                    problem.session_id,
                    now_ms(),
                    _pg_text(problem.reason),
                    row[0] if row else "{}",
                    bodies[0],
                ),
            )
            self.db.execute(
                f"DELETE FROM {s}.sessions WHERE session_id = %s", (problem.session_id,)
            )
        return f"{self.location} (table {self.schema}.quarantine)"

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """Through the GIN index on the messages' text (postgres_search.py)."""
        from foliko_cli.storage.postgres_search import search

        with self._guard():
            try:
                return search(self.db, self._q, query)
            except (self._pg.errors.SyntaxError, self._pg.errors.DataException) as exc:
                raise UsageError(
                    f"PostgreSQL cannot read the search query {query.text!r}: {_reason(exc, None)}",
                    fix="search for plain words",
                ) from None

    async def info(self) -> dict[str, Any]:
        s = self._q
        with self._guard():
            sessions, messages = self.db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(message_count), 0) FROM {s}.sessions"
            ).fetchone()
            version = self.db.execute(
                f"SELECT COALESCE(MAX(version), 0) FROM {s}.schema_migrations"
            ).fetchone()[0]
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
            "messages": int(messages),
            "schema": self.schema,
            "schema_version": version,
            "server_version": server,
            "size_bytes": int(size),
        }

    # the per-turn session lock

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        """An advisory lock on a connection of its own, so a dead holder frees it."""
        self._check_id(session_id)
        key = advisory_key("session", self.schema, session_id)
        conn = self._lock_connection()
        try:
            await self._acquire(conn, key, session_id, timeout)
        except BaseException:
            conn.close()
            raise
        try:
            yield
        finally:
            self._release(conn, key)

    def _lock_connection(self) -> Any:
        with self._guard_lock:
            while self._idle_lock_connections:
                conn = self._idle_lock_connections.pop()
                if not conn.closed:
                    return conn
        self._ready()  # the schema exists before anyone waits on it
        return self._open(f"foliko: pid {os.getpid()} on {socket.gethostname()}")

    async def _acquire(self, conn: Any, key: int, session_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = _FIRST_DELAY
        while True:
            with self._guard(conn):
                if conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                    return
            if time.monotonic() >= deadline:
                raise SessionBusyError(session_id, timeout, self._holder(conn, key))
            await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, _MAX_DELAY)

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
            self._connections, self._idle_lock_connections = [], []
        for conn in connections:
            conn.close()
        self._local = threading.local()
