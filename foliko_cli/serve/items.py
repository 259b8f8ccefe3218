"""Foliko messages as OpenAI items, and OpenAI input as foliko messages.

A turn's stored messages are its input (what the client sent: user,
system, assistant and tool messages) followed by its output (what the
model produced, and the results of tools the server ran). The output
begins at the turn's first assistant message written by a model (one that
names its ``model``); input messages never carry one. Ids: see ids.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from foliko_cli.messages.attachments import unavailable
from foliko_cli.serve import ids
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.images import data_url, image_part

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


def text_item(item_id: str, role: str, text: str, status: str = "completed") -> dict[str, Any]:
    if role == "assistant":
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        part["logprobs"] = []
    else:
        part = {"type": "input_text", "text": text}
    return {"type": "message", "id": item_id, "status": status, "role": role, "content": [part]}


def function_call_item(item_id: str, call: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call.get("id") or item_id,
        "name": call.get("name") or "",
        "arguments": dumps_arguments(call.get("arguments", {})),
        "status": "completed",
    }


def message_items(message: dict[str, Any], position: int, scope: str) -> list[dict[str, Any]]:
    role = message.get("role")
    content = str(message.get("content", ""))
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "id": ids.message_item_id(scope, position, "tool"),
                "call_id": message.get("tool_call_id") or "",
                "output": content,
                "status": "completed",
            }
        ]
    items = []
    if content or role != "assistant" or not message.get("tool_calls"):
        items.append(text_item(ids.message_item_id(scope, position), str(role), content))
    for image in message.get("attachments") or ():
        if image.get("type") == "image" and items:
            url = data_url(image)
            items[0]["content"].append(
                {"type": "input_image", "image_url": url, "detail": "auto"}
                if url is not None
                else {"type": "input_text", "text": unavailable(image)}
            )
    for index, call in enumerate(message.get("tool_calls") or []):
        items.append(function_call_item(ids.call_item_id(scope, position, index), call))
    return items


def history_items(messages: list[dict[str, Any]], first: int, scope: str) -> list[dict[str, Any]]:
    return [item for i, m in enumerate(messages) for item in message_items(m, first + i, scope)]


def output_start(turn: list[dict[str, Any]]) -> int:
    """Where the turn's output begins: its first assistant message a model wrote."""
    for offset, message in enumerate(turn):
        if message.get("role") == "assistant" and message.get("model"):
            return offset
    return len(turn)


def output_items(
    outputs: list[dict[str, Any]], first: int, scope: str, namespaces: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """What a response returns: the model's text, and the function calls no
    tool message of the turn answered (the client's to run), each with the
    ``namespace`` its function was offered in."""
    answered = {m.get("tool_call_id") for m in outputs if m.get("role") == "tool"}
    items = []
    for offset, message in enumerate(outputs):
        if message.get("role") != "assistant":
            continue
        position = first + offset
        if message.get("content"):
            item_id = ids.message_item_id(scope, position)
            items.append(text_item(item_id, "assistant", str(message["content"])))
        for index, call in enumerate(message.get("tool_calls") or []):
            if call.get("id") not in answered:
                item = function_call_item(ids.call_item_id(scope, position, index), call)
                if namespaces and call.get("name") in namespaces:
                    item["namespace"] = namespaces[call["name"]]
                items.append(item)
    return items


def incomplete_reason(outputs: list[dict[str, Any]]) -> str | None:
    """Why the model stopped short (``max_output_tokens``, ``content_filter``), or None."""
    for message in reversed(outputs):
        if message.get("role") == "assistant":
            return INCOMPLETE_REASONS.get(message.get("finish_reason") or "")
    return None


def turn_usage(turn: list[dict[str, Any]]) -> dict[str, Any]:
    spent = {"input_tokens": 0, "output_tokens": 0}
    for message in turn:
        for key in spent:
            spent[key] += int((message.get("usage") or {}).get(key, 0) or 0)
    return {
        "input_tokens": spent["input_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": spent["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": spent["input_tokens"] + spent["output_tokens"],
    }


def chat_usage(turn: list[dict[str, Any]]) -> dict[str, int]:
    """A turn's usage in Chat Completions' terms."""
    usage = turn_usage(turn)
    return {
        "prompt_tokens": usage["input_tokens"],
        "completion_tokens": usage["output_tokens"],
        "total_tokens": usage["total_tokens"],
    }


# input -> messages


def _text_of(content: Any, where: str) -> str:
    text, images = _content_of(content, where)
    if images:
        raise ApiError(400, f"{where}: only a user message may hold images", param="input")
    return text


def _content_of(content: Any, where: str) -> tuple[str, list[dict[str, Any]]]:
    """The content's text, and its ``input_image`` parts as attachment parts."""
    if isinstance(content, str):
        return content, []
    if isinstance(content, list):
        texts, images = [], []
        for number, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind in ("input_text", "output_text", "text", "refusal"):
                value = part.get("text", part.get("refusal", ""))
                texts.append(value if isinstance(value, str) else "")
            elif kind == "input_image":
                at = f"{where}.content[{number}]"
                images.append(image_part(part.get("image_url"), at, "input"))
            elif kind == "input_file":
                from foliko_cli.serve.files import file_text

                texts.append(file_text(part, f"{where}.content[{number}]"))
            else:
                raise ApiError(
                    400,
                    f"{where}: content part {kind!r} is not supported; "
                    "send input_text, input_image or input_file parts",
                    param="input",
                )
        return "".join(texts), images
    raise ApiError(400, f"{where}: content must be a string or a list of parts", param="input")


def _bad(where: str, problem: str) -> ApiError:
    return ApiError(400, f"{where}: {problem}", param="input")


def _call_of(item: dict[str, Any], at: str) -> dict[str, Any]:
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise _bad(at, "a function_call needs call_id and name strings")
    arguments = item.get("arguments")
    if arguments is not None and not isinstance(arguments, str | dict):
        raise _bad(at, "a function_call's arguments must be a JSON string")
    return {"id": call_id, "name": name, "arguments": loads_arguments(arguments or "{}")}


def input_messages(items: Any, where: str = "input") -> list[dict[str, Any]]:
    """Canonical messages for OpenAI input items; tool messages lack their ``name``.

    The function calls of one model turn are one assistant message: a call
    joins the assistant message (text or calls) right before it, as the
    client received them. ``reasoning`` items are dropped: foliko keeps no
    reasoning. ``item_reference`` items must be resolved first.
    """
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ApiError(400, f"{where} must be a string or a list of items", param=where)
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise _bad(at, "an item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role == "developer":
                role = "system"
            if role not in ("user", "assistant", "system"):
                raise _bad(at, "role must be user, assistant, system or developer")
            if role == "user":
                text, images = _content_of(item.get("content"), at)
                message: dict[str, Any] = {"role": role, "content": text}
                if images:
                    message["attachments"] = images
                messages.append(message)
            else:
                messages.append({"role": role, "content": _text_of(item.get("content"), at)})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise _bad(at, "a function_call_output needs its call_id")
            output = item.get("output", "")
            text = output if isinstance(output, str) else _text_of(output, at)
            messages.append({"role": "tool", "content": text, "tool_call_id": call_id})
        elif kind == "function_call":
            call = _call_of(item, at)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "reasoning":
            continue
        elif kind == "compaction":
            raise _bad(at, "a compaction item must come first; send the compact output as it came")
        elif kind == "item_reference":
            raise _bad(at, f"no stored item {item.get('id')!r}")
        else:
            raise _bad(at, f"item type {kind!r} is not supported")
    return messages


Loader = Callable[[str], Awaitable[list[dict[str, Any]] | None]]


async def resolve_references(items: Any, load: Loader) -> Any:
    """``items`` with each ``item_reference`` replaced by the item it names.

    ``load(session_id)`` returns a session's messages (None: no such
    session, or not the caller's); a reference to anything else is a 404.
    """
    if not isinstance(items, list) or not any(
        isinstance(item, dict) and item.get("type") == "item_reference" for item in items
    ):
        return items
    histories: dict[str, list[dict[str, Any]] | None] = {}
    resolved = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") != "item_reference":
            resolved.append(item)
            continue
        wanted = item.get("id")
        ref = ids.parse_item_id(wanted)
        found = None
        if ref is not None:
            if ref.session_id not in histories:
                histories[ref.session_id] = await load(ref.session_id)
            history = histories[ref.session_id] or []
            if ref.position < len(history):
                scope = ids.scope_of(ref.session_id)
                candidates = message_items(history[ref.position], ref.position, scope)
                found = next((c for c in candidates if c["id"] == wanted), None)
        if found is None:
            shown = wanted if isinstance(wanted, str) and len(wanted) <= 200 else "(this id)"
            raise ApiError(
                404, f"input[{index}]: no stored item {shown!r}", code="not_found", param="input"
            )
        resolved.append(found)
    return resolved


def name_tool_outputs(messages: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
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
                    param="input",
                )
            message["name"] = name


def page_of(items: list[dict[str, Any]], request: Any) -> dict[str, Any]:
    """One page of ``items`` (oldest first) by the ``limit``, ``order`` and
    ``after`` query parameters, in OpenAI's list shape."""
    from foliko_cli.serve.common import query_int

    limit = query_int(request, "limit", 20, 1, 100)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, "order must be asc or desc", param="order")
    ordered = items if order == "asc" else items[::-1]
    after = request.query_params.get("after")
    if after is not None:
        positions = {item["id"]: i for i, item in enumerate(ordered)}
        if after not in positions:
            raise ApiError(400, f"after: no item {after[:200]!r} in this list", param="after")
        ordered = ordered[positions[after] + 1 :]
    page = ordered[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > limit,
    }
