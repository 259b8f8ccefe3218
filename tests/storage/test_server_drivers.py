"""What PostgreSQL and Redis storage share: an optional driver, loaded late, and
errors about the server that never show its password."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from foliko_cli.common.extras import install_command
from foliko_cli.errors import ExitCode, StorageConfigError, StorageError
from foliko_cli.messages.record import SessionRecord
from foliko_cli.storage.postgres import PostgresStorage
from foliko_cli.storage.redis import RedisStorage

BACKENDS = {
    "postgres": (
        "psycopg",
        PostgresStorage,
        "postgresql://postgres@127.0.0.1:5432/test",
        "postgresql://alice:s3cr%40t-pw@127.0.0.1:1/test",
        {"schema": "x"},
    ),
    "redis": (
        "redis",
        RedisStorage,
        "redis://127.0.0.1:6379/0",
        "redis://bob:s3cr%40t-pw@127.0.0.1:1/0",
        {"prefix": "x"},
    ),
}


@pytest.fixture(params=list(BACKENDS))
def backend(request):
    return request.param, *BACKENDS[request.param]


def test_importing_the_module_does_not_import_the_driver(backend):
    name, driver, *_ = backend
    code = f"import sys, foliko_cli.storage.{name}; print({driver!r} in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert result.stdout.strip() == b"False", result.stderr.decode()


def test_a_missing_driver_names_the_extra_to_install(backend, monkeypatch):
    name, driver, adapter, url, *_ = backend
    monkeypatch.setitem(sys.modules, driver, None)  # import DRIVER -> ImportError
    with pytest.raises(StorageConfigError) as error:
        adapter(url)
    assert error.value.exit_code == ExitCode.USAGE
    assert f"needs the {name!r} extra; install it with: {install_command(name)}" in str(error.value)


def test_an_unreachable_server_is_a_storage_error_without_the_password(backend, run):
    _, _, adapter, _, unreachable, options = backend
    storage = adapter(unreachable, **options)
    with pytest.raises(StorageError) as error:
        run(storage.session_ids())
    message = str(error.value)
    assert error.value.exit_code == ExitCode.STORAGE
    assert "127.0.0.1:1" in message
    assert "is the server running? check the URL" in message
    assert ".;" not in message, "the driver's sentence and ours are joined once"
    assert "s3cr" not in message and "%40" not in message
    assert "\n" not in message
    assert "s3cr" not in storage.location and "s3cr" not in repr(storage)
    assert run(storage.health_check()) is False
    run(storage.close())


# bounded waits: a server that stops answering behind a healthy TCP connection

BOUND_S = 2.0
SLACK_S = 8.0  # far below the 30 s default bound: only a missing bound reaches it


@pytest.fixture
def stalling(backend, runner):
    """An adapter talking to the real server through a proxy that can stall."""
    from . import services
    from .stallproxy import stalling_proxy, through

    name = backend[0]
    if name == "postgres":
        url = services.require_postgres()
        scope = services.fresh_schema(url)
    else:
        url = services.require_redis()
        scope = services.fresh_prefix(url)
    with scope as namespace, stalling_proxy(url) as proxy:
        proxied = through(url, proxy)
        if name == "postgres":
            storage = PostgresStorage(
                proxied + "?connect_timeout=2", schema=namespace, operation_timeout=BOUND_S
            )
        else:
            storage = RedisStorage(
                proxied + f"?socket_timeout={BOUND_S}&socket_connect_timeout=2", prefix=namespace
            )
        try:
            yield storage, proxy
        finally:
            runner.run(storage.close())


def _fails_within_the_bound(run, operation) -> StorageError:
    started = time.monotonic()
    with pytest.raises(StorageError) as error:
        run(operation)
    assert time.monotonic() - started < BOUND_S + SLACK_S
    assert error.value.exit_code == ExitCode.STORAGE
    assert "\n" not in str(error.value)
    return error.value


def test_a_call_on_a_stalled_connection_fails_within_its_bound(stalling, run):
    storage, proxy = stalling
    run(storage.save(SessionRecord("s", messages=[{"role": "user", "content": "hi"}])))
    assert run(storage.load("s")) is not None
    proxy.stall()
    error = _fails_within_the_bound(run, storage.load("s"))
    assert f"127.0.0.1:{proxy.port}" in str(error)
    _fails_within_the_bound(run, storage.save(SessionRecord("t")))


def test_taking_the_session_lock_through_a_stall_fails_within_its_bound(stalling, run):
    storage, proxy = stalling
    run(storage.session_ids())
    proxy.stall()

    async def take():
        async with storage.lock("s", 60):
            pass

    _fails_within_the_bound(run, take())
    assert run(storage.health_check()) is False


# URLs: one parser, passwords never shown


SECRET_URLS = {
    "postgres": [
        "postgresql://alice:p@ss@wd9@127.0.0.1:1/test",
        "postgresql://alice@127.0.0.1:1/test?password=p%40sssecret&sslmode=disable",
        "postgresql://alice@127.0.0.1:1/test?password=plainsecret",
    ],
    "redis": [
        "redis://bob:p@ss@wd9@127.0.0.1:1/0",
        "redis://127.0.0.1:1/0?password=p%40sssecret",
        "redis://127.0.0.1:1/0?password=plainsecret",
    ],
}


def _secret_parts(url: str) -> list[str]:
    return ["p@ss", "wd9", "sssecret", "plainsecret", "p%40"]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_password_in_the_user_part_or_the_query_is_never_shown(backend, run, which):
    from foliko_cli.storage import shown

    name, _, adapter, _, _, options = backend
    url = SECRET_URLS[name][which]
    storage = adapter(url, **options)
    with pytest.raises(StorageError) as error:
        run(storage.session_ids())
    texts = [shown(url), storage.location, repr(storage), str(error.value)]
    for text in texts:
        for secret in _secret_parts(url):
            assert secret not in text, (text, secret)
    assert "127.0.0.1:1" in storage.location
    assert run(storage.health_check()) is False
    run(storage.close())


@pytest.mark.parametrize(
    "spec",
    [
        "postgresql://u@h/db?schema=",
        "postgresql://u@h:0/db",
        "postgresql://u@h:70000/db",
        "redis://h:6379/0?prefix=",
        "redis://h:0/0",
        "redis://h:6379/0?lease_ms=",
    ],
)
def test_an_empty_namespace_or_a_port_outside_1_to_65535_is_a_usage_error(spec):
    from foliko_cli.storage import open_storage

    with pytest.raises(StorageConfigError) as error:
        open_storage(spec, home=None)  # type: ignore[arg-type]
    assert error.value.exit_code == ExitCode.USAGE
    assert "\n" not in str(error.value)


def test_an_empty_namespace_given_as_an_option_is_a_usage_error(backend):
    _, _, adapter, url, _, options = backend
    (key,) = options
    with pytest.raises(StorageConfigError):
        adapter(url, **{key: " "})
