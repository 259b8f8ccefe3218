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

from foliko_cli.errors import NothingToCompactError
from foliko_cli.serve import ids
from foliko_cli.serve import items as it
from foliko_cli.serve.common import service
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.openai_types import (
    Compacted,
    CompactionItem,
    CompactRequest,
    Input,
    InputItem,
)
from foliko_cli.serve.schema import Api
from foliko_cli.serve.stored import history_of, stored_response

_FORMAT = "foliko.summary.v1"

api = Api("Responses")


def compaction_item(summary: str) -> CompactionItem:
    content = orjson.dumps({"format": _FORMAT, "summary": summary})
    return CompactionItem(
        id="cmp_" + os.urandom(12).hex(),
        encrypted_content=base64.urlsafe_b64encode(content).decode(),
    )


def summary_of(item: InputItem, where: str = "input[0]") -> str:
    """The summary a compaction item carries; 400 for one foliko did not make."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(item.encrypted_content or ""))
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


def split_compaction(items: Input) -> tuple[str | None, Input]:
    """The summary of a leading compaction item, and the items after it."""
    if not isinstance(items, str) and items and items[0].type == "compaction":
        return summary_of(items[0]), items[1:]
    return None, items


@api.post("/v1/responses/compact", body=CompactRequest, answer=Compacted)
async def compact(request: Request, body: CompactRequest):
    """Compress a history into a compaction item and the kept items."""
    if not body.model:
        raise ApiError(400, "model is required: the model whose window to fit", param="model")
    svc = service(request)
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        found = await stored_response(svc, body.previous_response_id)
        history = [dict(m) for m in found.record.messages[: found.end]]
    raw = await it.resolve_references(body.input or [], lambda s: history_of(svc, s))
    summary, raw = split_compaction(raw)
    history += it.input_messages(raw)
    if not history:
        raise ApiError(400, "nothing to compact: send input or previous_response_id", param="input")
    it.name_tool_outputs(history, [])
    scratch = request.app.state.services.ephemeral
    session_id = ids.unstored_scope()[1:]
    await scratch.create_session(session_id, messages=history, summary=summary)
    try:
        compacted = await scratch.compact(session_id, model=body.model)
    except NothingToCompactError:  # it all fits the part of the window kept verbatim
        compacted = {"covered": 0, "summary": summary}
    finally:
        await scratch.delete_sessions([session_id])
    covered = min(max(0, int(compacted.get("covered") or 0)), len(history))
    summary = compacted.get("summary") or summary
    output: list[Any] = [compaction_item(summary)] if summary else []
    output += it.history_items(history[covered:], covered, ids.unstored_scope())
    return Compacted(
        id="resp_x" + os.urandom(12).hex(),
        created_at=int(time.time()),
        output=output,
        usage=it.turn_usage([]),
    )


routes = api.routes
