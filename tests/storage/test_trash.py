"""The trash through the service (AsyncFoliko) on every backend: what delete,
prune, clear, rewind, ``chat --new`` and a replacing import keep, what nobody
else sees, restore, expiry, a failed rewrite that keeps nothing, and a
migration that carries it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import (
    ConflictError,
    ExitCode,
    ModelError,
    NotInTrashError,
    SessionExistsError,
)
from foliko_cli.messages.record import SessionRecord
from foliko_cli.messages.stored import content_hash
from foliko_cli.models.echo import EchoModel
from foliko_cli.service import AsyncFoliko
from foliko_cli.storage import trash
from foliko_cli.storage.memory import MemoryStorage

from .core_only import CoreOnlyStorage
from .test_conformance import make_record

DAY = 86_400_000
FOLIKO = Path(sys.executable).with_name("foliko")


@pytest.fixture
def service(storage, tmp_path):
    """A service over each backend; the ``storage`` fixture closes the adapter."""
    return AsyncFoliko(storage, "echo", home=tmp_path)


def contents(record: SessionRecord) -> list[str]:
    return [m["content"] for m in record.messages]


async def two_turns(svc: AsyncFoliko, session_id: str) -> None:
    await svc.chat(session_id, f"{session_id} one")
    await svc.chat(session_id, f"{session_id} two")


def test_every_removal_keeps_the_session_as_it_was(service, run):
    async def scenario():
        for name in ("deleted", "cleared", "rewound", "reset", "replaced"):
            await two_turns(service, name)
        await service.delete_sessions(["deleted"])
        await service.clear_session("cleared")
        await service.rewind_session("rewound")
        reset = await service.chat("reset", "fresh start", new=True)
        replacement = make_record("replaced", messages=[{"role": "user", "content": "other"}])
        await service.import_sessions([replacement], on_conflict="replace")
        return reset, await service.list_trash()

    reset, entries = run(scenario())
    assert sorted((e.session_id, e.reason, e.message_count) for e in entries) == [
        ("cleared", "clear", 4),
        ("deleted", "delete", 4),
        ("replaced", "import", 4),
        ("reset", "new", 4),
        ("rewound", "rewind", 4),
    ]
    assert reset.trashed == next(e.entry_id for e in entries if e.reason == "new")
    for entry in entries:
        run(service.restore_session(entry.session_id, as_id=f"{entry.session_id}-back"))
        back = run(service.get_session(f"{entry.session_id}-back"))
        one = entry.session_id
        assert contents(back) == [f"{one} one", f"{one} one", f"{one} two", f"{one} two"]
    assert run(service.list_trash()) == []


def test_what_the_trash_holds_is_seen_by_nothing_else(service, run):
    async def scenario():
        await two_turns(service, "gone")
        await service.storage.save(make_record("kept", saved_at=now_ms() - DAY))
        counted = await service.usage()
        await service.delete_sessions(["gone"])
        return counted, await service.usage(), await service.prune(3_600_000)

    counted, usage, report = run(scenario())
    assert [row["session"] for row in counted["rows"]] == ["gone"]
    assert usage["rows"] == []
    assert [s.session_id for s in run(service.list_sessions())] == []  # kept was pruned
    assert run(service.session_ids()) == []
    assert run(service.search("one")) == []
    assert run(service.search("Zürich")) == []
    assert report.deleted == ["kept"]
    assert sorted(e.session_id for e in run(service.list_trash())) == ["gone", "kept"]


def test_a_search_that_the_trash_crowds_out_still_finds_what_is_live(service, run):
    async def scenario():
        for i in range(5):
            await service.chat(f"old{i}", "needle")
            await service.delete_sessions([f"old{i}"])
        await service.chat("live", "needle in the hay")
        return await service.search("needle", limit=1)

    assert [hit.session_id for hit in run(scenario())] == ["live"]


def test_restore_by_name_takes_the_latest_and_by_id_any(service, run):
    async def scenario():
        await service.chat("s", "first life")
        await service.delete_sessions(["s"])
        await service.chat("s", "second life")
        await service.delete_sessions(["s"])
        older = (await service.list_trash())[-1]
        await service.restore_session("s")
        latest = contents(await service.get_session("s"))
        await service.restore_session(older.entry_id, as_id="s-older")
        return latest, contents(await service.get_session("s-older"))

    assert run(scenario()) == (["second life"] * 2, ["first life"] * 2)


def test_restore_into_a_taken_name_or_of_nothing_is_a_usage_error(service, run):
    run(service.chat("s", "old"))
    run(service.clear_session("s"))
    with pytest.raises(SessionExistsError) as taken:
        run(service.restore_session("s"))
    assert taken.value.exit_code == ExitCode.USAGE
    assert run(service.get_session("s")).messages == []
    assert [e.session_id for e in run(service.list_trash())] == ["s"]
    with pytest.raises(NotInTrashError) as unknown:
        run(service.restore_session("never"))
    assert unknown.value.exit_code == ExitCode.USAGE
    with pytest.raises(Exception, match="foliko's own"):
        run(service.restore_session("s", as_id=".foliko/trash/x"))


def test_a_restored_session_counts_as_used(service, run):
    old = make_record("s", saved_at=now_ms() - 90 * DAY)
    run(service.storage.save(old))
    run(service.prune(30 * DAY))
    entry = run(service.restore_session("s"))
    assert entry.last_used == old.saved_at
    assert run(service.prune(30 * DAY)).deleted == []
    assert content_hash(run(service.get_session("s"))) == content_hash(old)


def test_entries_past_the_undo_window_are_purged_by_the_next_trash_operation(service, run):
    now = now_ms()
    for name, age in (("ancient", 40 * DAY), ("recent", DAY)):
        run(service.storage.save(make_record(name)))
        run(trash.move(service.storage, name, "delete", now=now - age))
    assert [e.session_id for e in run(service.list_trash())] == ["recent"]
    assert [e.session_id for e in run(trash.entries(service.storage))] == ["recent"]


def test_a_delete_purges_what_expired(service, run):
    run(service.storage.save(make_record("ancient")))
    run(trash.move(service.storage, "ancient", "delete", now=now_ms() - 40 * DAY))
    run(service.chat("s", "x"))
    run(service.delete_sessions(["s"]))
    assert [e.session_id for e in run(trash.entries(service.storage))] == ["s"]


def test_emptying_takes_all_or_what_is_older_than_asked(service, run):
    now = now_ms()
    for name, age in (("week", 8 * DAY), ("hour", 3_600_000)):
        run(service.storage.save(make_record(name)))
        run(trash.move(service.storage, name, "delete", now=now - age))
    assert [e.session_id for e in run(service.empty_trash(older_than_ms=7 * DAY))] == ["week"]
    assert [e.session_id for e in run(service.empty_trash())] == ["hour"]
    assert run(service.storage.session_ids()) == []


def test_with_the_trash_off_removals_are_final(storage, tmp_path, run):
    service = AsyncFoliko(storage, "echo", home=tmp_path, trash_keep=0)
    run(two_turns(service, "s"))
    run(service.clear_session("s"))
    run(service.chat("s", "again"))
    run(service.delete_sessions(["s"]))
    assert run(service.list_trash()) == []
    assert run(service.storage.session_ids()) == []


class FailingModel(EchoModel):
    async def generate(self, request):
        raise ModelError("the model is down")


def test_a_reset_turn_that_fails_keeps_the_session_and_trashes_nothing(storage, tmp_path, run):
    service = AsyncFoliko(storage, "echo", home=tmp_path)
    run(two_turns(service, "s"))
    with pytest.raises(ModelError):
        run(service.chat("s", "start over", new=True, model=FailingModel()))
    assert len(run(service.get_session("s")).messages) == 4
    assert run(service.list_trash()) == []


class ConflictOnRewrite(MemoryStorage):
    """A store where a rewrite of a live session loses its compare-and-set."""

    async def save(self, record, *, expected_revision=None):
        if expected_revision and not record.session_id.startswith(trash.TRASH_PREFIX):
            raise ConflictError(record.session_id, expected_revision, expected_revision + 1)
        return await super().save(record, expected_revision=expected_revision)


def test_a_rewrite_that_loses_its_compare_and_set_drops_its_copy(tmp_path, run):
    service = AsyncFoliko(ConflictOnRewrite(), "echo", home=tmp_path)
    run(two_turns(service, "s"))
    for rewrite in (service.clear_session("s"), service.rewind_session("s")):
        with pytest.raises(ConflictError):
            run(rewrite)
    assert run(service.list_trash()) == []
    assert len(run(service.get_session("s")).messages) == 4


def test_each_user_has_a_trash_of_their_own(tmp_path, run):
    from foliko_cli.storage.scoped import UserScopedStorage
    from foliko_cli.storage.sqlite import SQLiteStorage

    shared = SQLiteStorage(tmp_path / "shared.db")
    alice, bob = (
        AsyncFoliko(UserScopedStorage(shared, user, owns_inner=False), "echo", home=tmp_path)
        for user in ("alice", "bob")
    )
    run(alice.chat("s", "alice's"))
    run(alice.delete_sessions(["s"]))
    assert run(bob.list_trash()) == []
    with pytest.raises(NotInTrashError):
        run(bob.restore_session("s"))
    run(alice.restore_session("s"))
    assert contents(run(alice.get_session("s"))) == ["alice's", "alice's"]
    run(shared.close())


# across a migration (racing writers: test_multiprocess.py)


def test_a_migration_carries_the_trash(storage, tmp_path, run):
    from foliko_cli.storage.migrate import migrate

    source = CoreOnlyStorage() if storage.name == "memory" else MemoryStorage()
    before = AsyncFoliko(source, "echo", home=tmp_path)
    run(two_turns(before, "gone"))
    run(two_turns(before, "wiped"))
    run(before.delete_sessions(["gone"]))
    run(before.clear_session("wiped"))
    report = run(migrate(source, storage))
    assert report.ok and report.total == 3
    after = AsyncFoliko(storage, "echo", home=tmp_path)
    assert [s.session_id for s in run(after.list_sessions())] == ["wiped"]
    entries = run(after.list_trash())
    assert entries == run(before.list_trash())
    run(after.restore_session("gone"))
    run(after.restore_session("wiped", as_id="wiped-before"))
    for name in ("gone", "wiped-before"):
        assert len(run(after.get_session(name)).messages) == 4


def foliko_cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FOLIKO), *args], env=env, capture_output=True, timeout=300, stdin=subprocess.DEVNULL
    )


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {**os.environ, "FOLIKO_MODEL": "echo", "FOLIKO_HOME": str(tmp_path / "home")}


def test_foliko_storage_migrate_carries_the_trash(storage_url, env):
    for name in ("gone", "wiped"):
        assert foliko_cli("chat", "-s", name, f"{name} words", env=env).returncode == 0
    assert foliko_cli("sessions", "delete", "gone", env=env).returncode == 0
    assert foliko_cli("sessions", "clear", "wiped", env=env).returncode == 0
    migrated = foliko_cli("storage", "migrate", "sqlite", storage_url, "--json", env=env)
    assert migrated.returncode == 0, migrated.stderr.decode()
    assert orjson.loads(migrated.stdout)["copied"] == 3
    target = ("--storage", storage_url)
    listed = foliko_cli(*target, "sessions", "list", "--json", env=env)
    assert [row["session_id"] for row in orjson.loads(listed.stdout)] == ["wiped"]
    rows = orjson.loads(foliko_cli(*target, "sessions", "trash", "list", "--json", env=env).stdout)
    assert sorted((r["session_id"], r["reason"]) for r in rows) == [
        ("gone", "delete"),
        ("wiped", "clear"),
    ]
    assert foliko_cli(*target, "sessions", "restore", "gone", env=env).returncode == 0
    shown = orjson.loads(foliko_cli(*target, "sessions", "show", "gone", "--json", env=env).stdout)
    assert [m["content"] for m in shown["messages"]] == ["gone words", "gone words"]
