"""The request layer: one chat turn or one command, traced and time-bounded."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from foliko_cli.clock import new_request_id, new_trace_id

DEFAULT_TIMEOUT = 120.0


class RequestContext:
    """Identifies one request; ``timeout`` and ``elapsed()`` are in seconds."""

    def __init__(
        self,
        request_id: str | None = None,
        trace_id: str | None = None,
        parent_span_id: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        start_time: float | None = None,
        is_stream: bool = False,
        user_id: str | None = None,
    ):
        self.request_id = request_id or new_request_id()
        self.trace_id = trace_id or new_trace_id()
        self.parent_span_id = parent_span_id
        self.timeout = timeout
        self.start_time = time.time() if start_time is None else start_time
        self.is_stream = is_stream
        self.user_id = user_id
        self.cancelled = False
        self._started = time.monotonic()
        self._on_cancel: list[Callable[[], object]] = []

    def __repr__(self) -> str:
        return (
            f"RequestContext(request_id={self.request_id!r}, trace_id={self.trace_id!r}, "
            f"timeout={self.timeout!r}, cancelled={self.cancelled!r})"
        )

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
