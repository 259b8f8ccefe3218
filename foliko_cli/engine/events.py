"""A minimal synchronous event emitter (on / off / emit)."""

from collections.abc import Callable
from typing import Any

Handler = Callable[..., Any]


class EventEmitter:
    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}

    def on(self, event: str, handler: Handler) -> Handler:
        self._handlers.setdefault(event, []).append(handler)
        return handler

    def off(self, event: str, handler: Handler) -> bool:
        handlers = self._handlers.get(event, [])
        if handler in handlers:
            handlers.remove(handler)
            return True
        return False

    def emit(self, event: str, *args: Any) -> int:
        """Call every handler of ``event`` in registration order; return how many ran."""
        handlers = list(self._handlers.get(event, ()))
        for handler in handlers:
            handler(*args)
        return len(handlers)
