"""An adapter written for the first contract, whose ``list`` is now ``session_ids``."""

from __future__ import annotations

import asyncio

import pytest

from foliko_cli import AsyncFoliko, SessionRecord
from foliko_cli.storage.base import SessionStorageAdapter

from .core_only import CoreOnlyStorage


class Core(CoreOnlyStorage):
    """The core, less its session ids (each test adds them, or not)."""

    session_ids = SessionStorageAdapter.session_ids


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


def test_an_adapter_that_has_session_ids_keeps_its_own_list():
    class Helper(CoreOnlyStorage):
        async def list(self) -> list[str]:
            return ["not", "the", "ids"]

    async def scenario():
        storage = Helper()
        await storage.save(SessionRecord("s1"))
        return await storage.session_ids()

    assert asyncio.run(scenario()) == ["s1"]


def test_an_adapter_without_session_ids_cannot_be_made():
    with pytest.raises(TypeError, match="session_ids"):
        Core()
