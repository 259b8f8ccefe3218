"""The one canonical shape of a stored session, and its (de)serialisers.

A message is a dict with ``role`` (system, user, assistant, tool),
``content`` (str), ``created_at`` (ms), ``request_id`` and ``trace_id`` of the
turn that wrote it, and optionally ``tool_calls`` (assistant: a list of
``{id, name, arguments}``), ``tool_call_id``, ``name`` and ``is_error``
(tool). Every backend and the migration go through the functions below.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Iterable
from typing import Any, NamedTuple

import orjson

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import (
    CorruptSessionError,
    InvalidRecordError,
    InvalidSessionIdError,
)

ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_SESSION_ID_LENGTH = 256
PREVIEW_LENGTH = 100
MAX_DEPTH = 200
MAX_TIMESTAMP = 2**53
MIN_INT, MAX_INT = -(2**63), 2**64 - 1  # what orjson writes and reads back exactly
_DIGITS_AS_ZERO = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_NINETEEN_DIGITS = b"0" * 19


class SessionRecord:
    """One stored session. ``first_seq`` is the position of ``messages[0]`` in the
    whole history: 0, except in a record from ``load_recent``.

    A plain class, not a dataclass: it is defined at every start-up, where a
    dataclass costs about a millisecond (P1)."""

    FIELDS = (
        "session_id",
        "messages",
        "variables",
        "metadata",
        "compression_state",
        "saved_at",
        "revision",
        "first_seq",
    )
    __slots__ = FIELDS

    def __init__(
        self,
        session_id: str,
        messages: list[dict[str, Any]] | None = None,
        variables: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        compression_state: dict[str, Any] | None = None,
        saved_at: int = 0,
        revision: int = 0,
        first_seq: int = 0,
    ):
        self.session_id = session_id
        self.messages = [] if messages is None else messages
        self.variables = {} if variables is None else variables
        self.metadata = {} if metadata is None else metadata
        self.compression_state = {} if compression_state is None else compression_state
        self.saved_at = saved_at
        self.revision = revision
        self.first_seq = first_seq

    def _fields(self) -> tuple:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionRecord):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"SessionRecord({fields})"


class SessionState(NamedTuple):
    """What a turn writes besides its new messages."""

    variables: dict[str, Any]
    metadata: dict[str, Any]
    compression_state: dict[str, Any]


class SessionSummary(NamedTuple):
    """One row of ``sessions list``: never requires loading messages."""

    session_id: str
    created_at: int
    updated_at: int
    message_count: int
    preview: str = ""
    error: str | None = None


def check_session_id(session_id: Any) -> str:
    """Reject ids that are empty, too long or contain control characters (R5)."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidSessionIdError("invalid session id: it is empty; pass a name like 'work'")
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidSessionIdError(
            f"invalid session id: longer than {MAX_SESSION_ID_LENGTH} characters; "
            "use a shorter name"
        )
    for char in session_id:
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise InvalidSessionIdError(
                f"invalid session id {session_id!r}: it contains the control character "
                f"U+{ord(char):04X}; use printable characters only"
            )
    if session_id != session_id.strip():
        raise InvalidSessionIdError(
            f"invalid session id {session_id!r}: leading or trailing whitespace; remove it"
        )
    return session_id


INTERNAL_PREFIX = ".foliko/"


def is_internal(session_id: str) -> bool:
    """Whether a session is one foliko keeps for itself (``.foliko/...``, also
    under a user's scope ``~alice~/.foliko/...``): the trash, quotas, background
    journals. Never listed, searched, counted in usage or pruned; migrated."""
    if session_id.startswith("~"):
        session_id = session_id.partition("~/")[2]
    return session_id.startswith(INTERNAL_PREFIX)


def next_revision(current: int | None) -> int:
    """The revision after ``current``; a new session starts at a fresh, clock-based one.

    Starting from the clock (microseconds) means a session deleted and created
    again never reuses a revision, so a cached copy of the old one is never
    mistaken for the new one.
    """
    return current + 1 if current else time.time_ns() // 1000


def new_metadata(now: int | None = None) -> dict[str, Any]:
    now = now_ms() if now is None else now
    return {"created_at": now, "last_active": now, "message_count": 0, "compression_count": 0}


def filled_metadata(metadata: dict[str, Any], saved_at: int, message_count: int) -> dict[str, Any]:
    """``metadata`` with the keys every session has, as reading a session's public
    JSON form fills them in (a missing time is ``saved_at``, or now without one)."""
    return {**new_metadata(saved_at or None), **metadata, "message_count": message_count}


def check_message(message: Any) -> dict[str, Any]:
    """Return ``message`` if it has the canonical shape, else raise ValueError."""
    if not isinstance(message, dict):
        raise ValueError(f"a message must be an object, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"unknown message role {role!r}")
    if not isinstance(message.get("content"), str):
        raise ValueError("message content must be a string")
    return message


def encode_message(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message)


def loads(data: bytes | str) -> Any:
    """Parse stored JSON exactly and within MAX_DEPTH; raises ValueError.

    What orjson returns holds only JSON values with string keys and finite
    numbers, but it reads an integer beyond 64 bits as a float, silently
    changing it: such a document is refused. Only text with a run of 19
    digits can hold one, so only that is parsed again, by the stdlib; only
    text with more than MAX_DEPTH brackets can be too deep, so only that is
    walked. A stored record therefore costs a walk of its values only when
    it may need one.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _NINETEEN_DIGITS in raw.translate(_DIGITS_AS_ZERO):  # 8x faster than a regex
        import json

        try:
            check_value(json.loads(raw))
        except RecursionError:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    elif raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        check_value(value)
    return value


def record_from_parts(
    session_id: str,
    columns: tuple[Any, ...],
    bodies: Iterable[Any],
    where: str,
    *,
    first_seq: int = 0,
) -> SessionRecord:
    """``columns`` are variables, metadata and compression_state (JSON text), then
    updated_at and revision; ``bodies`` the messages' JSON in order, from position
    ``first_seq`` on; ``where`` names the store in a CorruptSessionError.

    ``message_count`` is what the history holds (``first_seq`` plus the bodies
    read), never the copy in the stored metadata.
    """
    variables, metadata, compression_state, updated_at, revision = columns
    try:
        messages = [decode_message(body) for body in bodies]
        metadata = loads(metadata)
        if type(metadata) is not dict:
            raise ValueError("metadata must be an object")
        return check_record(
            SessionRecord(
                session_id=session_id,
                messages=messages,
                variables=loads(variables),
                metadata={**metadata, "message_count": first_seq + len(messages)},
                compression_state=loads(compression_state),
                saved_at=updated_at,
                revision=revision,
                first_seq=first_seq,
            ),
            values=False,
        )
    except (ValueError, TypeError) as exc:
        raise CorruptSessionError(session_id, where, str(exc)) from None


def decode_message(data: bytes | str) -> dict[str, Any]:
    """Parse one stored message; raises ValueError when it is not one."""
    return check_message(loads(data))


def check_value(value: Any, depth: int = 0) -> None:
    """Raise ValueError unless ``value`` is JSON nested at most MAX_DEPTH levels,
    with every integer in the range orjson round-trips (64 bits) and every
    number finite (orjson writes NaN as null)."""
    kind = type(value)
    if kind is dict:
        if depth >= MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError(f"an object key is not a string: {key!r}")
            if type(item) not in _PLAIN and not (type(item) is int and MIN_INT <= item <= MAX_INT):
                check_value(item, depth + 1)
    elif kind is list:
        if depth >= MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
        for item in value:
            if type(item) not in _PLAIN and not (type(item) is int and MIN_INT <= item <= MAX_INT):
                check_value(item, depth + 1)
    elif kind is int:
        if not MIN_INT <= value <= MAX_INT:
            raise ValueError(f"the integer {value} does not fit in 64 bits")
    elif kind is float:
        if value != value or value in (_INF, -_INF):
            raise ValueError(f"{value} is not a JSON number")
    elif kind not in _PLAIN:
        raise ValueError(f"a {kind.__name__} is not a JSON value")


_PLAIN = frozenset({str, bool, type(None)})
_INF = float("inf")


_NO_CALLS: list = []


def _explain(index: int, message: Any) -> None:
    """Raise the ValueError that says what is wrong with ``message``."""
    try:
        check_message(message)
        if type(message.get("tool_calls", _NO_CALLS)) is not list:
            raise ValueError("tool_calls must be a list")
        _check_timestamp(message.get("created_at", 0), "created_at")
    except ValueError as exc:
        raise ValueError(f"message {index}: {exc}") from None
    raise ValueError(f"message {index} does not have the canonical shape")


def _check_timestamp(value: Any, what: str) -> None:
    if type(value) is not int or not 0 <= value < MAX_TIMESTAMP:
        raise ValueError(f"{what} must be milliseconds (an integer from 0 to 2^53), got {value!r}")


def check_record(record: SessionRecord, *, values: bool = True) -> SessionRecord:
    """Return ``record`` if it has the canonical shape, else raise ValueError.

    Checked on every load and before every write, by every backend, and
    callable by an import: messages a list of canonical messages (with
    ``tool_calls`` a list), variables, metadata and compression_state
    objects, timestamps integers below 2^53, and, with ``values``, all of it
    JSON that survives a round trip (depth, 64-bit integers, finite numbers,
    string keys). Backends pass ``values=False`` for what ``loads`` parsed,
    which has checked the values already.
    """
    if type(record.messages) is not list:
        raise ValueError("messages must be a list")
    for message in record.messages:  # inlined: a load checks thousands of them
        if (
            type(message) is not dict
            or message.get("role") not in ROLES
            or type(message.get("content")) is not str
            or type(message.get("tool_calls", _NO_CALLS)) is not list
            or type(created_at := message.get("created_at", 0)) is not int
            or not 0 <= created_at < MAX_TIMESTAMP
        ):
            _explain(record.messages.index(message), message)
    for name in ("variables", "metadata", "compression_state"):
        if type(getattr(record, name)) is not dict:
            raise ValueError(f"{name} must be an object")
    for key in ("created_at", "last_active"):
        if key in record.metadata:
            _check_timestamp(record.metadata[key], f"metadata {key}")
    _check_timestamp(record.saved_at, "saved_at")
    if type(record.revision) is not int or not 0 <= record.revision < 2**63:
        raise ValueError(f"revision must be a non-negative integer, got {record.revision!r}")
    if values:
        check_value([record.messages, record.variables, record.metadata, record.compression_state])
    return record


def checked_for_write(record: SessionRecord) -> SessionRecord:
    """``record`` if a backend may write it, else InvalidRecordError (exit 2)."""
    try:
        return check_record(record)
    except ValueError as exc:
        raise InvalidRecordError(record.session_id, str(exc)) from None


def preview_of(messages: list[dict[str, Any]]) -> str:
    """The latest user message, on one line, shortened for listings."""
    for message in reversed(messages):
        if message.get("role") == "user":
            text = " ".join(str(message.get("content", "")).split())
            return text if len(text) <= PREVIEW_LENGTH else text[: PREVIEW_LENGTH - 1] + "…"
    return ""


def relabelled(record: SessionRecord, session_id: str, *, saved_at: int = 0) -> SessionRecord:
    """A new record of ``record``'s messages, variables, metadata and compression
    state (shared, not copied) as ``session_id``, with no revision: what a
    create-only or compare-and-set ``save`` of the same content elsewhere takes."""
    return SessionRecord(
        session_id,
        messages=record.messages,
        variables=record.variables,
        metadata=record.metadata,
        compression_state=record.compression_state,
        saved_at=saved_at,
    )


def clear_record(record: SessionRecord, *, variables: bool = False) -> SessionRecord:
    """``record`` with its history (and summary) dropped; with ``variables``, those too."""
    record.messages = []
    record.compression_state = {}
    if variables:
        record.variables = {}
    record.saved_at = now_ms()
    return record


def covered_messages(record: SessionRecord, total: int) -> int:
    """How many of the first messages the session's compression summary stands for."""
    return covered_by(record.compression_state, total)


def covered_by(compression_state: dict[str, Any], total: int) -> int:
    """``covered_messages`` of a session with this compression state and ``total`` messages."""
    covered = compression_state.get("covered", 0)
    return covered if isinstance(covered, int) and 0 <= covered <= total else 0


def fork_origin(parent: str, messages: list[dict[str, Any]], kept: int) -> dict[str, Any]:
    """The metadata that records a fork of session ``parent``, whose history is
    ``messages``, sharing its first ``kept`` messages: ``forked_from``,
    ``forked_at_message`` (where the fork's own messages begin) and
    ``forked_at_turn`` (how many of the parent's turns it shares whole; a turn
    is a user message and the messages up to the next one)."""
    starts = [i for i, message in enumerate(messages) if message.get("role") == "user"]
    ends = [*starts[1:], len(messages)]
    return {
        "forked_from": parent,
        "forked_at_message": kept,
        "forked_at_turn": sum(1 for end in ends if end <= kept),
    }


def record_to_dict(record: SessionRecord) -> dict[str, Any]:
    """The public JSON form (``sessions show --json``, export)."""
    return {
        "session_id": record.session_id,
        "messages": record.messages,
        "variables": record.variables,
        "metadata": {**record.metadata, "message_count": len(record.messages)},
        "compression_state": record.compression_state,
        "saved_at": record.saved_at,
    }


def summary_to_dict(summary: SessionSummary) -> dict[str, Any]:
    """The public JSON form of a summary (``sessions list --json``, the HTTP list).
    A damaged session is marked, never left out: ``damaged`` true, ``error`` why."""
    row: dict[str, Any] = {
        "session_id": summary.session_id,
        "message_count": summary.message_count,
        "created_at": summary.created_at,
        "updated_at": summary.updated_at,
        "preview": summary.preview,
    }
    if summary.error:
        row.update(preview=f"DAMAGED: {summary.error}", damaged=True, error=summary.error)
    return row


def content_hash(record: SessionRecord) -> str:
    """A digest of what must survive any move between backends."""
    return _digest(record.messages, record.variables)


def stored_content_hash(bodies: Iterable[bytes | str], variables: bytes | str) -> str:
    """The ``content_hash`` of the record that messages stored as ``bodies`` and
    variables stored as ``variables`` (JSON texts) load as, without building or
    checking it: it equals a checked record's hash only when the texts hold that
    record's values, so a copy can be compared with its source this way. Raises
    ValueError when a text is not JSON."""
    try:
        return _digest([orjson.loads(body) for body in bodies], orjson.loads(variables))
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None


def _digest(messages: Any, variables: Any) -> str:
    import hashlib

    body = orjson.dumps([messages, variables], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()


# The seed's document format: camelCase keys, millisecond timestamps. Files
# and rows written by the original foliko hold AI-SDK messages, whose
# content may be a list of parts; they are converted on the way in.

_MESSAGE_TO_SEED = {
    "created_at": "createdAt",
    "request_id": "requestId",
    "trace_id": "traceId",
    "tool_calls": "toolCalls",
    "tool_call_id": "toolCallId",
    "is_error": "isError",
}
_MESSAGE_FROM_SEED = {v: k for k, v in _MESSAGE_TO_SEED.items()}
_METADATA_TO_SEED = {
    "created_at": "createdAt",
    "last_active": "lastActive",
    "message_count": "messageCount",
    "compression_count": "compressionCount",
}
_METADATA_FROM_SEED = {v: k for k, v in _METADATA_TO_SEED.items()}


def _rename(mapping: dict[str, str], data: dict[str, Any]) -> dict[str, Any]:
    return {mapping.get(key, key): value for key, value in data.items()}


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _messages_from_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Split an AI-SDK message with content parts into canonical messages."""
    base = {k: v for k, v in _rename(_MESSAGE_FROM_SEED, message).items() if k != "content"}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for part in message["content"]:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "tool-call":
            arguments = part.get("args", part.get("input", {}))
            calls.append(
                {"id": part.get("toolCallId"), "name": part.get("toolName"), "arguments": arguments}
            )
        elif kind == "tool-result":
            output = part.get("result", part.get("output"))
            results.append(
                {
                    **base,
                    "role": "tool",
                    "content": _text_of(output),
                    "tool_call_id": part.get("toolCallId"),
                    "name": part.get("toolName"),
                }
            )
        else:
            texts.append(_text_of(part))
    if results:
        return results
    converted = {**base, "content": "".join(texts)}
    if calls:
        converted["tool_calls"] = calls
    return [converted]


def messages_from_seed(message: Any) -> list[dict[str, Any]]:
    if isinstance(message, dict) and isinstance(message.get("content"), list):
        return [check_message(m) for m in _messages_from_parts(message)]
    if isinstance(message, dict) and message.get("content") is None and "role" in message:
        message = {**message, "content": ""}
    if not isinstance(message, dict):
        raise ValueError(f"a message must be an object, got {type(message).__name__}")
    return [check_message(_rename(_MESSAGE_FROM_SEED, message))]


def record_to_seed(record: SessionRecord) -> dict[str, Any]:
    return {
        "sessionId": record.session_id,
        "messages": [_rename(_MESSAGE_TO_SEED, m) for m in record.messages],
        "variables": record.variables,
        "metadata": _rename(
            _METADATA_TO_SEED, {**record.metadata, "message_count": len(record.messages)}
        ),
        "compressionState": record.compression_state,
        "savedAt": record.saved_at,
        "revision": record.revision,
    }


def record_from_seed(
    document: Any, session_id: str | None = None, *, values: bool = True
) -> SessionRecord:
    """Parse a seed-format document; raises ValueError when it is not one.
    ``values=False``: the document came from ``loads`` (see check_record)."""
    if not isinstance(document, dict):
        raise ValueError("a session document must be a JSON object")
    stored_id = document.get("sessionId", session_id)
    if not isinstance(stored_id, str):
        raise ValueError("sessionId is missing or not a string")
    raw_messages = document.get("messages", [])
    if not isinstance(raw_messages, list):
        raise ValueError("messages must be a list")
    messages = []
    for raw in raw_messages:
        if type(raw) is dict and type(raw.get("content")) is str and raw.get("role") in ROLES:
            messages.append({_MESSAGE_FROM_SEED.get(k, k): v for k, v in raw.items()})
        else:  # AI-SDK content parts, or not a message: converted or explained there
            messages.extend(messages_from_seed(raw))
    variables = document.get("variables") or {}
    metadata = document.get("metadata") or {}
    if not isinstance(variables, dict) or not isinstance(metadata, dict):
        raise ValueError("variables and metadata must be objects")
    compression_state = document.get("compressionState") or {}
    if not isinstance(compression_state, dict):
        raise ValueError("compressionState must be an object")
    saved_at = document.get("savedAt") or 0
    if not isinstance(saved_at, int):
        raise ValueError("savedAt must be a number of milliseconds")
    merged = {**new_metadata(saved_at or None), **_rename(_METADATA_FROM_SEED, metadata)}
    merged["message_count"] = len(messages)
    revision = document.get("revision", 0) or 0
    if type(revision) is not int:
        raise ValueError("revision must be an integer")
    return check_record(
        SessionRecord(
            session_id=stored_id,
            messages=messages,
            variables=variables,
            metadata=merged,
            compression_state=compression_state,
            saved_at=saved_at,
            revision=revision,
        ),
        values=values,
    )


def record_from_dict(data: Any) -> SessionRecord:
    """Parse the public JSON form (or a seed document); raises ValueError."""
    if isinstance(data, dict) and "sessionId" in data:
        return record_from_seed(data)
    if not isinstance(data, dict):
        raise ValueError("a session must be a JSON object")
    session_id = data.get("session_id")
    if not isinstance(session_id, str):
        raise ValueError("session_id is missing or not a string")
    messages = data.get("messages", [])
    variables = {} if data.get("variables") is None else data["variables"]
    metadata = {} if data.get("metadata") is None else data["metadata"]
    compression_state = {} if data.get("compression_state") is None else data["compression_state"]
    if not isinstance(messages, list):
        raise ValueError("messages must be a list")
    if not all(isinstance(x, dict) for x in (variables, metadata, compression_state)):
        raise ValueError("variables, metadata and compression_state must be objects")
    saved_at = data.get("saved_at") or 0
    if type(saved_at) is not int:
        raise ValueError("saved_at must be a number of milliseconds")
    return check_record(
        SessionRecord(
            session_id=session_id,
            messages=[check_message(m) for m in messages],
            variables=variables,
            metadata=filled_metadata(metadata, saved_at, len(messages)),
            compression_state=compression_state,
            saved_at=saved_at,
        )
    )


def checked_append(session_id: str, messages: list[dict[str, Any]], state: SessionState) -> None:
    """Raise InvalidRecordError unless what ``append`` would write is canonical."""
    checked_for_write(
        SessionRecord(
            session_id,
            messages=messages,
            variables=state.variables,
            metadata=state.metadata,
            compression_state=state.compression_state,
        )
    )
