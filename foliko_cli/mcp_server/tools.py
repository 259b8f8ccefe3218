"""The tools: what each takes (a JSON Schema), what it answers, and whether
it only reads; each runs over the service it is given.

``list_sessions``, ``search_sessions`` and ``read_session`` only read;
``chat`` runs one turn (through the backend, so ``foliko serve`` counts it
in the user's quotas) and adds it to the session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from foliko_cli.mcp_server.arguments import SINCE_HELP, Arguments
from foliko_cli.mcp_server.resources import iso, session_uri
from foliko_cli.messages.record import ROLES, SessionSummary
from foliko_cli.service import AsyncFoliko
from foliko_cli.service.values import IF_BUSY

if TYPE_CHECKING:
    from foliko_cli.service.values import TurnResult

READ_ONLY = {
    "read_only_hint": True,
    "destructive_hint": False,
    "idempotent_hint": True,
    "open_world_hint": False,
}
ADDS_A_TURN = {
    "read_only_hint": False,
    "destructive_hint": False,
    "idempotent_hint": False,
    "open_world_hint": True,
}


class Reply(NamedTuple):
    text: str
    data: dict[str, Any] | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> Reply:
        """Structured content, and the same as JSON text for hosts that read only text."""
        return cls(orjson.dumps(data).decode(), data)


class Call(NamedTuple):
    service: AsyncFoliko
    arguments: Arguments
    turn: Callable[[str, str, str], Awaitable[TurnResult]]


class ToolSpec(NamedTuple):
    name: str
    title: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    hints: dict[str, bool]
    run: Callable[[Call], Awaitable[Reply]]
    output: dict[str, Any] | None = None

    @property
    def writes(self) -> bool:
        """Whether it changes sessions: offered only to a client that may write."""
        return not self.hints["read_only_hint"]

    @property
    def input_schema(self) -> dict[str, Any]:
        schema = {"type": "object", "properties": self.properties, "additionalProperties": False}
        return {**schema, "required": list(self.required)} if self.required else schema


def _object(properties: dict[str, Any], *optional: str) -> dict[str, Any]:
    required = [name for name in properties if name not in optional]
    return {"type": "object", "properties": properties, "required": required}


STRING = {"type": "string"}
TIME = {"type": ["string", "null"], "description": "ISO 8601, UTC"}
SINCE = {"type": "string", "description": f"Only those since then: {SINCE_HELP}."}


def _limit(default: int, high: int) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": high,
        "default": default,
        "description": "At most this many.",
    }


def session_row(summary: SessionSummary) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": summary.session_id,
        "uri": session_uri(summary.session_id),
        "messages": summary.message_count,
        "created_at": iso(summary.created_at),
        "updated_at": iso(summary.updated_at),
        "preview": summary.preview,
    }
    if summary.error:
        row["error"] = summary.error
    return row


SESSION_ROW = _object(
    {
        "session_id": STRING,
        "uri": STRING,
        "messages": {"type": "integer"},
        "created_at": TIME,
        "updated_at": TIME,
        "preview": {"type": "string", "description": "The last user message, shortened."},
        "error": {"type": "string", "description": "Why the session cannot be read."},
    },
    "error",
)


async def list_sessions(call: Call) -> Reply:
    limit = call.arguments.whole("limit", 20, 1, 1000)
    since = call.arguments.since()
    found = await call.service.list_sessions(sort="updated", limit=limit + 1, since=since)
    rows = [session_row(summary) for summary in found[:limit]]
    return Reply.of({"sessions": rows, "has_more": len(found) > limit})


ROLE_NAMES = sorted(ROLES)

HIT_ROW = _object(
    {
        "session_id": STRING,
        "uri": STRING,
        "message": {"type": "integer", "description": "Its number in the session's transcript."},
        "role": {"type": "string", "enum": ROLE_NAMES},
        "created_at": TIME,
        "snippet": STRING,
        "marked": {"type": "string", "description": "The snippet, each match in [brackets]."},
    }
)


async def search_sessions(call: Call) -> Reply:
    arguments = call.arguments
    query = arguments.text("query")
    role = arguments.choice("role", ROLE_NAMES)
    since = arguments.since()
    limit = arguments.whole("limit", 20, 1, 100)
    hits = await call.service.search(query, role=role, since=since, limit=limit)
    rows = [
        {
            "session_id": hit.session_id,
            "uri": session_uri(hit.session_id),
            "message": hit.seq + 1,
            "role": hit.role,
            "created_at": iso(hit.created_at),
            "snippet": hit.snippet,
            "marked": hit.marked(),
        }
        for hit in hits
    ]
    return Reply.of({"hits": rows})


async def read_session(call: Call) -> Reply:
    session_id = call.arguments.text("session_id")
    turns = call.arguments.whole("turns", None, 1)
    return Reply(await call.service.transcript(session_id, turns))


async def chat(call: Call) -> Reply:
    session_id = call.arguments.text("session_id")
    message = call.arguments.text("message")
    if_busy = call.arguments.choice("if_busy", IF_BUSY) or "wait"
    result = await call.turn(session_id, message, if_busy)
    return Reply(result.message)


SESSION_ID = {"type": "string", "description": "The session's name, as list_sessions gives it."}

TOOLS = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "list_sessions",
            "List sessions",
            "The sessions, most recently updated first: name, message count, times and "
            "the last user message.",
            {"limit": _limit(20, 1000), "since": SINCE},
            (),
            READ_ONLY,
            list_sessions,
            _object(
                {
                    "sessions": {"type": "array", "items": SESSION_ROW},
                    "has_more": {"type": "boolean"},
                }
            ),
        ),
        ToolSpec(
            "search_sessions",
            "Search sessions",
            "Messages of every session that hold all the words of the query, best match "
            'first. The query is words, "exact phrases" and prefixes (deplo* finds deploy).',
            {
                "query": {"type": "string", "description": "What to find."},
                "role": {
                    "type": "string",
                    "enum": ROLE_NAMES,
                    "description": "Only messages of this role.",
                },
                "since": SINCE,
                "limit": _limit(20, 100),
            },
            ("query",),
            READ_ONLY,
            search_sessions,
            _object({"hits": {"type": "array", "items": HIT_ROW}}),
        ),
        ToolSpec(
            "read_session",
            "Read a session",
            "A session's transcript as Markdown: every message with its role and time, "
            "tool calls and results included; all of it, or its last turns.",
            {
                "session_id": SESSION_ID,
                "turns": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Only the last this many turns (a turn is a user message "
                    "and all that answers it); all of them when left out.",
                },
            },
            ("session_id",),
            READ_ONLY,
            read_session,
        ),
        ToolSpec(
            "chat",
            "Chat in a session",
            "Send one message in a session and get the reply: the turn runs with the "
            "session's history and is added to it. A name no session has starts a new one.",
            {
                "session_id": SESSION_ID,
                "message": {"type": "string", "description": "The message."},
                "if_busy": {
                    "type": "string",
                    "enum": list(IF_BUSY),
                    "description": "When another turn holds the session: wait for it (the "
                    "default), reject this message at once, or interrupt that turn (it ends "
                    "unsaved).",
                },
            },
            ("session_id", "message"),
            ADDS_A_TURN,
            chat,
        ),
    )
}
