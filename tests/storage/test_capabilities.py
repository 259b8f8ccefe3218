"""Optional capabilities are protocols checked at runtime; the generic versions serve
a backend without them (the conformance suite runs every backend, ``core-only`` too)."""

from __future__ import annotations

import pytest

from foliko_cli.storage import capabilities
from foliko_cli.storage.base import StoredProblem
from foliko_cli.storage.jsonfile import JsonStorage
from foliko_cli.storage.memory import MemoryStorage
from foliko_cli.storage.sqlite import SQLiteStorage

from .core_only import CoreOnlyStorage
from .test_conformance import make_record

PROTOCOLS = (
    capabilities.BatchSave,
    capabilities.BatchLoad,
    capabilities.ContentDigests,
    capabilities.LoadedCopy,
    capabilities.RecentLoad,
    capabilities.StateLoad,
    capabilities.NativeCopy,
    capabilities.AtomicRename,
    capabilities.ProblemScan,
    capabilities.Quarantine,
)


def claimed(storage) -> set[str]:
    return {p.__name__ for p in PROTOCOLS if isinstance(storage, p)}


def test_an_adapter_with_only_the_core_claims_no_capability():
    assert claimed(CoreOnlyStorage()) == set()


def test_backends_claim_what_they_do_natively(tmp_path):
    assert claimed(MemoryStorage()) == {"BatchSave", "Quarantine"}
    assert claimed(SQLiteStorage(tmp_path / "s.db")) >= {
        "BatchSave",
        "BatchLoad",
        "ContentDigests",
        "LoadedCopy",
        "RecentLoad",
        "StateLoad",
        "AtomicRename",
        "ProblemScan",
        "Quarantine",
    }
    assert claimed(JsonStorage(tmp_path / "j")) >= {"BatchSave", "AtomicRename", "Quarantine"}


def test_server_backends_read_only_what_a_turn_sends():
    """P2: PostgreSQL and Redis read a session's recent messages and its state natively
    (creating the adapters connects to nothing)."""
    pytest.importorskip("psycopg")
    pytest.importorskip("redis")
    from foliko_cli.storage.postgres import PostgresStorage
    from foliko_cli.storage.redis import RedisStorage

    for storage in (PostgresStorage("postgresql://u@h/db"), RedisStorage("redis://h:6379/0")):
        assert {"RecentLoad", "StateLoad"} <= claimed(storage)


def test_quarantine_without_the_capability_says_what_to_do(run):
    problem = StoredProblem("s", "here", "unreadable")
    with pytest.raises(Exception, match="cannot move records aside; remove session 's' by hand"):
        run(capabilities.quarantine(CoreOnlyStorage(), problem))


def test_the_generic_rename_creates_before_it_deletes(run):
    storage = CoreOnlyStorage()
    run(storage.save(make_record("old")))
    order = []
    save, delete = storage.save, storage.delete

    async def saving(record, **kw):
        order.append(("save", record.session_id))
        return await save(record, **kw)

    async def deleting(session_id, **kw):
        order.append(("delete", session_id))
        return await delete(session_id, **kw)

    storage.save, storage.delete = saving, deleting
    run(capabilities.rename(storage, "old", "new"))
    assert order == [("save", "new"), ("delete", "old")]


def test_the_generic_copy_reports_a_copy_the_store_did_not_keep_as_given(run):
    """Verification is a read-back: a store that changes what it was given is caught."""
    storage = CoreOnlyStorage()
    save = storage.save

    async def altering(record, **kw):
        if record.session_id == "s1":
            record = make_record("s1", messages=[])
        return await save(record, **kw)

    storage.save = altering
    records = [make_record("s0"), make_record("s1")]
    differing = run(capabilities.copy_loaded(storage, records))
    assert differing == {"s1": capabilities.DIFFERS}


def every_capability() -> list[type]:
    """Every capability protocol there is, found rather than listed: a new one is
    covered by the wrapper test below the day it is written."""
    import inspect

    from foliko_cli.storage import search

    found = [
        value
        for module in (capabilities, search)
        for value in vars(module).values()
        if inspect.isclass(value) and getattr(value, "_is_runtime_protocol", False)
    ]
    assert {"BatchSave", "Searchable"} <= {p.__name__ for p in found}
    return found


@pytest.mark.parametrize("inner", ["memory", "sqlite", "core-only"])
def test_a_user_s_view_exposes_every_capability_of_what_it_wraps(tmp_path, inner):
    from foliko_cli.storage.scoped import UserScopedStorage

    wrapped = {
        "memory": MemoryStorage(),
        "sqlite": SQLiteStorage(tmp_path / "s.db"),
        "core-only": CoreOnlyStorage(),
    }[inner]
    view = UserScopedStorage(wrapped, "alice", owns_inner=False)
    forwarded = [p for p in every_capability() if isinstance(wrapped, p)]
    assert [p.__name__ for p in forwarded if not isinstance(view, p)] == []
