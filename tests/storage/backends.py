"""Every backend the storage tests run against, each registered once, here.

A ``Backend`` entry says all the suite needs of a backend: how to open a
fresh, empty store of it (and clean up), how to skip when its server does
not answer, how a second adapter reaches the same store (as another process
would), the URL another process opens it by, which adapters are its own, and
how to damage a session behind foliko's back (tests/storage/damage.py).
Adding a backend to foliko is adding one entry to ``BACKENDS``: the
conformance suite (test_conformance.py), the damage tests and every test
that takes ``storage``, ``another`` or ``storage_url`` then run on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foliko_cli.storage.access import Scope, ScopedStorage
from foliko_cli.storage.base import SessionStorageAdapter
from foliko_cli.storage.jsonfile import JsonStorage
from foliko_cli.storage.memory import MemoryStorage
from foliko_cli.storage.scoped import UserScopedStorage
from foliko_cli.storage.sqlite import SQLiteStorage

from . import damage, services
from .core_only import CoreOnlyStorage

Adapter = SessionStorageAdapter


@dataclass(frozen=True)
class Backend:
    name: str
    open: Callable[[Path], AbstractContextManager[Adapter]]
    """A fresh, empty adapter (in ``tmp_path`` for a local one); cleaned up after."""
    owns: Callable[[Adapter], bool]
    """Whether an adapter is this backend's (the first entry that owns one wins)."""
    damager: Callable[[Adapter], Any]
    """The object that damages and snapshots a session of an adapter (damage.py)."""
    holes: tuple[str, ...]
    """The kinds of damage (damage.KINDS) this backend can hold."""
    require: Callable[[], object] | None = None
    """Skips the test when the backend's server does not answer."""
    reopen: Callable[[Adapter], Adapter] | None = None
    """A second adapter on the same store; None where a store lives in one adapter."""
    url: Callable[[Path], AbstractContextManager[str]] | None = None
    """The URL of a fresh store every process can open; None where there is none."""


def _is(kind: type) -> Callable[[Adapter], bool]:
    return lambda storage: type(storage) is kind


def _local(make: Callable[[Path], Adapter]) -> Callable[[Path], AbstractContextManager[Adapter]]:
    """The ``open`` of a backend with nothing to clean up but ``tmp_path``."""
    return lambda tmp_path: contextlib.nullcontext(make(tmp_path))


def _reopen_scoped(storage: Any) -> Adapter:
    """One user's view again, of another adapter on the shared SQLite store."""
    return UserScopedStorage(SQLiteStorage(storage.inner.path), storage.user)


def _reopen_postgres(storage: Any) -> Adapter:
    from foliko_cli.storage.postgres import PostgresStorage

    return PostgresStorage(services.postgres_url(), schema=storage.schema)


def _reopen_redis(storage: Any) -> Adapter:
    from foliko_cli.storage.redis import RedisStorage

    return RedisStorage(services.redis_url(), prefix=storage.prefix)


@contextlib.contextmanager
def _file_url(kind: str, name: str, tmp_path: Path) -> Iterator[str]:
    yield f"{kind}:///{tmp_path / name}"


@contextlib.contextmanager
def _postgres_url(tmp_path: Path) -> Iterator[str]:
    url = services.require_postgres()
    with services.fresh_schema(url) as schema:
        yield f"{url}?schema={schema}"


@contextlib.contextmanager
def _redis_url(tmp_path: Path) -> Iterator[str]:
    url = services.require_redis()
    with services.fresh_prefix(url) as prefix:
        yield f"{url}?prefix={prefix}&lease_ms=2000"  # a killed holder frees it soon


_SQL_HOLES = ("message-lost", "count-changed", "metadata-gone", "no-content")
_LISTS = ("message-lost", "count-changed", "metadata-gone")

BACKENDS = [
    Backend(
        "memory", _local(lambda tmp: MemoryStorage()), _is(MemoryStorage), damage.Memory, _LISTS
    ),
    Backend(
        "core-only",
        _local(lambda tmp: CoreOnlyStorage()),
        _is(CoreOnlyStorage),
        lambda s: damage.Memory(s.inner),
        _LISTS,
    ),
    Backend(
        "access-view",  # a client's view whose scope holds every session
        _local(lambda tmp: ScopedStorage(MemoryStorage(), Scope(True, ("*",)))),
        _is(ScopedStorage),
        lambda s: damage.Memory(s.inner),
        _LISTS,
    ),
    Backend(
        "json",
        _local(lambda tmp: JsonStorage(tmp / "json-sessions")),
        _is(JsonStorage),
        damage.Json,
        (*_LISTS, "symlink"),
        reopen=lambda s: JsonStorage(s.directory),
        url=lambda tmp: _file_url("json", "sessions", tmp),
    ),
    Backend(
        "sqlite",
        _local(lambda tmp: SQLiteStorage(tmp / "sessions.db")),
        _is(SQLiteStorage),
        lambda s: damage.SQLite(s.path),
        _SQL_HOLES,
        reopen=lambda s: SQLiteStorage(s.path),
        url=lambda tmp: _file_url("sqlite", "sessions.db", tmp),
    ),
    Backend(
        "user-scoped",  # one user's view of a SQLite store other users' sessions share
        _local(lambda tmp: UserScopedStorage(SQLiteStorage(tmp / "shared.db"), "alice")),
        _is(UserScopedStorage),
        lambda s: damage.SQLite(s.inner.path, s.prefix),
        _SQL_HOLES,
        reopen=_reopen_scoped,
    ),
    Backend(
        "postgres",
        lambda tmp: services.postgres_storage(),
        lambda s: s.name == "postgresql",
        lambda s: damage.Postgres(s.schema),
        ("message-lost", "count-changed", "no-content"),
        require=services.require_postgres,
        reopen=_reopen_postgres,
        url=_postgres_url,
    ),
    Backend(
        "redis",
        lambda tmp: services.redis_storage(),
        lambda s: s.name == "redis",
        damage.Redis,
        (*_LISTS, "no-content"),
        require=services.require_redis,
        reopen=_reopen_redis,
        url=_redis_url,
    ),
]


def backend_of(storage: Adapter) -> Backend:
    """The entry ``storage`` belongs to."""
    for backend in BACKENDS:
        if backend.owns(storage):
            return backend
    raise TypeError(f"{storage!r} is no registered backend's: add it to BACKENDS")


def named(name: str) -> Backend:
    return next(backend for backend in BACKENDS if backend.name == name)


PERSISTENT = [backend.name for backend in BACKENDS if backend.url is not None]
"""The backends every process can open by URL (json, sqlite, postgres, redis)."""
