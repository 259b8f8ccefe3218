"""A streamed response: the Responses API's server-sent events, in order.

``response.created`` and ``response.in_progress`` embed the response as it
starts; text arrives as ``output_item.added``, ``content_part.added``,
``output_text.delta``... ``output_item.done``; function calls for the client
follow; the stream ends with ``response.completed``, ``response.incomplete``
(the model was cut short) or, after an ``error`` event, ``response.failed``.
Every event has its ``sequence_number``; ``data: [DONE]`` closes the stream
(sse.py frames it).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import msgspec

from foliko_cli.serve import ids
from foliko_cli.serve import items as it
from foliko_cli.serve.compaction_item import compaction_item
from foliko_cli.serve.errors import SHUTTING_DOWN, error_event
from foliko_cli.serve.openai_types import (
    CompactionItem,
    FunctionCallItem,
    MessageItem,
    OutputText,
    Response,
)
from foliko_cli.serve.response_object import response_object
from foliko_cli.serve.sse import DONE, EventStream
from foliko_cli.serve.turns import Turn

Finished = Callable[[Turn, dict[str, Any], str | None], Response]


def response_stream(
    turn: Turn,
    events: AsyncIterator[dict[str, Any]],
    options: dict[str, Any],
    model: str | None,
    finished: Finished,
    headers: dict[str, str],
) -> EventStream:
    """The turn's events as the Responses API streams them, then ``[DONE]``; a
    stream the server stops ends with an error event saying so."""
    sent = [-1]

    async def numbered() -> AsyncIterator[Any]:
        async for event in response_events(turn, events, options, model, finished):
            sent[0] = event["sequence_number"]
            yield event
        yield DONE

    def ending() -> list[Any]:
        return [error_of(SHUTTING_DOWN, sent[0] + 1)[0], DONE]

    return EventStream(numbered(), ending=ending, named=True, headers=headers)


def error_of(exc: BaseException, sequence: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``error`` event of a failure, and the Response's ``error`` for it.

    OpenAI's reference has the error's fields flat, Open Responses under
    ``error``: both."""
    error = {**error_event(exc), "param": None}
    flat = {"code": error["code"], "message": error["message"], "param": None}
    event = {"type": "error", "sequence_number": sequence, **flat, "error": error}
    return event, {"code": error["code"], "message": error["message"]}


async def response_events(
    turn: Turn,
    events: AsyncIterator[dict[str, Any]],
    options: dict[str, Any],
    model: str | None,
    finished: Finished,
) -> AsyncGenerator[dict[str, Any], None]:
    """The turn's events as Responses API events (any transport: SSE, WebSocket)."""
    shell: dict[str, Any] = {
        "response_id": turn.response_id,
        "session_id": turn.session_id if turn.stored else None,
        "output": [],
        "outputs": [],
        "model": model or "echo",
        "options": options,
        "created_at": turn.created_at,
    }
    out = _ResponseEvents(turn)
    started = response_object(**shell, status="in_progress")
    yield out.event("response.created", response=started)
    yield out.event("response.in_progress", response=started)
    try:
        async for item in events:
            for chunk in out.of(item):
                yield chunk
    except Exception as exc:
        for chunk in out.failed(exc, shell):
            yield chunk
        return
    for chunk in out.close_text():
        yield chunk
    final = finished(turn, options, model)
    for chunk in out.function_calls(final.output):
        yield chunk
    for chunk in out.compactions_done(final.output):
        yield chunk
    kind = "response.incomplete" if final.status == "incomplete" else "response.completed"
    yield out.event(kind, response=final)


class _ResponseEvents:
    """One response's events, numbered in order, and where its output stands:
    the text item being streamed, its index, the next message's position."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.sequence = itertools.count()
        # Where the next assistant message will sit: after the input messages.
        self.position = turn.start + len(turn.asked.messages) + (1 if turn.text else 0)
        self.output_index = 0
        self.open_item: MessageItem | None = None
        self.text = ""
        self.compacted: dict[str, int] = {}  # compaction item id: its output index

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(self.sequence), **fields}

    def of(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """The events one of the turn's events stands for."""
        if item["type"] == "delta":
            return self.delta(item["text"])
        if item["type"] == "tool_call":
            return self.close_text()
        if item["type"] == "compaction":
            return self.compaction(item.get("summary") or "")
        if item["type"] == "tool_result":
            # The next assistant message follows this call's tool message.
            self.position = self.turn.tool_positions.get(item["id"], self.position) + 1
        return []

    def delta(self, text: str) -> list[dict[str, Any]]:
        out = []
        if self.open_item is None:
            item_id = ids.message_item_id(self.turn.scope, self.turn.number(self.position))
            self.open_item = MessageItem(
                id=item_id, status="in_progress", role="assistant", content=[]
            )
            where = {"item_id": item_id, "output_index": self.output_index}
            part = OutputText(text="")
            out.append(
                self.event(
                    "response.output_item.added",
                    output_index=self.output_index,
                    item=self.open_item,
                )
            )
            out.append(
                self.event("response.content_part.added", **where, content_index=0, part=part)
            )
        self.text += text
        where = {"item_id": self.open_item.id, "output_index": self.output_index}
        out.append(
            self.event(
                "response.output_text.delta", **where, content_index=0, delta=text, logprobs=[]
            )
        )
        return out

    def close_text(self) -> list[dict[str, Any]]:
        if self.open_item is None:
            return []
        done = it.text_item(self.open_item.id, "assistant", self.text)
        index = self.output_index
        where = {"item_id": done.id, "output_index": index, "content_index": 0}
        out = [
            self.event("response.output_text.done", **where, text=self.text, logprobs=[]),
            self.event("response.content_part.done", **where, part=done.content[0]),
            self.event("response.output_item.done", output_index=index, item=done),
        ]
        self.open_item, self.text = None, ""
        self.output_index += 1
        return out

    def compaction(self, summary: str) -> list[dict[str, Any]]:
        """A compaction item as the turn compacts; it is done once the turn is
        (its content then carries the messages kept verbatim too)."""
        out = self.close_text()
        number = self.turn.number(self.position)
        item = compaction_item(ids.compaction_item_id(self.turn.scope, number), summary)
        self.compacted[item.id] = self.output_index
        out.append(
            self.event("response.output_item.added", output_index=self.output_index, item=item)
        )
        self.output_index += 1
        return out

    def compactions_done(self, output: list[Any]) -> list[dict[str, Any]]:
        return [
            self.event("response.output_item.done", output_index=self.compacted[item.id], item=item)
            for item in output
            if isinstance(item, CompactionItem) and item.id in self.compacted
        ]

    def function_calls(self, output: list[Any]) -> list[dict[str, Any]]:
        """The calls the client runs, each streamed whole once the turn has ended."""
        out = []
        for item in output:
            if not isinstance(item, FunctionCallItem):
                continue
            index = self.output_index
            added = msgspec.structs.replace(item, arguments="", status="in_progress")
            where = {"item_id": item.id, "output_index": index}
            out += [
                self.event("response.output_item.added", output_index=index, item=added),
                self.event("response.function_call_arguments.delta", **where, delta=item.arguments),
                self.event(
                    "response.function_call_arguments.done",
                    **where,
                    name=item.name,
                    arguments=item.arguments,
                ),
                self.event("response.output_item.done", output_index=index, item=item),
            ]
            self.output_index += 1
        return out

    def failed(self, exc: Exception, shell: dict[str, Any]) -> list[dict[str, Any]]:
        event, failure = error_of(exc, next(self.sequence))
        failed = response_object(**shell, status="failed", error=failure)
        return [event, self.event("response.failed", response=failed)]
