"""A forget that fails part way (a fault injected between its writes) changes
nothing, or, on JSON files once its intent is committed, is completed by the
next use of the store (base.py, rule 11). And SQLite's check sees an index
that holds messages that are gone."""

from __future__ import annotations

import os
import sqlite3

import pytest

from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.storage import capabilities
from foliko_cli.storage.jsonfile import INTENT, JsonStorage
from foliko_cli.storage.search import SearchQuery, parse_query, search
from foliko_cli.storage.sql import writes
from foliko_cli.storage.sqlite import SQLiteStorage

from .backends import named


class Fault(Exception):
    """The crash, injected."""


def record(session_id: str, *texts: str) -> SessionRecord:
    messages = [{"role": "user", "content": text, "created_at": 1} for text in texts]
    return SessionRecord(session_id, messages=messages, metadata=new_metadata())


def found(run, storage, word: str) -> list[str]:
    hits = run(search(storage, SearchQuery(word, parse_query(word))))
    return sorted({hit.session_id for hit in hits})


def stage(run, storage) -> tuple[list[SessionRecord], dict[str, int | None], list[int | None]]:
    """Two sessions to delete and one to rewrite: what the faults below cut short."""
    for session_id in ("gone-1", "gone-2"):
        run(storage.save(record(session_id, f"zebracorn {session_id}")))
    run(storage.save(record("kept", "quokkaword", "plain")))
    kept = run(storage.load("kept"))
    records = [
        record("kept", "plain"),
        record(
            ".foliko/forgotten/r",
        ),
    ]
    deletions = {"gone-1": None, "gone-2": None}
    return records, deletions, [kept.revision, 0]


def unchanged(run, storage) -> None:
    assert found(run, storage, "zebracorn") == ["gone-1", "gone-2"]
    assert found(run, storage, "quokkaword") == ["kept"]
    assert run(storage.load(".foliko/forgotten/r")) is None


def forgotten(run, storage) -> None:
    assert found(run, storage, "zebracorn") == [] and found(run, storage, "quokkaword") == []
    assert run(storage.load("gone-1")) is None and run(storage.load("gone-2")) is None
    assert [m["content"] for m in run(storage.load("kept")).messages] == ["plain"]
    assert run(storage.load(".foliko/forgotten/r")) is not None


@pytest.mark.parametrize("name", ["sqlite", "postgres"])
def test_a_sql_forget_failing_after_its_deletions_rolls_back(name, tmp_path, run, monkeypatch):
    backend = named(name)
    if backend.require is not None:
        backend.require()
    with backend.open(tmp_path) as storage:
        try:
            records, deletions, expected = stage(run, storage)

            async def crash(*args, **kwargs):  # the deletions ran in this transaction
                raise Fault

            monkeypatch.setattr(writes, "replace_records", crash)
            with pytest.raises(Fault):
                run(storage.forget(records, deletions, expected_revisions=expected))
            unchanged(run, storage)
            monkeypatch.undo()
            run(storage.forget(records, deletions, expected_revisions=expected))
            forgotten(run, storage)
        finally:
            run(storage.close())


def test_a_redis_forget_failing_before_exec_writes_nothing(tmp_path, run, monkeypatch):
    backend = named("redis")
    backend.require()
    with backend.open(tmp_path) as storage:
        try:
            records, deletions, expected = stage(run, storage)
            queued = storage._save_script

            async def crash(keys, args, client):  # the deletions are queued in the MULTI
                raise Fault

            monkeypatch.setattr(storage, "_save_script", crash)
            with pytest.raises(Fault):
                run(storage.forget(records, deletions, expected_revisions=expected))
            unchanged(run, storage)
            monkeypatch.setattr(storage, "_save_script", queued)
            run(storage.forget(records, deletions, expected_revisions=expected))
            forgotten(run, storage)
        finally:
            run(storage.close())


def test_a_json_forget_failing_before_its_commit_changes_nothing(tmp_path, run, monkeypatch):
    storage = JsonStorage(tmp_path / "sessions")
    records, deletions, expected = stage(run, storage)
    written = storage._temp_file

    def crash(path, data):
        if path.name == INTENT:
            raise Fault
        return written(path, data)

    monkeypatch.setattr(storage, "_temp_file", crash)
    with pytest.raises(Fault):
        run(storage.forget(records, deletions, expected_revisions=expected))
    unchanged(run, JsonStorage(storage.directory))
    assert not [n for n in os.listdir(storage.directory) if n.endswith(".tmp")]


def test_a_json_forget_cut_short_after_its_commit_is_completed_by_the_next_use(
    tmp_path, run, monkeypatch
):
    storage = JsonStorage(tmp_path / "sessions")
    records, deletions, expected = stage(run, storage)

    def crash():  # the process dies with the intent committed, nothing applied
        raise Fault

    monkeypatch.setattr(storage, "_apply_intent", crash)
    with pytest.raises(Fault):
        run(storage.forget(records, deletions, expected_revisions=expected))
    assert (storage.directory / INTENT).exists()
    again = JsonStorage(storage.directory)  # as the next process opens it
    forgotten(run, again)
    assert not (storage.directory / INTENT).exists()
    assert not [p for p in run(capabilities.check(again)) if not p.stray]


def test_a_json_forget_cut_short_part_way_through_applying_is_completed(tmp_path, run, monkeypatch):
    storage = JsonStorage(tmp_path / "sessions")
    records, deletions, expected = stage(run, storage)
    real_unlink = os.unlink
    calls = []

    def unlink(path, *args, **kwargs):  # the first removal happens, then the crash
        if str(path).endswith(".json"):
            calls.append(path)
            if len(calls) == 2:
                raise Fault
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(Fault):
        run(storage.forget(records, deletions, expected_revisions=expected))
    monkeypatch.undo()
    forgotten(run, JsonStorage(storage.directory))


def test_sqlite_check_reports_an_index_of_messages_that_are_gone_and_repair_rebuilds_it(
    tmp_path, run
):
    storage = SQLiteStorage(tmp_path / "s.db")
    run(storage.save(record("s1", "hello")))
    with sqlite3.connect(storage.path) as db:
        db.execute(
            "INSERT INTO message_search (session_id, seq, role, created_at, text) "
            "VALUES ('ghost', 0, 'user', 1, 'ghostly')"
        )
    (problem,) = run(capabilities.check(storage))
    assert problem.kind == "index" and "1 message(s) that are gone" in problem.reason
    assert "rebuilt" in run(capabilities.quarantine(storage, problem))
    assert run(capabilities.check(storage)) == []
    assert found(run, storage, "hello") == ["s1"]
    run(storage.close())


def test_after_a_sqlite_forget_the_words_are_gone_from_the_files_too(tmp_path, run):
    storage = SQLiteStorage(tmp_path / "s.db")
    for n in range(30):  # a few index segments, and pages to free
        run(storage.save(record(f"s{n}", f"ordinary words {n} " * 50)))
    run(storage.save(record("gone", "zebracornunique " * 200, "quokkaunique")))
    run(storage.forget([], {"gone": None}))
    files = [p for p in tmp_path.iterdir() if p.name.startswith("s.db")]
    assert files
    for path in files:
        data = path.read_bytes()
        assert b"zebracornunique" not in data and b"quokkaunique" not in data, path
    assert found(run, storage, "ordinary") and found(run, storage, "zebracornunique") == []
    run(storage.close())
