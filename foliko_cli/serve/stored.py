"""Stored responses: a response is the turn of a session that its id names
(by the item number of the turn's first message: messages/item_numbers.py).

A turn's messages share its request id; its output begins at its first
message a model wrote (see items.py). A deleted response is a tombstone in
its session's metadata (that number): its messages stay, its conversation's items.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from foliko_cli.messages.item_numbers import number_of, offset_of, position_of
from foliko_cli.messages.record import SessionRecord
from foliko_cli.serve import background, ids
from foliko_cli.serve import items as it
from foliko_cli.serve.errors import ApiError
from foliko_cli.service import AsyncFoliko

DELETED_KEY = "deleted_responses"
RECENT_CALLS = 200
RESPONSE_WINDOW = 64
"""How many messages from a response's first are read first to find its end."""
"""How many of the last messages are read first for the calls a function output answers."""

Span = Callable[[int], tuple[int, int | None]]
"""The messages to read, as a slice, around the message at a position."""


def turn_span(messages: list[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """The messages of the turn that begins at ``start`` (they share its request id)."""
    if not 0 <= start < len(messages):
        return []
    request_id = messages[start].get("request_id")
    end = start + 1
    while end < len(messages) and messages[end].get("request_id") == request_id:
        end += 1
    return messages[start:end]


async def load_session(
    svc: AsyncFoliko,
    session_id: str,
    missing: ApiError,
    window: tuple[int, int | None] | None = None,
) -> SessionRecord:
    """The session (only ``messages[start:stop]`` with a ``window``), else ``missing``."""
    from foliko_cli.errors import InvalidSessionIdError, SessionNotFoundError

    try:
        if window is None:
            return await svc.get_session(session_id)
        return await svc.session_window(session_id, *window)
    except (SessionNotFoundError, InvalidSessionIdError):
        raise missing from None


def answered(messages: list[dict[str, Any]], history: list[dict[str, Any]]) -> bool:
    """Whether each function output among ``messages`` answers a call in ``history``
    (or earlier in ``messages``): what a read of the end of a history must hold
    before the whole is not needed."""
    try:
        it.name_tool_outputs([dict(m) for m in messages], history)
    except ApiError:
        return False
    return True


async def exists(svc: AsyncFoliko, session_id: str, missing: ApiError) -> None:
    from foliko_cli.errors import InvalidSessionIdError
    from foliko_cli.messages.ids import check_session_id

    try:
        check_session_id(session_id)
    except InvalidSessionIdError:
        raise missing from None
    if await svc.storage.revision(session_id) is None:
        raise missing


class StoredResponse:
    """A response rebuilt from its session: the turn's input and output messages."""

    def __init__(self, record: SessionRecord, start: int, span: list[dict[str, Any]]):
        self.record = record
        self.start = start
        self.span = span
        self.split = it.output_start(span)
        self.offset = offset_of(record.metadata)
        self.number = number_of(span[0], start, self.offset) if span else start

    @property
    def end(self) -> int:
        return self.start + len(self.span)

    @property
    def inputs(self) -> list[dict[str, Any]]:
        return self.span[: self.split]

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self.span[self.split :]


async def stored_response(
    svc: AsyncFoliko, response_id: Any, *, whole: bool = False
) -> StoredResponse:
    """The response ``response_id`` names (else a 404 ApiError), read from windows
    from its first message on; ``whole``: from the whole history, which
    ``record.messages`` then are (what a fork or a compaction of it starts from)."""
    missing = ids.response_not_found(response_id)
    if ids.parse_background_id(response_id) is not None:
        response_id = await background.stored_id(svc, response_id)
    session_id, number = ids.parse_response_id(response_id)
    found = None if whole else await _windowed(svc, session_id, number, missing)
    if found is None:
        record = await load_session(svc, session_id, missing)
        start = position_of(record.messages, number, offset_of(record.metadata))
        if start is None:
            raise missing
        found = StoredResponse(record, start, turn_span(record.messages, start))
    if not found.outputs or number in (found.record.metadata.get(DELETED_KEY) or ()):
        raise missing
    return found


async def _windowed(
    svc: AsyncFoliko, session_id: str, number: int, missing: ApiError
) -> StoredResponse | None:
    """The turn whose first message is numbered ``number``, read in windows growing
    from where that number says it is; None where it is not there."""
    from foliko_cli.errors import InvalidSessionIdError, SessionNotFoundError

    def from_start(size: int) -> Span:
        return lambda position: (position, position + size)

    size = RESPONSE_WINDOW
    while True:
        try:
            record = await window_at(svc, session_id, number, from_start(size))
        except (SessionNotFoundError, InvalidSessionIdError):
            raise missing from None
        offset = offset_of(record.metadata)
        if not record.messages or number_of(record.messages[0], record.first_seq, offset) != number:
            return None
        span = turn_span(record.messages, 0)
        reached = record.first_seq + len(record.messages) >= record.metadata["message_count"]
        if len(span) < len(record.messages) or reached:
            return StoredResponse(record, record.first_seq, span)
        size *= 8


async def window_at(svc: AsyncFoliko, session_id: str, number: int, span: Span) -> SessionRecord:
    """The messages ``span(position)`` around where the message numbered ``number``
    is unless a rewrite pinned it elsewhere (item_numbers.py): read again where a
    rewrite moved the item offset. The caller checks what it finds there."""
    record = await svc.session_window(session_id, *span(number))
    offset = offset_of(record.metadata)
    if offset and number >= offset:
        record = await svc.session_window(session_id, *span(number - offset))
    return record


async def latest_response(svc: AsyncFoliko, response_id: Any) -> StoredResponse | None:
    """The response ``response_id`` when it is the latest turn of its session (read
    from its first message on: what continuing it needs, however long the history
    before it); None in every other case (``stored_response`` says which)."""
    try:
        found = await stored_response(svc, response_id)
    except ApiError:
        return None
    return found if found.end == found.record.metadata["message_count"] else None


async def history_of(svc: AsyncFoliko, session_id: str) -> tuple[list[dict[str, Any]], int] | None:
    """A session's messages and item offset; None for none the caller may read."""
    from foliko_cli.errors import InvalidSessionIdError, SessionNotFoundError

    try:
        record = await svc.get_session(session_id)
    except (SessionNotFoundError, InvalidSessionIdError):
        return None
    return record.messages, offset_of(record.metadata)
