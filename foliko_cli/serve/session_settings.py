"""``PATCH /v1/sessions/{id}``: a session's title and its own system prompt.

The title is what the web page lists the session by (an import keeps the
title it came with; the page's first turn names a new session from its
message); the system prompt is the one ``chat --system`` keeps, used by every
later turn of the session, whatever client runs it. ``null`` removes either.
Only the metadata is written, never the history.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.serve.common import JSON, json_body, service
from foliko_cli.serve.errors import ApiError

MAX_TITLE = 200
MAX_SYSTEM_PROMPT = 100_000
FIELDS = {"title": MAX_TITLE, "system_prompt": MAX_SYSTEM_PROMPT}


def settings_of(session_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "title": metadata.get("title"),
        "system_prompt": metadata.get("system_prompt"),
    }


def _checked(data: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ApiError(400, f"unknown field {unknown[0]!r}: send title or system_prompt")
    if not data:
        raise ApiError(400, "send title or system_prompt (null removes it)")
    changes: dict[str, Any] = {}
    for name, value in data.items():
        if value is not None and not isinstance(value, str):
            raise ApiError(400, f"{name} must be a string or null", param=name)
        if value is not None and len(value) > FIELDS[name]:
            raise ApiError(
                400, f"{name} is over {FIELDS[name]:,} characters; shorten it", param=name
            )
        if name == "title" and value is not None:
            value = " ".join(value.split()) or None
        changes[name] = value or None
    return changes


async def update_settings(request: Request):
    changes = _checked(await json_body(request))
    session_id = request.path_params["session_id"]
    record = await service(request).update_metadata(session_id, changes)
    return JSON(settings_of(session_id, record.metadata))


routes = [Route("/v1/sessions/{session_id:id}", update_settings, methods=["PATCH"])]
