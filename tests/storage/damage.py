"""Damage done to a stored session behind foliko's back, as a hand, an eviction or
a bug would do it, on each backend; and a raw snapshot of what is stored of a
session, to show that nothing wrote over it afterwards.

The holes (``KINDS``):

* ``message-lost``: a message taken out of the middle (a row, a list element,
  an entry of the file), its count left as it was;
* ``count-changed``: the count kept beside the messages changed;
* ``metadata-gone``: the session row, meta hash or metadata removed, the
  messages left;
* ``symlink``: the session file replaced by a symbolic link to a copy (JSON);
* ``no-content``: a stored message's ``content`` removed.

Which kinds each backend can hold, and which of the classes below damages
its sessions, is said by its entry in tests/storage/backends.py;
``why_impossible`` says why the other kinds cannot happen there.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from . import services

KINDS = ("message-lost", "count-changed", "metadata-gone", "symlink", "no-content")
IMPOSSIBLE = {
    "metadata-gone": "a foreign key deletes the messages with their session row",
    "symlink": "only a backend of files has paths to link",
    "no-content": "it holds message objects, never text without a content",
}
"""Why a backend cannot hold a hole that is not among its ``holes``."""
IMPOSSIBLE_IN_JSON = "a message without content reads as an empty one (the original foliko's)"


def __getattr__(name: str) -> Any:
    """``HOLES``: each backend's kinds by name, read from the registry."""
    if name == "HOLES":
        from .backends import BACKENDS

        return {backend.name: backend.holes for backend in BACKENDS}
    raise AttributeError(name)


def why_impossible(backend: str, kind: str) -> str:
    if backend == "json" and kind == "no-content":
        return IMPOSSIBLE_IN_JSON
    return IMPOSSIBLE[kind]


def damage(storage: Any, session_id: str, kind: str) -> None:
    """Make the hole ``kind`` in ``session_id``, which holds at least three messages."""
    _backend(storage).damage(session_id, kind)


def snapshot(storage: Any, session_id: str) -> Any:
    """Everything stored of ``session_id``, raw (equal snapshots: nothing changed)."""
    return _backend(storage).snapshot(session_id)


def damage_at(url: str, home: Path, session_id: str, kind: str) -> Any:
    """``damage`` in the store ``url`` names; the snapshot it leaves."""
    return asyncio.run(_at(url, home, lambda storage: _damaged(storage, session_id, kind)))


def snapshot_at(url: str, home: Path, session_id: str) -> Any:
    return asyncio.run(_at(url, home, lambda storage: snapshot(storage, session_id)))


def _damaged(storage: Any, session_id: str, kind: str) -> Any:
    damage(storage, session_id, kind)
    return snapshot(storage, session_id)


async def _at(url: str, home: Path, work: Any) -> Any:
    from foliko_cli.storage import open_storage

    storage = open_storage(url, home)
    try:
        return work(storage)
    finally:
        await storage.close()


def _backend(storage: Any) -> Any:
    from .backends import backend_of

    return backend_of(storage).damager(storage)


class Memory:
    def __init__(self, storage: Any):
        self.records = storage._records

    def damage(self, session_id: str, kind: str) -> None:
        record = self.records[session_id]
        if kind == "message-lost":
            del record.messages[1]
        elif kind == "count-changed":
            record.metadata["message_count"] += 1
        else:
            record.metadata = {}

    def snapshot(self, session_id: str) -> Any:
        return copy.deepcopy(self.records.get(session_id))


class Json:
    def __init__(self, storage: Any):
        from foliko_cli.storage.jsonfile import file_name

        self.directory = storage.directory
        self.file_name = file_name

    def damage(self, session_id: str, kind: str) -> None:
        path = self.directory / self.file_name(session_id)
        if kind == "symlink":
            target = self.directory.parent / f"elsewhere-{path.name}"
            path.rename(target)
            path.symlink_to(target)
            return
        document = orjson.loads(path.read_bytes())
        if kind == "message-lost":
            del document["messages"][1]
        elif kind == "count-changed":
            document["metadata"]["messageCount"] += 1
        else:
            del document["metadata"]
        path.write_bytes(orjson.dumps(document))

    def snapshot(self, session_id: str) -> Any:
        path = self.directory / self.file_name(session_id)
        if path.is_symlink():
            return ("link", os.readlink(path))
        return path.read_bytes() if path.exists() else None


class SQLite:
    def __init__(self, path: str, prefix: str = ""):
        self.path = path
        self.prefix = prefix

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                yield db
        finally:
            db.close()

    def damage(self, session_id: str, kind: str) -> None:
        sid = self.prefix + session_id
        with self._db() as db:
            if kind == "message-lost":
                db.execute("DELETE FROM messages WHERE session_id = ? AND seq = 1", (sid,))
            elif kind == "count-changed":
                db.execute(
                    "UPDATE sessions SET message_count = message_count + 1 WHERE session_id = ?",
                    (sid,),
                )
            elif kind == "metadata-gone":
                db.execute("DELETE FROM sessions WHERE session_id = ?", (sid,))
            else:
                db.execute(
                    "UPDATE messages SET body = json_remove(body, '$.content') "
                    "WHERE session_id = ? AND seq = 0",
                    (sid,),
                )

    def snapshot(self, session_id: str) -> Any:
        sid = self.prefix + session_id
        with self._db() as db:
            row = db.execute("SELECT * FROM sessions WHERE session_id = ?", (sid,)).fetchone()
            rows = db.execute(
                "SELECT * FROM messages WHERE session_id = ? ORDER BY seq", (sid,)
            ).fetchall()
        return row, rows


class Postgres:
    def __init__(self, schema: str):
        self.schema = schema

    @contextlib.contextmanager
    def _db(self) -> Iterator[Any]:
        import psycopg

        with psycopg.connect(services.postgres_url(), autocommit=True) as db:
            db.execute(f'SET search_path TO "{self.schema}"')
            yield db

    def damage(self, session_id: str, kind: str) -> None:
        with self._db() as db:
            if kind == "message-lost":
                db.execute("DELETE FROM messages WHERE session_id = %s AND seq = 1", (session_id,))
            elif kind == "count-changed":
                db.execute(
                    "UPDATE sessions SET message_count = message_count + 1 WHERE session_id = %s",
                    (session_id,),
                )
            else:
                db.execute(
                    "UPDATE messages SET body = (body::jsonb - 'content')::text "
                    "WHERE session_id = %s AND seq = 0",
                    (session_id,),
                )

    def snapshot(self, session_id: str) -> Any:
        with self._db() as db:
            row = db.execute(
                "SELECT row_to_json(s)::text FROM sessions s WHERE session_id = %s", (session_id,)
            ).fetchone()
            rows = db.execute(
                "SELECT seq, role, created_at, body FROM messages WHERE session_id = %s "
                "ORDER BY seq",
                (session_id,),
            ).fetchall()
        return row, rows


class Redis:
    def __init__(self, storage: Any):
        self.storage = storage

    @contextlib.contextmanager
    def _client(self) -> Iterator[Any]:
        import redis

        client = redis.Redis.from_url(services.redis_url())
        try:
            yield client
        finally:
            client.close()

    def damage(self, session_id: str, kind: str) -> None:
        meta, msgs = self.storage.key(session_id, "meta"), self.storage.key(session_id, "msgs")
        with self._client() as client:
            if kind == "message-lost":
                client.lset(msgs, 1, b"\0gone")
                client.lrem(msgs, 1, b"\0gone")
            elif kind == "count-changed":
                client.hincrby(meta, "message_count", 1)
            elif kind == "metadata-gone":
                client.delete(meta)
            else:
                body = orjson.loads(client.lindex(msgs, 0))
                del body["content"]
                client.lset(msgs, 0, orjson.dumps(body))

    def snapshot(self, session_id: str) -> Any:
        meta, msgs = self.storage.key(session_id, "meta"), self.storage.key(session_id, "msgs")
        with self._client() as client:
            return (
                client.hgetall(meta),
                client.lrange(msgs, 0, -1),
                client.zscore(self.storage.index_key, session_id),
            )
