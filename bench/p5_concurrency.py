"""P5: 1,000 sessions x 10 turns at once in one process, and zero cross-talk.

All 10,000 ``AgentChatHandler.chat`` calls (echo model, memory storage) are
started together with ``asyncio.gather``, turns of different sessions
interleaved. Reported: turns per second. Then every session must hold
exactly its own 20 messages in order (user "sN tK", reply "sN tK" for
K = 0..9) and every reply must carry its own session id: a single stray,
missing or reordered message fails the run.
"""

from __future__ import annotations

import asyncio
import time

from common import Result, Workspace, failed, log, main_single


async def one_run(sessions: int, turns: int) -> tuple[float, int]:
    """(turns per second, number of cross-talk problems found)."""
    from foliko_cli.engine.framework import Framework
    from foliko_cli.engine.handler import AgentChatHandler
    from foliko_cli.models.echo import EchoModel
    from foliko_cli.storage.memory import MemoryStorage

    framework = Framework(MemoryStorage())
    handler = AgentChatHandler(framework, EchoModel())
    jobs = [(f"s{s}", f"s{s} t{t}") for t in range(turns) for s in range(sessions)]
    start = time.perf_counter()
    replies = await asyncio.gather(*(handler.chat(text, session_id=sid) for sid, text in jobs))
    elapsed = time.perf_counter() - start
    problems = sum(
        reply.session_id != sid or reply.message != text
        for (sid, text), reply in zip(jobs, replies, strict=True)
    )
    storage = framework.session_storage
    for s in range(sessions):
        record = await storage.load(f"s{s}")
        found = [(m["role"], m["content"]) for m in record.messages] if record else []
        expected = [(role, f"s{s} t{t}") for t in range(turns) for role in ("user", "assistant")]
        problems += found != expected
    return len(jobs) / elapsed, problems


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    sessions, turns = (20, 5) if quick else (1000, 10)
    runs = 3 if quick else 7
    figure = f"{sessions:,} sessions x {turns} turns at once (echo, memory)"
    result = Result("P5", figure, "turns/s", target="0 cross-talk")
    try:
        log(f"P5: {figure}, {runs} runs")
        problems = 0
        for _ in range(runs):
            rate, found = asyncio.run(one_run(sessions, turns))
            result.runs.append(rate)
            problems += found
        result.details["cross_talk"] = problems
        result.note = f"cross-talk: {problems}"
        result.met = problems == 0
    except Exception as exc:
        return [failed("P5", figure, "turns/s", result.target, exc)]
    return [result]


if __name__ == "__main__":
    main_single(run, __doc__)
