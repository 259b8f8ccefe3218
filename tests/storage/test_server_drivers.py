"""What PostgreSQL and Redis storage share: an optional driver, loaded late, and
errors about the server that never show its password."""

from __future__ import annotations

import subprocess
import sys

import pytest

from foliko_cli.errors import ExitCode, StorageConfigError, StorageError
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
    assert f"pip install 'foliko-cli[{name}]'" in str(error.value)


def test_an_unreachable_server_is_a_storage_error_without_the_password(backend, run):
    _, _, adapter, _, unreachable, options = backend
    storage = adapter(unreachable, **options)
    with pytest.raises(StorageError) as error:
        run(storage.list())
    message = str(error.value)
    assert error.value.exit_code == ExitCode.STORAGE
    assert "127.0.0.1:1" in message
    assert "is the server running? check the URL" in message
    assert "s3cr" not in message and "%40" not in message
    assert "\n" not in message
    assert "s3cr" not in storage.location and "s3cr" not in repr(storage)
    assert run(storage.health_check()) is False
    run(storage.close())
