"""One turn request (TurnRequest) for chat, chat_stream, dry_run and count_tokens,
and one streaming pump (TurnStream) between a turn and its reader."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path

import pytest

from foliko_cli import AsyncFoliko, TurnRequest, TurnStream
from foliko_cli.engine import turn as module
from foliko_cli.errors import SessionBusyError, UsageError

SOURCE = Path(inspect.getfile(module)).read_text()


def run(coroutine):
    return asyncio.run(coroutine)


def declared_keys(class_name: str) -> list[str]:
    """The field names a class declares in the module's source (TurnParams exists
    for type checkers only, so it is read from the source)."""
    for node in ast.walk(ast.parse(SOURCE)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            body = [s for s in node.body if isinstance(s, ast.AnnAssign)]
            return [s.target.id for s in body if isinstance(s.target, ast.Name)]
    raise AssertionError(f"{class_name} is not in {module.__name__}")


def test_the_keywords_are_the_requests_fields_after_the_session_and_message():
    assert TurnRequest._fields[:2] == ("session_id", "message")
    assert declared_keys("TurnParams") == list(TurnRequest._fields[2:])


def test_a_request_and_its_keywords_run_the_same_turn():
    async def scenario():
        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            by_keywords = await foliko.chat("a", "hi", system="be brief", variables={"k": 1})
            turn = TurnRequest("b", "hi", system="be brief", variables={"k": 1})
            by_request = await foliko.chat(turn)
            return (
                by_keywords,
                by_request,
                await foliko.get_session("a"),
                await foliko.get_session("b"),
            )

    by_keywords, by_request, a, b = run(scenario())
    assert by_keywords.message == by_request.message == "hi"
    assert [m["content"] for m in a.messages] == [m["content"] for m in b.messages]
    assert a.variables == b.variables == {"k": 1}
    assert a.metadata["system_prompt"] == b.metadata["system_prompt"] == "be brief"


def test_dry_run_and_count_tokens_take_the_same_request():
    async def scenario():
        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            turn = TurnRequest("s1", "what is sent", instructions="answer in French")
            shown = await foliko.dry_run(turn)
            same = await foliko.dry_run("s1", "what is sent", instructions="answer in French")
            counted = await foliko.count_tokens(turn)
            return shown, same, counted, await foliko.session_ids()

    shown, same, (tokens, by_server), stored = run(scenario())
    assert shown == same
    assert shown["system"] == "answer in French"
    assert shown["messages"][-1]["content"] == "what is sent"
    assert tokens > 0 and by_server is False
    assert stored == []  # nothing was saved


def test_a_request_takes_no_message_or_keywords_beside_it():
    async def scenario():
        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            with pytest.raises(TypeError, match="whole turn"):
                await foliko.chat(TurnRequest("s1", "hi"), "again")
            with pytest.raises(TypeError, match="whole turn"):
                await foliko.dry_run(TurnRequest("s1", "hi"), model="echo")
            with pytest.raises(TypeError, match="modle"):
                await foliko.chat("s1", "hi", modle="echo")
            return await foliko.session_ids()

    assert run(scenario()) == []


def test_a_stream_runs_when_its_reader_stops_reading():
    """The turn does not wait for its reader: it is saved, and ``on_done`` runs in
    its own task, though nobody reads a single event."""

    async def scenario():
        done = asyncio.Event()
        seen = []

        async def on_done(result):
            seen.append(result.message)
            done.set()

        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            stream = foliko.chat_stream("s1", "unread", on_done=on_done)
            assert isinstance(stream, TurnStream)
            position = await stream.started()
            await done.wait()
            record = await foliko.get_session("s1")
            events = [event["type"] async for event in stream]
            return position, seen, record, events, stream.result

    position, seen, record, events, result = run(scenario())
    assert position == 0
    assert seen == ["unread"]
    assert [m["content"] for m in record.messages] == ["unread", "unread"]
    assert events == ["delta", "done"]  # still there for a late reader
    assert result is not None and result.message == "unread"


def test_started_raises_what_stopped_the_turn_before_it_held_its_session():
    async def scenario():
        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            with pytest.raises(UsageError, match="blank"):
                await foliko.chat_stream("s1", "   ").started()
            return await foliko.session_ids()

    assert run(scenario()) == []


def test_started_waits_for_the_session_its_turn_needs():
    """``started`` returns only once the turn holds its session: while another turn
    holds it, it waits (and the turn gives up at its timeout)."""

    async def scenario():
        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            async with foliko.framework.hold_session("s1", 5):
                waiting = asyncio.ensure_future(
                    foliko.chat_stream("s1", "later", timeout=0.2).started()
                )
                with pytest.raises(SessionBusyError):
                    await waiting
            stream = foliko.chat_stream("s1", "now")
            return await stream.started(), [e["type"] async for e in stream]

    position, events = run(scenario())
    assert position == 0 and events == ["delta", "done"]


def test_closing_a_stream_before_its_turn_is_saved_keeps_nothing():
    async def scenario():
        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            async with foliko.framework.hold_session("s1", 5):
                stream = foliko.chat_stream("s1", "never")
                stream.start()
                await stream.aclose()
            await foliko.chat("s1", "kept")
            return await foliko.get_session("s1")

    record = run(scenario())
    assert [m["content"] for m in record.messages] == ["kept", "kept"]


def test_a_reader_cancelled_while_on_done_runs_still_gets_the_saved_turn():
    """``on_done`` runs to its end once the turn is saved: a cancellation of the
    reader waits for it, and the reader gets the turn's ``done``."""

    async def scenario():
        entered, release = asyncio.Event(), asyncio.Event()
        finished = []

        async def on_done(result):
            entered.set()
            await release.wait()
            finished.append(result.message)

        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            stream = foliko.chat_stream("s1", "hi", on_done=on_done)
            reader = asyncio.ensure_future(_types(stream))
            await entered.wait()
            reader.cancel()
            while not stream._task.cancelling():  # the cancellation has reached the turn
                await asyncio.sleep(0)
            release.set()
            return await reader, finished, await foliko.get_session("s1")

    events, finished, record = run(scenario())
    assert events == ["delta", "done"]
    assert finished == ["hi"]
    assert len(record.messages) == 2


async def _types(stream):
    return [event["type"] async for event in stream]
