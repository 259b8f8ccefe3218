"""One migration runner for both engines.

A backend gives its ordered list of steps (the shared tables of schema.py
and its own, such as SQLite's seed import and each engine's search index);
step N runs once, inside the dialect's migration transaction, and is
recorded in ``schema_migrations`` and in the dialect's version. Every step
is idempotent, so running one again changes nothing. A database that has
had a step this foliko does not know is refused before anything is written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import StorageError
from foliko_cli.storage.sql.dialect import Dialect
from foliko_cli.storage.sql.executor import Executor
from foliko_cli.storage.sql.schema import create_migrations_table

E = TypeVar("E", bound=Executor)
D = TypeVar("D", bound=Dialect)
Step = Callable[[E, D], Awaitable[None]]
"""A migration step over an engine's executor and dialect: ``Step[SQLiteExecutor, Dialect]``."""

_RECORD_STEP = """INSERT INTO {schema_migrations} (version, name, applied_at) VALUES (?, ?, ?)
    ON CONFLICT (version) DO UPDATE SET name = excluded.name, applied_at = excluded.applied_at"""


def refuse_newer(applied: set[int], steps: Sequence[Step[Any, Any]], where: str) -> None:
    version = max(applied, default=0)
    if version > len(steps):
        raise StorageError(
            f"{where} has schema version {version}, newer than this foliko knows "
            f"({len(steps)}); upgrade foliko"
        )


async def migrate(db: E, dialect: D, steps: Sequence[Step[E, D]], where: str) -> None:
    """Apply the steps ``db`` has not had; ``where`` names the database in errors."""
    applied = await dialect.applied_steps(db)
    refuse_newer(applied, steps, where)
    if applied == set(range(1, len(steps) + 1)):
        return
    async with dialect.migrating(db):
        await create_migrations_table(db, dialect)
        applied = await dialect.applied_steps(db)
        refuse_newer(applied, steps, where)
        for number, step in enumerate(steps, start=1):
            if number not in applied:
                await step(db, dialect)
                await db.execute(dialect.sql(_RECORD_STEP), (number, step.__name__, now_ms()))
        await dialect.set_version(db, len(steps))
