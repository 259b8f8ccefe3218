"""The model provider contract: one request in, one response out.

The value types are NamedTuples rather than dataclasses: they are created at
every start-up, and a NamedTuple class costs a fraction of a dataclass (P1).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

NO_USAGE: Mapping[str, int] = MappingProxyType({})


class ToolCall(NamedTuple):
    id: str
    name: str
    arguments: Any


class ModelRequest(NamedTuple):
    """``messages`` are canonical messages (see ``storage.record``), oldest first.

    ``deadline`` is a ``time.monotonic()`` instant; retries never go past it.
    """

    messages: list[dict[str, Any]]
    system: str | None = None
    tools: Sequence[dict[str, Any]] = ()
    deadline: float | None = None
    purpose: str = "turn"

    def time_limit(self, default: float = 120.0) -> float:
        import time

        return self.deadline if self.deadline is not None else time.monotonic() + default


class ModelResponse(NamedTuple):
    text: str
    tool_calls: Sequence[ToolCall] = ()
    usage: Mapping[str, int] = NO_USAGE
    finish_reason: str = "stop"


class StreamEvent(NamedTuple):
    """``type`` is ``delta`` (``text``) or ``done`` (``response``)."""

    type: str
    text: str = ""
    response: ModelResponse | None = None


class ModelProvider(ABC):
    name: str
    context_window: int = 8192
    offline: bool = False

    @abstractmethod
    async def generate(self, request: ModelRequest) -> ModelResponse: ...

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Providers without native streaming answer in one delta."""
        response = await self.generate(request)
        if response.text:
            yield StreamEvent("delta", text=response.text)
        yield StreamEvent("done", response=response)
