"""A session as a readable transcript: Markdown or plain text, as lines.

Pure functions over a SessionRecord. Markdown gives each message a heading
(its position, role and time), tool calls as fenced JSON and tool results
in fences, so a transcript pastes into an issue or a wiki as it is.
Times are local, as in every listing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import orjson

from foliko_cli.messages.fences import fence_for
from foliko_cli.messages.record import SessionRecord

ROLE_TITLES = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool"}


def when(ms: Any) -> str:
    if not isinstance(ms, int | float) or isinstance(ms, bool) or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _fence(text: str, info: str = "") -> list[str]:
    fence = fence_for(text)
    return [fence + info, text, fence]


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def _title(record: SessionRecord) -> str:
    title = record.metadata.get("title")
    return (
        f"{title} ({record.session_id})" if isinstance(title, str) and title else record.session_id
    )


def markdown(
    record: SessionRecord, *, first_seq: int | None = None, view_start: int = 0
) -> Iterator[str]:
    """The session as Markdown; ``first_seq`` numbers messages when only a tail is
    given; a ``view_start`` above 0 is marked before that message (the model's
    view begins there: the messages before are in the compression summary)."""
    start = record.first_seq if first_seq is None else first_seq
    meta = record.metadata
    yield f"# Session {_title(record)}"
    yield ""
    yield f"- created: {when(meta.get('created_at'))}"
    yield f"- last active: {when(meta.get('last_active'))}"
    yield f"- messages: {meta.get('message_count', len(record.messages))}"
    if isinstance(meta.get("forked_from"), str):
        yield f"- forked from: {meta['forked_from']}"
    for key, value in sorted(record.variables.items()):
        yield f"- variable `{key}` = `{orjson.dumps(value).decode()}`"
    system = meta.get("system_prompt")
    if isinstance(system, str) and system:
        yield ""
        yield "System prompt:"
        yield ""
        yield from _fence(system)
    if meta.get("system_fragments"):
        from foliko_cli.messages.fragments import SYSTEM_KEY, describe, refs_of

        yield ""
        for ref in refs_of(meta, SYSTEM_KEY):
            yield f"- system fragment {describe(ref)}"
    for seq, message in enumerate(record.messages, start=start):
        if seq == view_start and seq:
            yield ""
            yield f"> {view_begins(seq)}"
        yield ""
        yield from _markdown_message(seq, message)


def view_begins(seq: int) -> str:
    """The note that marks where the model's view of a compacted session begins."""
    before = "message 1 is" if seq == 1 else f"messages 1–{seq} are"
    return f"The model's view begins here: {before} in the summary."


def _markdown_message(seq: int, message: dict[str, Any]) -> Iterator[str]:
    role = message.get("role", "?")
    heading = f"## {seq + 1}. {ROLE_TITLES.get(role, role)}"
    if role == "tool" and message.get("name"):
        heading += f" · {message['name']}"
        if message.get("is_error"):
            heading += " (error)"
    if role == "assistant" and message.get("model"):
        heading += f" · {message['model']}"
    yield f"{heading} — {when(message.get('created_at'))}"
    yield ""
    content = message.get("content") or ""
    if role == "tool":
        if content:
            yield from _fence(content)
    elif content:
        yield content
    if message.get("attachments"):
        from foliko_cli.messages.attachments import describe

        yield ""
        for part in message["attachments"]:
            yield f"- attached {describe(part)}"
    if message.get("fragments"):
        from foliko_cli.messages import fragments

        yield ""
        for ref in fragments.refs_of(message):
            yield f"- fragment {fragments.describe(ref)}"
    for call in message.get("tool_calls") or []:
        yield ""
        yield f"Tool call `{call.get('name', '?')}`" + (
            f" ({call['id']})" if call.get("id") else ""
        )
        yield ""
        yield from _fence(_json(call.get("arguments", {})), "json")
