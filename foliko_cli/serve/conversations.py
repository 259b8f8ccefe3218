"""``/v1/conversations``: OpenAI's Conversations API over foliko sessions.

A conversation is a session: its id is the session id, so sessions made by
the CLI are conversations too. Its ``metadata`` is kept in the session's
metadata under ``conversation_metadata``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.clock import now_ms
from foliko_cli.serve import items as it
from foliko_cli.serve.common import JSON, json_body, seconds, service
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.responses import new_conversation_id
from foliko_cli.storage.record import SessionRecord

METADATA_KEY = "conversation_metadata"


def check_metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > 16:
        raise ApiError(400, "metadata must be an object of at most 16 pairs", param="metadata")
    for key, text in value.items():
        if not isinstance(text, str) or len(key) > 64 or len(text) > 512:
            raise ApiError(
                400,
                "metadata values must be strings (keys up to 64, values up to 512 characters)",
                param="metadata",
            )
    return value


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
        new_conversation_id(),
        messages=stamped(request, messages),
        metadata={METADATA_KEY: metadata},
    )
    return JSON(conversation_object(record))


async def get_conversation(request: Request):
    record = await service(request).get_session(request.path_params["conversation_id"])
    return JSON(conversation_object(record))


async def update_conversation(request: Request):
    data = await json_body(request)
    if "metadata" not in data:
        raise ApiError(400, "metadata is required", param="metadata")
    metadata = check_metadata(data["metadata"])
    record = await service(request).update_metadata(
        request.path_params["conversation_id"], {METADATA_KEY: metadata}
    )
    return JSON(conversation_object(record))


async def delete_conversation(request: Request):
    from foliko_cli.errors import SessionNotFoundError

    conversation = request.path_params["conversation_id"]
    deleted, _ = await service(request).delete_sessions([conversation])
    if not deleted:
        raise SessionNotFoundError(conversation)
    return JSON({"id": conversation, "object": "conversation.deleted", "deleted": True})


async def list_items(request: Request):
    record = await service(request).get_session(request.path_params["conversation_id"])
    return JSON(it.page_of(it.history_items(record.messages), request))


async def get_item(request: Request):
    record = await service(request).get_session(request.path_params["conversation_id"])
    wanted = request.path_params["item_id"]
    for item in it.history_items(record.messages):
        if item["id"] == wanted:
            return JSON(item)
    raise ApiError(404, f"item {wanted!r} not found", code="not_found")


async def add_items(request: Request):
    data = await json_body(request)
    messages = _items_of(data)
    if not messages:
        raise ApiError(400, "items must hold at least one item", param="items")
    svc = service(request)
    conversation = request.path_params["conversation_id"]
    record = await svc.get_session(conversation)
    it.name_tool_outputs(messages, record.messages)
    messages = stamped(request, messages)
    first = await svc.append_messages(conversation, messages)
    added = it.history_items(messages, first)
    return JSON(
        {
            "object": "list",
            "data": added,
            "first_id": added[0]["id"] if added else None,
            "last_id": added[-1]["id"] if added else None,
            "has_more": False,
        }
    )


_ONE = "/v1/conversations/{conversation_id:path}"
routes = [
    Route("/v1/conversations", create_conversation, methods=["POST"]),
    Route(_ONE + "/items/{item_id}", get_item, methods=["GET"]),
    Route(_ONE + "/items", list_items, methods=["GET"]),
    Route(_ONE + "/items", add_items, methods=["POST"]),
    Route(_ONE, get_conversation, methods=["GET"]),
    Route(_ONE, update_conversation, methods=["POST"]),
    Route(_ONE, delete_conversation, methods=["DELETE"]),
]
