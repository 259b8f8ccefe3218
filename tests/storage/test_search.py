"""Searching message text on every backend: the same query language and results
from SQLite's FTS5 index, PostgreSQL's GIN index and the scan the others use."""

from __future__ import annotations

import contextlib
import itertools
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from foliko_cli.errors import UsageError
from foliko_cli.messages.record import SessionRecord, SessionState, new_metadata
from foliko_cli.storage import capabilities, open_storage
from foliko_cli.storage.search import (
    SearchQuery,
    Term,
    parse_query,
    search,
)
from foliko_cli.storage.sqlite import MIGRATIONS, SQLiteStorage

from . import services

FOLIKO = Path(sys.executable).with_name("foliko")
T0 = 1_700_000_000_000

CONVERSATION = [
    ("user", "How do I deploy the service to Kubernetes?"),
    ("assistant", "Build the image, push it, then apply the deployment manifest."),
    ("user", "The rollout says connection refused on port 8080"),
    ("assistant", "Connection refused means nothing listens there: check the container port."),
    ("user", "Die Größe des Clusters in 東京 ist klein"),
    ("assistant", "Größere Cluster brauchen mehr Knoten."),
]


def messages(pairs, at: int = T0) -> list[dict]:
    return [
        {"role": role, "content": text, "created_at": at + i * 1000}
        for i, (role, text) in enumerate(pairs)
    ]


def find(run, storage, text: str, **filters) -> list:
    return run(search(storage, SearchQuery(text, parse_query(text), **filters)))


def where(hits) -> list[tuple[str, int]]:
    return [(hit.session_id, hit.seq) for hit in hits]


@pytest.fixture
def stored(storage, run):
    run(
        storage.save(SessionRecord("ops", messages=messages(CONVERSATION), metadata=new_metadata()))
    )
    other = [("user", "What is the deployment frequency?"), ("assistant", "Weekly.")]
    run(storage.save(SessionRecord("other", messages=messages(other, T0 + 60_000))))
    return storage


def test_a_word_finds_every_message_holding_it_case_insensitively(stored, run):
    hits = find(run, stored, "REFUSED")
    assert sorted(where(hits)) == [("ops", 2), ("ops", 3)]
    assert {hit.role for hit in hits} == {"user", "assistant"}
    for hit in hits:
        spans = [hit.snippet[a:b].lower() for a, b in hit.matches]
        assert spans == ["refused"]
        assert "[" in hit.marked() and hit.marked().count("[") == hit.marked().count("]")


def test_every_word_must_be_present(stored, run):
    assert where(find(run, stored, "connection container")) == [("ops", 3)]
    assert find(run, stored, "connection kubernetes") == []


def test_a_phrase_matches_only_those_words_in_that_order(stored, run):
    assert sorted(where(find(run, stored, '"connection refused"'))) == [("ops", 2), ("ops", 3)]
    assert find(run, stored, '"refused connection"') == []
    assert where(find(run, stored, '"check the container"')) == [("ops", 3)]


def test_a_prefix_finds_words_that_begin_with_it(stored, run):
    found = sorted(where(find(run, stored, "deplo*")))
    assert found == [("ops", 0), ("ops", 1), ("other", 0)]
    assert find(run, stored, "deplo") == []
    assert sorted(where(find(run, stored, '"connection ref"*'))) == [("ops", 2), ("ops", 3)]


def test_unicode_words_match_exactly_with_accents(stored, run):
    assert where(find(run, stored, "Größe")) == [("ops", 4)]
    assert where(find(run, stored, "größe")) == [("ops", 4)]
    assert where(find(run, stored, "東京")) == [("ops", 4)]
    assert sorted(where(find(run, stored, "Größ*"))) == [("ops", 4), ("ops", 5)]
    hit = find(run, stored, "東京")[0]
    assert [hit.snippet[a:b] for a, b in hit.matches] == ["東京"]


def test_punctuation_in_a_query_is_text_never_engine_syntax(stored, run):
    for text in ["refused)", "(refused", "-refused", "refused:", "'refused'", "{refused}^"]:
        assert sorted(where(find(run, stored, text))) == [("ops", 2), ("ops", 3)], text
    for text in ["NEAR(connection refused)", "refused OR kubernetes", "role:user refused"]:
        assert find(run, stored, text) == [], text  # NEAR, OR and role are words to find


def test_filters_by_session_role_and_time(stored, run):
    assert sorted(where(find(run, stored, "deplo*", session_id="other"))) == [("other", 0)]
    assert where(find(run, stored, "deplo*", role="assistant")) == [("ops", 1)]
    assert where(find(run, stored, "deplo*", since=T0 + 30_000)) == [("other", 0)]
    assert find(run, stored, "deplo*", session_id="nobody") == []


def test_the_limit_keeps_the_best(stored, run):
    all_hits = find(run, stored, "deplo*")
    first = find(run, stored, "deplo*", limit=1)
    assert where(first) == where(all_hits)[:1]
    assert all(a.score >= b.score for a, b in itertools.pairwise(all_hits))


def test_a_limit_or_time_beyond_any_stores_integers_means_what_it_says(stored, run):
    all_hits = where(find(run, stored, "deplo*"))
    assert where(find(run, stored, "deplo*", limit=10**30)) == all_hits
    assert where(find(run, stored, "deplo*", since=-(10**30))) == all_hits
    assert find(run, stored, "deplo*", since=10**30) == []


def test_appends_replacements_renames_and_deletes_keep_the_index_in_step(stored, run):
    record = run(capabilities.load_state(stored, "ops"))
    state = SessionState(record.variables, record.metadata, record.compression_state)
    new = [{"role": "user", "content": "zebra crossing", "created_at": T0 + 99_000}]
    run(stored.append("ops", new, state, expected_revision=record.revision))
    assert where(find(run, stored, "zebra")) == [("ops", 6)]

    run(capabilities.rename(stored, "ops", "ops2"))
    assert where(find(run, stored, "zebra")) == [("ops2", 6)]

    run(stored.save(SessionRecord("ops2", messages=messages([("user", "only giraffes")]))))
    assert find(run, stored, "zebra") == []
    assert where(find(run, stored, "giraffes")) == [("ops2", 0)]

    run(stored.delete("ops2"))
    assert find(run, stored, "giraffes") == []
    assert sorted(where(find(run, stored, "deplo*"))) == [("other", 0)]


def test_a_session_of_ten_thousand_messages(storage, run):
    pairs = [
        ("user" if i % 2 == 0 else "assistant", f"note number {i} about work")
        for i in range(10_000)
    ]
    pairs[7_777] = ("assistant", "the needle is here")
    run(storage.save(SessionRecord("long", messages=messages(pairs))))
    assert where(find(run, storage, "needle")) == [("long", 7_777)]
    assert len(find(run, storage, "note", limit=50)) == 50


@pytest.mark.parametrize(
    "text",
    ['"unclosed phrase', "", "   ", "***", "*word", "wo*rd", '""', "!!! ???"],
)
def test_queries_that_cannot_be_read_are_usage_errors(text):
    with pytest.raises(UsageError) as caught:
        parse_query(text)
    assert caught.value.exit_code == 2


def test_the_parser_reads_words_phrases_and_prefixes():
    assert parse_query('deploy* "Connection  Refused" e-mail "a b"* c') == (
        Term(("deploy",), True),
        Term(("connection", "refused"), False),
        Term(("e", "mail"), False),
        Term(("a", "b"), True),
        Term(("c",), False),
    )


def test_an_existing_database_is_indexed_when_the_migration_runs(tmp_path, run):
    path = tmp_path / "old.db"
    storage = SQLiteStorage(path)
    run(storage.save(SessionRecord("s", messages=messages(CONVERSATION))))
    run(storage.close())
    before = [step.__name__ for step in MIGRATIONS].index("create_search_index")
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE messages_fts")
        db.execute("DROP VIEW message_texts")
        db.execute("DROP TABLE message_search")
        db.execute("DELETE FROM schema_migrations WHERE version > ?", (before,))
        db.execute(f"PRAGMA user_version = {before}")
    reopened = SQLiteStorage(path)
    try:
        assert where(find(run, reopened, "kubernetes")) == [("s", 0)]
        tables = {r[0] for r in reopened.db.execute("SELECT name FROM sqlite_master")}
        assert {"messages_fts", "message_search"} <= tables
    finally:
        run(reopened.close())


def test_sqlite_searches_its_index(tmp_path, run):
    storage = SQLiteStorage(tmp_path / "x.db")
    try:
        run(storage.save(SessionRecord("s", messages=messages(CONVERSATION))))
        plan = storage.db.execute(
            "EXPLAIN QUERY PLAN SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'x'"
        ).fetchall()
        assert any("VIRTUAL TABLE INDEX" in str(row) for row in plan)
        count = storage.db.execute("SELECT COUNT(*) FROM message_search").fetchone()[0]
        assert count == len(CONVERSATION)
    finally:
        run(storage.close())


def test_a_message_another_process_wrote_is_found_at_once(storage_url, tmp_path, run):
    storage = open_storage(storage_url, tmp_path / "home")
    try:
        run(storage.save(SessionRecord("mine", messages=messages(CONVERSATION))))
        assert find(run, storage, "Flamingo") == []
        env = {**os.environ, "FOLIKO_MODEL": "echo", "FOLIKO_HOME": str(tmp_path / "home")}
        written = subprocess.run(
            [str(FOLIKO), "--storage", storage_url, "chat", "-s", "theirs", "pink Flamingo"],
            env=env,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        assert written.returncode == 0, written.stderr.decode()
        hits = find(run, storage, "flamingo", role="user")
        assert where(hits) == [("theirs", 0)]
    finally:
        run(storage.close())


@contextlib.contextmanager
def _sqlite_at(tmp_path: Path):
    yield SQLiteStorage(tmp_path / "x.db")


@contextlib.contextmanager
def _postgres_at(tmp_path: Path):
    services.require_postgres()
    with services.postgres_storage() as storage:
        yield storage


@pytest.mark.parametrize(
    ("opened", "translator", "broken"),
    [
        (_sqlite_at, "foliko_cli.storage.sqlite_search.fts5_expression", "AND AND ("),
        (_postgres_at, "foliko_cli.storage.postgres_search.tsquery_expression", "&& ('"),
    ],
    ids=["sqlite", "postgres"],
)
def test_a_query_the_engine_rejects_is_a_usage_error(
    tmp_path, run, monkeypatch, opened, translator, broken
):
    """The translators never emit bad syntax; if an engine still refuses one, the
    user gets exit 2 with the engine's reason, and the storage stays usable."""
    with opened(tmp_path) as storage:
        try:
            run(storage.save(SessionRecord("ops", messages=messages(CONVERSATION))))
            monkeypatch.setattr(translator, lambda terms: broken)
            with pytest.raises(UsageError) as caught:
                find(run, storage, "refused")
            assert caught.value.exit_code == 2
            assert "cannot read the search query 'refused'" in str(caught.value)
            monkeypatch.undo()
            assert len(find(run, storage, "refused")) == 2
        finally:
            run(storage.close())


def test_without_fts5_sqlite_writes_as_before_and_search_scans(tmp_path, run, monkeypatch):
    monkeypatch.setattr("foliko_cli.storage.sqlite_search.fts5_available", lambda: False)
    storage = SQLiteStorage(tmp_path / "plain.db")
    try:
        run(storage.save(SessionRecord("s", messages=messages(CONVERSATION))))
        tables = {r[0] for r in storage.db.execute("SELECT name FROM sqlite_master")}
        assert not tables & {"messages_fts", "message_search", "message_texts"}
        run(capabilities.rename(storage, "s", "t"))
        assert sorted(where(find(run, storage, '"connection refused"'))) == [("t", 2), ("t", 3)]
        assert run(storage.delete("t")) is True
        assert find(run, storage, "refused") == []
    finally:
        run(storage.close())


def test_an_existing_postgres_schema_is_indexed_when_the_migration_runs(run):
    import psycopg

    from foliko_cli.storage.postgres import MIGRATIONS as PG_MIGRATIONS
    from foliko_cli.storage.postgres import PostgresStorage

    url = services.require_postgres()
    with services.fresh_schema(url) as schema:
        first = PostgresStorage(url, schema=schema)
        try:
            run(first.save(SessionRecord("s", messages=messages(CONVERSATION))))
        finally:
            run(first.close())
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f'DROP FUNCTION "{schema}".message_text CASCADE')  # and its columns
            db.execute(
                f'DELETE FROM "{schema}".schema_migrations WHERE version > %s',
                ([step.__name__ for step in PG_MIGRATIONS].index("bound_search_text"),),
            )
        reopened = PostgresStorage(url, schema=schema)
        try:
            assert where(find(run, reopened, "kubernetes")) == [("s", 0)]
            with psycopg.connect(url, autocommit=True) as db:
                indexes = db.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,)
                ).fetchall()
            assert ("messages_text_search",) in indexes
        finally:
            run(reopened.close())


def test_overlapping_terms_are_marked_once(stored, run):
    [hit] = find(run, stored, '"container port" port')
    assert hit.marked().count("[") == 1
    assert "[container port]" in hit.marked()


# messages of any size


def huge_text(size: int, marker: str, at: int) -> str:
    """``size`` characters of words, most of them distinct (as PostgreSQL's
    tsvector limit is about distinct words), ``marker`` at character ``at``."""
    words = (f"lorem w{n}x" for n in range(size // 8 + 1))
    filler = " ".join(words)[:size]
    return filler[:at] + f" {marker} " + filler[at : size - len(marker) - 2]


@pytest.mark.parametrize("megabytes", [10, 15])
def test_a_huge_message_is_stored_whole_and_found_by_its_first_part(storage, run, megabytes):
    from foliko_cli.storage.search import INDEXED_CHARS

    size = megabytes * 1024 * 1024
    early = huge_text(size, "needleearly", 1_000)
    text = early[: INDEXED_CHARS + 1000] + " needlelate " + early[INDEXED_CHARS + 1000 :]
    pairs = [("user", text), ("assistant", "short answer about needleearly")]
    record = SessionRecord("big", messages=messages(pairs))
    run(storage.save(record))

    assert run(storage.load("big")).messages[0]["content"] == text
    early_hits = find(run, storage, "needleearly")
    assert sorted(where(early_hits)) == [("big", 0), ("big", 1)]
    assert all("needleearly" in hit.snippet for hit in early_hits)
    assert all(len(hit.snippet) < 400 for hit in early_hits)
    assert where(find(run, storage, "lorem", role="assistant")) == []
    late = where(find(run, storage, "needlelate"))
    assert late in ([], [("big", 0)]), "past the indexed part a scan may still find it"


def test_the_indexes_take_the_same_prefix():
    from foliko_cli.storage import sqlite_search
    from foliko_cli.storage.search import INDEXED_CHARS

    assert sqlite_search._INDEXED_CHARS == INDEXED_CHARS


def test_a_database_indexed_whole_is_bounded_when_the_migration_runs(tmp_path, run):
    from foliko_cli.storage.search import INDEXED_CHARS

    path = tmp_path / "old.db"
    text = huge_text(INDEXED_CHARS * 2, "early", 10) + " lateword"
    storage = SQLiteStorage(path)
    run(storage.save(SessionRecord("s", messages=messages([("user", text), ("assistant", "ok")]))))
    run(storage.close())
    bounded = [step.__name__ for step in MIGRATIONS].index("bound_search_text")
    with sqlite3.connect(path) as db:  # the view and the index as they were before
        db.execute("DROP VIEW message_texts")
        db.execute(
            """CREATE VIEW message_texts (id, session_id, seq, text) AS
            SELECT s.id, s.session_id, s.seq, CAST(json_extract(CAST(m.body AS TEXT),
            '$.content') AS TEXT) FROM message_search s
            JOIN messages m ON m.session_id = s.session_id AND m.seq = s.seq"""
        )
        db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")
        db.execute("DELETE FROM schema_migrations WHERE version > ?", (bounded,))
        db.execute(f"PRAGMA user_version = {bounded}")
    old = sqlite3.connect(path)
    assert old.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'lateword'"
    ).fetchall()
    old.close()
    reopened = SQLiteStorage(path)
    try:
        assert where(find(run, reopened, "early")) == [("s", 0)]
        assert find(run, reopened, "lateword") == []
        run(reopened.delete("s"))  # the index's delete reads the same bounded text
        assert reopened.db.execute(
            "INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')"
        )
    finally:
        run(reopened.close())


def test_a_database_without_kept_texts_gets_them_when_the_migration_runs(tmp_path, run):
    path = tmp_path / "old.db"
    storage = SQLiteStorage(path)
    run(storage.save(SessionRecord("s", messages=messages(CONVERSATION))))
    run(storage.close())
    kept = [step.__name__ for step in MIGRATIONS].index("keep_indexed_text")
    with sqlite3.connect(path) as db:  # the table and the view as they were before
        db.execute("DROP VIEW message_texts")
        db.execute("ALTER TABLE message_search DROP COLUMN text")
        db.execute(
            """CREATE VIEW message_texts (id, session_id, seq, text) AS
            SELECT s.id, s.session_id, s.seq, substr(CAST(json_extract(CAST(m.body AS TEXT),
            '$.content') AS TEXT), 1, 250000) FROM message_search s
            JOIN messages m ON m.session_id = s.session_id AND m.seq = s.seq"""
        )
        db.execute("DELETE FROM schema_migrations WHERE version > ?", (kept,))
        db.execute(f"PRAGMA user_version = {kept}")
    reopened = SQLiteStorage(path)
    try:
        texts = reopened.db.execute("SELECT seq, text FROM message_search ORDER BY seq").fetchall()
        assert texts == [(seq, text) for seq, (_, text) in enumerate(CONVERSATION)]
        (hit,) = find(run, reopened, "kubernetes")
        assert "kubernetes" in hit.snippet.lower()
        check = "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)"
        reopened.db.execute(check)  # the kept texts are what the index holds
        run(reopened.delete("s"))  # the index's delete reads the kept text
        reopened.db.execute(check)
    finally:
        run(reopened.close())


@pytest.mark.parametrize("inner", ["sqlite", "postgres"])
def test_a_user_s_search_uses_the_index_of_what_it_wraps_and_sees_only_theirs(
    tmp_path, run, monkeypatch, inner
):
    from foliko_cli.storage import search as search_module
    from foliko_cli.storage.scoped import UserScopedStorage

    with contextlib.ExitStack() as stack:
        if inner == "sqlite":
            shared = SQLiteStorage(tmp_path / "shared.db")
            stack.callback(lambda: run(shared.close()))
        else:
            services.require_postgres()
            shared = stack.enter_context(services.postgres_storage())
        alice = UserScopedStorage(shared, "alice", owns_inner=False)
        bob = UserScopedStorage(shared, "bob", owns_inner=False)
        run(alice.save(SessionRecord("ops", messages=messages(CONVERSATION))))
        run(bob.save(SessionRecord("ops", messages=messages(CONVERSATION))))
        run(bob.save(SessionRecord("bobs", messages=messages(CONVERSATION))))
        run(shared.save(SessionRecord("~alicex~/ops", messages=messages(CONVERSATION))))

        def no_scan(*args):
            raise AssertionError("a user's search read every session")

        monkeypatch.setattr(search_module, "scan_search", no_scan)
        assert sorted(where(find(run, alice, "refused"))) == [("ops", 2), ("ops", 3)]
        assert where(find(run, alice, "kubernetes", session_id="ops")) == [("ops", 0)]
        assert find(run, alice, "kubernetes", session_id="bobs") == []
        assert sorted(where(find(run, bob, "kubernetes"))) == [("bobs", 0), ("ops", 0)]
