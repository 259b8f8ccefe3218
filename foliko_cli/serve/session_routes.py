"""``/v1/sessions``: the CLI's session commands over HTTP, in their JSON shapes.

Rows are those of ``sessions list --json``, a session that of ``sessions
show --json``; ``export`` is one session as ``sessions export`` writes it;
``compact``, ``compactions``, ``uncompact`` and ``tree`` answer what those
commands print with ``--json`` (lists as ``{"object": "list", "data"}``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.messages.public import record_to_dict, summary_to_dict
from foliko_cli.messages.usage import with_usage
from foliko_cli.serve.common import JSON, field, json_body, query_int, service
from foliko_cli.serve.errors import ApiError

if TYPE_CHECKING:
    from foliko_cli.service import AsyncFoliko


def shown(record):
    """As ``sessions show --json`` and ``export`` print it (usage totals included)."""
    return with_usage(record_to_dict(record), record)


async def list_sessions(request: Request):
    """Most recently updated first; ``after`` is the last id of the previous page.
    Each row also has the session's ``title`` and ``forked_from`` (the session it
    was forked from), None when it has none."""
    limit = query_int(request, "limit", 100, 1, 1000)
    after = request.query_params.get("after")
    summaries = await service(request).list_sessions(sort="updated")
    if after is not None:
        ids = [s.session_id for s in summaries]
        if after not in ids:
            raise ApiError(400, f"after: no session {after!r} in this list", param="after")
        summaries = summaries[ids.index(after) + 1 :]
    page = [summary_to_dict(s) for s in summaries[:limit]]
    await _label(service(request), page)
    return JSON(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["session_id"] if page else None,
            "last_id": page[-1]["session_id"] if page else None,
            "has_more": len(summaries) > limit,
        }
    )


async def _label(svc: AsyncFoliko, rows: list[dict]) -> None:
    """Set each row's ``title`` and ``forked_from``, read without the histories (a
    damaged or vanished session has neither)."""
    from foliko_cli.errors import CorruptSessionError
    from foliko_cli.storage import capabilities

    for row in rows:
        try:
            state = await capabilities.load_state(svc.storage, row["session_id"])
        except CorruptSessionError:
            state = None
        metadata = state.metadata if state is not None else {}
        for key in ("title", "forked_from"):
            value = metadata.get(key)
            row[key] = value if isinstance(value, str) and value else None


def _id(request: Request) -> str:
    return request.path_params["session_id"]


async def show_session(request: Request):
    return JSON(shown(await service(request).get_session(_id(request))))


async def export_session(request: Request):
    from foliko_cli.formats.exporters.foliko import document

    record = await service(request).get_session(_id(request))
    return JSON([document(record)])


async def delete_session(request: Request):
    from foliko_cli.errors import SessionNotFoundError

    svc = service(request)
    deleted, _ = await svc.delete_sessions([_id(request)])
    if not deleted:
        raise SessionNotFoundError(_id(request))
    in_trash = svc.trash_keep > 0  # restore it from /v1/trash within the undo window
    return JSON({"session_id": _id(request), "deleted": True, "in_trash": in_trash})


def _target_of(data: dict) -> str:
    target = data.get("to")
    if not isinstance(target, str):
        raise ApiError(400, 'give the new name as {"to": NAME}', param="to")
    return target


async def _target(request: Request) -> str:
    return _target_of(await json_body(request))


async def rename_session(request: Request):
    target = await _target(request)
    svc = service(request)
    await svc.rename_session(_id(request), target)
    return JSON(record_to_dict(await svc.get_session(target)))


async def fork_session(request: Request):
    """A copy named ``to``: all of it, or with ``upto``, its first ``upto`` messages."""
    data = await json_body(request)
    upto = field(data, "upto", int)
    if upto is not None and upto < 0:
        raise ApiError(400, "upto must be a number of messages, 0 or more", param="upto")
    record = await service(request).fork_session(_id(request), _target_of(data), upto=upto)
    return JSON(record_to_dict(record))


async def clear_session(request: Request):
    data = await json_body(request)
    everything = data.get("variables", False)
    if not isinstance(everything, bool):
        raise ApiError(400, "variables must be true or false", param="variables")
    record = await service(request).clear_session(_id(request), variables=everything)
    return JSON(record_to_dict(record))


async def compact_session(request: Request):
    """``{"keep": N, "model": M}`` (both optional): the compaction, as ``sessions
    compact --json`` prints it."""
    data = await json_body(request)
    keep = field(data, "keep", int)
    if keep is not None and keep < 0:
        raise ApiError(400, "keep must be a whole number of turns, 0 or more", param="keep")
    model = field(data, "model", str)
    return JSON(await service(request).compact(_id(request), keep=keep, model=model))


async def list_compactions(request: Request):
    """As ``sessions show --compactions --json`` lists them."""
    return JSON(_listed(await service(request).compactions(_id(request))))


async def uncompact_session(request: Request):
    record = await service(request).uncompact(_id(request))
    return JSON({"uncompacted": record.session_id, "messages": record.first_seq})


async def family_tree(request: Request):
    """The session's family, as ``sessions tree ID --json`` lists it."""
    return JSON(_listed(await service(request).session_tree(_id(request))))


async def whole_tree(request: Request):
    """Every session, as ``sessions tree --json`` lists them."""
    return JSON(_listed(await service(request).session_tree()))


def _listed(rows: list) -> dict:
    return {"object": "list", "data": rows}


async def get_vars(request: Request):
    return JSON(await service(request).get_variables(_id(request)))


async def put_vars(request: Request):
    """Set every key of the JSON object body (others are kept)."""
    data = await json_body(request)
    if not data:
        raise ApiError(400, "send a JSON object of the variables to set")
    return JSON(await service(request).update_variables(_id(request), data))


async def clear_vars(request: Request):
    svc = service(request)
    current = await svc.get_variables(_id(request))
    return JSON(await svc.update_variables(_id(request), {}, unset=tuple(current)))


async def get_var(request: Request):
    key = request.path_params["key"]
    variables = await service(request).get_variables(_id(request))
    if key not in variables:
        raise ApiError(404, f"variable {key!r} is not set", code="variable_not_found")
    return JSON({"key": key, "value": variables[key]})


async def put_var(request: Request):
    """The body is the value: any JSON (``{"value": V}`` is stored as that object)."""
    import orjson

    body = await request.body()
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the value is not valid JSON: {exc}") from None
    key = request.path_params["key"]
    variables = await service(request).update_variables(_id(request), {key: value})
    return JSON({"key": key, "value": variables[key]})


async def delete_var(request: Request):
    from foliko_cli.errors import VariableNotSetError

    key = request.path_params["key"]
    try:
        await service(request).update_variables(_id(request), {}, unset=(key,))
    except VariableNotSetError:
        raise ApiError(404, f"variable {key!r} is not set", code="variable_not_found") from None
    return JSON({"key": key, "deleted": True})


_ONE = "/v1/sessions/{session_id:id}"
routes = [
    Route("/v1/sessions", list_sessions, methods=["GET"]),
    Route(_ONE + "/vars/{key:id}", get_var, methods=["GET"]),
    Route(_ONE + "/vars/{key:id}", put_var, methods=["PUT"]),
    Route(_ONE + "/vars/{key:id}", delete_var, methods=["DELETE"]),
    Route(_ONE + "/vars", get_vars, methods=["GET"]),
    Route(_ONE + "/vars", put_vars, methods=["PUT"]),
    Route(_ONE + "/vars", clear_vars, methods=["DELETE"]),
    Route(_ONE + "/export", export_session, methods=["GET"]),
    Route(_ONE + "/rename", rename_session, methods=["POST"]),
    Route(_ONE + "/fork", fork_session, methods=["POST"]),
    Route(_ONE + "/clear", clear_session, methods=["POST"]),
    Route(_ONE + "/compact", compact_session, methods=["POST"]),
    Route(_ONE + "/compactions", list_compactions, methods=["GET"]),
    Route(_ONE + "/uncompact", uncompact_session, methods=["POST"]),
    Route(_ONE + "/tree", family_tree, methods=["GET"]),
    Route("/v1/tree", whole_tree, methods=["GET"]),
    Route(_ONE, show_session, methods=["GET"]),
    Route(_ONE, delete_session, methods=["DELETE"]),
]
