"""What is specific to the Redis backend, against the real server.

Keys with a per-session hash tag, one Lua script per write, listing from the
index sorted set, the lease lock (renewed while a turn runs, released only by
its owner, expiring when its holder is killed), errors without the password.
Each test works under a key prefix of its own whose keys are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.crc import key_slot

from foliko_cli.errors import (
    ConflictError,
    CorruptSessionError,
    SessionBusyError,
    StorageConfigError,
    StorageError,
)
from foliko_cli.messages.record import SessionRecord
from foliko_cli.messages.stored import content_hash
from foliko_cli.storage.redis import RedisStorage, hash_tag, persistence

from .services import concurrent_appends, redis_storage, require_redis, sample_records, state, turn

HANG = 60  # seconds: only reached when something hangs


@pytest.fixture
def url() -> str:
    return require_redis()


@pytest.fixture
def rs(url: str, runner: asyncio.Runner) -> Iterator[RedisStorage]:
    with redis_storage(url) as storage:
        yield storage
        runner.run(storage.close())  # on the loop its connections belong to


@pytest.fixture
def client(url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(url)
    yield connection
    connection.close()


# the driver is optional and loaded late


@pytest.mark.parametrize(
    "bad",
    [
        ("http://h:6379/0", {}),
        ("redis://h:6379/0", {"prefix": "a{b}"}),
        ("redis://h:6379/zero", {}),
        ("redis://h:6379/0", {"lease_ms": 5}),
    ],
)
def test_a_malformed_url_prefix_or_lease_is_a_usage_error(bad):
    spec, keywords = bad
    with pytest.raises(StorageConfigError):
        RedisStorage(spec, **keywords)


def test_prefix_and_lease_can_come_from_the_url(url, run, client):
    storage = RedisStorage(f"{url}?prefix=foliko-test-url&lease_ms=2000")
    try:
        assert (storage.prefix, storage.lease_ms) == ("foliko-test-url", 2000)
        run(storage.save(SessionRecord("s")))
        assert client.zrange("foliko-test-url:index", 0, -1) == [b"s"]
    finally:
        run(storage.delete("s"))
        run(storage.close())


# records


def test_records_round_trip_unchanged_through_save_load_and_append(rs, run):
    records = sample_records()
    revisions = run(rs.save_many(records))
    for record in records:
        loaded = run(rs.load(record.session_id))
        assert loaded.messages == record.messages
        assert loaded.variables == record.variables
        assert loaded.compression_state == record.compression_state
        assert content_hash(loaded) == content_hash(record)
        assert loaded.metadata["message_count"] == len(record.messages)
    for record, revision in zip(records, revisions, strict=True):
        loaded = run(rs.load(record.session_id))
        assert loaded.revision == revision  # clock-sized revisions survive Lua exactly
        assert run(rs.revision(record.session_id)) == revision
    assert run(rs.load("tools")).saved_at == records[0].saved_at  # a given saved_at is kept
    assert run(rs.load("empty")).saved_at > records[0].saved_at  # 0 means now

    tools = records[0]
    more = turn("noch eine Frage ✓")
    revision = run(rs.append("tools", more, state(tools.variables), expected_revision=revisions[0]))
    assert revision == revisions[0] + 1
    loaded = run(rs.load("tools"))
    assert loaded.messages == tools.messages + more
    assert content_hash(loaded) == content_hash(
        SessionRecord("tools", messages=tools.messages + more, variables=tools.variables)
    )


def test_one_sessions_keys_share_a_cluster_slot(rs, run, client):
    for session_id in ("plain", "a{b}c", "}x{", "%7B"):
        run(rs.save(SessionRecord(session_id, messages=turn("x"))))
        keys = [rs.key(session_id, kind) for kind in ("meta", "msgs", "lock")]
        assert all(hash_tag(session_id) in key for key in keys)
        assert len({key_slot(key.encode()) for key in keys}) == 1
        assert client.exists(keys[0]) and client.llen(keys[1]) == 2
        assert run(rs.load(session_id)).session_id == session_id
    assert hash_tag("a{b}c") == "{a%7Bb%7Dc}"
    assert hash_tag("%7B") != hash_tag("{")  # escaping keeps distinct ids distinct
    assert sorted(run(rs.session_ids())) == sorted(["plain", "a{b}c", "}x{", "%7B"])


def test_listing_reads_the_index_never_scan(rs, run, client, monkeypatch):
    run(rs.save(SessionRecord("old", messages=turn("a"), saved_at=1000)))
    run(rs.append("new", turn("b"), state(), expected_revision=0))

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("listing must read the index, not walk the keyspace")

    for method in ("scan", "scan_iter", "keys"):
        monkeypatch.setattr(redis.asyncio.Redis, method, forbidden)
    assert sorted(run(rs.session_ids())) == ["new", "old"]
    assert [s.session_id for s in run(rs.list_summaries())] == ["new", "old"]
    scores = dict(client.zrange(rs.index_key, 0, -1, withscores=True))
    assert scores[b"old"] == 1000
    assert scores[b"new"] == run(rs.load("new")).saved_at
    assert run(rs.delete("old")) is True
    assert client.zrange(rs.index_key, 0, -1) == [b"new"]


def test_a_conflicting_append_changes_nothing(rs, run, client):
    run(rs.append("s", turn("one"), state(), expected_revision=0))
    before = client.hgetall(rs.key("s", "meta")), client.lrange(rs.key("s", "msgs"), 0, -1)
    with pytest.raises(ConflictError):
        run(rs.append("s", turn("two"), state(), expected_revision=0))
    after = client.hgetall(rs.key("s", "meta")), client.lrange(rs.key("s", "msgs"), 0, -1)
    assert after == before


def test_concurrent_appends_from_several_clients_lose_nothing(url, rs, run):
    writers, turns = 6, 10

    revisions = concurrent_appends(lambda: RedisStorage(url, prefix=rs.prefix), writers, turns)
    total = writers * turns
    assert revisions == list(range(revisions[0], revisions[0] + total))  # one per append
    record = run(rs.load("shared"))
    assert record.revision == revisions[-1]
    users = [m["content"] for m in record.messages[0::2]]
    assert sorted(users) == sorted(f"w{w}t{t}" for w in range(writers) for t in range(turns))
    replies = [m["content"] for m in record.messages[1::2]]
    assert replies == [f"echo: {u}" for u in users]  # each user message followed by its reply
    assert run(rs.list_summaries())[0].message_count == 2 * total


def test_an_append_of_many_messages_is_one_script_call(rs, run):
    messages = [m for i in range(3000) for m in turn(f"q{i}")]  # beyond Lua's unpack limit
    run(rs.append("big", messages, state(), expected_revision=0))
    assert run(rs.load("big")).messages == messages


def test_check_reports_corrupt_sessions_and_quarantine_moves_them_aside(rs, run, client):
    run(rs.save(SessionRecord("bad-json", messages=turn("x"))))
    run(rs.save(SessionRecord("bad-type", messages=turn("y"))))
    run(rs.save(SessionRecord("evicted", messages=turn("w"))))
    run(rs.save(SessionRecord("good", messages=turn("z"))))
    client.hset(rs.key("bad-json", "meta"), "variables", b"{not json")
    client.delete(rs.key("evicted", "msgs"))  # what maxmemory eviction can do to one key
    client.delete(rs.key("bad-type", "msgs"))
    client.set(rs.key("bad-type", "msgs"), b"not a list")
    for session_id in ("bad-json", "bad-type", "evicted"):
        with pytest.raises(CorruptSessionError):
            run(rs.load(session_id))
    problems = run(rs.check())
    assert sorted(p.session_id for p in problems) == ["bad-json", "bad-type", "evicted"]
    for problem in problems:
        assert f"{rs.prefix}:q:" in run(rs.quarantine(problem))
    assert run(rs.session_ids()) == ["good"]
    assert run(rs.check()) == []
    moved = client.hgetall(rs.quarantine_key)
    assert len(moved) == 3
    kept = list(client.scan_iter(f"{rs.prefix}:q:*:meta"))
    assert any(client.hget(key, "variables") == b"{not json" for key in kept)  # never deleted


def test_save_many_runs_in_one_multi(rs, run, monkeypatch):
    calls: list[str] = []
    pipeline = redis.asyncio.Redis.pipeline

    def spy(self: Any, transaction: bool = True, **kwargs: Any) -> Any:
        calls.append("multi" if transaction else "pipeline")
        return pipeline(self, transaction=transaction, **kwargs)

    monkeypatch.setattr(redis.asyncio.Redis, "pipeline", spy)
    records = [SessionRecord(f"s{i}", messages=turn(str(i))) for i in range(5)]
    revisions = run(rs.save_many(records))
    assert calls == ["pipeline", "multi"]  # the damage check of all, then the writes
    assert revisions == [run(rs.revision(f"s{i}")) for i in range(5)]
    assert sorted(run(rs.session_ids())) == [f"s{i}" for i in range(5)]


def test_info_reports_counts(rs, run):
    run(rs.save_many([SessionRecord("a", messages=turn("x")), SessionRecord("b")]))
    info = run(rs.info())
    assert info["backend"] == "redis"
    assert (info["sessions"], info["messages"]) == (2, 2)
    assert info["prefix"] == rs.prefix


@pytest.mark.parametrize(
    ("config", "kept"),
    [
        ({"appendonly": "yes", "save": ""}, "aof"),
        ({"appendonly": "no", "save": "3600 1 300 100"}, "rdb (save 3600 1 300 100)"),
        ({"appendonly": "yes", "save": "60 1"}, "aof + rdb (save 60 1)"),
        ({"appendonly": "no", "save": ""}, "none"),
    ],
)
def test_persistence_is_read_from_appendonly_and_save(config, kept):
    found, warning = persistence(config, "h:6379")
    assert found == kept
    assert (warning is not None) == (kept == "none")
    if warning:
        assert "Redis at h:6379 keeps nothing on disk" in warning
        assert "a restart of the server loses every session" in warning


def test_storage_info_warns_when_the_server_keeps_nothing_on_disk(url, rs, client, tmp_path):
    """CI's server runs with --save "" --appendonly no: the warning is the case
    tested there; a server that persists is reported without one."""
    config = {**client.config_get("appendonly"), **client.config_get("save")}
    kept, _ = persistence(config, "")
    where = f"{url}?prefix={rs.prefix}"
    env = {**os.environ, "FOLIKO_HOME": str(tmp_path)}
    foliko = [str(Path(sys.executable).with_name("foliko")), "--storage", where, "storage", "info"]
    shown = subprocess.run(foliko, capture_output=True, text=True, env=env, timeout=HANG)
    assert shown.returncode == 0, shown.stderr
    assert f"persistence     {kept}" in shown.stdout.splitlines()
    as_json = subprocess.run([*foliko, "--json"], capture_output=True, text=True, env=env)
    details = json.loads(as_json.stdout)
    assert details["persistence"] == kept and as_json.stderr == ""
    if kept == "none":
        (line,) = shown.stderr.splitlines()
        assert line.startswith("foliko: warning: Redis at ") and "keeps nothing on disk" in line
        (warning,) = details["warnings"]
        assert line.endswith(warning)
    else:
        assert shown.stderr == "" and "warnings" not in details


def test_storage_info_warns_when_the_server_may_evict_sessions(rs, run, monkeypatch):
    real = rs._client

    def evicting():
        client = real()

        async def info(section: str) -> dict:
            found = await type(client).info(client, section)
            return {**found, "maxmemory_policy": "allkeys-lru"} if section == "memory" else found

        monkeypatch.setattr(client, "info", info)
        return client

    monkeypatch.setattr(rs, "_client", evicting)
    warnings = run(rs.info())["warnings"]
    assert any("maxmemory-policy allkeys-lru" in w and "noeviction" in w for w in warnings)


def test_storage_info_says_when_it_could_not_check_persistence(url, run, client):
    """A user whose ACL refuses CONFIG (as managed servers do): the warning says
    the check could not be made."""
    user, password = f"foliko-test-{os.getpid()}-noconfig", "pw"
    try:
        client.acl_setuser(
            user,
            enabled=True,
            passwords=[f"+{password}"],
            keys=["*"],
            channels=["*"],
            commands=["+@all", "-config"],
        )
    except redis.ResponseError as exc:
        pytest.skip(f"this Redis has no ACL users: {exc}")
    try:
        host = url.split("://", 1)[1]
        with redis_storage(f"redis://{user}:{password}@{host}") as storage:
            try:
                info = run(storage.info())
            finally:
                run(storage.close())
    finally:
        client.acl_deluser(user)
    assert info["persistence"] == "unknown"
    (warning,) = info["warnings"]
    assert "could not check whether Redis at" in warning and "CONFIG GET refused" in warning
    assert password not in warning


def test_prefixes_keep_storages_apart(url, rs, run):
    with redis_storage(url) as other:
        run(other.save(SessionRecord("s")))
        assert run(rs.session_ids()) == []
        assert run(other.session_ids()) == ["s"]


# the session lock


def test_a_turn_longer_than_the_lease_keeps_the_lock(url, run, client):
    lease_ms = 300
    with redis_storage(url, lease_ms=lease_ms) as rs:
        other = RedisStorage(url, prefix=rs.prefix, lease_ms=lease_ms)
        renewed = asyncio.Event()
        renewals = 0
        renew = rs._renew_script

        def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal renewals
            result = renew(*args, **kwargs)
            renewals += 1
            if renewals == 7:  # more than two whole leases have gone by
                renewed.set()
            return result

        rs._renew_script = counting

        async def scenario() -> float:
            started = time.monotonic()
            async with rs.lock("s1", 5):
                owner = client.get(rs.key("s1", "lock"))
                async with asyncio.timeout(20):
                    await renewed.wait()
                held = time.monotonic() - started
                assert client.get(rs.key("s1", "lock")) == owner
                assert 0 < client.pttl(rs.key("s1", "lock")) <= lease_ms
                with pytest.raises(SessionBusyError):
                    async with other.lock("s1", 0):
                        pass
            assert client.exists(rs.key("s1", "lock")) == 0  # released on exit
            return held

        try:
            assert run(scenario()) > 2 * lease_ms / 1000
        finally:
            run(other.close())


def test_only_the_owner_renews_or_releases_the_lease(url, rs, run, client):
    other = RedisStorage(url, prefix=rs.prefix)
    key = rs.key("s1", "lock")

    async def scenario() -> None:
        stale = rs.lock("s1", 5)
        await stale.__aenter__()
        stale_owner = client.get(key)
        client.delete(key)  # the lease ran out while its holder stalled...
        fresh = other.lock("s1", 0)
        await fresh.__aenter__()  # ...so another holder took the session
        theirs = client.get(key)
        assert theirs != stale_owner
        assert await rs._renew_script([key], [stale_owner, 60_000], client=rs._client()) == 0
        await stale.__aexit__(None, None, None)  # the stale holder finishes its turn
        assert client.get(key) == theirs  # and leaves the new holder's lease alone
        await fresh.__aexit__(None, None, None)
        assert client.get(key) is None

    try:
        run(scenario())
    finally:
        run(other.close())


def test_a_killed_holder_stops_blocking_once_its_lease_runs_out(url, run):
    lease_ms = 1000
    with redis_storage(url, lease_ms=lease_ms) as rs:
        holder = textwrap.dedent(
            """
            import asyncio, sys
            from foliko_cli.storage.redis import RedisStorage

            async def main():
                storage = RedisStorage(sys.argv[1], prefix=sys.argv[2], lease_ms=int(sys.argv[3]))
                async with storage.lock("s1", 10):
                    print("locked", flush=True)
                    await asyncio.Event().wait()

            asyncio.run(main())
            """
        )
        process = subprocess.Popen(
            [sys.executable, "-c", holder, url, rs.prefix, str(lease_ms)], stdout=subprocess.PIPE
        )
        try:
            assert process.stdout.readline() == b"locked\n"

            async def busy() -> None:
                async with rs.lock("s1", 0.1):
                    pass

            with pytest.raises(SessionBusyError) as error:
                run(busy())
            assert f"pid {process.pid} on " in error.value.holder
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=HANG)

        async def take_over() -> float:
            started = time.monotonic()
            async with rs.lock("s1", 5 * lease_ms / 1000):
                return time.monotonic() - started

        assert run(take_over()) <= 2 * lease_ms / 1000


def test_check_reports_keys_left_without_their_meta_hash_and_quarantine_clears_them(
    rs, run, client
):
    for name in ("indexed-only", "messages-only", "good"):
        run(rs.save(SessionRecord(name, messages=turn(name))))
    client.delete(rs.key("indexed-only", "meta"), rs.key("indexed-only", "msgs"))
    client.delete(rs.key("messages-only", "meta"))
    client.zrem(rs.index_key, "messages-only")
    problems = {p.session_id: p.reason for p in run(rs.check())}
    assert sorted(problems) == ["indexed-only", "messages-only"]
    assert "is gone" in problems["indexed-only"] and rs.index_key in problems["indexed-only"]
    assert rs.key("messages-only", "msgs") in problems["messages-only"]
    for problem in run(rs.check()):
        run(rs.quarantine(problem))
    assert run(rs.check()) == []
    assert run(rs.session_ids()) == ["good"]
    assert client.exists(rs.key("messages-only", "msgs")) == 0


def test_a_stored_integer_beyond_64_bits_is_corrupt_never_rounded(rs, run, client):
    run(rs.save(SessionRecord("s", messages=turn("x"))))
    client.hset(rs.key("s", "meta"), "variables", b'{"n": 18446744073709551616}')
    with pytest.raises(CorruptSessionError) as error:
        run(rs.load("s"))
    assert "64 bits" in error.value.reason


def test_a_health_check_creates_nothing(url, run, client):
    storage = RedisStorage(url, prefix="foliko-test-health-untouched")
    assert run(storage.health_check()) is True
    run(storage.close())
    assert list(client.scan_iter(match="foliko-test-health-untouched*")) == []


# a stalled connection holds only the call on it

STALL_TIMEOUT_S = 3
BOUND_S = 2.0  # the other calls' budget: they take milliseconds; a blocked loop takes 3 s
SLACK_S = 8.0


def test_a_frozen_connection_holds_only_the_call_on_it(url, runner):
    from .services import fresh_prefix
    from .stallproxy import stalling_proxy, through

    with fresh_prefix(url) as prefix, stalling_proxy(url) as proxy:
        storage = RedisStorage(
            through(url, proxy) + f"?socket_timeout={STALL_TIMEOUT_S}", prefix=prefix
        )

        async def others() -> None:
            record = await storage.load("other")
            revision = await storage.append(
                "other", turn("during the stall"), state(), expected_revision=record.revision
            )
            async with storage.lock("other", 1):
                assert await storage.revision("other") == revision
            assert "other" in await storage.session_ids()
            assert await storage.health_check() is True

        async def scenario() -> float:
            await storage.save(SessionRecord("frozen", messages=turn("a")))
            await storage.save(SessionRecord("other", messages=turn("b")))
            proxy.freeze_on(hash_tag("frozen").encode())
            started = time.monotonic()
            stalled = asyncio.ensure_future(storage.load("frozen"))
            assert await asyncio.to_thread(proxy.frozen.wait, HANG)
            async with asyncio.timeout(BOUND_S):
                await others()
            assert not stalled.done(), "the other calls waited for the frozen one"
            with pytest.raises(StorageError) as error:
                await stalled
            assert "cannot reach Redis" in str(error.value)
            failed_after = time.monotonic() - started
            assert (await storage.load("other")).messages[-1]["content"] == "echo: during the stall"
            return failed_after

        try:
            assert STALL_TIMEOUT_S - 0.5 < runner.run(scenario()) < STALL_TIMEOUT_S + SLACK_S
        finally:
            runner.run(storage.close())


# a turn's deadline bounds every Redis call of the turn

TURN_TIMEOUT_S = 2.0
DEADLINE_SLACK_S = 2.0  # far below socket_timeout (30 s): the deadline ended it


def read_script_sha() -> bytes:
    """What the read script's calls carry (EVALSHA <sha>): the marker to freeze on."""
    import hashlib

    from foliko_cli.storage.redis import _READ

    return hashlib.sha1(_READ.encode()).hexdigest().encode()


def test_the_driver_never_repeats_a_call(rs, run):
    async def retries() -> int:
        await rs.health_check()
        client = rs._client()
        connection = await client.connection_pool.get_connection()
        try:
            return connection.retry.get_retries()
        finally:
            await client.connection_pool.release(connection)

    assert run(retries()) == 0


def test_a_turn_whose_read_stalls_ends_by_its_deadline_and_frees_the_session(url, run, tmp_path):
    from foliko_cli.errors import TurnTimeoutError
    from foliko_cli.service import AsyncFoliko

    from .services import fresh_prefix
    from .stallproxy import stalling_proxy, through

    with fresh_prefix(url) as prefix, stalling_proxy(url) as proxy:
        storage = RedisStorage(through(url, proxy), prefix=prefix)

        async def scenario() -> float:
            await storage.save(SessionRecord("s", messages=turn("before")))
            service = AsyncFoliko(
                storage=storage, model="echo", home=tmp_path, timeout=TURN_TIMEOUT_S
            )
            proxy.freeze_on(read_script_sha())
            started = time.monotonic()
            with pytest.raises(TurnTimeoutError):
                await service.chat("s", "lost")
            ended = time.monotonic() - started
            assert proxy.frozen.is_set()  # the read was what stalled
            async with storage.lock("s", 0):  # the lease was released, not left to expire
                pass
            record = await storage.load("s")
            assert [m["content"] for m in record.messages] == ["before", "echo: before"]
            await service.chat("s", "next")
            return ended

        try:
            ended = run(scenario())
        finally:
            run(storage.close())
    assert ended < TURN_TIMEOUT_S + DEADLINE_SLACK_S


def test_sigterm_during_a_stalled_read_ends_the_turn_and_frees_the_session(url, tmp_path):
    from .services import fresh_prefix
    from .stallproxy import stalling_proxy, through

    foliko = str(Path(sys.executable).with_name("foliko"))
    with fresh_prefix(url) as prefix, stalling_proxy(url) as proxy:
        proxied = f"{through(url, proxy)}?prefix={prefix}"
        env = {**os.environ, "FOLIKO_MODEL": "echo", "FOLIKO_STORAGE": proxied}
        first = subprocess.run(
            [foliko, "chat", "-s", "s", "before"], env=env, capture_output=True, timeout=HANG
        )
        assert first.returncode == 0, first.stderr
        proxy.freeze_on(read_script_sha())
        turn_process = subprocess.Popen(
            [foliko, "chat", "-s", "s", "lost"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proxy.frozen.wait(HANG)
        started = time.monotonic()
        turn_process.send_signal(signal.SIGTERM)
        out, err = turn_process.communicate(timeout=HANG)
        assert time.monotonic() - started < DEADLINE_SLACK_S
        assert turn_process.returncode == 143, err
        assert out == ""
        after = subprocess.run(
            [foliko, "chat", "-s", "s", "next", "--timeout", "5"],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG,
        )
        assert after.returncode == 0, after.stderr  # a lease left held would be exit 4


def test_a_renewal_that_swallows_its_cancellation_still_ends_with_the_turn(url, run, client):
    """Python 3.11's asyncio.wait_for (redis-py sends with it) can lose a cancellation:
    the renewer then renewed a finished turn's lease forever, and the turn's exit,
    waiting for it, never came (a turn that hung for minutes, SIGTERM ignored)."""
    lease_ms = 300
    with redis_storage(url, lease_ms=lease_ms) as rs:
        renewing = asyncio.Event()

        async def swallowing(*args: Any, **kwargs: Any) -> int:
            renewing.set()
            try:
                await asyncio.sleep(HANG)
            except asyncio.CancelledError:
                raise redis.exceptions.ConnectionError("lost while cancelled") from None
            return 1

        async def scenario() -> float:
            async with rs.lock("s1", 5):
                rs._renew_script = swallowing  # from the first renewal on
                async with asyncio.timeout(HANG):
                    await renewing.wait()
                left = time.monotonic()
            return time.monotonic() - left

        assert run(scenario()) < 2 * RELEASE_S_BOUND
        assert client.exists(rs.key("s1", "lock")) == 0  # released, not left to renew


RELEASE_S_BOUND = 6.0  # RELEASE_S (5 s) and a margin: a hang takes HANG


def test_a_cancellation_the_driver_swallows_still_ends_the_turn_by_its_deadline(url, run, tmp_path):
    from foliko_cli.errors import TurnTimeoutError
    from foliko_cli.service import AsyncFoliko

    with redis_storage(url) as rs:
        read = rs._read_script

        async def slow_swallowing_read(*args: Any, **kwargs: Any) -> Any:
            # as wait_for does when its result arrived with the cancellation:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(HANG)
            return await read(*args, **kwargs)

        async def scenario() -> float:
            await rs.save(SessionRecord("s", messages=turn("before")))
            service = AsyncFoliko(storage=rs, model="echo", home=tmp_path, timeout=TURN_TIMEOUT_S)
            rs._read_script = slow_swallowing_read
            started = time.monotonic()
            with pytest.raises(TurnTimeoutError):
                await service.chat("s", "lost")
            rs._read_script = read
            assert [m["content"] for m in (await rs.load("s")).messages] == [
                "before",
                "echo: before",
            ]
            return time.monotonic() - started

        assert run(scenario()) < TURN_TIMEOUT_S + DEADLINE_SLACK_S


def test_an_attempt_to_take_a_lease_that_stalls_ends_by_its_bound(url, run, monkeypatch):
    from foliko_cli.storage import redis as redis_module

    from .services import fresh_prefix
    from .stallproxy import stalling_proxy, through

    monkeypatch.setattr(redis_module, "ATTEMPT_S", 1.0)
    with fresh_prefix(url) as prefix, stalling_proxy(url) as proxy:
        storage = RedisStorage(through(url, proxy), prefix=prefix)  # socket_timeout: 30 s
        proxy.freeze_on(storage.key("s", "lock").encode())

        async def take() -> None:
            async with storage.lock("s", 0.1):
                raise AssertionError("took a lease through a frozen connection")

        started = time.monotonic()
        with pytest.raises(StorageError, match="did not answer within 1s"):
            run(take())
        assert time.monotonic() - started < 1.0 + DEADLINE_SLACK_S
        run(storage.close())
