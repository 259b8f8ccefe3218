"""``if_busy``: what a turn does when another turn holds its session (the
library's door; the store's half is in tests/storage/test_conformance.py,
the CLI's and HTTP's across processes in tests/serve/test_if_busy.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from foliko_cli import Foliko
from foliko_cli.errors import BusyRejectedError, TurnInterruptedError, UsageError
from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse
from foliko_cli.service import AsyncFoliko
from foliko_cli.service.values import TurnRequest


class BlockedModel(ModelProvider):
    """Never answers; ``entered`` tells when it was called."""

    name = "blocked"
    offline = True

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def contents(record) -> list[str]:
    return [m["content"] for m in record.messages]


def test_an_unknown_policy_is_a_usage_error_and_runs_nothing(tmp_path: Path):
    with Foliko("sqlite", "echo", home=tmp_path) as foliko:
        with pytest.raises(UsageError, match="if_busy must be wait, reject or interrupt"):
            foliko.chat("s", "hi", if_busy="later")
        with pytest.raises(UsageError, match="not 'Reject'"):
            list(foliko.chat_stream(TurnRequest("s", "hi", if_busy="Reject")))
        assert foliko.list_sessions() == []


def test_a_free_session_runs_the_turn_whatever_the_policy(tmp_path: Path):
    with Foliko("sqlite", "echo", home=tmp_path) as foliko:
        for policy in ("wait", "reject", "interrupt"):
            assert foliko.chat("s", policy, if_busy=policy).message == policy
        assert contents(foliko.get_session("s")) == [
            *["wait", "wait", "reject", "reject", "interrupt", "interrupt"]
        ]


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_reject_fails_at_once_and_interrupt_stops_the_running_turn_unsaved(
    tmp_path: Path, storage: str
):
    model = BlockedModel()

    async def scenario() -> None:
        async with AsyncFoliko(storage=storage, model="echo", home=tmp_path) as foliko:
            await foliko.chat("s", "first")
            events: list[dict] = []

            async def read() -> None:
                async for event in foliko.chat_stream("s", "slow", model=model):
                    events.append(event)

            reader = asyncio.ensure_future(read())
            await model.entered.wait()
            with pytest.raises(BusyRejectedError) as rejected:
                await foliko.chat("s", "not now", if_busy="reject")
            assert rejected.value.exit_code == 4 and rejected.value.http_status == 409
            assert "session 's' is busy with another turn" in str(rejected.value)
            assert not reader.done()
            newer = await foliko.chat("s", "newer", if_busy="interrupt")
            assert newer.message == "newer"
            with pytest.raises(TurnInterruptedError) as stopped:
                await reader
            assert stopped.value.exit_code == 5 and stopped.value.code == "turn_interrupted"
            assert "interrupted by a newer message; nothing of it was saved" in str(stopped.value)
            assert contents(await foliko.get_session("s")) == ["first", "first", "newer", "newer"]

    asyncio.run(scenario())
