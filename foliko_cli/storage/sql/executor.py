"""How the shared statements reach a database, for both engines.

The writers, listings and migrations of this package are coroutines over an
``Executor``: four awaitable calls that run one statement. PostgreSQL's
executor awaits psycopg's async connection, so a query in flight yields the
event loop. SQLite's runs each statement at once and never suspends, so a
coroutine over it is a plain synchronous call: an async caller awaits it
(nothing else runs meanwhile, as before), and a synchronous one, such as
the code that opens the database, drives it with ``run_now``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast

T = TypeVar("T")


FAR = 2**62
"""Past any position, count or time a store holds; a sum of two stays within
both engines' 64-bit integers."""


def bounded(value: int) -> int:
    """``value`` as a parameter of a statement: a Python int has no bound and a
    64-bit one has, so a position, limit or time further out than ``FAR`` is
    taken as ``FAR``, which changes no answer."""
    return max(-FAR, min(value, FAR))


async def one_row(db: Executor, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
    """The row of a statement that always yields one (an aggregate, ``SHOW``)."""
    row = await db.fetchone(sql, params)
    if row is None:
        raise RuntimeError(f"no row from {sql!r}")
    return row


class Executor(Protocol):
    """One connection, inside whatever transaction its caller opened."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...


class SQLiteExecutor:
    """A ``sqlite3`` connection; every call completes before it returns. With
    ``defer_index``, the messages its writes add are left out of the search
    index, which is marked behind instead (sqlite_search.py, ``mark_pending``)."""

    def __init__(self, connection: sqlite3.Connection, *, defer_index: bool = False):
        self.connection = connection
        self.defer_index = defer_index

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.connection.execute(sql, params)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return cast("tuple[Any, ...] | None", self.connection.execute(sql, params).fetchone())

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql, params).fetchall()

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.connection.executemany(sql, rows)


class PostgresExecutor:
    """A psycopg ``AsyncConnection``."""

    def __init__(self, connection: Any):
        self.connection = connection

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        await self.connection.execute(sql, params or None)

    async def fetchone(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> tuple[Any, ...] | None:
        """One row; ``params`` may also be named (``%(name)s`` placeholders)."""
        cursor = await self.connection.execute(sql, params or None)
        return cast("tuple[Any, ...] | None", await cursor.fetchone())

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = await self.connection.execute(sql, params or None)
        return cast("list[tuple[Any, ...]]", await cursor.fetchall())

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        async with self.connection.cursor() as cursor:
            await cursor.executemany(sql, rows)

    async def copy_rows(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """``COPY ... FROM STDIN`` of ``rows``."""
        async with self.connection.cursor() as cursor, cursor.copy(sql) as copy:
            for row in rows:
                await copy.write_row(row)


def run_now(call: Coroutine[Any, Any, T]) -> T:
    """The result of ``call``, a coroutine that never suspends (one over a
    SQLiteExecutor), computed synchronously."""
    try:
        call.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    call.close()
    raise RuntimeError("a statement suspended: run_now takes only SQLite's executor")
