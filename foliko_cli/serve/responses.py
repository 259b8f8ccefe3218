"""``/v1/responses``: one turn of a conversation (a foliko session) per request.

Without ``conversation`` or ``previous_response_id`` a response starts a
session of its own. ``previous_response_id`` continues R's session when R
is still its latest turn at the moment the turn takes the session's lock,
and otherwise runs in a new session holding exactly the history up to R
(a fork made in the turn's own write: a turn that fails leaves nothing).
``store: false`` runs the turn on a scratch copy: nothing is saved.
Function tools are the client's: when the model calls one, the response
returns the ``function_call`` item, and the ``function_call_output`` the
client sends next continues the turn.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request

from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.serve import background, ids
from foliko_cli.serve import items as it
from foliko_cli.serve.access_log import LOG_SESSION
from foliko_cli.serve.common import if_busy, request_context, service
from foliko_cli.serve.compaction import Carried, split_compaction
from foliko_cli.serve.compaction_item import compact_threshold
from foliko_cli.serve.conversations import stamped
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.formats import reply_schema
from foliko_cli.serve.images import attached
from foliko_cli.serve.openai_types import (
    ConversationRef,
    Deleted,
    Input,
    InputTokens,
    Item,
    ItemsQuery,
    Page,
    Response,
    ResponseCreate,
    ResponseQuery,
    page_of,
)
from foliko_cli.serve.response_object import echoed_options, kept_options, response_object
from foliko_cli.serve.response_stream import response_stream
from foliko_cli.serve.schema import JSON, Api
from foliko_cli.serve.stored import (
    DELETED_KEY,
    RECENT_CALLS,
    answered,
    exists,
    history_of,
    latest_response,
    load_session,
    stored_response,
)
from foliko_cli.serve.tools import NOT_HOSTED_HEADER, namespaces_of, offered_tools, tool_choice
from foliko_cli.serve.turns import Turn
from foliko_cli.service import AsyncFoliko

api = Api("Responses")


async def plan_turn(
    request: Request, body: ResponseCreate, remembered: list[dict[str, Any]] | None = None
) -> tuple[Turn, dict[str, Any]]:
    """The turn a request asks for, and the options its response echoes.

    ``remembered`` is the history ``previous_response_id`` names when only the
    caller holds it (the store: false response a WebSocket connection keeps)."""
    svc = service(request)
    policy = if_busy(request)
    previous = body.previous_response_id
    conversation = body.conversation
    if isinstance(conversation, ConversationRef):
        conversation = conversation.id
    text_format = body.text.format if body.text is not None else None
    schema = reply_schema(text_format, "text.format")
    client_tools, not_hosted = offered_tools(body.tools)
    options = echoed_options(body, text_format if schema is not None else None)
    options["not_hosted"] = not_hosted
    options["namespaces"] = namespaces_of(body.tools)
    if conversation and previous:
        raise ApiError(400, "give conversation or previous_response_id, not both", param="input")
    carried, text, extra, attachments = await _input(svc, body.input, conversation or previous)
    place = await _place(svc, conversation, previous, remembered, body.store, extra)
    if carried is not None:
        it.name_tool_outputs(carried.messages, [])
        place.history = stamped(request, carried.messages)
        compressed = {"summary": carried.summary, "covered": len(carried.covered)}
        start = SessionRecord(
            place.session_id,
            messages=place.history,
            metadata=new_metadata(),
            compression_state=compressed,
        )
        place.target = {"start_from": start, "expected_revision": 0}
    it.name_tool_outputs(extra, place.history)
    threshold = compact_threshold(body.context_management)
    turn_options = {
        "model": body.model,
        "instructions": body.instructions,
        "request": request_context(request, svc),
        "if_busy": policy,
        "messages": tuple(extra),
        "client_tools": client_tools,
        "server_tools": request.app.state.services.serve_tools,
        "attachments": attachments,
        "options": _sampling(body),
        "schema": schema,
        "compress": body.truncation != "disabled" or threshold is not None,
        "compact_above": threshold,
        "annotations": {"response": kept_options(options)} if body.store else {},
    }
    if not body.store:
        scratch = {key: place.target[key] for key in ("start_from",) if key in place.target}
        return Turn(svc, None, text, scratch=place.history, **turn_options, **scratch), options
    turn = Turn(svc, place.session_id, text, **turn_options, **place.target)
    if place.fallback is not None:
        turn.fall_back_to(ids.new_conversation_id(), **place.fallback)
    return turn, options


async def _input(
    svc: AsyncFoliko, raw: Input, continued: str | None
) -> tuple[Carried | None, str, list[dict[str, Any]], list[Any]]:
    """What the input's compaction item carries (when it has one), the user's
    text, the messages before it and the text's attachments. ``continued``:
    the conversation or response the input continues."""
    resolved = await it.resolve_references(raw, lambda s: history_of(svc, s))
    carried, resolved = split_compaction(resolved)
    if carried is not None and continued:
        raise ApiError(
            400,
            "a compaction item starts a new conversation; send it without conversation "
            "or previous_response_id",
            param="input",
        )
    messages = it.input_messages(resolved)
    if not messages:
        raise ApiError(400, "input is empty", param="input")
    if messages[-1]["role"] == "user":
        return carried, messages[-1]["content"], messages[:-1], attached(messages[-1])
    if messages[-1]["role"] == "tool":
        return carried, "", messages, []
    raise ApiError(
        400, "input must end with a user message or a function_call_output", param="input"
    )


class _Place:
    """Where a turn runs: its session, the ``target`` it asks of it (a revision
    to expect, a fork to make), the ``fallback`` when that revision has
    moved, and the ``history`` it continues (for a scratch turn, and to name
    tool outputs)."""

    def __init__(
        self,
        session_id: str,
        history: list[dict[str, Any]] | None = None,
        target: dict[str, Any] | None = None,
        fallback: dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.history = history or []
        self.target = target or {}
        self.fallback = fallback


async def _place(
    svc: AsyncFoliko,
    conversation: str | None,
    previous: str | None,
    remembered: list[dict[str, Any]] | None,
    store: bool,
    extra: list[dict[str, Any]],
) -> _Place:
    # Stored, the turn reads the history itself: here, only the calls the input's
    # function outputs answer are looked for, near the end first.
    if conversation is not None:
        missing = ApiError(404, f"no conversation {conversation[:200]!r}", code="not_found")
        if store and not any(m["role"] == "tool" for m in extra):
            await exists(svc, conversation, missing)
            return _Place(conversation)
        if store:
            recent = await load_session(svc, conversation, missing, (-RECENT_CALLS, None))
            if not recent.first_seq or answered(extra, recent.messages):
                return _Place(conversation, recent.messages)
        return _Place(conversation, (await load_session(svc, conversation, missing)).messages)
    if previous is None:
        return _Place(ids.new_conversation_id())
    if remembered is not None:
        if store:
            raise ApiError(
                400,
                "previous_response_id names a store: false response, which nothing stored "
                "can continue; send store: false, or the full input without previous_response_id",
                param="store",
            )
        return _Place("", remembered)
    latest = await latest_response(svc, previous) if store else None
    if latest is not None and answered(extra, latest.span):
        source = latest.record.session_id
        fork = {"fork_from": source, "upto": latest.end}
        return _Place(source, latest.span, {"expected_revision": latest.record.revision}, fork)
    found = await stored_response(svc, previous, whole=True)
    history = found.record.messages[: found.end]
    source = found.record.session_id
    fork = {"fork_from": source, "upto": found.end}
    if found.end == len(found.record.messages):
        return _Place(source, history, {"expected_revision": found.record.revision}, fork)
    return _Place(ids.new_conversation_id(), history, fork)


def _sampling(body: ResponseCreate) -> dict[str, Any]:
    """The model options the request sets."""
    sampling = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_tokens": body.max_output_tokens,
        "tool_choice": tool_choice(body.tool_choice),
        "parallel_tool_calls": False if body.parallel_tool_calls is False else None,
    }
    return {key: value for key, value in sampling.items() if value is not None}


def finished_response(turn: Turn, options: dict[str, Any], model: str | None) -> Response:
    outputs = turn.messages[it.output_start(turn.messages) :]
    first = turn.start + len(turn.messages) - len(outputs)
    return response_object(
        response_id=turn.response_id,
        session_id=turn.session_id if turn.stored else None,
        output=it.output_items(
            outputs,
            first,
            turn.scope,
            options.get("namespaces"),
            (turn.messages, turn.start),
            turn.first_item - turn.start,
        ),
        outputs=outputs,
        model=model or (turn.result.model if turn.result else None),
        options=options,
        created_at=turn.created_at,
    )


@api.post("/v1/responses", body=ResponseCreate, answer=Response, events=True)
async def create_response(request: Request, body: ResponseCreate) -> Any:
    """Run one turn (``stream``: its events; ``background``: answer at once, queued)."""
    if body.background:
        return await background.create(request, body, HOOKS)
    turn, options = await plan_turn(request, body)
    if turn.stored:
        setattr(request.state, LOG_SESSION, turn.session_id)
    services = request.app.state.services
    headers = {NOT_HOSTED_HEADER: ", ".join(options["not_hosted"])} if options["not_hosted"] else {}
    if not body.stream:
        await turn.run(services)
        return JSON(finished_response(turn, options, body.model), headers=headers)
    events = await turn.stream(services)
    return response_stream(turn, events, options, body.model, finished_response, headers)


async def stored_object(svc: AsyncFoliko, response_id: str) -> Response:
    found = await stored_response(svc, response_id)
    if any(m.get("compactions") for m in found.outputs):  # it shows what the summary kept
        found = await stored_response(svc, response_id, whole=True)
    first = found.start + found.split
    scope = ids.scope_of(found.record.session_id)
    model = next((m.get("model") for m in reversed(found.outputs) if m.get("model")), None)
    asked = found.span[0].get("response") or {}
    return response_object(
        response_id=ids.response_id(scope, found.number),
        session_id=found.record.session_id,
        output=it.output_items(
            found.outputs,
            first,
            scope,
            asked.get("namespaces"),
            (found.record.messages, found.record.first_seq),
            found.offset,
        ),
        outputs=found.outputs,
        model=model,
        options=asked,
        created_at=(found.span[0].get("created_at", 0) // 1000),
        completed_at=(found.span[-1].get("created_at", 0) // 1000),
    )


_ONE = "/v1/responses/{response_id:id}"


@api.get(_ONE, query=ResponseQuery, answer=Response, events=True)
async def get_response(request: Request, query: ResponseQuery) -> Any:
    """A stored response, or a background one as it stands (``stream``: its
    events after ``starting_after``, then live to its end)."""
    if ids.parse_background_id(request.path_params["response_id"]) is not None:
        return await background.get(request, query, HOOKS)
    if query.stream:
        raise ApiError(
            400,
            "a finished response has no event stream to resume; get it without stream",
            param="stream",
        )
    return await stored_object(service(request), request.path_params["response_id"])


@api.delete(_ONE, answer=Deleted)
async def delete_response(request: Request) -> Any:
    """Delete a response: GET, input items and continuing it are 404; its
    messages stay in its conversation, whose items they are."""
    svc = service(request)
    rid = request.path_params["response_id"]
    found = await stored_response(svc, rid)

    def tombstone(metadata: dict[str, Any]) -> dict[str, Any]:
        return {DELETED_KEY: sorted({*(metadata.get(DELETED_KEY) or ()), found.number})}

    await svc.update_metadata(found.record.session_id, tombstone)
    return Deleted(id=rid, object="response")


@api.post(_ONE + "/cancel", answer=Response)
async def cancel_response(request: Request) -> Any:
    """Cancel a background response: the turn stops and nothing of it is saved
    (the Response with status cancelled; once finished, the Response as it is;
    a response not run in the background is a 400)."""
    if ids.parse_background_id(request.path_params["response_id"]) is not None:
        return await background.cancel(request, HOOKS)
    await stored_response(service(request), request.path_params["response_id"])
    raise ApiError(
        400,
        "only a background response can be cancelled, and this one has finished",
        param="response_id",
    )


@api.get(_ONE + "/input_items", query=ItemsQuery, answer=Page[Item])
async def get_input_items(request: Request, query: ItemsQuery) -> Any:
    """The input items of a response."""
    found = await stored_response(service(request), request.path_params["response_id"])
    scope = ids.scope_of(found.record.session_id)
    items = it.history_items(found.inputs, found.start, scope, found.offset)
    return page_of(items, query, "item")


@api.post("/v1/responses/input_tokens", body=ResponseCreate, answer=InputTokens)
async def count_input_tokens(request: Request, body: ResponseCreate) -> Any:
    """Count what a request would send its model: by the model's server when it
    has a tokenizer (llama.cpp), else foliko's estimate (``counted_by``)."""
    turn, _ = await plan_turn(request, msgspec.structs.replace(body, store=False))
    tokens, counted = await turn.count_tokens(request.app.state.services)
    return InputTokens(input_tokens=tokens, counted_by="tokenizer" if counted else "estimate")


HOOKS = background.Hooks(plan_turn, finished_response, stored_object)
routes = api.routes
