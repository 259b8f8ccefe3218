"""What is specific to the SQLite backend: WAL, the versioned schema, the seed's
single-table layout, file modes and files that are not (our) databases."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import orjson
import pytest

from foliko_cli.errors import CorruptSessionError, StorageError
from foliko_cli.storage import capabilities
from foliko_cli.storage.base import ProblemKind
from foliko_cli.storage.sql.dialect import SQLITE
from foliko_cli.storage.sql.executor import SQLiteExecutor, run_now
from foliko_cli.storage.sqlite import MIGRATIONS, SQLiteStorage

from .test_conformance import make_record, state, turn
from .test_jsonfile import SEED_CHAT

SEED_SCHEMA = """CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    data TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
)"""


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def opened(run):
    """Open SQLiteStorage adapters that are closed after the test."""
    adapters: list[SQLiteStorage] = []

    def open_(path: Path) -> SQLiteStorage:
        adapters.append(SQLiteStorage(path))
        return adapters[-1]

    yield open_
    for adapter in adapters:
        run(adapter.close())


def query(path: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def make_seed_database(path: Path, rows: list[tuple[str, str, int, int]]) -> None:
    db = sqlite3.connect(path)
    db.execute(SEED_SCHEMA)
    db.execute("CREATE INDEX IF NOT EXISTS idx_updated_at ON sessions(updated_at)")
    db.executemany("INSERT INTO sessions VALUES (?, ?, ?, ?)", rows)
    db.commit()
    db.close()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# the schema


def test_wal_mode_and_a_busy_timeout_are_on(db_path, opened, run):
    storage = opened(db_path)
    run(storage.save(make_record("s1")))
    assert query(db_path, "PRAGMA journal_mode") == [("wal",)]
    assert storage.db.execute("PRAGMA busy_timeout").fetchone()[0] > 0


def test_reading_a_missing_database_creates_nothing(db_path, opened, run):
    storage = opened(db_path)
    assert run(storage.session_ids()) == []
    assert run(storage.list_summaries()) == []
    assert run(storage.load("s1")) is None
    assert run(storage.revision("s1")) is None
    assert not db_path.exists()


def test_schema_version_counts_the_migrations_and_each_step_is_recorded(db_path, opened, run):
    run(opened(db_path).save(make_record("s1")))
    assert query(db_path, "PRAGMA user_version") == [(len(MIGRATIONS),)]
    steps = query(db_path, "SELECT version, name FROM schema_migrations ORDER BY version")
    assert steps == [(i, step.__name__) for i, step in enumerate(MIGRATIONS, start=1)]


def test_reopening_changes_nothing(db_path, opened, run):
    first = opened(db_path)
    run(first.save(make_record("s1", messages=turn("kept"))))
    run(first.close())
    schema = query(db_path, "SELECT type, name, sql FROM sqlite_master ORDER BY name")
    steps = query(db_path, "SELECT * FROM schema_migrations ORDER BY version")
    for _ in range(2):
        again = opened(db_path)
        assert run(again.load("s1")).messages == turn("kept")
        run(again.close())
    assert query(db_path, "SELECT type, name, sql FROM sqlite_master ORDER BY name") == schema
    assert query(db_path, "SELECT * FROM schema_migrations ORDER BY version") == steps
    assert query(db_path, "PRAGMA user_version") == [(len(MIGRATIONS),)]


@pytest.mark.parametrize("start", ["empty", "seed"])
def test_every_migration_step_can_run_twice(tmp_path, start):
    path = tmp_path / "steps.db"
    if start == "seed":
        make_seed_database(path, [("a", orjson.dumps(SEED_CHAT).decode(), 1, 2)])
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for step in MIGRATIONS:
            run_now(step(SQLiteExecutor(db), SQLITE))
            run_now(step(SQLiteExecutor(db), SQLITE))
        assert db.execute("SELECT session_id FROM sessions").fetchall() == (
            [("a",)] if start == "seed" else []
        )
    finally:
        db.close()


# the seed's single-table layout


def test_a_seed_layout_database_opens_and_its_sessions_load(db_path, opened, run):
    plain = {"sessionId": "plain", "messages": [{"role": "user", "content": "hi"}]}
    rows = [
        ("chat-1", orjson.dumps(SEED_CHAT).decode(), 1714000000000, 1714000005000),
        ("plain", orjson.dumps(plain).decode(), 1000, 2000),
    ]
    make_seed_database(db_path, rows)
    storage = opened(db_path)
    assert sorted(run(storage.session_ids())) == ["chat-1", "plain"]
    record = run(storage.load("chat-1"))
    assert [(m["role"], m["content"]) for m in record.messages] == [
        ("user", "What is the weather in Paris?"),
        ("assistant", "Let me check."),
        ("tool", '{"tempC":18}'),
        ("assistant", "It is 18 °C."),
    ]
    assert record.messages[1]["tool_calls"][0]["arguments"] == {"city": "Paris"}
    assert record.variables == SEED_CHAT["variables"]
    assert record.metadata["created_at"] == 1714000000000
    summaries = {s.session_id: s for s in run(storage.list_summaries())}
    assert summaries["chat-1"].message_count == 4
    assert summaries["chat-1"].preview == "What is the weather in Paris?"
    assert summaries["plain"].updated_at == 2000
    revision = run(storage.revision("plain"))
    run(storage.append("plain", turn("more"), state(), expected_revision=revision))
    assert run(storage.load("plain")).messages[-2:] == turn("more")
    # the seed's rows are kept as they were, beside the new tables
    assert query(db_path, "SELECT * FROM seed_sessions ORDER BY session_id") == rows


def test_a_seed_row_without_metadata_keeps_the_rows_created_at(db_path, opened, run):
    document = {"sessionId": "old", "messages": [{"role": "user", "content": "hi"}]}
    make_seed_database(db_path, [("old", orjson.dumps(document).decode(), 1000, 2000)])
    storage = opened(db_path)
    assert run(storage.load("old")).metadata["created_at"] == 1000
    assert run(storage.list_summaries())[0].created_at == 1000


def corrupt_seed_database(db_path: Path) -> None:
    document = {"sessionId": "good", "messages": [{"role": "user", "content": "hi"}]}
    make_seed_database(
        db_path,
        [
            ("good", orjson.dumps(document).decode(), 1, 2),
            ("bad", '{"sessionId": "bad", "mes', 1, 2),
        ],
    )


def test_an_unreadable_seed_row_is_reported_by_check_and_left_in_place(db_path, opened, run):
    corrupt_seed_database(db_path)
    storage = opened(db_path)
    assert run(storage.session_ids()) == ["good"]
    assert [(p.session_id, p.kind) for p in run(storage.check())] == [("bad", ProblemKind.SEED_ROW)]
    assert query(db_path, "SELECT data FROM seed_sessions WHERE session_id = 'bad'") == [
        ('{"sessionId": "bad", "mes',)
    ]


def test_loading_an_unreadable_seed_row_raises(db_path, opened, run):
    corrupt_seed_database(db_path)
    with pytest.raises(CorruptSessionError):
        run(opened(db_path).load("bad"))


def test_an_unreadable_seed_row_is_marked_in_summaries(db_path, opened, run):
    corrupt_seed_database(db_path)
    summaries = {s.session_id: s for s in run(opened(db_path).list_summaries())}
    assert summaries["good"].error is None
    assert summaries["bad"].error


# a corrupt row of our own


def corrupt_a_message(db_path: Path, opened, run) -> SQLiteStorage:
    storage = opened(db_path)
    run(storage.save(make_record("s1", messages=turn("one"))))
    run(storage.save(make_record("s2", messages=turn("two"))))
    db = sqlite3.connect(db_path)
    db.execute("UPDATE messages SET body = '{broken' WHERE session_id = 's1' AND seq = 1")
    db.commit()
    db.close()
    return storage


def test_a_corrupt_message_row_raises_and_is_reported_by_check(db_path, opened, run):
    storage = corrupt_a_message(db_path, opened, run)
    with pytest.raises(CorruptSessionError) as failure:
        run(storage.load("s1"))
    assert str(db_path) in str(failure.value)
    assert [p.session_id for p in run(storage.check())] == ["s1"]
    assert run(storage.load("s2")).messages == turn("two")


def test_digests_of_a_corrupt_message_row_raise_naming_the_database(db_path, opened, run):
    storage = corrupt_a_message(db_path, opened, run)
    with pytest.raises(CorruptSessionError) as failure:
        run(capabilities.content_digests(storage, ["s2", "s1"]))
    assert failure.value.session_id == "s1" and str(db_path) in str(failure.value)
    assert set(run(capabilities.content_digests(storage, ["s2"]))) == {"s2"}


def test_check_repair_moves_a_corrupt_session_aside(db_path, opened, run):
    storage = corrupt_a_message(db_path, opened, run)
    problems = run(storage.check())
    run(storage.quarantine(problems[0]))
    assert run(storage.load("s1")) is None
    assert run(storage.load("s2")).messages == turn("two")
    assert query(db_path, "SELECT session_id FROM quarantine") == [("s1",)]


# files


def test_database_and_its_side_files_are_owner_only(tmp_path, opened, run):
    previous = os.umask(0o022)
    try:
        path = tmp_path / "deep" / "er" / "sessions.db"
        storage = opened(path)
        run(storage.save(make_record("s1")))

        async def hold():
            async with storage.lock("s1", 5):
                pass

        run(hold())
    finally:
        os.umask(previous)
    for directory in (tmp_path / "deep", path.parent, Path(f"{path}.locks")):
        assert mode(directory) == 0o700, directory
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        assert mode(file) == 0o600, file
    assert {mode(p) for p in Path(f"{path}.locks").iterdir()} == {0o600}


NOT_DATABASES = {
    "short text": b"hello\n",
    "long text": b"these are my notes, not a database\n" * 20,
    "json": orjson.dumps(SEED_CHAT),
    "binary": bytes(range(256)) * 4,
}


@pytest.mark.parametrize("content", list(NOT_DATABASES.values()), ids=list(NOT_DATABASES))
def test_a_file_that_is_not_a_database_is_a_storage_error_and_stays_untouched(
    db_path, opened, run, content
):
    db_path.write_bytes(content)
    storage = opened(db_path)
    for operation in (storage.session_ids, storage.list_summaries, lambda: storage.load("s1")):
        with pytest.raises(StorageError) as failure:
            run(operation())
        assert failure.value.exit_code == 3
        assert "\n" not in str(failure.value)
        assert str(db_path) in str(failure.value)
    with pytest.raises(StorageError):
        run(storage.save(make_record("s1")))
    assert run(storage.health_check()) is False
    assert db_path.read_bytes() == content
    assert not Path(f"{db_path}-wal").exists()


def test_the_cli_on_a_file_that_is_not_a_database_exits_3_with_one_line(db_path, run_foliko):
    db_path.write_bytes(NOT_DATABASES["long text"])
    url = f"sqlite:///{db_path}"
    for args in (("chat", "-s", "s1", "hi"), ("sessions", "list")):
        result = run_foliko("--storage", url, *args, env={"FOLIKO_MODEL": "echo"})
        assert result.returncode == 3, result.stderr
        assert result.stdout == b""
        assert len(result.stderr.strip().splitlines()) == 1
        assert b"not a database" in result.stderr
    assert db_path.read_bytes() == NOT_DATABASES["long text"]


def newer_database(path: Path) -> bytes:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE future (x)")
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    db.commit()
    db.close()
    return path.read_bytes()


def test_a_database_from_a_newer_foliko_is_a_storage_error(db_path, opened, run):
    newer_database(db_path)
    storage = opened(db_path)
    with pytest.raises(StorageError) as failure:
        run(storage.session_ids())
    assert failure.value.exit_code == 3
    assert "newer" in str(failure.value) and "upgrade" in str(failure.value)
    assert "\n" not in str(failure.value)
    with pytest.raises(StorageError):
        run(storage.save(make_record("s1")))
    assert query(db_path, "SELECT name FROM sqlite_master") == [("future",)]


def test_a_database_from_a_newer_foliko_is_left_byte_for_byte(db_path, opened, run):
    original = newer_database(db_path)
    with pytest.raises(StorageError):
        run(opened(db_path).session_ids())
    assert db_path.read_bytes() == original


# the seed layout: an unreadable row can be deleted or moved aside


def test_an_unreadable_seed_row_can_be_deleted(db_path, opened, run):
    corrupt_seed_database(db_path)
    storage = opened(db_path)
    assert run(storage.delete("bad")) is True
    assert run(storage.check()) == []
    assert run(storage.load("bad")) is None
    assert run(storage.delete("bad")) is False
    assert run(storage.load("good")) is not None


def test_quarantine_moves_an_unreadable_seed_row_aside_for_good(db_path, opened, run):
    corrupt_seed_database(db_path)
    storage = opened(db_path)
    (problem,) = run(storage.check())
    assert run(storage.quarantine(problem)) == f"{db_path} (table quarantine)"
    assert run(storage.check()) == []
    assert [s.session_id for s in run(storage.list_summaries())] == ["good"]
    (row,) = query(db_path, "SELECT session_id, session_row FROM quarantine")
    assert row[0] == "bad" and '{\\"sessionId\\": \\"bad\\", \\"mes' in row[1]


def test_deleting_or_renaming_an_imported_seed_session_leaves_no_ghost(db_path, opened, run):
    corrupt_seed_database(db_path)
    storage = opened(db_path)
    run(storage.rename("good", "better"))
    assert [p.session_id for p in run(storage.check())] == ["bad"]
    run(storage.delete("better"))
    assert [p.session_id for p in run(storage.check())] == ["bad"]


# what is read is checked


@pytest.mark.parametrize(
    ("column", "text", "reason"),
    [
        ("variables", '{"n": 18446744073709551616}', "does not fit in 64 bits"),
        ("variables", "[1, 2]", "variables must be an object"),
        ("metadata", '{"created_at": "monday"}', "created_at must be milliseconds"),
        ("compression_state", '{"a": ' + "[" * 220 + "]" * 220 + "}", "deeper than 200 levels"),
    ],
)
def test_a_stored_value_that_is_not_canonical_is_corrupt_never_changed(
    db_path, opened, run, column, text, reason
):
    storage = opened(db_path)
    run(storage.save(make_record("s", messages=turn("x"))))
    db = sqlite3.connect(db_path)
    db.execute(f"UPDATE sessions SET {column} = ? WHERE session_id = 's'", (text,))
    db.commit()
    db.close()
    with pytest.raises(CorruptSessionError) as error:
        run(storage.load("s"))
    assert reason in error.value.reason
    assert [(p.session_id, reason in p.reason) for p in run(storage.check())] == [("s", True)]


# files


def test_a_database_with_a_second_hard_link_is_refused(db_path, opened, run):
    run(opened(db_path).save(make_record("s")))
    os.link(db_path, db_path.with_name("alias.db"))
    storage = opened(db_path)
    with pytest.raises(StorageError) as error:
        run(storage.load("s"))
    assert "2 hard links" in str(error.value) and "-wal" in str(error.value)
    assert run(storage.health_check()) is False


def damage_the_index(db_path: Path) -> None:
    """Point the summary index at another table's pages: every session still
    loads, but ``PRAGMA quick_check`` fails."""
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    roots = dict(db.execute("SELECT name, rootpage FROM sqlite_master").fetchall())
    db.execute("PRAGMA writable_schema = ON")
    db.execute(
        "UPDATE sqlite_master SET rootpage = ? WHERE name = 'sessions_by_updated'",
        (roots["quarantine"],),
    )
    db.commit()
    db.close()


def test_check_runs_quick_check_and_reports_a_damaged_database(db_path, opened, run):
    storage = opened(db_path)
    for i in range(20):
        run(storage.save(make_record(f"s{i}", messages=turn("x" * 200))))
    run(storage.close())
    damage_the_index(db_path)
    problems = [p for p in run(opened(db_path).check()) if "quick_check" in p.reason]
    assert len(problems) == 1
    assert problems[0].where == str(db_path) and "\n" not in problems[0].reason
    assert problems[0].kind == ProblemKind.STORE and not problems[0].holds_session
    assert "left as it is" in run(opened(db_path).quarantine(problems[0]))


def test_quarantine_follows_the_problems_kind_not_its_wording(db_path, opened, run):
    storage = corrupt_a_message(db_path, opened, run)
    (problem,) = run(storage.check())
    assert problem.kind == ProblemKind.SESSION and problem.holds_session
    worded_like_another = problem._replace(reason="PRAGMA quick_check: a stray file")
    assert run(storage.quarantine(worded_like_another)) == f"{db_path} (table quarantine)"
    assert query(db_path, "SELECT session_id FROM quarantine") == [("s1",)]


def test_health_check_creates_nothing(tmp_path, opened, run):
    missing = tmp_path / "not" / "yet" / "sessions.db"
    assert run(opened(missing).health_check()) is True
    assert not (tmp_path / "not").exists()
    existing = tmp_path / "sessions.db"
    existing.touch()
    assert run(opened(existing).health_check()) is True
    assert existing.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions.db"]


def test_close_closes_the_connections_of_every_thread(db_path, opened, run):
    import threading

    storage = opened(db_path)
    run(storage.save(make_record("s")))

    def read() -> None:
        import asyncio

        asyncio.run(storage.load("s"))

    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    connections = list(storage._opened)
    assert len(connections) == 4
    run(storage.close())
    for connection in connections:
        with pytest.raises(sqlite3.ProgrammingError):
            connection.execute("SELECT 1")
    assert run(storage.load("s")) is not None  # reopens
