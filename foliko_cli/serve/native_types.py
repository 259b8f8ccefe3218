"""The native sessions API's bodies (``/v1/sessions``, ``/v1/search``,
``/v1/trash``, the web app's turns), each declared once (see schema.py).

The rows of sessions, searches, compactions and fork trees are the CLI's
``--json`` shapes, made by the service and messages/public.py: the routes
send them as they are made, and the types here describe them (schemathesis
checks every answer against its description, tests/serve/test_schema.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType, field

from foliko_cli.serve.openai_types import Answer, Body, Count

MAX_ATTACHMENTS = 20
Text = str | None


# requests


class SessionsQuery(Body, kw_only=True):
    limit: Annotated[int, Meta(ge=1, le=1000)] = 100
    after: str | None = None


class SearchQuery(Body, kw_only=True):
    q: Annotated[str, Meta(min_length=1, description='Words, "phrases" and prefix*')]
    limit: Annotated[int, Meta(ge=1, le=200)] = 20


class SettingsPatch(Body, forbid_unknown_fields=True, kw_only=True):
    """A session's title and its own system prompt (null removes either)."""

    title: Annotated[str, Meta(max_length=200)] | UnsetType | None = UNSET
    system_prompt: Annotated[str, Meta(max_length=100000)] | UnsetType | None = UNSET


class Rename(Body, kw_only=True):
    to: str


class Fork(Body, kw_only=True):
    to: str
    upto: Annotated[Count, Meta(description="Keep its first upto messages")] | None = None


class Clear(Body, kw_only=True):
    variables: bool = False


class CompactNow(Body, kw_only=True):
    keep: Annotated[Count, Meta(description="Turns kept verbatim")] | None = None
    model: str | None = None


class Restore(Body, kw_only=True):
    as_: str | None = field(default=None, name="as")


class Attachment(Body):
    """A file: an image or a UTF-8 text file (both are needed)."""

    name: Annotated[str, Meta(max_length=255)] | None = None
    data: Annotated[str, Meta(extra_json_schema={"contentEncoding": "base64"})] | None = None


class TurnCreate(Body, kw_only=True):
    """One turn of the session, its events streamed (the web app's turns)."""

    message: str | None = None
    model: str | None = None
    system: (
        Annotated[str, Meta(description="The session's own system prompt from now on")] | None
    ) = None
    regenerate: Annotated[bool, Meta(description="Replace the last turn")] = False
    create: Annotated[bool, Meta(description="A new session, titled after its message")] = False
    attachments: Annotated[list[Attachment], Meta(max_length=MAX_ATTACHMENTS)] | None = None


# answers


class SessionRow(Answer, kw_only=True):
    session_id: str
    message_count: int
    created_at: int
    updated_at: int
    preview: str
    title: Text
    forked_from: Text
    damaged: bool | UnsetType = UNSET
    error: str | UnsetType = UNSET


class Session(Answer, kw_only=True):
    session_id: str
    messages: list[dict[str, Any]]
    variables: dict[str, Any]
    metadata: dict[str, Any]
    compression_state: dict[str, Any]
    saved_at: int | None
    usage: dict[str, Any] | UnsetType = UNSET


class SessionDeleted(Answer, kw_only=True):
    session_id: str
    deleted: bool = True
    in_trash: bool


class Settings(Answer, kw_only=True):
    session_id: str
    title: Text
    system_prompt: Text


TurnRange = Annotated[list[int], Meta(min_length=2, max_length=2)] | None


class Compaction(Answer, kw_only=True):
    number: int | None
    at: int | None
    trigger: Literal["auto", "manual"] | None
    method: Literal["summary", "truncation"] | None
    model: str | None
    from_: int = field(name="from")
    covered: int
    summary: str | None
    usage: dict[str, Any] | None
    cost: float | UnsetType = UNSET
    turns: TurnRange
    new_turns: TurnRange
    status: Literal["active", "folded", "undone"]


class Uncompacted(Answer, kw_only=True):
    uncompacted: str
    messages: int


class ForkRow(Answer, kw_only=True):
    session_id: str
    parent: str | None
    turn: int | None
    message: int | None
    depth: int
    parent_missing: bool
    message_count: int | UnsetType = UNSET
    created_at: int | UnsetType = UNSET
    error: str | UnsetType = UNSET


class Listed(Answer, kw_only=True):
    """A whole list (no pages)."""

    object: Literal["list"] = "list"
    data: list[Any]


class CompactionList(Listed, kw_only=True):
    data: list[Compaction]


class ForkTree(Listed, kw_only=True):
    data: list[ForkRow]


class SearchHit(Answer, kw_only=True):
    session_id: str
    seq: int
    role: str
    created_at: int
    snippet: str
    marked: str
    match_start: int
    match_end: int
    matches: list[list[int]]
    score: float
    title: Text


class SearchResults(Listed, kw_only=True):
    data: list[SearchHit]
    unreadable: list[str]


class TrashRow(Answer, kw_only=True):
    id: str
    session_id: str
    reason: str
    removed_at: int
    expires_at: int
    message_count: int | None
    last_used: int | None


class Trash(Listed, kw_only=True):
    data: list[TrashRow]
    keep_ms: int


class Restored(Answer, kw_only=True):
    restored: str
    session_id: str
    as_: str = field(name="as")


class Variable(Answer, kw_only=True):
    key: str
    value: Any


class VariableDeleted(Answer, kw_only=True):
    key: str
    deleted: bool = True


class TurnCancelled(Answer, kw_only=True):
    turn_id: str
    cancelled: bool


class Health(Answer, kw_only=True):
    status: Literal["ok", "storage unavailable"]
