"""SQLite's full-text index over message text (FTS5), kept in step by the writers.

``messages`` has no integer rowid (it is keyed by session and seq), so
``message_search`` gives each message one, with the role and time the
filters need, and the text that is indexed (a message's first
INDEXED_CHARS characters), so snippets never read a body; ``message_texts``
is the view FTS5 reads that text from (an external-content table), for the
messages that still exist. The writers call
``index_records``/``unindex`` inside their own transaction: a message is
searchable the moment its turn commits, from any connection.

A bulk copy (``storage migrate``) defers that: each batch it writes records,
in its own transaction, that the index is behind (``mark_pending``: one row
of ``search_pending``), and the index is completed once after the copy
(``complete_pending``: every message with no ``message_search`` row, in two
statements), which also deletes the mark. A copy that stops in between
leaves the mark, and the next search, ``storage check`` or bulk copy
completes the index first, so a search never silently misses a message.

Where this SQLite has no FTS5, the migration creates nothing, the helpers do
nothing and searching falls back to a scan.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import TYPE_CHECKING, Any

from foliko_cli.errors import CorruptSessionError, UsageError
from foliko_cli.storage.sql.executor import bounded

if TYPE_CHECKING:
    from foliko_cli.storage.search import SearchHit, SearchQuery, Term

_HASH = 1 << 20  # FTS5's default hashsize
_BULK_HASH = 16 << 20
_SET_HASH = "INSERT INTO messages_fts (messages_fts, rank) VALUES ('hashsize', ?)"
_INDEXED_CHARS = 250_000  # search.INDEXED_CHARS, which this module must not import
_TEXT = (
    "CASE WHEN json_valid(CAST(m.body AS TEXT)) "
    "THEN substr(CAST(json_extract(CAST(m.body AS TEXT), '$.content') AS TEXT), 1, "
    f"{_INDEXED_CHARS}) ELSE '' END"
)
_BODY_VIEW = f"""CREATE VIEW IF NOT EXISTS message_texts (id, session_id, seq, text) AS
    SELECT s.id, s.session_id, s.seq, {_TEXT} FROM message_search s
    JOIN messages m ON m.session_id = s.session_id AND m.seq = s.seq"""
"""The view of migration steps 3 and 4: the text read out of each body."""
_VIEW = """CREATE VIEW IF NOT EXISTS message_texts (id, session_id, seq, text) AS
    SELECT s.id, s.session_id, s.seq, s.text FROM message_search s
    JOIN messages m ON m.session_id = s.session_id AND m.seq = s.seq"""
"""The view since step 6: the indexed text kept in ``message_search`` (the
join only on the key, so a body is never read), for messages that exist."""


@functools.cache
def fts5_available() -> bool:
    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE VIRTUAL TABLE probe USING fts5(text)")
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()
    return True


def create_index(db: sqlite3.Connection) -> None:
    """The migration step: the tables, then every stored message indexed."""
    if not fts5_available():
        return
    db.execute(
        """CREATE TABLE IF NOT EXISTS message_search (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            UNIQUE (session_id, seq)
        )"""
    )
    db.execute(_BODY_VIEW)
    db.execute(
        """CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
            text, content='message_texts', content_rowid='id',
            tokenize='unicode61 remove_diacritics 0')"""
    )
    db.execute("DELETE FROM message_search")
    db.execute(
        """INSERT INTO message_search (session_id, seq, role, created_at)
           SELECT session_id, seq, role, created_at FROM messages ORDER BY session_id, seq"""
    )
    db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")


def create_pending(db: sqlite3.Connection) -> None:
    """The migration step that adds the mark of an index behind its messages
    (``mark_pending``); an index that is not behind has no row in it."""
    if _indexed(db):
        db.execute(
            "CREATE TABLE IF NOT EXISTS search_pending (id INTEGER PRIMARY KEY CHECK (id = 1))"
        )


def mark_pending(db: sqlite3.Connection) -> None:
    """Inside a write that left its messages out of the index: the index is behind."""
    if _indexed(db):
        db.execute("INSERT OR IGNORE INTO search_pending (id) VALUES (1)")


def pending(db: sqlite3.Connection) -> bool:
    """Whether messages were written without being indexed (``mark_pending``)."""
    try:
        return db.execute("SELECT 1 FROM search_pending").fetchone() is not None
    except sqlite3.OperationalError:  # no index, so no mark (or not migrated yet)
        return False


def complete_pending(db: sqlite3.Connection) -> None:
    """Inside a write transaction: index every message that has no
    ``message_search`` row (written while indexing was deferred), in two
    statements SQLite runs itself, and delete the mark."""
    if not pending(db):
        return
    start = db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM message_search").fetchone()[0]
    db.execute(
        f"""INSERT INTO message_search (session_id, seq, role, created_at, text)
            SELECT m.session_id, m.seq, m.role, m.created_at, {_TEXT} FROM messages m
            WHERE NOT EXISTS (SELECT 1 FROM message_search s
                              WHERE s.session_id = m.session_id AND s.seq = m.seq)
            ORDER BY m.session_id, m.seq"""
    )
    # FTS5 writes a segment each time its pending terms pass ``hashsize`` (1 MB),
    # and merges them: 16 MB for the one large insert takes a third off it.
    db.execute(_SET_HASH, (_BULK_HASH,))
    db.execute(
        "INSERT INTO messages_fts (rowid, text) SELECT id, text FROM message_search WHERE id >= ?",
        (start,),
    )
    db.execute(_SET_HASH, (_HASH,))
    db.execute("DELETE FROM search_pending")


def bound_indexed_text(db: sqlite3.Connection) -> None:
    """The migration step that bounds what is indexed of a message to its
    first INDEXED_CHARS characters (search time once grew with the square of
    a message's size): the view again, and the index rebuilt from it."""
    if not _indexed(db):
        return
    db.execute("DROP VIEW IF EXISTS message_texts")
    db.execute(_BODY_VIEW)
    db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")


def keep_text(db: sqlite3.Connection) -> None:
    """The migration step that keeps each message's indexed text in
    ``message_search``, filled with exactly what the index holds, so a hit's
    snippet is cut without reading its body (a query that matched a 10 MB
    message parsed all of it)."""
    if not _indexed(db):
        return
    if "text" not in {row[1] for row in db.execute("PRAGMA table_info(message_search)")}:
        db.execute("ALTER TABLE message_search ADD COLUMN text TEXT")
    db.execute(
        f"""UPDATE message_search AS s SET text = (SELECT {_TEXT} FROM messages m
            WHERE m.session_id = s.session_id AND m.seq = s.seq)"""
    )
    db.execute("DROP VIEW IF EXISTS message_texts")
    db.execute(_VIEW)


class Connection(sqlite3.Connection):
    """A connection that remembers its database has the index, which is never
    dropped: a turn's append then asks ``sqlite_master`` nothing."""

    indexed = False


def _indexed(db: sqlite3.Connection) -> bool:
    if getattr(db, "indexed", False):
        return True
    found = (
        db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'"
        ).fetchone()
        is not None
    )
    if found and isinstance(db, Connection):
        db.indexed = True
    return found


def successor(prefix: str) -> str:
    """The least text after every text that begins with ``prefix``, in SQLite's
    BINARY order (code-point order): its bounds as a range the index can use."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def index_records(
    db: sqlite3.Connection, batches: list[tuple[str, int, list[dict[str, Any]]]]
) -> None:
    """Index each ``(session_id, first_seq, messages)`` just written, in statements
    SQLite runs itself: the rows of ``message_search`` (their text read out of
    the bodies as the view would), then the index of those rows."""
    if not batches or not _indexed(db):
        return
    added = []  # the ids each batch's rows got: consecutive, after every earlier one
    for session_id, first_seq, messages in batches:
        if messages:
            cursor = db.execute(
                f"""INSERT INTO message_search (session_id, seq, role, created_at, text)
                    SELECT m.session_id, m.seq, m.role, m.created_at, {_TEXT} FROM messages m
                    WHERE m.session_id = ? AND m.seq >= ? ORDER BY m.seq""",
                (session_id, first_seq),
            )
            last = cursor.lastrowid or 0
            if cursor.rowcount > 0:
                added.append((last - cursor.rowcount + 1, last))
    db.executemany(
        "INSERT INTO messages_fts (rowid, text) "
        "SELECT id, text FROM message_search WHERE id BETWEEN ? AND ?",
        added,
    )


def unindex(db: sqlite3.Connection, session_ids: list[str]) -> None:
    """Drop the sessions from the index; call before their messages are deleted."""
    if not session_ids or not _indexed(db):
        return
    rows = [(session_id,) for session_id in session_ids]
    db.executemany(  # from the kept text: a message lost behind foliko's back goes too
        """INSERT INTO messages_fts (messages_fts, rowid, text)
           SELECT 'delete', id, text FROM message_search WHERE session_id = ?""",
        rows,
    )
    db.executemany("DELETE FROM message_search WHERE session_id = ?", rows)


def optimize_index(db: sqlite3.Connection) -> None:
    """Merge the index into one segment: what was deleted from it is then gone
    from its pages too (FTS5 otherwise keeps a deleted entry's words, marked
    deleted, until its segments merge)."""
    if _indexed(db):
        db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")


def index_problems(db: sqlite3.Connection, *, whole: bool = True) -> list[str]:
    """Why the index does not hold exactly what the messages do: rows of sessions
    that are gone, or (``whole``: no session is damaged, which would explain
    it) an index that differs from its messages (FTS5's own integrity check)."""
    if not _indexed(db):
        return []
    problems = []
    (stale,) = db.execute(
        """SELECT COUNT(*) FROM message_search s WHERE NOT EXISTS (SELECT 1 FROM messages m
           WHERE m.session_id = s.session_id AND m.seq = s.seq) AND NOT EXISTS
           (SELECT 1 FROM sessions WHERE sessions.session_id = s.session_id)"""
    ).fetchone()
    if stale:
        problems.append(f"the search index holds {stale} message(s) that are gone")
    if not whole:
        return problems
    try:
        db.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
    except sqlite3.DatabaseError as exc:
        problems.append(f"the search index differs from its messages ({exc})")
    return problems


def rebuild_index(db: sqlite3.Connection) -> None:
    """Drop the rows of messages that are gone, and build the index again from the rest."""
    if _indexed(db):
        db.execute(
            """DELETE FROM message_search WHERE NOT EXISTS (SELECT 1 FROM messages m
               WHERE m.session_id = message_search.session_id AND m.seq = message_search.seq)"""
        )
        db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")


def rename_indexed(db: sqlite3.Connection, old_id: str, new_id: str) -> None:
    if _indexed(db):
        db.execute(
            "UPDATE message_search SET session_id = ? WHERE session_id = ?", (new_id, old_id)
        )


def fts5_expression(terms: tuple[Term, ...]) -> str:
    """FTS5 MATCH syntax for ``terms``: every token quoted, so nothing the user
    typed is read as an operator."""
    parts = []
    for term in terms:
        phrase = " ".join(token.replace('"', '""') for token in term.tokens)
        parts.append(f'"{phrase}"' + (" *" if term.prefix else ""))
    return " AND ".join(parts)


def search(db: sqlite3.Connection, query: SearchQuery, where: str) -> list[SearchHit] | None:
    """The best ``query.limit`` hits by bm25, or None when there is no index;
    ``where`` names the database in a damaged message's report.

    The query language is imported here: every write loads this module, few search.
    A hit's text is its kept text, if its message still exists (an EXISTS on
    the key: a join with the ``message_texts`` view would have SQLite
    materialise the whole view, every message, on each search).
    """
    from foliko_cli.storage.search import SearchHit, snippet_for

    if not _indexed(db):
        return None
    filters: list[str] = []
    params: list[str | int] = [fts5_expression(query.terms)]
    if query.session_id is not None:
        filters.append("s.session_id = ?")
        params.append(query.session_id)
    if query.session_prefix:
        filters.append("s.session_id >= ? AND s.session_id < ?")
        params += [query.session_prefix, successor(query.session_prefix)]
    if query.role is not None:
        filters.append("s.role = ?")
        params.append(query.role)
    if query.since is not None:
        filters.append("s.created_at >= ?")
        params.append(bounded(query.since))
    where = "".join(f" AND {f}" for f in filters)
    try:
        rows = db.execute(
            f"""WITH top AS (
                    SELECT f.rowid AS id, bm25(messages_fts) AS score FROM messages_fts f
                    JOIN message_search s ON s.id = f.rowid
                    WHERE messages_fts MATCH ?{where}
                    ORDER BY score, s.created_at DESC LIMIT ?)
                SELECT s.session_id, s.seq, s.role, s.created_at, top.score,
                    CASE WHEN EXISTS (SELECT 1 FROM messages m
                                      WHERE m.session_id = s.session_id AND m.seq = s.seq)
                    THEN s.text END
                FROM top JOIN message_search s ON s.id = top.id
                ORDER BY top.score, s.created_at DESC, s.session_id, s.seq""",
            [*params, bounded(query.limit)],
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "fts5" in str(exc) or "syntax" in str(exc):
            raise UsageError(
                f"SQLite cannot read the search query {query.text!r}: {exc}",
                fix="search for plain words",
            ) from None
        raise
    hits, damaged = [], set()
    for session_id, seq, role, created_at, score, text in rows:
        if text is None:  # the indexed message is gone or has no text: damaged
            damage = f"the message at seq {seq} is gone or has no text"
            query.unreadable(CorruptSessionError(session_id, where, damage))
            damaged.add(session_id)
            continue
        snippet, spans = snippet_for(text, query.terms)
        hits.append(SearchHit(session_id, seq, role, created_at, snippet, spans, -score))
    return [hit for hit in hits if hit.session_id not in damaged]
