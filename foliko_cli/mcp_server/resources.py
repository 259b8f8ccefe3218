"""The sessions as resources: ``foliko://sessions/{session_id}``, a session's
transcript as Markdown, listed by name a page at a time."""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import quote, unquote

from foliko_cli.messages.record import SessionSummary
from foliko_cli.service import AsyncFoliko

PREFIX = "foliko://sessions/"
TEMPLATE = PREFIX + "{session_id}"
MIME_TYPE = "text/markdown"
PAGE_SIZE = 100


def session_uri(session_id: str) -> str:
    """The resource of a session (its id percent-encoded, as RFC 6570 expands it)."""
    return PREFIX + quote(session_id, safe="")


def session_id_of(uri: str) -> str | None:
    """The session a ``foliko://sessions/...`` URI names, else None."""
    if not uri.startswith(PREFIX):
        return None
    rest = uri[len(PREFIX) :]
    return unquote(rest) if rest and "/" not in rest else None


def iso(ms: int) -> str | None:
    """A ms time as ISO 8601 in UTC; None for no time."""
    if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        return None
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def resource_of(summary: SessionSummary) -> dict[str, Any]:
    """The fields of a session's ``Resource``."""
    entry: dict[str, Any] = {
        "uri": session_uri(summary.session_id),
        "name": summary.session_id,
        "description": f"UNREADABLE: {summary.error}" if summary.error else summary.preview,
        "mime_type": MIME_TYPE,
    }
    modified = iso(summary.updated_at)
    if modified is not None:
        entry["annotations"] = {"last_modified": modified}
    return entry


async def resource_page(
    service: AsyncFoliko, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the sessions, by name, after the session ``cursor`` names;
    and the cursor of the next page (None on the last)."""
    summaries = await service.list_sessions(sort="name")
    if cursor is not None:
        summaries = [s for s in summaries if s.session_id > cursor]
    page = summaries[:PAGE_SIZE]
    more = len(summaries) > PAGE_SIZE
    return [resource_of(s) for s in page], page[-1].session_id if more else None
