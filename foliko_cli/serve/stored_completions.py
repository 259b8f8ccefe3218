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
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.errors import InvalidSessionIdError, SessionNotFoundError
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.record import SessionRecord
from foliko_cli.serve import items as it
from foliko_cli.serve.common import JSON, field, json_body, query_int, service
from foliko_cli.serve.conversations import check_metadata, stamped
from foliko_cli.serve.errors import ApiError, error_event
from foliko_cli.serve.turns import Turn
from foliko_cli.service import AsyncFoliko
from foliko_cli.storage import capabilities

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

DONE = b"data: [DONE]\n\n"
_DATA = b"data: "


def _shape(message: dict[str, Any]) -> dict[str, Any]:
    """What the canonical message loses of a request message: a ``developer``
    role, a ``name``, content sent as a list of parts."""
    shape: dict[str, Any] = {}
    if message.get("role") == "developer":
        shape["role"] = "developer"
    if isinstance(message.get("name"), str):
        shape["name"] = message["name"]
    if isinstance(message.get("content"), list):
        shape["parts"] = True
    return shape


def _answer(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turn's messages from its first answer on (what came before is the request's)."""
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return messages[index:]
    return []


class _Assembled:
    """The completion a stream's chunks add up to (what the client received)."""

    def __init__(self) -> None:
        self.identity: dict[str, Any] = {}
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.finish = "stop"
        self.usage: dict[str, Any] | None = None

    def add(self, piece: bytes) -> None:
        if not piece.startswith(_DATA + b"{"):
            return
        chunk = orjson.loads(piece[len(_DATA) :])
        for name in ("id", "created", "model"):
            if name in chunk:
                self.identity[name] = chunk[name]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                self.calls.append({k: v for k, v in call.items() if k != "index"})
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def completion(self, turn: Turn) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text)}
        if self.calls:
            message["tool_calls"] = self.calls
        return {
            **self.identity,
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": message, "finish_reason": self.finish, "logprobs": None}
            ],
            "usage": self.usage or it.chat_usage(turn.messages),
        }


class Keeper:
    """Stores one request's completion when it asked for ``store: true``; the
    request's ``store`` and ``metadata`` are checked before the turn runs.
    ``convert`` makes the canonical messages of the request's ``messages``."""

    def __init__(
        self,
        request: Request,
        data: dict[str, Any],
        convert: Callable[[Any], list[dict[str, Any]]],
    ):
        self.request = request
        self.data = data
        self.convert = convert
        self.store = field(data, "store", bool, False)
        self.metadata = check_metadata(data.get("metadata"))

    async def kept(self, turn: Turn, body: dict[str, Any]) -> JSON:
        """The answer ``body``, stored first when asked."""
        if self.store:
            await self._save(turn, body)
        return JSON(body)

    def streamed(
        self, turn: Turn, chunks: AsyncGenerator[bytes, None]
    ) -> AsyncGenerator[bytes, None]:
        """``chunks`` as they are; when asked, the completion is stored just
        before the final ``[DONE]``, and a stream that ends without one stores
        nothing."""
        return self._stored_stream(turn, chunks) if self.store else chunks

    async def _stored_stream(
        self, turn: Turn, chunks: AsyncGenerator[bytes, None]
    ) -> AsyncGenerator[bytes, None]:
        assembled = _Assembled()
        async with contextlib.aclosing(chunks):
            async for piece in chunks:
                if piece == DONE:
                    try:
                        await self._save(turn, assembled.completion(turn))
                    except Exception as exc:
                        yield _DATA + orjson.dumps({"error": error_event(exc)}) + b"\n\n"
                        return
                else:
                    assembled.add(piece)
                yield piece

    async def _save(self, turn: Turn, body: dict[str, Any]) -> None:
        raw = self.data["messages"]
        completion = {
            "completion": body,
            "metadata": self.metadata,
            "request_id": self.request.state.ids.request_id,
            "request": {k: self.data[k] for k in ECHOED if self.data.get(k) is not None},
            "request_messages": [_shape(m) for m in raw],
        }
        messages = stamped(self.request, self.convert(raw)) + _answer(turn.messages)
        await service(self.request).create_session(
            body["id"], messages=messages, metadata={KEY: completion}
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
    completion = _stored(await capabilities.load_state(svc.storage, _checked(completion_id)))
    if completion is None:
        raise _not_found(completion_id)
    return completion


def completion_object(completion_id: str, completion: dict[str, Any]) -> dict[str, Any]:
    request = completion.get("request") or {}
    return {
        **completion["completion"],
        "id": completion_id,
        "object": "chat.completion",
        "metadata": completion.get("metadata") or {},
        "request_id": completion.get("request_id"),
        **{name: request.get(name) for name in ECHOED},
    }


def _order(request: Request) -> str:
    order = request.query_params.get("order", "asc")
    if order not in ("asc", "desc"):
        raise ApiError(400, "order must be asc or desc", param="order")
    return order


def _metadata_filter(request: Request) -> dict[str, str]:
    wanted = {}
    for name, value in request.query_params.multi_items():
        if name.startswith("metadata[") and name.endswith("]"):
            wanted[name[len("metadata[") : -1]] = value
        elif name.startswith("metadata"):
            raise ApiError(400, "filter by metadata as metadata[KEY]=VALUE", param="metadata")
    return wanted


def _page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def _after(ids: list[str], after: str | None, what: str) -> int:
    """Where the page after ``after`` starts in ``ids``."""
    if after is None:
        return 0
    try:
        return ids.index(after) + 1
    except ValueError:
        raise ApiError(400, f"after: no {what} {after!r} in this list", param="after") from None


async def list_completions(request: Request):
    """Oldest first (``order=desc``: newest), by the time each was stored.

    The order and ``after`` come from the session summaries; only the
    sessions walked until the page is full (and one more, for ``has_more``)
    have their state read, so a filter that matches little reads more."""
    limit = query_int(request, "limit", 20, 1, 100)
    order = _order(request)
    model = request.query_params.get("model")
    wanted = _metadata_filter(request)
    svc = service(request)
    summaries = [
        s
        for s in await svc.list_sessions(sort="created")
        if s.session_id.startswith(PREFIX) and not s.error
    ]
    summaries.sort(key=lambda s: (s.created_at, s.session_id), reverse=order == "desc")
    ids = [s.session_id for s in summaries]
    start = _after(ids, request.query_params.get("after"), "stored chat completion")
    page: list[dict[str, Any]] = []
    has_more = False
    for completion_id in ids[start:]:
        completion = _stored(await capabilities.load_state(svc.storage, completion_id))
        if completion is None:
            continue
        shown = completion_object(completion_id, completion)
        if model is not None and shown.get("model") != model:
            continue
        if any(shown["metadata"].get(k) != v for k, v in wanted.items()):
            continue
        if len(page) == limit:
            has_more = True
            break
        page.append(shown)
    return JSON(_page(page, has_more))


def _id(request: Request) -> str:
    return request.path_params["completion_id"]


async def get_completion(request: Request):
    completion = await _state(service(request), _id(request))
    return JSON(completion_object(_id(request), completion))


def store_message(
    message_id: str, message: dict[str, Any], shape: dict[str, Any]
) -> dict[str, Any]:
    """A request message as the reference lists it (``ChatCompletionStoreMessage``)."""
    role = shape.get("role", message["role"])
    content = message.get("content", "")
    parts = None
    if shape.get("parts"):
        from foliko_cli.serve.images import data_url

        parts = [{"type": "text", "text": content}] if content else []
        for image in message.get("attachments") or ():
            parts.append({"type": "image_url", "image_url": {"url": data_url(image)}})
    shown: dict[str, Any] = {
        "id": message_id,
        "role": role,
        "content": content if content or not message.get("tool_calls") else None,
        "name": shape.get("name"),
        "content_parts": parts,
    }
    if message.get("tool_calls"):
        shown["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": it.dumps_arguments(call.get("arguments", {})),
                },
            }
            for call in message["tool_calls"]
        ]
    if role == "tool":
        shown["tool_call_id"] = message.get("tool_call_id")
    return shown


async def list_messages(request: Request):
    """The request's messages (not the answer, which is the completion's
    choice), oldest first unless ``order=desc``."""
    completion_id = _checked(_id(request))
    limit = query_int(request, "limit", 20, 1, 100)
    order = _order(request)
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
    if order == "desc":
        messages.reverse()
    ids = [m["id"] for m in messages]
    start = _after(ids, request.query_params.get("after"), "message")
    rest = messages[start:]
    return JSON(_page(rest[:limit], len(rest) > limit))


async def update_completion(request: Request):
    """Only ``metadata`` may change; it replaces the stored one."""
    data = await json_body(request)
    if "metadata" not in data:
        raise ApiError(400, "metadata is required", param="metadata")
    others = sorted(set(data) - {"metadata"})
    if others:
        raise ApiError(
            400,
            f'only metadata can be changed, not {", ".join(others)}; send {{"metadata": …}}',
            param=others[0],
        )
    metadata = check_metadata(data["metadata"])
    completion_id = _id(request)
    svc = service(request)
    completion = {**await _state(svc, completion_id), "metadata": metadata}
    try:
        await svc.update_metadata(completion_id, {KEY: completion})
    except SessionNotFoundError:
        raise _not_found(completion_id) from None
    return JSON(completion_object(completion_id, completion))


async def delete_completion(request: Request):
    completion_id = _id(request)
    svc = service(request)
    await _state(svc, completion_id)
    deleted, _ = await svc.delete_sessions([completion_id])
    if not deleted:
        raise _not_found(completion_id)
    return JSON({"id": completion_id, "object": "chat.completion.deleted", "deleted": True})


_ONE = "/v1/chat/completions/{completion_id}"
routes = [
    Route("/v1/chat/completions", list_completions, methods=["GET"]),
    Route(_ONE + "/messages", list_messages, methods=["GET"]),
    Route(_ONE, get_completion, methods=["GET"]),
    Route(_ONE, update_completion, methods=["POST"]),
    Route(_ONE, delete_completion, methods=["DELETE"]),
]
