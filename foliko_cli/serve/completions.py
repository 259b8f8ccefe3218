"""``/v1/chat/completions`` and ``/v1/models``.

A chat completion is stateless: its ``messages`` are the whole history and
nothing is stored. With ``X-Session-Id: NAME`` it is a turn of session NAME
instead: only the request's last user message is sent (after the stored
history) and the turn is saved. With ``store: true`` the completion is also
kept, to be listed and read back (stored_completions.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.serve import items as it
from foliko_cli.serve.common import JSON, field, json_body, request_context, service
from foliko_cli.serve.errors import SHUTTING_DOWN, ApiError, error_event
from foliko_cli.serve.formats import reply_schema
from foliko_cli.serve.images import attached, image_part
from foliko_cli.serve.stored_completions import Keeper
from foliko_cli.serve.streaming import EventStream
from foliko_cli.serve.tools import function_tools, tool_choice
from foliko_cli.serve.turns import Turn

SESSION_HEADER = "x-session-id"


def _content(message: dict[str, Any], index: int) -> tuple[str, list[dict[str, Any]]]:
    """The message's text and its images as attachment parts (user messages only)."""
    content = message.get("content")
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if isinstance(content, list):
        texts, images = [], []
        for number, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(str(part.get("text", "")))
            elif kind == "image_url" and message.get("role") == "user":
                value = part.get("image_url")
                url = value.get("url") if isinstance(value, dict) else value
                where = f"messages[{index}].content[{number}]"
                images.append(image_part(url, where, "messages"))
            else:
                raise ApiError(
                    400,
                    f"messages[{index}]: only text (and, from the user, image_url) parts "
                    "are supported",
                )
        return "".join(texts), images
    raise ApiError(400, f"messages[{index}].content must be a string or a list of parts")


def _calls(raw: Any, index: int) -> list[dict[str, Any]]:
    where = f"messages[{index}].tool_calls"
    if not isinstance(raw, list):
        raise ApiError(400, f"{where} must be a list of calls", param="messages")
    calls = []
    for number, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str):
            raise ApiError(
                400,
                f"{where}[{number}]: a call needs an id and a function {{name, arguments}}",
                param="messages",
            )
        name, arguments = function.get("name"), function.get("arguments", "{}")
        if not isinstance(name, str) or not isinstance(arguments, str | dict):
            raise ApiError(
                400,
                f"{where}[{number}]: the function needs a name and arguments as a JSON string",
                param="messages",
            )
        calls.append({"id": call["id"], "name": name, "arguments": it.loads_arguments(arguments)})
    return calls


def canonical_messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    messages = []
    for index, message in enumerate(raw):
        if not isinstance(message, dict):
            raise ApiError(400, f"messages[{index}] must be an object", param="messages")
        role = message.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise ApiError(400, f"messages[{index}]: unknown role {role!r}", param="messages")
        text, images = _content(message, index)
        converted: dict[str, Any] = {"role": role, "content": text}
        if images:
            converted["attachments"] = images
        if role == "assistant" and message.get("tool_calls") is not None:
            converted["tool_calls"] = _calls(message["tool_calls"], index)
        if role == "tool":
            if not isinstance(message.get("tool_call_id"), str):
                raise ApiError(400, f"messages[{index}]: a tool message needs tool_call_id")
            converted["tool_call_id"] = message["tool_call_id"]
        messages.append(converted)
    return messages


def session_header(request: Request) -> str | None:
    """The ``X-Session-Id`` header as UTF-8 text (HTTP carries bytes; Starlette
    reads them as Latin-1)."""
    raw = request.headers.get(SESSION_HEADER)
    if raw is None:
        return None
    try:
        return raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise ApiError(400, f"{SESSION_HEADER} must be UTF-8 text", param=SESSION_HEADER) from None


def plan(request: Request, data: dict[str, Any]) -> Turn:
    svc = service(request)
    messages = canonical_messages(data.get("messages"))
    sampling = {
        "temperature": field(data, "temperature", (int, float)),
        "top_p": field(data, "top_p", (int, float)),
        "max_tokens": field(data, "max_completion_tokens", int) or field(data, "max_tokens", int),
        "seed": field(data, "seed", int),
        "stop": data.get("stop"),
        "tool_choice": tool_choice(data.get("tool_choice")),
        "parallel_tool_calls": False if field(data, "parallel_tool_calls", bool) is False else None,
    }
    if field(data, "n", int, 1) != 1:
        raise ApiError(400, "n must be 1: a turn has one answer", param="n")
    if field(data, "logprobs", bool) or field(data, "top_logprobs", int):
        raise ApiError(400, "logprobs are not available; ask without them", param="logprobs")
    options = {
        "model": field(data, "model", str),
        "request": request_context(request, svc),
        "client_tools": function_tools(data.get("tools")),
        "server_tools": request.app.state.services.serve_tools,
        "options": {key: value for key, value in sampling.items() if value is not None},
        "schema": reply_schema(data.get("response_format"), "response_format", nested=True),
    }
    stop = sampling["stop"]
    if stop is not None and not (
        isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise ApiError(400, "stop must be a string or a list of strings", param="stop")
    session_id = session_header(request)
    if session_id is not None:
        users = [m for m in messages if m["role"] == "user"]
        if not users:
            raise ApiError(400, f"with {SESSION_HEADER}, messages must hold a user message")
        systems = [m["content"] for m in messages if m["role"] == "system"]
        if systems:
            options["instructions"] = "\n\n".join(systems)
        last = users[-1]
        options["attachments"] = attached(last)
        return Turn(svc, session_id, last["content"], messages=(), api="chat", **options)
    systems = [m["content"] for m in messages if m["role"] == "system"]
    history = [m for m in messages if m["role"] != "system"]
    if history and history[-1]["role"] == "user":
        text, extra = history[-1]["content"], []
        options["attachments"] = attached(history[-1])
        history = history[:-1]
    else:
        tail: list[dict[str, Any]] = []
        while history and history[-1]["role"] == "tool":
            tail.insert(0, history.pop())
        if not tail:
            raise ApiError(400, "the last message must be a user or a tool message")
        it.name_tool_outputs(tail, history)
        text, extra = "", tail
    if systems:
        options["instructions"] = "\n\n".join(systems)
    return Turn(svc, None, text, scratch=history, messages=tuple(extra), api="chat", **options)


def shutdown_ending() -> bytes:
    """The end of a stream the server stopped: an error chunk, then ``[DONE]``."""
    return b"data: " + orjson.dumps({"error": error_event(SHUTTING_DOWN)}) + b"\n\ndata: [DONE]\n\n"


def completion_id() -> str:
    return "chatcmpl-" + os.urandom(12).hex()


def _tool_calls(turn: Turn) -> list[dict[str, Any]]:
    answered = {m.get("tool_call_id") for m in turn.messages if m.get("role") == "tool"}
    calls = []
    for message in turn.messages:
        for call in message.get("tool_calls") or []:
            if call.get("id") not in answered:
                calls.append(
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": it.dumps_arguments(call.get("arguments", {})),
                        },
                    }
                )
    return calls


def _finish(turn: Turn) -> str:
    reason = turn.result.finish_reason if turn.result else "stop"
    reason = "length" if reason == "max_tokens" else reason
    return reason if reason in ("stop", "length", "tool_calls", "content_filter") else "stop"


async def chat_completions(request: Request):
    data = await json_body(request)
    stream = field(data, "stream", bool, False)
    turn = plan(request, data)
    keep = Keeper(request, data, canonical_messages)
    services = request.app.state.services
    model = field(data, "model", str)
    if stream:
        include_usage = bool((field(data, "stream_options", dict) or {}).get("include_usage"))
        events = await turn.stream(services)
        return EventStream(
            keep.streamed(turn, chunks(turn, events, model, include_usage)), shutdown_ending
        )
    result = await turn.run(services)
    message: dict[str, Any] = {"role": "assistant", "content": result.message}
    calls = _tool_calls(turn)
    if calls:
        message["tool_calls"] = calls
    return await keep.kept(
        turn,
        {
            "id": completion_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model or result.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": _finish(turn), "logprobs": None}
            ],
            "usage": it.chat_usage(turn.messages),
        },
    )


async def chunks(
    turn: Turn, events: AsyncIterator[dict[str, Any]], model: str | None, include_usage: bool
) -> AsyncGenerator[bytes, None]:
    identity = {
        "id": completion_id(),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model or "echo",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        body = {
            **identity,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    yield chunk({"role": "assistant", "content": ""})
    try:
        async for event in events:
            if event["type"] == "delta" and event["text"]:
                yield chunk({"content": event["text"]})
    except Exception as exc:
        yield b"data: " + orjson.dumps({"error": error_event(exc)}) + b"\n\n"
        return
    calls = _tool_calls(turn)
    if calls:
        yield chunk({"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]})
    if turn.result is not None and turn.result.model:
        identity["model"] = model or turn.result.model
    yield chunk({}, _finish(turn))
    if include_usage:
        body = {**identity, "choices": [], "usage": it.chat_usage(turn.messages)}
        yield b"data: " + orjson.dumps(body) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "foliko"}


async def list_models(request: Request):
    names = request.app.state.services.model_names()
    return JSON({"object": "list", "data": [_model(n) for n in names]})


async def retrieve_model(request: Request):
    """A listed model, or any model a turn could name (``openai:gpt-4o``)."""
    from foliko_cli.errors import UnknownModelError
    from foliko_cli.models import model_spec

    name = request.path_params["model"]
    services = request.app.state.services
    if name not in services.model_names():
        try:
            model_spec(name, services.settings.models)
        except UnknownModelError as exc:
            raise ApiError(404, str(exc), code="model_not_found", param="model") from None
    return JSON(_model(name))


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
]
