"""What differs between SQLite and PostgreSQL, and nothing else.

The shared statements are written once, with ``?`` placeholders and table
names in braces (``{sessions}``); ``Dialect.sql`` turns one into its
engine's text, once per statement. Beyond that a dialect knows the column
type of timestamps, how messages are tied to their session, the lock a
writer takes on the row it reads, how message rows go in (``executemany``
or ``COPY``), where the schema version is kept, and which writes its search
index must follow. ``db`` is an executor (executor.py) wherever a method is
a coroutine.

No driver is imported here: the SQLite start-up path loads this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

TABLES = ("sessions", "messages", "quarantine", "schema_migrations", "fragments", "audit")

_INSERT_MESSAGES = (
    "INSERT INTO {messages} (session_id, seq, role, created_at, body) VALUES (?, ?, ?, ?, ?)"
)


class Dialect:
    """The answers both engines could give; each engine's class overrides the rest."""

    mark = "?"
    bigint = "INTEGER"
    """The type of timestamps and revisions (SQLite's INTEGER is 64-bit already)."""
    identity = "INTEGER PRIMARY KEY"
    """A key each new row gets, greater than every key before it."""
    messages_link = ""
    """After ``messages.session_id``: how a message row belongs to its session."""
    messages_options = ""
    """After the ``messages`` table's columns."""
    summary_index = "{sessions}(updated_at)"
    """What ``sessions_by_updated`` indexes."""
    row_lock = ""
    """Ends a SELECT of the rows a writer is about to change."""
    prefix = ""
    """Qualifies a table name (the PostgreSQL schema)."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}

    def sql(self, template: str) -> str:
        """``template`` in this engine's SQL: tables qualified, placeholders its own."""
        text = self._texts.get(template)
        if text is None:
            text = template.format(
                **{table: self.prefix + table for table in TABLES},
                bigint=self.bigint,
                identity=self.identity,
                lock=self.row_lock,
                messages_link=self.messages_link,
                messages_options=self.messages_options,
                summary_index=self.summary_index.format(sessions=self.prefix + "sessions"),
            )
            if self.mark != "?":
                text = text.replace("?", self.mark)
            self._texts[template] = text
        return text

    def text(self, value: str) -> str:
        """``value`` as this engine's text column can hold it."""
        return value

    async def insert_messages(self, db: Any, rows: list[tuple[Any, ...]]) -> None:
        """Write message rows ``(session_id, seq, role, created_at, body)``."""
        if rows:
            await db.executemany(self.sql(_INSERT_MESSAGES), rows)

    # the search index, where it is not kept by the engine itself

    async def indexed(self, db: Any, batches: list[tuple[str, int, list[dict[str, Any]]]]) -> None:
        """``(session_id, first_seq, messages)`` were just written."""

    async def unindexed(self, db: Any, session_ids: list[str]) -> None:
        """The messages of ``session_ids`` are about to be deleted."""

    async def renamed(self, db: Any, old_id: str, new_id: str) -> None:
        """The messages of ``old_id`` now belong to ``new_id``."""

    # the schema version

    async def applied_steps(self, db: Any) -> set[int]:
        """The numbers of the migration steps this database has had."""
        raise NotImplementedError

    async def set_version(self, db: Any, version: int) -> None:
        """Record that steps 1 to ``version`` have run (inside the migration)."""

    def migrating(self, db: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """The transaction the migration runs in, exclusive among migrators."""
        raise NotImplementedError


class SQLiteDialect(Dialect):
    """``BEGIN IMMEDIATE`` takes the database's write lock before the first read,
    so a writer needs no row lock; the version is ``PRAGMA user_version``; the
    FTS5 index (sqlite_search.py) is written beside the messages."""

    messages_options = " WITHOUT ROWID"

    @staticmethod
    @contextlib.contextmanager
    def transaction(db: Any) -> Iterator[Any]:
        """``BEGIN IMMEDIATE`` on the ``sqlite3`` connection ``db``. A failure rolls
        it back, unless SQLite already did (a full disk while it spilled pages):
        the error the caller gets is the failure, never the rollback's."""
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(Exception):
                    db.execute("ROLLBACK")
            raise
        try:
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(Exception):
                    db.execute("ROLLBACK")
            raise

    async def indexed(self, db: Any, batches: list[tuple[str, int, list[dict[str, Any]]]]) -> None:
        from foliko_cli.storage.sqlite_search import index_records, mark_pending

        if getattr(db, "defer_index", False):
            if any(messages for _, _, messages in batches):
                mark_pending(db.connection)
        else:
            index_records(db.connection, batches)

    async def unindexed(self, db: Any, session_ids: list[str]) -> None:
        from foliko_cli.storage.sqlite_search import unindex

        unindex(db.connection, session_ids)

    async def renamed(self, db: Any, old_id: str, new_id: str) -> None:
        from foliko_cli.storage.sqlite_search import rename_indexed

        rename_indexed(db.connection, old_id, new_id)

    @staticmethod
    def version(db: Any) -> int:
        """``PRAGMA user_version`` of the ``sqlite3`` connection ``db``."""
        return cast(int, db.execute("PRAGMA user_version").fetchone()[0])

    async def applied_steps(self, db: Any) -> set[int]:
        return set(range(1, self.version(db.connection) + 1))

    async def set_version(self, db: Any, version: int) -> None:
        await db.execute(f"PRAGMA user_version = {int(version)}")

    @contextlib.asynccontextmanager
    async def migrating(self, db: Any) -> AsyncIterator[Any]:
        with self.transaction(db.connection):
            yield db


SQLITE = SQLiteDialect()


class PostgresDialect(Dialect):
    """All tables in one schema; a writer locks the row it read (``FOR UPDATE``);
    messages go in by ``COPY`` and cascade with their session; the version is
    the ``schema_migrations`` table alone; the search index is a generated
    column PostgreSQL keeps itself (postgres_search.py)."""

    mark = "%s"
    bigint = "BIGINT"
    identity = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    summary_index = "{sessions} (updated_at DESC, session_id)"
    row_lock = " FOR UPDATE"

    def __init__(self, schema: str):
        super().__init__()
        self.schema = schema
        self.quoted = f'"{schema}"'
        self.prefix = self.quoted + "."
        self.messages_link = (
            f" REFERENCES {self.prefix}sessions (session_id)\n"
            "                ON DELETE CASCADE ON UPDATE CASCADE"
        )

    def text(self, value: str) -> str:
        """PostgreSQL text cannot hold NUL; JSON bodies escape it, the rest drops it."""
        return value.replace("\x00", "")

    async def insert_messages(self, db: Any, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            copy_in = "COPY {messages} (session_id, seq, role, created_at, body) FROM STDIN"
            await db.copy_rows(self.sql(copy_in), rows)

    async def applied_steps(self, db: Any) -> set[int]:
        table = self.prefix + "schema_migrations"
        if (await db.fetchone("SELECT to_regclass(%s)", (table,)))[0] is None:
            return set()
        return {row[0] for row in await db.fetchall(f"SELECT version FROM {table}")}

    @contextlib.asynccontextmanager
    async def migrating(self, db: Any) -> AsyncIterator[Any]:
        """Under a transaction-level advisory lock, so machines starting at once
        apply each step once; the schema is created only where it is missing
        (an existing one needs no CREATE privilege on the database)."""
        async with db.connection.transaction():
            lock = advisory_key("migrate", self.schema)
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
            exists = await db.fetchone(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
            )
            if not exists:
                await db.execute(f"CREATE SCHEMA IF NOT EXISTS {self.quoted}")
            yield db


def advisory_key(*parts: str) -> int:
    """A signed 64-bit PostgreSQL advisory-lock key for ``parts``."""
    from hashlib import blake2b

    digest = blake2b("\0".join(parts).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
