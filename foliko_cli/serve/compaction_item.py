"""The ``compaction`` item foliko hands out.

Its ``encrypted_content`` is base64 JSON, opaque to the client: the summary,
and the messages the model still saw verbatim before it (a compaction made
during a turn keeps the recent ones; ``/v1/responses/compact`` keeps none).
compaction.py reads one sent back.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import orjson

from foliko_cli.serve.openai_types import CompactionItem, ContextManagement

FORMAT = "foliko.summary.v1"


def compaction_item(
    item_id: str, summary: str, tail: Sequence[dict[str, Any]] = ()
) -> CompactionItem:
    """The item carrying ``summary``, and the messages the model still saw
    verbatim before it (``tail``: a server-side compaction keeps recent ones)."""
    data: dict[str, Any] = {"format": FORMAT, "summary": summary}
    if tail:
        data["tail"] = [_sendable(m) for m in tail]
    content = orjson.dumps(data)
    return CompactionItem(id=item_id, encrypted_content=base64.urlsafe_b64encode(content).decode())


_SENT_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "attachments")


def _sendable(message: dict[str, Any]) -> dict[str, Any]:
    return {key: message[key] for key in _SENT_KEYS if key in message}


def compact_threshold(entries: list[ContextManagement] | None) -> int | None:
    """The token count past which a turn compacts (``context_management``)."""
    return next((e.compact_threshold for e in entries or () if e.type == "compaction"), None)
