"""``StorageView``: a storage seen through another (a user's sessions, a
client's scope). What a view does not change it passes to ``inner``: the
backend's name, health, location and audit log, and ``close`` when it owns
``inner``."""

from __future__ import annotations

from typing import Any

from foliko_cli.storage import capabilities
from foliko_cli.storage.base import AuditEntry, SessionStorageAdapter


class StorageView(SessionStorageAdapter):
    """``inner`` seen through a view; ``owns_inner`` says whether ``close`` closes it."""

    def __init__(self, inner: SessionStorageAdapter, *, owns_inner: bool = True):
        self.inner = inner
        self.owns_inner = owns_inner
        # the contract names a backend per class; a view goes by its inner one
        self.name = inner.name  # type: ignore[misc]

    @property
    def named(self) -> bool:  # type: ignore[override]
        return self.inner.named

    @property
    def strict_reads(self) -> bool:
        """The wrapped store's: it is what is listed."""
        return self.inner.strict_reads

    @strict_reads.setter
    def strict_reads(self, strict: bool) -> None:
        self.inner.strict_reads = strict

    async def health_check(self) -> bool:
        return await self.inner.health_check()

    @property
    def location(self) -> str:
        return self.inner.location

    async def audit_append(self, entries: list[AuditEntry]) -> None:
        await capabilities.audit_append(self.inner, entries)

    async def audit_read(self, since: int | None = None) -> list[AuditEntry]:
        return await capabilities.audit_read(self.inner, since)

    async def audit_prune(self, *, before: int | None = None, keep: int | None = None) -> int:
        return await capabilities.audit_prune(self.inner, before=before, keep=keep)

    async def close(self) -> None:
        if self.owns_inner:
            await self.inner.close()

    async def info(self) -> dict[str, Any]:
        return {**await self.inner.info(), "sessions": len(await self.session_ids())}
