"""``PATCH /v1/sessions/{id}``: a session's title and its own system prompt.

The title is what the web page lists the session by (an import keeps the
title it came with; the page's first turn names a new session from its
message); the system prompt is the one ``chat --system`` keeps, used by every
later turn of the session, whatever client runs it. ``null`` removes either.
Only the metadata is written, never the history.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET
from starlette.requests import Request

from foliko_cli.serve.common import service
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.native_types import Settings, SettingsPatch
from foliko_cli.serve.schema import Api

api = Api("Sessions")


def settings_of(session_id: str, metadata: dict[str, Any]) -> Settings:
    return Settings(
        session_id=session_id,
        title=metadata.get("title"),
        system_prompt=metadata.get("system_prompt"),
    )


@api.patch("/v1/sessions/{session_id:id}", body=SettingsPatch, answer=Settings)
async def update_settings(request: Request, body: SettingsPatch) -> Any:
    """Set a session's title or its own system prompt (null removes either)."""
    changes: dict[str, Any] = {}
    if body.title is not UNSET:
        changes["title"] = " ".join((body.title or "").split()) or None
    if body.system_prompt is not UNSET:
        changes["system_prompt"] = body.system_prompt or None
    if not changes:
        raise ApiError(400, "send title or system_prompt (null removes it)")
    session_id = request.path_params["session_id"]
    record = await service(request).update_metadata(session_id, changes)
    return settings_of(session_id, record.metadata)


routes = api.routes
