"""Foliko messages as OpenAI items, and OpenAI input as foliko messages.

A turn's stored messages are its input (what the client sent: user,
system, assistant and tool messages) followed by its output (what the
model produced, and the results of tools the server ran). The output
begins at the turn's first assistant message written by a model (one that
names its ``model``); input messages never carry one. Ids: see ids.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import orjson

from foliko_cli.messages.attachments import unavailable
from foliko_cli.messages.item_numbers import ITEM, number_of, position_of
from foliko_cli.serve import ids
from foliko_cli.serve.chat_types import CalledFunction, ChatPart, ToolCall
from foliko_cli.serve.compaction_item import compaction_item
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.images import data_url, image_part
from foliko_cli.serve.openai_types import (
    CompactionItem,
    Content,
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    Input,
    InputImage,
    InputItem,
    InputText,
    Item,
    MessageItem,
    OutputItem,
    OutputText,
    Status,
    Usage,
)

INCOMPLETE_REASONS = {
    "length": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "content_filter": "content_filter",
}


def dumps_arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


def loads_arguments(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError:
        return text


# messages -> items


def text_item(item_id: str, role: str, text: str, status: Status = "completed") -> MessageItem:
    part = OutputText(text=text) if role == "assistant" else InputText(text=text)
    return MessageItem(id=item_id, status=status, role=role, content=[part])


def function_call_item(item_id: str, call: dict[str, Any]) -> FunctionCallItem:
    return FunctionCallItem(
        id=item_id,
        call_id=call.get("id") or item_id,
        name=call.get("name") or "",
        arguments=dumps_arguments(call.get("arguments", {})),
    )


def tool_call(call: dict[str, Any]) -> ToolCall:
    """A stored call as Chat Completions shows it."""
    arguments = dumps_arguments(call.get("arguments", {}))
    return ToolCall(id=call["id"], function=CalledFunction(name=call["name"], arguments=arguments))


def message_items(message: dict[str, Any], number: int, scope: str) -> list[Item]:
    """The items of the message whose item number is ``number``."""
    role = message.get("role")
    content = str(message.get("content", ""))
    if role == "tool":
        item_id = ids.message_item_id(scope, number, "tool")
        call_id = message.get("tool_call_id") or ""
        return [FunctionCallOutputItem(id=item_id, call_id=call_id, output=content)]
    items: list[Item] = []
    text = None
    if content or role != "assistant" or not message.get("tool_calls"):
        text = text_item(ids.message_item_id(scope, number), str(role), content)
        items.append(text)
    for image in message.get("attachments") or ():
        if image.get("type") == "image" and text is not None:
            url = data_url(image)
            text.content.append(
                InputImage(image_url=url) if url is not None else InputText(text=unavailable(image))
            )
    for index, call in indexed_calls(message):
        items.append(function_call_item(ids.call_item_id(scope, number, index), call))
    return items


def indexed_calls(message: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """A message's function calls, each with its index among them (kept by a
    call whose earlier siblings were deleted)."""
    return [
        (call[ITEM] if type(call.get(ITEM)) is int else index, call)
        for index, call in enumerate(message.get("tool_calls") or [])
    ]


def history_items(
    messages: list[dict[str, Any]], first: int, scope: str, offset: int = 0
) -> list[Item]:
    """The items of ``messages``, the first at position ``first`` of a session
    whose ``item_offset`` is ``offset``."""
    return [
        item
        for i, m in enumerate(messages)
        for item in message_items(m, number_of(m, first + i, offset), scope)
    ]


def output_start(turn: list[dict[str, Any]]) -> int:
    """Where the turn's output begins: its first assistant message a model wrote."""
    for offset, message in enumerate(turn):
        if message.get("role") == "assistant" and message.get("model"):
            return offset
    return len(turn)


def output_items(
    outputs: list[dict[str, Any]],
    first: int,
    scope: str,
    namespaces: dict[str, str] | None = None,
    history: tuple[list[dict[str, Any]], int] | None = None,
    offset: int = 0,
) -> list[OutputItem]:
    """What a response returns: a compaction item where the turn compacted the
    history, the model's text, and the function calls no tool message of the
    turn answered (the client's to run), each with the ``namespace`` its
    function was offered in. ``history`` is the session's messages known here
    and the position of the first (a compaction item carries those it kept);
    ``offset`` the session's item offset."""
    answered = {m.get("tool_call_id") for m in outputs if m.get("role") == "tool"}
    items: list[OutputItem] = []
    for at, message in enumerate(outputs):
        if message.get("role") != "assistant":
            continue
        position = first + at
        number = number_of(message, position, offset)
        compactions = [e for e in message.get("compactions") or () if isinstance(e, dict)]
        if compactions and compactions[-1].get("summary"):
            items.append(_compaction(compactions[-1], position, number, scope, history))
        if message.get("content"):
            item_id = ids.message_item_id(scope, number)
            items.append(text_item(item_id, "assistant", str(message["content"])))
        for index, call in indexed_calls(message):
            if call.get("id") not in answered:
                item = function_call_item(ids.call_item_id(scope, number, index), call)
                if namespaces and call.get("name") in namespaces:
                    item.namespace = namespaces[call["name"]]
                items.append(item)
    return items


def _compaction(
    entry: dict[str, Any],
    position: int,
    number: int,
    scope: str,
    history: tuple[list[dict[str, Any]], int] | None,
) -> CompactionItem:
    messages, start = history or ([], position)
    covered = entry.get("covered")
    covered = covered if isinstance(covered, int) else position
    tail = messages[max(0, covered - start) : max(0, position - start)]
    item_id = ids.compaction_item_id(scope, number)
    return compaction_item(item_id, str(entry["summary"]), tail)


def incomplete_reason(outputs: list[dict[str, Any]]) -> str | None:
    """Why the model stopped short (``max_output_tokens``, ``content_filter``), or None."""
    for message in reversed(outputs):
        if message.get("role") == "assistant":
            return INCOMPLETE_REASONS.get(message.get("finish_reason") or "")
    return None


def turn_usage(turn: list[dict[str, Any]]) -> Usage:
    spent = {"input_tokens": 0, "output_tokens": 0}
    for message in turn:
        for key in spent:
            spent[key] += int((message.get("usage") or {}).get(key, 0) or 0)
    return usage_of(spent)


def usage_of(spent: dict[str, Any]) -> Usage:
    """A model call's counters (``input_tokens``, ``output_tokens``) as Usage."""
    given = int(spent.get("input_tokens") or 0)
    made = int(spent.get("output_tokens") or 0)
    return Usage(input_tokens=given, output_tokens=made, total_tokens=given + made)


# input -> messages


def _text_of(content: Content | None, where: str, param: str) -> str:
    return content_of(content, where, param, images=False)[0]


def content_of(
    content: str | Sequence[ContentPart | ChatPart] | None,
    where: str,
    param: str,
    images: bool = True,
) -> tuple[str, list[dict[str, Any]]]:
    """A message's text, and its images as attachment parts (both APIs' parts:
    ``input_image`` and ``image_url``; ``images`` false: a 400 for one)."""
    if content is None or isinstance(content, str):
        return content or "", []
    texts, found = [], []
    for number, part in enumerate(content):
        at = f"{where}.content[{number}]"
        if part.type in ("input_image", "image_url"):
            if not images:
                raise ApiError(400, f"{where}: only a user message may hold images", param=param)
            url = part.image_url
            found.append(image_part(getattr(url, "url", url), at, param))
        elif part.type == "input_file":
            from foliko_cli.serve.files import file_text

            texts.append(file_text(part, at, param))
        else:
            texts.append(part.text or getattr(part, "refusal", None) or "")
    return "".join(texts), found


def _call_of(item: InputItem, where: str, param: str) -> dict[str, Any]:
    if not item.call_id or not item.name:
        raise ApiError(400, f"{where}: a function_call needs call_id and name", param=param)
    return {
        "id": item.call_id,
        "name": item.name,
        "arguments": loads_arguments(item.arguments or "{}"),
    }


def input_messages(items: Input, param: str = "input") -> list[dict[str, Any]]:
    """Canonical messages for OpenAI input items; tool messages lack their ``name``.

    The function calls of one model turn are one assistant message: a call
    joins the assistant message (text or calls) right before it, as the
    client received them. ``reasoning`` items are dropped: foliko keeps no
    reasoning. ``item_reference`` items must be resolved first.
    """
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        at = f"{param}[{index}]"
        if item.type == "message":
            if item.role is None:
                raise ApiError(400, f"{at}.role is required", param=param)
            role = "system" if item.role == "developer" else item.role
            if role == "user":
                text, images = content_of(item.content, at, param)
                message: dict[str, Any] = {"role": role, "content": text}
                if images:
                    message["attachments"] = images
                messages.append(message)
            else:
                messages.append({"role": role, "content": _text_of(item.content, at, param)})
        elif item.type == "function_call_output":
            if not item.call_id:
                raise ApiError(400, f"{at}: a function_call_output needs its call_id", param=param)
            output = _text_of(item.output, at, param)
            messages.append({"role": "tool", "content": output, "tool_call_id": item.call_id})
        elif item.type == "function_call":
            call = _call_of(item, at, param)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif item.type == "compaction":
            problem = "a compaction item belongs in the input of a response or a compaction"
            raise ApiError(400, f"{at}: {problem}", param=param)
        elif item.type == "item_reference":
            raise ApiError(400, f"{at}: no stored item {item.id!r}", param=param)
    return messages


Loader = Callable[[str], Awaitable[tuple[list[dict[str, Any]], int] | None]]


def item_in(
    messages: list[dict[str, Any]], offset: int, ref: ids.ItemRef, wanted: str
) -> Item | None:
    """The item ``wanted`` (parsed as ``ref``) among a session's messages."""
    position = position_of(messages, ref.number, offset)
    if position is None:
        return None
    candidates = message_items(messages[position], ref.number, ids.scope_of(ref.session_id))
    return next((c for c in candidates if c.id == wanted), None)


async def resolve_references(items: Input, load: Loader) -> Input:
    """``items`` with each ``item_reference`` replaced by the item it names.

    ``load(session_id)`` returns a session's messages and item offset (None: no
    such session, or not the caller's); a reference to anything else is a 404.
    """
    if isinstance(items, str) or all(item.type != "item_reference" for item in items):
        return items
    histories: dict[str, tuple[list[dict[str, Any]], int] | None] = {}
    resolved = []
    for index, item in enumerate(items):
        if item.type != "item_reference":
            resolved.append(item)
            continue
        ref = ids.parse_item_id(item.id)
        found = None
        if ref is not None and item.id is not None:
            if ref.session_id not in histories:
                histories[ref.session_id] = await load(ref.session_id)
            history, offset = histories[ref.session_id] or ([], 0)
            found = item_in(history, offset, ref, item.id)
        if found is None:
            shown = item.id if item.id is not None and len(item.id) <= 200 else "(this id)"
            raise ApiError(
                404, f"input[{index}]: no stored item {shown!r}", code="not_found", param="input"
            )
        resolved.append(msgspec.convert(msgspec.to_builtins(found), InputItem))
    return resolved


def name_tool_outputs(
    messages: list[dict[str, Any]], history: list[dict[str, Any]], param: str = "input"
) -> None:
    """Give each tool message the name of the call it answers (from ``history``
    or earlier in ``messages``); a call no one made is bad input."""
    names = {}
    for message in [*history, *messages]:
        for call in message.get("tool_calls") or []:
            names[call.get("id")] = call.get("name")
    for message in messages:
        if message["role"] == "tool":
            name = names.get(message["tool_call_id"])
            if name is None:
                raise ApiError(
                    400,
                    f"no function call {message['tool_call_id']!r} is waiting for output",
                    param=param,
                )
            message["name"] = name
