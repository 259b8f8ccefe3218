"""Fixtures shared by the storage tests: one ``storage`` fixture over every backend.

A backend is one ``Backend`` entry in ``BACKENDS``: a name and a context
manager that yields a fresh, empty adapter and cleans up after it. A server
backend (PostgreSQL, Redis) also gets a ``require`` hook that skips the test
when its server does not answer (and fails instead under
FOLIKO_REQUIRE_SERVICES=1, in CI), for example::

    Backend("postgres", lambda tmp: services.postgres_storage(), services.require_postgres)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from foliko_cli.storage.base import SessionStorageAdapter

from . import services

T = TypeVar("T")


@dataclass(frozen=True)
class Backend:
    name: str
    open: Callable[[Path], AbstractContextManager[SessionStorageAdapter]]
    require: Callable[[], object] | None = None  # skips when a server is unreachable


@contextlib.contextmanager
def _memory(tmp_path: Path) -> Iterator[SessionStorageAdapter]:
    from foliko_cli.storage.memory import MemoryStorage

    yield MemoryStorage()


@contextlib.contextmanager
def _core_only(tmp_path: Path) -> Iterator[SessionStorageAdapter]:
    from .core_only import CoreOnlyStorage

    yield CoreOnlyStorage()


@contextlib.contextmanager
def _json(tmp_path: Path) -> Iterator[SessionStorageAdapter]:
    from foliko_cli.storage.jsonfile import JsonStorage

    yield JsonStorage(tmp_path / "json-sessions")


@contextlib.contextmanager
def _sqlite(tmp_path: Path) -> Iterator[SessionStorageAdapter]:
    from foliko_cli.storage.sqlite import SQLiteStorage

    yield SQLiteStorage(tmp_path / "sessions.db")


@contextlib.contextmanager
def _user_scoped(tmp_path: Path) -> Iterator[SessionStorageAdapter]:
    """One user's view of a SQLite store that another user's sessions share."""
    from foliko_cli.storage.scoped import UserScopedStorage
    from foliko_cli.storage.sqlite import SQLiteStorage

    yield UserScopedStorage(SQLiteStorage(tmp_path / "shared.db"), "alice")


BACKENDS = [
    Backend("memory", _memory),
    Backend("core-only", _core_only),
    Backend("json", _json),
    Backend("sqlite", _sqlite),
    Backend("user-scoped", _user_scoped),
    Backend("postgres", lambda tmp: services.postgres_storage(), services.require_postgres),
    Backend("redis", lambda tmp: services.redis_storage(), services.require_redis),
]


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as loop:
        yield loop


@pytest.fixture
def run(runner: asyncio.Runner) -> Callable[[Coroutine[Any, Any, T]], T]:
    """Run one coroutine to completion on the test's event loop."""
    return runner.run


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param


@pytest.fixture
def storage(
    backend: Backend, tmp_path: Path, runner: asyncio.Runner
) -> Iterator[SessionStorageAdapter]:
    """A fresh, empty adapter of each backend in turn; closed after the test."""
    if backend.require is not None:
        backend.require()
    with backend.open(tmp_path) as adapter:
        try:
            yield adapter
        finally:
            runner.run(adapter.close())


def reopened(storage: SessionStorageAdapter) -> SessionStorageAdapter | None:
    """A second adapter on the store ``storage`` opened (as another process
    would open it), or None where a store lives in one adapter's memory."""
    from foliko_cli.storage.jsonfile import JsonStorage
    from foliko_cli.storage.scoped import UserScopedStorage
    from foliko_cli.storage.sqlite import SQLiteStorage

    if isinstance(storage, SQLiteStorage):
        return SQLiteStorage(storage.path)
    if isinstance(storage, JsonStorage):
        return JsonStorage(storage.directory)
    if isinstance(storage, UserScopedStorage):
        inner = reopened(storage.inner)
        return None if inner is None else UserScopedStorage(inner, storage.user)
    if storage.name == "postgresql":
        from foliko_cli.storage.postgres import PostgresStorage

        return PostgresStorage(services.postgres_url(), schema=storage.schema)
    if storage.name == "redis":
        from foliko_cli.storage.redis import RedisStorage

        return RedisStorage(services.redis_url(), prefix=storage.prefix)
    return None


@pytest.fixture
def another(storage, runner: asyncio.Runner) -> Iterator[SessionStorageAdapter]:
    """A second adapter on the same store as ``storage``; skipped where there is none."""
    other = reopened(storage)
    if other is None:
        pytest.skip(f"{storage.name} lives in one adapter's memory: no second one can share it")
    try:
        yield other
    finally:
        runner.run(other.close())


@pytest.fixture
def xfail_on(request: pytest.FixtureRequest, backend: Backend) -> Callable[..., None]:
    """``xfail_on(sqlite="reason")``: a strict xfail for the backends named."""

    def mark(**reasons: str) -> None:
        if backend.name in reasons:
            request.node.add_marker(pytest.mark.xfail(strict=True, reason=reasons[backend.name]))

    return mark


@pytest.fixture(params=["json", "sqlite", "postgres", "redis"])
def storage_url(request, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty persistent store that every process can open (short Redis lease)."""
    if request.param == "json":
        yield f"json:///{tmp_path}/dir"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/x.db"
    elif request.param == "postgres":
        url = services.require_postgres()
        with services.fresh_schema(url) as schema:
            yield f"{url}?schema={schema}"
    else:
        url = services.require_redis()
        with services.fresh_prefix(url) as prefix:
            yield f"{url}?prefix={prefix}&lease_ms=2000"
