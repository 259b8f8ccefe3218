"""LibreChat: a conversation's export as JSON (the conversation menu > Export >
json): ``conversationId``, ``title``, ``endpoint``, ``options``, and the
messages, either listed (``messages``: the branch shown, or every branch) or
nested (``messagesTree``: each message with its ``children``).

A message has ``messageId`` and ``parentMessageId`` (all zeroes for the first
message), ``isCreatedByUser``, ``text``, ``model``, ``createdAt``, ``files``,
and for agents and assistants ``content`` parts (text, think, tool_call,
image_file, image_url, error). LibreChat shows the newest version at each
fork, so the branch shown is the one that takes the last child every time.
"""

from __future__ import annotations

from typing import Any

from foliko_cli.errors import UsageError
from foliko_cli.formats.importers.base import (
    LEFT_OUT_PART,
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
)
from foliko_cli.formats.importers.tree import last_descendant, split

NAME = "librechat"
LABEL = "a LibreChat conversation export (JSON)"
FILES = ("*.json",)
NO_PARENT = "00000000-0000-0000-0000-000000000000"


def _is_export(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and "conversationId" in document
        and isinstance(document.get("messages", document.get("messagesTree")), list)
    )


def sniff(source: Source) -> bool:
    return _is_export(source.document())


def read(source: Source, imported: Imported) -> None:
    document = source.document()
    if not _is_export(document):
        raise UsageError(
            f"{source.name} is not a LibreChat export (no conversationId with messages)",
            fix="give the JSON LibreChat's Export wrote",
        )
    with imported.reading(source.name):
        imported.add(_conversation(document, imported), source.name)


def _flattened(messages: list[Any]) -> list[dict[str, Any]]:
    flat, stack = [], list(reversed(messages))
    while stack:
        message = stack.pop()
        if isinstance(message, dict):
            flat.append(message)
            stack.extend(reversed(message.get("children") or ()))
    return flat


def _conversation(document: dict[str, Any], imported: Imported) -> Conversation:
    listed = _flattened(document.get("messages") or document.get("messagesTree") or [])
    nodes = {m.get("messageId") or f"#{n}": m for n, m in enumerate(listed)}
    parents = {
        key: None if m.get("parentMessageId") in (None, NO_PARENT) else m["parentMessageId"]
        for key, m in nodes.items()
    }
    children: dict[Any, list[Any]] = {}
    for key, parent in parents.items():
        children.setdefault(parent if parent in nodes else None, []).append(key)
    if not nodes:
        return Conversation(document["conversationId"], [])
    current = last_descendant(children[None][-1], lambda key: children.get(key, []))
    options = found if isinstance(found := document.get("options"), dict) else {}
    converted = {key: _messages(key, m, imported) for key, m in nodes.items()}
    shown, branches = split(parents, current, converted, strict=False)
    return Conversation(
        document["conversationId"],
        shown,
        branches=branches,
        title=document.get("title"),
        model=options.get("model"),
        extra={"endpoint": document.get("endpoint")},
    )


def _files(message: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for file in message.get("files") or ():
        if isinstance(file, dict):
            path = text_of(file.get("filepath"))
            url = path if path.startswith(("http://", "https://")) else None
            found.append(
                attachment(file.get("filename"), file.get("type"), size=file.get("bytes"), url=url)
            )
    return found


def _text(part: dict[str, Any], key: str) -> str:
    value = part.get(key)
    return text_of(value.get("value") if isinstance(value, dict) else value)


def _messages(key: str, message: dict[str, Any], imported: Imported) -> list[dict[str, Any]]:
    if not isinstance(message, dict):
        raise Unreadable(f"message {key!r} is not an object")
    at = ms(message.get("createdAt"))
    parts = [p for p in message.get("content") or () if isinstance(p, dict)]
    if message.get("isCreatedByUser"):
        texts = [_text(p, "text") for p in parts if p.get("type") == "text"]
        asked: dict[str, Any] = {
            "role": "user",
            "content": "\n\n".join(t for t in texts if t) or text_of(message.get("text")),
            "created_at": at,
        }
        files = _files(message) + [f for p in parts if (f := _image(p))]
        if files:
            asked["attachments"] = files
        return [asked]
    model = message.get("model") if isinstance(message.get("model"), str) else None
    replies = Replies(at, **({"model": model} if model else {}))
    if not parts:
        replies.text(text_of(message.get("text")))
    for number, part in enumerate(parts):
        kind = part.get("type")
        if kind in ("text", "error"):
            replies.text(_text(part, "text") or text_of(part.get("error")))
        elif kind == "tool_call" and isinstance(part.get("tool_call"), dict):
            _tool_call(part["tool_call"], f"{key}-{number}", replies)
        else:
            imported.leave_out(LEFT_OUT_PART)
    return replies.done()


def _image(part: dict[str, Any]) -> dict[str, Any] | None:
    if part.get("type") == "image_url":
        url = part.get("image_url")
        return data_url(url.get("url") if isinstance(url, dict) else url)
    if part.get("type") == "image_file" and isinstance(part.get("image_file"), dict):
        file = part["image_file"]
        return attachment(file.get("filename"), file.get("type"), size=file.get("bytes"))
    return None


def _tool_call(call: dict[str, Any], fallback_id: str, replies: Replies) -> None:
    """A tool call part with its output: an agent's (name, args, output), an
    assistant's function (function: name, arguments, output) or code
    interpreter (code_interpreter: input, outputs)."""
    call_id = text_of(call.get("id")) or fallback_id
    if isinstance(call.get("function"), dict):
        function = call["function"]
        name, args, output = function.get("name"), function.get("arguments"), function.get("output")
    elif isinstance(call.get("code_interpreter"), dict):
        code = call["code_interpreter"]
        name, args, output = "code_interpreter", {"input": code.get("input")}, code.get("outputs")
    else:
        name, args, output = call.get("name"), call.get("args"), call.get("output")
    replies.call(call_id, text_of(name), args)
    if output is not None:
        replies.result(call_id, text_of(name), result_text(output))
