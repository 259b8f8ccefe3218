"""A loopback proxy in front of PostgreSQL that counts what clients send.

It reads the frontend side of the wire protocol (version 3) as it forwards
it: each connection, each round trip (a ``Sync`` or a simple ``Query``: the
client then waits for ``ReadyForQuery``), each statement (an ``Execute`` or
a simple ``Query``) and each transaction (a ``BEGIN`` sent in either form;
a statement outside one is a transaction of its own, counted apart as
``autocommit``). Give the client ``sslmode=disable`` (``through``): an
encrypted stream cannot be read. Used by the tests and by
``bench/p2_history.py`` to show what a turn costs on the wire.
"""

from __future__ import annotations

import contextlib
import re
import selectors
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

_BEGIN = re.compile(rb"^\s*(BEGIN|START\s+TRANSACTION)\b", re.IGNORECASE)
_END = re.compile(rb"^\s*(COMMIT|ROLLBACK|END)\b", re.IGNORECASE)


@dataclass
class WireCounts:
    connections: int = 0
    round_trips: int = 0
    statements: int = 0
    transactions: int = 0
    """Explicit ones (``BEGIN`` … ``COMMIT``) and statements outside one (each its own)."""
    autocommit: int = 0
    """Of those, the statements run outside an explicit transaction."""
    texts: list[str] = field(default_factory=list)
    """Every statement's text, in order (``BEGIN``/``COMMIT`` included)."""

    def copy(self) -> WireCounts:
        return WireCounts(
            self.connections,
            self.round_trips,
            self.statements,
            self.transactions,
            self.autocommit,
            list(self.texts),
        )

    def __sub__(self, before: WireCounts) -> WireCounts:
        return WireCounts(
            self.connections - before.connections,
            self.round_trips - before.round_trips,
            self.statements - before.statements,
            self.transactions - before.transactions,
            self.autocommit - before.autocommit,
            self.texts[len(before.texts) :],
        )


class _Reader:
    """One client connection's frontend messages, as they arrive in pieces."""

    def __init__(self, counts: WireCounts, lock: threading.Lock):
        self.counts, self.lock = counts, lock
        self.buffer = b""
        self.started = False  # past the startup packet (and any SSL/GSS request)
        self.in_transaction = False
        self.prepared: dict[bytes, bytes] = {}
        self.portals: dict[bytes, bytes] = {}

    def feed(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return
                (length,) = struct.unpack("!I", self.buffer[:4])
                if len(self.buffer) < length:
                    return
                (code,) = struct.unpack("!I", self.buffer[4:8])
                self.buffer = self.buffer[length:]
                if code == 196608:  # protocol 3.0: the startup message
                    self.started = True
                continue
            if len(self.buffer) < 5:
                return
            kind = self.buffer[:1]
            (length,) = struct.unpack("!I", self.buffer[1:5])
            if len(self.buffer) < 1 + length:
                return
            body = self.buffer[5 : 1 + length]
            self.buffer = self.buffer[1 + length :]
            with self.lock:
                self._message(kind, body)

    def _message(self, kind: bytes, body: bytes) -> None:
        if kind == b"Q":
            self.counts.round_trips += 1
            self._statement(body.rstrip(b"\0"))
        elif kind == b"P":  # Parse: name, query
            name, _, rest = body.partition(b"\0")
            self.prepared[name] = rest.partition(b"\0")[0]
        elif kind == b"B":  # Bind: portal, statement
            portal, _, rest = body.partition(b"\0")
            self.portals[portal] = self.prepared.get(rest.partition(b"\0")[0], b"")
        elif kind == b"E":
            self._statement(self.portals.get(body.partition(b"\0")[0], b""))
        elif kind == b"S":
            self.counts.round_trips += 1

    def _statement(self, text: bytes) -> None:
        counts = self.counts
        counts.statements += 1
        counts.texts.append(" ".join(text.decode(errors="replace").split()))
        if _BEGIN.match(text):
            counts.transactions += 1
            self.in_transaction = True
        elif _END.match(text):
            self.in_transaction = False
        elif not self.in_transaction:
            counts.transactions += 1
            counts.autocommit += 1


class CountingProxy:
    """Forwards every connection to ``target`` and counts what clients send."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.counts = WireCounts()
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-counting-proxy", daemon=True)

    def snapshot(self) -> WireCounts:
        with self._lock:
            return self.counts.copy()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ)
        peers: dict[socket.socket, socket.socket] = {}
        readers: dict[socket.socket, _Reader] = {}
        try:
            while not self._stop.is_set():
                for key, _ in selector.select(0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self.listener:
                        client, _ = self.listener.accept()
                        upstream = socket.create_connection(self.target, timeout=5)
                        upstream.settimeout(None)
                        peers[client], peers[upstream] = upstream, client
                        readers[client] = _Reader(self.counts, self._lock)
                        with self._lock:
                            self.counts.connections += 1
                        selector.register(client, selectors.EVENT_READ)
                        selector.register(upstream, selectors.EVENT_READ)
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
                    if sock in readers:
                        readers[sock].feed(data)
                    with contextlib.suppress(OSError):
                        peer.sendall(data)
        finally:
            selector.close()
            for sock in [self.listener, *peers]:
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def counting_proxy(url: str) -> Iterator[CountingProxy]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with CountingProxy((parts.hostname or "127.0.0.1", parts.port or 5432)) as proxy:
        yield proxy


def through(url: str, proxy: CountingProxy) -> str:
    """``url`` sent through ``proxy``, unencrypted so that it can be read."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    netloc = (user + "@" if user else "") + f"127.0.0.1:{proxy.port}"
    query = "&".join(filter(None, [parts.query, "sslmode=disable"]))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
