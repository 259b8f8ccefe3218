"""``/v1/sessions``: the CLI's session commands over HTTP, in their JSON shapes.

Rows are those of ``sessions list --json``, a session that of ``sessions
show --json``; ``export`` is one session as ``sessions export`` writes it;
``compact``, ``compactions``, ``uncompact`` and ``tree`` answer what those
commands print with ``--json`` (lists as ``{"object": "list", "data"}``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request

from foliko_cli.messages.public import record_to_dict, summary_to_dict
from foliko_cli.messages.usage import with_usage
from foliko_cli.serve.common import service
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.native_types import (
    Clear,
    Compaction,
    CompactionList,
    CompactNow,
    Fork,
    ForkTree,
    Listed,
    Rename,
    Session,
    SessionDeleted,
    SessionRow,
    SessionsQuery,
    Uncompacted,
    Variable,
    VariableDeleted,
)
from foliko_cli.serve.openai_types import Page, page_of
from foliko_cli.serve.schema import Api

if TYPE_CHECKING:
    from foliko_cli.messages.record import SessionRecord

api = Api("Sessions")


def shown(record: SessionRecord) -> dict[str, Any]:
    """As ``sessions show --json`` and ``export`` print it (usage totals included)."""
    return with_usage(record_to_dict(record), record)


@api.get("/v1/sessions", query=SessionsQuery, answer=Page[SessionRow])
async def list_sessions(request: Request, query: SessionsQuery) -> Any:
    """Sessions, most recently updated first (``sessions list --json``).

    ``after`` is the last id of the previous page. Each row also has the
    session's ``title`` and ``forked_from`` (the session it was forked from),
    None when it has none."""
    summaries = await service(request).list_sessions(sort="updated")
    listed = page_of(summaries, query, "session", lambda summary: summary.session_id)
    labels = await service(request).session_labels([s.session_id for s in listed.data])
    listed.data = [{**summary_to_dict(s), **labels[s.session_id]} for s in listed.data]
    return listed


def _id(request: Request) -> str:
    return cast(str, request.path_params["session_id"])


_ONE = "/v1/sessions/{session_id:id}"


@api.get(_ONE, answer=Session)
async def show_session(request: Request) -> Any:
    """A session (``sessions show --json``)."""
    return shown(await service(request).get_session(_id(request)))


@api.get(_ONE + "/export", answer=list[Session])
async def export_session(request: Request) -> Any:
    """Export a session, as ``sessions export`` writes it."""
    return [await service(request).export_document(_id(request))]


@api.delete(_ONE, answer=SessionDeleted)
async def delete_session(request: Request) -> Any:
    """Delete a session (into the trash, when ``in_trash`` says so)."""
    from foliko_cli.errors import SessionNotFoundError

    svc = service(request)
    deleted, _ = await svc.delete_sessions([_id(request)])
    if not deleted:
        raise SessionNotFoundError(_id(request))
    in_trash = svc.trash_keep > 0  # restore it from /v1/trash within the undo window
    return SessionDeleted(session_id=_id(request), in_trash=in_trash)


@api.post(_ONE + "/rename", body=Rename, answer=Session)
async def rename_session(request: Request, body: Rename) -> Any:
    """Rename a session."""
    svc = service(request)
    await svc.rename_session(_id(request), body.to)
    return record_to_dict(await svc.get_session(body.to))


@api.post(_ONE + "/fork", body=Fork, answer=Session)
async def fork_session(request: Request, body: Fork) -> Any:
    """Copy a session as ``to``: all of it, or with ``upto``, its first ``upto`` messages."""
    record = await service(request).fork_session(_id(request), body.to, upto=body.upto)
    return record_to_dict(record)


@api.post(_ONE + "/clear", body=Clear, answer=Session)
async def clear_session(request: Request, body: Clear) -> Any:
    """Drop a session's history (``variables``: its variables too)."""
    record = await service(request).clear_session(_id(request), variables=body.variables)
    return record_to_dict(record)


@api.post(_ONE + "/compact", body=CompactNow, answer=Compaction)
async def compact_session(request: Request, body: CompactNow) -> Any:
    """Compress a session's history now (``sessions compact --json``)."""
    return await service(request).compact(_id(request), keep=body.keep, model=body.model)


@api.get(_ONE + "/compactions", answer=CompactionList)
async def list_compactions(request: Request) -> Any:
    """A session's compactions (``sessions show --compactions --json``)."""
    return Listed(data=await service(request).compactions(_id(request)))


@api.post(_ONE + "/uncompact", answer=Uncompacted)
async def uncompact_session(request: Request) -> Any:
    """Send a session's whole history again from its next turn (``sessions uncompact``)."""
    record = await service(request).uncompact(_id(request))
    return Uncompacted(uncompacted=record.session_id, messages=record.first_seq)


@api.get(_ONE + "/tree", answer=ForkTree)
async def family_tree(request: Request) -> Any:
    """A session's fork family (``sessions tree ID --json``)."""
    return Listed(data=await service(request).session_tree(_id(request)))


@api.get("/v1/tree", answer=ForkTree)
async def whole_tree(request: Request) -> Any:
    """Every session's fork tree (``sessions tree --json``)."""
    return Listed(data=await service(request).session_tree())


_VARS = _ONE + "/vars"


@api.get(_VARS, answer=dict[str, Any])
async def get_vars(request: Request) -> Any:
    """A session's variables."""
    return await service(request).get_variables(_id(request))


@api.put(_VARS, body=dict[str, Any], answer=dict[str, Any])
async def put_vars(request: Request, body: dict[str, Any]) -> Any:
    """Set variables: every key of the JSON object (others are kept)."""
    if not body:
        raise ApiError(400, "send a JSON object of the variables to set")
    return await service(request).update_variables(_id(request), body)


@api.delete(_VARS, answer=dict[str, Any])
async def clear_vars(request: Request) -> Any:
    """Remove every variable of a session."""
    svc = service(request)
    current = await svc.get_variables(_id(request))
    return await svc.update_variables(_id(request), {}, unset=tuple(current))


_VAR = _VARS + "/{key:id}"


@api.get(_VAR, answer=Variable)
async def get_var(request: Request) -> Any:
    """One variable."""
    key = request.path_params["key"]
    variables = await service(request).get_variables(_id(request))
    if key not in variables:
        raise ApiError(404, f"variable {key!r} is not set", code="variable_not_found")
    return Variable(key=key, value=variables[key])


@api.put(_VAR, body=Any, answer=Variable)
async def put_var(request: Request, body: Any) -> Any:
    """Set one variable: the body is its value, any JSON (``{"value": V}`` is
    stored as that object)."""
    key = request.path_params["key"]
    variables = await service(request).update_variables(_id(request), {key: body})
    return Variable(key=key, value=variables[key])


@api.delete(_VAR, answer=VariableDeleted)
async def delete_var(request: Request) -> Any:
    """Remove one variable."""
    from foliko_cli.errors import VariableNotSetError

    key = request.path_params["key"]
    try:
        await service(request).update_variables(_id(request), {}, unset=(key,))
    except VariableNotSetError:
        raise ApiError(404, f"variable {key!r} is not set", code="variable_not_found") from None
    return VariableDeleted(key=key)


routes = api.routes
