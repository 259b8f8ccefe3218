"""The one canonical shape of a stored session, and its check.

A message is a dict with ``role`` (system, user, assistant, tool),
``content`` (str), ``created_at`` (ms), ``request_id`` and ``trace_id`` of the
turn that wrote it, and optionally ``tool_calls`` (assistant: a list of
``{id, name, arguments}``), ``tool_call_id``, ``name`` and ``is_error``
(tool). Every backend and the migration check a record with ``check_record``;
its stored form is in ``stored``, its public JSON form in ``public``, the
seed's document format in ``seed``, and session ids in ``ids``.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import (
    InvalidRecordError,
)
from foliko_cli.messages.exact_json import check_value

ROLES = frozenset({"system", "user", "assistant", "tool"})
PREVIEW_LENGTH = 100
MAX_TIMESTAMP = 2**53
MAX_MESSAGE_CHARS = 16 * 1024 * 1024
"""The most characters a message (its text, or an attachment's data) may hold:
what a turn accepts and an import takes."""


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

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionRecord):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"SessionRecord({fields})"


Messages = list[dict[str, Any]]
"""A session's messages, each of the canonical shape ``check_record`` checks."""


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
    title: str | None = None
    """The session's title (``metadata.title``: an import's, or one given), if any."""


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


_NO_CALLS: list[Any] = []


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


def title_of(metadata: Any) -> str | None:
    """``metadata``'s title when it is non-empty text (a listing shows it), else None."""
    title = metadata.get("title") if isinstance(metadata, dict) else None
    return title if isinstance(title, str) and title else None


def title_in(metadata_json: str | bytes | None) -> str | None:
    """The title of metadata stored as JSON; None for none, or for JSON that does
    not parse (the session's load reports that, not its listing)."""
    if not metadata_json:
        return None
    import orjson

    try:
        return title_of(orjson.loads(metadata_json))
    except orjson.JSONDecodeError:
        return None


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
    """``record`` with its history (and summary) dropped; with ``variables``, those too.
    Messages added later are numbered after the dropped ones (item_numbers.py)."""
    from foliko_cli.messages.item_numbers import offset_after, offset_of

    next_number = len(record.messages) + offset_of(record.metadata)
    record.metadata = {**record.metadata, **offset_after(next_number, 0)}
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
