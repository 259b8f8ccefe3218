"""The seed's document format: camelCase keys, millisecond timestamps. Files
and rows written by the original foliko hold AI-SDK messages, whose
content may be a list of parts; they are converted on the way in."""

from __future__ import annotations

from typing import Any

import orjson

from foliko_cli.messages.record import (
    ROLES,
    SessionRecord,
    check_message,
    check_record,
    new_metadata,
)

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
    messages: list[dict[str, Any]] = []
    for raw in raw_messages:
        if type(raw) is dict and type(raw.get("content")) is str and raw.get("role") in ROLES:
            fields: dict[str, Any] = raw  # a JSON object: its keys are strings
            messages.append({_MESSAGE_FROM_SEED.get(k, k): v for k, v in fields.items()})
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
