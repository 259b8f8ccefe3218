"""The history operations of the service and its sync twin: search and usage."""

from __future__ import annotations

import asyncio

import pytest

from foliko_cli import AsyncFoliko, Foliko
from foliko_cli.errors import UsageError
from foliko_cli.messages.record import SessionRecord
from foliko_cli.storage.memory import MemoryStorage


def test_the_facade_searches_and_sums_what_the_service_does():
    with Foliko("memory", "echo") as foliko:
        foliko.chat("s1", "tell me about flamingos")
        [hit] = foliko.search("flamingo*", role="user")
        assert (hit.session_id, hit.seq, hit.marked()) == ("s1", 0, "tell me about [flamingos]")
        report = foliko.usage(by="model")
        assert [row["model"] for row in report["rows"]] == ["echo"]
        assert report["total"]["replies"] == 1
        assert report["total"]["output_tokens"] > 0


def test_a_backend_without_an_index_is_scanned():
    storage = MemoryStorage()
    assert not hasattr(storage, "search")

    async def go():
        async with AsyncFoliko(storage, "echo") as service:
            await storage.save(
                SessionRecord("m", messages=[{"role": "user", "content": "Größe", "created_at": 1}])
            )
            return await service.search("größe")

    assert [(h.session_id, h.seq) for h in asyncio.run(go())] == [("m", 0)]


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda f: f.search("x", role="robot"), "unknown role 'robot'"),
        (lambda f: f.search("x", limit=0), "at least 1"),
        (lambda f: f.search("x", session_id=""), "invalid session id"),
        (lambda f: f.search('"x'), "unclosed quote"),
        (lambda f: f.usage(by="week"), "unknown grouping 'week'"),
    ],
)
def test_bad_arguments_are_usage_errors(call, fragment):
    with Foliko("memory", "echo") as foliko, pytest.raises(UsageError) as caught:
        call(foliko)
    assert fragment in str(caught.value)
    assert caught.value.exit_code == 2
