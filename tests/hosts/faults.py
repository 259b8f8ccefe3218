"""The faults, injected one after another while the clients run:

- ``kill``: ``kill -9`` of a host while a stream of its is open, and a
  restart of it a moment later;
- ``cut``: every packet between a host and the database dropped, while a
  turn of the host's is open, for a few seconds (longer than the lock's
  lease sometimes), then healed;
- ``lossy``: a share of those packets dropped (this kernel has no netem:
  nftables drops them at random), then healed;
- ``restart``: the database restarted (PostgreSQL: a crash and a start;
  Redis: ``kill -9`` and a start, with no persistence: everything lost).

The blocking commands run in threads, so the clients never stall on them.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from .net import Network
from .workload import Clients

FAULTS = ("restart", "kill", "cut", "lossy")
"""In this order, so that a run never ends on a restart (which, on Redis, would
leave nothing in the store to check)."""


@dataclass
class Fault:
    kind: str
    host: int | None
    started: float
    ended: float = 0.0
    detail: str = ""
    chains: list[int] = field(default_factory=list)
    """The chains with a turn open on the host when the fault struck."""


class Injector:
    def __init__(
        self,
        network: Network,
        hosts: list[Any],
        database: Any,
        clients: Clients,
        seed: int,
        cut_range: tuple[float, float],
        pause: tuple[float, float],
    ):
        self.network = network
        self.hosts = hosts
        self.database = database
        self.clients = clients
        self.random = random.Random(seed)
        self.cut_range = cut_range
        self.pause = pause
        self.done: list[Fault] = []
        self.running: Fault | None = None

    def count(self, kind: str) -> int:
        return sum(1 for fault in self.done if fault.kind == kind)

    async def run(self, stop: asyncio.Event) -> None:
        kinds = list(FAULTS)
        while not stop.is_set():
            for kind in kinds:
                if await _wait(stop, self.random.uniform(*self.pause)):
                    return
                await getattr(self, f"_{kind}")(stop)

    async def _open_on(self, host: int, streams: bool, stop: asyncio.Event) -> None:
        """Until ``host`` has a stream (or any request) open, for at most 5 s."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not stop.is_set():
            if self.clients.streaming[host] if streams else self.clients.in_flight[host]:
                return
            await asyncio.sleep(0.005)

    def _start(self, kind: str, host: int | None) -> Fault:
        fault = Fault(kind, host, time.time())
        if host is not None:
            fault.chains = sorted({t.chain for t in self.clients.in_flight[host].values()})
        self.running = fault
        return fault

    def _end(self, fault: Fault) -> None:
        fault.ended = time.time()
        self.done.append(fault)
        self.running = None

    async def _kill(self, stop: asyncio.Event) -> None:
        host = self.random.randrange(len(self.hosts))
        await self._open_on(host, True, stop)
        fault = self._start("kill", host)
        fault.detail = f"{self.clients.streaming[host]} streams open"
        await asyncio.to_thread(self.hosts[host].kill)
        await asyncio.sleep(self.random.uniform(0.2, 1.5))
        await asyncio.to_thread(self.hosts[host].start)
        self._end(fault)

    async def _cut(self, stop: asyncio.Event, loss: int = 100) -> None:
        host = self.random.randrange(len(self.hosts))
        await self._open_on(host, False, stop)
        fault = self._start("cut" if loss == 100 else "lossy", host)
        seconds = self.random.uniform(*self.cut_range)
        fault.detail = f"{loss}% of packets to the database dropped for {seconds:.1f}s"
        await asyncio.to_thread(self.network.cut, host, self.database.port, loss)
        try:
            await asyncio.sleep(seconds)
        finally:
            await asyncio.to_thread(self.network.heal, host)
        self._end(fault)

    async def _lossy(self, stop: asyncio.Event) -> None:
        await self._cut(stop, loss=self.random.choice((20, 40, 60)))

    async def _restart(self, stop: asyncio.Event) -> None:
        fault = self._start("restart", None)
        fault.detail = f"{self.database.backend} restarted"
        await asyncio.to_thread(self.database.restart)
        self._end(fault)


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds``; True when ``stop`` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True
