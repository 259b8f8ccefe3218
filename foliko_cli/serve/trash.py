"""``/v1/trash``: what delete (and clear, rewind, ...) removed, kept for the undo
window, and restoring it (``sessions trash list`` / ``restore``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from foliko_cli.serve.common import service
from foliko_cli.serve.native_types import Restore, Restored, Trash, TrashRow
from foliko_cli.serve.schema import Api

api = Api("Sessions")


@api.get("/v1/trash", answer=Trash)
async def list_trash(request: Request) -> Any:
    """What the trash holds, latest first; ``keep_ms`` is the undo window (0: off).

    The rows of ``sessions trash list --json``."""
    svc = service(request)
    rows = [
        TrashRow(
            id=entry.entry_id,
            session_id=entry.session_id,
            reason=entry.reason,
            removed_at=entry.removed_at,
            expires_at=entry.expires_at(svc.trash_keep),
            message_count=entry.message_count,
            last_used=entry.last_used,
        )
        for entry in await svc.list_trash()
    ]
    return Trash(data=rows, keep_ms=svc.trash_keep)


@api.post("/v1/trash/{name:id}/restore", body=Restore, answer=Restored)
async def restore(request: Request, body: Restore) -> Any:
    """Restore a session (its latest removal) or a trash entry, as itself or ``as``."""
    entry = await service(request).restore_session(request.path_params["name"], as_id=body.as_)
    return Restored(
        restored=entry.entry_id, session_id=entry.session_id, as_=body.as_ or entry.session_id
    )


routes = api.routes
