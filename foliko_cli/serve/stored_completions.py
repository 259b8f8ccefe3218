"""Stored chat completions: ``store: true`` on ``POST /v1/chat/completions``,
and the list, retrieve, messages, update and delete routes of OpenAI's reference.

A stored completion is a session named by the completion id (``chatcmpl-…``):
its messages are the request's messages followed by the answer's, and the
completion itself (the body the client got, its ``metadata``, the request's
parameters, how each request message was shaped) is kept in the session's
metadata under ``chat_completion``. It is stored before the answer is sent
(a stream's: before its final ``[DONE]``), so a client can read it back at
once; a turn that failed or was cut off stores nothing. Listing reads the
summaries of the user's sessions and the state (never the messages) of only
the sessions it must look at.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any, cast

import msgspec
from msgspec import UNSET
from starlette.requests import Request

from foliko_cli.errors import InvalidSessionIdError, SessionNotFoundError
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.record import SessionRecord
from foliko_cli.serve import items as it
from foliko_cli.serve.chat_types import (
    ChatCompletion,
    ChatCompletionCreate,
    ChatMessage,
    ChatPart,
    Chunk,
    CompletionsQuery,
    CompletionUpdate,
    ImageURL,
    MessagesQuery,
    StoredCompletion,
    StoreMessage,
)
from foliko_cli.serve.common import service
from foliko_cli.serve.conversations import stamped
from foliko_cli.serve.errors import ApiError, error_event
from foliko_cli.serve.openai_types import Deleted, Page, page, page_of, start_after
from foliko_cli.serve.schema import Api
from foliko_cli.serve.sse import DONE
from foliko_cli.serve.turns import Turn
from foliko_cli.service import AsyncFoliko

KEY = "chat_completion"
PREFIX = "chatcmpl-"
ECHOED = (
    "tools",
    "tool_choice",
    "response_format",
    "temperature",
    "top_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
)
"""The request's parameters a stored completion shows (null when not sent)."""

api = Api("Chat")


def _shape(message: ChatMessage) -> dict[str, Any]:
    """What the canonical message loses of a request message: a ``developer``
    role, a ``name``, content sent as a list of parts."""
    shape: dict[str, Any] = {}
    if message.role == "developer":
        shape["role"] = "developer"
    if message.name is not None:
        shape["name"] = message.name
    if isinstance(message.content, list):
        shape["parts"] = True
    return shape


def _answer(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turn's messages from its first answer on (what came before is the request's)."""
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return messages[index:]
    return []


class Keeper:
    """Stores one request's completion when it asked for ``store: true``.
    ``convert`` makes the canonical messages of the request's ``messages``."""

    def __init__(
        self,
        request: Request,
        body: ChatCompletionCreate,
        convert: Callable[[list[ChatMessage]], list[dict[str, Any]]],
    ):
        self.request = request
        self.body = body
        self.convert = convert

    async def kept(self, turn: Turn, answer: ChatCompletion) -> ChatCompletion:
        """The answer, stored first when asked."""
        if self.body.store:
            await self._save(turn, answer)
        return answer

    def streamed(
        self,
        turn: Turn,
        chunks: AsyncGenerator[Any, None],
        answer: Callable[[Chunk], ChatCompletion],
    ) -> AsyncGenerator[Any, None]:
        """``chunks`` as they are; when asked, the completion (``answer`` of the
        last chunk) is stored just before the final ``[DONE]``, and a stream
        that ends without one stores nothing."""
        return self._stored_stream(turn, chunks, answer) if self.body.store else chunks

    async def _stored_stream(
        self,
        turn: Turn,
        chunks: AsyncGenerator[Any, None],
        answer: Callable[[Chunk], ChatCompletion],
    ) -> AsyncGenerator[Any, None]:
        last = None
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                if chunk is DONE and last is not None:
                    try:
                        await self._save(turn, answer(last))
                    except Exception as exc:
                        yield {"error": error_event(exc)}
                        return
                last = chunk if isinstance(chunk, Chunk) else last
                yield chunk

    async def _save(self, turn: Turn, answer: ChatCompletion) -> None:
        body = self.body
        completion = {
            "completion": msgspec.to_builtins(answer),
            "metadata": body.metadata or {},
            "request_id": self.request.state.ids.request_id,
            "request": {
                name: msgspec.to_builtins(getattr(body, name))
                for name in ECHOED
                if getattr(body, name) is not None
            },
            "request_messages": [_shape(m) for m in body.messages],
        }
        messages = stamped(self.request, self.convert(body.messages)) + _answer(turn.messages)
        await service(self.request).create_session(
            answer.id, messages=messages, metadata={KEY: completion}
        )


# reading


def _not_found(completion_id: str) -> ApiError:
    return ApiError(
        404,
        f"no stored chat completion {completion_id!r}; list them with GET /v1/chat/completions",
        code="not_found",
    )


def _stored(record: SessionRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    completion = record.metadata.get(KEY)
    return completion if isinstance(completion, dict) else None


def _checked(completion_id: str) -> str:
    """The id, if it can name a stored completion; 404 otherwise."""
    if not completion_id.startswith(PREFIX):
        raise _not_found(completion_id)
    try:
        return check_session_id(completion_id)
    except InvalidSessionIdError:
        raise _not_found(completion_id) from None


async def _state(svc: AsyncFoliko, completion_id: str) -> dict[str, Any]:
    """The stored completion, read without the session's messages; 404 when there is none."""
    completion = _stored(await svc.get_state(_checked(completion_id)))
    if completion is None:
        raise _not_found(completion_id)
    return completion


def completion_object(completion_id: str, completion: dict[str, Any]) -> StoredCompletion:
    request = completion.get("request") or {}
    shown = {
        **completion["completion"],
        "id": completion_id,
        "metadata": completion.get("metadata") or {},
        "request_id": completion.get("request_id"),
        **{name: request.get(name) for name in ECHOED},
    }
    return msgspec.convert(shown, StoredCompletion)


@api.get("/v1/chat/completions", query=CompletionsQuery, answer=Page[StoredCompletion])
async def list_completions(request: Request, query: CompletionsQuery) -> Any:
    """Stored chat completions, oldest first (``order=desc``: newest), by the
    time each was stored; ``model`` and ``metadata[KEY]=VALUE`` filter them.

    The order and ``after`` come from the session summaries; only the
    sessions walked until the page is full (and one more, for ``has_more``)
    have their state read, so a filter that matches little reads more."""
    svc = service(request)
    summaries = [
        s
        for s in await svc.list_sessions(sort="created")
        if s.session_id.startswith(PREFIX) and not s.error
    ]
    summaries.sort(key=lambda s: (s.created_at, s.session_id), reverse=query.order == "desc")
    ids = [s.session_id for s in summaries]
    start = start_after(ids, query.after, "stored chat completion")
    found: list[StoredCompletion] = []
    has_more = False
    for completion_id in ids[start:]:
        completion = _stored(await svc.get_state(completion_id))
        if completion is None:
            continue
        shown = completion_object(completion_id, completion)
        if query.model is not None and shown.model != query.model:
            continue
        if any(shown.metadata.get(k) != v for k, v in query.metadata.items()):
            continue
        if len(found) == query.limit:
            has_more = True
            break
        found.append(shown)
    return page(found, has_more)


def _id(request: Request) -> str:
    return cast(str, request.path_params["completion_id"])


_ONE = "/v1/chat/completions/{completion_id}"


@api.get(_ONE, answer=StoredCompletion)
async def get_completion(request: Request) -> Any:
    """A stored chat completion."""
    return completion_object(_id(request), await _state(service(request), _id(request)))


def store_message(message_id: str, message: dict[str, Any], shape: dict[str, Any]) -> StoreMessage:
    """A request message as the reference lists it (``ChatCompletionStoreMessage``)."""
    role = shape.get("role", message["role"])
    content = message.get("content", "")
    parts: list[ChatPart] | None = None
    if shape.get("parts"):
        from foliko_cli.serve.images import data_url

        parts = [ChatPart(type="text", text=content)] if content else []
        for image in message.get("attachments") or ():
            url = ImageURL(url=data_url(image) or "")
            parts.append(ChatPart(type="image_url", image_url=url))
    calls = [it.tool_call(call) for call in message.get("tool_calls") or ()]
    return StoreMessage(
        id=message_id,
        role=role,
        content=content if content or not calls else None,
        name=shape.get("name"),
        content_parts=parts,
        tool_calls=calls or UNSET,
        tool_call_id=(message.get("tool_call_id") or "") if role == "tool" else UNSET,
    )


@api.get(_ONE + "/messages", query=MessagesQuery, answer=Page[StoreMessage])
async def list_messages(request: Request, query: MessagesQuery) -> Any:
    """The messages of a stored completion's request (not the answer, which is
    the completion's choice), oldest first unless ``order=desc``."""
    completion_id = _checked(_id(request))
    try:
        record = await service(request).get_session(completion_id)
    except SessionNotFoundError:
        raise _not_found(completion_id) from None
    completion = _stored(record)
    if completion is None:
        raise _not_found(completion_id)
    shapes = completion.get("request_messages") or []
    messages = [
        store_message(f"{completion_id}-{index}", message, shape)
        for index, (message, shape) in enumerate(zip(record.messages, shapes, strict=False))
    ]
    return page_of(messages, query, "message")


@api.post(_ONE, body=CompletionUpdate, answer=StoredCompletion)
async def update_completion(request: Request, body: CompletionUpdate) -> Any:
    """Replace a stored completion's metadata (nothing else can change)."""
    completion_id = _id(request)
    svc = service(request)
    completion = {**await _state(svc, completion_id), "metadata": body.metadata or {}}
    try:
        await svc.update_metadata(completion_id, {KEY: completion})
    except SessionNotFoundError:
        raise _not_found(completion_id) from None
    return completion_object(completion_id, completion)


@api.delete(_ONE, answer=Deleted)
async def delete_completion(request: Request) -> Any:
    """Delete a stored chat completion."""
    completion_id = _id(request)
    svc = service(request)
    await _state(svc, completion_id)
    deleted, _ = await svc.delete_sessions([completion_id])
    if not deleted:
        raise _not_found(completion_id)
    return Deleted(id=completion_id, object="chat.completion.deleted")


routes = api.routes
