"""A backend with the required methods only (``load``, ``save``, ``delete``,
``session_ids``, ``lock``), so ``append``, ``list_summaries``, ``revision`` and
every capability take their generic path."""

from __future__ import annotations

from foliko_cli.storage.base import SessionStorageAdapter
from foliko_cli.storage.memory import MemoryStorage


class CoreOnlyStorage(SessionStorageAdapter):
    """The required operations of a MemoryStorage and nothing else."""

    name = "core-only"

    def __init__(self) -> None:
        self.inner = MemoryStorage()

    async def load(self, session_id: str):
        return await self.inner.load(session_id)

    async def save(self, record, *, expected_revision: int | None = None) -> int:
        return await self.inner.save(record, expected_revision=expected_revision)

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        return await self.inner.delete(session_id, expected_revision=expected_revision)

    async def session_ids(self) -> list[str]:
        return await self.inner.session_ids()

    def lock(self, session_id: str, timeout: float):
        return self.inner.lock(session_id, timeout)
