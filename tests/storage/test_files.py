"""What the file backends (JSON, SQLite) do with the files beside the sessions:
lock files that never follow a link and go with their session, stray files
that ``check`` reports and ``quarantine`` removes, and filesystem failures
(full, read-only) that are one-line storage errors."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from filesystems import small_filesystem

from foliko_cli.errors import ExitCode, StorageError
from foliko_cli.storage.base import ProblemKind, SessionStorageAdapter
from foliko_cli.storage.filelock import SessionFileLocks, lock_name
from foliko_cli.storage.jsonfile import JsonStorage
from foliko_cli.storage.sqlite import SQLiteStorage

from .test_conformance import make_record, state, turn

WRITE_KEY = "\0write\0"


@pytest.fixture(params=["json", "sqlite"])
def kind(request) -> str:
    return request.param


def open_file_storage(kind: str, where: Path) -> SessionStorageAdapter:
    if kind == "json":
        return JsonStorage(where / "sessions")
    return SQLiteStorage(where / "sessions.db")


def lock_directory(storage: SessionStorageAdapter) -> Path:
    return storage._locks.directory  # type: ignore[attr-defined]


@pytest.fixture
def files(kind, tmp_path, run) -> Iterator[SessionStorageAdapter]:
    storage = open_file_storage(kind, tmp_path)
    yield storage
    run(storage.close())


def lock_files(storage: SessionStorageAdapter) -> list[str]:
    directory = lock_directory(storage)
    return sorted(os.listdir(directory)) if directory.exists() else []


async def one_turn(storage: SessionStorageAdapter, session_id: str) -> None:
    async with storage.lock(session_id, 5):
        revision = await storage.revision(session_id) or 0
        await storage.append(session_id, turn("hi"), state(), expected_revision=revision)


# links planted where a lock file belongs


def test_a_symlink_planted_as_a_lock_file_is_refused_and_its_target_kept(files, tmp_path, run):
    victim = tmp_path / "precious.txt"
    victim.write_text("do not empty me\n")
    directory = lock_directory(files)
    directory.mkdir(parents=True, exist_ok=True)
    planted = directory / lock_name("s")
    planted.symlink_to(victim)

    async def take():
        async with files.lock("s", 1):
            pass

    with pytest.raises(StorageError) as error:
        run(take())
    assert str(planted) in str(error.value) and "symbolic link" in str(error.value)
    assert error.value.exit_code == ExitCode.STORAGE
    assert victim.read_text() == "do not empty me\n"
    problems = run(files.check())
    assert [(p.where, "symbolic link" in p.reason) for p in problems] == [(str(planted), True)]
    run(files.quarantine(problems[0]))
    assert not planted.is_symlink() and not planted.exists()
    assert victim.read_text() == "do not empty me\n"
    run(one_turn(files, "s"))


def test_a_hard_link_planted_as_a_lock_file_is_refused_and_its_target_kept(files, tmp_path, run):
    victim = tmp_path / "precious.txt"
    victim.write_text("do not overwrite me\n")
    directory = lock_directory(files)
    directory.mkdir(parents=True, exist_ok=True)
    os.link(victim, directory / lock_name("s"))
    with pytest.raises(StorageError) as error:
        run(one_turn(files, "s"))
    assert "one link" in str(error.value)
    assert victim.read_text() == "do not overwrite me\n"


def test_the_json_write_lock_refuses_a_symlink_too(tmp_path, run):
    storage = JsonStorage(tmp_path / "sessions")
    victim = tmp_path / "precious.txt"
    victim.write_text("keep\n")
    directory = lock_directory(storage)
    directory.mkdir(parents=True)
    (directory / lock_name(WRITE_KEY + "s")).symlink_to(victim)
    with pytest.raises(StorageError):
        run(storage.save(make_record("s")))
    assert victim.read_text() == "keep\n"
    assert run(storage.load("s")) is None


def test_a_json_session_file_that_is_a_symlink_is_refused(tmp_path, run):
    storage = JsonStorage(tmp_path / "sessions")
    run(storage.save(make_record("real")))
    outside = tmp_path / "outside.json"
    outside.write_bytes((tmp_path / "sessions" / "real.json").read_bytes())
    (tmp_path / "sessions" / "evil.json").symlink_to(outside)
    before = outside.read_bytes()
    with pytest.raises(StorageError) as error:
        run(storage.load("evil"))
    assert "evil.json" in str(error.value) and "symbolic link" in str(error.value)
    with pytest.raises(StorageError):
        run(storage.save(make_record("evil")))
    assert outside.read_bytes() == before


def test_the_holder_is_written_in_place_and_a_lock_file_is_never_truncated(files, run, monkeypatch):
    run(files.save(make_record("s")))
    monkeypatch.setattr(os, "ftruncate", lambda *a: pytest.fail("a lock file was truncated"))

    async def held() -> str:
        async with files.lock("s", 5):
            return (lock_directory(files) / lock_name("s")).read_text()

    assert held_text(run(held())).startswith(f"pid {os.getpid()} on ")


def held_text(text: str) -> str:
    return text.strip()


# lock files go with their session


def test_lock_files_are_removed_with_their_sessions(files, run):
    before = lock_files(files)
    for name in ("a", "b", "c"):
        run(one_turn(files, name))
    assert len(lock_files(files)) > len(before)
    for name in ("a", "b"):
        assert run(files.delete(name)) is True
    assert lock_files(files) == [n for n in lock_files(files) if "c" in n]
    run(files.delete("c"))
    assert lock_files(files) == before
    assert run(files.check()) == []


def test_a_session_deleted_under_its_own_turn_lock_loses_its_lock_file(files, run):
    run(one_turn(files, "s"))

    async def delete_in_turn():
        async with files.lock("s", 5):
            assert await files.delete("s") is True
            assert lock_name("s") in lock_files(files)  # held: removed on release

    run(delete_in_turn())
    assert lock_name("s") not in lock_files(files)
    run(one_turn(files, "s"))  # and the session can be locked and written again
    assert run(files.load("s")).messages == turn("hi")


def test_removing_lock_files_never_lets_two_holders_in(tmp_path):
    """Every holder removes the lock file as it lets go (the most churn there can
    be); threads in a loop, each with its own descriptors, are never inside together."""
    directory = tmp_path / "locks"
    inside, most, entries = [0], [0], [0]
    guard = threading.Lock()

    def worker(i: int) -> None:
        locks = SessionFileLocks(directory)

        async def loop() -> None:
            for _ in range(60):
                async with locks.hold("s", 30, remove_if=lambda: True):
                    with guard:
                        inside[0] += 1
                        entries[0] += 1
                        most[0] = max(most[0], inside[0])
                    for _ in range(3):
                        await asyncio.sleep(0)
                    with guard:
                        inside[0] -= 1

        asyncio.run(loop())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert entries[0] == 240
    assert most[0] == 1
    assert os.listdir(directory) == []


# stray files: reported by check, removed by quarantine (storage check --repair)


def test_check_reports_orphan_lock_files_and_repair_removes_only_those(files, run):
    run(one_turn(files, "alive"))
    directory = lock_directory(files)
    orphan = directory / lock_name("killed-mid-turn")
    orphan.write_text("pid 1 on elsewhere")
    problems = run(files.check())
    assert [(p.session_id, p.where, p.kind) for p in problems] == [
        ("killed-mid-turn", str(orphan), ProblemKind.STRAY)
    ]
    assert problems[0].stray and not problems[0].holds_session
    assert "orphan lock file" in problems[0].reason
    run(files.quarantine(problems[0]))
    assert not orphan.exists()
    assert run(files.check()) == []
    assert run(files.load("alive")).messages == turn("hi")


def test_a_held_lock_of_a_session_not_yet_written_is_not_an_orphan(files, run):
    async def scenario():
        async with files.lock("new", 5):
            return await files.check()

    assert run(scenario()) == []


def test_quarantine_of_a_stray_file_removes_it(files, run):
    directory = lock_directory(files)
    directory.mkdir(parents=True, exist_ok=True)
    orphan = directory / lock_name("ghost")
    orphan.touch()
    (problem,) = run(files.check())
    assert "removed" in run(files.quarantine(problem))
    assert not orphan.exists()


def test_check_reports_stale_temp_files_of_killed_json_writes(tmp_path, run):
    storage = JsonStorage(tmp_path / "sessions")
    run(storage.save(make_record("s")))
    stale = tmp_path / "sessions" / ".s.0123456789ab.tmp"
    fresh = tmp_path / "sessions" / ".s.ba9876543210.tmp"
    stale.write_bytes(b'{"sessionId": "s", "mess')
    fresh.write_bytes(b'{"sessionId": "s", "mess')
    an_hour_ago = os.stat(stale).st_mtime - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    problems = run(storage.check())
    assert [(p.where, "interrupted write" in p.reason) for p in problems] == [(str(stale), True)]
    run(storage.quarantine(problems[0]))
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == [
        ".locks",
        fresh.name,
        "s.json",
    ]


# filesystems that say no


def big_record(session_id: str = "big"):
    return make_record(session_id, messages=turn("x" * 600_000))


def test_a_full_filesystem_is_a_one_line_storage_error(kind, tmp_path, run):
    with small_filesystem(tmp_path / "small") as small:
        storage = open_file_storage(kind, small)
        try:
            run(storage.save(make_record("small", messages=turn("fits"))))
            with pytest.raises(StorageError) as error:
                run(storage.save(big_record()))
            message = str(error.value)
            assert error.value.exit_code == ExitCode.STORAGE
            assert "\n" not in message
            assert "full" in message or "No space left" in message
            assert run(storage.load("small")).messages == turn("fits")
            assert run(storage.load("big")) is None
        finally:
            run(storage.close())


def test_a_read_only_filesystem_is_a_one_line_storage_error(kind, tmp_path, run):
    with small_filesystem(tmp_path / "ro", size="1m") as place:
        storage = open_file_storage(kind, place)
        run(storage.save(make_record("s", messages=turn("kept"))))
        run(storage.close())
        remounted = subprocess.run(
            ["mount", "-o", "remount,ro", str(place)], capture_output=True, timeout=30
        )
        if remounted.returncode != 0:
            pytest.skip("cannot remount the tmpfs read-only here")
        storage = open_file_storage(kind, place)
        try:
            for write in (
                lambda: storage.save(make_record("s", messages=turn("lost"))),
                lambda: storage.delete("s"),
                lambda: one_turn(storage, "s"),
            ):
                with pytest.raises(StorageError) as error:
                    run(write())
                assert "\n" not in str(error.value)
                assert error.value.exit_code == ExitCode.STORAGE
        finally:
            run(storage.close())
