"""Codex CLI: its rollout files, ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``.

Each line is ``{timestamp, type, payload}`` (codex-rs ``RolloutLine``):
``session_meta`` (the session's id, cwd, and ``forked_from_id`` for a session
``codex fork`` made), ``turn_context`` (the model of the turns that follow),
``response_item`` (the model's history, in the Responses API's item shapes:
messages, function and custom tool calls and their outputs, reasoning),
``event_msg`` (what the user saw: the prompts typed, the thread's name,
token counts, rollbacks) and ``compacted``. The messages Codex writes itself
(instructions, environment context) are left out: a user message counts when
the user typed it. Undoing turns (``thread_rolled_back``) makes the turns
undone a branch. A subagent's rollout is left out.
"""

from __future__ import annotations

from typing import Any, cast

from foliko_cli.errors import UsageError
from foliko_cli.formats.importers.base import (
    LEFT_OUT_PART,
    LEFT_OUT_SUBAGENT,
    Conversation,
    Imported,
    Source,
    Unreadable,
)
from foliko_cli.formats.importers.convert import (
    arguments,
    data_url,
    ms,
    result_text,
    text_of,
    usage,
)

NAME = "codex"
LABEL = "Codex CLI rollout files (~/.codex/sessions/)"
FILES = ("rollout-*.jsonl",)
_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
_CALLS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output"}
MAX_FORK_DEPTH = 64
_HARNESS = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<turn_aborted>")


def _is_line(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("type"), str)
        and isinstance(value.get("payload"), dict)
        and "timestamp" in value
    )


def sniff(source: Source) -> bool:
    found = source.head_objects()
    return bool(found) and _is_line(found[0]) and found[0]["type"] in _TYPES


def read(source: Source, imported: Imported) -> None:
    meta, entries = _entries(source, imported)
    if isinstance(meta.get("source"), dict) and "subagent" in meta["source"]:
        imported.leave_out(LEFT_OUT_SUBAGENT)
        return
    with imported.reading(source.name):
        history = _forked_history(source, meta) + entries
        imported.add(_Rollout(history, imported).conversation(meta), source.name)


def _entries(source: Source, imported: Imported | None) -> tuple[dict[str, Any], list[Any]]:
    """The session_meta payload and the lines of a rollout file."""
    entries = []
    for _number, value in source.lines():
        if isinstance(value, Unreadable):
            if imported is None:
                raise value
            imported.problem(source.name, str(value))
        elif _is_line(value):
            entries.append(value)
    meta = next((e["payload"] for e in entries if e["type"] == "session_meta"), None)
    if meta is None:
        raise UsageError(f"{source.name} is not a Codex rollout file (no session_meta line)")
    return meta, entries


def _forked_history(source: Source, meta: dict[str, Any], depth: int = 0) -> list[Any]:
    """The lines a fork takes from the session it forked: a rollout ``codex fork``
    wrote holds only what came after the fork, and names the rollout (its
    ``forked_from_id``) and the line (``forked_from_ordinal_exclusive``) it
    continues. That rollout is looked for where Codex keeps it, beside this one
    under ``sessions/``."""
    parent, cut = meta.get("forked_from_id"), meta.get("forked_from_ordinal_exclusive")
    if not isinstance(parent, str) or not isinstance(cut, int):
        return []
    if source.path is None:
        raise Unreadable(
            f"it is a fork of session {parent}, whose rollout holds the history before the "
            "fork; give the file's path, so that it can be looked for beside it"
        )
    if depth > MAX_FORK_DEPTH:
        raise Unreadable(f"it is forked from more than {MAX_FORK_DEPTH} sessions in a row")
    root = next((p for p in source.path.parents if p.name == "sessions"), source.path.parent)
    found = sorted(root.rglob(f"rollout-*{parent}.jsonl"))
    if not found:
        raise Unreadable(
            f"it is a fork of session {parent}, whose rollout (which holds the history "
            f"before the fork) is not under {root}"
        )
    origin = Source(str(found[0]), found[0])
    try:
        parent_meta, parent_entries = _entries(origin, None)
    except (UsageError, Unreadable) as exc:
        raise Unreadable(f"the rollout it was forked from cannot be read: {exc}") from None
    history = _forked_history(origin, parent_meta, depth + 1) + parent_entries
    return [
        e
        for e in history
        if e["type"] != "session_meta" and isinstance(e.get("ordinal"), int) and e["ordinal"] < cut
    ]


def _typed_texts(entries: list[dict[str, Any]]) -> set[str]:
    """What the user typed, from the events Codex shows (old and new versions)."""
    typed = set()
    for entry in entries:
        payload = entry["payload"]
        if entry["type"] != "event_msg":
            continue
        if payload.get("type") == "user_message" and isinstance(payload.get("message"), str):
            typed.add(payload["message"].strip())
        item = payload.get("item") if payload.get("type") == "item_completed" else None
        if isinstance(item, dict) and item.get("type") == "UserMessage":
            text = "".join(text_of(c.get("text")) for c in item.get("content") or ())
            typed.add(text.strip())
    return typed


class _Rollout:
    def __init__(self, entries: list[dict[str, Any]], imported: Imported):
        self.entries = entries
        self.imported = imported
        self.typed = _typed_texts(entries)
        self.messages: list[dict[str, Any]] = []
        self.branches: list[list[dict[str, Any]]] = []
        self.turns: list[int] = []  # where each typed prompt is in messages
        self.tools: dict[str, str] = {}
        self.model: str | None = None
        self.title: str | None = None

    def conversation(self, meta: dict[str, Any]) -> Conversation:
        for entry in self.entries:
            at = ms(entry.get("timestamp"))
            payload = entry["payload"]
            kind = entry["type"]
            if kind == "turn_context" and isinstance(payload.get("model"), str):
                self.model = payload["model"]
            elif kind == "response_item":
                self._item(payload, at)
            elif kind == "event_msg":
                self._event(payload)
            elif kind == "token_usage_record":
                self._usage(payload.get("usage"))
            elif kind == "compacted":
                self.imported.leave_out(LEFT_OUT_PART)
        session_id = meta.get("id") or meta.get("session_id")
        if not isinstance(session_id, str):
            raise Unreadable("its session_meta has no id")
        forked = meta.get("forked_from_id")
        return Conversation(
            session_id,
            self.messages,
            branches=self.branches,
            title=self.title,
            created=ms(meta.get("timestamp")),
            model=self.model,
            forked_from=forked if isinstance(forked, str) else None,
            extra={"cwd": meta.get("cwd") if isinstance(meta.get("cwd"), str) else None},
        )

    def _typed(self, item: dict[str, Any], text: str) -> bool:
        for meta in (item.get("internal_chat_message_metadata_passthrough") or {}).get(
            "content_item_metadata"
        ) or ():
            provenance = (meta or {}).get("provenance") or {}
            if provenance.get("type") in ("user", "harness"):
                return cast(bool, provenance["type"] == "user")
        if self.typed:
            return text.strip() in self.typed
        return not text.lstrip().startswith(_HARNESS)

    def _item(self, item: dict[str, Any], at: int) -> None:
        kind = item.get("type")
        if kind == "message":
            self._message(item, at)
        elif kind in _CALLS:
            self._call(item, at)
        elif kind in _OUTPUTS:
            call_id = text_of(item.get("call_id"))
            output = item.get("output")
            if isinstance(output, dict):
                output = output.get("content", output)
            result = {
                "role": "tool",
                "content": result_text(output),
                "tool_call_id": call_id,
                "name": self.tools.get(call_id, text_of(item.get("name"))),
                "created_at": at,
            }
            self.messages.append(result)
        else:
            self.imported.leave_out(LEFT_OUT_PART)

    def _message(self, item: dict[str, Any], at: int) -> None:
        role = item.get("role")
        content = [c for c in item.get("content") or () if isinstance(c, dict)]
        text = "".join(text_of(c.get("text")) for c in content if "text" in c)
        if role == "assistant":
            self._reply(at)["content"] = text
            return
        if role != "user" or not self._typed(item, text):
            self.imported.leave_out(LEFT_OUT_PART)
            return
        asked: dict[str, Any] = {"role": "user", "content": text, "created_at": at}
        images = [
            part
            for number, c in enumerate(content)
            if c.get("type") == "input_image"
            and (part := data_url(c.get("image_url"), f"image-{number + 1}"))
        ]
        if images:
            asked["attachments"] = images
        self.turns.append(len(self.messages))
        self.messages.append(asked)

    def _call(self, item: dict[str, Any], at: int) -> None:
        kind = item["type"]
        call_id = text_of(item.get("call_id") or item.get("id")) or f"call-{len(self.messages)}"
        if kind == "function_call":
            name, args = text_of(item.get("name")), arguments(item.get("arguments"))
        elif kind == "custom_tool_call":
            name, args = text_of(item.get("name")), text_of(item.get("input"))
        elif kind == "local_shell_call":
            name, args = "local_shell", item.get("action") or {}
        else:
            name, args = "web_search", item.get("action") or {}
        self.tools[call_id] = name
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant" or last.get("usage"):
            last = self._reply(at)
        last.setdefault("tool_calls", []).append({"id": call_id, "name": name, "arguments": args})

    def _reply(self, at: int) -> dict[str, Any]:
        reply: dict[str, Any] = {"role": "assistant", "content": "", "created_at": at}
        if self.model:
            reply["model"] = self.model
        self.messages.append(reply)
        return reply

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "thread_name_updated" and isinstance(event.get("thread_name"), str):
            self.title = event["thread_name"]
        elif kind == "token_count":
            self._usage((event.get("info") or {}).get("last_token_usage"))
        elif kind == "thread_rolled_back":
            undone = event.get("num_turns")
            if isinstance(undone, int) and 0 < undone <= len(self.turns):
                cut = self.turns[-undone]
                self.branches.append(list(self.messages))
                del self.messages[cut:]
                del self.turns[-undone:]

    def _usage(self, counts: Any) -> None:
        """Token counts belong to the model call that just ended: the last
        assistant message that has none yet."""
        found = usage(
            counts,
            input_key="input_tokens",
            output_key="output_tokens",
            cached_key="cached_input_tokens",
            reasoning_key="reasoning_output_tokens",
        )
        for message in reversed(self.messages):
            if message["role"] == "user":
                return
            if message["role"] == "assistant":
                if found and "usage" not in message:
                    message["usage"] = found
                return
