"""The multi-host harness's model (a ``foliko.models`` plugin, put on the hosts'
PYTHONPATH): its reply is the turn's input, then `` | ``, then every earlier user
message of the history it was sent, in order. So a reply shows which history
the turn ran on: the checker compares it with the turns its client had
acknowledged. The reply streams in ``CHUNKS`` deltas ``HOSTECHO_DELAY_S`` apart
(default 0.05 s), so that a host killed mid-stream dies with a turn open."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse, StreamEvent

CHUNKS = 4


def reply_to(messages: list[dict[str, Any]]) -> str:
    said = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
    return f"{said[-1] if said else ''} | {' '.join(said[:-1])}"


class HistoryEcho(ModelProvider):
    name = "hostecho"
    offline = True

    def __init__(self) -> None:
        self.delay = float(os.environ.get("HOSTECHO_DELAY_S", "0.05"))

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(self.delay * CHUNKS)
        return ModelResponse(
            text=reply_to(request.messages), usage={"input_tokens": 1, "output_tokens": 1}
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        text = reply_to(request.messages)
        size = -(-len(text) // CHUNKS)
        for start in range(0, len(text), size):
            await asyncio.sleep(self.delay)
            yield StreamEvent("delta", text=text[start : start + size])
        yield StreamEvent(
            "done", response=ModelResponse(text=text, usage={"input_tokens": 1, "output_tokens": 1})
        )


def build(spec: Any, key: str | None = None, transport: Any = None) -> HistoryEcho:
    return HistoryEcho()
