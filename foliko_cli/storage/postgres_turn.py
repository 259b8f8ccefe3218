"""What a turn reads and writes on PostgreSQL, each in one statement (one round trip).

A turn's read takes the session row and the messages it sends, from where
the compression summary ends (``load_recent``), or only the positions of
those messages (``load_state``): the start is computed by the server from
the stored ``compression_state``, then checked against Python's reading of
it (``record.covered_by``); where the two differ (a hand-edited ``3.0``) the
read runs again from Python's start, so the meaning is SQLite's exactly.

A turn's write (``append``) is one statement whose parts all see one
snapshot: lock the session row, read the positions of its messages from the
compression point, and, only if the revision is the expected one and the
positions are whole, update (or create) the row and insert the messages.
Its result says which check failed. A row changed while the statement
waited for its lock is a conflict (the statement's snapshot of the messages
predates the change, so it says nothing about damage).
"""

from __future__ import annotations

from typing import Any, cast

import orjson

from foliko_cli.errors import ConflictError
from foliko_cli.messages.record import SessionRecord, SessionState, covered_by, preview_of
from foliko_cli.messages.stored import encode_message
from foliko_cli.storage.integrity import SESSION_ROW, check_span, orphaned
from foliko_cli.storage.sql.dialect import PostgresDialect
from foliko_cli.storage.sql.executor import PostgresExecutor, bounded
from foliko_cli.storage.sql.rows import RECORD_COLUMNS, record_from_row

BIGINT_MAX = 2**63 - 1

_COVERED = """CASE WHEN jsonb_typeof(s.compression_state::jsonb -> 'covered') = 'number' THEN
        CASE WHEN (s.compression_state::jsonb ->> 'covered') ~ '^[0-9]{{1,18}}$' THEN
            CASE WHEN (s.compression_state::jsonb ->> 'covered')::bigint <= s.message_count
            THEN (s.compression_state::jsonb ->> 'covered')::bigint ELSE 0 END
        ELSE 0 END
    ELSE 0 END"""
"""Where the messages after the compression summary start, as ``covered_by``
reads it (a whole number within the count, else 0); CASE keeps the order."""


def _within(position: str) -> str:
    """``position`` as a slice reads it (negative: from the end), within the count."""
    return f"""(CASE WHEN {position} < 0 THEN GREATEST(s.message_count + {position}, 0)
    ELSE LEAST({position}, s.message_count) END)"""


_TO_END = str(BIGINT_MAX)
"""The stop of a read to the end: past the count, so a row there is read and reported."""
_WINDOW = "CROSS JOIN (SELECT %s::bigint AS start, %s::bigint AS stop) w"
"""A window's parameters: its start and stop as a slice has them (None: the end)."""


def window(start: int, stop: int | None) -> tuple[int, int | None]:
    """A window's parameters (``bounded``: a slice reads them alike)."""
    return bounded(start), None if stop is None else bounded(stop)


STARTS = {"recent": _COVERED, "state": "s.message_count", "at": "%s", "window": _within("w.start")}
_WINDOW_STOP = f"""GREATEST({_within("w.start")}, CASE WHEN w.stop IS NULL
    OR {_within("w.stop")} >= s.message_count THEN {_TO_END} ELSE {_within("w.stop")} END)"""

_READ = """SELECT {columns}, s.message_count, r.start, r.stop, {picked}
    FROM {{sessions}} s {window}
    CROSS JOIN LATERAL (SELECT {start} AS start, {stop} AS stop) r
    LEFT JOIN LATERAL (SELECT {aggregates} FROM {{messages}} m
                       WHERE m.session_id = s.session_id AND m.seq >= r.start
                       AND m.seq < r.stop) m ON true
    WHERE s.session_id = %s{lock}"""
_BODIES = "array_agg(m.seq ORDER BY m.seq) AS seqs, array_agg(m.body ORDER BY m.seq) AS bodies"
_SPAN = "COUNT(m.seq) AS found, MIN(m.seq) AS low, MAX(m.seq) AS high"


def read_sql(dialect: PostgresDialect, start: str, *, bodies: bool, lock: str = "") -> str:
    """The one-statement read of a session: its state columns, its count, where the
    read starts (``STARTS``) and stops (a window's stop, else the end), then the
    messages' positions and bodies between (``bodies``) or only their count, lowest
    and highest position. Its parameters: a window's start and stop, or a position, then the id."""
    return dialect.sql(
        _READ.format(
            columns=", ".join(f"s.{c}" for c in RECORD_COLUMNS.split(", ")),
            picked="m.seqs, m.bodies" if bodies else "m.found, m.low, m.high",
            window=_WINDOW if start == "window" else "",
            start=STARTS[start],
            stop=_WINDOW_STOP if start == "window" else _TO_END,
            aggregates=_BODIES if bodies else _SPAN,
            lock=lock,
        )
    )


def record_of(session_id: str, row: tuple[Any, ...], where: str) -> SessionRecord:
    """The record a ``read_sql(bodies=True)`` row holds, its positions checked."""
    from foliko_cli.storage.integrity import check_sequence

    *columns, count, start, stop, seqs, bodies = row
    check_sequence(session_id, where, seqs or (), count=min(stop, count), start=start)
    return record_from_row(
        session_id, tuple(columns), bodies or (), where, first_seq=start, count=count
    )


def state_of(session_id: str, row: tuple[Any, ...], where: str) -> SessionRecord:
    """The messageless record a ``read_sql(bodies=False)`` row holds, its positions
    checked from the aggregate."""
    *columns, count, start, _, found, low, high = row
    check_span(session_id, where, count=count, found=found, first=low, last=high, start=start)
    return record_from_row(session_id, tuple(columns), (), where, first_seq=count)


def python_start(record: SessionRecord) -> int:
    """Where ``covered_by`` says the recent messages of ``record`` start."""
    return int(covered_by(record.compression_state, record.metadata["message_count"]))


_APPEND = """WITH locked AS (
        SELECT revision, message_count, preview FROM {sessions}
        WHERE session_id = %(id)s FOR UPDATE
    ), base AS (
        SELECT COALESCE(l.revision, 0) AS found, COALESCE(l.message_count, 0) AS count,
               COALESCE(l.preview, '') AS preview, l.revision IS NOT NULL AS present,
               (SELECT revision FROM {sessions} WHERE session_id = %(id)s) AS seen
        FROM (SELECT 1) one LEFT JOIN locked l ON true
    ), span AS (
        SELECT b.*, r.start, COUNT(m.seq) AS stored, MIN(m.seq) AS low, MAX(m.seq) AS high
        FROM base b
        CROSS JOIN LATERAL (SELECT CASE WHEN %(covered)s BETWEEN 0 AND b.count
                            THEN %(covered)s ELSE 0 END AS start) r
        LEFT JOIN {messages} m ON m.session_id = %(id)s AND m.seq >= r.start
        GROUP BY b.found, b.count, b.preview, b.present, b.seen, r.start
    ), ok AS (
        SELECT * FROM span WHERE found = %(expected)s AND stored = count - start
            AND (stored = 0 OR (low = start AND high = count - 1))
    ), updated AS (
        UPDATE {sessions} s SET updated_at = %(now)s, message_count = ok.count + %(added)s,
            revision = CASE WHEN ok.found > 0 THEN ok.found + 1 ELSE %(fresh)s END,
            preview = CASE WHEN %(preview)s = '' THEN ok.preview ELSE %(preview)s END,
            variables = %(variables)s,
            metadata = '{{"message_count":' || (ok.count + %(added)s) || {rest},
            compression_state = %(compression_state)s
        FROM ok WHERE s.session_id = %(id)s AND ok.present
        RETURNING s.revision
    ), created AS (
        INSERT INTO {sessions} (session_id, created_at, updated_at, message_count, revision,
                                preview, variables, metadata, compression_state)
        SELECT %(id)s, %(created_at)s, %(now)s, %(added)s, %(fresh)s, %(preview)s, %(variables)s,
               '{{"message_count":' || %(added)s || {rest},
               %(compression_state)s
        FROM ok WHERE NOT ok.present
        RETURNING revision
    ), inserted AS (
        INSERT INTO {messages} (session_id, seq, role, created_at, body)
        SELECT %(id)s, ok.count + m.n - 1, m.role, m.created_at, m.body FROM ok,
            unnest(%(roles)s::text[], %(times)s::bigint[], %(bodies)s::text[])
            WITH ORDINALITY AS m(role, created_at, body, n)
    )
    SELECT found, count, start, stored, low, high, present, seen,
           (SELECT revision FROM updated UNION ALL SELECT revision FROM created)
    FROM span"""


_REST = "CASE WHEN %(metadata)s = '{{{{}}}}' THEN '}}}}' ELSE ',' || substr(%(metadata)s, 2) END"
"""The metadata's keys after ``message_count``: what the write stores is the state's
metadata with its count, and its count is known only once the row is locked."""


def append_sql(dialect: PostgresDialect) -> str:
    return dialect.sql(_APPEND.replace("{rest}", _REST))


def append_params(
    dialect: PostgresDialect,
    session_id: str,
    messages: list[dict[str, Any]],
    state: SessionState,
    expected_revision: int,
    now: int,
    fresh: int,
) -> dict[str, Any]:
    """The parameters of ``append_sql``; ``fresh`` is a new session's first revision."""
    covered = state.compression_state.get("covered", 0)
    metadata = {k: v for k, v in state.metadata.items() if k != "message_count"}
    return {
        "id": session_id,
        "expected": expected_revision,
        "covered": min(int(covered), BIGINT_MAX) if isinstance(covered, int) else -1,
        "now": now,
        "fresh": fresh,
        "added": len(messages),
        "created_at": state.metadata.get("created_at", now),
        "preview": dialect.text(preview_of(messages)),
        "variables": orjson.dumps(state.variables).decode(),
        "metadata": orjson.dumps(metadata).decode(),
        "compression_state": orjson.dumps(state.compression_state).decode(),
        "roles": [dialect.text(m["role"]) for m in messages],
        "times": [m.get("created_at", 0) for m in messages],
        "bodies": [encode_message(m).decode() for m in messages],
    }


async def append(
    db: PostgresExecutor,
    dialect: PostgresDialect,
    session_id: str,
    params: dict[str, Any],
    where: str,
) -> int:
    """Run ``append_sql``; the new revision, or the error its checks found."""
    row = await db.fetchone(append_sql(dialect), params)
    assert row is not None  # span always has its one row
    found, count, start, stored, low, high, present, seen, revision = row
    if revision is not None:
        return cast(int, revision)
    expected = params["expected"]
    if not present and stored:
        raise orphaned(session_id, where, stored, SESSION_ROW)
    if found != expected and seen != (found if present else None):
        raise ConflictError(session_id, expected, found)  # changed while it waited
    check_span(session_id, where, count=count, found=stored, first=low, last=high, start=start)
    raise ConflictError(session_id, expected, found)
