"""The model provider contract: one request in, one response out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class ModelRequest:
    """``messages`` are canonical messages (see ``storage.record``), oldest first.

    ``deadline`` is a ``time.monotonic()`` instant; retries never go past it.
    """

    messages: list[dict[str, Any]]
    system: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    deadline: float | None = None
    purpose: str = "turn"

    def time_limit(self, default: float = 120.0) -> float:
        import time

        return self.deadline if self.deadline is not None else time.monotonic() + default


@dataclass(frozen=True)
class ModelResponse:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str = "stop"


@dataclass(frozen=True)
class StreamEvent:
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
