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

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from foliko_cli.serve import ids
from foliko_cli.serve import items as it
from foliko_cli.serve.common import (
    JSON,
    check_metadata,
    field,
    json_body,
    request_context,
    service,
)
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.formats import reply_schema
from foliko_cli.serve.images import attached
from foliko_cli.serve.response_object import echoed_options, response_object
from foliko_cli.serve.response_stream import sse_events
from foliko_cli.serve.tools import function_tools, tool_choice
from foliko_cli.serve.turns import Turn
from foliko_cli.service import AsyncFoliko
from foliko_cli.storage.record import SessionRecord

DELETED_KEY = "deleted_responses"


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


async def load_session(svc: AsyncFoliko, session_id: str, missing: ApiError) -> SessionRecord:
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


class StoredResponse:
    """A response rebuilt from its session: the turn's input and output messages."""

    def __init__(self, record: SessionRecord, start: int, span: list[dict[str, Any]]):
        self.record = record
        self.start = start
        self.span = span
        self.split = it.output_start(span)

    @property
    def end(self) -> int:
        return self.start + len(self.span)

    @property
    def inputs(self) -> list[dict[str, Any]]:
        return self.span[: self.split]

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self.span[self.split :]


async def stored_response(svc: AsyncFoliko, response_id: Any) -> StoredResponse:
    session_id, start = ids.parse_response_id(response_id)
    missing = ids.response_not_found(response_id)
    record = await load_session(svc, session_id, missing)
    span = turn_span(record.messages, start)
    found = StoredResponse(record, start, span)
    if not found.outputs or start in (record.metadata.get(DELETED_KEY) or ()):
        raise missing
    return found


async def _history_of(svc: AsyncFoliko, session_id: str) -> list[dict[str, Any]] | None:
    from foliko_cli.errors import InvalidSessionIdError, SessionNotFoundError

    try:
        return (await svc.get_session(session_id)).messages
    except (SessionNotFoundError, InvalidSessionIdError):
        return None


async def plan_turn(
    request: Request, data: dict[str, Any], remembered: list[dict[str, Any]] | None = None
) -> tuple[Turn, dict[str, Any]]:
    """The turn a request asks for, and the options its response echoes.

    ``remembered`` is the history ``previous_response_id`` names when only the
    caller holds it (the store: false response a WebSocket connection keeps)."""
    svc = service(request)
    model = field(data, "model", str)
    store = field(data, "store", bool, True)
    instructions = field(data, "instructions", str)
    previous = field(data, "previous_response_id", str)
    conversation = conversation_id(data.get("conversation"))
    text_format = (field(data, "text", dict) or {}).get("format")
    schema = reply_schema(text_format, "text.format", nested=False)
    options = echoed_options(data, text_format if schema is not None else None)
    check_metadata(data.get("metadata"))
    client_tools = function_tools(data.get("tools"))
    if conversation and previous:
        raise ApiError(400, "give conversation or previous_response_id, not both", param="input")
    if "input" not in data:
        raise ApiError(400, "input is required", param="input")
    raw_input = await it.resolve_references(data["input"], lambda s: _history_of(svc, s))
    messages = it.input_messages(raw_input)
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
    session_id: str
    target: dict[str, Any] = {}
    fallback: dict[str, Any] | None = None
    if conversation is not None:
        missing = ApiError(404, f"no conversation {conversation[:200]!r}", code="not_found")
        if store and not any(m["role"] == "tool" for m in extra):
            await _exists(svc, conversation, missing)  # the turn itself reads the history
        else:
            history = (await load_session(svc, conversation, missing)).messages
        session_id = conversation
    elif previous is not None and remembered is not None:
        if store:
            raise ApiError(
                400,
                "previous_response_id names a store: false response, which nothing stored "
                "can continue; send store: false, or the full input without previous_response_id",
                param="store",
            )
        history, session_id = remembered, ""
    elif previous is not None:
        found = await stored_response(svc, previous)
        history = found.record.messages[: found.end]
        source = found.record.session_id
        fork = {"fork_from": source, "upto": found.end}
        if found.end == len(found.record.messages):
            session_id = source
            target = {"expected_revision": found.record.revision}
            fallback = fork
        else:
            session_id, target = ids.new_conversation_id(), fork
    else:
        session_id = ids.new_conversation_id()
    it.name_tool_outputs(extra, history)
    sampling = {
        "temperature": options["temperature"],
        "top_p": options["top_p"],
        "max_tokens": options["max_output_tokens"],
        "tool_choice": tool_choice(data.get("tool_choice")),
    }
    turn_options = {
        "model": model,
        "instructions": instructions,
        "request": request_context(request, svc),
        "messages": tuple(extra),
        "client_tools": client_tools,
        "server_tools": request.app.state.services.serve_tools,
        "attachments": attachments,
        "options": {key: value for key, value in sampling.items() if value is not None},
        "schema": schema,
    }
    if not store:
        return Turn(svc, None, text, scratch=history, **turn_options), options
    turn = Turn(svc, session_id, text, **turn_options, **target)
    if fallback is not None:
        turn.fall_back_to(ids.new_conversation_id(), **fallback)
    return turn, options


def finished_response(turn: Turn, options: dict[str, Any], model: str | None) -> dict[str, Any]:
    outputs = turn.messages[it.output_start(turn.messages) :]
    first = turn.start + len(turn.messages) - len(outputs)
    return response_object(
        response_id=turn.response_id,
        session_id=turn.session_id if turn.stored else None,
        output=it.output_items(outputs, first, turn.scope),
        outputs=outputs,
        model=model or (turn.result.model if turn.result else None),
        options=options,
        created_at=turn.created_at,
    )


async def create_response(request: Request):
    data = await json_body(request)
    stream = field(data, "stream", bool, False)
    if field(data, "background", bool, False):
        raise ApiError(
            400,
            "background responses are not available yet; send the request without background",
            param="background",
        )
    turn, options = await plan_turn(request, data)
    services = request.app.state.services
    model = field(data, "model", str)
    if not stream:
        await turn.run(services)
        return JSON(finished_response(turn, options, model))
    events = await turn.stream(services)
    return StreamingResponse(
        sse_events(turn, events, options, model, finished_response),
        media_type="text/event-stream",
        headers={"cache-control": "no-store"},
    )


async def get_response(request: Request):
    if request.query_params.get("stream") in ("true", "1"):
        raise ApiError(
            400,
            "a finished response has no event stream to resume; get it without stream",
            param="stream",
        )
    found = await stored_response(service(request), request.path_params["response_id"])
    first = found.start + found.split
    scope = ids.scope_of(found.record.session_id)
    model = next((m.get("model") for m in reversed(found.outputs) if m.get("model")), None)
    return JSON(
        response_object(
            response_id=ids.response_id(scope, found.start),
            session_id=found.record.session_id,
            output=it.output_items(found.outputs, first, scope),
            outputs=found.outputs,
            model=model,
            created_at=(found.span[0].get("created_at", 0) // 1000),
            completed_at=(found.span[-1].get("created_at", 0) // 1000),
        )
    )


async def delete_response(request: Request):
    """The response is gone (GET, input_items and continuing it are 404); its
    messages stay in its conversation, whose items they are."""
    svc = service(request)
    rid = request.path_params["response_id"]
    found = await stored_response(svc, rid)
    deleted = sorted({*(found.record.metadata.get(DELETED_KEY) or ()), found.start})
    await svc.update_metadata(found.record.session_id, {DELETED_KEY: deleted})
    return JSON({"id": rid, "object": "response", "deleted": True})


async def cancel_response(request: Request):
    await stored_response(service(request), request.path_params["response_id"])
    raise ApiError(
        400,
        "only a background response can be cancelled, and this one has finished",
        param="response_id",
    )


async def get_input_items(request: Request):
    found = await stored_response(service(request), request.path_params["response_id"])
    scope = ids.scope_of(found.record.session_id)
    return JSON(it.page_of(it.history_items(found.inputs, found.start, scope), request))


routes = [
    Route("/v1/responses", create_response, methods=["POST"]),
    Route("/v1/responses/{response_id:id}", get_response, methods=["GET"]),
    Route("/v1/responses/{response_id:id}", delete_response, methods=["DELETE"]),
    Route("/v1/responses/{response_id:id}/cancel", cancel_response, methods=["POST"]),
    Route("/v1/responses/{response_id:id}/input_items", get_input_items, methods=["GET"]),
]
