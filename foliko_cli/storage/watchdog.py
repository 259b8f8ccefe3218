"""A bound on blocking socket calls that have no timeout of their own.

libpq waits for a reply as long as the kernel keeps the connection open, and
a stall the kernel cannot see (a proxy or a middlebox that stops forwarding)
never closes it. ``Watchdog`` runs one daemon thread per adapter: an
operation registers the sockets it uses with a deadline; when the deadline
passes first, the thread shuts the sockets down (``shutdown(2)``, the
descriptor stays open), so the blocked call fails at once and the adapter
reports a StorageError. Firing and finishing take the same lock, so a socket
is never shut down after its operation has finished.
"""

from __future__ import annotations

import socket
import threading
import time


class Operation:
    __slots__ = ("deadline", "done", "fired", "sockets")

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.sockets: set[int] = set()
        self.fired = False
        self.done = False


class Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running: set[Operation] = set()
        self._thread: threading.Thread | None = None

    def start(self, seconds: float) -> Operation:
        return Operation(time.monotonic() + seconds)

    def watch(self, operation: Operation, fd: int) -> None:
        """Shut ``fd`` down if ``operation`` is still running at its deadline."""
        with self._cond:
            if operation.done or fd in operation.sockets:
                return
            operation.sockets.add(fd)
            self._running.add(operation)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="foliko-storage-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def stop(self, operation: Operation) -> bool:
        """End ``operation``; True if its deadline passed and its sockets were shut down."""
        with self._cond:
            operation.done = True
            self._running.discard(operation)
            return operation.fired

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for operation in [op for op in self._running if op.deadline <= now]:
                    self._running.discard(operation)
                    operation.fired = True
                    for fd in operation.sockets:
                        _shutdown(fd)
                if self._running:
                    wait = min(op.deadline for op in self._running) - now
                    self._cond.wait(max(wait, 0.001))
                else:
                    self._cond.wait()


def _shutdown(fd: int) -> None:
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()


_SHARED: Watchdog | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> Watchdog:
    """The process's one watchdog (one thread, started on first use)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = Watchdog()
        return _SHARED
