"""A loopback TCP proxy that forwards until told to stall, for the bounded-wait tests.

``stall()`` makes it stop reading from every connection, old and new: the
client's bytes sit in kernel buffers and no reply ever comes, while the TCP
connection stays open and healthy, as behind a middlebox that stops
forwarding. The kernel sees nothing wrong, so only a client-side bound ends
the wait. ``freeze_on(marker)`` does that to one connection only: the first
whose client sends bytes containing ``marker`` (those bytes are held too),
while every other connection, old and new, keeps forwarding; ``frozen`` is
set once it happened. The proxy's thread stops when the context exits, or
by itself after ``lifetime`` seconds.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


class StallingProxy:
    def __init__(self, target: tuple[str, int], lifetime: float = 120.0):
        self.target = target
        self.lifetime = lifetime
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stalled = threading.Event()
        self._marker: bytes | None = None
        self.frozen = threading.Event()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._run, name="stalling-proxy", daemon=True)

    def stall(self) -> None:
        self._stalled.set()

    def freeze_on(self, marker: bytes) -> None:
        self._marker = marker

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ)
        peers: dict[socket.socket, socket.socket] = {}
        clients: set[socket.socket] = set()
        frozen: set[socket.socket] = set()
        deadline = time.monotonic() + self.lifetime
        forwarding = True
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                if forwarding and self._stalled.is_set():
                    forwarding = False
                    for sock in peers:
                        with contextlib.suppress(KeyError):
                            selector.unregister(sock)
                for key, _ in selector.select(0.05):
                    sock = key.fileobj
                    if sock in frozen:
                        continue
                    if sock is self.listener:
                        self._accept(selector, peers, clients, forwarding)
                        continue
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    peer = peers[sock]
                    if not data:
                        for s in (sock, peer):
                            with contextlib.suppress(KeyError, ValueError):
                                selector.unregister(s)
                            s.close()
                        continue
                    if sock in clients:
                        self._sent(sock, data)
                    if self._freezes(sock, clients, data):
                        for s in (sock, peer):
                            selector.unregister(s)  # kept open, never read again
                            frozen.add(s)
                        self.frozen.set()
                        continue
                    with contextlib.suppress(OSError):
                        peer.sendall(data)
        finally:
            selector.close()
            for sock in [self.listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.close()

    def _opened(self, client: socket.socket) -> None:
        """A client connected (a subclass may count it)."""

    def _sent(self, client: socket.socket, data: bytes) -> None:
        """Bytes a client sent, before they are forwarded (a subclass may read them)."""

    def _freezes(self, sock: socket.socket, clients: set, data: bytes) -> bool:
        if self._marker is None or sock not in clients or self._marker not in data:
            return False
        self._marker = None
        return True

    def _accept(self, selector, peers, clients: set, forwarding: bool) -> None:
        client, _ = self.listener.accept()
        self._sockets.append(client)
        clients.add(client)
        self._opened(client)
        if not forwarding:
            return  # accepted, never answered
        upstream = socket.create_connection(self.target, timeout=5)
        upstream.settimeout(None)
        self._sockets.append(upstream)
        peers[client], peers[upstream] = upstream, client
        selector.register(client, selectors.EVENT_READ)
        selector.register(upstream, selectors.EVENT_READ)

    def __enter__(self) -> StallingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def stalling_proxy(url: str, kind: type[StallingProxy] | None = None) -> Iterator[Any]:
    """A proxy (a StallingProxy, or a ``kind`` of one) in front of the server of
    ``url`` (host and port)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with (kind or StallingProxy)((parts.hostname or "127.0.0.1", parts.port or 0)) as proxy:
        yield proxy


def through(url: str, proxy: StallingProxy) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    netloc = (user + "@" if user else "") + f"127.0.0.1:{proxy.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
