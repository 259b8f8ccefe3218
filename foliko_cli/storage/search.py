"""Searching message text: the query language, the optional capability, a scan.

A query is words, ``"exact phrases"`` and ``prefix*`` words (``"a phra"*``
ends a phrase with a prefix); a message matches when it holds every one of
them. Words are runs of letters and digits,
compared case-insensitively (diacritics count: "Größe" is not "Grosse").
Every backend reads the same ``SearchQuery``: SQLite and PostgreSQL translate
its terms into their own full-text syntax (never passing the user's text
through), the others run ``scan_search`` over their records.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol, runtime_checkable

from foliko_cli.errors import CorruptSessionError, UsageError

WORD = re.compile(r"[^\W_]+")
INDEXED_CHARS = 250_000
"""How much of a message's text the full-text indexes take: a message of any
size is stored whole and found by the words in its first INDEXED_CHARS
characters (at 4 bytes a character at most, under PostgreSQL's 1 MB a tsvector)."""
SNIPPET_SCAN_CHARS = 20_000
"""How much of a long text around its first match a snippet is cut from."""
SNIPPET_WORDS = 16
ELLIPSIS = "…"


class Term(NamedTuple):
    """One required word (one token) or phrase (several); ``prefix``: the last
    token matches any word it begins."""

    tokens: tuple[str, ...]
    prefix: bool = False


class SearchQuery(NamedTuple):
    """What to search for; ``on_unreadable`` is given each damaged session (or
    message) a search leaves out (without it, the damage is raised)."""

    text: str
    terms: tuple[Term, ...]
    session_id: str | None = None
    role: str | None = None
    since: int | None = None
    limit: int = 20
    on_unreadable: Callable[[CorruptSessionError], None] | None = None
    session_prefix: str | None = None
    """Only sessions whose stored id begins with it (one user's, under a
    ``UserScopedStorage``)."""

    def unreadable(self, damage: CorruptSessionError) -> None:
        """Leave ``damage`` out and report it, or raise it when the search is of
        that session alone or there is no one to report it to."""
        if self.on_unreadable is None or self.session_id is not None:
            raise damage
        self.on_unreadable(damage)


class SearchHit(NamedTuple):
    """A message that matched: ``snippet`` is plain text, ``matches`` the
    (start, end) character spans of the matching words inside it."""

    session_id: str
    seq: int
    role: str
    created_at: int
    snippet: str
    matches: tuple[tuple[int, int], ...]
    score: float

    def marked(self, start: str = "[", end: str = "]") -> str:
        """The snippet with each match between ``start`` and ``end``."""
        parts, last = [], 0
        for begin, finish in self.matches:
            parts += [self.snippet[last:begin], start, self.snippet[begin:finish], end]
            last = finish
        parts.append(self.snippet[last:])
        return "".join(parts)

    def to_dict(self) -> dict[str, Any]:
        first = self.matches[0] if self.matches else (0, 0)
        return {
            "session_id": self.session_id,
            "seq": self.seq,
            "role": self.role,
            "created_at": self.created_at,
            "snippet": self.snippet,
            "marked": self.marked(),
            "match_start": first[0],
            "match_end": first[1],
            "matches": [list(span) for span in self.matches],
            "score": self.score,
        }


@runtime_checkable
class Searchable(Protocol):
    """A backend that searches its own index (SQLite FTS5, PostgreSQL)."""

    async def search(self, query: SearchQuery) -> list[SearchHit]: ...


def tokens(text: str) -> list[str]:
    return [word.lower() for word in WORD.findall(text)]


def parse_query(text: str) -> tuple[Term, ...]:
    """The terms of a user's query; UsageError when it cannot be read."""
    if text.count('"') % 2:
        raise UsageError(
            f"the search query {text!r} has an unclosed quote",
            fix='close it: "exact phrase"',
        )
    terms: list[Term] = []
    phrase_ended = False
    for number, chunk in enumerate(text.split('"')):
        if number % 2:
            phrase = chunk.strip()
            prefix = phrase.endswith("*")
            _check_stars(phrase.removesuffix("*"), text)
            words = tokens(phrase)
            if words:
                terms.append(Term(tuple(words), prefix))
            phrase_ended = bool(words)
            continue
        if chunk.startswith("*") and phrase_ended:
            terms[-1] = terms[-1]._replace(prefix=True)  # "a phrase"*
            chunk = chunk[1:]
        for part in chunk.split():
            prefix = part.endswith("*")
            _check_stars(part.removesuffix("*"), text)
            words = tokens(part)
            if words:
                terms.append(Term(tuple(words), prefix))
    if not terms:
        raise UsageError(
            f"the search query {text!r} has no words to look for",
            fix='give words, "a phrase" or a prefix like deplo*',
        )
    return tuple(terms)


def _check_stars(part: str, query: str) -> None:
    if "*" in part:
        raise UsageError(
            f"the search query {query!r} has a * inside a word",
            fix="a * may only end a word, for a prefix search (deplo*)",
        )


def _word_spans(text: str) -> list[tuple[str, int, int]]:
    return [(m.group().lower(), m.start(), m.end()) for m in WORD.finditer(text)]


def _term_matches(words: list[tuple[str, int, int]], term: Term) -> Iterable[tuple[int, int]]:
    """Word-index ranges where ``term`` occurs."""
    size = len(term.tokens)
    for start in range(len(words) - size + 1):
        for offset, token in enumerate(term.tokens):
            word = words[start + offset][0]
            last = offset == size - 1
            if not (word.startswith(token) if last and term.prefix else word == token):
                break
        else:
            yield start, start + size


def find_matches(text: str, terms: tuple[Term, ...]) -> list[tuple[int, int]] | None:
    """Character spans of every term's occurrences, or None when a term is missing."""
    words = _word_spans(text)
    ranges: list[tuple[int, int]] = []
    for term in terms:
        found = list(_term_matches(words, term))
        if not found:
            return None
        ranges += found
    return merge_spans(text, {(words[a][1], words[b - 1][2]) for a, b in ranges})


def merge_spans(text: str, spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans, those that overlap or only have spaces between them joined:
    every engine then marks a phrase, and neighbouring matches, as one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and (start <= merged[-1][1] or not text[merged[-1][1] : start].strip()):
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def snippet_around(
    text: str, spans: list[tuple[int, int]]
) -> tuple[str, tuple[tuple[int, int], ...]]:
    """About SNIPPET_WORDS words of ``text`` around its first match, on one line,
    with the spans that fall inside re-based onto the snippet."""
    words = [(m.start(), m.end()) for m in WORD.finditer(text)]
    first = spans[0][0]
    index = next(i for i, (start, _) in enumerate(words) if start >= first)
    begin_word = max(0, min(index - SNIPPET_WORDS // 4, len(words) - SNIPPET_WORDS))
    end_word = min(len(words), begin_word + SNIPPET_WORDS)
    begin = 0 if begin_word == 0 else words[begin_word][0]
    end = len(text) if end_word == len(words) else words[end_word - 1][1]
    return _one_line(text, begin, end, [s for s in spans if s[0] >= begin and s[1] <= end])


def snippet_for(text: str, terms: tuple[Term, ...]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The snippet of a text an index matched, its work bounded whatever the
    text's size: a long one is cut to SNIPPET_SCAN_CHARS around the first
    place one of the terms' words begins. Without a match of every term in
    that part (a phrase across its edge), the snippet starts there, unmarked."""
    begin = 0
    if len(text) > SNIPPET_SCAN_CHARS:
        begin = max(0, _first_word_at(text, terms) - SNIPPET_SCAN_CHARS // 4)
        while begin > 0 and not text[begin - 1].isspace():
            begin -= 1
    part = text[begin : begin + SNIPPET_SCAN_CHARS]
    spans = find_matches(part, terms)
    if not spans:
        words = list(WORD.finditer(part))
        end = words[SNIPPET_WORDS - 1].end() if len(words) > SNIPPET_WORDS else len(part)
        line, _ = _one_line(part, 0, end, [])
        return (ELLIPSIS + line if begin else line), ()
    line, marks = snippet_around(part, spans)
    if begin and not line.startswith(ELLIPSIS):
        line = ELLIPSIS + line
        marks = tuple((s + len(ELLIPSIS), e + len(ELLIPSIS)) for s, e in marks)
    return line, marks


def _first_word_at(text: str, terms: tuple[Term, ...]) -> int:
    found = [
        match.start()
        for term in terms
        if (match := re.search(rf"(?<![^\W_]){re.escape(term.tokens[0])}", text, re.I))
    ]
    return min(found, default=0)


def _one_line(
    text: str, begin: int, end: int, spans: list[tuple[int, int]]
) -> tuple[str, tuple[tuple[int, int], ...]]:
    """``text[begin:end]`` with whitespace runs collapsed, ellipses where it was cut."""
    pieces: list[str] = [ELLIPSIS] if begin > 0 else []
    out_spans = []
    length = len(pieces[0]) if pieces else 0
    cursor = begin
    marks = sorted([(s, 0) for s, _ in spans] + [(e, 1) for _, e in spans])
    opened = 0
    for position, kind in [*marks, (end, 2)]:
        chunk = re.sub(r"\s+", " ", text[cursor:position])
        pieces.append(chunk)
        length += len(chunk)
        if kind == 0:
            opened = length
        elif kind == 1:
            out_spans.append((opened, length))
        cursor = position
    if end < len(text.rstrip()):
        pieces.append(ELLIPSIS)
    line = "".join(pieces)
    stripped = len(line) - len(line.lstrip())
    line = line.strip()
    return line, tuple((s - stripped, e - stripped) for s, e in out_spans)


def wanted(message: dict[str, Any], query: SearchQuery) -> bool:
    """The role and time filters of ``query``."""
    if query.role is not None and message.get("role") != query.role:
        return False
    created = message.get("created_at")
    if query.since is not None and not (isinstance(created, int) and created >= query.since):
        return False
    return isinstance(message.get("content"), str)


def best_first(hits: list[SearchHit], limit: int) -> list[SearchHit]:
    hits.sort(key=lambda h: (-h.score, -h.created_at, h.session_id, h.seq))
    return hits[:limit]


async def search(storage: Any, query: SearchQuery) -> list[SearchHit]:
    """Through the backend's own index when it has one (``Searchable``), else a scan."""
    if isinstance(storage, Searchable):
        return await storage.search(query)
    return await scan_search(storage, query)


async def scan_search(storage: Any, query: SearchQuery) -> list[SearchHit]:
    """Search any backend by reading every session (no index): linear in the history.

    The score is the number of matches over the message's length in words,
    so a short message that is all about the query ranks first. Like the
    indexes, it reads the first INDEXED_CHARS characters of a message: a
    10 MB message costs a search what a 250 kB one does.
    """
    if query.session_id is not None:
        ids = [query.session_id]
    elif query.since is not None:
        ids = [s.session_id for s in await storage.list_summaries() if s.updated_at >= query.since]
    else:
        ids = await storage.session_ids()
    hits: list[SearchHit] = []
    for session_id in sorted(ids):
        try:
            record = await storage.load(session_id)
        except CorruptSessionError as damage:
            query.unreadable(damage)
            continue
        if record is None:
            continue
        for seq, message in enumerate(record.messages, start=record.first_seq):
            if not wanted(message, query):
                continue
            text = message["content"][:INDEXED_CHARS]
            spans = find_matches(text, query.terms)
            if spans is None:
                continue
            snippet, marks = snippet_around(text, spans)
            score = len(spans) / (len(WORD.findall(text)) + 1)
            hits.append(
                SearchHit(
                    session_id,
                    seq,
                    message["role"],
                    int(message.get("created_at") or 0),
                    snippet,
                    marks,
                    round(score, 6),
                )
            )
        hits = best_first(hits, query.limit) if len(hits) > 4 * query.limit else hits
    return best_first(hits, query.limit)
