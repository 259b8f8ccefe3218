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
import importlib.util
import re
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

try:
    from . import stallproxy
except ImportError:  # loaded by path (bench/p2_history.py): its sibling too
    _spec = importlib.util.spec_from_file_location(
        "stallproxy", Path(__file__).with_name("stallproxy.py")
    )
    assert _spec is not None and _spec.loader is not None
    stallproxy = sys.modules["stallproxy"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(stallproxy)
StallingProxy = stallproxy.StallingProxy

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


class CountingProxy(StallingProxy):
    """Forwards every connection to ``target`` and counts what clients send."""

    def __init__(self, target: tuple[str, int]):
        super().__init__(target)
        self.counts = WireCounts()
        self._lock = threading.Lock()
        self._readers: dict[socket.socket, _Reader] = {}

    def snapshot(self) -> WireCounts:
        with self._lock:
            return self.counts.copy()

    def _opened(self, client: socket.socket) -> None:
        self._readers[client] = _Reader(self.counts, self._lock)
        with self._lock:
            self.counts.connections += 1

    def _sent(self, client: socket.socket, data: bytes) -> None:
        self._readers[client].feed(data)


def counting_proxy(url: str) -> contextlib.AbstractContextManager[CountingProxy]:
    return stallproxy.stalling_proxy(url, CountingProxy)


def through(url: str, proxy: StallingProxy) -> str:
    """``url`` sent through ``proxy``, unencrypted so that it can be read."""
    proxied = stallproxy.through(url, proxy)
    return proxied + ("&" if "?" in proxied else "?") + "sslmode=disable"
