"""The per-user services of one worker, in a bounded cache.

With ``--api-keys`` each user gets an ``AsyncFoliko`` of their own (their
storage view, their handlers, their ``per_user`` MCP servers). The cache keeps
at most ``capacity`` of them and drops one left unused for ``idle`` seconds.
A request (or a background response) holds a *lease* on the service it uses:
a service dropped from the cache while leased is closed when its last lease
ends, so no request sees its service closed under it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from foliko_cli.errors import UsageError
from foliko_cli.service import AsyncFoliko

CAPACITY_VARIABLE = "FOLIKO_SERVE_USER_CACHE"
IDLE_VARIABLE = "FOLIKO_SERVE_USER_IDLE"
DEFAULT_CAPACITY = 128
DEFAULT_IDLE_S = 600.0
MAX_SWEEP_INTERVAL_S = 30.0

_log = logging.getLogger("foliko.serve")


def _number(variable: str, default: float, *, whole: bool) -> float:
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = 0
    if value <= 0:
        what = "a whole number" if whole else "a number of seconds"
        raise UsageError(f"{variable}={raw!r}: must be {what} greater than 0; fix or unset it")
    return value


def limits_from_env() -> tuple[int, float]:
    """(capacity, idle seconds) from the environment, or the defaults."""
    capacity = int(_number(CAPACITY_VARIABLE, DEFAULT_CAPACITY, whole=True))
    return capacity, _number(IDLE_VARIABLE, DEFAULT_IDLE_S, whole=False)


@dataclass(eq=False)
class Lease:
    cache: UserServices
    user: Any
    """The user's name (or a user and a scope: serve/state.py's ``Principal``)."""
    service: AsyncFoliko
    uses: int = 0
    last_used: float = field(default_factory=time.monotonic)
    evicted: bool = False

    def release(self) -> None:
        self.cache.release(self)


class UserServices:
    def __init__(self, build: Callable[[Any], AsyncFoliko], capacity: int, idle: float):
        self.build = build
        self.capacity = capacity
        self.idle = idle
        self._cached: OrderedDict[Any, Lease] = OrderedDict()
        self._closing: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.Task[Any] | None = None

    def __len__(self) -> int:
        return len(self._cached)

    def acquire(self, user: Any) -> Lease:
        """The user's service (built on first use), leased until ``release``."""
        lease = self._cached.get(user)
        if lease is None:
            lease = Lease(self, user, self.build(user))
            self._cached[user] = lease
            while len(self._cached) > self.capacity:
                self._evict(next(iter(self._cached.values())))
        else:
            self._cached.move_to_end(user)
        lease.uses += 1
        lease.last_used = time.monotonic()
        self._start_sweeper()
        return lease

    def release(self, lease: Lease) -> None:
        lease.uses -= 1
        lease.last_used = time.monotonic()
        if lease.evicted and lease.uses == 0:
            self._close(lease)

    def sweep(self) -> None:
        """Drop the services unused for ``idle`` seconds."""
        cutoff = time.monotonic() - self.idle
        for lease in [entry for entry in self._cached.values() if entry.last_used <= cutoff]:
            if lease.uses == 0:
                self._evict(lease)

    def _evict(self, lease: Lease) -> None:
        self._cached.pop(lease.user, None)
        lease.evicted = True
        if lease.uses == 0:
            self._close(lease)

    def _close(self, lease: Lease) -> None:
        task = asyncio.get_running_loop().create_task(_closed(lease))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _start_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        interval = min(self.idle / 2, MAX_SWEEP_INTERVAL_S)
        while True:
            await asyncio.sleep(interval)
            self.sweep()

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        leases, self._cached = list(self._cached.values()), OrderedDict()
        await asyncio.gather(*self._closing, return_exceptions=True)
        for lease in leases:
            await lease.service.aclose()


async def _closed(lease: Lease) -> None:
    try:
        await lease.service.aclose()
    except Exception as exc:  # one user's close never stops the worker
        _log.warning("closing the services of user %r failed: %s", lease.user, exc)


SCOPE_KEY = "foliko.leases"


class LeaseMiddleware:
    """Ends the leases a request took (``service(request)``, one per user) once
    its response, streamed or not, is complete."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        leases: dict[Any, Lease] = {}
        scope[SCOPE_KEY] = leases
        try:
            await self.app(scope, receive, send)
        finally:
            for lease in leases.values():
                lease.release()
