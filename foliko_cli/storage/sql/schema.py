"""The tables both engines keep, written once; a dialect fills in the few
differences (the timestamp type, the messages' tie to their session, the
summary index, table names).

One ``sessions`` row per session, with ``message_count``, ``updated_at``,
``preview`` and ``revision`` kept beside the JSON columns so that listing
never reads messages; one ``messages`` row per message, keyed by
``(session_id, seq)``.
"""

from __future__ import annotations

from foliko_cli.storage.sql.dialect import Dialect
from foliko_cli.storage.sql.executor import Executor

SESSIONS = """CREATE TABLE IF NOT EXISTS {sessions} (
            session_id TEXT PRIMARY KEY,
            created_at {bigint} NOT NULL,
            updated_at {bigint} NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            revision {bigint} NOT NULL DEFAULT 0,
            preview TEXT NOT NULL DEFAULT '',
            variables TEXT NOT NULL DEFAULT '{{}}',
            metadata TEXT NOT NULL DEFAULT '{{}}',
            compression_state TEXT NOT NULL DEFAULT '{{}}'
        )"""

MESSAGES = """CREATE TABLE IF NOT EXISTS {messages} (
            session_id TEXT NOT NULL{messages_link},
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            created_at {bigint} NOT NULL,
            body TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        ){messages_options}"""

SESSIONS_BY_UPDATED = "CREATE INDEX IF NOT EXISTS sessions_by_updated ON {summary_index}"

QUARANTINE = """CREATE TABLE IF NOT EXISTS {quarantine} (
            session_id TEXT NOT NULL,
            moved_at {bigint} NOT NULL,
            reason TEXT NOT NULL,
            session_row TEXT NOT NULL,
            messages TEXT NOT NULL
        )"""

FRAGMENTS = """CREATE TABLE IF NOT EXISTS {fragments} (
            hash TEXT PRIMARY KEY,
            content TEXT NOT NULL,
            created_at {bigint} NOT NULL
        )"""


AUDIT = """CREATE TABLE IF NOT EXISTS {audit} (
            id {identity},
            at {bigint} NOT NULL,
            client TEXT NOT NULL,
            call TEXT NOT NULL,
            session_ids TEXT NOT NULL,
            result_sha256 TEXT NOT NULL,
            outcome TEXT NOT NULL
        )"""
SCHEMA_MIGRATIONS = """CREATE TABLE IF NOT EXISTS {schema_migrations} (
                    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at {bigint} NOT NULL
                )"""


async def create_sessions_and_messages(db: Executor, dialect: Dialect) -> None:
    for statement in (SESSIONS, MESSAGES, SESSIONS_BY_UPDATED):
        await db.execute(dialect.sql(statement))


async def create_quarantine(db: Executor, dialect: Dialect) -> None:
    """Where ``storage check --repair`` moves unreadable sessions: aside, never deleted."""
    await db.execute(dialect.sql(QUARANTINE))


async def create_fragments(db: Executor, dialect: Dialect) -> None:
    """The fragments' texts, one row each by SHA-256 (storage/base.py, rule 13)."""
    await db.execute(dialect.sql(FRAGMENTS))


async def create_migrations_table(db: Executor, dialect: Dialect) -> None:
    """Which step ran when; the runner's record, beside the dialect's version."""
    await db.execute(dialect.sql(SCHEMA_MIGRATIONS))


async def create_audit(db: Executor, dialect: Dialect) -> None:
    """The audit log (storage/base.py, rule 13; written by sql/audit.py)."""
    await db.execute(dialect.sql(AUDIT))
