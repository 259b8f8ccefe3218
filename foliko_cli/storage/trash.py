"""The trash: what delete, prune, clear, rewind and a reset removed, kept for
an undo window. One generic implementation over the storage contract.

An entry is an ordinary session record under a reserved id,
``.foliko/trash/REASON/TOKEN/SESSION``: foliko's own namespace
(``record.is_internal``), which listings, search, usage and prune leave out
and a migration copies like any session. The id says everything a listing
needs (what the session was called, why and when it went, ``TOKEN`` being
the removal time in microseconds, base 36, and a random tail), so the trash is listed
without reading a record; the record itself is the session exactly as it
was (messages, variables, metadata, ``saved_at``).

A deleted session is *moved* (``capabilities.rename``: one statement
natively; generically create-only then a compare-and-set delete, so a crash
between the two leaves both, never neither). A session that stays (cleared,
rewound, started over) is *copied* first, create-only, and the caller then
rewrites it with a compare-and-set on the revision the copy was made from;
if that fails, the copy is dropped. Restoring moves the entry back.

The caller holds the session's lock (and, to restore, the entry's): these
are writes like any other. A fresh entry's id is unique, so nobody else
can hold it or write it while it is made.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from foliko_cli.messages.ids import INTERNAL_PREFIX
from foliko_cli.messages.record import SessionRecord, SessionSummary, relabelled
from foliko_cli.storage import capabilities
from foliko_cli.storage.base import SessionStorageAdapter

TRASH_PREFIX = INTERNAL_PREFIX + "trash/"
REASONS = ("delete", "prune", "clear", "rewind", "new", "import")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_TAIL = 4


class TrashEntry(NamedTuple):
    """One removed session: ``entry_id`` (its TOKEN) names it in the trash,
    ``session_id`` is what it was called, ``stored_id`` where it is kept."""

    entry_id: str
    session_id: str
    reason: str
    removed_at: int
    stored_id: str
    message_count: int = 0
    last_used: int = 0

    def expires_at(self, keep_ms: int) -> int:
        return self.removed_at + keep_ms


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, digit = divmod(number, 36)
        digits = _DIGITS[digit] + digits
        if not number:
            return digits


def new_token(removed_us: int) -> str:
    tail = int.from_bytes(os.urandom(4)) % 36**_TAIL
    return _base36(removed_us) + _base36(tail).rjust(_TAIL, "0")


def _removed_us(entry: TrashEntry) -> int:
    return int(entry.entry_id[:-_TAIL], 36)


def stored_id(reason: str, token: str, session_id: str) -> str:
    return f"{TRASH_PREFIX}{reason}/{token}/{session_id}"


def parse(stored: str) -> TrashEntry | None:
    """The entry ``stored`` names, or None when it is not one (anything else
    under the prefix is left alone)."""
    if not stored.startswith(TRASH_PREFIX):
        return None
    reason, _, rest = stored[len(TRASH_PREFIX) :].partition("/")
    token, _, session_id = rest.partition("/")
    if reason not in REASONS or len(token) <= _TAIL or not session_id:
        return None
    try:
        removed_us = int(token[:-_TAIL], 36)
    except ValueError:
        return None
    return TrashEntry(token, session_id, reason, removed_us // 1000, stored)


def _from_summary(summary: SessionSummary) -> TrashEntry | None:
    entry = parse(summary.session_id)
    if entry is None:
        return None
    return entry._replace(message_count=summary.message_count, last_used=summary.updated_at)


async def entries(storage: SessionStorageAdapter, *, counted: bool = False) -> list[TrashEntry]:
    """Every entry, newest first; ``counted`` also reads each one's message
    count and last use from the summaries (a listing), else only the ids."""
    if counted:
        found = [_from_summary(s) for s in await storage.list_summaries()]
    else:
        found = [parse(stored) for stored in await storage.session_ids()]
    return sorted(
        (entry for entry in found if entry is not None),
        key=lambda e: (_removed_us(e), e.stored_id),
        reverse=True,
    )


async def move(
    storage: SessionStorageAdapter, session_id: str, reason: str, *, now: int | None = None
) -> TrashEntry:
    """Move the session into the trash (SessionNotFoundError when there is none)."""
    entry = _new_entry(session_id, reason, now)
    await capabilities.rename(storage, session_id, entry.stored_id)
    return entry


async def keep_copy(
    storage: SessionStorageAdapter, record: SessionRecord, reason: str, *, now: int | None = None
) -> TrashEntry:
    """A copy of ``record`` (the whole session as loaded) in the trash, created
    only if absent; the caller then rewrites the session from ``record.revision``."""
    entry = _new_entry(record.session_id, reason, now)
    copy = relabelled(record, entry.stored_id, saved_at=record.saved_at)
    await storage.save(copy, expected_revision=0)
    return entry._replace(message_count=len(record.messages), last_used=record.saved_at)


def _new_entry(session_id: str, reason: str, now: int | None) -> TrashEntry:
    if reason not in REASONS:
        raise ValueError(f"unknown trash reason {reason!r}")
    removed_us = time.time_ns() // 1000 if now is None else now * 1000
    token = new_token(removed_us)
    stored = stored_id(reason, token, session_id)
    return TrashEntry(token, session_id, reason, removed_us // 1000, stored)


async def restore(storage: SessionStorageAdapter, entry: TrashEntry, target_id: str) -> None:
    """Move the entry back as ``target_id``: SessionExistsError when that is
    taken, SessionNotFoundError when the entry is gone."""
    await capabilities.rename(storage, entry.stored_id, target_id)


async def discard(storage: SessionStorageAdapter, entry: TrashEntry) -> bool:
    """Remove the entry for good; False when it was already gone."""
    return await storage.delete(entry.stored_id)
