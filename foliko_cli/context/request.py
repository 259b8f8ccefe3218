"""The request layer: one chat turn or one command, traced and time-bounded."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from foliko_cli.clock import new_request_id, new_trace_id

DEFAULT_TIMEOUT = 120.0


@dataclass(eq=False)
class RequestContext:
    """Identifies one request; ``timeout`` and ``elapsed()`` are in seconds."""

    request_id: str = field(default_factory=new_request_id)
    trace_id: str = field(default_factory=new_trace_id)
    parent_span_id: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    start_time: float = field(default_factory=time.time)
    is_stream: bool = False
    user_id: str | None = None
    cancelled: bool = False
    _started: float = field(default_factory=time.monotonic, repr=False)
    _on_cancel: list[Callable[[], object]] = field(default_factory=list, repr=False)

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def remaining(self) -> float:
        return max(0.0, self.timeout - self.elapsed())

    def is_timeout(self) -> bool:
        return self.elapsed() > self.timeout

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` when the request is cancelled (at once if it already is)."""
        if self.cancelled:
            callback()
        else:
            self._on_cancel.append(callback)

    def remove_on_cancel(self, callback: Callable[[], object]) -> None:
        with contextlib.suppress(ValueError):
            self._on_cancel.remove(callback)

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            callback()
