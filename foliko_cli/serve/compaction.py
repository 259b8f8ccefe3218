"""``POST /v1/responses/compact``: foliko's compressed window, for a client to send back.

The history (``previous_response_id``'s, then ``input``) is compressed as a
full context window would compress it: the older part becomes a summary,
the recent part stays verbatim. The answer's ``output`` is a ``compaction``
item (the summary, in ``encrypted_content``: base64 JSON, opaque to the
client) followed by the kept items. Sent back as the ``input`` of a new
response, the compaction item becomes the new session's summary (its
compression state), exactly as if foliko had compressed that session.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.errors import NothingToCompactError
from foliko_cli.serve import ids
from foliko_cli.serve import items as it
from foliko_cli.serve.common import JSON, field, json_body, service
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.stored import history_of, stored_response

_FORMAT = "foliko.summary.v1"


def compaction_item(summary: str) -> dict[str, Any]:
    content = orjson.dumps({"format": _FORMAT, "summary": summary})
    return {
        "type": "compaction",
        "id": "cmp_" + os.urandom(12).hex(),
        "encrypted_content": base64.urlsafe_b64encode(content).decode(),
    }


def summary_of(item: dict[str, Any], where: str = "input[0]") -> str:
    """The summary a compaction item carries; 400 for one foliko did not make."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(str(item.get("encrypted_content", ""))))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        data = None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ApiError(
            400,
            f"{where}: this compaction item was not made by this server; "
            "send the output of its POST /v1/responses/compact",
            param="input",
        )
    return str(data.get("summary") or "")


def split_compaction(items: Any) -> tuple[str | None, Any]:
    """The summary of a leading compaction item, and the items after it."""
    first = items[0] if isinstance(items, list) and items else None
    if isinstance(first, dict) and first.get("type") == "compaction":
        return summary_of(first), items[1:]
    return None, items


async def compact(request: Request):
    data = await json_body(request)
    model = field(data, "model", str)
    if not model:
        raise ApiError(400, "model is required: the model whose window to fit", param="model")
    svc = service(request)
    history: list[dict[str, Any]] = []
    previous = field(data, "previous_response_id", str)
    if previous is not None:
        found = await stored_response(svc, previous)
        history = [dict(m) for m in found.record.messages[: found.end]]
    raw = await it.resolve_references(data.get("input") or [], lambda s: history_of(svc, s))
    summary, raw = split_compaction(raw)
    history += it.input_messages(raw)
    if not history:
        raise ApiError(400, "nothing to compact: send input or previous_response_id", param="input")
    it.name_tool_outputs(history, [])
    scratch = request.app.state.services.ephemeral
    session_id = ids.unstored_scope()[1:]
    await scratch.create_session(session_id, messages=history, summary=summary)
    try:
        compacted = await scratch.compact(session_id, model=model)
    except NothingToCompactError:  # it all fits the part of the window kept verbatim
        compacted = {"covered": 0, "summary": summary}
    finally:
        await scratch.delete_sessions([session_id])
    covered = min(max(0, int(compacted.get("covered") or 0)), len(history))
    summary = compacted.get("summary") or summary
    output = [compaction_item(summary)] if summary else []
    output += it.history_items(history[covered:], covered, ids.unstored_scope())
    return JSON(
        {
            "id": "resp_x" + os.urandom(12).hex(),
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": output,
            "usage": it.turn_usage([]),
        }
    )


routes = [Route("/v1/responses/compact", compact, methods=["POST"])]
