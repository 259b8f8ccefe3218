"""``POST /v1/responses/compact``, as OpenAI defines it.

The answer's ``output`` is the history's user messages, verbatim, then one
``compaction`` item, always: the summary of the whole history (user messages
included; compaction_item.py). Sent back as ``input``, the items before it
are stored and the summary stands in for them, exactly as if foliko had
compressed that session itself; the items after it are the new input.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from typing import Any, NamedTuple

import orjson
from starlette.requests import Request

from foliko_cli.errors import NothingToCompactError
from foliko_cli.messages.record import check_message
from foliko_cli.serve import ids
from foliko_cli.serve import items as it
from foliko_cli.serve.common import service
from foliko_cli.serve.compaction_item import FORMAT, compaction_item
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.openai_types import Compacted, CompactRequest, Input, InputItem
from foliko_cli.serve.schema import Api
from foliko_cli.serve.stored import history_of, stored_response

api = Api("Responses")


class Carried(NamedTuple):
    """What a compaction item in the input carries: its summary, the messages
    it stands for (the input before it), and those it kept verbatim."""

    summary: str
    covered: list[dict[str, Any]]
    tail: list[dict[str, Any]]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [*self.covered, *self.tail]


def _opened(item: InputItem, where: str) -> dict[str, Any]:
    """What a compaction item holds; 400 for one foliko did not make."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(item.encrypted_content or ""))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        data = None
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(data.get("tail", []), list)
    ):
        raise ApiError(
            400,
            f"{where}: this compaction item was not made by this server; "
            "send the output of its POST /v1/responses/compact, or of a response",
            param="input",
        )
    return data


def split_compaction(items: Input) -> tuple[Carried | None, Input]:
    """The latest compaction item's summary with what it stands for, and the
    items after it (the new input). Earlier compaction items are superseded."""
    if isinstance(items, str):
        return None, items
    last = max((i for i, item in enumerate(items) if item.type == "compaction"), default=None)
    if last is None:
        return None, items
    data = _opened(items[last], f"input[{last}]")
    before = [item for item in items[:last] if item.type != "compaction"]
    tail = [check_message(dict(m)) for m in data.get("tail") or () if isinstance(m, dict)]
    carried = Carried(str(data.get("summary") or ""), it.input_messages(before), tail)
    return carried, items[last + 1 :]


@api.post("/v1/responses/compact", body=CompactRequest, answer=Compacted)
async def compact(request: Request, body: CompactRequest) -> Any:
    """Compact a history: its user messages, then one compaction item."""
    if not body.model:
        raise ApiError(400, "model is required: the model whose window to fit", param="model")
    svc = service(request)
    history: list[dict[str, Any]] = []
    summary, covered = None, 0
    if body.previous_response_id is not None:
        found = await stored_response(svc, body.previous_response_id, whole=True)
        history = [dict(m) for m in found.record.messages[: found.end]]
        state = found.record.compression_state
        if state.get("summary") and 0 < (state.get("covered") or 0) <= found.end:
            summary, covered = state["summary"], state["covered"]
    raw = await it.resolve_references(body.input or [], lambda s: history_of(svc, s))
    carried, raw = split_compaction(raw)
    if carried is not None:
        history += carried.covered
        summary, covered = carried.summary, len(history)
        history += carried.tail
    history += it.input_messages(raw)
    if not history:
        raise ApiError(400, "nothing to compact: send input or previous_response_id", param="input")
    it.name_tool_outputs(history, [])
    scratch = request.app.state.services.ephemeral
    session_id = ids.unstored_scope()[1:]
    await scratch.create_session(session_id, messages=history, summary=summary, covered=covered)
    spent: dict[str, Any] = {}
    try:
        compacted = await scratch.compact(session_id, keep=0, model=body.model)
        summary, spent = compacted.get("summary") or summary, compacted.get("usage") or {}
    except NothingToCompactError:  # every message is in the summary already
        pass
    finally:
        await scratch.delete_sessions([session_id])
    if not summary:
        raise ApiError(
            502,
            f"the model {body.model!r} could not summarise the history; try again or "
            "name another model",
            code="model_error",
        )
    scope = ids.unstored_scope()
    output: list[Any] = [
        item
        for position, message in enumerate(history)
        if message.get("role") == "user"
        for item in it.message_items(message, position, scope)
    ]
    output.append(compaction_item("cmp_" + os.urandom(12).hex(), summary))
    return Compacted(
        id="resp_x" + os.urandom(12).hex(),
        created_at=int(time.time()),
        output=output,
        usage=it.usage_of(spent),
    )


routes = api.routes
