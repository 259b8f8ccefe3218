"""Fixtures shared by the storage tests: one ``storage`` fixture over every backend.

The backends are registered once, in tests/storage/backends.py (``BACKENDS``):
``storage`` yields a fresh, empty adapter of each in turn, ``another`` a second
adapter on the same store, ``storage_url`` a URL of each persistent one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from foliko_cli.storage.base import SessionStorageAdapter

from .backends import BACKENDS, PERSISTENT, Backend, backend_of, named

T = TypeVar("T")


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
    reopen = backend_of(storage).reopen
    return None if reopen is None else reopen(storage)


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


@pytest.fixture(params=PERSISTENT)
def storage_url(request, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty persistent store that every process can open (short Redis lease)."""
    url = named(request.param).url
    assert url is not None
    with url(tmp_path) as found:
        yield found
