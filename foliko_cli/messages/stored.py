"""How a backend stores a record: each message as JSON, a record read back from
its parts, the content hash a move compares."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from foliko_cli.errors import (
    CorruptSessionError,
)
from foliko_cli.messages.exact_json import loads
from foliko_cli.messages.record import SessionRecord, check_message, check_record


def encode_message(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message)


def record_from_parts(
    session_id: str,
    columns: tuple[Any, ...],
    bodies: Iterable[Any],
    where: str,
    *,
    first_seq: int = 0,
    count: int | None = None,
) -> SessionRecord:
    """``columns`` are variables, metadata and compression_state (JSON text), then
    updated_at and revision; ``bodies`` the messages' JSON in order, from position
    ``first_seq`` on; ``where`` names the store in a CorruptSessionError.

    ``message_count`` is what the history holds (``count``, or else ``first_seq``
    plus the bodies read: a read to the end), never the copy in the stored metadata.
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
                metadata={
                    **metadata,
                    "message_count": first_seq + len(messages) if count is None else count,
                },
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
