"""``chat --dry-run``: run the turn up to the model call and keep what would be sent."""

from __future__ import annotations

from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse


class RequestCaptured(Exception):
    def __init__(self, request: ModelRequest):
        self.request = request


class CaptureModel(ModelProvider):
    """Stands in for a model during ``--dry-run``: records the request, answers nothing."""

    def __init__(self, target: ModelProvider):
        self.target = target
        self.name = target.name
        self.context_window = target.context_window
        self.window_configured = target.window_configured
        self.max_tokens = target.max_tokens
        self.options = target.options
        self.accepts_images = target.accepts_images

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if request.purpose != "summary":
            raise RequestCaptured(request)
        if self.target.offline:
            return await self.target.generate(request)
        return ModelResponse(text=f"[the summary {self.name} would write]")
