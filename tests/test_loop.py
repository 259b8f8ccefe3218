"""common/loop.py: ``run_to_completion`` finishes what it was given and holds a
cancellation back.

It always waits in a task of its own, even for a coroutine that would end in
its first step (a SQLite commit): that wait is when a signal that came during
the commit reaches the turn (the facade then says the turn was saved), and
when an MCP server's notification that came meanwhile is read. Running such
a coroutine in place saved ~5 % of a serve turn's instructions and lost both
(tests/test_service.py, tests/mcp/test_mcp_lazy.py)."""

from __future__ import annotations

import asyncio

import pytest

from foliko_cli.common.loop import run_to_completion


def test_a_coroutine_that_suspends_goes_on_in_a_task_and_returns_its_value():
    async def commit(gate: asyncio.Event) -> str:
        await asyncio.sleep(0)
        await gate.wait()
        return "written"

    async def main() -> None:
        gate = asyncio.Event()
        waiting = asyncio.ensure_future(run_to_completion(commit(gate)))
        await asyncio.sleep(0)
        assert not waiting.done()
        gate.set()
        assert await waiting == ("written", False)

    asyncio.run(main())


def test_a_cancellation_while_it_suspends_waits_for_its_end_and_is_reported():
    finished: list[str] = []

    async def commit(started: asyncio.Event, gate: asyncio.Event) -> str:
        started.set()
        await gate.wait()
        finished.append("commit")
        return "written"

    async def main() -> None:
        started, gate = asyncio.Event(), asyncio.Event()
        caller = asyncio.ensure_future(run_to_completion(commit(started, gate)))
        await started.wait()
        caller.cancel()
        await asyncio.sleep(0)
        assert not caller.done() and not finished
        gate.set()
        assert await caller == ("written", True)
        assert finished == ["commit"]

    asyncio.run(main())


def test_an_error_after_it_suspends_reaches_the_caller():
    async def commit() -> None:
        await asyncio.sleep(0)
        raise OSError("disk full")

    async def main() -> None:
        with pytest.raises(OSError, match="disk full"):
            await run_to_completion(commit())

    asyncio.run(main())


def test_a_future_is_awaited_too():
    async def main() -> None:
        future = asyncio.get_running_loop().create_future()
        future.set_result(7)
        assert await run_to_completion(future) == (7, False)

    asyncio.run(main())


def test_without_a_loop_it_is_simply_awaited():
    async def commit() -> str:
        return "written"

    coroutine = run_to_completion(commit())
    with pytest.raises(StopIteration) as done:
        coroutine.send(None)
    assert done.value.value == ("written", False)
