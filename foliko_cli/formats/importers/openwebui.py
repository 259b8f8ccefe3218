"""Open WebUI: a chat export (Settings > Chats > Export chats, or a chat's
Download > Export chat (.json)): a list of chats as its API returns them
(``id``, ``title``, ``created_at``/``updated_at`` in epoch seconds, ``chat``).

``chat.history`` is the message tree (``messages``: id -> {parentId,
childrenIds, role, content, timestamp, model, files, usage}) and ``currentId``
the message shown; older chats have only the list ``chat.messages``. An
answer that called tools either lists Responses-style ``output`` items
(function calls, their outputs, reasoning, messages) or carries them in its
text as ``<details type="tool_calls" ...>`` blocks, read back here; reasoning
(``<details type="reasoning">``) is left out.
"""

from __future__ import annotations

import html
import re
from typing import Any

import orjson

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
    data_url,
    ms,
    result_text,
    text_of,
    usage,
)
from foliko_cli.formats.importers.tree import split

NAME = "openwebui"
LABEL = "an Open WebUI chat export (chat-export-*.json)"
FILES = ("*.json",)
_FIX = "give a file Open WebUI's Export chats wrote"
_ROLES = {"user", "system"}
_DETAILS = re.compile(
    r'<details\s+type="(?P<kind>[^"]*)"(?P<attrs>[^>]*)>(?P<body>.*?)</details>', re.S
)
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_SUMMARY = re.compile(r"<summary>.*?</summary>", re.S)


def _items(document: Any) -> list[Any]:
    return document if isinstance(document, list) else [document]


def _chat(item: Any) -> dict[str, Any] | None:
    """The chat of an exported item (a wrapped chat, or a bare one)."""
    if not isinstance(item, dict):
        return None
    chat = wrapper if isinstance(wrapper := item.get("chat"), dict) else item
    wrapped = chat is not item
    if isinstance(chat.get("history"), dict) or (
        wrapped and isinstance(chat.get("messages"), list)
    ):
        return chat
    return None


def sniff(source: Source) -> bool:
    return any(_chat(item) is not None for item in _items(source.document())[:SNIFFED])


def read(source: Source, imported: Imported) -> None:
    document = source.document()
    if document is None:
        raise UsageError(f"{source.name} is not JSON", fix=_FIX)
    items = _items(document)
    if items and not any(_chat(item) is not None for item in items):
        raise UsageError(f"{source.name} is not an Open WebUI chat export (no chat history)")
    for number, item in enumerate(items, start=1):
        where = f"{source.name}: chat #{number}"
        with imported.reading(where):
            imported.add(_conversation(item, imported), where)


def _conversation(item: Any, imported: Imported) -> Conversation:
    chat = _chat(item)
    if chat is None:
        raise Unreadable("it is not an Open WebUI chat (no history)")
    chat_id = item.get("id") or chat.get("id")
    if not isinstance(chat_id, str) or not chat_id:
        raise Unreadable("it has no id")
    history = found if isinstance(found := chat.get("history"), dict) else {}
    nodes = history.get("messages")
    if isinstance(nodes, dict) and nodes:
        parents = {key: (node or {}).get("parentId") for key, node in nodes.items()}
        current = history.get("currentId")
    else:
        listed = [m for m in chat.get("messages") or () if isinstance(m, dict)]
        nodes = {m.get("id") or f"#{n}": m for n, m in enumerate(listed)}
        keys = list(nodes)
        parents = {key: keys[n - 1] if n else None for n, key in enumerate(keys)}
        current = keys[-1] if keys else None
    if not nodes:
        return Conversation(chat_id, [])
    converted = {key: _messages(key, node, imported) for key, node in nodes.items()}
    shown, branches = split(parents, current, converted, strict=False)
    models = chat.get("models") if isinstance(chat.get("models"), list) else []
    return Conversation(
        chat_id,
        shown,
        branches=branches,
        title=item.get("title") or chat.get("title"),
        created=ms(item.get("created_at") or chat.get("timestamp")),
        updated=ms(item.get("updated_at")),
        model=models[0] if models else None,
    )


def _messages(key: str, node: Any, imported: Imported) -> list[dict[str, Any]]:
    if not isinstance(node, dict):
        raise Unreadable(f"message {key!r} is not an object")
    role = node.get("role")
    at = ms(node.get("timestamp"))
    if role in _ROLES:
        message: dict[str, Any] = {"role": role, "content": text_of(node.get("content"))}
        message["created_at"] = at
        files = [part for f in node.get("files") or () if (part := _file(f))]
        if files:
            message["attachments"] = files
        return [message]
    if role != "assistant":
        imported.leave_out(LEFT_OUT_PART)
        return []
    model = node.get("model") if isinstance(node.get("model"), str) else None
    replies = Replies(at, **({"model": model} if model else {}))
    output = node.get("output")
    if isinstance(output, list) and output:
        _from_output(output, replies, key, imported)
    else:
        _from_text(text_of(node.get("content")), replies, key, imported)
    found = node.get("usage")
    counts = usage(found, input_key="prompt_tokens", output_key="completion_tokens") or usage(
        found, input_key="input_tokens", output_key="output_tokens"
    )
    return replies.done(usage=counts)


def _file(file: Any) -> dict[str, Any] | None:
    if not isinstance(file, dict):
        return None
    if file.get("type") == "image" and (part := data_url(file.get("url"))):
        return part
    inner = found if isinstance(found := file.get("file"), dict) else {}
    meta = given if isinstance(given := inner.get("meta"), dict) else {}
    name = file.get("name") or inner.get("filename") or meta.get("name")
    return attachment(name, meta.get("content_type"), size=file.get("size") or meta.get("size"))


def _from_output(output: list[Any], replies: Replies, key: str, imported: Imported) -> None:
    for number, item in enumerate(output):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            replies.text("".join(text_of(c.get("text")) for c in item.get("content") or ()))
        elif kind == "function_call":
            call_id = text_of(item.get("call_id")) or f"{key}-{number}"
            replies.call(call_id, text_of(item.get("name")), item.get("arguments"))
        elif kind == "function_call_output":
            replies.result(text_of(item.get("call_id")), "", result_text(item.get("output")))
        else:
            imported.leave_out(LEFT_OUT_PART)


def _json_text(value: str) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def _from_text(content: str, replies: Replies, key: str, imported: Imported) -> None:
    at = 0
    for number, block in enumerate(_DETAILS.finditer(content)):
        replies.text(content[at : block.start()].strip())
        at = block.end()
        if block["kind"] != "tool_calls":
            imported.leave_out(LEFT_OUT_PART)
            continue
        found = {name: html.unescape(value) for name, value in _ATTRIBUTE.findall(block["attrs"])}
        call_id = found.get("id") or f"{key}-{number}"
        replies.call(call_id, found.get("name", ""), _json_text(found.get("arguments", "")))
        if "result" in found:
            result = _json_text(found["result"])
        else:
            result = _json_text(html.unescape(_SUMMARY.sub("", block["body"])).strip())
        replies.result(call_id, found.get("name", ""), result_text(result))
    replies.text(content[at:].strip())
