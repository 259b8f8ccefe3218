"""An adapter written for the first contract, whose ``list`` is now ``session_ids``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from foliko_cli import AsyncFoliko
from foliko_cli.storage.base import SessionStorageAdapter
from foliko_cli.storage.memory import MemoryStorage


class Core(SessionStorageAdapter):
    """The core over a MemoryStorage, less the session ids (each test adds them)."""

    name = "core"

    def __init__(self) -> None:
        self.inner = MemoryStorage()

    async def load(self, session_id: str):
        return await self.inner.load(session_id)

    async def save(self, record, *, expected_revision: int | None = None) -> int:
        return await self.inner.save(record, expected_revision=expected_revision)

    async def append(self, session_id: str, messages: list[dict[str, Any]], state, **kw) -> int:
        return await self.inner.append(session_id, messages, state, **kw)

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        return await self.inner.delete(session_id, expected_revision=expected_revision)

    async def list_summaries(self):
        return await self.inner.list_summaries()

    def lock(self, session_id: str, timeout: float):
        return self.inner.lock(session_id, timeout)


def test_an_adapter_that_defines_list_still_works_and_is_told_to_rename_it():
    with pytest.warns(DeprecationWarning, match=r"Legacy.list\(\) is now called session_ids"):

        class Legacy(Core):
            async def list(self) -> list[str]:
                return await self.inner.session_ids()

    async def scenario():
        async with AsyncFoliko(storage=Legacy(), model="echo") as foliko:
            await foliko.chat("s1", "hi")
            return await foliko.storage.session_ids(), await foliko.storage.info()

    ids, info = asyncio.run(scenario())
    assert ids == ["s1"] and info["sessions"] == 1


def test_an_adapter_without_session_ids_cannot_be_made():
    with pytest.raises(TypeError, match="session_ids"):
        Core()
