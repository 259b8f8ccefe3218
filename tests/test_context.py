"""The three context layers and the manager that owns them (SPEC §2, F1, F2)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import types

import pytest

import foliko_cli.context.request as request_module
from foliko_cli.context import AgentContext, ContextManager, RequestContext, SessionContext
from foliko_cli.context.request import DEFAULT_TIMEOUT
from foliko_cli.engine.tools import Tool
from foliko_cli.messages.record import SessionRecord
from foliko_cli.storage.memory import MemoryStorage


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


# RequestContext


def test_request_ids_are_unique_and_trace_id_is_w3c_shaped():
    contexts = [RequestContext() for _ in range(100)]
    assert len({c.request_id for c in contexts}) == 100
    assert len({c.trace_id for c in contexts}) == 100
    for context in contexts:
        assert re.fullmatch(r"[0-9a-f]{32}", context.trace_id)
        assert context.request_id


def test_request_defaults():
    before = time.time()
    context = RequestContext()
    assert context.timeout == DEFAULT_TIMEOUT == 120.0
    assert before <= context.start_time <= time.time()
    assert context.parent_span_id is None
    assert context.user_id is None
    assert context.is_stream is False
    assert context.cancelled is False


def test_request_options_are_kept():
    context = RequestContext(
        request_id="r1",
        trace_id="t" * 32,
        parent_span_id="span",
        timeout=60.0,
        is_stream=True,
        user_id="alice",
    )
    assert (context.request_id, context.trace_id, context.parent_span_id) == (
        "r1",
        "t" * 32,
        "span",
    )
    assert (context.timeout, context.is_stream, context.user_id) == (60.0, True, "alice")


@pytest.fixture
def clock(monkeypatch):
    """Move the request module's monotonic clock forward by ``clock.offset`` seconds."""
    real = time.monotonic
    fake = types.SimpleNamespace(offset=0.0)
    fake.monotonic = lambda: real() + fake.offset
    fake.time = time.time
    monkeypatch.setattr(request_module, "time", fake)
    return fake


def test_fresh_request_is_not_timed_out(clock):
    context = RequestContext(timeout=10.0)
    assert not context.is_timeout()
    assert 0.0 <= context.elapsed() < 10.0
    assert 0.0 < context.remaining() <= 10.0


def test_request_times_out_after_its_timeout(clock):
    context = RequestContext(timeout=10.0)
    clock.offset = 9.0
    assert not context.is_timeout()
    assert context.elapsed() >= 9.0
    assert 0.0 < context.remaining() <= 1.0
    clock.offset = 11.0
    assert context.is_timeout()
    assert context.elapsed() >= 11.0
    assert context.remaining() == 0.0


def test_cancel_runs_callbacks_once_in_order():
    context = RequestContext()
    calls = []
    context.on_cancel(lambda: calls.append("first"))
    context.on_cancel(lambda: calls.append("second"))
    assert calls == []
    context.cancel()
    assert context.cancelled is True
    assert calls == ["first", "second"]
    context.cancel()
    assert calls == ["first", "second"]


def test_on_cancel_after_cancel_runs_at_once():
    context = RequestContext()
    context.cancel()
    calls = []
    context.on_cancel(lambda: calls.append("late"))
    assert calls == ["late"]


# SessionContext


def test_new_session_metadata():
    session = SessionContext("s1")
    assert session.session_id == "s1"
    assert session.messages == [] and session.variables == {}
    metadata = session.metadata
    assert metadata["message_count"] == 0
    assert metadata["compression_count"] == 0
    assert isinstance(metadata["created_at"], int)
    assert metadata["created_at"] <= metadata["last_active"]
    assert session.history_loaded is False
    assert session.revision == 0


def test_session_metadata_option_overrides_defaults():
    session = SessionContext("s1", metadata={"created_at": 5, "owner": "me"})
    assert session.metadata["created_at"] == 5
    assert session.metadata["owner"] == "me"
    assert session.metadata["message_count"] == 0


def test_add_message_counts_and_touches():
    session = SessionContext("s1")
    session.metadata["last_active"] = 0
    session.add_message(user("a"))
    assert session.metadata["message_count"] == 1
    assert session.metadata["last_active"] > 0
    session.add_messages([assistant("b"), user("c")])
    assert session.get_messages() == [user("a"), assistant("b"), user("c")]
    assert session.metadata["message_count"] == 3


def test_replace_and_clear_messages():
    session = SessionContext("s1")
    session.add_messages([user("a"), assistant("b")])
    replacement = [user("x")]
    session.replace_messages(replacement)
    replacement.append(user("not mine"))
    assert session.get_messages() == [user("x")]
    assert session.metadata["message_count"] == 1
    session.clear_messages()
    assert session.get_messages() == []
    assert session.metadata["message_count"] == 0


def test_variables():
    session = SessionContext("s1")
    assert session.get_variable("missing") is None
    assert session.get_variable("missing", 7) == 7
    session.set_variable("k", {"nested": [1, 2]})
    session.set_variable("falsy", 0)
    assert session.get_variable("k") == {"nested": [1, 2]}
    assert session.get_variable("falsy", 99) == 0
    snapshot = session.all_variables()
    snapshot["k"] = "changed"
    assert session.get_variable("k") == {"nested": [1, 2]}
    assert session.delete_variable("k") is True
    assert session.delete_variable("k") is False
    assert session.all_variables() == {"falsy": 0}


def test_touch_updates_last_active():
    session = SessionContext("s1")
    session.metadata["last_active"] = 0
    session.touch()
    assert session.metadata["last_active"] >= session.metadata["created_at"]


def test_summary():
    session = SessionContext("s1")
    session.add_messages([user("a"), assistant("b")])
    session.set_variable("k", 1)
    summary = session.summary()
    assert summary == {
        "session_id": "s1",
        "message_count": 2,
        "created_at": session.metadata["created_at"],
        "last_active": session.metadata["last_active"],
        "variables": {"k": 1},
    }


def test_restore_undoes_everything_since_the_checkpoint():
    session = SessionContext("s1")
    session.add_message(user("kept"))
    session.set_variable("k", {"list": [1]})
    session.revision = 4
    checkpoint = session.checkpoint()

    session.add_messages([user("new"), assistant("new")])
    session.get_variable("k")["list"].append(2)
    session.set_variable("other", True)
    session.metadata["compression_count"] = 9
    session.compression_state["pending_compression"] = True
    session.revision = 5

    session.restore(checkpoint)
    assert session.messages == [user("kept")]
    assert session.variables == {"k": {"list": [1]}}
    assert session.metadata["message_count"] == 1
    assert session.metadata["compression_count"] == 0
    assert session.compression_state["pending_compression"] is False
    assert session.revision == 4


def test_restore_undoes_replaced_and_cleared_messages():
    session = SessionContext("s1")
    session.add_messages([user("a"), assistant("b")])
    checkpoint = session.checkpoint()
    assert checkpoint.message_count == 2
    session.replace_messages([user("summary of a and b")])
    session.restore(checkpoint)
    assert session.messages == [user("a"), assistant("b")]
    assert session.metadata["message_count"] == 2

    other = SessionContext("s2")
    other.add_message(user("a"))
    checkpoint = other.checkpoint()
    other.clear_messages()
    other.add_message(user("b"))
    other.restore(checkpoint)
    assert other.messages == [user("a")]
    assert other.metadata["message_count"] == 1


def test_a_checkpoint_can_be_restored_twice():
    session = SessionContext("s1")
    session.add_message(user("a"))
    session.set_variable("k", 1)
    checkpoint = session.checkpoint()
    session.restore(checkpoint)
    session.add_message(user("b"))
    session.set_variable("k", 2)
    session.restore(checkpoint)
    assert session.messages == [user("a")]
    assert session.metadata["message_count"] == 1
    assert session.variables == {"k": 1}


def test_to_record_is_a_copy():
    session = SessionContext("s1")
    session.add_message(user("a"))
    session.set_variable("k", 1)
    session.revision = 3
    record = session.to_record()
    assert record.session_id == "s1"
    assert record.messages == [user("a")]
    assert record.variables == {"k": 1}
    assert record.metadata["message_count"] == 1
    assert record.revision == 3
    record.messages.append(user("b"))
    record.variables["k"] = 2
    assert session.messages == [user("a")]
    assert session.variables == {"k": 1}


def test_apply_record_replaces_state_and_marks_history_loaded():
    session = SessionContext("s1")
    session.add_message(user("stale"))
    record = SessionRecord(
        "s1",
        messages=[user("a"), assistant("b")],
        variables={"k": "v"},
        metadata={"created_at": 1, "last_active": 2, "message_count": 99},
        compression_state={"last_token_count": 12},
        revision=7,
    )
    session.apply_record(record)
    assert session.messages == [user("a"), assistant("b")]
    assert session.variables == {"k": "v"}
    assert session.metadata["created_at"] == 1
    assert session.metadata["message_count"] == 2
    assert session.compression_state["last_token_count"] == 12
    assert session.compression_state["pending_compression"] is False
    assert session.revision == 7
    assert session.history_loaded is True
    record.messages.append(user("later"))
    assert len(session.messages) == 2


def test_save_load_and_delete_through_storage():
    async def scenario():
        storage = MemoryStorage()
        session = SessionContext("s1", storage)
        session.add_messages([user("a"), assistant("b")])
        session.set_variable("k", [1, 2])
        await session.save_to_storage()
        first = session.revision
        assert first >= 1

        loaded = SessionContext("s1", storage)
        assert await loaded.load_from_storage() is True
        assert loaded.history_loaded is True
        assert loaded.messages == [user("a"), assistant("b")]
        assert loaded.variables == {"k": [1, 2]}
        assert loaded.metadata["message_count"] == 2
        assert loaded.revision == first

        loaded.add_message(user("c"))
        await loaded.save_to_storage()
        assert loaded.revision == first + 1
        assert len((await storage.load("s1")).messages) == 3

        assert await session.delete_from_storage() is True
        assert await storage.load("s1") is None
        assert await session.delete_from_storage() is False

    asyncio.run(scenario())


def test_load_of_unknown_session_is_empty_and_loaded():
    async def scenario():
        session = SessionContext("nobody", MemoryStorage())
        assert await session.load_from_storage() is False
        assert session.history_loaded is True
        assert session.messages == []

    asyncio.run(scenario())


def test_storage_calls_without_storage_name_the_session():
    session = SessionContext("lonely")
    with pytest.raises(RuntimeError, match="lonely"):
        asyncio.run(session.save_to_storage())


# AgentContext


def _tool(name: str, result: str) -> Tool:
    return Tool(name, f"returns {result}", lambda args, framework: result)


def test_agent_context_tools():
    agent = AgentContext("a1", agent="the agent", system_prompt="be brief")
    assert (agent.agent_id, agent.agent, agent.system_prompt) == ("a1", "the agent", "be brief")
    assert agent.get_tool("t") is None
    assert agent.all_tools() == []
    first, second, other = _tool("t", "first"), _tool("t", "second"), _tool("u", "u")
    agent.register_tool(first)
    agent.register_tool(other)
    agent.register_tool(second)
    assert agent.get_tool("t") is second
    assert agent.all_tools() == [second, other]
    assert agent.skills == [] and agent.custom_data == {}


# ContextManager


def test_request_contexts_are_tracked_and_released():
    manager = ContextManager()
    context = manager.create_request_context(timeout=5.0, user_id="u")
    assert context.timeout == 5.0 and context.user_id == "u"
    assert manager.get_request_context(context.request_id) is context
    assert manager.stats()["active_requests"] == 1
    manager.release_request_context(context.request_id)
    assert manager.get_request_context(context.request_id) is None
    assert context.cancelled is True
    assert manager.stats()["active_requests"] == 0
    manager.release_request_context(context.request_id)


def test_session_reference_counts():
    created = []
    manager = ContextManager(on_session_created=created.append)
    first = manager.get_or_create_session_context("s1")
    second = manager.get_or_create_session_context("s1")
    assert first is second
    assert created == [first]
    assert manager.ref_count("s1") == 2
    assert manager.get_session_context("s1") is first
    manager.release_session_context("s1")
    assert manager.ref_count("s1") == 1
    assert manager.stats()["active_sessions"] == 1
    assert manager.stats()["idle_sessions"] == 0


def test_release_keeps_the_session_cached_as_idle():
    destroyed = []
    manager = ContextManager(on_session_destroyed=destroyed.append)
    context = manager.get_or_create_session_context("s1")
    context.add_message(user("remember me"))
    manager.release_session_context("s1")
    assert manager.ref_count("s1") == 0
    assert manager.get_session_context("s1") is context
    assert manager.stats()["active_sessions"] == 0
    assert manager.stats()["idle_sessions"] == 1
    assert destroyed == []

    again = manager.get_or_create_session_context("s1")
    assert again is context
    assert again.messages == [user("remember me")]
    assert manager.stats() == {
        "active_requests": 0,
        "active_sessions": 1,
        "idle_sessions": 0,
        "active_agents": 0,
    }


def test_release_of_unknown_session_is_harmless():
    manager = ContextManager()
    manager.release_session_context("never")
    assert manager.session_ids() == []


def test_idle_sessions_expire_after_the_ttl():
    destroyed = []
    manager = ContextManager(session_ttl=60.0, on_session_destroyed=destroyed.append)
    idle = manager.get_or_create_session_context("idle")
    manager.get_or_create_session_context("busy")
    manager.release_session_context("idle")
    released_at = time.monotonic()

    assert manager.expire_idle_sessions(now=released_at) == []
    assert manager.expire_idle_sessions(now=released_at + 30.0) == []
    assert manager.get_session_context("idle") is idle

    assert manager.expire_idle_sessions(now=released_at + 61.0) == ["idle"]
    assert destroyed == [idle]
    assert manager.get_session_context("idle") is None
    assert manager.get_session_context("busy") is not None, "sessions in use never expire"
    assert manager.expire_idle_sessions(now=released_at + 10_000.0) == []


def test_expired_session_comes_back_fresh():
    manager = ContextManager(session_ttl=1.0)
    old = manager.get_or_create_session_context("s1")
    old.set_variable("k", 1)
    manager.release_session_context("s1")
    manager.expire_idle_sessions(now=time.monotonic() + 2.0)
    new = manager.get_or_create_session_context("s1")
    assert new is not old
    assert new.variables == {}


def test_idle_cap_evicts_the_oldest_idle_sessions():
    destroyed = []
    manager = ContextManager(
        max_idle_sessions=2, on_session_destroyed=lambda ctx: destroyed.append(ctx.session_id)
    )
    for session_id in ("s1", "s2", "s3"):
        manager.get_or_create_session_context(session_id)
    manager.release_session_context("s1")
    manager.release_session_context("s2")
    assert destroyed == []
    manager.release_session_context("s3")
    assert destroyed == ["s1"]
    assert sorted(manager.session_ids()) == ["s2", "s3"]

    manager.get_or_create_session_context("s2")
    manager.release_session_context("s2")
    manager.get_or_create_session_context("s4")
    manager.release_session_context("s4")
    assert destroyed == ["s1", "s3"], "reusing s2 made s3 the oldest idle session"
    assert manager.stats()["idle_sessions"] == 2


def test_sessions_in_use_do_not_count_against_the_idle_cap():
    manager = ContextManager(max_idle_sessions=1)
    for index in range(5):
        manager.get_or_create_session_context(f"busy{index}")
    assert len(manager.session_ids()) == 5
    assert manager.stats()["active_sessions"] == 5


def test_destroy_session_context_reports_it():
    destroyed = []
    manager = ContextManager(on_session_destroyed=destroyed.append)
    context = manager.get_or_create_session_context("s1")
    assert manager.destroy_session_context("s1") is context
    assert destroyed == [context]
    assert manager.get_session_context("s1") is None
    assert manager.ref_count("s1") == 0
    assert manager.destroy_session_context("s1") is None
    assert destroyed == [context]
    manager.release_session_context("s1")
    assert manager.stats()["idle_sessions"] == 0


def test_session_factory_is_used():
    storage = MemoryStorage()
    manager = ContextManager(session_factory=lambda sid: SessionContext(sid, storage))
    assert manager.get_or_create_session_context("s1").storage is storage


def test_agent_contexts():
    manager = ContextManager()
    agent = manager.get_or_create_agent_context("a1", agent="impl")
    assert manager.get_or_create_agent_context("a1") is agent
    assert agent.agent == "impl"
    assert manager.get_agent_context("a1") is agent
    assert manager.get_agent_context("a2") is None
    assert manager.stats()["active_agents"] == 1
    assert manager.remove_agent_context("a1") is agent
    assert manager.get_agent_context("a1") is None
    assert manager.stats()["active_agents"] == 0


def test_two_threads_creating_one_session_share_it():
    first_inside = threading.Event()
    second_inside = threading.Event()
    calls = []

    def slow_factory(session_id: str) -> SessionContext:
        calls.append(session_id)
        if len(calls) == 1:
            first_inside.set()
            # Give the other thread its chance to create a second context; a
            # thread-safe manager keeps it out, and this wait simply runs out.
            second_inside.wait(timeout=1.0)
        else:
            second_inside.set()
        return SessionContext(session_id)

    manager = ContextManager(session_factory=slow_factory)
    results = []
    first = threading.Thread(
        target=lambda: results.append(manager.get_or_create_session_context("s"))
    )
    first.start()
    assert first_inside.wait(timeout=10)
    second = threading.Thread(
        target=lambda: results.append(manager.get_or_create_session_context("s"))
    )
    second.start()
    first.join()
    second.join()
    assert results[0] is results[1]
    assert manager.ref_count("s") == 2


def test_time_waiting_on_the_user_is_not_counted_and_a_followed_deadline_moves():
    async def scenario() -> float:
        request = RequestContext(timeout=0.3)
        async with asyncio.timeout(request.remaining()) as deadline:
            with request.follow(deadline):
                with request.waiting_on_user():
                    assert deadline.when() is None
                    await asyncio.sleep(0.5)  # a person reading the question
                assert not request.is_timeout()
                return request.remaining()

    assert 0 < asyncio.run(scenario()) <= 0.3


def test_a_context_s_save_never_overwrites_a_write_it_did_not_read():
    from foliko_cli.errors import ConflictError, SessionExistsError

    async def scenario():
        storage = MemoryStorage()
        first = SessionContext("s1", storage)
        first.add_message(user("a"))
        await first.save_to_storage()
        second = SessionContext("s1", storage)
        await second.load_from_storage()
        second.add_message(user("from second"))
        await second.save_to_storage()

        first.add_message(user("lost?"))
        with pytest.raises(ConflictError):
            await first.save_to_storage()
        stranger = SessionContext("s1", storage)
        stranger.add_message(user("never read it"))
        with pytest.raises(SessionExistsError):
            await stranger.save_to_storage()
        stored = await storage.load("s1")
        assert [m["content"] for m in stored.messages] == ["a", "from second"]

    asyncio.run(scenario())
