"""The audit log (storage/base.py, rule 13) in a table of its own, for both
engines (``schema.create_audit``): one row per entry, in the order written
(``id``). Imported on the first use of the log, never by a turn."""

from __future__ import annotations

import orjson

from foliko_cli.storage.base import AuditEntry
from foliko_cli.storage.sql.dialect import Dialect
from foliko_cli.storage.sql.executor import Executor, bounded, one_row

_COLUMNS = "at, client, call, session_ids, result_sha256, outcome"
_INSERT = f"INSERT INTO {{audit}} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_READ = f"SELECT {_COLUMNS} FROM {{audit}} WHERE at >= ? ORDER BY id"


async def append(db: Executor, dialect: Dialect, entries: list[AuditEntry]) -> None:
    rows = [
        (e.at, e.client, e.call, orjson.dumps(e.session_ids).decode(), e.result_sha256, e.outcome)
        for e in entries
    ]
    await db.executemany(dialect.sql(_INSERT), rows)


async def read(db: Executor, dialect: Dialect, since: int | None) -> list[AuditEntry]:
    rows = await db.fetchall(dialect.sql(_READ), (bounded(since or 0),))
    return [
        AuditEntry(at, client, call, tuple(orjson.loads(ids)), digest, outcome)
        for at, client, call, ids, digest, outcome in rows
    ]


async def prune(db: Executor, dialect: Dialect, before: int | None, keep: int | None) -> int:
    """Inside the caller's transaction."""
    (count,) = await one_row(db, dialect.sql("SELECT count(*) FROM {audit}"))
    if before is not None:
        await db.execute(dialect.sql("DELETE FROM {audit} WHERE at < ?"), (bounded(before),))
    if keep is not None:
        await db.execute(
            dialect.sql(
                "DELETE FROM {audit} WHERE id NOT IN "
                "(SELECT id FROM {audit} ORDER BY id DESC LIMIT ?)"
            ),
            (bounded(keep),),
        )
    (left,) = await one_row(db, dialect.sql("SELECT count(*) FROM {audit}"))
    return int(count) - int(left)
