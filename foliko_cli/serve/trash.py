"""``/v1/trash``: what delete (and clear, rewind, ...) removed, kept for the undo
window, and restoring it (``sessions trash list`` / ``restore``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.serve.common import JSON, field, json_body, service


async def list_trash(request: Request):
    """Latest first, in the rows of ``sessions trash list --json``; ``keep_ms`` is
    the undo window (0: the trash is off)."""
    svc = service(request)
    rows = [
        {
            "id": entry.entry_id,
            "session_id": entry.session_id,
            "reason": entry.reason,
            "removed_at": entry.removed_at,
            "expires_at": entry.expires_at(svc.trash_keep),
            "message_count": entry.message_count,
            "last_used": entry.last_used,
        }
        for entry in await svc.list_trash()
    ]
    return JSON({"object": "list", "data": rows, "keep_ms": svc.trash_keep})


async def restore(request: Request):
    """``name`` is a session id (its latest removal) or an entry id; ``as`` restores
    it under another name."""
    data = await json_body(request)
    as_id = field(data, "as", str)
    entry = await service(request).restore_session(request.path_params["name"], as_id=as_id)
    target = as_id or entry.session_id
    return JSON({"restored": entry.entry_id, "session_id": entry.session_id, "as": target})


routes = [
    Route("/v1/trash", list_trash, methods=["GET"]),
    Route("/v1/trash/{name:id}/restore", restore, methods=["POST"]),
]
