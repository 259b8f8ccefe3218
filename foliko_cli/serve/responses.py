"""``/v1/responses``: one turn of a conversation (a foliko session) per request.

Without ``conversation`` or ``previous_response_id`` a response starts a
session of its own. ``previous_response_id`` continues the session of that
response when it is the session's latest turn, and otherwise forks a new
session holding the history up to it. ``store: false`` runs the turn on a
scratch copy: nothing is saved. Function tools are the client's: when the
model calls one, the response returns the ``function_call`` item, and the
``function_call_output`` the client sends next continues the turn.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from foliko_cli.serve import items as it
from foliko_cli.serve.common import JSON, field, json_body, request_context, service
from foliko_cli.serve.errors import ApiError, error_event
from foliko_cli.serve.formats import reply_schema
from foliko_cli.serve.images import attached
from foliko_cli.serve.turns import Turn
from foliko_cli.service import AsyncFoliko
from foliko_cli.storage.record import SessionRecord


def new_conversation_id() -> str:
    return "conv_" + os.urandom(12).hex()


def conversation_id(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str) or not value:
        raise ApiError(400, "conversation must be an id or {'id': ID}", param="conversation")
    return value


def turn_span(messages: list[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """The messages of the turn that begins at ``start`` (they share its request id)."""
    if not 0 <= start < len(messages):
        return []
    request_id = messages[start].get("request_id")
    end = start + 1
    while end < len(messages) and messages[end].get("request_id") == request_id:
        end += 1
    return messages[start:end]


def response_object(
    *,
    response_id: str,
    session_id: str | None,
    turn: list[dict[str, Any]],
    first: int,
    model: str | None,
    status: str = "completed",
    created_at: int | None = None,
    options: dict[str, Any] | None = None,
    output: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    options = options or {}
    if model is None:
        model = next((m.get("model") for m in reversed(turn) if m.get("model")), "echo")
    if created_at is None:
        created_at = (turn[0].get("created_at", 0) // 1000) if turn else int(time.time())
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": model,
        "output": it.output_items(turn, first) if output is None else output,
        "usage": it.turn_usage(turn) if status == "completed" else None,
        "conversation": {"id": session_id} if session_id else None,
        "previous_response_id": options.get("previous_response_id"),
        "instructions": options.get("instructions"),
        "metadata": options.get("metadata") or {},
        "temperature": options.get("temperature"),
        "top_p": options.get("top_p"),
        "max_output_tokens": options.get("max_output_tokens"),
        "tools": options.get("tools") or [],
        "tool_choice": options.get("tool_choice") or "auto",
        "parallel_tool_calls": True,
        "store": options.get("store", True),
        "background": False,
        "truncation": "disabled",
        "text": {"format": options.get("format") or {"type": "text"}},
        "error": None,
        "incomplete_details": None,
        "user": None,
    }


async def _load(svc: AsyncFoliko, session_id: str, missing: ApiError) -> SessionRecord:
    from foliko_cli.errors import InvalidSessionIdError, SessionNotFoundError

    try:
        return await svc.get_session(session_id)
    except (SessionNotFoundError, InvalidSessionIdError):
        raise missing from None


async def _exists(svc: AsyncFoliko, session_id: str, missing: ApiError) -> None:
    from foliko_cli.errors import InvalidSessionIdError
    from foliko_cli.storage.record import check_session_id

    try:
        check_session_id(session_id)
    except InvalidSessionIdError:
        raise missing from None
    if await svc.storage.revision(session_id) is None:
        raise missing


async def plan_turn(request: Request, data: dict[str, Any]) -> tuple[Turn, dict[str, Any]]:
    """The turn a request asks for, and the options its response echoes."""
    svc = service(request)
    model = field(data, "model", str)
    store = field(data, "store", bool, True)
    instructions = field(data, "instructions", str)
    previous = field(data, "previous_response_id", str)
    conversation = conversation_id(data.get("conversation"))
    text_format = (field(data, "text", dict) or {}).get("format")
    schema = reply_schema(text_format, "text.format", nested=False)
    options = {
        "format": text_format if schema is not None else None,
        "instructions": instructions,
        "previous_response_id": previous,
        "metadata": field(data, "metadata", dict),
        "temperature": field(data, "temperature", (int, float)),
        "top_p": field(data, "top_p", (int, float)),
        "max_output_tokens": field(data, "max_output_tokens", int),
        "tools": field(data, "tools", list),
        "tool_choice": data.get("tool_choice"),
        "store": store,
    }
    client_tools = it.function_tools(data.get("tools"))
    if conversation and previous:
        raise ApiError(400, "give conversation or previous_response_id, not both", param="input")
    if "input" not in data:
        raise ApiError(400, "input is required", param="input")
    messages = it.input_messages(data["input"])
    if not messages:
        raise ApiError(400, "input is empty", param="input")
    attachments: list = []
    if messages[-1]["role"] == "user":
        text, extra = messages[-1]["content"], messages[:-1]
        attachments = attached(messages[-1])
    elif messages[-1]["role"] == "tool":
        text, extra = "", messages
    else:
        raise ApiError(
            400, "input must end with a user message or a function_call_output", param="input"
        )

    history: list[dict[str, Any]] = []
    session_id: str | None
    fork: tuple[str, int] | None = None
    if conversation is not None:
        missing = ApiError(404, f"conversation {conversation!r} not found", code="not_found")
        if store and not any(m["role"] == "tool" for m in extra):
            await _exists(svc, conversation, missing)  # the turn itself reads the history
        else:
            history = (await _load(svc, conversation, missing)).messages
        session_id = conversation
    elif previous is not None:
        source, start = it.parse_response_id(previous)
        missing = ApiError(404, f"response {previous!r} not found", code="response_not_found")
        record = await _load(svc, source, missing)
        span = turn_span(record.messages, start)
        if not any(m.get("role") == "assistant" for m in span):
            raise missing
        end = start + len(span)
        history = record.messages[:end]
        if end == len(record.messages):
            session_id = source
        else:
            session_id = new_conversation_id()
            fork = (source, end)
    else:
        session_id = new_conversation_id()
    it.name_tool_outputs(extra, history)
    sampling = {
        "temperature": options["temperature"],
        "top_p": options["top_p"],
        "max_tokens": options["max_output_tokens"],
        "tool_choice": it.tool_choice(options["tool_choice"]),
    }
    turn_options = {
        "model": model,
        "instructions": instructions,
        "request": request_context(request, svc),
        "messages": tuple(extra),
        "client_tools": client_tools,
        "attachments": attachments,
        "options": {key: value for key, value in sampling.items() if value is not None},
        "schema": schema,
    }
    if not store:
        turn = Turn(svc, None, text, scratch=history, **turn_options)
    else:
        if fork is not None:
            await svc.fork_session(fork[0], session_id, upto=fork[1])
        turn = Turn(svc, session_id, text, **turn_options)
    return turn, options


def finished_response(turn: Turn, options: dict[str, Any], model: str | None) -> dict[str, Any]:
    stored = turn.stored and turn.session_id is not None
    rid = it.response_id(turn.session_id, turn.start) if stored else it.unstored_response_id()
    return response_object(
        response_id=rid,
        session_id=turn.session_id if stored else None,
        turn=turn.messages,
        first=turn.start,
        model=model or (turn.result.model if turn.result else None),
        options=options,
    )


async def create_response(request: Request):
    data = await json_body(request)
    stream = field(data, "stream", bool, False)
    turn, options = await plan_turn(request, data)
    services = request.app.state.services
    if not stream:
        await turn.run(services)
        return JSON(finished_response(turn, options, field(data, "model", str)))
    events = await turn.stream(services)
    return StreamingResponse(
        sse_events(turn, events, options, field(data, "model", str)),
        media_type="text/event-stream",
        headers={"cache-control": "no-store"},
    )


def _sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


async def sse_events(
    turn: Turn, events: AsyncIterator[dict[str, Any]], options: dict[str, Any], model: str | None
) -> AsyncIterator[bytes]:
    """The Responses API's stream events, as the OpenAI SDK's stream helper reads them."""
    sequence = itertools.count()
    stored = turn.stored and turn.session_id is not None
    rid = it.response_id(turn.session_id, turn.start) if stored else it.unstored_response_id()
    base = {
        "response_id": rid,
        "session_id": turn.session_id if stored else None,
        "turn": [],
        "first": turn.start,
        "model": model or "echo",
        "options": options,
        "created_at": int(time.time()),
    }

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(sequence), **fields})

    shell = response_object(**base, status="in_progress", output=[])
    yield event("response.created", response=shell)
    yield event("response.in_progress", response=shell)

    # Where the next assistant message will sit: after the input messages.
    position = turn.start + len(turn.options["messages"]) + (1 if turn.text else 0)
    output_index = 0
    open_item: dict[str, Any] | None = None
    text = ""

    def close_text() -> list[bytes]:
        nonlocal open_item, output_index, text
        if open_item is None:
            return []
        part = {"type": "output_text", "text": text, "annotations": []}
        where = {"item_id": open_item["id"], "output_index": output_index, "content_index": 0}
        done = it.text_item(position, "assistant", text)
        out = [
            event("response.output_text.done", **where, text=text, logprobs=[]),
            event("response.content_part.done", **where, part=part),
            event("response.output_item.done", output_index=output_index, item=done),
        ]
        open_item, text = None, ""
        output_index += 1
        return out

    try:
        async for item in events:
            if item["type"] == "delta":
                if open_item is None:
                    open_item = {**it.text_item(position, "assistant", ""), "content": []}
                    open_item["status"] = "in_progress"
                    where = {"item_id": open_item["id"], "output_index": output_index}
                    yield event(
                        "response.output_item.added", output_index=output_index, item=open_item
                    )
                    part = {"type": "output_text", "text": "", "annotations": []}
                    yield event("response.content_part.added", **where, content_index=0, part=part)
                text += item["text"]
                yield event(
                    "response.output_text.delta",
                    item_id=open_item["id"],
                    output_index=output_index,
                    content_index=0,
                    delta=item["text"],
                    logprobs=[],
                )
            elif item["type"] == "tool_call":
                for chunk in close_text():
                    yield chunk
            elif item["type"] == "tool_result":
                # The next assistant message follows this call's tool message.
                position = turn.tool_positions.get(item["id"], position) + 1
    except Exception as exc:
        error = error_event(exc)
        yield event("error", code=error["code"], message=error["message"], param=None)
        failed = response_object(**base, status="failed", output=[])
        failed["error"] = {"code": error["code"], "message": error["message"]}
        yield event("response.failed", response=failed)
        return
    for chunk in close_text():
        yield chunk
    final = finished_response(turn, options, model)
    for item in final["output"]:
        if item["type"] != "function_call":
            continue
        added = {**item, "arguments": "", "status": "in_progress"}
        yield event("response.output_item.added", output_index=output_index, item=added)
        where = {"item_id": item["id"], "output_index": output_index}
        yield event("response.function_call_arguments.delta", **where, delta=item["arguments"])
        yield event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        yield event("response.output_item.done", output_index=output_index, item=item)
        output_index += 1
    final["created_at"] = base["created_at"]
    yield event("response.completed", response=final)


async def get_response(request: Request):
    svc = service(request)
    rid = request.path_params["response_id"]
    session_id, start = it.parse_response_id(rid)
    missing = ApiError(404, f"response {rid!r} not found", code="response_not_found")
    record = await _load(svc, session_id, missing)
    span = turn_span(record.messages, start)
    if not any(m.get("role") == "assistant" for m in span):
        raise missing
    return JSON(
        response_object(response_id=rid, session_id=session_id, turn=span, first=start, model=None)
    )


async def get_input_items(request: Request):
    svc = service(request)
    rid = request.path_params["response_id"]
    session_id, start = it.parse_response_id(rid)
    missing = ApiError(404, f"response {rid!r} not found", code="response_not_found")
    record = await _load(svc, session_id, missing)
    span = turn_span(record.messages, start)
    inputs = []
    for offset, message in enumerate(span):
        if message.get("role") == "assistant":
            break
        inputs.extend(it.message_items(message, start + offset))
    return JSON(it.page_of(inputs, request))


routes = [
    Route("/v1/responses", create_response, methods=["POST"]),
    Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
    Route("/v1/responses/{response_id}/input_items", get_input_items, methods=["GET"]),
]
