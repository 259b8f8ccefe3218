"""ChatGPT's data export: ``conversations.json``, a JSON array of conversations,
each a tree of nodes (``mapping``: id -> {id, message, parent, children}) from
a root without a message down to ``current_node``, the message shown last;
after the archive of Settings > Data controls > Export data and the
importers that read it (foliko's own, importers/chatgpt.py, and LibreChat's).

A session is one line of that tree (the conversation's id is the session's,
its title the session's title or id). A message is a node with an ``author``
(its role; a tool result's ``name``), a ``create_time`` in seconds and a
``text`` content of one part; an answer names its ``model_slug``, and each
tool call it made is a node of its own addressed to the tool (``recipient``,
its arguments as ``code``), as ChatGPT writes its own tools' calls. Files
attached are listed in the message's ``metadata.attachments`` by name, type
and size (ChatGPT keeps their bytes beside conversations.json, which this
file alone cannot). Node ids are UUIDs derived from the session and the
message's position, so an export is the same each time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from foliko_cli.formats.exporters.openai import arguments_text
from foliko_cli.messages.fragments import as_sent
from foliko_cli.messages.record import SessionRecord

ROOT = "client-created-root"
_NAMESPACE = uuid.UUID("5b1e7f2a-8c1d-4e0a-9f3b-6d2c4a8e1f70")  # foliko's chatgpt node ids


def _seconds(ms: Any) -> float | None:
    return ms / 1000 if isinstance(ms, int) and not isinstance(ms, bool) and ms > 0 else None


def _node_id(session_id: str, *where: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join([session_id, *map(str, where)])))


def _attachments(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": f"file-{str(part.get('sha256') or '')[:24] or index}",
            "name": part.get("name"),
            "size": part.get("size"),
            "mime_type": part.get("media_type"),
        }
        for index, part in enumerate(message.get("attachments") or ())
    ]


def _message(
    node_id: str,
    message: dict[str, Any],
    *,
    role: str,
    content: dict[str, Any],
    name: str | None = None,
    recipient: str = "all",
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": node_id,
        "author": {"role": role, "name": name, "metadata": {}},
        "create_time": _seconds(message.get("created_at")),
        "update_time": None,
        "content": content,
        "status": "finished_successfully",
        "end_turn": True if role == "assistant" and recipient == "all" else None,
        "weight": 1.0,
        "metadata": metadata or {},
        "recipient": recipient,
        "channel": None,
    }


def _text(text: str) -> dict[str, Any]:
    return {"content_type": "text", "parts": [text]}


def _messages(session_id: str, seq: int, message: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes' messages of the session's message at ``seq``, in order."""
    role = message.get("role")
    content = str(message.get("content", ""))
    if role == "tool":
        node = _node_id(session_id, seq)
        name = message.get("name") or None
        return [_message(node, message, role="tool", name=name, content=_text(content))]
    if role != "assistant":
        files = _attachments(message)
        metadata: dict[str, Any] | None = {"attachments": files} if files else None
        node = _node_id(session_id, seq)
        return [_message(node, message, role=str(role), content=_text(content), metadata=metadata)]
    model = message.get("model")
    metadata = {"model_slug": model} if isinstance(model, str) and model else None
    calls = message.get("tool_calls") or []
    found = []
    if content or not calls:
        node = _node_id(session_id, seq)
        found.append(
            _message(node, message, role="assistant", content=_text(content), metadata=metadata)
        )
    for index, call in enumerate(calls):
        code = arguments_text(call.get("arguments", {}))
        found.append(
            _message(
                _node_id(session_id, seq, index),
                message,
                role="assistant",
                content={"content_type": "code", "language": "json", "text": code},
                recipient=str(call.get("name") or "tool"),
                metadata=metadata,
            )
        )
    return found


def conversation(record: SessionRecord) -> dict[str, Any]:
    session_id = record.session_id
    messages = as_sent(record.messages, record.metadata)  # fragments in the text
    found = [
        found
        for seq, message in enumerate(messages, start=record.first_seq)
        for found in _messages(session_id, seq, message)
    ]
    mapping: dict[str, dict[str, Any]] = {}
    parent = None
    for node_id, message in [(ROOT, None), *((m["id"], m) for m in found)]:
        mapping[node_id] = {"id": node_id, "message": message, "parent": parent, "children": []}
        if parent is not None:
            mapping[parent]["children"].append(node_id)
        parent = node_id
    models = [m.get("model") for m in record.messages if m.get("role") == "assistant"]
    title = record.metadata.get("title")
    return {
        "title": title if isinstance(title, str) and title.strip() else session_id,
        "create_time": _seconds(record.metadata.get("created_at")),
        "update_time": _seconds(record.metadata.get("last_active") or record.saved_at),
        "mapping": mapping,
        "moderation_results": [],
        "current_node": parent,
        "plugin_ids": None,
        "conversation_id": session_id,
        "conversation_template_id": None,
        "gizmo_id": None,
        "is_archived": False,
        "safe_urls": [],
        "default_model_slug": next((m for m in reversed(models) if isinstance(m, str)), None),
        "id": session_id,
    }


def lines(records: Iterable[SessionRecord]) -> Iterator[str]:
    yield orjson.dumps([conversation(record) for record in records]).decode()
