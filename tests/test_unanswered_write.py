"""A turn whose write goes unanswered (the connection to the database is lost,
or the server does not answer in time, after the write was sent) asks the
store, under the session's lock, whether it landed: a turn that was saved is
answered as saved, never reported failed (a client that then retries would
store it twice); one that was not saved fails with the storage's error. The
multi-host harness (tests/hosts/) found this under a lossy link and a
database restart: responses said failed while their turns were stored."""

from __future__ import annotations

import asyncio

import pytest

from foliko_cli.context import RequestContext
from foliko_cli.engine import handler as handler_module
from foliko_cli.engine.framework import Framework
from foliko_cli.engine.handler import AgentChatHandler
from foliko_cli.errors import ConflictError, StorageError
from foliko_cli.models.echo import EchoModel
from foliko_cli.storage.memory import MemoryStorage


class LostAnswers(MemoryStorage):
    """Its next ``lose`` appends fail with a StorageError, after writing
    (``landed``) or without; then ``unreachable`` reads fail too."""

    def __init__(self, landed: bool, error: type[StorageError] = StorageError, unreachable=0):
        super().__init__()
        self.landed = landed
        self.error = error
        self.lose = 0
        self.unreachable = unreachable

    async def append(self, session_id, messages, state, *, expected_revision=None):
        write = super().append(session_id, messages, state, expected_revision=expected_revision)
        if not self.lose:
            return await write
        self.lose -= 1
        if self.landed:
            await write
        else:
            write.close()
        raise self.error("PostgreSQL did not answer within 10s (a network stall)")

    async def load(self, session_id):
        if self.unreachable:
            self.unreachable -= 1
            raise StorageError("cannot connect to the database")
        return await super().load(session_id)


def turn(storage: LostAnswers, text: str, request_id: str):
    handler = AgentChatHandler(Framework(storage), EchoModel())
    return handler.chat(text, session_id="s", request=RequestContext(request_id=request_id))


def user_messages(storage: LostAnswers) -> list[str]:
    record = asyncio.run(storage.load("s"))
    return [m["content"] for m in record.messages if m["role"] == "user"]


def test_a_turn_saved_before_its_answer_was_lost_stands_once():
    storage = LostAnswers(landed=True)
    asyncio.run(turn(storage, "one", "r1"))
    storage.lose = 1
    result = asyncio.run(turn(storage, "two", "r2"))
    assert result.success and result.message == "two"
    asyncio.run(turn(storage, "three", "r3"))
    assert user_messages(storage) == ["one", "two", "three"]


def test_a_turn_not_saved_fails_with_the_storage_error():
    storage = LostAnswers(landed=False)
    asyncio.run(turn(storage, "one", "r1"))
    storage.lose = 1
    with pytest.raises(StorageError, match="did not answer"):
        asyncio.run(turn(storage, "two", "r2"))
    assert user_messages(storage) == ["one"]


def test_the_store_is_asked_again_while_it_cannot_be_reached(monkeypatch):
    monkeypatch.setattr(asyncio, "sleep", _no_wait)
    storage = LostAnswers(landed=True, unreachable=3)
    storage.lose = 1
    result = asyncio.run(turn(storage, "one", "r1"))
    assert result.message == "one" and storage.unreachable == 0
    assert user_messages(storage) == ["one"]


def test_past_the_bound_an_unreachable_store_leaves_the_error(monkeypatch):
    monkeypatch.setattr(handler_module, "RESOLVE_S", 0.0)
    storage = LostAnswers(landed=True, unreachable=1)
    storage.lose = 1
    with pytest.raises(StorageError, match="did not answer"):
        asyncio.run(turn(storage, "one", "r1"))


def test_a_refused_write_is_not_looked_for():
    storage = LostAnswers(landed=False, error=ConflictError)
    storage.lose = 1
    storage.error = lambda message: ConflictError("s", 0, 1)  # type: ignore[assignment]
    storage.unreachable = 1  # a lookup would fail on it
    with pytest.raises(ConflictError):
        asyncio.run(turn(storage, "one", "r1"))
    assert storage.unreachable == 1


_real_sleep = asyncio.sleep


async def _no_wait(seconds: float) -> None:
    await _real_sleep(0)
