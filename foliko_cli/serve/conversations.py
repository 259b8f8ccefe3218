"""``/v1/conversations``: OpenAI's Conversations API over foliko sessions.

A conversation is a session: its id is the session id, so sessions made by
the CLI are conversations too. Its ``metadata`` is kept in the session's
metadata under ``conversation_metadata``.
"""

from __future__ import annotations

from typing import Any, cast

from starlette.requests import Request

from foliko_cli.common.clock import now_ms
from foliko_cli.messages.item_numbers import ITEM, offset_of, position_of
from foliko_cli.messages.record import SessionRecord
from foliko_cli.serve import ids
from foliko_cli.serve import items as it
from foliko_cli.serve.common import seconds, service
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.openai_types import (
    Conversation,
    ConversationCreate,
    ConversationUpdate,
    Deleted,
    Item,
    ItemsAdd,
    ItemsQuery,
    Page,
    page,
    page_of,
    start_after,
)
from foliko_cli.serve.schema import Api
from foliko_cli.serve.stored import RECENT_CALLS, Span, answered, window_at

METADATA_KEY = "conversation_metadata"

api = Api("Conversations")


def conversation_object(record: SessionRecord) -> Conversation:
    return Conversation(
        id=record.session_id,
        created_at=seconds(record.metadata.get("created_at")),
        metadata=record.metadata.get(METADATA_KEY) or {},
    )


def stamped(request: Request, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = request.state.ids
    now = now_ms()
    return [
        {**m, "created_at": now, "request_id": ids.request_id, "trace_id": ids.trace_id}
        for m in messages
    ]


@api.post("/v1/conversations", body=ConversationCreate, answer=Conversation)
async def create_conversation(request: Request, body: ConversationCreate) -> Any:
    """Create a conversation (a session), with its first items."""
    messages = it.input_messages(body.items or [], "items")
    it.name_tool_outputs(messages, [], "items")
    record = await service(request).create_session(
        ids.new_conversation_id(),
        messages=stamped(request, messages),
        metadata={METADATA_KEY: body.metadata or {}},
    )
    return conversation_object(record)


def _id(request: Request) -> str:
    return cast(str, request.path_params["conversation_id"])


_ONE = "/v1/conversations/{conversation_id:id}"


@api.get(_ONE, answer=Conversation)
async def get_conversation(request: Request) -> Any:
    """A conversation (its history is not read)."""
    return conversation_object(await service(request).session_window(_id(request), 0, 0))


@api.post(_ONE, body=ConversationUpdate, answer=Conversation)
async def update_conversation(request: Request, body: ConversationUpdate) -> Any:
    """Replace a conversation's metadata."""
    metadata = {METADATA_KEY: body.metadata}
    return conversation_object(await service(request).update_metadata(_id(request), metadata))


@api.delete(_ONE, answer=Deleted)
async def delete_conversation(request: Request) -> Any:
    """Delete a conversation (its session)."""
    from foliko_cli.errors import SessionNotFoundError

    conversation = _id(request)
    deleted, _ = await service(request).delete_sessions([conversation])
    if not deleted:
        raise SessionNotFoundError(conversation)
    return Deleted(id=conversation, object="conversation.deleted")


def _items(record: SessionRecord) -> list[Item]:
    """The items of the messages ``record`` holds (a whole history or a window)."""
    scope = ids.scope_of(record.session_id)
    return it.history_items(record.messages, record.first_seq, scope, offset_of(record.metadata))


def _ref(request: Request, wanted: str) -> ids.ItemRef | None:
    """What the id of an item of this conversation says; None for any other id."""
    ref = ids.parse_item_id(wanted)
    return ref if ref is not None and ref.session_id == _id(request) else None


async def _window_with(
    request: Request, ref: ids.ItemRef, wanted: str, span: Span
) -> tuple[SessionRecord, list[Item]] | None:
    """The window ``span(position)`` around the message of the item ``wanted``, and
    its items; None where the item is not there (a rewrite pinned it elsewhere)."""
    record = await window_at(service(request), _id(request), ref.number, span)
    items = _items(record)
    return (record, items) if any(item.id == wanted for item in items) else None


async def _page(request: Request, query: ItemsQuery, ref: ids.ItemRef | None) -> Page[Item] | None:
    """The page, read from a window of the messages (every message is at least one
    item), never from the whole history; None where the window does not hold it
    (``after`` is not where its number says)."""
    reach = query.limit + 1
    ascending = query.order == "asc"
    if ref is None or query.after is None:
        span = (0, reach) if ascending else (-reach, None)
        record = await service(request).session_window(_id(request), *span)
        items = _items(record)
    else:
        after: Span = (
            (lambda p: (p, p + reach + 1)) if ascending else (lambda p: (max(0, p - reach), p + 1))
        )
        found = await _window_with(request, ref, query.after, after)
        if found is None:
            return None
        record, items = found
    ordered = items if ascending else items[::-1]
    rest = ordered[start_after([item.id for item in ordered], query.after, "item") :]
    if ascending:
        beyond = record.first_seq + len(record.messages) < record.metadata["message_count"]
    else:
        beyond = record.first_seq > 0
    if len(rest) <= query.limit and beyond:
        return None  # the window ended before the page (``after`` was not where it was looked for)
    return page(rest[: query.limit], len(rest) > query.limit)


@api.get(_ONE + "/items", query=ItemsQuery, answer=Page[Item])
async def list_items(request: Request, query: ItemsQuery) -> Any:
    """A conversation's items."""
    ref = None if query.after is None else _ref(request, query.after)
    if query.after is not None and ref is None:
        start_after([], query.after, "item")  # a 400: not an item of this conversation
    found = await _page(request, query, ref)
    if found is not None:
        return found
    record = await service(request).get_session(_id(request))
    return page_of(_items(record), query, "item")


def _item_at(record: SessionRecord, wanted: str) -> tuple[ids.ItemRef, int, Item]:
    """The item ``wanted``, what its id says, and its message's position."""
    ref = ids.parse_item_id(wanted)
    if ref is not None and ref.session_id == record.session_id:
        offset = offset_of(record.metadata)
        item = it.item_in(record.messages, offset, ref, wanted)
        position = position_of(record.messages, ref.number, offset)
        if item is not None and position is not None:
            return ref, position, item
    raise _no_item(wanted)


def _no_item(wanted: str) -> ApiError:
    shown = wanted if len(wanted) <= 200 else "(this id)"
    return ApiError(404, f"no item {shown!r} in this conversation", code="not_found")


_ITEM = _ONE + "/items/{item_id:id}"


@api.get(_ITEM, answer=Item)
async def get_item(request: Request) -> Any:
    """One item of a conversation."""
    wanted = request.path_params["item_id"]
    ref = _ref(request, wanted)
    if ref is None:
        await service(request).session_window(_id(request), 0, 0)  # a missing conversation's 404
        raise _no_item(wanted)
    found = await _window_with(request, ref, wanted, lambda p: (p, p + 1))
    if found is not None:
        return next(item for item in found[1] if item.id == wanted)
    record = await service(request).get_session(_id(request))
    return _item_at(record, wanted)[2]


@api.delete(_ITEM, answer=Conversation)
async def delete_item(request: Request) -> Any:
    """Remove an item; no other item's id changes.

    Take one item out of the conversation: a message, or one function call
    of an assistant message (its other calls and its text stay). Every item
    keeps its id for its whole life (the message keeps its item number, each
    call its index), and no item added later is given a removed one's."""
    svc = service(request)
    record = await svc.get_session(_id(request))
    ref, position, _ = _item_at(record, request.path_params["item_id"])
    message = {**record.messages[position], ITEM: ref.number}
    calls = [{**call, ITEM: index} for index, call in it.indexed_calls(message)]
    if ref.kind == "fc":
        calls = [call for call in calls if call[ITEM] != ref.call_index]
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
        record.session_id, position, 1, keep, expected_revision=record.revision
    )
    return conversation_object(record)


@api.post(_ONE + "/items", body=ItemsAdd, answer=Page[Item])
async def add_items(request: Request, body: ItemsAdd) -> Any:
    """Add items to a conversation."""
    messages = it.input_messages(body.items, "items")
    if not messages:
        raise ApiError(400, "items must hold at least one item", param="items")
    svc = service(request)
    conversation = _id(request)
    answers = any(m["role"] == "tool" for m in messages)
    # the calls a function output may answer are looked for near the end first
    record = await svc.session_window(
        conversation, -RECENT_CALLS if answers else 0, None if answers else 0
    )
    if record.first_seq and not answered(messages, record.messages):
        record = await svc.get_session(conversation)
    it.name_tool_outputs(messages, record.messages, "items")
    messages = stamped(request, messages)
    first = await svc.append_messages(conversation, messages)
    return page(it.history_items(messages, first, ids.scope_of(conversation)), False)


routes = api.routes
