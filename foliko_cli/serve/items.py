"""Foliko messages as OpenAI items, and OpenAI input as foliko messages.

Item ids are derived from the message's position in the session's history,
so they are the same on every read and after a restart: ``msg_P`` (a
message), ``fc_P_K`` (the K-th function call of the assistant message at
P), ``fco_P`` (a function call's output). A response id names the session
and the position of the turn's last message (``resp_P_<session id in
base64url>``), so ``GET /v1/responses/{id}`` rebuilds the response from the
stored messages: nothing else has to be kept.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

import orjson

from foliko_cli.attachments import unavailable
from foliko_cli.models.base import TOOL_CHOICE_MODES
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.images import data_url, image_part

_UNSTORED = "resp_x"


def dumps_arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


def loads_arguments(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError:
        return text


# ids


def response_id(session_id: str, position: int) -> str:
    encoded = base64.urlsafe_b64encode(session_id.encode()).decode().rstrip("=")
    return f"resp_{position}_{encoded}"


def unstored_response_id() -> str:
    return _UNSTORED + os.urandom(12).hex()


def parse_response_id(value: Any) -> tuple[str, int]:
    """(session id, position) of a stored response; ApiError 404 for anything else."""
    not_found = ApiError(404, f"response {value!r} not found", code="response_not_found")
    if not isinstance(value, str) or not value.startswith("resp_") or value.startswith(_UNSTORED):
        raise not_found
    parts = value.split("_", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        raise not_found
    encoded = parts[2] + "=" * (-len(parts[2]) % 4)
    try:
        session_id = base64.urlsafe_b64decode(encoded.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise not_found from None
    return session_id, int(parts[1])


def item_order(item_id: str) -> tuple[int, int] | None:
    """Where an item id sits in the history (position, part), or None."""
    kind, _, rest = item_id.partition("_")
    numbers = rest.split("_")
    if kind not in ("msg", "fc", "fco") or not all(n.isdigit() for n in numbers):
        return None
    if kind == "fc" and len(numbers) == 2:
        return int(numbers[0]), 1 + int(numbers[1])
    if kind != "fc" and len(numbers) == 1:
        return int(numbers[0]), 0
    return None


# messages -> items


def text_item(position: int, role: str, text: str, status: str = "completed") -> dict[str, Any]:
    if role == "assistant":
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    else:
        part = {"type": "input_text", "text": text}
    return {
        "type": "message",
        "id": f"msg_{position}",
        "status": status,
        "role": role,
        "content": [part],
    }


def function_call_item(position: int, index: int, call: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{position}_{index}",
        "call_id": call.get("id") or f"call_{position}_{index}",
        "name": call.get("name") or "",
        "arguments": dumps_arguments(call.get("arguments", {})),
        "status": "completed",
    }


def message_items(message: dict[str, Any], position: int) -> list[dict[str, Any]]:
    role = message.get("role")
    content = str(message.get("content", ""))
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "id": f"fco_{position}",
                "call_id": message.get("tool_call_id") or "",
                "output": content,
                "status": "completed",
            }
        ]
    items = []
    if content or role != "assistant" or not message.get("tool_calls"):
        items.append(text_item(position, str(role), content))
    for image in message.get("attachments") or ():
        if image.get("type") == "image" and items:
            url = data_url(image)
            items[0]["content"].append(
                {"type": "input_image", "image_url": url, "detail": "auto"}
                if url is not None
                else {"type": "input_text", "text": unavailable(image)}
            )
    for index, call in enumerate(message.get("tool_calls") or []):
        items.append(function_call_item(position, index, call))
    return items


def history_items(messages: list[dict[str, Any]], first: int = 0) -> list[dict[str, Any]]:
    return [item for i, m in enumerate(messages) for item in message_items(m, first + i)]


def output_items(turn: list[dict[str, Any]], first: int) -> list[dict[str, Any]]:
    """What a response returns of its turn: the assistant's text, and the
    function calls no tool message in the turn answered (the client's to run)."""
    answered = {m.get("tool_call_id") for m in turn if m.get("role") == "tool"}
    items = []
    for offset, message in enumerate(turn):
        if message.get("role") != "assistant":
            continue
        position = first + offset
        if message.get("content"):
            items.append(text_item(position, "assistant", str(message["content"])))
        for index, call in enumerate(message.get("tool_calls") or []):
            if call.get("id") not in answered:
                items.append(function_call_item(position, index, call))
    return items


def turn_usage(turn: list[dict[str, Any]]) -> dict[str, Any]:
    spent = {"input_tokens": 0, "output_tokens": 0}
    for message in turn:
        for key in spent:
            spent[key] += int((message.get("usage") or {}).get(key, 0) or 0)
    return {
        "input_tokens": spent["input_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": spent["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": spent["input_tokens"] + spent["output_tokens"],
    }


# input -> messages


def _text_of(content: Any, where: str) -> str:
    text, images = _content_of(content, where)
    if images:
        raise ApiError(400, f"{where}: only a user message may hold images")
    return text


def _content_of(content: Any, where: str) -> tuple[str, list[dict[str, Any]]]:
    """The content's text, and its ``input_image`` parts as attachment parts."""
    if isinstance(content, str):
        return content, []
    if isinstance(content, list):
        texts, images = [], []
        for number, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind in ("input_text", "output_text", "text"):
                texts.append(str(part.get("text", "")))
            elif kind == "input_image":
                at = f"{where}.content[{number}]"
                images.append(image_part(part.get("image_url"), at, "input"))
            else:
                raise ApiError(
                    400, f"{where}: content part {kind!r} is not supported; send text or images"
                )
        return "".join(texts), images
    raise ApiError(400, f"{where}: content must be a string or a list of parts")


def input_messages(items: Any, where: str = "input") -> list[dict[str, Any]]:
    """Canonical messages for OpenAI input items; tool messages lack their ``name``."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ApiError(400, f"{where} must be a string or a list of items")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{at} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role == "developer":
                role = "system"
            if role not in ("user", "assistant", "system"):
                raise ApiError(400, f"{at}: role must be user, assistant, system or developer")
            if role == "user":
                text, images = _content_of(item.get("content"), at)
                message = {"role": role, "content": text}
                if images:
                    message["attachments"] = images
                messages.append(message)
            else:
                messages.append({"role": role, "content": _text_of(item.get("content"), at)})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ApiError(400, f"{at}: a function_call_output needs its call_id")
            output = item.get("output", "")
            text = output if isinstance(output, str) else _text_of(output, at)
            messages.append({"role": "tool", "content": text, "tool_call_id": call_id})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise ApiError(400, f"{at}: a function_call needs call_id and name")
            call = {
                "id": call_id,
                "name": name,
                "arguments": loads_arguments(item.get("arguments")),
            }
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        else:
            raise ApiError(400, f"{at}: item type {kind!r} is not supported")
    return messages


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


def function_tools(tools: Any) -> tuple[dict[str, Any], ...]:
    """Foliko tool specs for the request's function tools (Responses or Chat shape)."""
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list", param="tools")
    specs = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ApiError(400, f"tools[{index}]: only function tools are supported", param="tools")
        function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, f"tools[{index}]: a function tool needs a name", param="tools")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise ApiError(400, f"tools[{index}]: parameters must be a JSON schema object")
        specs.append(
            {
                "name": name,
                "description": str(function.get("description") or ""),
                "input_schema": parameters,
            }
        )
    return tuple(specs)


def tool_choice(value: Any) -> str | None:
    """The ``tool_choice`` option a request asks for: a mode, or the name of the
    function it forces (``{"type": "function", "name": ...}`` as the Responses
    API writes it, ``{"type": "function", "function": {"name": ...}}`` as Chat
    Completions does)."""
    if value is None or (isinstance(value, str) and value in TOOL_CHOICE_MODES):
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else value.get("name")
        if isinstance(name, str) and name and name not in TOOL_CHOICE_MODES:
            return name
    raise ApiError(
        400,
        "tool_choice must be auto, none, required or a function to call by name",
        param="tool_choice",
    )


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
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise ApiError(400, f"after: no item {after!r} in this list", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    page = ordered[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > limit,
    }
