"""The turn engine: AgentChatHandler (SPEC F2, F3, R1)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from foliko_cli.common.clock import now_ms
from foliko_cli.context import RequestContext
from foliko_cli.engine.framework import Framework
from foliko_cli.engine.handler import AgentChatHandler
from foliko_cli.engine.turn import TurnRequest
from foliko_cli.errors import ModelError, TurnTimeoutError
from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.models.base import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
)
from foliko_cli.models.echo import EchoModel
from foliko_cli.storage.memory import MemoryStorage
from foliko_cli.storage.sqlite import SQLiteStorage

RESULT_KEYS = {"success", "message", "step_count", "request_id", "trace_id", "usage"}


def last_user_text(request: ModelRequest) -> str:
    return next(m["content"] for m in reversed(request.messages) if m["role"] == "user")


class CountingStorage(MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load(self, session_id):
        self.loads += 1
        return await super().load(session_id)


class YieldingEcho(EchoModel):
    """The echo model, but it gives the event loop away like a real provider would,
    and records every conversation it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[list[dict[str, Any]]] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append([dict(m) for m in request.messages])
        for _ in range(3):
            await asyncio.sleep(0)
        return await super().generate(request)


class FailingModel(ModelProvider):
    """Asks for set_variable on its first call, then fails."""

    name = "failing"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if request.messages[-1]["role"] == "user":
            return ModelResponse(
                text="", tool_calls=[ToolCall("c1", "set_variable", {"key": "k", "value": "new"})]
            )
        raise ModelError("the provider is down")


class BlockedModel(ModelProvider):
    """Never answers until ``release`` is set; ``entered`` tells when it was called."""

    name = "blocked"

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.entered.set()
        await self.release.wait()
        return ModelResponse(text="late")


def run(coroutine):
    return asyncio.run(coroutine)


def contents(record: SessionRecord | None) -> list[tuple[str, str]]:
    assert record is not None
    return [(m["role"], m["content"]) for m in record.messages]


@pytest.fixture(params=["memory", "sqlite"])
def any_storage(request, tmp_path: Path):
    if request.param == "memory":
        return MemoryStorage()
    return SQLiteStorage(tmp_path / "sessions.db")


# the result and the stored messages


def test_result_dict_keys_and_values():
    fw = Framework("memory")
    handler = AgentChatHandler(fw, EchoModel())
    request = RequestContext(request_id="r1")
    result = run(handler.chat("hello there", session_id="s1", request=request)).to_dict()
    assert set(result) >= RESULT_KEYS
    assert result["success"] is True
    assert "hello there" in result["message"]
    assert result["step_count"] == 1
    assert result["request_id"] == "r1"
    assert result["trace_id"] == request.trace_id
    assert result["session_id"] == "s1"
    assert result["finish_reason"] == "stop"
    assert result["model"] == "echo"
    assert result["usage"]["input_tokens"] > 0 and result["usage"]["output_tokens"] > 0


def test_turns_are_stored_and_continue(any_storage):
    fw = Framework(any_storage)
    handler = AgentChatHandler(fw, EchoModel())

    async def scenario():
        await handler.chat("first", session_id="s1")
        await handler.chat("second", session_id="s1")
        return await any_storage.load("s1")

    assert contents(run(scenario())) == [
        ("user", "first"),
        ("assistant", "first"),
        ("user", "second"),
        ("assistant", "second"),
    ]


def test_sqlite_history_survives_a_new_framework(tmp_path: Path):
    path = tmp_path / "s.db"
    run(AgentChatHandler(Framework(SQLiteStorage(path)), EchoModel()).chat("one", session_id="s"))

    model = YieldingEcho()
    fw = Framework(SQLiteStorage(path))
    run(AgentChatHandler(fw, model).chat("two", session_id="s"))
    assert [m["content"] for m in model.requests[0]] == ["one", "one", "two"]
    assert contents(run(fw.session_storage.load("s")))[-2:] == [
        ("user", "two"),
        ("assistant", "two"),
    ]


def test_every_stored_message_carries_its_turns_ids(any_storage):
    fw = Framework(any_storage)
    handler = AgentChatHandler(fw, EchoModel())
    first, second = RequestContext(), RequestContext()

    async def scenario():
        before = now_ms()
        await handler.chat("one", session_id="s1", request=first)
        await handler.chat(
            '/tool set_variable {"key": "k", "value": 1}', session_id="s1", request=second
        )
        after = now_ms()
        return before, after, await any_storage.load("s1")

    before, after, record = run(scenario())
    assert [m["role"] for m in record.messages] == [
        "user", "assistant", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    for index, message in enumerate(record.messages):
        turn = first if index < 2 else second
        assert type(message["created_at"]) is int
        assert before <= message["created_at"] <= after
        assert message["request_id"] == turn.request_id
        assert message["trace_id"] == turn.trace_id
    times = [m["created_at"] for m in record.messages]
    assert times == sorted(times)


def test_request_from_the_context_is_used():
    fw = Framework("memory")
    handler = AgentChatHandler(fw, EchoModel())

    async def body():
        return await handler.chat("hi", session_id="s1")

    result = run(fw.with_request({"request_id": "outer"}, body))
    assert result.request_id == "outer"
    record = run(fw.session_storage.load("s1"))
    assert {m["request_id"] for m in record.messages} == {"outer"}


def test_without_any_request_a_fresh_one_is_made():
    fw = Framework("memory")
    handler = AgentChatHandler(fw, EchoModel())
    one = run(handler.chat("a", session_id="s1"))
    two = run(handler.chat("b", session_id="s1"))
    assert one.request_id != two.request_id
    assert one.trace_id != two.trace_id


def test_system_prompt_is_built_from_handler_and_agent():
    seen: list[str | None] = []

    class Recorder(EchoModel):
        async def generate(self, request):
            seen.append(request.system)
            return await super().generate(request)

    fw = Framework("memory")
    agent = fw.get_or_create_agent_context("a1")
    agent.system_prompt = "agent says"
    handler = AgentChatHandler(fw, Recorder(), agent=agent, system_prompt="handler says")
    run(handler.chat("hi", session_id="s1"))
    agent.system_prompt = "agent changed"
    run(handler.chat("hi", session_id="s1"))
    assert seen == ["agent says\n\nhandler says", "agent changed\n\nhandler says"]


def test_max_steps_must_be_positive():
    with pytest.raises(ValueError):
        AgentChatHandler(Framework("memory"), EchoModel(), max_steps=0)


# history loading


def test_history_is_loaded_once_per_session_object():
    storage = CountingStorage()
    run(
        storage.save(
            SessionRecord("s1", [{"role": "user", "content": "old"}], {"v": 1}, new_metadata())
        )
    )
    storage.loads = 0
    model = YieldingEcho()
    handler = AgentChatHandler(Framework(storage), model)

    async def scenario():
        for text in ("a", "b", "c"):
            await handler.chat(text, session_id="s1")

    run(scenario())
    assert storage.loads == 1
    assert [m["content"] for m in model.requests[-1]] == ["old", "a", "a", "b", "b", "c"]


def test_history_is_reloaded_when_another_writer_moved_it():
    storage = CountingStorage()
    model = YieldingEcho()
    mine = AgentChatHandler(Framework(storage), model)
    other = AgentChatHandler(Framework(storage), EchoModel())

    async def scenario():
        await mine.chat("mine 1", session_id="s1")
        loads_after_first = storage.loads
        await other.chat("other", session_id="s1")
        await mine.chat("mine 2", session_id="s1")
        return loads_after_first

    loads_after_first = run(scenario())
    assert storage.loads == loads_after_first + 2, "the other writer loaded once, mine reloaded"
    assert [m["content"] for m in model.requests[-1]] == [
        "mine 1", "mine 1", "other", "other", "mine 2",
    ]  # fmt: skip
    assert [c for _, c in contents(run(storage.load("s1")))] == [
        "mine 1", "mine 1", "other", "other", "mine 2", "mine 2",
    ]  # fmt: skip


def test_cached_history_is_not_reused_after_delete_and_recreate():
    storage = MemoryStorage()
    model = YieldingEcho()
    mine = AgentChatHandler(Framework(storage), model)
    other = AgentChatHandler(Framework(storage), EchoModel())

    async def scenario():
        await mine.chat("before delete", session_id="s1")
        await storage.delete("s1")
        await other.chat("after delete", session_id="s1")
        await mine.chat("now", session_id="s1")

    run(scenario())
    stored = [c for _, c in contents(run(storage.load("s1")))]
    assert stored == ["after delete", "after delete", "now", "now"]
    assert [m["content"] for m in model.requests[-1]] == stored[:3]


# the seed's bug


def test_regression_1000_sessions_x_5_turns_never_mix():
    """The seed's shared message list mixed sessions up under parallel requests.

    All 5,000 turns start at once; the model yields to the event loop inside every
    call, so turns of different sessions interleave at every step.
    """
    sessions, turns = 1000, 5
    fw = Framework("memory")
    model = YieldingEcho()
    handler = AgentChatHandler(fw, model)
    texts = [(f"s{s}", f"session {s} turn {t}") for t in range(turns) for s in range(sessions)]

    async def scenario():
        results = await asyncio.gather(*(handler.chat(text, session_id=sid) for sid, text in texts))
        records = {sid: await fw.session_storage.load(sid) for sid in {sid for sid, _ in texts}}
        return results, records

    results, records = run(scenario())
    assert [(r.session_id, r.message) for r in results] == texts
    assert all(r.step_count == 1 for r in results)
    assert len({r.request_id for r in results}) == sessions * turns

    assert len(records) == sessions
    for s in range(sessions):
        record = records[f"s{s}"]
        expected = []
        for t in range(turns):
            text = f"session {s} turn {t}"
            expected += [("user", text), ("assistant", text)]
        assert contents(record) == expected, f"session s{s} was mixed up"
        assert record.metadata["message_count"] == 2 * turns
        assert len({m["request_id"] for m in record.messages}) == turns

    assert len(model.requests) == sessions * turns
    for conversation in model.requests:
        owner = conversation[-1]["content"].split(" turn ")[0]
        assert all(m["content"].startswith(owner + " turn ") for m in conversation)


# serialisation


class GatedModel(ModelProvider):
    """Each call announces itself and waits until the test opens its gate."""

    name = "gated"

    def __init__(self) -> None:
        self.inside = 0
        self.most_inside = 0
        self.arrivals: asyncio.Queue[tuple[str, asyncio.Event]] = asyncio.Queue()
        self.log: list[str] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        text = last_user_text(request)
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        self.log.append(f"enter {text}")
        gate = asyncio.Event()
        await self.arrivals.put((text, gate))
        await gate.wait()
        self.log.append(f"exit {text}")
        self.inside -= 1
        return ModelResponse(text=f"reply to {text}")


def test_same_session_turns_are_serialised_in_arrival_order():
    count = 8

    async def scenario():
        fw = Framework("memory")
        model = GatedModel()
        handler = AgentChatHandler(fw, model)
        tasks = [asyncio.create_task(handler.chat(f"u{i}", session_id="s")) for i in range(count)]
        for expected in range(count):
            text, gate = await model.arrivals.get()
            # Every other turn has run as far as it could before this point.
            assert text == f"u{expected}"
            assert model.inside == 1
            assert model.arrivals.empty(), "a second turn reached the model"
            gate.set()
        results = await asyncio.gather(*tasks)
        return fw, model, results

    fw, model, results = run(scenario())
    assert model.most_inside == 1
    assert model.log == [f"{kind} u{i}" for i in range(count) for kind in ("enter", "exit")]
    assert [r.message for r in results] == [f"reply to u{i}" for i in range(count)]
    expected = []
    for i in range(count):
        expected += [("user", f"u{i}"), ("assistant", f"reply to u{i}")]
    assert contents(run(fw.session_storage.load("s"))) == expected


def test_same_session_turns_are_serialised_on_sqlite(tmp_path: Path):
    count = 5

    async def scenario():
        fw = Framework(SQLiteStorage(tmp_path / "s.db"))
        model = GatedModel()
        handler = AgentChatHandler(fw, model)
        tasks = [asyncio.create_task(handler.chat(f"u{i}", session_id="s")) for i in range(count)]
        for expected in range(count):
            text, gate = await model.arrivals.get()
            assert text == f"u{expected}"
            assert model.arrivals.empty()
            gate.set()
        await asyncio.gather(*tasks)
        return await fw.session_storage.load("s")

    record = run(scenario())
    assert [c for role, c in contents(record) if role == "user"] == [f"u{i}" for i in range(count)]
    assert [c for role, c in contents(record) if role == "assistant"] == [
        f"reply to u{i}" for i in range(count)
    ]


def test_different_sessions_run_concurrently():
    class MeetingModel(ModelProvider):
        """Answers only once two different sessions are inside generate() together."""

        name = "meeting"

        def __init__(self) -> None:
            self.inside: set[str] = set()
            self.met = asyncio.Event()

        async def generate(self, request):
            text = last_user_text(request)
            self.inside.add(text)
            if len(self.inside) == 2:
                self.met.set()
            await self.met.wait()
            return ModelResponse(text=text)

    async def scenario():
        fw = Framework("memory")
        model = MeetingModel()
        handler = AgentChatHandler(fw, model)
        # A deadlock guard only: serialised sessions would wait here forever.
        async with asyncio.timeout(30):
            return await asyncio.gather(
                handler.chat("from a", session_id="a"), handler.chat("from b", session_id="b")
            ), model

    results, model = run(scenario())
    assert model.inside == {"from a", "from b"}
    assert [r.message for r in results] == ["from a", "from b"]


def test_two_handlers_on_one_session_are_serialised(any_storage):
    """Two agents (handlers) of one framework share the session's queue."""
    fw = Framework(any_storage)
    first, second = AgentChatHandler(fw, YieldingEcho()), AgentChatHandler(fw, YieldingEcho())

    async def scenario():
        return await asyncio.gather(
            first.chat("one", session_id="s"), second.chat("two", session_id="s")
        )

    results = run(scenario())
    assert [r.message for r in results] == ["one", "two"]
    assert contents(run(any_storage.load("s"))) == [
        ("user", "one"), ("assistant", "one"), ("user", "two"), ("assistant", "two"),
    ]  # fmt: skip
    assert len(fw.session_queues) == 0, "queues are dropped once nobody uses them"


def test_two_frameworks_sharing_a_memory_storage_are_serialised():
    storage = MemoryStorage()
    first = AgentChatHandler(Framework(storage), YieldingEcho())
    second = AgentChatHandler(Framework(storage), YieldingEcho())

    async def scenario():
        return await asyncio.gather(
            first.chat("one", session_id="s"),
            second.chat("two", session_id="s"),
            return_exceptions=True,
        )

    results = run(scenario())
    assert [getattr(r, "message", r) for r in results] == ["one", "two"]
    assert contents(run(storage.load("s"))) == [
        ("user", "one"), ("assistant", "one"), ("user", "two"), ("assistant", "two"),
    ]  # fmt: skip


# failures leave no trace (R1)


def seeded_framework(storage=None) -> tuple[Framework, SessionRecord]:
    fw = Framework(storage or MemoryStorage())
    run(
        AgentChatHandler(fw, EchoModel()).chat(
            '/tool set_variable {"key": "k", "value": "old"}', session_id="s1"
        )
    )
    return fw, run(fw.session_storage.load("s1"))


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_failed_turn_leaves_storage_and_session_untouched(backend, tmp_path: Path):
    storage = MemoryStorage() if backend == "memory" else SQLiteStorage(tmp_path / "s.db")
    fw, before = seeded_framework(storage)
    session = fw.context_manager.get_session_context("s1")
    in_memory = (list(session.messages), dict(session.variables), session.revision)
    model = FailingModel()

    with pytest.raises(ModelError, match="provider is down"):
        run(AgentChatHandler(fw, model).chat("doomed", session_id="s1"))

    assert model.calls == 2, "the tool ran and set the variable before the failure"
    after = run(fw.session_storage.load("s1"))
    assert after.messages == before.messages
    assert after.variables == {"k": "old"}
    assert after.revision == before.revision
    assert (session.messages, session.variables, session.revision) == in_memory
    assert fw.context_manager.ref_count("s1") == 0

    run(AgentChatHandler(fw, EchoModel()).chat("recovered", session_id="s1"))
    assert [c for _, c in contents(run(fw.session_storage.load("s1")))][-2:] == [
        "recovered",
        "recovered",
    ]


def test_first_turn_that_fails_creates_nothing():
    fw = Framework("memory")
    with pytest.raises(ModelError):
        run(AgentChatHandler(fw, FailingModel()).chat("doomed", session_id="new"))
    assert run(fw.session_storage.load("new")) is None
    assert run(fw.session_storage.session_ids()) == []
    session = fw.context_manager.get_session_context("new")
    assert session is None or (session.messages == [] and session.variables == {})


def test_request_timeout_raises_and_saves_nothing():
    fw, before = seeded_framework()
    request = RequestContext(timeout=0.05)

    async def scenario():
        model = BlockedModel()
        with pytest.raises(TurnTimeoutError) as caught:
            await AgentChatHandler(fw, model).chat("slow", session_id="s1", request=request)
        assert model.entered.is_set()
        return caught.value

    error = run(scenario())
    assert error.exit_code == 1
    assert "not saved" in str(error)
    assert run(fw.session_storage.load("s1")).messages == before.messages
    session = fw.context_manager.get_session_context("s1")
    assert session.messages == before.messages


def test_cancelled_request_saves_nothing():
    fw, before = seeded_framework()
    request = RequestContext()

    async def scenario():
        model = BlockedModel()
        handler = AgentChatHandler(fw, model)
        turn = asyncio.create_task(handler.chat("stop me", session_id="s1", request=request))
        await model.entered.wait()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn

    run(scenario())
    assert run(fw.session_storage.load("s1")).messages == before.messages
    assert fw.context_manager.get_session_context("s1").messages == before.messages


def test_closing_the_stream_mid_turn_cancels_it_and_saves_nothing():
    class HalfAnswer(ModelProvider):
        name = "half"

        async def generate(self, request):
            raise AssertionError("stream() is used, not generate()")

        async def stream(self, request):
            yield StreamEvent("delta", text="partial")
            await asyncio.Event().wait()  # the rest never comes
            yield StreamEvent("done", response=ModelResponse(text="partial"))  # pragma: no cover

    fw, before = seeded_framework()

    async def scenario():
        stream = AgentChatHandler(fw, HalfAnswer()).chat_stream("stop early", session_id="s1")
        async with contextlib.aclosing(stream):
            async for event in stream:
                assert event == {"type": "delta", "text": "partial"}
                break

    run(scenario())
    assert run(fw.session_storage.load("s1")).messages == before.messages
    assert fw.context_manager.get_session_context("s1").messages == before.messages
    assert len(fw.session_queues) == 0


# the tool loop bound


def test_max_steps_bounds_the_tool_loop():
    class ToolForever(ModelProvider):
        name = "loop"

        async def generate(self, request):
            return ModelResponse(
                text="again",
                tool_calls=[ToolCall("c", "get_session_info", {})],
                usage={"input_tokens": 1, "output_tokens": 1},
            )

    fw = Framework("memory")
    result = run(AgentChatHandler(fw, ToolForever(), max_steps=3).chat("go", session_id="s1"))
    assert result.step_count == 3
    assert result.finish_reason == "max_steps"
    assert result.usage == {"input_tokens": 3, "output_tokens": 3}
    roles = [m["role"] for m in run(fw.session_storage.load("s1")).messages]
    assert roles == ["user"] + ["assistant", "tool"] * 3


# clear_history


def test_clear_history_keeps_variables(any_storage):
    fw = Framework(any_storage)
    model = YieldingEcho()
    handler = AgentChatHandler(fw, model)

    async def scenario():
        await handler.chat('/tool set_variable {"key": "k", "value": 1}', session_id="s1")
        await handler.clear_history("s1")
        cleared = await any_storage.load("s1")
        await handler.chat("fresh start", session_id="s1")
        return cleared, await any_storage.load("s1")

    cleared, after = run(scenario())
    assert cleared.messages == []
    assert cleared.variables == {"k": 1}
    assert fw.context_manager.get_session_context("s1").variables == {"k": 1}
    assert [m["content"] for m in model.requests[-1]] == ["fresh start"]
    assert contents(after) == [("user", "fresh start"), ("assistant", "fresh start")]
    assert after.variables == {"k": 1}


def test_clear_history_of_unknown_session_does_nothing():
    fw = Framework("memory")
    run(AgentChatHandler(fw, EchoModel()).clear_history("nobody"))
    assert run(fw.session_storage.session_ids()) == []


# turn setup: start over, fork, variables, a session system prompt


class SystemRecorder(EchoModel):
    def __init__(self) -> None:
        super().__init__()
        self.systems: list[str | None] = []

    async def generate(self, request):
        self.systems.append(request.system)
        return await super().generate(request)


def test_the_turns_variables_and_system_prompt_are_saved_with_it():
    fw = Framework("memory")
    model = SystemRecorder()
    handler = AgentChatHandler(fw, model, system_prompt="default prompt")

    async def scenario():
        await handler.chat("a", session_id="s1")
        await handler.chat(TurnRequest("s1", "b", variables={"x": 1}, system="pirate"))
        await handler.chat("c", session_id="s1")
        return await fw.session_storage.load("s1")

    record = run(scenario())
    assert model.systems == ["default prompt", "pirate", "pirate"]
    assert record.variables == {"x": 1}
    assert record.metadata["system_prompt"] == "pirate"
    assert [c for _, c in contents(record)] == ["a", "a", "b", "b", "c", "c"]


def test_start_from_an_empty_record_starts_over():
    fw = Framework("memory")
    handler = AgentChatHandler(fw, EchoModel())

    async def scenario():
        await handler.chat('/tool set_variable {"key": "k", "value": 1}', session_id="s1")
        fresh = SessionRecord("s1", metadata=new_metadata())
        await handler.chat(TurnRequest("s1", "again", start_from=fresh))
        return await fw.session_storage.load("s1")

    record = run(scenario())
    assert contents(record) == [("user", "again"), ("assistant", "again")]
    assert record.variables == {}
    assert record.metadata["message_count"] == 2


def test_starting_over_forgets_the_old_system_prompt():
    fw = Framework("memory")
    model = SystemRecorder()
    handler = AgentChatHandler(fw, model)

    async def scenario():
        await handler.chat(TurnRequest("s1", "a", system="pirate"))
        fresh = SessionRecord("s1", metadata=new_metadata())
        await handler.chat(TurnRequest("s1", "b", start_from=fresh))
        return await fw.session_storage.load("s1")

    record = run(scenario())
    assert model.systems == ["pirate", None]
    assert "system_prompt" not in record.metadata


def test_start_from_a_copy_forks():
    fw = Framework("memory")
    handler = AgentChatHandler(fw, EchoModel())

    async def scenario():
        await handler.chat("shared", session_id="s1")
        source = await fw.session_storage.load("s1")
        copy = SessionRecord("s2", source.messages, source.variables, dict(source.metadata))
        await handler.chat(TurnRequest("s2", "only in s2", start_from=copy))
        return await fw.session_storage.load("s1"), await fw.session_storage.load("s2")

    original, fork = run(scenario())
    assert [c for _, c in contents(original)] == ["shared", "shared"]
    assert [c for _, c in contents(fork)] == ["shared", "shared", "only in s2", "only in s2"]


def test_a_failed_turn_that_replaces_the_session_changes_nothing():
    fw, before = seeded_framework()
    turn = TurnRequest(
        "s1",
        "doomed",
        start_from=SessionRecord("s1", metadata=new_metadata()),
        variables={"x": 1},
        system="pirate",
    )
    with pytest.raises(ModelError):
        run(AgentChatHandler(fw, FailingModel()).chat(turn))
    after = run(fw.session_storage.load("s1"))
    assert after.messages == before.messages
    assert after.variables == before.variables
    assert "system_prompt" not in after.metadata
    session = fw.context_manager.get_session_context("s1")
    assert session.messages == before.messages
    assert session.variables == before.variables
    assert "system_prompt" not in session.metadata


# streaming


def collect(handler: AgentChatHandler, message: str, session_id: str = "s1") -> list[dict]:
    async def scenario():
        return [event async for event in handler.chat_stream(message, session_id=session_id)]

    return run(scenario())


def test_chat_stream_plain_reply():
    handler = AgentChatHandler(Framework("memory"), EchoModel())
    events = collect(handler, "stream me")
    assert [e["type"] for e in events] == ["delta", "done"]
    assert events[0]["text"] == "stream me"
    assert events[-1]["result"].message == "stream me"


def test_chat_stream_tool_events():
    handler = AgentChatHandler(Framework("memory"), EchoModel())
    events = collect(handler, '/tool set_variable {"key": "k", "value": 2}')
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "delta", "done"]
    call, result, delta, done = events
    assert call["name"] == "set_variable"
    assert call["arguments"] == {"key": "k", "value": 2}
    assert result["id"] == call["id"]
    assert result["is_error"] is False
    assert '"ok":true' in result["content"]
    assert "set_variable returned" in delta["text"]
    assert done["result"].step_count == 2
    assert done["result"].message == delta["text"]


def test_chat_stream_uses_the_providers_stream():
    class Chunky(ModelProvider):
        name = "chunky"

        async def generate(self, request):
            raise AssertionError("stream() is used, not generate()")

        async def stream(self, request):
            for part in ("a", "b", "c"):
                yield StreamEvent("delta", text=part)
            yield StreamEvent("done", response=ModelResponse(text="abc"))

    handler = AgentChatHandler(Framework("memory"), Chunky())
    events = collect(handler, "x")
    assert [e.get("text") for e in events if e["type"] == "delta"] == ["a", "b", "c"]
    assert events[-1]["result"].message == "abc"


def test_stream_without_a_response_is_an_error_and_saves_nothing():
    class Empty(ModelProvider):
        name = "empty"

        async def generate(self, request):
            raise AssertionError("stream() is used, not generate()")

        async def stream(self, request):
            for _ in ():
                yield

    async def stream_turn(handler):
        return [event async for event in handler.chat_stream("x", session_id="s1")]

    fw = Framework("memory")
    with pytest.raises(RuntimeError, match="empty"):
        run(stream_turn(AgentChatHandler(fw, Empty())))
    assert run(fw.session_storage.load("s1")) is None
