"""What is specific to the PostgreSQL backend, against the real server.

Migrations under an advisory lock, gap-free ``seq`` under concurrent writers on
separate connections, the advisory session lock released by the server when
its holder is killed, errors that name the server and never the password.
Each test works in a schema of its own that is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from foliko_cli.errors import (
    ConflictError,
    CorruptSessionError,
    InvalidSessionIdError,
    SessionBusyError,
    SessionExistsError,
    StorageConfigError,
    StorageError,
)
from foliko_cli.messages.record import SessionRecord
from foliko_cli.messages.stored import content_hash
from foliko_cli.storage import capabilities
from foliko_cli.storage import postgres as postgres_module
from foliko_cli.storage.postgres import MIGRATIONS, PostgresStorage
from foliko_cli.storage.sql import writes
from foliko_cli.storage.sql.dialect import PostgresDialect
from foliko_cli.storage.sql.executor import PostgresExecutor

from .services import (
    concurrent_appends,
    fresh_schema,
    in_threads,
    postgres_storage,
    require_postgres,
    sample_records,
    state,
    turn,
)

HANG = 60  # seconds: only reached when something hangs


@pytest.fixture
def url() -> str:
    return require_postgres()


@pytest.fixture
def schema(url: str) -> Iterator[str]:
    with fresh_schema(url) as name:
        yield name


@pytest.fixture
def pg(url: str) -> Iterator[PostgresStorage]:
    with postgres_storage(url) as storage:
        yield storage


def query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as db:
        cursor = db.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


# the driver is optional and loaded late


@pytest.mark.parametrize(
    "bad",
    [
        ("mysql://u@h/db", {}),
        ("postgresql://u@h/db", {"schema": "drop table; --"}),
        ("postgresql://u@h/db?schema=a-b", {}),
        ("postgresql://u@h:notaport/db", {}),
    ],
)
def test_a_malformed_url_or_schema_is_a_usage_error(bad):
    spec, keywords = bad
    with pytest.raises(StorageConfigError):
        PostgresStorage(spec, **keywords)


def test_schema_can_come_from_a_postgres_url(url, schema, run):
    short = url.replace("postgresql://", "postgres://", 1)
    storage = PostgresStorage(f"{short}?schema={schema}")
    try:
        run(storage.save(SessionRecord("s")))
        assert storage.schema == schema
        assert f"schema {schema}" in storage.location
    finally:
        run(storage.close())
    assert query(url, f'SELECT session_id FROM "{schema}".sessions') == [("s",)]


# migrations


def test_migrations_are_recorded_once_and_each_step_is_idempotent(url, schema, run):
    first = PostgresStorage(url, schema=schema)
    run(first.session_ids())
    recorded = query(url, f'SELECT version, name, applied_at FROM "{schema}".schema_migrations')
    assert [(v, n) for v, n, _ in sorted(recorded)] == [
        (i, step.__name__) for i, step in enumerate(MIGRATIONS, start=1)
    ]

    async def again() -> None:  # running a step again changes nothing and does not fail
        db = await psycopg.AsyncConnection.connect(url, autocommit=True)
        async with db, db.transaction():
            for step in MIGRATIONS:
                await step(PostgresExecutor(db), PostgresDialect(schema))

    run(again())
    second = PostgresStorage(url, schema=schema)
    run(second.session_ids())
    assert sorted(query(url, f'SELECT * FROM "{schema}".schema_migrations')) == sorted(recorded)
    run(first.close())
    run(second.close())


def test_many_threads_starting_on_an_empty_database_migrate_it_once(url, schema):
    def start(i: int) -> list[str]:
        storage = PostgresStorage(url, schema=schema)
        try:
            asyncio.run(storage.save(SessionRecord(f"s{i}", messages=turn(str(i)))))
            return asyncio.run(storage.session_ids())
        finally:
            asyncio.run(storage.close())

    in_threads(6, start)
    versions = query(url, f'SELECT version FROM "{schema}".schema_migrations ORDER BY version')
    assert versions == [(i,) for i in range(1, len(MIGRATIONS) + 1)]
    assert len(query(url, f'SELECT 1 FROM "{schema}".sessions')) == 6


def test_several_processes_starting_at_once_migrate_once(url, schema):
    code = textwrap.dedent(
        """
        import asyncio, sys
        from foliko_cli.storage.postgres import PostgresStorage
        from foliko_cli.messages.record import SessionRecord
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        sys.stdin.readline()  # go: everyone starts at once
        storage = PostgresStorage(sys.argv[1], schema=sys.argv[2])
        asyncio.run(storage.save(SessionRecord(sys.argv[3])))
        asyncio.run(storage.close())
        """
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, url, schema, f"p{i}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(4)
    ]
    for process in processes:
        assert process.stdout.readline() == b"ready\n"
    for process in processes:
        process.stdin.write(b"go\n")
        process.stdin.flush()
    for process in processes:
        _, err = process.communicate(timeout=HANG)
        assert process.returncode == 0, err.decode()
    assert len(query(url, f'SELECT 1 FROM "{schema}".schema_migrations')) == len(MIGRATIONS)
    assert sorted(query(url, f'SELECT session_id FROM "{schema}".sessions')) == [
        (f"p{i}",) for i in range(4)
    ]


def test_a_schema_from_a_newer_foliko_is_refused_and_left_alone(url, pg, schema, run):
    run(pg.save(SessionRecord("keep", messages=turn("x"))))
    query(url, f"INSERT INTO {pg._dialect.quoted}.schema_migrations VALUES (999, 'future', 0)")
    newer = PostgresStorage(url, schema=pg.schema)
    with pytest.raises(StorageError, match="upgrade foliko"):
        run(newer.session_ids())
    run(newer.close())
    assert query(url, f"SELECT session_id FROM {pg._dialect.quoted}.sessions") == [("keep",)]


def test_a_turn_s_first_lock_creates_the_schema_or_refuses_a_newer_one(url, schema, run):
    """The first lock of a storage checks the schema in the same statement."""
    fresh = PostgresStorage(url, schema=schema)

    async def lock_first() -> None:
        async with fresh.lock("s", 5):
            assert await fresh.revision("s") is None  # the tables are there

    run(lock_first())
    run(fresh.close())
    query(url, f"INSERT INTO \"{schema}\".schema_migrations VALUES (999, 'future', 0)")
    newer = PostgresStorage(url, schema=schema)

    async def lock_newer() -> None:
        async with newer.lock("s", 5):
            raise AssertionError("locked a schema from a newer foliko")

    with pytest.raises(StorageError, match="upgrade foliko"):
        run(lock_newer())
    run(newer.close())
    key = postgres_module.advisory_key("session", schema, "s")

    def free() -> bool:  # the refused lock was let go (its connection closed)
        with psycopg.connect(url, autocommit=True) as db:
            (taken,) = db.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            return taken

    from foliko_cli.common.poll import poll

    assert run(poll(free, time.monotonic() + HANG))


def test_a_compression_state_that_is_not_json_is_damage_on_a_turn_s_read(url, pg, run):
    record = SessionRecord("s", messages=turn("a") + turn("b"))
    record.compression_state = {"covered": 2}
    run(pg.save(record))
    query(url, f"UPDATE {pg._dialect.quoted}.sessions SET compression_state = '{{broken'")
    for read in (capabilities.load_recent, capabilities.load_state):
        with pytest.raises(CorruptSessionError):
            run(read(pg, "s"))


# records


def test_records_round_trip_unchanged_through_save_load_and_append(pg, run):
    records = sample_records()
    revisions = run(pg.save_many(records))
    for record in records:
        loaded = run(pg.load(record.session_id))
        assert loaded.messages == record.messages
        assert loaded.variables == record.variables
        assert loaded.compression_state == record.compression_state
        assert content_hash(loaded) == content_hash(record)
        assert loaded.metadata["message_count"] == len(record.messages)
    for record, revision in zip(records, revisions, strict=True):
        loaded = run(pg.load(record.session_id))
        assert loaded.revision == revision
    assert run(pg.load("tools")).saved_at == records[0].saved_at  # a given saved_at is kept
    assert run(pg.load("empty")).saved_at > records[0].saved_at  # 0 means now

    tools = records[0]
    more = turn("noch eine Frage ✓\x00")
    revision = run(pg.append("tools", more, state(tools.variables), expected_revision=revisions[0]))
    assert revision == revisions[0] + 1
    loaded = run(pg.load("tools"))
    assert loaded.messages == tools.messages + more
    assert content_hash(loaded) == content_hash(
        SessionRecord("tools", messages=tools.messages + more, variables=tools.variables)
    )
    summary = next(s for s in run(pg.list_summaries()) if s.session_id == "tools")
    assert summary.preview == "noch eine Frage ✓"  # NUL cannot live in a text column
    assert summary.message_count == len(tools.messages) + 2


def test_seq_is_gap_free_in_commit_order(url, pg, run):
    first = run(pg.append("s", turn("a"), state(), expected_revision=0))
    run(pg.append("s", turn("b"), state(), expected_revision=first))
    run(pg.save(SessionRecord("t", messages=turn("c"))))
    rows = query(
        url, f"SELECT session_id, seq FROM {pg._dialect.quoted}.messages ORDER BY session_id, seq"
    )
    assert rows == [("s", 0), ("s", 1), ("s", 2), ("s", 3), ("t", 0), ("t", 1)]


def test_concurrent_appends_from_several_connections_lose_nothing(url, pg, run):
    run(pg.session_ids())  # migrate first: this test is about appends
    writers, turns = 6, 10

    revisions = concurrent_appends(lambda: PostgresStorage(url, schema=pg.schema), writers, turns)
    total = writers * turns
    assert revisions == list(range(revisions[0], revisions[0] + total))  # one per append
    seqs = query(
        url,
        f"SELECT seq FROM {pg._dialect.quoted}.messages WHERE session_id = 'shared' ORDER BY seq",
    )
    assert [seq for (seq,) in seqs] == list(range(2 * total))
    record = run(pg.load("shared"))
    assert record.revision == revisions[-1]
    users = [m["content"] for m in record.messages[0::2]]
    assert sorted(users) == sorted(f"w{w}t{t}" for w in range(writers) for t in range(turns))
    replies = [m["content"] for m in record.messages[1::2]]
    assert replies == [f"echo: {u}" for u in users]  # each user message followed by its reply
    assert run(pg.list_summaries())[0].message_count == 2 * total


def created_meanwhile(monkeypatch) -> None:
    """The next revision read finds nothing, as if another writer created the
    session just after it (its INSERT then fails on the primary key)."""
    real = writes.stored_revisions
    calls = []

    async def first_finds_nothing(db, dialect, session_ids):
        calls.append(session_ids)
        return {} if len(calls) == 1 else await real(db, dialect, session_ids)

    monkeypatch.setattr(writes, "stored_revisions", first_finds_nothing)


def test_a_save_that_loses_a_creation_race_runs_again_as_a_replace(pg, run, monkeypatch):
    first = run(pg.save(SessionRecord("s", messages=turn("theirs"))))
    created_meanwhile(monkeypatch)
    second = run(pg.save(SessionRecord("s", messages=turn("ours"))))
    assert second == first + 1
    assert run(pg.load("s")).messages == turn("ours")


def test_a_create_only_save_that_loses_a_creation_race_finds_the_session(pg, run, monkeypatch):
    run(pg.save(SessionRecord("s", messages=turn("theirs"))))
    created_meanwhile(monkeypatch)
    with pytest.raises(SessionExistsError):
        run(pg.save(SessionRecord("s", messages=turn("ours")), expected_revision=0))
    assert run(pg.load("s")).messages == turn("theirs")


def test_save_many_is_one_transaction(pg, run, monkeypatch):
    before = run(pg.save(SessionRecord("a", messages=turn("old a"))))

    def fail(*args: Any) -> None:
        raise psycopg.errors.DiskFull("simulated")

    monkeypatch.setattr(pg._dialect, "insert_messages", fail)
    batch = [SessionRecord("a", messages=turn("new a")), SessionRecord("b")]
    with pytest.raises(StorageError, match="simulated"):
        run(pg.save_many(batch))
    monkeypatch.undo()
    assert run(pg.session_ids()) == ["a"]
    assert run(pg.load("a")).messages == turn("old a")
    assert run(pg.revision("a")) == before


def test_a_nul_in_a_session_id_is_rejected_as_bad_input(pg, run):
    with pytest.raises(InvalidSessionIdError):
        run(pg.save(SessionRecord("a\x00b")))


def test_summaries_are_newest_first_across_pages(pg, run, monkeypatch):
    monkeypatch.setattr(postgres_module, "SUMMARY_PAGE", 3)
    stamps = {"a": 5, "b": 9, "c": 5, "d": 1, "e": 9, "f": 7, "g": 5, "h": 2}
    run(pg.save_many([SessionRecord(sid, saved_at=at) for sid, at in stamps.items()]))
    order = [s.session_id for s in run(pg.list_summaries())]
    assert order == sorted(stamps, key=lambda sid: (-stamps[sid], sid))


def test_check_reports_a_corrupt_session_and_quarantine_moves_it_aside(url, pg, run):
    run(pg.save(SessionRecord("bad", messages=turn("hello"))))
    run(pg.save(SessionRecord("good", messages=turn("fine"))))
    query(
        url,
        f"UPDATE {pg._dialect.quoted}.messages SET body = '{{not json' WHERE session_id = 'bad'",
    )
    with pytest.raises(CorruptSessionError):
        run(pg.load("bad"))
    problems = run(capabilities.check(pg))
    assert [p.session_id for p in problems] == ["bad"]
    where = run(pg.quarantine(problems[0]))
    assert f"{pg.schema}.quarantine" in where
    assert run(pg.session_ids()) == ["good"]
    assert run(capabilities.check(pg)) == []
    (moved,) = query(
        url, f"SELECT session_id, reason, messages FROM {pg._dialect.quoted}.quarantine"
    )
    assert moved[0] == "bad"
    assert "{not json" in moved[2]  # kept, never deleted


def test_info_reports_counts_and_schema_version(pg, run):
    run(pg.save_many([SessionRecord("a", messages=turn("x")), SessionRecord("b")]))
    info = run(pg.info())
    assert info["backend"] == "postgresql"
    assert (info["sessions"], info["messages"]) == (2, 2)
    assert info["schema_version"] == len(MIGRATIONS)
    assert info["schema"] == pg.schema


def test_a_dropped_connection_is_reopened_on_the_next_call(url, pg, run):
    run(pg.save(SessionRecord("s")))
    (pool,) = pg._pools.values()
    (connection,) = pool.idle  # calls one after another reuse one connection
    query(url, "SELECT pg_terminate_backend(%s)", (connection.info.backend_pid,))
    with pytest.raises(StorageError, match=r"127\.0\.0\.1:5432"):
        run(pg.session_ids())
    assert run(pg.session_ids()) == ["s"]


# the session lock


def test_a_cancelled_wait_for_the_session_lock_leaves_it_free(url, pg, run):
    other = PostgresStorage(url, schema=pg.schema)

    async def take(storage: PostgresStorage, timeout: float) -> None:
        async with storage.lock("s1", timeout):
            pass

    async def scenario() -> None:
        async with pg.lock("s1", 5):
            waiting = asyncio.create_task(take(other, HANG))
            assert await poll_query(url, "pg_try_advisory_lock", at_least=2)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        await take(other, 0)
        await take(pg, 0)

    try:
        run(scenario())
    finally:
        run(other.close())


async def poll_query(url: str, text: str, *, at_least: int) -> bool:
    """True once ``at_least`` of this process's lock connections last ran ``text``."""
    from foliko_cli.common.poll import poll

    def seen() -> bool:
        ((count,),) = query(
            url,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s "
            "AND query LIKE %s",
            (f"foliko: pid {os.getpid()} on %", f"%{text}%"),
        )
        return count >= at_least

    return await poll(seen, time.monotonic() + HANG)


def test_turns_under_the_lock_never_conflict(url, pg, run):
    run(pg.session_ids())

    def take_turns(worker: int) -> None:
        storage = PostgresStorage(url, schema=pg.schema)

        async def go() -> None:
            for t in range(5):
                async with storage.lock("shared", HANG):
                    revision = await storage.revision("shared") or 0
                    await storage.append(
                        "shared", turn(f"w{worker}t{t}"), state(), expected_revision=revision
                    )
            await storage.close()

        asyncio.run(go())

    in_threads(4, take_turns)
    record = run(pg.load("shared"))
    assert len(record.messages) == 40
    assert len({m["content"] for m in record.messages}) == 40


def test_a_killed_holder_does_not_block_the_session(url, pg, run):
    run(pg.session_ids())
    holder = textwrap.dedent(
        """
        import asyncio, sys
        from foliko_cli.storage.postgres import PostgresStorage

        async def main():
            storage = PostgresStorage(sys.argv[1], schema=sys.argv[2])
            async with storage.lock("s1", 10):
                print("locked", flush=True)
                await asyncio.Event().wait()

        asyncio.run(main())
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", holder, url, pg.schema], stdout=subprocess.PIPE
    )
    try:
        assert process.stdout.readline() == b"locked\n"

        async def busy() -> None:
            async with pg.lock("s1", 0.1):
                pass

        with pytest.raises(SessionBusyError) as error:
            run(busy())
        assert f"pid {process.pid} on " in error.value.holder
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=HANG)

    async def take_over() -> float:
        started = time.monotonic()
        async with pg.lock("s1", 10):
            return time.monotonic() - started

    assert run(take_over()) < 10


def test_a_lock_connection_lost_mid_turn_is_closed_and_the_session_freed(url, pg, run):
    other = PostgresStorage(url, schema=pg.schema)
    key = postgres_module.advisory_key("session", pg.schema, "s1")

    async def scenario() -> None:
        async with pg.lock("s1", 5):
            ((holder_pid,),) = query(
                url,
                """SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
                   AND classid::bigint = %s AND objid::bigint = %s""",
                ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
            )
            query(url, "SELECT pg_terminate_backend(%s)", (holder_pid,))
        # leaving the block found the connection dead: no error, and nothing stays locked
        async with other.lock("s1", 5):
            pass
        async with pg.lock("s1", 5):
            pass

    try:
        run(scenario())
    finally:
        run(other.close())


# bounded waits, privileges and what a health check leaves behind


def test_every_connection_has_keepalives_and_statement_bounds(url, pg, run):
    async def connections():
        await pg.session_ids()
        (pool,) = pg._pools.values()
        pooled = pool.idle[-1]
        async with pg.lock("s1", 5), pg.lock("s2", 5):  # the second opens one
            held = postgres_module._HELD.get().conn
        assert held is not pooled
        return [pooled, held]

    async def shown(conn, name):
        return (await (await conn.execute(f"SHOW {name}")).fetchone())[0]

    for conn in run(connections()):
        settings = conn.info.get_parameters()
        assert settings["keepalives"] == "1"
        assert (settings["keepalives_idle"], settings["keepalives_interval"]) == ("5", "2")
        assert settings["keepalives_count"] == "3"
        if psycopg.pq.version() >= 120000:
            assert settings["tcp_user_timeout"] == "20000"
        names = ("statement_timeout", "lock_timeout", "tcp_keepalives_idle")
        assert {name: run(shown(conn, name)) for name in names} == {
            "statement_timeout": "30s",
            "lock_timeout": "30s",
            "tcp_keepalives_idle": "5",
        }
        run(conn.close())


def test_a_frozen_connection_holds_only_the_operation_running_on_it(url, schema, run):
    """One connection stops answering mid-query: the storage's other operations
    (other sessions, the list, a session lock) finish on its other connections
    while the frozen one is still waiting, and the frozen one fails at its bound."""
    from foliko_cli.common.poll import poll

    from .stallproxy import stalling_proxy, through

    bound = 3.0
    with stalling_proxy(url) as proxy:
        storage = PostgresStorage(through(url, proxy), schema=schema, operation_timeout=bound)

        async def others() -> list[Any]:
            async def locked() -> bool:
                async with storage.lock("b", 1):
                    return True

            return await asyncio.gather(
                storage.load("a"),
                storage.load("b"),
                storage.session_ids(),
                storage.save(SessionRecord("c")),
                locked(),
            )

        async def scenario() -> None:
            for session_id in ("frozen-one", "a", "b"):
                await storage.save(SessionRecord(session_id, messages=turn(session_id)))
            proxy.freeze_on(b"frozen-one")
            frozen = asyncio.create_task(storage.load("frozen-one"))
            assert await poll(proxy.frozen.is_set, time.monotonic() + HANG)
            a, b, listed, _, was_locked = await asyncio.wait_for(others(), 2.0)
            assert not frozen.done(), "the other operations waited on the frozen connection"
            assert (a.messages, b.messages) == (turn("a"), turn("b"))
            assert {"a", "b", "frozen-one"} <= set(listed) and was_locked
            with pytest.raises(StorageError, match=f"did not answer within {bound:g}s"):
                await asyncio.wait_for(frozen, bound + 5)

        try:
            run(scenario())
        finally:
            run(storage.close())


def test_a_health_check_creates_no_schema(url, schema, run):
    storage = PostgresStorage(url, schema=schema)
    try:
        assert run(storage.health_check()) is True
    finally:
        run(storage.close())
    assert query(url, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)) == []


def test_an_existing_schema_needs_no_create_privilege_on_the_database(url, schema, run):
    import secrets

    role = f"foliko_reader_{secrets.token_hex(4)}"
    owner = PostgresStorage(url, schema=schema)
    run(owner.save(SessionRecord("s", messages=[{"role": "user", "content": "hi"}])))
    run(owner.close())
    # the schema exists, but a step is missing: the role must add it without CREATE SCHEMA
    quarantine_step = [step.__name__ for step in MIGRATIONS].index("create_quarantine") + 1
    query(url, f'DELETE FROM "{schema}".schema_migrations WHERE version = %s', (quarantine_step,))
    query(url, f'DROP TABLE "{schema}".quarantine')
    query(url, f'CREATE ROLE "{role}" LOGIN')
    try:
        query(url, f'GRANT USAGE, CREATE ON SCHEMA "{schema}" TO "{role}"')
        query(url, f'GRANT ALL ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        as_role = url.replace("postgres@", f"{role}@", 1)
        storage = PostgresStorage(as_role, schema=schema)
        try:
            assert run(storage.load("s")).messages == [{"role": "user", "content": "hi"}]
        finally:
            run(storage.close())
        assert query(url, f"SELECT to_regclass('\"{schema}\".quarantine') IS NOT NULL") == [(True,)]
        other = PostgresStorage(as_role, schema=f"{schema}_new")
        with pytest.raises(StorageError) as error:
            run(other.session_ids())
        assert "permission denied" in str(error.value)
        run(other.close())
    finally:
        query(url, f'DROP OWNED BY "{role}"')
        query(url, f'DROP ROLE "{role}"')


def test_info_and_location_of_a_working_storage_never_show_the_password(url, schema, run):
    with_password = url.replace("postgres@", "postgres:pw%40s3cret@", 1) + "&password=q3cret"
    with_password = with_password.replace("&", "?", 1) if "?" not in url else with_password
    storage = PostgresStorage(with_password, schema=schema)
    try:
        run(storage.save(SessionRecord("s")))
        shown = [str(run(storage.info())), storage.location, repr(storage)]
    finally:
        run(storage.close())
    for text in shown:
        assert "s3cret" not in text and "q3cret" not in text and "%40" not in text


# a turn on the wire: one connection, one statement per step


def test_a_cold_turn_is_one_connection_and_one_statement_per_step(url, schema, tmp_path, run):
    from foliko_cli.common.poll import poll
    from foliko_cli.service.facade import Foliko

    from .pgwire import counting_proxy, through

    with counting_proxy(url) as proxy:
        proxied = f"{through(url, proxy)}&schema={schema}"
        with Foliko(proxied, "echo", home=tmp_path) as facade:
            facade.chat("s", "first")  # creates the schema and the session
        before = proxy.snapshot()
        with Foliko(proxied, "echo", home=tmp_path) as facade:
            facade.chat("s", "second")

        def unlocked() -> bool:  # the proxy has read the turn's last statement
            return any("pg_advisory_unlock" in t for t in (proxy.snapshot() - before).texts)

        assert run(poll(unlocked, time.monotonic() + HANG))
        sent = proxy.snapshot() - before
    assert sent.connections == 1
    assert [text.split(" ")[0] for text in sent.texts] == ["SELECT"] * 3 + ["WITH", "SELECT"]
    assert sent.round_trips == sent.statements == sent.transactions == 5
    lock, revision, read, write, unlock = sent.texts
    assert "pg_try_advisory_lock" in lock and "schema_migrations" in lock
    assert "SELECT revision" in revision and "array_agg(m.body" in read
    assert "FOR UPDATE" in write and "INSERT INTO" in write
    assert "pg_advisory_unlock" in unlock
    assert run(PostgresStorage(url, schema=schema).load("s")).metadata["message_count"] == 4


def test_the_lock_connection_serves_the_turn_and_no_one_else(url, pg, run):
    def last_query(conn: Any) -> str:
        ((text,),) = query(
            url, "SELECT query FROM pg_stat_activity WHERE pid = %s", (conn.info.backend_pid,)
        )
        return text

    async def scenario() -> None:
        await pg.save(SessionRecord("other", messages=turn("b")))
        async with pg.lock("s", 5):
            held = postgres_module._HELD.get()
            revision = await pg.append("s", turn("a"), state(), expected_revision=0)
            assert "WITH locked AS" in last_query(held.conn)
            await pg.load("other")  # another session: a connection of the pool
            (pool,) = pg._pools.values()
            (pooled,) = pool.idle
            assert pooled is not held.conn and "WITH locked AS" in last_query(held.conn)
            assert await pg.revision("s") == revision
            assert "SELECT revision" in last_query(held.conn)
            loads = await asyncio.gather(*(pg.load("s") for _ in range(3)))  # at once: the
            assert {len(r.messages) for r in loads} == {2}  # others on the pool, none waits
            assert not held.busy
        assert not held.active  # released: it serves nothing any more
        assert held.conn in pool.idle  # and went back to the pool

    run(scenario())


def test_an_append_that_waited_for_another_writer_is_a_conflict_never_damage(url, pg, run):
    run(pg.append("s", turn("one"), state(), expected_revision=0))
    stale = run(pg.revision("s"))
    table = f'"{pg.schema}"'

    async def scenario() -> None:
        other = await psycopg.AsyncConnection.connect(url)
        try:
            async with other.transaction():
                # another writer's append, committed while ours waits for the row
                await other.execute(
                    f"UPDATE {table}.sessions SET revision = revision + 1, "
                    "message_count = message_count + 1 WHERE session_id = 's'"
                )
                await other.execute(
                    f"INSERT INTO {table}.messages (session_id, seq, role, created_at, body) "
                    """VALUES ('s', 2, 'user', 0, '{"role": "user", "content": "x"}')"""
                )
                ours = asyncio.ensure_future(
                    pg.append("s", turn("two"), state(), expected_revision=stale)
                )

                def waiting() -> bool:
                    ((count,),) = query(
                        url,
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE %s",
                        (f"%{pg.schema}%FOR UPDATE%",),
                    )
                    return count > 0

                from foliko_cli.common.poll import poll

                assert await poll(lambda: asyncio.to_thread(waiting), time.monotonic() + HANG)
            with pytest.raises(ConflictError) as raised:
                await ours
            assert raised.value.found == stale + 1
        finally:
            await other.close()

    run(scenario())
    assert [m["content"] for m in run(pg.load("s")).messages] == ["one", "echo: one", "x"]
