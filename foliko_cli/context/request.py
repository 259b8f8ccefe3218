"""The request layer: one chat turn or one command, traced and time-bounded."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from foliko_cli.common.clock import DEFAULT_TIMEOUT, new_request_id, new_trace_id


class RequestContext:
    """Identifies one request; ``timeout`` and ``elapsed()`` are in seconds.

    The timeout measures foliko and the servers it waits on, not a person:
    time spent ``waiting_on_user`` (a question about a tool call) is not
    counted, and the deadlines that ``follow`` the request move with it.
    """

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
        self._waited = 0.0
        self._waiting_since: float | None = None
        self._deadlines: list[Any] = []

    def __repr__(self) -> str:
        return (
            f"RequestContext(request_id={self.request_id!r}, trace_id={self.trace_id!r}, "
            f"timeout={self.timeout!r}, cancelled={self.cancelled!r})"
        )

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def _counted(self) -> float:
        """The elapsed time less the time spent waiting on the user."""
        now = time.monotonic()
        waiting = now - self._waiting_since if self._waiting_since is not None else 0.0
        return now - self._started - self._waited - waiting

    def remaining(self) -> float:
        return max(0.0, self.timeout - self._counted())

    def is_timeout(self) -> bool:
        return self._counted() > self.timeout

    @contextlib.contextmanager
    def follow(self, deadline: Any) -> Iterator[None]:
        """Keep ``deadline`` (an ``asyncio.Timeout``) at the end of the remaining
        time while the block runs, also across waits on the user."""
        self._deadlines.append(deadline)
        try:
            yield
        finally:
            self._deadlines.remove(deadline)

    @contextlib.contextmanager
    def waiting_on_user(self) -> Iterator[None]:
        """The block's time does not count toward the timeout."""
        if self._waiting_since is not None:
            yield
            return
        self._waiting_since = time.monotonic()
        for deadline in self._deadlines:
            deadline.reschedule(None)
        try:
            yield
        finally:
            self._waited += time.monotonic() - self._waiting_since
            self._waiting_since = None
            if self._deadlines:
                import asyncio

                end = asyncio.get_running_loop().time() + self.remaining()
                for deadline in self._deadlines:
                    deadline.reschedule(end)

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
