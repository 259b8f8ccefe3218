"""The public JSON forms of a session and a summary (``sessions show --json``,
export, the HTTP list)."""

from __future__ import annotations

from typing import Any

from foliko_cli.messages.record import (
    SessionRecord,
    SessionSummary,
    check_message,
    check_record,
    filled_metadata,
)
from foliko_cli.messages.seed import record_from_seed


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
        "title": summary.title,
    }
    if summary.error:
        row.update(preview=f"DAMAGED: {summary.error}", damaged=True, error=summary.error)
    return row


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
