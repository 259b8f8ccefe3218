"""Who read or wrote which sessions: the audit log's recorder, and the
service's operations on the log (list it, prune it).

A door (``foliko mcp serve``, ``foliko serve`` with API keys) wraps each call
in ``touching()`` (the ids the scoped storage reads or writes meanwhile are
collected) and then hands ``AuditRecorder.record`` the client, the call, the
ids and the result's bytes: only their SHA-256 is kept. ``record`` never
waits: the entry is queued, and one background task appends what was queued
within ``BATCH_S`` in one batch, so a turn or a read is never slowed by its
record; a local
store's append (SQLite, JSON files: short, synchronous I/O) runs in a worker
thread, off the event loop. What is queued is appended when the service
closes. Every ``PRUNE_EVERY`` entries a
process trims the log to the newest ``DEFAULT_KEEP``: the default bound.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from foliko_cli.common.clock import now_ms
from foliko_cli.common.loop import run_without_loop
from foliko_cli.storage import capabilities
from foliko_cli.storage.access import Scope, ScopedStorage, touching
from foliko_cli.storage.base import AuditEntry, AuditLog, answers_at_once
from foliko_cli.storage.scoped import UserScopedStorage

if TYPE_CHECKING:
    from foliko_cli.storage.base import SessionStorageAdapter

__all__ = ["DEFAULT_KEEP", "AuditEntry", "AuditRecorder", "Scope", "touching"]

DEFAULT_KEEP = 100_000
"""The entries the log keeps at most, the newest (``audit prune`` without a bound, too)."""
PRUNE_EVERY = 1_000
BATCH_S = 0.05
"""How long a recorded entry waits for others to be appended with it: one write
per batch, not per call (what a crash may lose of the log)."""


def sha256(result: bytes | str) -> str:
    return hashlib.sha256(result.encode() if isinstance(result, str) else result).hexdigest()


class AuditRecorder:
    """Queues entries and appends them to ``storage``'s audit log in the background."""

    def __init__(self, storage: SessionStorageAdapter, notify: Callable[[str], None]):
        while isinstance(storage, ScopedStorage | UserScopedStorage):
            storage = storage.inner  # where the log is: the views pass it through
        self.storage = storage
        self.notify = notify
        self.keeps = isinstance(storage, AuditLog)
        self.local = answers_at_once(storage)
        self._queued: list[AuditEntry] = []
        self._task: asyncio.Task[None] | None = None
        self._since_prune = 0
        self._failed = False

    def record(
        self,
        client: str,
        call: str,
        session_ids: Iterable[str],
        result: bytes | str = b"",
        outcome: str = "ok",
        *,
        digest: str | None = None,
    ) -> None:
        """One call, queued; appended soon, in the background. ``digest``: the
        result's SHA-256 when the caller hashed it as it went."""
        if not self.keeps:
            return
        digest = digest or sha256(result)
        entry = AuditEntry(now_ms(), client, call, tuple(sorted(session_ids)), digest, outcome)
        self._queued.append(entry)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        await asyncio.sleep(BATCH_S)
        while self._queued:
            batch, self._queued = self._queued, []
            try:
                if self.local:
                    await asyncio.to_thread(run_without_loop, self._append(batch))
                else:
                    await self._append(batch)
            except Exception as exc:  # a full disk, a lost server: never the call's failure
                if not self._failed:  # said once; the calls themselves go on
                    self._failed = True
                    self.notify(f"the audit log could not be written: {exc}")

    async def _append(self, batch: list[AuditEntry]) -> None:
        await capabilities.audit_append(self.storage, batch)
        self._since_prune += len(batch)
        if self._since_prune >= PRUNE_EVERY:
            self._since_prune = 0
            await capabilities.audit_prune(self.storage, keep=DEFAULT_KEEP)

    async def flush(self) -> None:
        """Wait until everything recorded so far is appended."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        if self._queued:
            await self._drain()


def by_client(entry: AuditEntry, client: str) -> bool:
    """Whether ``client`` names the entry's: its whole name (``mcp:Claude Code``),
    a key's name (``ci`` for ``key:ci``) or a key's user (``ann`` for ``key:ann/3fa1c2d0``)."""
    name = entry.client
    return client in (name, name.removeprefix("key:"), name.removeprefix("key:").split("/")[0])
