"""A session row and its message bodies to one canonical record, checked,
or a CorruptSessionError."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from foliko_cli.errors import CorruptSessionError
from foliko_cli.storage.record import SessionRecord, check_record, decode_message, loads

RECORD_COLUMNS = "variables, metadata, compression_state, updated_at, revision"


def record_from_row(
    session_id: str,
    columns: tuple[Any, ...],
    bodies: Iterable[Any],
    where: str,
    *,
    first_seq: int = 0,
) -> SessionRecord:
    """``columns`` are RECORD_COLUMNS (JSON text, then updated_at and revision);
    ``bodies`` the messages' JSON in order, from position ``first_seq`` on.

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
