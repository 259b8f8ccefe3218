"""``chat --dry-run``: run the turn up to the model call and keep what would be sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse, StreamEvent


class RequestCaptured(Exception):
    """The turn's model call, stopped: its ``request`` and, from a provider that
    sends HTTP, the ``wire`` request the server would have received."""

    def __init__(self, request: ModelRequest, wire: dict[str, Any] | None):
        self.request = request
        self.wire = wire


class CaptureModel(ModelProvider):
    """Stands in for a model during ``--dry-run``: the turn runs as it would with
    ``target`` (the window it discovers included, which bounds the reply), and the
    call it makes is captured, built by the target's own code, never sent."""

    def __init__(self, target: ModelProvider):
        self.target = target
        self.name = target.name
        self.context_window = target.context_window
        self.window_configured = target.window_configured
        self.offline = target.offline
        self.max_tokens = target.max_tokens
        self.options = target.options
        self.accepts_images = target.accepts_images

    async def discover_context_window(self, cache_dir: Any = None) -> int | None:
        return await self.target.discover_context_window(cache_dir)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if request.purpose != "summary":
            raise RequestCaptured(request, await self.target.wire_request(request))
        if self.target.offline:
            return await self.target.generate(request)
        return ModelResponse(text=f"[the summary {self.name} would write]")

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        raise RequestCaptured(request, await self.target.wire_request(request, stream=True))
        yield  # an async generator, as ``stream`` is
