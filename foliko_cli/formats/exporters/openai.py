"""OpenAI's Responses API: each session as the input items that replay it
elsewhere, after the API reference's input item list
(https://platform.openai.com/docs/api-reference/responses/create, ``input``)
and the openai SDK's ``ResponseInputItemParam``:

- a user or system message is a ``message`` item of ``input_text`` parts, its
  images ``input_image`` parts with the bytes as a base64 ``data:`` URL (an
  image whose file is gone or changed is an ``input_text`` saying so);
- an answer is an output ``message`` (``output_text``, with the id and status
  the API gives output messages), and each tool call it made a
  ``function_call`` item (``call_id``, ``name``, ``arguments`` as JSON text);
- a tool result is a ``function_call_output`` item.

A JSON array, one object a session: ``{"input": [...], "metadata":
{"session_id": ID}}``, which is the body of a Responses request but its
model (``client.responses.create(model=M, **session)``). What items cannot
hold (times, models, usage, variables, the session's metadata) is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from foliko_cli.messages.attachments import image_data, unavailable
from foliko_cli.messages.fragments import as_sent
from foliko_cli.messages.record import SessionRecord


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as JSON text (as stored: text stays text)."""
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


def _input_content(message: dict[str, Any]) -> list[dict[str, Any]]:
    text = str(message.get("content", ""))
    images = [p for p in message.get("attachments") or () if p.get("type") == "image"]
    parts: list[dict[str, Any]] = []
    if text or not images:
        parts.append({"type": "input_text", "text": text})
    for image in images:
        data = image_data(image)
        if data is None:
            parts.append({"type": "input_text", "text": unavailable(image)})
        else:
            url = f"data:{image.get('media_type')};base64,{data}"
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
    return parts


def message_items(message: dict[str, Any], seq: int) -> list[dict[str, Any]]:
    """The items of the message at position ``seq``."""
    role = message.get("role")
    content = str(message.get("content", ""))
    if role == "tool":
        call_id = message.get("tool_call_id") or ""
        return [{"type": "function_call_output", "call_id": call_id, "output": content}]
    if role != "assistant":
        return [{"type": "message", "role": role, "content": _input_content(message)}]
    calls = message.get("tool_calls") or []
    items: list[dict[str, Any]] = []
    if content or not calls:
        text = {"type": "output_text", "text": content, "annotations": []}
        items.append(
            {
                "type": "message",
                "id": f"msg_{seq}",
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        )
    for index, call in enumerate(calls):
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id") or f"call_{seq}_{index}",
                "name": call.get("name") or "",
                "arguments": arguments_text(call.get("arguments", {})),
            }
        )
    return items


def items(record: SessionRecord) -> list[dict[str, Any]]:
    """The session's history as Responses input items, oldest first (a message's
    fragments in its text, as the model was sent it)."""
    messages = as_sent(record.messages, record.metadata)
    return [
        item
        for seq, message in enumerate(messages, start=record.first_seq)
        for item in message_items(message, seq)
    ]


def lines(records: Iterable[SessionRecord]) -> Iterator[str]:
    sessions = [
        {"input": items(record), "metadata": {"session_id": record.session_id}}
        for record in records
    ]
    yield orjson.dumps(sessions).decode()
