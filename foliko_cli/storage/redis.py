"""Redis: sessions shared by several machines, one Lua script per write (F6, R2).

Key layout, all under a prefix (``foliko`` unless told otherwise)::

    {prefix}:s:{<id>}:meta   hash: created_at, updated_at, message_count, revision,
                             preview, variables, metadata, compression_state
    {prefix}:s:{<id>}:msgs   list: one encoded message per element, in order
    {prefix}:s:{<id>}:lock   string: the turn lease, "<token> pid N on HOST"
    {prefix}:s:{<id>}:interrupt  string: a request that the lease's holder stop,
                             expiring when the request does (base.py rule 10)
    {prefix}:index           sorted set: session id scored by updated_at
    {prefix}:quarantine      hash: where ``storage check --repair`` moved what
    {prefix}:f:<sha256>      string: a fragment's text (storage/base.py, rule 10)

``<id>`` is the session id with ``%``, ``{`` and ``}`` percent-escaped, so the
braces form a hash tag and one session's keys share one cluster slot. Every
write (save, append, delete, rename, quarantine) is one Lua script: atomic,
one round trip, the index updated with the session, and the expected
revision of ``save``/``delete`` compared inside it. A session whose meta
hash is gone while its messages remain, or whose ``message_count`` is not
its list's length, is damaged: every read raises CorruptSessionError and
every write script refuses it (storage/integrity.py). ``save_many`` runs its
scripts in one MULTI. Every read of a session is one script too, from any
start (a turn reads only the messages after the compression summary, and a
state update none). Listing reads the index, never ``SCAN`` (``check`` scans
for message lists whose meta hash is gone).

Every call is bounded by ``socket_timeout`` (30 s) and every connection by
``socket_connect_timeout`` (5 s), unless the URL sets them; the driver never
repeats a call, and the turn's deadline or SIGTERM cancels any of a turn's
calls (one the driver swallowed is raised again: ``_guard``).

The per-turn lock is a lease (``SET NX PX``) with a random token, renewed by a
background task while the turn runs and deleted only by its owner; when the
holder dies the lease runs out by itself.

redis-py's asyncio client (``redis.asyncio``) is imported when a storage is
created, never at module import. Each event loop gets a client of its own
with its own connection pool (asyncio connections belong to the loop that
opened them): a call takes a connection from the pool for its duration, so
a stalled connection holds only the call waiting on it, while the others
run over the pool's other connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Collection, Iterator, Mapping
from typing import Any, TypeVar

import orjson

from foliko_cli.common.clock import now_ms
from foliko_cli.common.poll import poll
from foliko_cli.errors import (
    ConflictError,
    CorruptSessionError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
    StorageConfigError,
    StorageError,
)
from foliko_cli.messages.record import (
    Messages,
    SessionRecord,
    SessionState,
    SessionSummary,
    checked_append,
    checked_for_write,
    covered_by,
    new_metadata,
    next_revision,
    preview_of,
    title_in,
)
from foliko_cli.messages.stored import encode_message, record_from_parts
from foliko_cli.storage.base import (
    AuditEntry,
    SessionStorageAdapter,
    StoredProblem,
    check_expected,
    expected_list,
    kept_entries,
)
from foliko_cli.storage.integrity import damaged_summary, orphaned
from foliko_cli.storage.urls import hide, parse_server_url

DEFAULT_PREFIX = "foliko"
DEFAULT_LEASE_MS = 15_000
CONNECT_TIMEOUT_S = 5
SOCKET_TIMEOUT_S = 30
PAGE = 1000
ATTEMPT_S = 5.0
"""The least time one attempt to take a session's lease is given to answer."""
RELEASE_S = 5.0
"""How long the release of a lease may take; past it the lease runs out by itself."""
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
T = TypeVar("T")

# Pushes ARGV[first..] onto a list, 1000 at a time (Lua's unpack has a stack limit).
# Revisions are microsecond clocks: Lua numbers hold them exactly, but tostring()
# would round them (%.14g), so they are formatted with %d.
_PUSH = """
local function push(key, first)
  for i = first, #ARGV, 1000 do
    redis.call('RPUSH', key, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
local function next_revision(current, fresh)
  if current and current ~= 0 then return string.format('%d', current + 1) end
  return fresh
end
"""

# A session whose meta hash is gone while its messages remain, or whose count is
# not its list's length, is damaged: {-2, count (-1: no meta), length}, never written.
_DAMAGE = """
local function damage(meta, msgs)
  local length = redis.call('LLEN', msgs)
  if redis.call('EXISTS', meta) == 0 then
    if length > 0 then return {-2, -1, length} end
    return nil
  end
  if redis.call('TYPE', meta).ok ~= 'hash' then return nil end
  local count = tonumber(redis.call('HGET', meta, 'message_count'))
  if count ~= length then return {-2, count or -1, length} end
  return nil
end
"""

# KEYS: meta, msgs. ARGV[1]: where the messages read start: 'recent' (after the
# compression summary: compression_state.covered when it is a whole number within the
# list), 'state' (none: the list's end), 'window' (ARGV[2] and ARGV[3] its start and
# stop as a slice has them, '' for the end) or a position. Returns {0, length} (no
# meta hash), {-1, key} (a key holds the wrong kind of value) or {1, start, length,
# HGETALL meta, the messages from start}: one atomic read, whatever the start.
_READ = """
local meta, msgs = KEYS[1], KEYS[2]
local kind = redis.call('TYPE', meta).ok
if kind ~= 'hash' and kind ~= 'none' then return {-1, meta} end
local listed = redis.call('TYPE', msgs).ok
if listed ~= 'list' and listed ~= 'none' then return {-1, msgs} end
local length = redis.call('LLEN', msgs)
if kind == 'none' then return {0, length} end
local start = 0
if ARGV[1] == 'state' then
  start = length
elseif ARGV[1] == 'recent' then
  local ok, state = pcall(cjson.decode, redis.call('HGET', meta, 'compression_state') or '')
  local covered = ok and type(state) == 'table' and state['covered']
  if type(covered) == 'number' and covered % 1 == 0 and covered >= 0 and covered <= length then
    start = covered
  end
elseif ARGV[1] == 'window' then
  local function within(at)
    if at < 0 then return math.max(length + at, 0) end
    return math.min(at, length)
  end
  start = within(tonumber(ARGV[2]))
  local stop = ARGV[3] == '' and length or math.max(start, within(tonumber(ARGV[3])))
  local window = {}
  if stop > start then window = redis.call('LRANGE', msgs, start, stop - 1) end
  return {1, start, length, redis.call('HGETALL', meta), window}
else
  start = tonumber(ARGV[1])
end
return {1, start, length, redis.call('HGETALL', meta), redis.call('LRANGE', msgs, start, -1)}
"""

# KEYS: meta, msgs, index. ARGV: id, expected revision ('' for none, 0 for create),
# updated_at, created_at, message_count, preview, variables, metadata,
# compression_state, first revision, messages...
# Returns {1, revision}, {0, found} (a stale revision), {-1, found} (it exists) or
# the damage.
_SAVE = (
    _PUSH
    + _DAMAGE
    + """
local meta, msgs, index = KEYS[1], KEYS[2], KEYS[3]
local damaged = damage(meta, msgs)
if damaged then return damaged end
local exists = redis.call('EXISTS', meta) == 1
local current = nil
if redis.call('TYPE', meta).ok == 'hash' then
  current = tonumber(redis.call('HGET', meta, 'revision'))
end
local found = string.format('%d', current or 0)
if ARGV[2] == '0' and exists then return {-1, found} end
if ARGV[2] ~= '' and ARGV[2] ~= '0' and (current or 0) ~= tonumber(ARGV[2]) then
  return {0, found}
end
local revision = next_revision(current, ARGV[10])
redis.call('DEL', meta, msgs)
push(msgs, 11)
redis.call('HSET', meta, 'created_at', ARGV[4], 'updated_at', ARGV[3],
  'message_count', ARGV[5], 'revision', revision, 'preview', ARGV[6],
  'variables', ARGV[7], 'metadata', ARGV[8], 'compression_state', ARGV[9])
redis.call('ZADD', index, ARGV[3], ARGV[1])
return {1, revision}
"""
)

# KEYS: meta, msgs, index. ARGV: id, expected revision, now, created_at, preview,
# variables, metadata, compression_state, first revision, messages...
# Returns {1, revision}, {0, found} (a stale revision) or the damage.
_APPEND = (
    _PUSH
    + _DAMAGE
    + """
local meta, msgs, index = KEYS[1], KEYS[2], KEYS[3]
local damaged = damage(meta, msgs)
if damaged then return damaged end
local found = 0
if redis.call('EXISTS', meta) == 1 then
  found = tonumber(redis.call('HGET', meta, 'revision')) or -1
end
if found ~= tonumber(ARGV[2]) then return {0, string.format('%d', found)} end
if found == 0 then
  redis.call('DEL', msgs)
  redis.call('HSET', meta, 'created_at', ARGV[4], 'preview', '')
end
local revision = next_revision(found, ARGV[9])
push(msgs, 10)
redis.call('HSET', meta, 'updated_at', ARGV[3], 'message_count', redis.call('LLEN', msgs),
  'revision', revision, 'variables', ARGV[6], 'metadata', ARGV[7],
  'compression_state', ARGV[8])
if ARGV[5] ~= '' then redis.call('HSET', meta, 'preview', ARGV[5]) end
redis.call('ZADD', index, ARGV[3], ARGV[1])
return {1, revision}
"""
)

# KEYS: meta, msgs, index. ARGV: id, expected revision ('' for none).
# Returns {1|0, found}: deleted or not, and the revision that was stored.
_DELETE = """
local found = 0
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
  found = tonumber(redis.call('HGET', KEYS[1], 'revision')) or 0
end
local shown = string.format('%d', found)
if ARGV[2] ~= '' then
  if ARGV[2] == '0' then return {0, shown} end
  if found ~= tonumber(ARGV[2]) then return {0, shown} end
end
local existed = math.min(redis.call('DEL', KEYS[1], KEYS[2]), 1)
redis.call('ZREM', KEYS[3], ARGV[1])
return {existed, shown}
"""

# KEYS: old meta, old msgs, new meta, new msgs, index. ARGV: old id, new id, a fresh
# clock-based revision (the renamed session gets a revision no cache can hold).
# Returns 1, -1 (the new id exists), -2 (the old one does not), -3 (the new id's
# messages remain without their meta hash) or -4 (the old one is damaged).
_RENAME = (
    _DAMAGE
    + """
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
if damage(KEYS[3], KEYS[4]) then return -3 end
if damage(KEYS[1], KEYS[2]) then return -4 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
local score = redis.call('ZSCORE', KEYS[5], ARGV[1]) or redis.call('HGET', KEYS[1], 'updated_at')
local current = tonumber(redis.call('HGET', KEYS[1], 'revision')) or 0
local revision = math.max(current + 1, tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'revision', string.format('%d', revision))
redis.call('RENAME', KEYS[1], KEYS[3])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('RENAME', KEYS[2], KEYS[4]) end
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZADD', KEYS[5], score, ARGV[2])
return 1
"""
)

# KEYS: meta, msgs, index, quarantined meta, quarantined msgs, quarantine hash.
# ARGV: id, quarantine entry name, entry (JSON).
_QUARANTINE = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('RENAME', KEYS[1], KEYS[4]) end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('RENAME', KEYS[2], KEYS[5]) end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[6], ARGV[2], ARGV[3])
return 1
"""

# KEYS: lease. ARGV: owner value, lease ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease. ARGV: owner value.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def hash_tag(session_id: str) -> str:
    """The session id as a cluster hash tag: braces and ``%`` percent-escaped."""
    escaped = session_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return "{" + escaped + "}"


def unhash_tag(tag: str) -> str | None:
    """The session id of a hash tag, or None when ``tag`` is not one."""
    if len(tag) < 3 or tag[0] != "{" or tag[-1] != "}" or "{" in tag[1:-1] or "}" in tag[1:-1]:
        return None
    return re.sub("%(25|7B|7D)", lambda m: chr(int(m[1], 16)), tag[1:-1])


def _import_redis() -> Any:
    try:
        import redis
        import redis.asyncio
    except ImportError:
        from foliko_cli.common.extras import extra_hint

        raise StorageConfigError(extra_hint("Redis storage", "redis")) from None
    return redis


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


def persistence(config: dict[str, str], where: str) -> tuple[str, str | None]:
    """The persistence ``CONFIG GET appendonly`` and ``save`` describe (aof, rdb,
    both or none), and a warning when it is none (docs/durability.md)."""
    kept = ["aof"] if config.get("appendonly") == "yes" else []
    if config.get("save", "").strip():
        kept.append(f"rdb (save {config['save'].strip()})")
    if kept:
        return " + ".join(kept), None
    return "none", (
        f'Redis at {where} keeps nothing on disk (appendonly no, save ""): a restart of '
        "the server loses every session; turn on AOF or RDB snapshots, or keep sessions in "
        "PostgreSQL"
    )


class RedisStorage(SessionStorageAdapter):
    name = "redis"

    def __init__(self, url: str, *, prefix: str | None = None, lease_ms: int | None = None):
        self._redis = _import_redis()
        parsed = parse_server_url(
            url,
            schemes=("redis", "rediss"),
            default_port=6379,
            own_options=("prefix", "lease_ms"),
            example="redis://host:6379/0",
        )
        if prefix is not None and not prefix.strip():
            raise StorageConfigError("the Redis key prefix is empty; give one or leave it out")
        self.prefix = prefix or parsed.options.get("prefix") or DEFAULT_PREFIX
        if not _PREFIX.fullmatch(self.prefix):
            raise StorageConfigError(
                f"invalid Redis key prefix {self.prefix!r}; use letters, digits and _ . : -"
            )
        try:
            self.lease_ms = int(lease_ms or parsed.options.get("lease_ms") or DEFAULT_LEASE_MS)
            self.db_number = int(parsed.path.strip("/") or 0)
        except ValueError:
            raise StorageConfigError(
                "malformed Redis URL: the database number and lease_ms must be numbers; "
                "write redis://host:6379/0"
            ) from None
        if self.lease_ms < 100:
            raise StorageConfigError("the Redis lock lease must be at least 100 ms")
        self.host = parsed.host
        self.port = parsed.port
        self._password = parsed.password
        self._where = parsed.where
        user = f"{parsed.user}@" if parsed.user else ""
        self._url = f"{parsed.scheme}://{user}{parsed.where}/{self.db_number}"
        given = {key for key, _ in parsed.query}
        keywords: dict[str, Any] = {}
        if "socket_connect_timeout" not in given:
            keywords["socket_connect_timeout"] = CONNECT_TIMEOUT_S
        if "socket_timeout" not in given:
            keywords["socket_timeout"] = SOCKET_TIMEOUT_S
        self._driver_url, self._keywords = parsed.driver_url(), keywords
        try:
            # Never connected: it checks the URL now and holds the scripts, which
            # are called with the running loop's client. A connection object is
            # built (not connected) so that an option redis-py refuses fails here.
            template = self._new_client()
            pool = template.connection_pool
            pool.connection_class(**pool.connection_kwargs)
        except TypeError as exc:
            unknown = re.search(r"keyword argument '(\w+)'", str(exc))
            raise StorageConfigError(
                f"unknown option {unknown[1] if unknown else str(exc)!r} in the Redis URL for "
                f"{self._where}; remove it (redis-py does not take it for this URL)"
            ) from None
        except (ValueError, self._redis.RedisError) as exc:
            raise StorageConfigError(
                f"malformed Redis URL for {self._where}: {self._reason(exc)}; "
                "fix the option or leave it out: redis://host:6379/0"
            ) from None
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}
        register = template.register_script
        self._read_script = register(_READ)
        self._save_script = register(_SAVE)
        self._append_script = register(_APPEND)
        self._delete_script = register(_DELETE)
        self._rename_script = register(_RENAME)
        self._damage_script = register(_DAMAGE + "return damage(KEYS[1], KEYS[2]) or {0}")
        self._quarantine_script = register(_QUARANTINE)
        self._renew_script = register(_RENEW)
        self._release_script = register(_RELEASE)
        self.index_key = f"{self.prefix}:index"
        self.quarantine_key = f"{self.prefix}:quarantine"
        self.audit_key = f"{self.prefix}:audit"
        """The audit log (base.py, rule 13): a list of JSON entries, oldest first."""

    def __repr__(self) -> str:
        return f"RedisStorage({self._url!r}, prefix={self.prefix!r})"

    @property
    def location(self) -> str:
        return f"{self._url} (prefix {self.prefix})"

    def _new_client(self) -> Any:
        """A client whose calls the driver never repeats by itself: a write repeated
        after its answer was lost would conflict with itself, and a repeated read
        would wait ``socket_timeout`` again (the turn's deadline bounds the whole)."""
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        return self._redis.asyncio.Redis.from_url(
            self._driver_url, retry=Retry(NoBackoff(), 0), **self._keywords
        )

    def _client(self) -> Any:
        """The running event loop's client (and connection pool), made on first use."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for closed in [other for other in self._clients if other.is_closed()]:
                del self._clients[closed]  # its connections died with their loop
            client = self._clients[loop] = self._new_client()
        return client

    def key(self, session_id: str, kind: str) -> str:
        """``kind`` is meta, msgs, lock or interrupt."""
        return f"{self.prefix}:s:{hash_tag(session_id)}:{kind}"

    def _session_keys(self, session_id: str) -> list[str]:
        return [self.key(session_id, "meta"), self.key(session_id, "msgs"), self.index_key]

    # errors

    def _reason(self, exc: BaseException) -> str:
        reason = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
        return hide(reason, self._password)

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Driver errors as StorageError; and a cancellation the driver swallowed
        (Python 3.11's ``asyncio.wait_for`` returns a result that arrived with
        it) raised after all, so the turn's deadline and SIGTERM still end it."""
        errors = self._redis.exceptions
        try:
            yield
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
        except errors.AuthenticationError as exc:
            raise StorageError(
                f"Redis at {self._where} refused the login: {self._reason(exc)}; "
                "check the user and password in the URL"
            ) from None
        except (errors.ConnectionError, errors.TimeoutError) as exc:
            raise StorageError(
                f"cannot reach Redis at {self._where}: {self._reason(exc)}; "
                "is the server running? check the URL"
            ) from None
        except errors.RedisError as exc:
            raise StorageError(
                f"Redis at {self._where} (prefix {self.prefix}) failed: {self._reason(exc)}; "
                "check the server and the prefix"
            ) from None

    def _wrong_type(self, result: Any) -> bool:
        return isinstance(result, self._redis.exceptions.ResponseError) and "WRONGTYPE" in str(
            result
        )

    # contract

    async def load(self, session_id: str) -> SessionRecord | None:
        return await self._read(session_id, 0)

    async def load_recent(self, session_id: str) -> SessionRecord | None:
        """Only the messages after the compression summary, in one script call: a
        turn on a long compressed session reads what it sends, not the history."""
        record = await self._read(session_id, "recent")
        if record is not None:
            # The script reads ``covered`` with Lua's JSON; where that differs from
            # Python's reading (a number written as 3.0), Python's wins.
            start = covered_by(record.compression_state, record.metadata["message_count"])
            if start != record.first_seq:
                record = await self._read(session_id, int(start))
        return record

    async def load_state(self, session_id: str) -> SessionRecord | None:
        """The meta hash alone, its count checked against the list's length."""
        return await self._read(session_id, "state")

    async def load_window(
        self, session_id: str, start: int, stop: int | None
    ) -> SessionRecord | None:
        """Only ``messages[start:stop]``, in one script call."""
        return await self._read(session_id, "window", start, "" if stop is None else stop)

    async def _read(self, session_id: str, *where: int | str) -> SessionRecord | None:
        """The session with the messages ``where`` says (from a position, ``recent``,
        ``state``, or ``window`` and its start and stop: see ``_READ``); its count
        checked against the list's length."""
        meta_key, msgs_key, _ = self._session_keys(session_id)
        with self._guard():
            reply = await self._read_script(
                [meta_key, msgs_key], list(where), client=self._client()
            )
        status = int(reply[0])
        if status == -1:
            raise CorruptSessionError(
                session_id, self.location, f"key {_text(reply[1])} holds the wrong kind of value"
            )
        if status == 0:
            if int(reply[1]):
                raise self._damaged(session_id, -1, int(reply[1]))
            return None
        first, length, flat, bodies = int(reply[1]), int(reply[2]), reply[3], reply[4]
        fields = {_text(key): value for key, value in zip(flat[0::2], flat[1::2], strict=True)}
        try:
            if int(fields["message_count"]) != length:
                raise self._damaged(session_id, int(fields["message_count"]), length)
            columns = (
                fields["variables"],
                fields["metadata"],
                fields["compression_state"],
                int(fields["updated_at"]),
                int(fields["revision"]),
            )
        except KeyError as exc:
            reason = f"field {exc.args[0]} missing from {meta_key}"
        except (ValueError, TypeError) as exc:
            reason = str(exc)
        else:
            return record_from_parts(
                session_id, columns, bodies, self.location, first_seq=first, count=length
            )
        raise CorruptSessionError(session_id, self.location, reason)

    def _save_args(self, record: SessionRecord, expected: int | None) -> list[Any]:
        checked_for_write(record)
        return self._script_args(record, "" if expected is None else str(expected))

    def _script_args(self, record: SessionRecord, mode: str) -> list[Any]:
        metadata = {**new_metadata(), **record.metadata, "message_count": len(record.messages)}
        return [
            record.session_id,
            mode,
            record.saved_at or now_ms(),
            metadata["created_at"] if isinstance(metadata["created_at"], int) else 0,
            len(record.messages),
            preview_of(record.messages),
            orjson.dumps(record.variables),
            orjson.dumps(metadata),
            orjson.dumps(record.compression_state),
            next_revision(None),
            *(encode_message(m) for m in record.messages),
        ]

    async def save(self, record: SessionRecord, *, expected_revision: int | None = None) -> int:
        args = self._save_args(record, expected_revision)
        with self._guard():
            result = await self._save_script(
                self._session_keys(record.session_id), args, client=self._client()
            )
        return self._saved(record.session_id, expected_revision, result)

    def _saved(self, session_id: str, expected: int | None, result: list[Any]) -> int:
        status, value = int(result[0]), int(result[1])
        if status == -2:
            raise self._damaged(session_id, value, int(result[2]))
        if status == -1:
            raise SessionExistsError(session_id)
        if status == 0:
            raise ConflictError(session_id, expected or 0, value)
        return value

    def _damaged(self, session_id: str, count: int, length: int) -> CorruptSessionError:
        """What a script found wrong: no meta hash (``count`` -1), or a count that
        is not the message list's ``length``."""
        meta_key, msgs_key, _ = self._session_keys(session_id)
        if count < 0:
            return orphaned(session_id, self.location, length, f"meta hash {meta_key}")
        return CorruptSessionError(
            session_id,
            self.location,
            f"{meta_key} counts {count} messages but {msgs_key} holds {length} "
            "(evicted or edited by hand?)",
        )

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        """One MULTI of save scripts: applied together, no reader sees half a batch.

        Each script checks its own expected revision and damage; first the
        whole batch is checked for damage (one round trip), so a damaged
        session writes none of them. Without expected revisions (migration) the
        batch is then written; with some, it is first checked under WATCH, so
        one stale revision writes none of them."""
        if not records:
            return []
        expected = expected_list(records, expected_revisions)
        batches = [
            (r.session_id, self._session_keys(r.session_id), self._save_args(r, e))
            for r, e in zip(records, expected, strict=True)
        ]
        with self._guard():
            async with self._client().pipeline(transaction=False) as pipe:
                for _, keys, _ in batches:
                    await self._damage_script(keys[:2], [], client=pipe)
                found = await pipe.execute()
        for (session_id, _, _), result in zip(batches, found, strict=True):
            if int(result[0]) == -2:
                raise self._damaged(session_id, int(result[1]), int(result[2]))
        if all(e is None for e in expected):
            with self._guard():
                async with self._client().pipeline(transaction=True) as pipe:
                    for _, keys, args in batches:
                        await self._save_script(keys, args, client=pipe)
                    results = await pipe.execute()
            pairs = zip(batches, results, strict=True)
            return [self._saved(sid, None, result) for (sid, _, _), result in pairs]
        return await self._save_watched(batches, expected)

    async def _save_watched(
        self, batches: list[tuple[str, list[str], list[Any]]], expected: list[int | None]
    ) -> list[int]:
        errors = self._redis.exceptions
        metas = sorted({keys[0] for _, keys, _ in batches})
        while True:
            with self._guard():
                async with self._client().pipeline(transaction=True) as pipe:
                    try:
                        await pipe.watch(*metas)
                        for (sid, keys, _), want in zip(batches, expected, strict=True):
                            if want is not None:
                                found = int(await pipe.hget(keys[0], "revision") or 0)
                                check_expected(sid, want, found)
                        pipe.multi()
                        for _, keys, args in batches:
                            await self._save_script(keys, args, client=pipe)
                        results = await pipe.execute()
                    except errors.WatchError:
                        continue
            return [
                self._saved(sid, want, r)
                for (sid, _, _), want, r in zip(batches, expected, results, strict=True)
            ]

    async def append(
        self, session_id: str, messages: Messages, state: SessionState, *, expected_revision: int
    ) -> int:
        now = now_ms()
        created_at = state.metadata.get("created_at", now)
        checked_append(session_id, messages, state)
        args = [
            session_id,
            expected_revision,
            now,
            created_at if isinstance(created_at, int) else 0,
            preview_of(messages),
            orjson.dumps(state.variables),
            orjson.dumps({**state.metadata}),
            orjson.dumps(state.compression_state),
            next_revision(None),
            *(encode_message(m) for m in messages),
        ]
        with self._guard():
            result = await self._append_script(
                self._session_keys(session_id), args, client=self._client()
            )
        return self._saved(session_id, expected_revision, result)

    async def forget(
        self,
        records: list[SessionRecord],
        deletions: dict[str, int | None],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> None:
        """One MULTI of save and delete scripts: the records checked for damage
        first, then every expected revision read under WATCH, so one stale
        revision (or a write meanwhile, again) writes none of them."""
        expected = expected_list(records, expected_revisions)
        saves = [
            (r.session_id, self._session_keys(r.session_id), self._save_args(r, None))
            for r in records
        ]
        with self._guard():
            async with self._client().pipeline(transaction=False) as pipe:
                for _, keys, _ in saves:
                    await self._damage_script(keys[:2], [], client=pipe)
                found = await pipe.execute()
        for (session_id, _, _), result in zip(saves, found, strict=True):
            if int(result[0]) == -2:
                raise self._damaged(session_id, int(result[1]), int(result[2]))
        wanted = [*zip((s for s, _, _ in saves), expected, strict=True), *deletions.items()]
        metas = sorted({self.key(session_id, "meta") for session_id, _ in wanted})
        errors = self._redis.exceptions
        while True:
            with self._guard():
                async with self._client().pipeline(transaction=True) as pipe:
                    try:
                        if metas:
                            await pipe.watch(*metas)
                        for session_id, want in wanted:
                            if want is not None:
                                meta = self.key(session_id, "meta")
                                check_expected(
                                    session_id, want, int(await pipe.hget(meta, "revision") or 0)
                                )
                        pipe.multi()
                        for session_id in deletions:
                            await self._delete_script(
                                self._session_keys(session_id), [session_id, ""], client=pipe
                            )
                        for _, keys, args in saves:
                            await self._save_script(keys, args, client=pipe)
                        results = await pipe.execute()
                    except errors.WatchError:
                        continue
            for (session_id, _, _), result in zip(saves, results[len(deletions) :], strict=True):
                self._saved(session_id, None, result)
            return

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        mode = "" if expected_revision is None else str(expected_revision)
        with self._guard():
            existed, found = await self._delete_script(
                self._session_keys(session_id), [session_id, mode], client=self._client()
            )
        if not existed:
            check_expected(session_id, expected_revision, int(found))
        return bool(existed)

    async def audit_append(self, entries: list[AuditEntry]) -> None:
        lines = [orjson.dumps(entry.to_json()) for entry in entries]
        with self._guard():
            await self._client().rpush(self.audit_key, *lines)

    async def audit_read(self, since: int | None = None) -> list[AuditEntry]:
        with self._guard():
            lines = await self._client().lrange(self.audit_key, 0, -1)
        entries = [AuditEntry.from_json(orjson.loads(line)) for line in lines]
        return [entry for entry in entries if since is None or entry.at >= since]

    async def audit_prune(self, *, before: int | None = None, keep: int | None = None) -> int:
        """The oldest entries trimmed off the head of the list in one LTRIM, so an
        entry appended meanwhile (at the tail) is kept."""
        entries = await self.audit_read()
        drop = len(entries) - len(kept_entries(entries, before, keep))
        if drop:
            with self._guard():
                await self._client().ltrim(self.audit_key, drop, -1)
        return drop

    async def session_ids(self) -> list[str]:
        with self._guard():
            members = await self._client().zrange(self.index_key, 0, -1)
        return [member.decode() for member in members]

    async def list_summaries(self) -> list[SessionSummary]:
        """From the index and each session's meta hash; messages are never read."""
        with self._guard():
            ids = [m.decode() for m in await self._client().zrevrange(self.index_key, 0, -1)]
        fields = ("created_at", "updated_at", "message_count", "preview", "metadata")
        summaries = []
        for start in range(0, len(ids), PAGE):
            page = ids[start : start + PAGE]
            with self._guard():
                async with self._client().pipeline(transaction=True) as pipe:
                    for session_id in page:
                        pipe.hmget(self.key(session_id, "meta"), fields)
                        pipe.llen(self.key(session_id, "msgs"))
                    results = await pipe.execute(raise_on_error=False)
            for session_id, values, length in zip(page, results[0::2], results[1::2], strict=True):
                summaries.extend(self._summary(session_id, values, length))
        summaries.sort(key=lambda s: (-s.updated_at, s.session_id))
        return summaries

    def _summary(self, session_id: str, values: Any, length: Any) -> list[SessionSummary]:
        """The session's row of ``list_summaries``, marked when damaged; none when it
        was deleted since the index was read."""
        for result in (values, length):
            if isinstance(result, Exception):
                return [damaged_summary(session_id, self._reason(result))]
        if all(value is None for value in values):
            if not length:
                return []
            return [damaged_summary(session_id, self._damaged(session_id, -1, length).reason)]
        created, updated, count, preview, metadata = values
        try:
            summary = SessionSummary(
                session_id,
                int(created),
                int(updated),
                int(count),
                _text(preview),
                title=title_in(metadata),
            )
        except (TypeError, ValueError) as exc:
            return [damaged_summary(session_id, f"unreadable summary: {exc}")]
        if summary.message_count != length:
            reason = self._damaged(session_id, summary.message_count, length).reason
            return [summary._replace(preview="", error=reason)]
        return [summary]

    async def put_fragments(self, texts: Mapping[str, str]) -> bool:
        """Each text by ``SET NX``: written whole, once."""
        if texts:
            with self._guard():
                async with self._client().pipeline(transaction=False) as pipe:
                    for key, text in texts.items():
                        pipe.set(f"{self.prefix}:f:{key}", text.encode("utf-8"), nx=True)
                    await pipe.execute()
        return True

    async def get_fragments(self, hashes: Collection[str]) -> dict[str, str]:
        keys = sorted(set(hashes))
        if not keys:
            return {}
        with self._guard():
            async with self._client().pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.get(f"{self.prefix}:f:{key}")
                values = await pipe.execute()
        return {
            key: value.decode("utf-8", errors="replace")
            for key, value in zip(keys, values, strict=True)
            if isinstance(value, bytes)
        }

    async def revision(self, session_id: str) -> int | None:
        meta_key, msgs_key, _ = self._session_keys(session_id)
        with self._guard():
            async with self._client().pipeline(transaction=True) as pipe:
                pipe.exists(meta_key)
                pipe.hget(meta_key, "revision")
                pipe.llen(msgs_key)
                exists, revision, length = await pipe.execute(raise_on_error=False)
        if self._wrong_type(revision):
            raise CorruptSessionError(
                session_id, self.location, f"key {meta_key} holds the wrong kind of value"
            )
        if isinstance(exists, Exception) or isinstance(revision, Exception):
            with self._guard():
                raise exists if isinstance(exists, Exception) else revision
        if not exists:
            if isinstance(length, int) and length:
                raise self._damaged(session_id, -1, length)
            return None
        try:
            return int(revision)
        except (TypeError, ValueError):
            raise CorruptSessionError(
                session_id, self.location, f"revision {revision!r} is not a number"
            ) from None

    async def health_check(self) -> bool:
        try:
            with self._guard():
                await self._client().ping()
        except StorageError:
            return False
        return True

    async def copy(self, source_id: str, target_id: str) -> SessionRecord:
        """The target is written only if absent, checked in the same script that writes it."""
        record = await self.load(source_id)
        if record is None:
            raise SessionNotFoundError(source_id)
        now = now_ms()
        copied = SessionRecord(
            session_id=target_id,
            messages=record.messages,
            variables=record.variables,
            metadata={**record.metadata, "created_at": now, "last_active": now},
            compression_state=record.compression_state,
            saved_at=now,
        )
        with self._guard():
            result = await self._save_script(
                self._session_keys(target_id), self._save_args(copied, 0), client=self._client()
            )
        copied.revision = self._saved(target_id, 0, result)
        return copied

    async def rename(self, old_id: str, new_id: str) -> None:
        keys = [*self._session_keys(old_id)[:2], *self._session_keys(new_id)]
        with self._guard():
            args = [old_id, new_id, next_revision(None)]
            result = int(await self._rename_script(keys, args, client=self._client()))
        if result == -1:
            raise SessionExistsError(new_id)
        if result in (-3, -4):
            damaged = new_id if result == -3 else old_id
            with self._guard():
                found = await self._damage_script(
                    self._session_keys(damaged)[:2], [], client=self._client()
                )
            raise self._damaged(damaged, int(found[1]), int(found[2]))
        if result == -2:
            raise SessionNotFoundError(old_id)

    async def check(self) -> list[StoredProblem]:
        """Unreadable sessions, index entries whose meta hash is gone, and message
        lists whose meta hash is gone (found by SCAN: ``check`` only)."""
        ids = await self.session_ids()
        problems = []
        for session_id in ids:
            try:
                if await self.load(session_id) is None:
                    problems.append(
                        StoredProblem(
                            session_id,
                            self.location,
                            f"{self.index_key} names it but {self.key(session_id, 'meta')} "
                            "is gone (evicted or deleted by hand?)",
                        )
                    )
            except CorruptSessionError as exc:
                problems.append(StoredProblem(session_id, exc.where, exc.reason))
        indexed = set(ids)
        head, tail = f"{self.prefix}:s:", ":msgs"
        client = self._client()
        with self._guard():
            async for raw in client.scan_iter(match=f"{head}*{tail}", count=1000):
                key = _text(raw)
                found = unhash_tag(key[len(head) : -len(tail)])
                if found is None or found in indexed:
                    continue
                session_id = found
                if not await client.exists(self.key(session_id, "meta")):
                    problems.append(
                        StoredProblem(
                            session_id,
                            self.location,
                            f"{key} holds messages but {self.key(session_id, 'meta')} is gone "
                            "(evicted or deleted by hand?)",
                        )
                    )
        return problems

    async def quarantine(self, problem: StoredProblem) -> str:
        moved_at = now_ms()
        base = f"{self.prefix}:q:{hash_tag(problem.session_id)}:{moved_at}-{secrets.token_hex(3)}"
        entry = {
            "session_id": problem.session_id,
            "moved_at": moved_at,
            "reason": problem.reason,
            "meta": f"{base}:meta",
            "msgs": f"{base}:msgs",
        }
        keys = [*self._session_keys(problem.session_id), entry["meta"], entry["msgs"]]
        with self._guard():
            await self._quarantine_script(
                [*keys, self.quarantine_key],
                [problem.session_id, base, orjson.dumps(entry)],
                client=self._client(),
            )
        return f"{self.location} (keys {base}:*)"

    async def info(self) -> dict[str, Any]:
        client = self._client()
        with self._guard():
            ids = await client.zrange(self.index_key, 0, -1)
            messages = 0
            for start in range(0, len(ids), PAGE):
                async with client.pipeline(transaction=False) as pipe:
                    for member in ids[start : start + PAGE]:
                        pipe.hget(self.key(member.decode(), "meta"), "message_count")
                    counts = await pipe.execute(raise_on_error=False)
                for count in counts:
                    with contextlib.suppress(TypeError, ValueError):
                        messages += int(count)
            server = await client.info("server")
            memory = await client.info("memory")
        kept, warning = await self._persistence(client)
        policy = _text(memory.get("maxmemory_policy"))
        warnings = [warning] if warning else []
        if policy.startswith("allkeys"):
            warnings.append(
                f"Redis at {self._where} evicts any key when its memory is full "
                f"(maxmemory-policy {policy}): sessions may vanish; set it to noeviction"
            )
        return {
            "backend": self.name,
            "location": self.location,
            "sessions": len(ids),
            "messages": messages,
            "prefix": self.prefix,
            "lease_ms": self.lease_ms,
            "server_version": server.get("redis_version"),
            "used_memory": memory.get("used_memory_human"),
            "maxmemory_policy": memory.get("maxmemory_policy"),
            "persistence": kept,
            **({"warnings": warnings} if warnings else {}),
        }

    async def _persistence(self, client: Any) -> tuple[str, str | None]:
        """What the server keeps on disk (``CONFIG GET appendonly`` and ``save``),
        and the warning ``storage info`` gives when that is nothing or unknown."""
        with self._guard():
            try:
                config = {
                    **await client.config_get("appendonly"),
                    **await client.config_get("save"),
                }
            except self._redis.exceptions.ResponseError as exc:  # an ACL, a managed server
                return "unknown", (
                    f"could not check whether Redis at {self._where} keeps sessions on disk "
                    f"(CONFIG GET refused: {self._reason(exc)}); without AOF or RDB snapshots "
                    "a restart of the server loses every session"
                )
        return persistence({_text(key): _text(value) for key, value in config.items()}, self._where)

    # the per-turn session lock

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        """A lease renewed while the turn runs; only its owner deletes it.

        Waits are bounded apart from ``socket_timeout``: an attempt to take the
        lease by what is left of ``timeout`` (at least ``ATTEMPT_S``), the end of
        the renewer and the release by ``RELEASE_S`` each (past it the lease runs
        out by itself). The renewer stops on an event, not on its cancellation
        alone: Python 3.11's ``asyncio.wait_for``, which redis-py sends with, can
        swallow a cancellation, and a renewer that lost one renewed the lease of
        a finished turn forever."""
        key = self.key(session_id, "lock")
        owner = f"{secrets.token_hex(16)} pid {os.getpid()} on {socket.gethostname()}".encode()
        await self._acquire(key, owner, session_id, timeout)
        stop = asyncio.Event()
        renewer = asyncio.ensure_future(self._renew(key, owner, stop))
        try:
            yield
        finally:
            stop.set()
            renewer.cancel()
            await asyncio.wait([renewer], timeout=RELEASE_S)
            errors = self._redis.exceptions
            # Unreachable server: the lease runs out by itself within lease_ms.
            with contextlib.suppress(errors.RedisError, TimeoutError):
                async with asyncio.timeout(RELEASE_S):
                    await self._release_script([key], [owner], client=self._client())

    async def set_interrupt(self, session_id: str, until_ms: int) -> None:
        key, client = self.key(session_id, "interrupt"), self._client()
        left = until_ms - now_ms()
        call = client.set(key, b"1", px=left) if until_ms and left > 0 else client.delete(key)
        await self._within(time.monotonic(), call)

    async def interrupt_requested(self, session_id: str) -> bool:
        call = self._client().exists(self.key(session_id, "interrupt"))
        return bool(await self._within(time.monotonic(), call))

    async def _acquire(self, key: str, owner: bytes, session_id: str, timeout: float) -> None:
        client = self._client()
        deadline = time.monotonic() + timeout

        async def locked() -> bool:
            taken = client.set(key, owner, nx=True, px=self.lease_ms)
            return bool(await self._within(deadline, taken))

        if not await poll(locked, deadline):
            try:
                holder = _text(await self._within(time.monotonic(), client.get(key)))
            except StorageError:
                holder = ""
            raise SessionBusyError(
                session_id, timeout, holder.partition(" ")[2] or "another client"
            )

    async def _within(self, deadline: float, call: Awaitable[T]) -> T:
        """``call``, given until the ``time.monotonic`` ``deadline`` (at least
        ``ATTEMPT_S``) to answer, else a StorageError."""
        bound = max(deadline - time.monotonic(), ATTEMPT_S)
        try:
            with self._guard():
                async with asyncio.timeout(bound):
                    return await call
        except TimeoutError:
            raise StorageError(
                f"Redis at {self._where} did not answer within {bound:.3g}s "
                "(a network stall or an overloaded server); check it, then retry"
            ) from None

    async def _renew(self, key: str, owner: bytes, stop: asyncio.Event) -> None:
        """Extend the lease every third of its length until ``stop`` is set."""
        client = self._client()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.lease_ms / 3000):
                    await stop.wait()
            if stop.is_set():
                return
            try:
                if not await self._renew_script([key], [owner, self.lease_ms], client=client):
                    return  # lost after expiry: the append's revision check keeps the data safe
            except self._redis.exceptions.RedisError:
                continue  # a blip: the next tick retries while the lease still runs

    async def close(self) -> None:
        """Closes the running loop's connections; another loop's are dropped (an
        asyncio connection can only be closed on its own loop), and go with it."""
        clients, self._clients = self._clients, {}
        if not clients:
            return
        client = clients.get(asyncio.get_running_loop())
        if client is not None:
            await client.aclose()
