"""A streamed response: the Responses API's server-sent events, in order.

``response.created`` and ``response.in_progress`` embed the response as it
starts; text arrives as ``output_item.added``, ``content_part.added``,
``output_text.delta``... ``output_item.done``; function calls for the client
follow; the stream ends with ``response.completed``, ``response.incomplete``
(the model was cut short) or, after an ``error`` event, ``response.failed``.
Every event has its ``sequence_number``; ``data: [DONE]`` closes the stream.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson

from foliko_cli.serve import ids
from foliko_cli.serve import items as it
from foliko_cli.serve.errors import SHUTTING_DOWN, error_event
from foliko_cli.serve.response_object import response_object
from foliko_cli.serve.turns import Turn

DONE = b"data: [DONE]\n\n"


def sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


async def sse_events(
    turn: Turn,
    events: AsyncIterator[dict[str, Any]],
    options: dict[str, Any],
    model: str | None,
    finished: Callable[[Turn, dict[str, Any], str | None], dict[str, Any]],
    sent: list[int],
) -> AsyncIterator[bytes]:
    """The events as SSE; ``sent`` holds the last sequence number sent."""
    async for event in response_events(turn, events, options, model, finished):
        sent[:] = [event["sequence_number"]]
        yield sse(event)
    yield DONE


def shutdown_ending(sequence: int) -> bytes:
    """The end of a stream the server stopped: an error event, then ``[DONE]``."""
    error = {**error_event(SHUTTING_DOWN), "param": None}
    return sse({"type": "error", "sequence_number": sequence, **error, "error": error}) + DONE


async def response_events(
    turn: Turn,
    events: AsyncIterator[dict[str, Any]],
    options: dict[str, Any],
    model: str | None,
    finished: Callable[[Turn, dict[str, Any], str | None], dict[str, Any]],
) -> AsyncGenerator[dict[str, Any], None]:
    """The turn's events as Responses API events (any transport: SSE, WebSocket)."""
    sequence = itertools.count()
    shell: dict[str, Any] = {
        "response_id": turn.response_id,
        "session_id": turn.session_id if turn.stored else None,
        "output": [],
        "outputs": [],
        "model": model or "echo",
        "options": options,
        "created_at": turn.created_at,
    }

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(sequence), **fields}

    started = response_object(**shell, status="in_progress")
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)

    # Where the next assistant message will sit: after the input messages.
    position = turn.start + len(turn.asked.messages) + (1 if turn.text else 0)
    output_index = 0
    open_item: dict[str, Any] | None = None
    text = ""

    def close_text() -> list[dict[str, Any]]:
        nonlocal open_item, output_index, text
        if open_item is None:
            return []
        done = it.text_item(open_item["id"], "assistant", text)
        where = {"item_id": open_item["id"], "output_index": output_index, "content_index": 0}
        out = [
            event("response.output_text.done", **where, text=text, logprobs=[]),
            event("response.content_part.done", **where, part=done["content"][0]),
            event("response.output_item.done", output_index=output_index, item=done),
        ]
        open_item, text = None, ""
        output_index += 1
        return out

    try:
        async for item in events:
            if item["type"] == "delta":
                if open_item is None:
                    item_id = ids.message_item_id(turn.scope, position)
                    open_item = {**it.text_item(item_id, "assistant", ""), "content": []}
                    open_item["status"] = "in_progress"
                    where = {"item_id": item_id, "output_index": output_index}
                    yield event(
                        "response.output_item.added", output_index=output_index, item=open_item
                    )
                    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
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
        error = {**error_event(exc), "param": None}
        # OpenAI's reference has the error's fields flat, Open Responses under "error": both.
        yield event("error", code=error["code"], message=error["message"], param=None, error=error)
        failure = {"code": error["code"], "message": error["message"]}
        failed = response_object(**shell, status="failed", error=failure)
        yield event("response.failed", response=failed)
        return
    for chunk in close_text():
        yield chunk
    final = finished(turn, options, model)
    for item in final["output"]:
        if item["type"] != "function_call":
            continue
        added = {**item, "arguments": "", "status": "in_progress"}
        yield event("response.output_item.added", output_index=output_index, item=added)
        where = {"item_id": item["id"], "output_index": output_index}
        yield event("response.function_call_arguments.delta", **where, delta=item["arguments"])
        yield event(
            "response.function_call_arguments.done",
            **where,
            name=item["name"],
            arguments=item["arguments"],
        )
        yield event("response.output_item.done", output_index=output_index, item=item)
        output_index += 1
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    yield event(kind, response=final)
