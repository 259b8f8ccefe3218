"""Claude.ai: the ``conversations.json`` of Settings > Privacy > Export data.

A list of conversations (``uuid``, ``name``, ``created_at``, ``updated_at``,
``chat_messages``); each message has a ``sender`` (``human`` or
``assistant``), its ``text`` and its ``content`` blocks (``text``,
``thinking``, ``tool_use``, ``tool_result``), and what the user attached:
``attachments`` (with the ``extracted_content`` Claude read) and ``files``.
Messages carry ``parent_message_uuid`` when the export keeps the tree; without
it, the list is in order and a run of messages from the same sender is the
versions of one message (an edited prompt), the last being the one shown.
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
    Replies,
    attachment,
    ms,
    result_text,
    text_of,
    with_text_attachment,
)
from foliko_cli.formats.importers.tree import split

NAME = "claude"
LABEL = "a Claude.ai export (conversations.json)"
FILES = ("conversations.json",)
_FIX = "give the conversations.json of a Claude.ai data export"


def _items(document: Any) -> list[Any]:
    return document if isinstance(document, list) else [document]


def _is_conversation(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("chat_messages"), list)


def sniff(source: Source) -> bool:
    return any(_is_conversation(item) for item in _items(source.document())[:SNIFFED])


def read(source: Source, imported: Imported) -> None:
    document = source.document()
    if document is None:
        raise UsageError(f"{source.name} is not JSON", fix=_FIX)
    items = _items(document)
    if items and not any(_is_conversation(item) for item in items):
        raise UsageError(
            f"{source.name} is not a Claude.ai export (no conversation has chat_messages)",
            fix=_FIX,
        )
    for number, item in enumerate(items, start=1):
        where = f"{source.name}: conversation #{number}"
        with imported.reading(where):
            imported.add(_conversation(item, imported), where)


def _conversation(item: Any, imported: Imported) -> Conversation:
    if not _is_conversation(item):
        raise Unreadable("it is not a Claude.ai conversation (no chat_messages)")
    if not isinstance(item.get("uuid"), str):
        raise Unreadable("it has no uuid")
    messages = item["chat_messages"]
    tree = any(isinstance(m, dict) and "parent_message_uuid" in m for m in messages)
    parents: dict[str, Any] = {}
    converted: dict[str, list[dict[str, Any]]] = {}
    previous: tuple[Any, Any, Any] = (None, None, None)  # id, sender, parent
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise Unreadable(f"message #{index + 1} is not an object")
        key = message.get("uuid") or f"#{index}"
        sender = message.get("sender")
        if tree:
            parents[key] = message.get("parent_message_uuid")
        else:
            parents[key] = previous[2] if sender == previous[1] else previous[0]
        previous = (key, sender, parents[key])
        converted[key] = _messages(message, key, imported)
    current = item.get("current_leaf_message_uuid")
    shown, branches = split(parents, current, converted, strict=False)
    return Conversation(
        item["uuid"],
        shown,
        branches=branches,
        title=item.get("name"),
        created=ms(item.get("created_at")),
        updated=ms(item.get("updated_at")),
        model=item.get("model"),
    )


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, list) and content:
        return [block for block in content if isinstance(block, dict)]
    return [{"type": "text", "text": text_of(message.get("text"))}]


def _messages(message: dict[str, Any], key: str, imported: Imported) -> list[dict[str, Any]]:
    at = ms(message.get("created_at"))
    if message.get("sender") == "human":
        return [_asked(message, at)]
    if message.get("sender") != "assistant":
        imported.leave_out(LEFT_OUT_PART)
        return []
    replies, last_call = Replies(at), None
    for number, block in enumerate(_blocks(message)):
        kind = block.get("type")
        if kind == "text":
            replies.text(text_of(block.get("text")))
        elif kind == "tool_use":
            call_id = block.get("id") or f"{key}-{number}"
            replies.call(call_id, text_of(block.get("name")), block.get("input"))
            last_call = call_id
        elif kind == "tool_result":
            call_id = block.get("tool_use_id") or last_call or f"{key}-{number}"
            content = result_text(block.get("content"))
            replies.result(
                call_id, text_of(block.get("name")), content, is_error=bool(block.get("is_error"))
            )
        else:
            imported.leave_out(LEFT_OUT_PART)
    return replies.done()


def _asked(message: dict[str, Any], at: int) -> dict[str, Any]:
    texts = [text_of(b.get("text")) for b in _blocks(message) if b.get("type") == "text"]
    asked: dict[str, Any] = {"role": "user", "content": "\n\n".join(t for t in texts if t)}
    asked["created_at"] = at
    named = set()
    for file in message.get("attachments") or ():
        if not isinstance(file, dict):
            continue
        name = text_of(file.get("file_name")) or "attachment"
        named.add(name)
        if isinstance(file.get("extracted_content"), str):
            with_text_attachment(asked, name, file["extracted_content"])
        else:
            part = attachment(name, file.get("file_type"), size=file.get("file_size"))
            asked.setdefault("attachments", []).append(part)
    for file in message.get("files") or message.get("files_v2") or ():
        name = text_of((file or {}).get("file_name"))
        if name and name not in named:
            asked.setdefault("attachments", []).append(attachment(name))
    return asked
