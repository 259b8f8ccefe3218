"""SEARCH: `sessions search` over 100,000 sessions × 10 messages, in process.

The messages are drawn from a 20,000-word vocabulary with a Zipf-like
distribution (a few words everywhere, most words rare), so queries hit
realistic numbers of messages. Each query runs through ``AsyncFoliko.search``
(the index, the ranking and the snippets; no process start-up) and must take
under 100 ms on SQLite (FTS5) and, when the server answers, PostgreSQL (GIN).
A word found in about a tenth of all messages is reported without a target:
ranking every match is linear in the matches. Quick mode: 1,000 sessions.

One more session holds a single message of BIG_MESSAGE_BYTES (10 MB, words
of the same vocabulary: a pasted document), so every query but the rarest
also matches it; ``word in the 10 MB message`` is a word found in it alone.
Search time must not grow with a message's size (issue: FTS5's snippet over
a 10 MB message took minutes).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from pathlib import Path

from common import (
    BASE_MS,
    POSTGRES_URL,
    Result,
    Workspace,
    drop_namespace,
    failed,
    log,
    main_single,
    save_records,
    server_problem,
    session_ids,
    storage_url,
)

LIMIT_S = 0.1
MESSAGES = 10
BIG_MESSAGE_BYTES = 10 * 1024 * 1024
BIG_SESSION = "big-document"
BIG_ONLY_WORD = "quuxbigword"
VOCABULARY = 20_000
WORDS_PER_MESSAGE = 12


def vocabulary() -> list[str]:
    """Pronounceable, distinct made-up words, the same on every run."""
    rng = random.Random(7)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words, key=lambda w: (len(w), w))


def records(sessions: int, words: list[str]):
    from foliko_cli.messages.record import SessionRecord, new_metadata

    rng = random.Random(11)
    weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))
    for index, session_id in enumerate(session_ids(sessions)):
        start = BASE_MS + index * 60_000
        messages = [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": " ".join(
                    rng.choices(words, cum_weights=weights, k=WORDS_PER_MESSAGE)
                ).capitalize()
                + ".",
                "created_at": start + i * 1000,
            }
            for i in range(MESSAGES)
        ]
        metadata = new_metadata(start)
        metadata["last_active"] = start + (MESSAGES - 1) * 1000
        yield SessionRecord(
            session_id, messages=messages, metadata=metadata, saved_at=metadata["last_active"]
        )
    yield big_record(rng, words, weights)


def big_record(rng: random.Random, words: list[str], weights: list[float]):
    """A session whose one message is BIG_MESSAGE_BYTES of text, BIG_ONLY_WORD
    among its first words."""
    from foliko_cli.messages.record import SessionRecord, new_metadata

    parts, size = [BIG_ONLY_WORD], len(BIG_ONLY_WORD)
    while size < BIG_MESSAGE_BYTES:
        chunk = " ".join(rng.choices(words, cum_weights=weights, k=1000))
        parts.append(chunk)
        size += len(chunk) + 1
    text = " ".join(parts)[:BIG_MESSAGE_BYTES]
    created = BASE_MS - 60_000
    message = {"role": "user", "content": text, "created_at": created}
    return SessionRecord(BIG_SESSION, messages=[message], metadata=new_metadata(created))


def queries(words: list[str]) -> dict[str, tuple[str, dict]]:
    """What a user types: a rare word, a mid word, a prefix, a phrase, a filtered word."""
    return {
        "rare word": (words[15_000], {}),
        "mid word": (words[2_000], {}),
        "prefix": (words[9_000][:-1] + "*", {}),
        "two words": (f"{words[500]} {words[700]}", {}),
        "phrase": (f'"{words[300]} {words[301]}"', {}),
        "word, assistant only": (words[3_000], {"role": "assistant"}),
        "word in the 10 MB message": (BIG_ONLY_WORD, {}),
    }


def measure(url: str, home: Path, runs: int, words: list[str]) -> dict[str, list[float]]:
    from foliko_cli.service import AsyncFoliko

    async def timed_search(service: AsyncFoliko, text: str, options: dict) -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await service.search(text, **options)
        return loop.time() - started

    async def go() -> dict[str, list[float]]:
        service = AsyncFoliko(url, "echo", home=home)
        cases = {**queries(words), f"common word ({words[0]})": (words[0], {})}
        times: dict[str, list[float]] = {}
        try:
            for name, (text, options) in cases.items():
                found = await service.search(text, **options)
                if name.startswith("common") and not found:
                    raise AssertionError(f"{name} {text!r} found nothing")
                if text == BIG_ONLY_WORD and [h.session_id for h in found] != [BIG_SESSION]:
                    raise AssertionError(f"{name} {text!r} did not find the one session: {found}")
                count = runs if not name.startswith("common") else max(1, runs // 3)
                times[name] = [await timed_search(service, text, options) for _ in range(count)]
        finally:
            await service.aclose()
        return times

    return asyncio.run(go())


def _results(backend: str, sessions: int, times: dict[str, list[float]]) -> list[Result]:
    results = []
    for name, runs in times.items():
        figure = f"{backend}: search {name}, {sessions:,} × {MESSAGES} messages"
        result = Result("SEARCH", figure, "s", runs)
        if not name.startswith("common word"):
            result.ratio, result.ratio_label = result.median / LIMIT_S, "of 100 ms"
            result.target, result.met = f"< {LIMIT_S * 1000:g} ms", result.median < LIMIT_S
        results.append(result)
    return results


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    sessions = 1_000 if quick else 100_000
    runs = 5 if quick else 15
    words = vocabulary()
    results: list[Result] = []
    home = ws.fresh("search-home")
    try:
        db = ws.dataset(
            f"search-sqlite-{sessions}-big",
            lambda d: (
                _build(storage_url("sqlite", d / "sessions.db"), d, sessions, words)
                or d / "sessions.db"
            ),
        )
        log(f"SEARCH: sqlite, {sessions:,} sessions, {runs} runs per query")
        results += _results(
            "sqlite", sessions, measure(storage_url("sqlite", db), home, runs, words)
        )
    except Exception as exc:
        results.append(
            failed("SEARCH", f"sqlite: search, {sessions:,} sessions", "s", "< 100 ms", exc)
        )
    problem = server_problem("postgresql")
    if problem is not None:
        log(f"SEARCH: PostgreSQL skipped: {problem}")
        return results
    schema = f"foliko_bench_search_{sessions}_{os.getpid()}"
    url = f"{POSTGRES_URL}?schema={schema}"
    try:
        ws.dataset(
            f"search-postgres-{sessions}-big",
            lambda d: _fresh_postgres(url, schema, d, sessions, words),
        )
        log(f"SEARCH: postgresql, {sessions:,} sessions, {runs} runs per query")
        results += _results("postgresql", sessions, measure(url, home, runs, words))
    except Exception as exc:
        results.append(
            failed("SEARCH", f"postgresql: search, {sessions:,} sessions", "s", "< 100 ms", exc)
        )
    finally:
        if not ws.keep:
            drop_namespace("postgresql", schema)
    return results


def _build(url: str, directory: Path, sessions: int, words: list[str]) -> None:
    save_records(url, directory, records(sessions, words))


def _fresh_postgres(
    url: str, schema: str, directory: Path, sessions: int, words: list[str]
) -> None:
    drop_namespace("postgresql", schema)
    _build(url, directory, sessions, words)
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
        db.execute(f'ANALYZE "{schema}".messages')


if __name__ == "__main__":
    main_single(run, __doc__)
