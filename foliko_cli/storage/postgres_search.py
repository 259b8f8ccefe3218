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
"""

from __future__ import annotations

from typing import Any

from foliko_cli.storage.search import (
    MARK_END,
    MARK_START,
    SNIPPET_WORDS,
    SearchHit,
    SearchQuery,
    Term,
    unmark,
)

HEADLINE_OPTIONS = (
    f'StartSel="{MARK_START}", StopSel="{MARK_END}", '
    f"MaxWords={SNIPPET_WORDS}, MinWords={SNIPPET_WORDS // 2}, ShortWord=0, MaxFragments=1"
)


def create_index(db: Any, schema: str) -> None:
    """The migration step: the text function and the index (built from what is stored)."""
    db.execute(
        f"""CREATE OR REPLACE FUNCTION {schema}.message_text(body TEXT) RETURNS TEXT
            LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
            BEGIN
                RETURN (body::jsonb) ->> 'content';
            EXCEPTION WHEN others THEN
                BEGIN
                    RETURN (replace(body, '\\u0000', '')::jsonb) ->> 'content';
                EXCEPTION WHEN others THEN
                    RETURN '';
                END;
            END $$"""
    )
    db.execute(
        f"""ALTER TABLE {schema}.messages ADD COLUMN IF NOT EXISTS search_vector tsvector
            GENERATED ALWAYS AS (to_tsvector('simple', {schema}.message_text(body))) STORED"""
    )
    db.execute(
        f"""CREATE INDEX IF NOT EXISTS messages_text_search ON {schema}.messages
            USING gin (search_vector)"""
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


def search(db: Any, schema: str, query: SearchQuery) -> list[SearchHit]:
    """The best ``query.limit`` hits by ts_rank, snippets by ts_headline."""
    vector = "m.search_vector"
    filters, params = [], [tsquery_expression(query.terms)]
    if query.session_id is not None:
        filters.append("m.session_id = %s")
        params.append(query.session_id)
    if query.role is not None:
        filters.append("m.role = %s")
        params.append(query.role)
    if query.since is not None:
        filters.append("m.created_at >= %s")
        params.append(query.since)
    where = "".join(f" AND {f}" for f in filters)
    rows = db.execute(
        f"""WITH q AS (SELECT to_tsquery('simple', %s) AS q),
            top AS (
                SELECT m.session_id, m.seq, m.role, m.created_at, m.body,
                    ts_rank({vector}, q.q) AS score
                FROM {schema}.messages m, q WHERE {vector} @@ q.q{where}
                ORDER BY score DESC, m.created_at DESC LIMIT %s)
            SELECT top.session_id, top.seq, top.role, top.created_at, top.score,
                ts_headline('simple', {schema}.message_text(top.body), q.q, %s)
            FROM top, q
            ORDER BY top.score DESC, top.created_at DESC, top.session_id, top.seq""",
        [*params, query.limit, HEADLINE_OPTIONS],
    ).fetchall()
    hits = []
    for session_id, seq, role, created_at, score, marked in rows:
        snippet, spans = unmark(marked)
        hits.append(SearchHit(session_id, seq, role, created_at, snippet, spans, float(score)))
    return hits
