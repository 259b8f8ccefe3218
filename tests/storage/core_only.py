"""A backend with the core contract only, so every capability takes its generic path."""

from __future__ import annotations

from typing import Any

from foliko_cli.storage.base import SessionStorageAdapter
from foliko_cli.storage.memory import MemoryStorage


class CoreOnlyStorage(SessionStorageAdapter):
    """The core operations of a MemoryStorage and nothing else."""

    name = "core-only"

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

    async def session_ids(self) -> list[str]:
        return await self.inner.session_ids()

    async def list_summaries(self):
        return await self.inner.list_summaries()

    def lock(self, session_id: str, timeout: float):
        return self.inner.lock(session_id, timeout)
