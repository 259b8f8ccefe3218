"""The statements that write and list sessions, for both engines.

Each writer runs inside its caller's transaction and reads the revision it
compares with the dialect's row lock (PostgreSQL: ``FOR UPDATE``; SQLite's
``BEGIN IMMEDIATE`` already holds the database). A session that does not
exist yet has no row to lock: two PostgreSQL writers creating it at once
both pass the check, and the second one's INSERT fails on the primary key;
the backend runs that transaction again, which then finds the row.

``message_count`` is derived in ``session_row`` alone, from the number of
message rows the write leaves: the column and the copy in the metadata JSON
(which no load trusts: see rows.py) are both that number.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any, NamedTuple

import orjson

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import ConflictError, SessionExistsError, SessionNotFoundError
from foliko_cli.messages.record import (
    SessionRecord,
    SessionState,
    SessionSummary,
    covered_by,
    new_metadata,
    next_revision,
    preview_of,
    title_in,
)
from foliko_cli.messages.stored import encode_message
from foliko_cli.storage.base import check_expected
from foliko_cli.storage.integrity import SESSION_ROW, check_span, orphaned
from foliko_cli.storage.sql.dialect import Dialect
from foliko_cli.storage.sql.executor import Executor, one_row

CHUNK = 500
"""Session ids per ``IN (...)``."""

_COLUMNS = (
    "session_id, created_at, updated_at, message_count, revision, preview, "
    "variables, metadata, compression_state"
)
_INSERT_SESSION = f"INSERT INTO {{sessions}} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
_UPDATE_SESSION = """UPDATE {sessions} SET created_at = ?, updated_at = ?, message_count = ?,
    revision = ?, preview = ?, variables = ?, metadata = ?, compression_state = ?
    WHERE session_id = ?"""
_UPDATE_TURN = """UPDATE {sessions} SET updated_at = ?, message_count = ?, revision = ?,
    preview = ?, variables = ?, metadata = ?, compression_state = ? WHERE session_id = ?"""
_REVISION = "SELECT revision FROM {sessions} WHERE session_id = ?"
_TURN_BASE = "SELECT revision, message_count, preview FROM {sessions} WHERE session_id = ?{lock}"
_SPAN_FROM = "SELECT COUNT(*), MIN(seq), MAX(seq) FROM {messages} WHERE session_id = ? AND seq >= ?"
_SUMMARY_COLUMNS = "session_id, created_at, updated_at, message_count, preview"
_NEWEST = f"SELECT {_SUMMARY_COLUMNS} FROM {{sessions}} ORDER BY updated_at DESC, session_id"
_OLDER = f"""SELECT {_SUMMARY_COLUMNS} FROM {{sessions}}
    WHERE updated_at < ? OR (updated_at = ? AND session_id > ?)
    ORDER BY updated_at DESC, session_id LIMIT ?"""
_TITLED = "SELECT session_id, metadata FROM {sessions} WHERE metadata LIKE ?"
"""The sessions that may have a title, apart: the sorted listing stays as narrow
as it was (the pattern is a parameter: PostgreSQL's driver reads ``%``)."""
_MAY_HAVE_TITLE = '%"title"%'
_COUNTS = "SELECT COUNT(*), COALESCE(SUM(message_count), 0) FROM {sessions}"
_QUARANTINE = """INSERT INTO {quarantine} (session_id, moved_at, reason, session_row, messages)
    VALUES (?, ?, ?, ?, ?)"""


def in_chunks(ids: list[str], size: int = CHUNK) -> Iterator[tuple[list[str], str]]:
    """``ids`` in slices, each with its ``?, ?, …`` for an ``IN (...)``."""
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        yield chunk, ", ".join("?" * len(chunk))


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def session_row(
    dialect: Dialect,
    session_id: str,
    *,
    count: int,
    created_at: int,
    updated_at: int,
    revision: int,
    preview: str,
    state: SessionState,
) -> tuple[Any, ...]:
    """The ``sessions`` row, in the order of the table's columns. ``count`` is
    the number of messages the session has once the write commits."""
    return (
        session_id,
        created_at,
        updated_at,
        count,
        revision,
        dialect.text(preview),
        _dumps(state.variables),
        _dumps({**state.metadata, "message_count": count}),
        _dumps(state.compression_state),
    )


def record_row(dialect: Dialect, record: SessionRecord, revision: int) -> tuple[Any, ...]:
    """The ``sessions`` row that replaces the session with ``record``."""
    metadata = {**new_metadata(), **record.metadata}
    return session_row(
        dialect,
        record.session_id,
        count=len(record.messages),
        created_at=metadata["created_at"],
        updated_at=record.saved_at or now_ms(),
        revision=revision,
        preview=preview_of(record.messages),
        state=SessionState(record.variables, metadata, record.compression_state),
    )


def message_rows(
    session_id: str, first_seq: int, messages: list[dict[str, Any]]
) -> list[tuple[Any, ...]]:
    return [
        (session_id, first_seq + i, m["role"], m.get("created_at", 0), encode_message(m).decode())
        for i, m in enumerate(messages)
    ]


async def insert_messages(
    db: Executor, dialect: Dialect, batches: list[tuple[str, int, list[dict[str, Any]]]]
) -> list[tuple[Any, ...]]:
    """Write each ``(session_id, first_seq, messages)`` and index it; the rows written."""
    rows = [row for batch in batches for row in message_rows(*batch)]
    await dialect.insert_messages(db, rows)
    await dialect.indexed(db, batches)
    return rows


class Written(NamedTuple):
    """What ``replace_records`` wrote: the new revisions, in the order of the
    records, and each session's stored variables and message bodies (JSON
    texts, in order), which a read-back compares with what is stored."""

    revisions: list[int]
    texts: dict[str, tuple[str, list[str]]]


async def stored_revision(
    db: Executor, dialect: Dialect, session_id: str, *, lock: bool = False
) -> int | None:
    """The session's revision, None when it does not exist; with ``lock``, its row
    is locked until the transaction ends."""
    statement = _REVISION + "{lock}" if lock else _REVISION
    row = await db.fetchone(dialect.sql(statement), (session_id,))
    return None if row is None else row[0]


async def stored_revisions(
    db: Executor, dialect: Dialect, session_ids: list[str]
) -> dict[str, int]:
    """The revisions of those of ``session_ids`` that exist, their rows locked in
    session-id order (so two writers never wait on each other in a cycle)."""
    found: dict[str, int] = {}
    for chunk, marks in in_chunks(sorted(session_ids)):
        statement = (
            f"SELECT session_id, revision FROM {{sessions}} WHERE session_id IN ({marks}) "
            "ORDER BY session_id{lock}"
        )
        found.update(await db.fetchall(dialect.sql(statement), chunk))
    return found


async def _delete_rows(db: Executor, dialect: Dialect, table: str, session_ids: list[str]) -> None:
    for chunk, marks in in_chunks(session_ids):
        statement = f"DELETE FROM {{{table}}} WHERE session_id IN ({marks})"
        await db.execute(dialect.sql(statement), chunk)


async def remove_messages(db: Executor, dialect: Dialect, session_ids: list[str]) -> None:
    """Delete the sessions' messages and their index entries."""
    await dialect.unindexed(db, session_ids)
    await _delete_rows(db, dialect, "messages", session_ids)


async def remove_sessions(db: Executor, dialect: Dialect, session_ids: list[str]) -> None:
    """Delete the sessions' rows, messages and all."""
    await remove_messages(db, dialect, session_ids)
    await _delete_rows(db, dialect, "sessions", session_ids)


async def replace_records(
    db: Executor,
    dialect: Dialect,
    records: list[SessionRecord],
    expected: list[int | None],
    *,
    where: str,
) -> Written:
    """Replace each of ``records`` after checking its expected revision and that
    what is stored of it is whole (``check_whole``, ``where`` naming the store);
    the new revisions, in the order of ``records``. Distinct sessions are
    written with one statement per kind of row (a migration batch); a session
    given twice, one record at a time, in order, so the last one stays."""
    order = sorted(range(len(records)), key=lambda i: records[i].session_id)
    revisions = [0] * len(records)
    texts: dict[str, tuple[str, list[str]]] = {}
    if len({record.session_id for record in records}) < len(records):
        for i in order:
            one = await _replace_distinct(db, dialect, [records[i]], [expected[i]], where)
            (revisions[i],) = one.revisions
            texts.update(one.texts)
        return Written(revisions, texts)
    written = await _replace_distinct(
        db, dialect, [records[i] for i in order], [expected[i] for i in order], where
    )
    for i, revision in zip(order, written.revisions, strict=True):
        revisions[i] = revision
    return Written(revisions, written.texts)


async def message_span(
    db: Executor, dialect: Dialect, session_id: str, start: int = 0
) -> tuple[int, int | None, int | None]:
    """How many message rows the session has from position ``start`` on, and the
    lowest and highest position among them (``integrity.check_span``)."""
    count, low, high = await one_row(db, dialect.sql(_SPAN_FROM), (session_id, start))
    return count, low, high


async def check_whole(db: Executor, dialect: Dialect, session_ids: list[str], where: str) -> None:
    """CorruptSessionError for the first of ``session_ids`` whose message rows are
    not exactly positions 0 .. count - 1, or that has message rows but no session
    row: a write that replaces or moves a session first makes sure it is whole.
    One statement per chunk, so one snapshot: a session another writer creates
    meanwhile is seen whole or not at all."""
    for chunk, marks in in_chunks(session_ids):
        rows = await db.fetchall(
            dialect.sql(
                f"""SELECT session_id, MAX(counted), MAX(stored), MAX(first), MAX(last)
                FROM (SELECT session_id, message_count AS counted, NULL AS stored,
                             NULL AS first, NULL AS last
                      FROM {{sessions}} WHERE session_id IN ({marks})
                      UNION ALL
                      SELECT session_id, NULL, COUNT(*), MIN(seq), MAX(seq)
                      FROM {{messages}} WHERE session_id IN ({marks}) GROUP BY session_id) parts
                GROUP BY session_id ORDER BY session_id"""
            ),
            [*chunk, *chunk],
        )
        for session_id, counted, stored, first, last in rows:
            if counted is None:
                raise orphaned(session_id, where, stored, SESSION_ROW)
            check_span(session_id, where, count=counted, found=stored or 0, first=first, last=last)


async def _replace_distinct(
    db: Executor,
    dialect: Dialect,
    records: list[SessionRecord],
    expected: list[int | None],
    where: str,
) -> Written:
    ids = [record.session_id for record in records]
    current = await stored_revisions(db, dialect, ids)
    await check_whole(db, dialect, ids, where)
    for session_id, revision in zip(ids, expected, strict=True):
        check_expected(session_id, revision, current.get(session_id, 0))
    revisions = [next_revision(current.get(session_id)) for session_id in ids]
    rows = [record_row(dialect, r, n) for r, n in zip(records, revisions, strict=True)]
    if current:
        await remove_messages(db, dialect, list(current))
        await db.executemany(
            dialect.sql(_UPDATE_SESSION), [(*row[1:], row[0]) for row in rows if row[0] in current]
        )
    fresh = [row for row in rows if row[0] not in current]
    if fresh:
        await db.executemany(dialect.sql(_INSERT_SESSION), fresh)
    bodies: dict[str, list[str]] = {session_id: [] for session_id in ids}
    for message in await insert_messages(
        db, dialect, [(r.session_id, 0, r.messages) for r in records]
    ):
        bodies[message[0]].append(message[4])
    return Written(revisions, {row[0]: (row[6], bodies[row[0]]) for row in rows})


async def insert_session(
    db: Executor, dialect: Dialect, record: SessionRecord, revision: int
) -> None:
    """The ``sessions`` row of ``record``, which must not exist yet; its messages
    are the caller's to write."""
    await db.execute(dialect.sql(_INSERT_SESSION), record_row(dialect, record, revision))


async def insert_record(
    db: Executor, dialect: Dialect, record: SessionRecord, revision: int
) -> None:
    """Create the session ``record`` (which must not exist yet), messages and all."""
    await insert_session(db, dialect, record, revision)
    await insert_messages(db, dialect, [(record.session_id, 0, record.messages)])


async def append_messages(
    db: Executor,
    dialect: Dialect,
    session_id: str,
    messages: list[dict[str, Any]],
    state: SessionState,
    expected_revision: int,
    *,
    where: str,
) -> int:
    """Add ``messages`` after the stored ones and replace the session's state, if
    its revision is still ``expected_revision`` (0: it does not exist yet).

    The stored messages from the compression point on must be the count's (an
    aggregate over the primary key: bounded, like the turn's read, by what the
    summary does not cover), so a session damaged behind foliko's back, even
    one a long-lived process holds in memory, is refused (CorruptSessionError,
    ``where`` naming the store), never written to."""
    row = await db.fetchone(dialect.sql(_TURN_BASE), (session_id,))
    found, count, preview = row if row else (0, 0, "")
    start = covered_by(state.compression_state, count)
    stored, first, last = await message_span(db, dialect, session_id, start)
    if row is None and stored:
        created = await db.fetchone(dialect.sql(_TURN_BASE), (session_id,))
        if created is None:
            raise orphaned(session_id, where, stored, SESSION_ROW)
        raise ConflictError(session_id, expected_revision, created[0])  # by another writer
    check_span(session_id, where, count=count, found=stored, first=first, last=last, start=start)
    if found != expected_revision:
        raise ConflictError(session_id, expected_revision, found)
    now = now_ms()
    revision = next_revision(found or None)
    values = session_row(
        dialect,
        session_id,
        count=count + len(messages),
        created_at=state.metadata.get("created_at", now),
        updated_at=now,
        revision=revision,
        preview=dialect.text(preview_of(messages)) or preview,
        state=state,
    )
    if row is None:
        await db.execute(dialect.sql(_INSERT_SESSION), values)
    else:
        await db.execute(dialect.sql(_UPDATE_TURN), (*values[2:], session_id))
    await insert_messages(db, dialect, [(session_id, count, messages)])
    return revision


async def delete_session(
    db: Executor, dialect: Dialect, session_id: str, expected_revision: int | None
) -> bool:
    """Remove the session if its revision is still the expected one; False when
    there was none (messages left without their session row count as one)."""
    found = await stored_revision(db, dialect, session_id, lock=True)
    check_expected(session_id, expected_revision, found or 0)
    orphans = 0
    if found is None:
        orphans = (await message_span(db, dialect, session_id))[0]
    await remove_sessions(db, dialect, [session_id])
    return found is not None or orphans > 0


async def forget_records(
    db: Executor,
    dialect: Dialect,
    records: list[SessionRecord],
    expected: list[int | None],
    deletions: dict[str, int | None],
    *,
    where: str,
) -> None:
    """``forget`` inside the caller's transaction: the deletions (each checked as
    ``delete_session`` checks it, their index entries dropped with their
    messages), then ``records`` replaced (``replace_records``)."""
    for session_id in sorted(deletions):
        await delete_session(db, dialect, session_id, deletions[session_id])
    if records:
        await replace_records(db, dialect, records, expected, where=where)


async def rename_session(
    db: Executor, dialect: Dialect, old_id: str, new_id: str, *, where: str
) -> None:
    """Move ``old_id`` with its messages to ``new_id``, under a new revision (a
    cached copy of either is stale); neither may be damaged (``check_whole``)."""
    if await stored_revision(db, dialect, new_id) is not None:
        raise SessionExistsError(new_id)
    found = await stored_revision(db, dialect, old_id, lock=True)
    await check_whole(db, dialect, [old_id, new_id], where)
    if found is None:
        raise SessionNotFoundError(old_id)
    await db.execute(
        dialect.sql("UPDATE {sessions} SET session_id = ?, revision = ? WHERE session_id = ?"),
        (new_id, max(found + 1, next_revision(None)), old_id),
    )
    await db.execute(
        dialect.sql("UPDATE {messages} SET session_id = ? WHERE session_id = ?"), (new_id, old_id)
    )
    await dialect.renamed(db, old_id, new_id)


async def summaries(
    db: Executor, dialect: Dialect, *, page: int | None = None
) -> list[SessionSummary]:
    """Every session's summary with its title, newest first. With ``page``, read
    that many at a time along ``sessions_by_updated`` (the caller holds one snapshot)."""
    titled = await db.fetchall(dialect.sql(_TITLED), (_MAY_HAVE_TITLE,))
    titles = {session_id: title for session_id, data in titled if (title := title_in(data))}
    found = await _untitled_summaries(db, dialect, page)
    if not titles:
        return found
    return [s._replace(title=titles[s.session_id]) if s.session_id in titles else s for s in found]


async def _untitled_summaries(
    db: Executor, dialect: Dialect, page: int | None
) -> list[SessionSummary]:
    if page is None:
        return [SessionSummary(*row) for row in await db.fetchall(dialect.sql(_NEWEST))]
    found: list[SessionSummary] = []
    rows = await db.fetchall(dialect.sql(_NEWEST + " LIMIT ?"), (page,))
    while rows:
        found.extend(SessionSummary(*row) for row in rows)
        if len(rows) < page:
            break
        last_id, last_updated = rows[-1][0], rows[-1][2]
        rows = await db.fetchall(dialect.sql(_OLDER), (last_updated, last_updated, last_id, page))
    return found


async def counts(db: Executor, dialect: Dialect) -> tuple[int, int]:
    """How many sessions and messages are stored."""
    sessions, messages = await one_row(db, dialect.sql(_COUNTS))
    return sessions, int(messages)


async def quarantine_row(
    db: Executor, dialect: Dialect, session_id: str, reason: str, session: str, messages: str
) -> None:
    """Keep an unreadable session's row and messages (JSON text) aside."""
    await db.execute(
        dialect.sql(_QUARANTINE),
        (session_id, now_ms(), dialect.text(reason), session, messages),
    )


_PUT_FRAGMENT = (
    "INSERT INTO {fragments} (hash, content, created_at) VALUES (?, ?, ?) "
    "ON CONFLICT (hash) DO NOTHING"
)


async def put_fragments(db: Executor, dialect: Dialect, texts: Mapping[str, str]) -> None:
    """Each text once by its hash; one already kept is left as it is."""
    now = now_ms()
    rows = [(key, dialect.text(text), now) for key, text in texts.items()]
    if rows:
        await db.executemany(dialect.sql(_PUT_FRAGMENT), rows)


async def get_fragments(db: Executor, dialect: Dialect, hashes: Collection[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for chunk, marks in in_chunks(sorted(set(hashes))):
        sql = dialect.sql(f"SELECT hash, content FROM {{fragments}} WHERE hash IN ({marks})")
        found.update((key, text) for key, text in await db.fetchall(sql, chunk))
    return found
