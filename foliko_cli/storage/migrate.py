"""Copy every session between two backends, verified, safe to re-run (F7).

Each session goes through the canonical record: read from the source, written
to the target in batches, read back and compared (message count and content
hash). The target's search index, where it keeps one itself, is built once
after the copy (``capabilities.index_after``). A session already in the
target with the same content is skipped, so an interrupted run finishes the
job when run again. The source is only read.
The texts of the fragments a batch's sessions use are copied before them
(a target that keeps no texts gets them inline in the references).

Writes are compare-and-set: a new session is created only if it is still
absent, and ``overwrite`` replaces only the revision that was compared, so a
session written in the target while the migration runs is reported, never
overwritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from foliko_cli.errors import (
    ConflictError,
    CorruptSessionError,
    FolikoError,
    SessionExistsError,
    UsageError,
)
from foliko_cli.messages.record import SessionRecord
from foliko_cli.storage import capabilities
from foliko_cli.storage.base import SessionStorageAdapter

BATCH_SIZE = 500


@dataclass
class MigrationReport:
    total: int = 0
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)  # in DST with other content
    dry_run: bool = False
    source: str = ""
    target: str = ""

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "copied": len(self.copied),
            "skipped": len(self.skipped),
            "failed": [{"session_id": sid, "reason": reason} for sid, reason in self.failed],
            "dry_run": self.dry_run,
        }


def same_content(a: SessionRecord, b: SessionRecord) -> bool:
    return capabilities.digest_of(a) == capabilities.digest_of(b)


async def migrate(
    source: SessionStorageAdapter,
    target: SessionStorageAdapter,
    *,
    dry_run: bool = False,
    overwrite: bool = False,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
) -> MigrationReport:
    """Copy every session of ``source`` into ``target`` (see the module docstring)."""
    if source.name == target.name and source.location == target.location:
        raise UsageError(
            f"source and destination are the same storage ({source.location}); "
            "name two different backends or locations"
        )
    if not await source.exists():
        raise UsageError(
            f"the source {source.location} does not exist",
            fix="check the name or URL of the storage to migrate from",
        )
    session_ids = await source.session_ids()
    already = set(await target.session_ids())
    report = MigrationReport(
        total=len(session_ids), dry_run=dry_run, source=source.location, target=target.location
    )
    async with capabilities.index_after(target):
        for start in range(0, len(session_ids), batch_size):
            batch = session_ids[start : start + batch_size]
            pending = await _collect(source, target, batch, already, report, overwrite)
            if dry_run:
                report.copied.extend(record.session_id for record, _ in pending)
            elif pending:
                pending = await _with_fragments(source, target, pending)
                await _copy(target, pending, report)
            if progress:
                progress(len(batch))
    return report


async def _collect(
    source: SessionStorageAdapter,
    target: SessionStorageAdapter,
    batch: list[str],
    already: set[str],
    report: MigrationReport,
    overwrite: bool,
) -> list[tuple[SessionRecord, int]]:
    """The records to write, each with the revision it must replace (0: none)."""
    pending = []
    for session_id in batch:
        expected = 0
        try:
            record = await source.load(session_id)
            if record is None:
                continue
            if session_id in already:
                existing = await target.load(session_id)
                if existing is not None and same_content(record, existing):
                    report.skipped.append(session_id)
                    continue
                if not overwrite:
                    report.failed.append(
                        (session_id, "exists in the destination with other content")
                    )
                    report.differing.append(session_id)
                    continue
                expected = existing.revision if existing is not None else 0
        except FolikoError as exc:
            report.failed.append((session_id, str(exc)))
            continue
        pending.append((record, expected))
    return pending


async def _with_fragments(
    source: SessionStorageAdapter,
    target: SessionStorageAdapter,
    pending: list[tuple[SessionRecord, int]],
) -> list[tuple[SessionRecord, int]]:
    """Copy the fragments the batch's sessions refer to (storage/base.py, rule 10)
    before the sessions; into a target that keeps none, they go inline."""
    from foliko_cli.messages import fragments

    wanted: set[str] = set()
    for record, _ in pending:
        wanted |= fragments.hashes_in(record.messages, record.metadata)
    if not wanted:
        return pending
    texts = fragments.verified(await source.get_fragments(wanted))
    if not texts or await target.put_fragments(texts):
        return pending
    inlined = []
    for record, expected in pending:
        record.messages, record.metadata = fragments.inlined(
            record.messages, record.metadata, texts
        )
        inlined.append((record, expected))
    return inlined


async def _copy(
    target: SessionStorageAdapter,
    pending: list[tuple[SessionRecord, int]],
    report: MigrationReport,
) -> None:
    """Write the batch in one go and read it back; if a session moved meanwhile
    or is damaged in the target, one by one (a backend without transactions may
    have written part of the batch), so each failure is reported with its
    session."""
    records = [record for record, _ in pending]
    try:
        differing = await capabilities.copy_loaded(
            target, records, expected_revisions=[e for _, e in pending]
        )
    except (ConflictError, SessionExistsError, CorruptSessionError):
        differing = {}
        for record, expected in pending:
            reason = await _copy_one(target, record, expected)
            if reason is not None:
                differing[record.session_id] = reason
    for record in records:
        reason = differing.get(record.session_id)
        if reason is None:
            report.copied.append(record.session_id)
        else:
            report.failed.append((record.session_id, reason))


async def _copy_one(
    target: SessionStorageAdapter, record: SessionRecord, expected: int
) -> str | None:
    """Copy one session; why it failed, or None."""
    try:
        return (
            await capabilities.copy_loaded(target, [record], expected_revisions=[expected])
        ).get(record.session_id)
    except (ConflictError, SessionExistsError):
        try:
            stored = await target.load(record.session_id)
        except FolikoError:
            stored = None
        if stored is not None and same_content(record, stored):
            return None  # written by the batch before it stopped
        return "was written in the destination while the migration ran; run the migration again"
    except FolikoError as exc:
        return str(exc)
