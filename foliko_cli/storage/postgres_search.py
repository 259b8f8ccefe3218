"""PostgreSQL full-text search over message text: a GIN index.

``messages.search_vector`` is a stored generated column,
``to_tsvector('simple', message_text(body))``, so PostgreSQL itself keeps it
and its index in step in every transaction that writes messages, and the
writers need no change; ranking reads the stored vectors instead of parsing
every matching body again. The ``simple`` configuration lowercases words
and does no stemming or stop words, so every language is searched alike.

``message_text`` reads the content out of the JSON body. JSON escapes a NUL
as ``\\u0000``, which ``jsonb`` refuses: such bodies are read without it. A
body that is not JSON at all (a corrupt row ``storage check`` reports) reads
as no text. So writing a message never fails because of the index.

The query is built as a ``to_tsquery`` expression from the parsed terms,
each word quoted: ``websearch_to_tsquery`` has no prefix search.

Only a message's first INDEXED_CHARS characters are indexed (a tsvector
holds at most 1 MB); that text is also stored, as the generated column
``indexed_text``, and snippets are cut in Python from it
(``search.snippet_for``), so neither grows with a message's size.
"""

from __future__ import annotations

from foliko_cli.storage.search import (
    INDEXED_CHARS,
    SearchHit,
    SearchQuery,
    Term,
    snippet_for,
)
from foliko_cli.storage.sql.executor import Executor, bounded

_CONTENT = "(body::jsonb) ->> 'content'"
_CONTENT_WITHOUT_NUL = "(replace(body, '\\u0000', '')::jsonb) ->> 'content'"


def _text_function(schema: str, indexed: str) -> str:
    """``message_text``: the content out of a JSON body, ``indexed`` applied to it."""
    return f"""CREATE OR REPLACE FUNCTION {schema}.message_text(body TEXT) RETURNS TEXT
            LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
            BEGIN
                RETURN {indexed.format(_CONTENT)};
            EXCEPTION WHEN others THEN
                BEGIN
                    RETURN {indexed.format(_CONTENT_WITHOUT_NUL)};
                EXCEPTION WHEN others THEN
                    RETURN '';
                END;
            END $$"""


async def _add_vector(db: Executor, schema: str) -> None:
    await db.execute(
        f"""ALTER TABLE {schema}.messages ADD COLUMN IF NOT EXISTS search_vector tsvector
            GENERATED ALWAYS AS (to_tsvector('simple', {schema}.message_text(body))) STORED"""
    )
    await db.execute(
        f"""CREATE INDEX IF NOT EXISTS messages_text_search ON {schema}.messages
            USING gin (search_vector)"""
    )


async def create_index(db: Executor, schema: str) -> None:
    """The migration step: the text function and the index (built from what is stored)."""
    await db.execute(_text_function(schema, "{}"))
    await _add_vector(db, schema)


async def bound_indexed_text(db: Executor, schema: str) -> None:
    """The migration step that indexes only a message's first INDEXED_CHARS
    characters (a longer text could pass the 1 MB a tsvector may take, and
    its write failed): the function again, the vectors made again from it."""
    await db.execute(_text_function(schema, f"left({{}}, {INDEXED_CHARS})"))
    await db.execute(f"ALTER TABLE {schema}.messages DROP COLUMN IF EXISTS search_vector")
    await _add_vector(db, schema)


async def keep_indexed_text(db: Executor, schema: str) -> None:
    """The migration step that stores each message's indexed text beside it
    (``indexed_text``), so a hit's snippet is cut from at most INDEXED_CHARS
    characters without parsing its body again: a query that matches a 10 MB
    message no longer reads 10 MB of JSON."""
    await db.execute(
        f"""ALTER TABLE {schema}.messages ADD COLUMN IF NOT EXISTS indexed_text TEXT
            GENERATED ALWAYS AS ({schema}.message_text(body)) STORED"""
    )


def tsquery_expression(terms: tuple[Term, ...]) -> str:
    """``to_tsquery`` syntax for ``terms``: every word quoted as a lexeme."""
    parts = []
    for term in terms:
        words = [f"'{token.replace(chr(39), chr(39) * 2)}'" for token in term.tokens]
        if term.prefix:
            words[-1] += ":*"
        parts.append(words[0] if len(words) == 1 else "(" + " <-> ".join(words) + ")")
    return " & ".join(parts)


async def search(db: Executor, schema: str, query: SearchQuery) -> list[SearchHit]:
    """The best ``query.limit`` hits by ts_rank, with their snippets (search.snippet_for)."""
    vector = "m.search_vector"
    filters: list[str] = []
    params: list[str | int] = [tsquery_expression(query.terms)]
    if query.session_id is not None:
        filters.append("m.session_id = %s")
        params.append(query.session_id)
    if query.session_prefix:
        filters.append("starts_with(m.session_id, %s)")
        params.append(query.session_prefix)
    if query.role is not None:
        filters.append("m.role = %s")
        params.append(query.role)
    if query.since is not None:
        filters.append("m.created_at >= %s")
        params.append(bounded(query.since))
    where = "".join(f" AND {f}" for f in filters)
    rows = await db.fetchall(
        f"""WITH q AS (SELECT to_tsquery('simple', %s) AS q),
            top AS (
                SELECT m.session_id, m.seq, m.role, m.created_at,
                    ts_rank({vector}, q.q) AS score
                FROM {schema}.messages m, q WHERE {vector} @@ q.q{where}
                ORDER BY score DESC, m.created_at DESC LIMIT %s)
            SELECT top.session_id, top.seq, top.role, top.created_at, top.score,
                m.indexed_text
            FROM top JOIN {schema}.messages m
                ON m.session_id = top.session_id AND m.seq = top.seq
            ORDER BY top.score DESC, top.created_at DESC, top.session_id, top.seq""",
        [*params, bounded(query.limit)],
    )
    hits = []
    for session_id, seq, role, created_at, score, text in rows:
        snippet, spans = snippet_for(text or "", query.terms)
        hits.append(SearchHit(session_id, seq, role, created_at, snippet, spans, float(score)))
    return hits
