"""The PostgreSQL and Redis servers the storage tests run against.

URLs come from FOLIKO_TEST_POSTGRES_URL and FOLIKO_TEST_REDIS_URL, else the
servers on this machine. They are read when this module is imported: the
autouse ``foliko_home`` fixture removes FOLIKO_* variables before each test.
A server that does not answer skips its tests with the reason, except under
FOLIKO_REQUIRE_SERVICES=1 (CI), where that is a failure.

Every storage made here lives in a fresh schema or key prefix that is dropped
afterwards, so tests never see each other's sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from foliko_cli.messages.record import SessionRecord, SessionState

if TYPE_CHECKING:
    from foliko_cli.storage.postgres import PostgresStorage
    from foliko_cli.storage.redis import RedisStorage

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_URLS = {
    "postgres": os.environ.get("FOLIKO_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL,
    "redis": os.environ.get("FOLIKO_TEST_REDIS_URL") or DEFAULT_REDIS_URL,
}
PROBE_TIMEOUT_S = 3


def postgres_url() -> str:
    return _URLS["postgres"]


def redis_url() -> str:
    return _URLS["redis"]


@functools.cache
def postgres_problem(url: str) -> str | None:
    """None when PostgreSQL accepts a connection at ``url``, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]')"
    try:
        psycopg.connect(url, connect_timeout=PROBE_TIMEOUT_S).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at {_host_port(url)} unreachable: {str(exc).splitlines()[0]}"
    return None


@functools.cache
def redis_problem(url: str) -> str | None:
    """None when Redis answers PING at ``url``, else why not."""
    try:
        import redis
    except ImportError:
        return "redis-py is not installed (pip install -e '.[dev]')"
    client = redis.Redis.from_url(url, socket_connect_timeout=PROBE_TIMEOUT_S)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"Redis at {_host_port(url)} unreachable: {exc}"
    finally:
        client.close()
    return None


def _host_port(url: str) -> str:
    parts = urlsplit(url)  # never the password
    return f"{parts.hostname}:{parts.port}"


def require_or_skip(name: str, reachable: bool, reason: str = "") -> None:
    """Skip when ``name`` is unreachable; fail instead under FOLIKO_REQUIRE_SERVICES=1."""
    if os.environ.get("FOLIKO_TEST_SERVICES") == "0":
        pytest.skip(f"{name} tests are off (FOLIKO_TEST_SERVICES=0, as in make test-fast)")
    if reachable:
        return
    why = f"{name} server needed: {reason or 'unreachable'}"
    if os.environ.get("FOLIKO_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{why} (FOLIKO_REQUIRE_SERVICES=1)")
    pytest.skip(why)


def require_postgres() -> str:
    url = postgres_url()
    problem = postgres_problem(url)
    require_or_skip("PostgreSQL", problem is None, problem or "")
    return url


def require_redis() -> str:
    url = redis_url()
    problem = redis_problem(url)
    require_or_skip("Redis", problem is None, problem or "")
    return url


def _close(storage: PostgresStorage | RedisStorage) -> None:
    asyncio.run(storage.close())


@contextlib.contextmanager
def fresh_schema(url: str | None = None) -> Iterator[str]:
    """A PostgreSQL schema name no one uses; the schema is dropped (CASCADE) afterwards."""
    import psycopg

    name = f"foliko_test_{secrets.token_hex(6)}"
    try:
        yield name
    finally:
        with psycopg.connect(url or postgres_url(), autocommit=True) as db:
            db.execute("SET lock_timeout = '20s'")
            db.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@contextlib.contextmanager
def postgres_storage(url: str | None = None) -> Iterator[PostgresStorage]:
    """A PostgresStorage in a fresh schema, closed and dropped afterwards."""
    from foliko_cli.storage.postgres import PostgresStorage

    with fresh_schema(url) as schema:
        storage = PostgresStorage(url or postgres_url(), schema=schema)
        try:
            yield storage
        finally:
            _close(storage)


@contextlib.contextmanager
def fresh_prefix(url: str | None = None) -> Iterator[str]:
    """A Redis key prefix no one uses; its keys are deleted afterwards."""
    import redis

    prefix = f"foliko-test-{secrets.token_hex(6)}"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(url or redis_url())
        try:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


@contextlib.contextmanager
def redis_storage(url: str | None = None, *, lease_ms: int = 15_000) -> Iterator[RedisStorage]:
    """A RedisStorage under a fresh prefix, closed and its keys deleted afterwards."""
    from foliko_cli.storage.redis import RedisStorage

    with fresh_prefix(url) as prefix:
        storage = RedisStorage(url or redis_url(), prefix=prefix, lease_ms=lease_ms)
        try:
            yield storage
        finally:
            _close(storage)


def backend_url(name: str, tmp_path: Path) -> contextlib.AbstractContextManager[str]:
    """A URL of a fresh store of backend ``name`` (json, sqlite, postgres, redis)
    that every process can open; a server's schema or prefix is dropped after
    (tests/storage/backends.py)."""
    from .backends import named

    url = named(name).url
    if url is None:
        raise ValueError(f"backend {name!r} has no URL another process can open")
    return url(tmp_path)


# records the backend tests write

T0 = 1_700_000_000_000


def turn(text: str, at: int = T0) -> list[dict]:
    """A user message and the reply that must follow it."""
    return [
        {"role": "user", "content": text, "created_at": at},
        {"role": "assistant", "content": f"echo: {text}", "created_at": at},
    ]


def state(variables: dict | None = None, created_at: int = T0) -> SessionState:
    return SessionState(
        variables=variables or {},
        metadata={"created_at": created_at, "last_active": created_at, "compression_count": 0},
        compression_state={},
    )


def sample_records() -> list[SessionRecord]:
    """Records with what breaks naive storage: unicode, NUL, tool calls, every JSON type."""
    tool_turn = [
        {"role": "system", "content": "Be terse.", "created_at": T0},
        {
            "role": "user",
            "content": 'Grüße 世界 🎉 "q" \\ \n\t \u2028 nul:\x00 rtl:\u202e',
            "created_at": T0 + 1,
            "request_id": "r1",
            "trace_id": "a" * 32,
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "name": "weather", "arguments": {"city": "Zürich"}}],
            "created_at": T0 + 2,
            "request_id": "r1",
            "trace_id": "a" * 32,
        },
        {
            "role": "tool",
            "content": '{"temp": 21.5}',
            "tool_call_id": "call_1",
            "name": "weather",
            "is_error": False,
            "created_at": T0 + 3,
        },
        {"role": "assistant", "content": "21.5 °C", "created_at": T0 + 4},
    ]
    variables = {
        "nested": {"a": [1, {"b": None}], "ü": "名前"},
        "int": -(2**63),
        "big": 2**64 - 1,
        "float": 0.1,
        "true": True,
        "null": None,
        "empty": {},
        "list": [],
        "nul": "x\x00y",
    }
    return [
        SessionRecord(
            "tools",
            messages=tool_turn,
            variables=variables,
            metadata={"created_at": T0, "last_active": T0 + 4, "compression_count": 2},
            compression_state={"summary": "earlier: ☃", "covers": 3},
            saved_at=T0 + 10,
        ),
        SessionRecord("empty"),
        SessionRecord("日本語 {brace} %7B", messages=turn("こんにちは")),
    ]


def in_threads(count: int, work: Any) -> list[Any]:
    """Run ``work(i)`` in ``count`` threads that start together; return the results."""
    barrier = threading.Barrier(count)

    def start(i: int) -> Any:
        barrier.wait(timeout=60)
        return work(i)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(start, range(count), timeout=60))


def concurrent_appends(open_storage: Any, writers: int, turns: int) -> list[int]:
    """``writers`` threads, each with its own adapter from ``open_storage()``, append
    ``turns`` turns to session "shared", retrying on ConflictError; all revisions, sorted."""
    from foliko_cli.errors import ConflictError

    def write(worker: int) -> list[int]:
        storage = open_storage()

        async def go() -> list[int]:
            written = []
            for t in range(turns):
                while True:
                    revision = await storage.revision("shared") or 0
                    try:
                        written.append(
                            await storage.append(
                                "shared",
                                turn(f"w{worker}t{t}"),
                                state(),
                                expected_revision=revision,
                            )
                        )
                        break
                    except ConflictError:
                        continue
            await storage.close()
            return written

        return asyncio.run(go())

    return sorted(r for written in in_threads(writers, write) for r in written)
