"""Claude Code: its session files, ``~/.claude/projects/<project>/<session id>.jsonl``.

Each line is a record: ``user`` and ``assistant`` records hold an Anthropic
Messages API ``message`` (content blocks: text, thinking, tool_use,
tool_result, image, document) and link to the record before them by
``parentUuid``; ``summary`` and ``custom-title`` records name the session;
``system``, ``progress`` and ``file-history-snapshot`` records are Claude
Code's own bookkeeping. One streamed answer is several assistant records with
the same ``message.id``, merged back into one message here. Rewinding to an
earlier prompt starts a branch from it; the line ending at the last record
written is the session. After a compaction, the first record of the new
stretch links to the old one by ``logicalParentUuid``, so the whole history
is kept. Subagent transcripts (``agent-*.jsonl``, ``subagents/``) and
sidechain records are left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    attachment,
    decoded,
    ms,
    result_text,
    text_of,
    usage,
)
from foliko_cli.formats.importers.tree import split

NAME = "claude-code"
LABEL = "Claude Code session files (~/.claude/projects/)"
FILES = ("*.jsonl",)
_KINDS = {
    "user",
    "assistant",
    "system",
    "summary",
    "progress",
    "file-history-snapshot",
    "queue-operation",
    "custom-title",
}
_MESSAGES = {"user", "assistant"}


def _is_record(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("type") in _KINDS
        and ("sessionId" in value or "leafUuid" in value or "messageId" in value)
        and "payload" not in value
        and "messages" not in value
    )


def sniff(source: Source) -> bool:
    return any(_is_record(value) for value in source.head_objects())


def skipped(path: Path | None) -> str | None:
    if path is not None and (path.name.startswith("agent-") or "subagents" in path.parts):
        return LEFT_OUT_SUBAGENT
    return None


def read(source: Source, imported: Imported) -> None:
    records = []
    for _number, value in source.lines():
        if isinstance(value, Unreadable):
            imported.problem(source.name, str(value))
        elif _is_record(value) or (isinstance(value, dict) and "uuid" in value):
            records.append(value)
    if not records:
        raise UsageError(f"{source.name} is not a Claude Code session file (no records)")
    with imported.reading(source.name):
        imported.add(_conversation(records, source, imported), source.name)


def _conversation(
    records: list[dict[str, Any]], source: Source, imported: Imported
) -> Conversation:
    session_id = next((r["sessionId"] for r in records if r.get("sessionId")), None)
    if session_id is None and source.path is not None:
        session_id = source.path.stem
    tools = {
        block.get("id"): block.get("name")
        for r in records
        if r.get("type") == "assistant"
        for block in _blocks(r)
        if block.get("type") == "tool_use"
    }
    parents: dict[str, Any] = {}
    converted: dict[str, list[dict[str, Any]]] = {}
    current = None
    for record in records:
        key = record.get("uuid")
        if not isinstance(key, str):
            continue
        parents[key] = record.get("parentUuid") or record.get("logicalParentUuid")
        if record.get("type") not in _MESSAGES:
            continue
        if record.get("isSidechain") or record.get("isMeta") or record.get("isCompactSummary"):
            imported.leave_out(LEFT_OUT_PART)
            continue
        converted[key] = _messages(record, tools, imported)
        current = key
    if current is None:
        return Conversation(session_id, [])
    shown, branches = split(parents, current, converted, strict=False, merge=_merge)
    for line in (shown, *(branch.messages for branch in branches)):
        for message in line:
            message.pop("_id", None)
    return Conversation(
        session_id,
        shown,
        branches=branches,
        title=_title(records, parents),
        extra={"cwd": next((r["cwd"] for r in records if isinstance(r.get("cwd"), str)), None)},
    )


def _title(records: list[dict[str, Any]], parents: dict[str, Any]) -> str | None:
    custom = [r.get("customTitle") for r in records if r.get("type") == "custom-title"]
    if custom and isinstance(custom[-1], str):
        return custom[-1]
    summaries = [
        r.get("summary")
        for r in records
        if r.get("type") == "summary" and r.get("leafUuid") in parents
    ]
    return summaries[-1] if summaries and isinstance(summaries[-1], str) else None


def _blocks(record: dict[str, Any]) -> list[dict[str, Any]]:
    content = (record.get("message") or {}).get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or () if isinstance(block, dict)]


def _media(block: dict[str, Any], name: str) -> dict[str, Any] | None:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        data = decoded(source.get("data"))
        if data is not None:
            return attachment(name, source.get("media_type"), data=data)
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return attachment(source["url"].rsplit("/", 1)[-1] or name, url=source["url"])
    return None


def _messages(
    record: dict[str, Any], tools: dict[Any, Any], imported: Imported
) -> list[dict[str, Any]]:
    at = ms(record.get("timestamp"))
    message = record.get("message") or {}
    texts, calls, files, results = [], [], [], []
    for number, block in enumerate(_blocks(record)):
        kind = block.get("type")
        if kind == "text":
            texts.append(text_of(block.get("text")))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id") or f"{record['uuid']}-{number}",
                    "name": text_of(block.get("name")),
                    "arguments": arguments(block.get("input")),
                }
            )
        elif kind == "tool_result":
            results.append(_result(block, tools, at))
        elif kind in ("image", "document") and (part := _media(block, f"{kind}-{number + 1}")):
            files.append(part)
        else:
            imported.leave_out(LEFT_OUT_PART)
    out = results
    if record["type"] == "assistant":
        reply: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(t for t in texts if t)}
        reply["created_at"] = at
        if calls:
            reply["tool_calls"] = calls
        model = message.get("model")
        if isinstance(model, str) and model and not model.startswith("<"):
            reply["model"] = model
        counts = usage(
            message.get("usage"),
            input_key="input_tokens",
            output_key="output_tokens",
            cached_key="cache_read_input_tokens",
        )
        if counts:
            reply["usage"] = counts
        reply["_id"] = message.get("id")
        out = [reply]
    elif texts or files:
        asked: dict[str, Any] = {"role": "user", "content": "\n\n".join(t for t in texts if t)}
        asked["created_at"] = at
        if files:
            asked["attachments"] = files
        out = [*results, asked]
    return out


def _result(block: dict[str, Any], tools: dict[Any, Any], at: int) -> dict[str, Any]:
    content = block.get("content")
    result = {
        "role": "tool",
        "content": result_text(content),
        "tool_call_id": text_of(block.get("tool_use_id")),
        "name": text_of(tools.get(block.get("tool_use_id"))),
        "created_at": at,
    }
    images = [
        part
        for number, item in enumerate(content if isinstance(content, list) else ())
        if isinstance(item, dict)
        and item.get("type") == "image"
        and (part := _media(item, f"image-{number + 1}"))
    ]
    if images:
        result["attachments"] = images
    if block.get("is_error"):
        result["is_error"] = True
    return result


def _merge(last: dict[str, Any], message: dict[str, Any]) -> bool:
    """Fold an assistant record into the one before it when both are records of
    one streamed answer (the same message id); the last record's counts are the
    answer's."""
    key = message.get("_id")
    if not key or last.get("_id") != key:
        return False
    if message["content"]:
        joined = f"{last['content']}\n\n{message['content']}"
        last["content"] = joined if last["content"] else message["content"]
    if message.get("tool_calls"):
        last["tool_calls"] = [*last.get("tool_calls", ()), *message["tool_calls"]]
    for name in ("usage", "model"):
        if name in message:
            last[name] = message[name]
    return True
