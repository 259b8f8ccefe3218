"""The Framework: three context variables, run_* helpers, events, storage (SPEC §2, F1)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from foliko_cli.context import AgentContext, RequestContext, SessionContext
from foliko_cli.engine.framework import SESSION_CREATED, SESSION_DESTROYED, Framework
from foliko_cli.engine.handler import AgentChatHandler
from foliko_cli.errors import AgentNotFoundError, ExitCode, StorageConfigError
from foliko_cli.models.echo import EchoModel
from foliko_cli.storage.memory import MemoryStorage
from foliko_cli.storage.sqlite import SQLiteStorage


@pytest.fixture
def fw() -> Framework:
    return Framework("memory")


def current(fw: Framework) -> tuple[str | None, str | None, str | None]:
    """(request id, session id, agent id) as this code path sees them."""
    request = fw.get_request_context()
    agent = fw.get_agent_context()
    return (
        request.request_id if request else None,
        fw.current_session_id(),
        agent.agent_id if agent else None,
    )


NOTHING = (None, None, None)


def test_outside_any_run_nothing_is_set(fw):
    assert current(fw) == NOTHING
    assert fw.get_session_context() is None


# request layer


def test_run_with_context_sync(fw):
    request = RequestContext(request_id="r1")

    def body(a, *, b):
        assert fw.get_request_context() is request
        return a + b

    assert fw.run_with_context(request, body, 1, b=2) == 3
    assert fw.get_request_context() is None


def test_run_with_context_coroutine(fw):
    request = RequestContext(request_id="r1")

    async def body(value):
        assert fw.get_request_context() is request
        await asyncio.sleep(0)
        assert fw.get_request_context() is request
        return value * 2

    async def main():
        pending = fw.run_with_context(request, body, 21)
        assert fw.get_request_context() is None, "nothing is set before the coroutine runs"
        assert await pending == 42
        assert fw.get_request_context() is None

    asyncio.run(main())


def test_sync_exception_propagates_and_leaves_nothing_set(fw):
    def body():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fw.run_with_context(RequestContext(), body)
    assert fw.get_request_context() is None


def test_with_request_creates_and_releases_the_request(fw):
    manager = fw.context_manager
    seen = []

    def body():
        request = fw.get_request_context()
        seen.append(request)
        assert request.timeout == 5.0 and request.user_id == "u"
        assert manager.get_request_context(request.request_id) is request
        assert manager.stats()["active_requests"] == 1
        return "done"

    assert fw.with_request({"timeout": 5.0, "user_id": "u"}, body) == "done"
    (request,) = seen
    assert manager.get_request_context(request.request_id) is None
    assert manager.stats()["active_requests"] == 0
    assert request.cancelled is True
    assert fw.get_request_context() is None


def test_with_request_coroutine_releases_after_await(fw):
    manager = fw.context_manager

    async def body():
        await asyncio.sleep(0)
        request = fw.get_request_context()
        assert manager.get_request_context(request.request_id) is request
        assert not request.cancelled
        return request

    async def main():
        request = await fw.with_request(None, body)
        assert manager.get_request_context(request.request_id) is None
        assert request.cancelled is True
        assert request.timeout == 120.0

    asyncio.run(main())


def test_with_request_releases_when_the_function_raises(fw):
    async def body():
        await asyncio.sleep(0)
        raise KeyError("x")

    with pytest.raises(KeyError):
        asyncio.run(fw.with_request({}, body))
    with pytest.raises(KeyError):
        fw.with_request({}, lambda: {}["x"])
    assert fw.context_manager.stats()["active_requests"] == 0


# session layer


def test_run_in_session_sync(fw):
    def body():
        context = fw.get_session_context()
        assert isinstance(context, SessionContext)
        assert context.session_id == fw.current_session_id() == "s1"
        assert context.storage is fw.session_storage
        assert fw.context_manager.ref_count("s1") == 1
        return context

    context = fw.run_in_session("s1", body)
    assert fw.get_session_context() is None and fw.current_session_id() is None
    assert fw.context_manager.ref_count("s1") == 0
    assert fw.context_manager.get_session_context("s1") is context, "kept cached while idle"
    assert fw.run_in_session("s1", fw.get_session_context) is context


def test_run_in_session_coroutine(fw):
    async def body():
        await asyncio.sleep(0)
        assert fw.current_session_id() == "s1"
        assert fw.context_manager.ref_count("s1") == 1
        return fw.get_session_context()

    async def main():
        context = await fw.run_in_session("s1", body)
        assert context.session_id == "s1"
        assert fw.current_session_id() is None
        assert fw.context_manager.ref_count("s1") == 0

    asyncio.run(main())


def test_run_in_session_releases_when_the_function_raises(fw):
    def body():
        raise RuntimeError("no")

    async def abody():
        await asyncio.sleep(0)
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        fw.run_in_session("s1", body)
    with pytest.raises(RuntimeError):
        asyncio.run(fw.run_in_session("s2", abody))
    assert fw.context_manager.ref_count("s1") == 0
    assert fw.context_manager.ref_count("s2") == 0
    assert fw.context_manager.stats()["active_sessions"] == 0


def test_get_or_create_session_context_takes_a_reference(fw):
    context = fw.get_or_create_session_context("s1")
    assert fw.get_or_create_session_context("s1") is context
    assert fw.context_manager.ref_count("s1") == 2
    fw.release_session_context("s1")
    fw.release_session_context("s1")
    assert fw.context_manager.ref_count("s1") == 0


def test_session_events_and_destroy(fw):
    created, destroyed = [], []
    fw.on(SESSION_CREATED, created.append)
    on_destroyed = fw.on(SESSION_DESTROYED, destroyed.append)
    assert SESSION_CREATED == "session:context-created"
    assert SESSION_DESTROYED == "session:context-destroyed"

    context = fw.run_in_session("s1", fw.get_session_context)
    fw.run_in_session("s1", fw.get_session_context)
    assert created == [context], "created once, then reused"

    assert fw.destroy_session_context("s1") is True
    assert destroyed == [context]
    assert fw.destroy_session_context("s1") is False
    assert destroyed == [context]

    assert fw.off(SESSION_DESTROYED, on_destroyed) is True
    assert fw.off(SESSION_DESTROYED, on_destroyed) is False
    fresh = fw.run_in_session("s1", fw.get_session_context)
    assert fresh is not context
    assert created == [context, fresh]
    fw.destroy_session_context("s1")
    assert destroyed == [context]


def test_emit_calls_handlers_in_order_and_counts_them(fw):
    calls = []
    fw.on("custom", lambda *args: calls.append(("first", args)))
    fw.on("custom", lambda *args: calls.append(("second", args)))
    assert fw.emit("custom", 1, 2) == 2
    assert calls == [("first", (1, 2)), ("second", (1, 2))]
    assert fw.emit("nobody-listens") == 0


def test_idle_limit_destroys_sessions_with_an_event():
    fw = Framework("memory", max_idle_sessions=1)
    destroyed = []
    fw.on(SESSION_DESTROYED, lambda ctx: destroyed.append(ctx.session_id))
    fw.run_in_session("s1", lambda: None)
    fw.run_in_session("s2", lambda: None)
    assert destroyed == ["s1"]
    assert fw.context_manager.session_ids() == ["s2"]


def test_session_ttl_option():
    fw = Framework("memory", session_ttl=5.0)
    assert fw.context_manager.session_ttl == 5.0


# agent layer


def test_run_with_agent(fw):
    agent = fw.get_or_create_agent_context("a1", agent="impl")
    assert fw.get_or_create_agent_context("a1") is agent
    assert isinstance(agent, AgentContext) and agent.agent == "impl"

    assert fw.run_with_agent("a1", fw.get_agent_context) is agent
    assert fw.get_agent_context() is None

    async def body():
        await asyncio.sleep(0)
        return fw.get_agent_context()

    assert asyncio.run(fw.run_with_agent("a1", body)) is agent


def test_run_with_unknown_agent_fails(fw):
    async def body():
        return None

    with pytest.raises(AgentNotFoundError, match="ghost") as caught:
        fw.run_with_agent("ghost", body)
    assert caught.value.exit_code == ExitCode.USAGE
    with pytest.raises(AgentNotFoundError):
        fw.run_with_agent("ghost", lambda: None)


# all three


def test_run_in_full_context_sync(fw):
    def body(x):
        request_id, session_id, agent_id = current(fw)
        assert (request_id, session_id, agent_id) == ("r1", "s1", "a1")
        return x

    assert fw.run_in_full_context({"request_id": "r1"}, "s1", "a1", body, "ok") == "ok"
    assert current(fw) == NOTHING
    assert fw.context_manager.ref_count("s1") == 0
    assert fw.context_manager.get_agent_context("a1") is not None


def test_run_in_full_context_accepts_a_request_context(fw):
    request = RequestContext(request_id="given")

    async def body():
        await asyncio.sleep(0)
        return fw.get_request_context()

    assert asyncio.run(fw.run_in_full_context(request, "s1", "a1", body)) is request
    assert fw.run_in_full_context(None, "s1", "a1", lambda: current(fw))[1:] == ("s1", "a1")


def test_nesting_restores_the_outer_context_sync(fw):
    fw.get_or_create_agent_context("outer-a")
    fw.get_or_create_agent_context("inner-a")

    def inner():
        return current(fw)

    def outer():
        assert current(fw) == ("outer-r", "outer-s", "outer-a")
        seen = fw.run_in_full_context({"request_id": "inner-r"}, "inner-s", "inner-a", inner)
        assert seen == ("inner-r", "inner-s", "inner-a")
        assert current(fw) == ("outer-r", "outer-s", "outer-a")
        assert fw.run_in_session("other-s", inner) == ("outer-r", "other-s", "outer-a")
        assert fw.run_with_context(RequestContext(request_id="x"), inner)[0] == "x"
        assert fw.run_with_agent("inner-a", inner) == ("outer-r", "outer-s", "inner-a")
        assert current(fw) == ("outer-r", "outer-s", "outer-a")

    fw.run_in_full_context({"request_id": "outer-r"}, "outer-s", "outer-a", outer)
    assert current(fw) == NOTHING


def test_nesting_restores_the_outer_context_async(fw):
    async def inner():
        await asyncio.sleep(0)
        seen = current(fw)
        await asyncio.sleep(0)
        assert current(fw) == seen
        return seen

    async def outer():
        assert current(fw) == ("outer-r", "outer-s", "outer-a")
        seen = await fw.run_in_full_context({"request_id": "inner-r"}, "inner-s", "inner-a", inner)
        assert seen == ("inner-r", "inner-s", "inner-a")
        assert current(fw) == ("outer-r", "outer-s", "outer-a")
        assert (await fw.run_in_session("other-s", inner)) == ("outer-r", "other-s", "outer-a")
        assert (await fw.run_with_agent("inner-a", inner)) == ("outer-r", "outer-s", "inner-a")
        request = RequestContext(request_id="x")
        assert (await fw.run_with_context(request, inner)) == ("x", "outer-s", "outer-a")
        assert current(fw) == ("outer-r", "outer-s", "outer-a")
        return "done"

    async def main():
        result = await fw.run_in_full_context(
            {"request_id": "outer-r"}, "outer-s", "outer-a", outer
        )
        assert result == "done"
        assert current(fw) == NOTHING

    asyncio.run(main())


def test_tasks_started_inside_a_context_inherit_it(fw):
    async def child():
        await asyncio.sleep(0)
        return current(fw)

    async def body():
        return await asyncio.gather(child(), asyncio.create_task(child()))

    results = asyncio.run(fw.run_in_full_context({"request_id": "r"}, "s", "a", body))
    assert results == [("r", "s", "a"), ("r", "s", "a")]


def test_isolation_between_200_concurrent_tasks(fw):
    count = 200
    inside = 0

    async def body(index: int, everyone_in: asyncio.Event) -> int:
        nonlocal inside
        mine = (f"r{index}", f"s{index}", f"a{index}")
        assert current(fw) == mine
        session = fw.get_session_context()
        session.set_variable("owner", index)
        inside += 1
        if inside == count:
            everyone_in.set()
        await everyone_in.wait()  # all 200 are inside their contexts at this point
        for _ in range(5):
            assert current(fw) == mine
            assert fw.get_session_context() is session
            assert session.get_variable("owner") == index
            await asyncio.sleep(0)
        # a nested request inside the task is restored, and invisible to the others
        nested = RequestContext(request_id=f"nested{index}")

        async def deeper():
            await asyncio.sleep(0)
            return current(fw)

        assert await fw.run_with_context(nested, deeper) == (f"nested{index}", *mine[1:])
        await asyncio.sleep(0)
        assert current(fw) == mine
        return index

    async def main():
        everyone_in = asyncio.Event()
        runs = [
            fw.run_in_full_context({"request_id": f"r{i}"}, f"s{i}", f"a{i}", body, i, everyone_in)
            for i in range(count)
        ]
        assert await asyncio.gather(*runs) == list(range(count))
        assert current(fw) == NOTHING

    asyncio.run(main())
    stats = fw.context_manager.stats()
    assert stats["active_sessions"] == 0
    assert stats["idle_sessions"] == count
    assert stats["active_agents"] == count


def test_isolation_between_16_threads_sync(fw):
    count = 16
    barrier = threading.Barrier(count, timeout=30)
    failures: list[str] = []

    def body(index: int) -> None:
        mine = (f"r{index}", f"s{index}", f"a{index}")
        for _ in range(3):
            if current(fw) != mine:
                failures.append(f"thread {index} saw {current(fw)}")
            barrier.wait()  # every thread is inside its own contexts at once

    def thread_main(index: int) -> None:
        try:
            fw.run_in_full_context(
                {"request_id": f"r{index}"}, f"s{index}", f"a{index}", body, index
            )
            if current(fw) != NOTHING:
                failures.append(f"thread {index} kept {current(fw)}")
        except Exception as exc:
            failures.append(f"thread {index}: {exc!r}")

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert fw.context_manager.stats()["idle_sessions"] == count


def test_isolation_between_16_threads_async(fw):
    count = 16
    barrier = threading.Barrier(count, timeout=30)
    failures: list[str] = []

    async def body(index: int) -> int:
        mine = (f"r{index}", f"s{index}", f"a{index}")
        for step in range(4):
            if current(fw) != mine:
                failures.append(f"thread {index} step {step} saw {current(fw)}")
            if step == 1:
                barrier.wait()  # every thread's loop is inside its own contexts at once
            await asyncio.sleep(0)
        return index

    def thread_main(index: int) -> None:
        try:
            result = asyncio.run(
                fw.run_in_full_context(
                    {"request_id": f"r{index}"}, f"s{index}", f"a{index}", body, index
                )
            )
            if result != index:
                failures.append(f"thread {index} got {result}")
        except Exception as exc:
            failures.append(f"thread {index}: {exc!r}")

    threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_seed_7_1_full_request_flow(fw):
    """The seed's §7.1 example: all three layers, then one chat turn inside them."""
    agent_id = "assistant"
    fw.get_or_create_agent_context(agent_id).system_prompt = "You are terse."

    async def turn():
        request = fw.get_request_context()
        session = fw.get_session_context()
        agent = fw.get_agent_context()
        assert request.request_id == "req-1"
        assert request.timeout == 60.0 and request.is_stream is False
        assert session.session_id == "sess-1"
        assert agent.agent_id == agent_id

        handler = AgentChatHandler(fw, EchoModel(), agent=agent)
        result = await handler.chat("Hello", session_id=session.session_id)

        assert fw.get_request_context() is request
        assert fw.get_session_context() is session
        assert fw.get_agent_context() is agent
        return request, session, result

    request, session, result = asyncio.run(
        fw.run_in_full_context(
            {"request_id": "req-1", "timeout": 60.0, "is_stream": False},
            "sess-1",
            agent_id,
            turn,
        )
    )
    outcome = result.to_dict()
    assert outcome["success"] is True
    assert "Hello" in outcome["message"]
    assert outcome["step_count"] == 1
    assert outcome["request_id"] == "req-1"
    assert outcome["trace_id"] == request.trace_id
    assert [m["role"] for m in session.messages] == ["user", "assistant"]
    assert session.messages[0]["content"] == "Hello"
    stored = asyncio.run(fw.session_storage.load("sess-1"))
    assert [m["content"] for m in stored.messages] == ["Hello", "Hello"]
    assert {m["request_id"] for m in stored.messages} == {"req-1"}
    assert current(fw) == NOTHING


# deprecated shim


def test_get_execution_context_is_deprecated(fw):
    with pytest.warns(DeprecationWarning, match="get_session_context"):
        empty = fw.get_execution_context()
    assert empty == {"session_id": None, "request_id": None}

    def body():
        with pytest.warns(DeprecationWarning):
            return fw.get_execution_context()

    seen = fw.run_in_full_context({"request_id": "r1"}, "s1", "a1", body)
    assert seen == {"session_id": "s1", "request_id": "r1"}


# storage configuration


def test_storage_by_name_memory():
    assert isinstance(Framework("memory").session_storage, MemoryStorage)


def test_storage_by_name_sqlite_uses_home(tmp_path: Path):
    fw = Framework("sqlite", home=tmp_path)
    assert isinstance(fw.session_storage, SQLiteStorage)
    assert Path(fw.session_storage.path) == tmp_path / "sessions.db"
    assert fw.get_session_storage() is fw.session_storage


def test_storage_by_name_json_uses_home(tmp_path: Path):
    storage = Framework("json", home=tmp_path).session_storage
    assert storage.name == "json"
    assert Path(storage.location) == tmp_path / "sessions"


def test_storage_by_url_table_and_instance(tmp_path: Path):
    absolute = tmp_path / "x.db"
    by_url = Framework(f"sqlite:///{absolute}", home=tmp_path).session_storage
    assert isinstance(by_url, SQLiteStorage) and Path(by_url.path) == absolute
    table = Framework({"type": "sqlite", "path": str(absolute)}, home=tmp_path).session_storage
    assert isinstance(table, SQLiteStorage) and Path(table.path) == absolute
    assert isinstance(Framework({"type": "memory"}).session_storage, MemoryStorage)
    instance = MemoryStorage()
    assert Framework(instance).session_storage is instance


@pytest.mark.parametrize("spec", ["nosuchbackend", "ftp://host/x", "sqlite://host/x.db"])
def test_unknown_storage_is_a_usage_error(spec):
    with pytest.raises(StorageConfigError) as caught:
        Framework(spec)
    assert caught.value.exit_code == ExitCode.USAGE


def test_configure_storage_moves_existing_sessions(fw):
    context = fw.run_in_session("s1", fw.get_session_context)
    replacement = MemoryStorage()
    assert fw.configure_storage(replacement) is replacement
    assert fw.session_storage is replacement
    assert context.storage is replacement
    assert fw.run_in_session("s2", fw.get_session_context).storage is replacement
