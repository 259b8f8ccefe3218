"""Sessions in this process's memory: for tests and library use."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import ConflictError, CorruptSessionError
from foliko_cli.messages.exact_json import copied
from foliko_cli.messages.record import (
    Messages,
    SessionRecord,
    SessionState,
    SessionSummary,
    checked_append,
    checked_for_write,
    new_metadata,
    next_revision,
)
from foliko_cli.storage.base import (
    AuditEntry,
    SavesInBatches,
    SessionStorageAdapter,
    StoredProblem,
    check_expected,
    expected_list,
    kept_entries,
    summary_of,
)
from foliko_cli.storage.integrity import check_count
from foliko_cli.storage.queues import SessionQueues

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager


class MemoryStorage(SavesInBatches, SessionStorageAdapter):
    """Records are deep-copied in and out, so callers never share state with it.
    A write's revision check and the write hold one lock (threads may share it)."""

    name = "memory"
    answers_at_once = True

    def __init__(self) -> None:
        self._records: dict[str, SessionRecord] = {}
        self.quarantined: dict[str, list[SessionRecord]] = {}
        """What ``quarantine`` moved aside, by session id."""
        self._mutex = threading.RLock()
        self._queues = SessionQueues()
        self.fragments: dict[str, str] = {}
        """The fragments' texts by hash (rule 10)."""
        self._audit: list[AuditEntry] = []

    async def audit_append(self, entries: list[AuditEntry]) -> None:
        with self._mutex:
            self._audit.extend(entries)

    async def audit_read(self, since: int | None = None) -> list[AuditEntry]:
        with self._mutex:
            return [e for e in self._audit if since is None or e.at >= since]

    async def audit_prune(self, *, before: int | None = None, keep: int | None = None) -> int:
        with self._mutex:
            kept = kept_entries(self._audit, before, keep)
            removed, self._audit = len(self._audit) - len(kept), kept
        return removed

    def lock(self, session_id: str, timeout: float) -> AbstractAsyncContextManager[None]:
        """Frameworks sharing this store take turns on a session (FIFO)."""
        return self._queues.hold(session_id, timeout)

    async def load(self, session_id: str) -> SessionRecord | None:
        record = self._records.get(session_id)
        if record is None:
            return None
        self._check(record)
        return _copy(record)

    def _check(self, record: SessionRecord) -> None:
        """Its count must be its messages' (only a hand-made change breaks that)."""
        count = record.metadata.get("message_count")
        check_count(record.session_id, self.name, count=count, found=len(record.messages))

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        """All checked before any is written: one stale revision writes none."""
        expected = expected_list(records, expected_revisions)
        for record in records:
            checked_for_write(record)
        with self._mutex:
            for record, want in zip(records, expected, strict=True):
                previous = self._records.get(record.session_id)
                if previous is not None:
                    self._check(previous)
                check_expected(record.session_id, want, previous.revision if previous else 0)
            return [self._put(record) for record in records]

    def _put(self, record: SessionRecord) -> int:
        previous = self._records.get(record.session_id)
        stored = _copy(record)
        stored.revision = next_revision(previous.revision if previous else None)
        stored.saved_at = record.saved_at or now_ms()
        stored.metadata["message_count"] = len(stored.messages)
        self._records[record.session_id] = stored
        return stored.revision

    async def append(
        self, session_id: str, messages: Messages, state: SessionState, *, expected_revision: int
    ) -> int:
        checked_append(session_id, messages, state)
        with self._mutex:
            return self._append(session_id, messages, state, expected_revision)

    def _append(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        state: SessionState,
        expected_revision: int,
    ) -> int:
        stored = self._records.get(session_id)
        if stored is not None:
            self._check(stored)
        found = stored.revision if stored else 0
        if found != expected_revision:
            raise ConflictError(session_id, expected_revision, found)
        if stored is None:
            stored = SessionRecord(session_id, metadata=new_metadata(), revision=0)
            self._records[session_id] = stored
        stored.messages.extend(copied(messages))
        stored.variables = copied(state.variables)
        stored.metadata = {**state.metadata, "message_count": len(stored.messages)}
        stored.compression_state = copied(state.compression_state)
        stored.saved_at = now_ms()
        stored.revision = next_revision(stored.revision)
        return stored.revision

    async def forget(
        self,
        records: list[SessionRecord],
        deletions: dict[str, int | None],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> None:
        """Everything checked, then everything written, under the one lock."""
        expected = expected_list(records, expected_revisions)
        for record in records:
            checked_for_write(record)
        with self._mutex:
            for record, want in zip(records, expected, strict=True):
                previous = self._records.get(record.session_id)
                if previous is not None:
                    self._check(previous)
                check_expected(record.session_id, want, previous.revision if previous else 0)
            for session_id, want in deletions.items():
                stored = self._records.get(session_id)
                check_expected(session_id, want, stored.revision if stored else 0)
            for session_id in deletions:
                self._records.pop(session_id, None)
            for record in records:
                self._put(record)

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        with self._mutex:
            stored = self._records.get(session_id)
            check_expected(session_id, expected_revision, stored.revision if stored else 0)
            return self._records.pop(session_id, None) is not None

    async def session_ids(self) -> list[str]:
        return list(self._records)

    async def list_summaries(self) -> list[SessionSummary]:
        return [self._summary(record) for record in list(self._records.values())]

    def _summary(self, record: SessionRecord) -> SessionSummary:
        summary = summary_of(record)
        try:
            self._check(record)
        except CorruptSessionError as exc:
            return summary._replace(preview="", error=exc.reason)
        return summary

    async def quarantine(self, problem: StoredProblem) -> str:
        """Move the damaged record to ``quarantined`` (never deleted)."""
        with self._mutex:
            record = self._records.pop(problem.session_id, None)
            if record is not None:
                self.quarantined.setdefault(problem.session_id, []).append(record)
        return "memory (quarantined)"

    async def put_fragments(self, texts: Mapping[str, str]) -> bool:
        with self._mutex:
            for key, text in texts.items():
                self.fragments.setdefault(key, text)
        return True

    async def get_fragments(self, hashes: Collection[str]) -> dict[str, str]:
        return {key: self.fragments[key] for key in hashes if key in self.fragments}

    async def revision(self, session_id: str) -> int | None:
        record = self._records.get(session_id)
        return None if record is None else record.revision


def _copy(record: SessionRecord) -> SessionRecord:
    return SessionRecord(
        record.session_id,
        copied(record.messages),
        copied(record.variables),
        copied(record.metadata),
        copied(record.compression_state),
        record.saved_at,
        record.revision,
        record.first_seq,
    )
