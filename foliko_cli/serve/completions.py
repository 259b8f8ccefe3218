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

from msgspec import UNSET
from starlette.requests import Request

from foliko_cli.serve import items as it
from foliko_cli.serve.chat_types import (
    AssistantMessage,
    CallChunk,
    ChatCompletion,
    ChatCompletionCreate,
    ChatMessage,
    ChatUsage,
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    Finish,
    Model,
    ModelList,
    ToolCall,
)
from foliko_cli.serve.common import if_busy, request_context, service
from foliko_cli.serve.errors import SHUTTING_DOWN, ApiError, error_event
from foliko_cli.serve.formats import reply_schema
from foliko_cli.serve.images import attached
from foliko_cli.serve.schema import Api
from foliko_cli.serve.sse import DONE, EventStream
from foliko_cli.serve.stored_completions import Keeper
from foliko_cli.serve.tools import function_tools, tool_choice
from foliko_cli.serve.turns import Turn

SESSION_HEADER = "x-session-id"

api = Api("Chat")


def canonical_messages(raw: list[ChatMessage]) -> list[dict[str, Any]]:
    messages = []
    for index, message in enumerate(raw):
        role = "system" if message.role == "developer" else message.role
        where = f"messages[{index}]"
        text, images = it.content_of(message.content, where, "messages", message.role == "user")
        converted: dict[str, Any] = {"role": role, "content": text}
        if images:
            converted["attachments"] = images
        if role == "assistant" and message.tool_calls is not None:
            converted["tool_calls"] = [
                {
                    "id": call.id,
                    "name": call.function.name,
                    "arguments": it.loads_arguments(call.function.arguments),
                }
                for call in message.tool_calls
            ]
        if role == "tool":
            if message.tool_call_id is None:
                raise ApiError(
                    400, f"messages[{index}]: a tool message needs tool_call_id", param="messages"
                )
            converted["tool_call_id"] = message.tool_call_id
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


def plan(request: Request, body: ChatCompletionCreate) -> Turn:
    svc = service(request)
    messages = canonical_messages(body.messages)
    sampling = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_tokens": body.max_completion_tokens or body.max_tokens,
        "seed": body.seed,
        "stop": body.stop,
        "tool_choice": tool_choice(body.tool_choice),
        "parallel_tool_calls": False if body.parallel_tool_calls is False else None,
    }
    if body.logprobs or body.top_logprobs:
        raise ApiError(400, "logprobs are not available; ask without them", param="logprobs")
    options = {
        "model": body.model,
        "request": request_context(request, svc),
        "if_busy": if_busy(request),
        "client_tools": function_tools(body.tools),
        "server_tools": request.app.state.services.serve_tools,
        "options": {key: value for key, value in sampling.items() if value is not None},
        "schema": reply_schema(body.response_format, "response_format"),
    }
    session_id = session_header(request)
    if session_id is not None:
        users = [m for m in messages if m["role"] == "user"]
        if not users:
            raise ApiError(
                400, f"with {SESSION_HEADER}, messages must hold a user message", param="messages"
            )
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
            raise ApiError(
                400, "the last message must be a user or a tool message", param="messages"
            )
        it.name_tool_outputs(tail, history, "messages")
        text, extra = "", tail
    if systems:
        options["instructions"] = "\n\n".join(systems)
    return Turn(svc, None, text, scratch=history, messages=tuple(extra), api="chat", **options)


def completion_id() -> str:
    return "chatcmpl-" + os.urandom(12).hex()


def _tool_calls(turn: Turn) -> list[ToolCall]:
    answered = {m.get("tool_call_id") for m in turn.messages if m.get("role") == "tool"}
    return [
        it.tool_call(call)
        for message in turn.messages
        for call in message.get("tool_calls") or []
        if call.get("id") not in answered
    ]


def _finish(turn: Turn) -> Finish:
    reason = turn.result.finish_reason if turn.result else "stop"
    reason = "length" if reason == "max_tokens" else reason
    return reason if reason in ("stop", "length", "tool_calls", "content_filter") else "stop"  # type: ignore[return-value]


def chat_usage(turn: Turn) -> ChatUsage:
    """A turn's usage in Chat Completions' terms."""
    usage = it.turn_usage(turn.messages)
    return ChatUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
    )


@api.post("/v1/chat/completions", body=ChatCompletionCreate, answer=ChatCompletion, events=Chunk)
async def chat_completions(request: Request, body: ChatCompletionCreate) -> Any:
    """A chat completion: stateless (kept with ``store: true``), or a turn of
    the session ``X-Session-Id`` names."""
    turn = plan(request, body)
    keep = Keeper(request, body, canonical_messages)
    services = request.app.state.services
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        events = await turn.stream(services)
        chunked = chunks(turn, events, body.model, include_usage)

        def streamed(last: Chunk) -> ChatCompletion:
            return completion(turn, last.id, last.created, last.model)

        return EventStream(keep.streamed(turn, chunked, streamed), ending=_ending)
    result = await turn.run(services)
    answer = completion(turn, completion_id(), int(time.time()), body.model or result.model)
    return await keep.kept(turn, answer)


def completion(turn: Turn, answer_id: str, created: int, model: str) -> ChatCompletion:
    """The finished turn as a chat completion (what a stream of it adds up to)."""
    text = turn.result.message if turn.result is not None else ""
    message = AssistantMessage(content=text, tool_calls=_tool_calls(turn) or UNSET)
    choice = Choice(message=message, finish_reason=_finish(turn))
    return ChatCompletion(
        id=answer_id, created=created, model=model, choices=[choice], usage=chat_usage(turn)
    )


def _ending() -> list[Any]:
    """The end of a stream the server stopped: an error chunk, then ``[DONE]``."""
    return [{"error": error_event(SHUTTING_DOWN)}, DONE]


async def chunks(
    turn: Turn, events: AsyncIterator[dict[str, Any]], model: str | None, include_usage: bool
) -> AsyncGenerator[Any, None]:
    """The completion's chunks, then ``[DONE]`` (an error chunk ends a failed one)."""
    chunk_id, created, shown = completion_id(), int(time.time()), model or "echo"

    def chunk(delta: Delta | None, finish: Finish | None = None, **usage: Any) -> Chunk:
        choices = [ChunkChoice(delta=delta, finish_reason=finish)] if delta is not None else []
        return Chunk(id=chunk_id, created=created, model=shown, choices=choices, **usage)

    yield chunk(Delta(role="assistant", content=""))
    try:
        async for event in events:
            if event["type"] == "delta" and event["text"]:
                yield chunk(Delta(content=event["text"]))
    except Exception as exc:
        yield {"error": error_event(exc)}
        return
    calls = _tool_calls(turn)
    if calls:
        yield chunk(
            Delta(
                tool_calls=[
                    CallChunk(index=i, id=call.id, function=call.function)
                    for i, call in enumerate(calls)
                ]
            )
        )
    if turn.result is not None and turn.result.model:
        shown = model or turn.result.model
    yield chunk(Delta(), _finish(turn))
    if include_usage:
        yield chunk(None, usage=chat_usage(turn))
    yield DONE


@api.get("/v1/models", answer=ModelList, tag="Models")
async def list_models(request: Request) -> Any:
    """The models configured (``echo`` and the aliases)."""
    names = request.app.state.services.model_names()
    return ModelList(data=[Model(id=name) for name in names])


@api.get("/v1/models/{model:path}", answer=Model, tag="Models")
async def retrieve_model(request: Request) -> Any:
    """A model a turn may name: listed, or any ``PROVIDER:MODEL``."""
    from foliko_cli.errors import UnknownModelError

    name = request.path_params["model"]
    services = request.app.state.services
    if name not in services.model_names():
        try:
            services.base.check_model(name)
        except UnknownModelError as exc:
            raise ApiError(404, str(exc), code="model_not_found", param="model") from None
    return Model(id=name)


routes = api.routes
