"""What a migration guarantees, in process: each copy is read back and compared
with its source, writes are compare-and-set, and the search index is complete."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from foliko_cli.storage.jsonfile import JsonStorage
from foliko_cli.storage.memory import MemoryStorage
from foliko_cli.storage.migrate import migrate
from foliko_cli.storage.sqlite import SQLiteStorage

from .test_conformance import make_record, turn
from .test_search import find, where

DIFFERS = "verification failed: the copy differs from the source"
MOVED = "was written in the destination while the migration ran; run the migration again"


def originals(count: int = 3) -> list:
    return [make_record(f"s{i}", messages=turn(f"word{i} hello")) for i in range(count)]


@pytest.fixture
def source(tmp_path: Path, run) -> JsonStorage:
    storage = JsonStorage(tmp_path / "source")
    run(storage.save_many(originals()))
    return storage


@pytest.fixture
def target(tmp_path: Path, run):
    storage = SQLiteStorage(tmp_path / "target.db")
    yield storage
    run(storage.close())


def tamper(storage: SQLiteStorage, trigger: str) -> None:
    """A trigger that changes what the migration writes for session s1."""
    storage.db.execute(f"CREATE TRIGGER tamper {trigger}")


@pytest.mark.parametrize(
    ("trigger", "reason"),
    [
        pytest.param(
            "AFTER INSERT ON messages WHEN NEW.session_id = 's1' BEGIN UPDATE messages "
            "SET body = replace(body, 'hello', 'HELLO') WHERE session_id = 's1'; END",
            DIFFERS,
            id="a message changed",
        ),
        pytest.param(
            "AFTER INSERT ON messages WHEN NEW.session_id = 's1' AND NEW.seq = 1 BEGIN "
            "DELETE FROM messages WHERE session_id = 's1' AND seq = 1; END",
            "verification failed: session 's1' is damaged (it counts 2 messages but seq 1 is",
            id="a message lost",
        ),
        pytest.param(
            "AFTER INSERT ON sessions WHEN NEW.session_id = 's1' BEGIN UPDATE sessions "
            """SET variables = '{"v": 2}' WHERE session_id = 's1'; END""",
            DIFFERS,
            id="the variables changed",
        ),
        pytest.param(
            "AFTER INSERT ON messages WHEN NEW.session_id = 's1' BEGIN UPDATE messages "
            "SET body = '{broken' WHERE session_id = 's1'; END",
            "verification failed: session 's1' is damaged",
            id="a body that is not JSON",
        ),
    ],
)
def test_a_copy_that_differs_from_its_source_is_reported(source, target, run, trigger, reason):
    tamper(target, trigger)
    report = run(migrate(source, target))
    assert [(sid, why[: len(reason)]) for sid, why in report.failed] == [("s1", reason)]
    assert report.copied == ["s0", "s2"]


class WritesMeanwhile(MemoryStorage):
    """A source whose loading of ``trigger`` has another writer save ``record``
    in ``target`` (as a process could while the migration runs)."""

    def __init__(self, target, trigger: str, record):
        super().__init__()
        self.target, self.trigger, self.record = target, trigger, record

    async def load(self, session_id: str):
        if session_id == self.trigger and self.record is not None:
            record, self.record = self.record, None
            await self.target.save(record)
        return await super().load(session_id)


def meanwhile(run, target, trigger: str, record) -> WritesMeanwhile:
    storage = WritesMeanwhile(target, trigger, record)
    run(storage.save_many(originals()))
    return storage


def test_a_session_created_in_the_target_meanwhile_is_reported_never_overwritten(target, run):
    theirs = make_record("s1", messages=turn("written meanwhile"))
    report = run(migrate(meanwhile(run, target, "s1", theirs), target))
    assert report.failed == [("s1", MOVED)]
    assert sorted(report.copied) == ["s0", "s2"]
    assert run(target.load("s1")).messages == theirs.messages


def test_overwrite_replaces_only_the_revision_it_compared(target, run):
    run(target.save(make_record("s1", messages=turn("older"))))
    theirs = make_record("s1", messages=turn("written meanwhile"))
    # s1's target revision is read while s1 is collected; s2's loading moves it on.
    report = run(migrate(meanwhile(run, target, "s2", theirs), target, overwrite=True))
    assert report.failed == [("s1", MOVED)]
    assert sorted(report.copied) == ["s0", "s2"]
    assert run(target.load("s1")).messages == theirs.messages


def test_overwrite_replaces_a_session_nobody_moved(source, target, run):
    run(target.save(make_record("s1", messages=turn("older"))))
    report = run(migrate(source, target, overwrite=True))
    assert report.ok and sorted(report.copied) == ["s0", "s1", "s2"]
    assert run(target.load("s1")).messages == run(source.load("s1")).messages


def test_every_migrated_message_is_in_the_search_index(tmp_path, target, run):
    source = JsonStorage(tmp_path / "many")
    run(source.save_many(originals(1200)))  # more than one batch
    report = run(migrate(source, target))
    assert report.ok and len(report.copied) == 1200
    for i in (0, 499, 500, 1199):
        assert sorted(where(find(run, target, f"word{i}"))) == [(f"s{i}", 0), (f"s{i}", 1)]
    db = sqlite3.connect(target.path)
    try:
        assert db.execute("SELECT COUNT(*) FROM message_search").fetchone() == (2400,)
        db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
        assert db.execute("SELECT COUNT(*) FROM search_pending").fetchone() == (0,)
    finally:
        db.close()


class Stop(Exception):
    pass


def stopped_after_two_batches(run, source, target) -> None:
    """A migration of 1,200 sessions that stops after writing 1,000 of them,
    before it builds the search index (a crash, or Ctrl-C)."""
    copied = []

    def progress(n: int) -> None:
        copied.append(n)
        if sum(copied) >= 1000:
            raise Stop

    with pytest.raises(Stop):
        run(migrate(source, target, progress=progress))


def indexed_and_pending(path: Path) -> tuple[int, int, int]:
    db = sqlite3.connect(path)
    try:
        return (
            db.execute("SELECT COUNT(*) FROM messages").fetchone()[0],
            db.execute("SELECT COUNT(*) FROM message_search").fetchone()[0],
            db.execute("SELECT COUNT(*) FROM search_pending").fetchone()[0],
        )
    finally:
        db.close()


@pytest.fixture
def many(tmp_path, run) -> JsonStorage:
    source = JsonStorage(tmp_path / "many")
    run(source.save_many(originals(1200)))
    return source


def test_a_migration_stopped_before_its_index_leaves_it_to_the_next_search(
    many, target, tmp_path, run
):
    stopped_after_two_batches(run, many, target)
    run(target.close())
    assert indexed_and_pending(target.path) == (2000, 0, 1)  # written, marked, not indexed
    reopened = SQLiteStorage(target.path)
    try:
        (copied,) = reopened.db.execute("SELECT session_id FROM sessions LIMIT 1").fetchone()
        assert indexed_and_pending(target.path) == (2000, 0, 1)  # opening costs nothing
        word = f"word{copied[1:]}"
        assert sorted(where(find(run, reopened, word))) == [(copied, 0), (copied, 1)]
        assert indexed_and_pending(target.path) == (2000, 2000, 0)  # the search completed it
        reopened.db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
        report = run(migrate(many, reopened))  # the rest, indexed at its end
        assert report.ok and len(report.copied) == 200 and len(report.skipped) == 1000
        assert indexed_and_pending(target.path) == (2400, 2400, 0)
        (last,) = report.copied[-1:]
        word = f"word{last[1:]}"
        assert sorted(where(find(run, reopened, word))) == [(last, 0), (last, 1)]
    finally:
        run(reopened.close())


def test_a_search_on_a_connection_opened_before_completes_an_index_left_behind(
    many, target, tmp_path, run
):
    searching = SQLiteStorage(target.path)
    try:
        assert find(run, searching, "word5") == []  # opened before the migration
        stopped_after_two_batches(run, many, target)
        (copied,) = searching.db.execute("SELECT session_id FROM sessions LIMIT 1").fetchone()
        word = f"word{copied[1:]}"
        assert sorted(where(find(run, searching, word))) == [(copied, 0), (copied, 1)]
        assert indexed_and_pending(target.path) == (2000, 2000, 0)
    finally:
        run(searching.close())


def test_storage_check_completes_an_index_left_behind_instead_of_reporting_it(many, target, run):
    stopped_after_two_batches(run, many, target)
    assert indexed_and_pending(target.path) == (2000, 0, 1)
    assert run(target.check()) == []
    assert indexed_and_pending(target.path) == (2000, 2000, 0)


def test_a_session_forgotten_before_the_index_is_completed_is_not_indexed(
    many, target, tmp_path, run
):
    stopped_after_two_batches(run, many, target)
    (copied,) = target.db.execute("SELECT session_id FROM sessions LIMIT 1").fetchone()
    run(target.forget([], {copied: None}))
    assert find(run, target, f"word{copied[1:]}") == []
    assert indexed_and_pending(target.path) == (1998, 1998, 0)


def test_a_session_damaged_in_the_target_is_reported_and_the_rest_is_copied(source, target, run):
    from . import damage

    run(target.save(make_record("s1", messages=turn("one") + turn("two"))))
    damage.damage(target, "s1", "metadata-gone")  # unlisted: only its messages remain
    left = damage.snapshot(target, "s1")
    report = run(migrate(source, target))
    ((failed, reason),) = report.failed
    assert failed == "s1"
    assert reason.startswith("session 's1' is damaged (its row in the sessions table is gone")
    assert sorted(report.copied) == ["s0", "s2"]
    assert damage.snapshot(target, "s1") == left
