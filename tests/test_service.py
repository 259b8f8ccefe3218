"""The public Python API: a lazy top level, AsyncFoliko inside any loop, the sync twin."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import foliko_cli
from foliko_cli import AsyncFoliko, Foliko, Interrupted, SessionNotFoundError

HEAVY = ("asyncio", "httpx", "httpx2", "psycopg", "redis", "jsonschema", "mcp", "uvicorn")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
        timeout=60,
    )


def test_the_top_level_names_load_lazily_and_import_nothing_heavy():
    done = run_python(
        f"""
        import sys
        import foliko_cli as f
        print(f.AsyncFoliko.__name__, f.Framework.__name__, f.Foliko.__name__)
        print([m for m in {HEAVY!r} if m in sys.modules])
        """
    )
    assert done.returncode == 0, done.stderr
    names, loaded = done.stdout.splitlines()
    assert names == "AsyncFoliko Framework Foliko"
    assert loaded == "[]"


@pytest.mark.parametrize("storage", ["sqlite", "json", "memory"])
def test_reads_on_a_local_store_run_without_an_event_loop(foliko_home, storage):
    with Foliko(storage, "echo", home=foliko_home) as foliko:
        foliko.chat("s", "hi")
    done = run_python(
        f"""
        import sys
        from foliko_cli import Foliko
        with Foliko({storage!r}, "echo", home={str(foliko_home)!r}) as foliko:
            rows = foliko.list_sessions()
            record = foliko.get_session("s") if rows else None
        print(len(rows), record and len(record.messages), "asyncio" in sys.modules)
        with Foliko({storage!r}, "echo", home={str(foliko_home)!r}) as foliko:
            foliko.chat("s", "and now")
            print(len(foliko.get_session("s").messages) if {storage!r} != "memory" else 2)
        """
    )
    assert done.returncode == 0, done.stderr
    expected_rows = "0 None" if storage == "memory" else "1 2"
    assert done.stdout.splitlines() == [
        f"{expected_rows} False",
        "4" if storage != "memory" else "2",
    ]


def test_a_read_that_needs_an_event_loop_runs_on_one():
    class Waiting(AsyncFoliko):
        async def list_sessions(self, **options):
            await asyncio.sleep(0.001)
            return ["waited"]

    facade = Foliko.__new__(Foliko)
    facade.service = Waiting("memory", "echo")
    from foliko_cli.service.facade import _LoopRunner

    facade._loop = _LoopRunner()
    with facade:
        assert facade.list_sessions() == ["waited"]


def test_every_exported_name_resolves_and_unknown_names_fail():
    for name in foliko_cli.__all__:
        assert getattr(foliko_cli, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        foliko_cli.nope  # noqa: B018


def test_fifty_concurrent_turns_on_ten_sessions_keep_every_history_whole(tmp_path):
    async def main():
        async with AsyncFoliko(storage="sqlite", model="echo", home=tmp_path) as foliko:
            turns = [foliko.chat(f"s{i % 10}", f"m{i}") for i in range(50)]
            results = await asyncio.gather(*turns)
            records = {sid: await foliko.get_session(sid) for sid in await foliko.session_ids()}
        return results, records

    results, records = asyncio.run(main())
    assert all(r.message == f"m{i}" for i, r in enumerate(results))
    assert sorted(records) == [f"s{i}" for i in range(10)]
    for sid, record in records.items():
        contents = [m["content"] for m in record.messages]
        expected = [f"m{i}" for i in range(50) if f"s{i % 10}" == sid]
        assert contents[0::2] == expected  # user messages, in arrival order
        assert contents[1::2] == expected  # each followed by its own reply
        assert [m["role"] for m in record.messages] == ["user", "assistant"] * 5


def test_session_management_is_async_too(tmp_path):
    async def main():
        async with AsyncFoliko(storage="memory", model="echo", home=tmp_path) as foliko:
            await foliko.chat("a", "one")
            await foliko.update_variables("a", {"k": "v"})
            await foliko.fork_session("a", "b")
            await foliko.rename_session("b", "c")
            await foliko.clear_session("a")
            exported = [r.session_id async for r in foliko.export_sessions(["a", "c"])]
            listed = [s.session_id for s in await foliko.list_sessions(sort="name")]
            deleted, missing = await foliko.delete_sessions(["a", "zz"])
            return exported, listed, deleted, missing, await foliko.get_session("c")

    exported, listed, deleted, missing, copy = asyncio.run(main())
    assert exported == ["a", "c"]
    assert listed == ["a", "c"]
    assert (deleted, missing) == (["a"], ["zz"])
    assert [m["content"] for m in copy.messages] == ["one", "one"]
    assert copy.variables == {"k": "v"}


def test_the_sync_facade_works_inside_a_running_event_loop(tmp_path):
    async def inside_a_loop():
        with Foliko(storage="memory", model="echo", home=tmp_path) as foliko:
            first = foliko.chat("s", "hello")
            second = foliko.chat("s", "again")
            return first.message, second.message, len(foliko.get_session("s").messages)

    assert asyncio.run(inside_a_loop()) == ("hello", "again", 4)


def test_a_tool_given_to_one_turn_is_offered_in_that_turn_only(tmp_path):
    from foliko_cli.engine.tools import Tool

    double = Tool("double", "Twice n.", lambda args, context: args["n"] * 2, {"type": "object"})
    with Foliko(storage="memory", model="echo", home=tmp_path) as foliko:
        offered = foliko.chat("s", '/tool double {"n": 21}', tools=(double,))
        later = foliko.chat("s", '/tool double {"n": 1}')
        shown = foliko.dry_run("s", "hi", tools=(double,))

    assert offered.message == "double returned: 42"
    assert later.message == "double returned: error: unknown tool 'double'"
    assert "double" in {tool["name"] for tool in shown["tools"]}


def test_sync_facade_errors_are_the_services(tmp_path):
    with (
        Foliko(storage="memory", model="echo", home=tmp_path) as foliko,
        pytest.raises(SessionNotFoundError) as caught,
    ):
        foliko.get_session("missing")
    assert caught.value.session_id == "missing"
    assert "foliko sessions" not in str(caught.value)  # the core never speaks CLI


def test_construction_reads_no_config_file_but_from_config_does(tmp_path, monkeypatch):
    (tmp_path / "foliko.toml").write_text("this is not toml = = =\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FOLIKO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FOLIKO_STORAGE", "memory")
    monkeypatch.setenv("FOLIKO_MODEL", "echo")
    foliko = AsyncFoliko()
    assert foliko.home == tmp_path / "home"
    assert foliko.storage.name == "memory"
    assert foliko.model == "echo"
    with pytest.raises(foliko_cli.UsageError, match="not valid TOML"):
        AsyncFoliko.from_config()


def test_notices_go_to_the_callback_once_per_home(tmp_path):
    seen: list[str] = []
    for _ in range(2):
        with Foliko(storage="memory", home=tmp_path, notify=seen.append) as foliko:
            foliko.chat("s", "hi")
    assert len([n for n in seen if "echo" in n]) == 1


PAUSING_STORAGE = """
import asyncio, os, signal, sys
from foliko_cli import Foliko, Interrupted
from foliko_cli.storage.sqlite import SQLiteStorage

signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])


class PausingStorage(SQLiteStorage):
    async def revision(self, session_id):
        if os.environ["PAUSE"] == "before":
            print("paused", flush=True)
            await asyncio.Event().wait()
        return await super().revision(session_id)

    async def append(self, *args, **kwargs):
        revision = await super().append(*args, **kwargs)
        if os.environ["PAUSE"] == "after":
            print("paused", flush=True)
            signal.sigtimedwait([signal.SIGUSR1], 30)
        return revision


with Foliko(storage=PausingStorage(sys.argv[1]), model="echo") as foliko:
    try:
        result = foliko.chat("s", "hello")
    except Interrupted as exc:
        kept = "saved " + exc.result.message if exc.result else "nothing saved"
        print("interrupted", exc.exit_code, kept, str(exc), flush=True)
    else:
        print("not interrupted", result.message, flush=True)
"""


@pytest.mark.parametrize(
    ("pause", "sig", "expected", "stored"),
    [
        (
            "before",
            signal.SIGINT,
            "interrupted 130 nothing saved interrupted; the turn was not saved",
            False,
        ),
        (
            "before",
            signal.SIGTERM,
            "interrupted 143 nothing saved interrupted; the turn was not saved",
            False,
        ),
        (
            "after",
            signal.SIGINT,
            "interrupted 130 saved hello interrupted after the turn was saved",
            True,
        ),
        (
            "after",
            signal.SIGTERM,
            "interrupted 143 saved hello interrupted after the turn was saved",
            True,
        ),
    ],
)
def test_a_signal_is_never_swallowed_and_says_whether_the_turn_was_saved(
    tmp_path: Path, pause, sig, expected, stored
):
    db = tmp_path / "s.db"
    script = tmp_path / "pausing.py"
    script.write_text(PAUSING_STORAGE)
    child = subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PAUSE": pause, "FOLIKO_HOME": str(tmp_path)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout.readline().strip() == "paused"
    child.send_signal(sig)
    if pause == "after":
        child.send_signal(signal.SIGUSR1)
    out, err = child.communicate(timeout=60)
    assert out.strip() == expected, err
    with Foliko(storage=f"sqlite:///{db}", model="echo", home=tmp_path) as foliko:
        if stored:
            assert [m["content"] for m in foliko.get_session("s").messages] == ["hello"] * 2
        else:
            with pytest.raises(SessionNotFoundError):
                foliko.get_session("s")


def test_interrupted_is_a_foliko_error_with_the_documented_codes():
    assert Interrupted("x").exit_code == 130
    assert Interrupted("x", signal_number=signal.SIGTERM).exit_code == 143


def memory_with(**overrides):
    """A memory backend whose listed view of the world is stale, as if other
    processes had written after it was read."""
    from foliko_cli.storage.memory import MemoryStorage

    return type("StaleView", (MemoryStorage,), overrides)()


def test_prune_keeps_a_session_that_was_used_while_it_waited(tmp_path):
    from foliko_cli.messages.record import SessionSummary
    from foliko_cli.storage.memory import MemoryStorage

    async def stale_summaries(self):
        listed = await MemoryStorage.list_summaries(self)
        return [SessionSummary(s.session_id, 0, 0, s.message_count) for s in listed]

    with Foliko(storage=memory_with(list_summaries=stale_summaries), model="echo") as foliko:
        foliko.chat("busy", "just now")
        report = foliko.prune(60_000)
        assert (report.deleted, report.active) == ([], ["busy"])
        assert len(foliko.get_session("busy").messages) == 2


def test_prune_reports_unreadable_sessions_and_deletes_none(tmp_path):
    sessions = tmp_path / "sessions"
    with Foliko(storage=f"json:///{sessions}", model="echo", home=tmp_path) as foliko:
        foliko.chat("good", "x")
        (sessions / "bad.json").write_text("{not json")
        report = foliko.prune(0)
    assert report.unreadable == ["bad"]
    assert report.deleted == ["good"]
    assert (sessions / "bad.json").read_text() == "{not json"


def test_export_all_leaves_out_a_session_deleted_meanwhile_but_named_ones_fail():
    from foliko_cli.storage.memory import MemoryStorage

    async def with_a_ghost(self):
        return [*await MemoryStorage.session_ids(self), "ghost"]

    with Foliko(storage=memory_with(session_ids=with_a_ghost), model="echo") as foliko:
        foliko.chat("real", "x")
        ids = foliko.session_ids()
        assert ids == ["ghost", "real"]
        exported = [r.session_id for r in foliko.export_sessions(ids, skip_missing=True)]
        assert exported == ["real"]
        with pytest.raises(SessionNotFoundError):
            list(foliko.export_sessions(ids))


def test_repair_leaves_alone_a_session_that_reads_fine_by_then():
    from foliko_cli.storage.base import StoredProblem

    async def reported(self):
        return [StoredProblem("s", "memory", "was unreadable")]

    async def refuse(self, problem):
        raise AssertionError("a readable session was quarantined")

    with Foliko(storage=memory_with(check=reported, quarantine=refuse), model="echo") as foliko:
        foliko.chat("s", "x")
        (repair,) = foliko.check(repair=True)
        assert repair == (StoredProblem("s", "memory", "was unreadable"), None, None)
        assert len(foliko.get_session("s").messages) == 2


def test_a_blocking_tool_cannot_hold_a_turn_past_its_deadline(tmp_path):
    import threading

    from foliko_cli import Tool, TurnTimeoutError

    release = threading.Event()
    stuck = Tool(
        "stuck", "never returns in time", lambda args, ctx: release.wait(60), blocking=True
    )
    with Foliko(storage="memory", model="echo", home=tmp_path, timeout=0.5) as foliko:
        foliko.framework.register_tool(stuck)
        try:
            with pytest.raises(TurnTimeoutError):
                foliko.chat("s", "/tool stuck {}")
        finally:
            release.set()
        with pytest.raises(SessionNotFoundError):
            foliko.get_session("s")


def test_a_splice_of_a_session_that_moved_since_it_was_read_changes_nothing(tmp_path):
    from foliko_cli.errors import ConflictError

    async def main():
        async with AsyncFoliko(storage="sqlite", model="echo", home=tmp_path) as foliko:
            await foliko.chat("s", "one")
            read = await foliko.get_session("s")
            await foliko.chat("s", "two")
            with pytest.raises(ConflictError):
                await foliko.splice_messages("s", 0, 1, expected_revision=read.revision)
            kept = await foliko.get_session("s")
            assert [m["content"] for m in kept.messages] == ["one", "one", "two", "two"]
            now = await foliko.splice_messages("s", 0, 2, expected_revision=kept.revision)
            assert [m["content"] for m in now.messages] == ["two", "two"]

    asyncio.run(main())


def test_metadata_changes_made_from_the_stored_metadata_lose_none(tmp_path):
    async def main():
        async with AsyncFoliko(storage="sqlite", model="echo", home=tmp_path) as foliko:
            await foliko.chat("s", "hi")

            def adding(n: int):
                return lambda metadata: {"marks": [*metadata.get("marks", []), n]}

            await asyncio.gather(*(foliko.update_metadata("s", adding(n)) for n in range(10)))
            marks = (await foliko.get_session("s")).metadata["marks"]
            assert sorted(marks) == list(range(10))

    asyncio.run(main())


def test_a_damaged_session_is_a_typed_error_of_the_library_and_is_marked_in_listings(tmp_path):
    from storage import damage

    url = f"json:///{tmp_path}/sessions"
    with Foliko(storage=url, model="echo", home=tmp_path) as foliko:
        foliko.chat("victim", "one")
        foliko.chat("victim", "two")
        foliko.chat("intact", "fine")
        left = damage.damage_at(url, tmp_path, "victim", "count-changed")
        for call in (
            lambda: foliko.get_session("victim"),
            lambda: foliko.chat("victim", "lost"),
            lambda: foliko.update_variables("victim", {"k": 1}),
        ):
            with pytest.raises(foliko_cli.CorruptSessionError) as raised:
                call()
            assert raised.value.session_id == "victim"
            assert "it counts 5 messages but 4 are stored" in raised.value.reason
        listed = {s.session_id: s for s in foliko.list_sessions()}
        assert listed["victim"].error and listed["intact"].error is None
        (repair,) = foliko.check()
        assert (repair.problem.session_id, repair.moved_to, repair.failure) == (
            "victim",
            None,
            None,
        )
    assert damage.snapshot_at(url, tmp_path, "victim") == left
