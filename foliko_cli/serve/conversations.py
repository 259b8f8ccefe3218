"""``/v1/conversations``: OpenAI's Conversations API over foliko sessions.

A conversation is a session: its id is the session id, so sessions made by
the CLI are conversations too. Its ``metadata`` is kept in the session's
metadata under ``conversation_metadata``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.common.clock import now_ms
from foliko_cli.messages.record import SessionRecord
from foliko_cli.serve import ids
from foliko_cli.serve import items as it
from foliko_cli.serve.common import JSON, check_metadata, json_body, seconds, service
from foliko_cli.serve.errors import ApiError

METADATA_KEY = "conversation_metadata"


def conversation_object(record: SessionRecord) -> dict[str, Any]:
    return {
        "id": record.session_id,
        "object": "conversation",
        "created_at": seconds(record.metadata.get("created_at")),
        "metadata": record.metadata.get(METADATA_KEY) or {},
    }


def stamped(request: Request, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = request.state.ids
    now = now_ms()
    return [
        {**m, "created_at": now, "request_id": ids.request_id, "trace_id": ids.trace_id}
        for m in messages
    ]


def _items_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    raw = data.get("items")
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > 20:
        raise ApiError(400, "items must be a list of at most 20 items", param="items")
    return it.input_messages(raw, "items")


async def create_conversation(request: Request):
    data = await json_body(request)
    metadata = check_metadata(data.get("metadata"))
    messages = _items_of(data)
    it.name_tool_outputs(messages, [])
    record = await service(request).create_session(
        ids.new_conversation_id(),
        messages=stamped(request, messages),
        metadata={METADATA_KEY: metadata},
    )
    return JSON(conversation_object(record))


def _id(request: Request) -> str:
    return request.path_params["conversation_id"]


async def get_conversation(request: Request):
    record = await service(request).get_session(_id(request))
    return JSON(conversation_object(record))


async def update_conversation(request: Request):
    data = await json_body(request)
    if "metadata" not in data:
        raise ApiError(400, "metadata is required", param="metadata")
    metadata = check_metadata(data["metadata"])
    record = await service(request).update_metadata(_id(request), {METADATA_KEY: metadata})
    return JSON(conversation_object(record))


async def delete_conversation(request: Request):
    from foliko_cli.errors import SessionNotFoundError

    conversation = _id(request)
    deleted, _ = await service(request).delete_sessions([conversation])
    if not deleted:
        raise SessionNotFoundError(conversation)
    return JSON({"id": conversation, "object": "conversation.deleted", "deleted": True})


def _items(record: SessionRecord) -> list[dict[str, Any]]:
    return it.history_items(record.messages, 0, ids.scope_of(record.session_id))


async def list_items(request: Request):
    record = await service(request).get_session(_id(request))
    return JSON(it.page_of(_items(record), request))


def _item_at(record: SessionRecord, wanted: str) -> tuple[ids.ItemRef, dict[str, Any]]:
    ref = ids.parse_item_id(wanted)
    if (
        ref is not None
        and ref.session_id == record.session_id
        and ref.position < len(record.messages)
    ):
        scope = ids.scope_of(record.session_id)
        for item in it.message_items(record.messages[ref.position], ref.position, scope):
            if item["id"] == wanted:
                return ref, item
    shown = wanted if len(wanted) <= 200 else "(this id)"
    raise ApiError(404, f"no item {shown!r} in this conversation", code="not_found")


async def get_item(request: Request):
    record = await service(request).get_session(_id(request))
    return JSON(_item_at(record, request.path_params["item_id"])[1])


async def delete_item(request: Request):
    """Take one item out of the conversation: a message, or one function call
    of an assistant message (its other calls and its text stay). The items
    after a removed message move up one position, so their ids change."""
    svc = service(request)
    record = await svc.get_session(_id(request))
    ref, _ = _item_at(record, request.path_params["item_id"])
    message = dict(record.messages[ref.position])
    calls = list(message.get("tool_calls") or [])
    if ref.kind == "fc":
        del calls[ref.call_index]
    elif message.get("role") == "assistant" and calls:
        message["content"] = ""
    else:
        calls = []
        message = {}
    if calls:
        message["tool_calls"] = calls
    elif message:
        message.pop("tool_calls", None)
    keep = [message] if message and (message.get("content") or calls) else []
    record = await svc.splice_messages(
        record.session_id, ref.position, 1, keep, expected_revision=record.revision
    )
    return JSON(conversation_object(record))


async def add_items(request: Request):
    data = await json_body(request)
    messages = _items_of(data)
    if not messages:
        raise ApiError(400, "items must hold at least one item", param="items")
    svc = service(request)
    conversation = _id(request)
    record = await svc.get_session(conversation)
    it.name_tool_outputs(messages, record.messages)
    messages = stamped(request, messages)
    first = await svc.append_messages(conversation, messages)
    added = it.history_items(messages, first, ids.scope_of(conversation))
    return JSON(
        {
            "object": "list",
            "data": added,
            "first_id": added[0]["id"] if added else None,
            "last_id": added[-1]["id"] if added else None,
            "has_more": False,
        }
    )


_ONE = "/v1/conversations/{conversation_id:id}"
routes = [
    Route("/v1/conversations", create_conversation, methods=["POST"]),
    Route(_ONE + "/items/{item_id:id}", get_item, methods=["GET"]),
    Route(_ONE + "/items/{item_id:id}", delete_item, methods=["DELETE"]),
    Route(_ONE + "/items", list_items, methods=["GET"]),
    Route(_ONE + "/items", add_items, methods=["POST"]),
    Route(_ONE, get_conversation, methods=["GET"]),
    Route(_ONE, update_conversation, methods=["POST"]),
    Route(_ONE, delete_conversation, methods=["DELETE"]),
]
