"""Forgetting: sessions, or some of a session's messages, removed for good with
every copy foliko keeps of them, in one step of the storage
(``SessionStorageAdapter.forget``), and a receipt that says so.

What goes with a session: its trash entries (every copy a delete, clear,
rewind or reset kept), and the records ``foliko serve`` keeps beside it that
name it in their metadata (``session``: a background response's journal,
with its events). With some messages, the session is rewritten without them
(every other message keeps its item number), and a summary or compaction
that stood for one of them, and a title taken from one, go too.

The receipt is a record of foliko's own, ``.foliko/forgotten/ID``, written in
the same step: when, which sessions, how many messages, which copies and
indexes; never a word of the content, nor a hash of it.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import CorruptSessionError, SessionNotFoundError, UsageError
from foliko_cli.messages.ids import INTERNAL_PREFIX, check_session_id, is_internal
from foliko_cli.messages.item_numbers import offset_after, pinned
from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.messages.turns import cut_compression
from foliko_cli.storage import capabilities, trash
from foliko_cli.storage.base import SessionStorageAdapter

RECEIPT_PREFIX = INTERNAL_PREFIX + "forgotten/"
SESSION_KEY = "session"
"""The metadata key by which a record of foliko's own names the session it holds
content of (a server's background journal): forgetting that session removes it."""

Span = tuple[int, int]


class ForgetReceipt(NamedTuple):
    """What a forget removed (or, ``dry_run``, would remove): ``sessions`` has one
    entry per session (``session_id``, ``whole``, ``messages`` forgotten,
    ``positions`` when only some, ``trash_copies`` and ``server_records``
    removed)."""

    id: str
    forgotten_at: int
    backend: str
    location: str
    sessions: list[dict[str, Any]]
    indexes: list[str]
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "forgotten_at": self.forgotten_at,
            "backend": self.backend,
            "location": self.location,
            "sessions": self.sessions,
            "indexes": self.indexes,
            "caches": ["this process's session contexts"],
            "dry_run": self.dry_run,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ForgetReceipt:
        return cls(*(data[key] for key in cls._fields[:-1]))


def parse_spans(texts: tuple[str, ...] | list[str]) -> list[Span]:
    """``N`` or ``N..M`` (inclusive), as ``sessions search`` numbers messages (``seq``,
    from 0); UsageError naming the one that cannot be read."""
    spans = []
    for text in texts:
        first, dots, last = text.strip().partition("..")
        try:
            span = (int(first), int(last) if dots else int(first))
        except ValueError:
            span = (-1, -1)
        if min(span) < 0 or span[0] > span[1]:
            raise UsageError(
                f"bad message range {text!r}",
                fix="give a message's number (seq, from 0) or a range N..M with N <= M",
            )
        spans.append(span)
    return spans


def _receipt_id(now: int) -> str:
    return "fg" + trash.new_token(now * 1000)


def receipt_record(receipt: ForgetReceipt) -> SessionRecord:
    stored = receipt.to_dict()
    del stored["dry_run"]
    return SessionRecord(
        RECEIPT_PREFIX + receipt.id,
        variables={"receipt": stored},
        metadata=new_metadata(receipt.forgotten_at),
    )


async def copies_of(
    storage: SessionStorageAdapter, session_ids: set[str]
) -> dict[str, tuple[list[trash.TrashEntry], list[str]]]:
    """Each session's trash entries and the records of foliko's own naming it."""
    found: dict[str, tuple[list[trash.TrashEntry], list[str]]] = {s: ([], []) for s in session_ids}
    for stored in await storage.session_ids():
        entry = trash.parse(stored)
        if entry is not None:
            if entry.session_id in found:
                found[entry.session_id][0].append(entry)
            continue
        if not is_internal(stored) or stored.startswith(RECEIPT_PREFIX):
            continue
        with contextlib.suppress(CorruptSessionError):
            state = await capabilities.load_state(storage, stored)
            named = state.metadata.get(SESSION_KEY) if state is not None else None
            if isinstance(named, str) and named in found:
                found[named][1].append(stored)
    return found


def without(record: SessionRecord, spans: list[Span]) -> tuple[SessionRecord, int]:
    """``record`` rewritten without the messages at ``spans`` (positions), and how
    many went. Every other message keeps its item number; a summary or
    compaction that stood for a forgotten message, and a title taken from one,
    go too. UsageError when a span is outside the history."""
    count = len(record.messages)
    for first, last in spans:
        if last >= count:
            held = f"messages 0..{count - 1}" if count else "no messages"
            raise UsageError(
                f"session {record.session_id!r} has {held}; {first}..{last} is not among them",
                fix="give positions from 0, as a search's seq shows them",
            )
    gone = {p for first, last in spans for p in range(first, last + 1)}
    messages, next_number = pinned(record.messages, record.metadata)
    kept = [m for p, m in enumerate(messages) if p not in gone]
    dropped = [m for p, m in enumerate(messages) if p in gone]
    start = min(gone)
    for message in kept:
        entries = message.get("compactions")
        if isinstance(entries, list):
            left = [e for e in entries if _covers_at_most(e, start)]
            message.pop("compactions")
            if left:
                message["compactions"] = left
    metadata = {**record.metadata, **offset_after(next_number, len(kept))}
    title = metadata.get("title")
    if isinstance(title, str) and _taken_from(title, dropped):
        del metadata["title"]
    rewritten = SessionRecord(
        record.session_id,
        messages=kept,
        variables=record.variables,
        metadata=metadata,
        compression_state=cut_compression(record.compression_state or {}, start, dropped),
        saved_at=now_ms(),
    )
    return rewritten, len(dropped)


def _covers_at_most(entry: Any, position: int) -> bool:
    covered = entry.get("covered") if isinstance(entry, dict) else None
    return isinstance(covered, int) and not isinstance(covered, bool) and covered <= position


def _taken_from(title: str, dropped: list[dict[str, Any]]) -> bool:
    """Whether ``title`` reads like a forgotten message's start (a title a turn took)."""
    words = " ".join(title.removesuffix("…").split())
    return bool(words) and any(
        words in " ".join(m["content"].split())
        for m in dropped
        if isinstance(m.get("content"), str)
    )


def check_request(session_ids: list[str], spans: list[Span]) -> None:
    if not session_ids:
        raise UsageError("name the sessions to forget: foliko sessions forget ID...")
    for session_id in session_ids:
        check_session_id(session_id)
        if is_internal(session_id):
            raise UsageError(
                f"cannot forget {session_id!r}: names under .foliko/ are foliko's own",
                fix="name a session of yours",
            )
    if spans and len(set(session_ids)) != 1:
        raise UsageError(
            "messages are picked out of one session at a time; name one session",
            fix="forget each session's messages on their own",
        )


async def plan(
    storage: SessionStorageAdapter,
    session_ids: list[str],
    spans: list[Span],
    copies: dict[str, tuple[list[trash.TrashEntry], list[str]]],
) -> tuple[ForgetReceipt, list[SessionRecord], list[int | None], dict[str, int | None]]:
    """Under the locks of every session and copy: the receipt, the records to
    write (the rewritten session, the receipt) with their expected revisions,
    and what to delete."""
    records: list[SessionRecord] = []
    expected: list[int | None] = []
    deletions: dict[str, int | None] = {}
    sessions = []
    for session_id in session_ids:
        entries, kept_by_server = copies[session_id]
        if spans:
            record = await storage.load(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            rewritten, count = without(record, spans)
            records.append(rewritten)
            expected.append(record.revision)
        else:
            try:
                state = await capabilities.load_state(storage, session_id)
            except CorruptSessionError:  # deleted all the same: nothing of it is kept
                state, count = None, 0
                deletions[session_id] = None
            else:
                if state is None and not entries:
                    raise SessionNotFoundError(session_id)
                if state is not None:
                    count = state.first_seq
                    deletions[session_id] = state.revision
                else:  # only in the trash: as many as its fullest copy held
                    count = 0
                    for entry in entries:
                        with contextlib.suppress(CorruptSessionError):
                            copy = await capabilities.load_state(storage, entry.stored_id)
                            count = max(count, copy.first_seq if copy is not None else 0)
        deletions.update((entry.stored_id, None) for entry in entries)
        deletions.update((stored, None) for stored in kept_by_server)
        sessions.append(
            {
                "session_id": session_id,
                "whole": not spans,
                "messages": count,
                "positions": [list(span) for span in spans] if spans else None,
                "trash_copies": len(entries),
                "server_records": len(kept_by_server),
            }
        )
    now = now_ms()
    receipt = ForgetReceipt(
        _receipt_id(now),
        now,
        storage.name,
        storage.location,
        sessions,
        list(storage.indexes),
    )
    records.append(receipt_record(receipt))
    expected.append(0)
    return receipt, records, expected, deletions


async def receipts(storage: SessionStorageAdapter) -> list[ForgetReceipt]:
    """Every receipt the store holds, oldest first (one that cannot be read is left out)."""
    found = []
    for stored in await storage.session_ids():
        if stored.startswith(RECEIPT_PREFIX):
            with contextlib.suppress(CorruptSessionError, KeyError, TypeError):
                state = await capabilities.load_state(storage, stored)
                if state is not None:
                    found.append(ForgetReceipt.from_dict(state.variables["receipt"]))
    return sorted(found, key=lambda r: (r.forgotten_at, r.id))


async def remaining_copies(storage: SessionStorageAdapter) -> list[tuple[str, str]]:
    """What a forget should have removed and is still there: (stored id, why)."""
    latest: dict[str, ForgetReceipt] = {}
    for receipt in await receipts(storage):
        for entry in receipt.sessions:
            latest[entry["session_id"]] = receipt
    if not latest:
        return []
    left = []
    for session_id, (entries, kept_by_server) in (await copies_of(storage, set(latest))).items():
        receipt = latest[session_id]
        why = f"a copy of session {session_id!r}, forgotten before (receipt {receipt.id})"
        left += [(e.stored_id, why) for e in entries if e.removed_at <= receipt.forgotten_at]
        for stored in kept_by_server:
            state = await capabilities.load_state(storage, stored)
            created = state.metadata.get("created_at", 0) if state is not None else None
            if isinstance(created, int) and created <= receipt.forgotten_at:
                left.append((stored, why))
        whole = any(e["whole"] for e in receipt.sessions if e["session_id"] == session_id)
        if whole:
            with contextlib.suppress(CorruptSessionError):
                state = await capabilities.load_state(storage, session_id)
                created = state.metadata.get("created_at") if state is not None else None
                if isinstance(created, int) and created <= receipt.forgotten_at:
                    left.append(
                        (
                            session_id,
                            f"session {session_id!r} was forgotten (receipt "
                            f"{receipt.id}) and is still stored",
                        )
                    )
    return left
