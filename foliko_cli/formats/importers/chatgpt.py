"""ChatGPT: the ``conversations.json`` of Settings > Data controls > Export data.

Each conversation is a tree of nodes (``mapping``: id -> {message, parent,
children}); ``current_node`` is the message shown last. Visible user and
assistant text is kept, with the model that wrote each answer and the files
the user attached (their names and types: the bytes are separate files of the
export); hidden system nodes and the traffic with ChatGPT's own tools
(browsing, code, image generation: ``recipient`` other than ``all``, and the
``tool`` role) are left out and counted.
"""

from __future__ import annotations

from typing import Any

from foliko_cli.errors import UsageError
from foliko_cli.formats.importers.base import (
    LEFT_OUT_PART,
    SNIFFED,
    Conversation,
    Imported,
    Source,
    Unreadable,
)
from foliko_cli.formats.importers.convert import (
    attachment,
    ms,
)
from foliko_cli.formats.importers.tree import split

NAME = "chatgpt"
LABEL = "a ChatGPT export (conversations.json)"
FILES = ("*.json",)
_FIX = "give the conversations.json of a ChatGPT data export"
_ROLES = {"user", "assistant"}


def _items(document: Any) -> list[Any]:
    return document if isinstance(document, list) else [document]


def sniff(source: Source) -> bool:
    items = _items(source.document())[:SNIFFED]
    return any(isinstance(item, dict) and isinstance(item.get("mapping"), dict) for item in items)


def read(source: Source, imported: Imported) -> None:
    document = source.document()
    if document is None:
        raise UsageError(f"{source.name} is not JSON", fix=_FIX)
    items = _items(document)
    if items and not any(isinstance(i, dict) and isinstance(i.get("mapping"), dict) for i in items):
        raise UsageError(f"{source.name} is not a ChatGPT export (no conversation has a mapping)")
    for number, item in enumerate(items, start=1):
        where = f"{source.name}: conversation #{number}"
        with imported.reading(where):
            imported.add(_conversation(item, imported), where)


def _text(content: Any) -> str:
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts")
    if isinstance(parts, list):
        texts = [p if isinstance(p, str) else p.get("text") for p in parts if _is_text(p)]
        return "\n".join(t for t in texts if isinstance(t, str))
    return content["text"] if isinstance(content.get("text"), str) else ""


def _is_text(part: Any) -> bool:
    return isinstance(part, str) or (
        isinstance(part, dict) and part.get("content_type") == "text" and "text" in part
    )


def _message(node: Any, created: int) -> dict[str, Any] | None:
    """The canonical message of a node; None for the hidden ones and tool traffic."""
    message = node.get("message") if isinstance(node, dict) else None
    if not isinstance(message, dict):
        return None
    role = (message.get("author") or {}).get("role")
    metadata = message.get("metadata") or {}
    if role not in _ROLES or metadata.get("is_visually_hidden_from_conversation"):
        return None
    if message.get("recipient", "all") != "all":
        return None
    text = _text(message.get("content"))
    files = [
        attachment(f.get("name"), f.get("mime_type") or f.get("mimeType"), size=f.get("size"))
        for f in metadata.get("attachments") or ()
        if isinstance(f, dict)
    ]
    if not text.strip() and not files:
        return None
    converted: dict[str, Any] = {
        "role": role,
        "content": text,
        "created_at": ms(message.get("create_time")) or created,
    }
    if files:
        converted["attachments"] = files
    if role == "assistant" and isinstance(metadata.get("model_slug"), str):
        converted["model"] = metadata["model_slug"]
    return converted


def _conversation(item: Any, imported: Imported) -> Conversation:
    if not isinstance(item, dict) or not isinstance(item.get("mapping"), dict):
        raise Unreadable("it is not a ChatGPT conversation (no mapping)")
    session_id = item.get("conversation_id") or item.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise Unreadable("it has no usable conversation_id or id")
    mapping = item["mapping"]
    parents = {key: (node or {}).get("parent") for key, node in mapping.items()}
    created = ms(item.get("create_time"))
    converted: dict[str, list[dict[str, Any]]] = {}
    for key, node in mapping.items():
        message = _message(node, created)
        if message is not None:
            converted[key] = [message]
        elif isinstance((node or {}).get("message"), dict):
            imported.leave_out(LEFT_OUT_PART)
    shown, branches = split(parents, item.get("current_node"), converted)
    return Conversation(
        session_id,
        shown,
        branches=branches,
        title=item.get("title"),
        created=created,
        updated=ms(item.get("update_time")),
    )
