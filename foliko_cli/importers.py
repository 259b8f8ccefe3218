"""Sessions from other tools' histories: a ChatGPT export, an llm ``logs.db``.

Each parser returns canonical SessionRecords built only from the source
(no clock reads), so importing the same file twice yields the same records
and the second import changes nothing. Problems are UsageErrors naming the
file and the conversation.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from foliko_cli.errors import UsageError
from foliko_cli.storage.record import SessionRecord, check_session_id, new_metadata

FORMATS = ("foliko", "chatgpt", "llm")


class Imported:
    """The records parsed, and what was left out of them."""

    def __init__(self) -> None:
        self.records: list[SessionRecord] = []
        self.dropped_branch_messages = 0
        self.skipped_messages = 0


def _ms(seconds: Any) -> int:
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
        return round(seconds * 1000)
    return 0


def _record(
    session_id: str, messages: list[dict[str, Any]], created: int, updated: int, **meta: Any
) -> SessionRecord:
    created = created or (messages[0].get("created_at", 0) if messages else 0)
    updated = updated or (messages[-1].get("created_at", 0) if messages else 0) or created
    metadata = new_metadata(created)
    metadata.update({"last_active": updated, "message_count": len(messages)})
    metadata.update({key: value for key, value in meta.items() if value})
    return SessionRecord(session_id, messages=messages, metadata=metadata, saved_at=updated)


# ChatGPT: conversations.json from "Export data"


def _chatgpt_text(content: Any) -> str:
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts")
    if isinstance(parts, list):
        texts = [p if isinstance(p, str) else p.get("text") for p in parts if _is_text(p)]
        return "\n".join(t for t in texts if isinstance(t, str)).strip()
    return content.get("text", "").strip() if isinstance(content.get("text"), str) else ""


def _is_text(part: Any) -> bool:
    return isinstance(part, str) or (
        isinstance(part, dict) and part.get("content_type") == "text" and "text" in part
    )


def _main_line(mapping: dict[str, Any], current: Any, where: str) -> list[str]:
    """The node ids from the root to ``current`` (the branch the user last saw)."""
    if current not in mapping:
        leaves = [key for key, node in mapping.items() if not (node or {}).get("children")]
        if not leaves:
            raise UsageError(f"{where} has no current_node and no last message", fix=_EXPORT_FIX)
        current = leaves[-1]
    line, seen = [], set()
    node_id = current
    while node_id is not None:
        if node_id in seen:
            raise UsageError(f"{where}: its message tree has a cycle", fix=_EXPORT_FIX)
        seen.add(node_id)
        line.append(node_id)
        node = mapping.get(node_id)
        node_id = node.get("parent") if isinstance(node, dict) else None
        if node_id is not None and node_id not in mapping:
            raise UsageError(f"{where}: message {node_id!r} is missing", fix=_EXPORT_FIX)
    return line[::-1]


_EXPORT_FIX = "export the data from ChatGPT again"
_CHATGPT_ROLES = {"user", "assistant"}


def _chatgpt_message(node: Any, created: int) -> dict[str, Any] | None:
    """The canonical message for a node on the main line; None for hidden ones."""
    message = node.get("message") if isinstance(node, dict) else None
    if not isinstance(message, dict):
        return None
    role = (message.get("author") or {}).get("role")
    metadata = message.get("metadata") or {}
    if role not in _CHATGPT_ROLES or metadata.get("is_visually_hidden_from_conversation"):
        return None
    if message.get("recipient", "all") != "all":
        return None
    text = _chatgpt_text(message.get("content"))
    if not text:
        return None
    converted: dict[str, Any] = {
        "role": role,
        "content": text,
        "created_at": _ms(message.get("create_time")) or created,
    }
    if role == "assistant" and isinstance(metadata.get("model_slug"), str):
        converted["model"] = metadata["model_slug"]
    return converted


def _chatgpt_conversation(item: Any, where: str, imported: Imported) -> SessionRecord:
    if not isinstance(item, dict) or not isinstance(item.get("mapping"), dict):
        raise UsageError(f"{where} is not a ChatGPT conversation (no mapping)", fix=_EXPORT_FIX)
    session_id = item.get("conversation_id") or item.get("id")
    try:
        check_session_id(session_id)
    except UsageError:
        raise UsageError(f"{where} has no usable conversation_id or id", fix=_EXPORT_FIX) from None
    mapping = item["mapping"]
    line = _main_line(mapping, item.get("current_node"), where)
    created = _ms(item.get("create_time"))
    messages = []
    for node_id in line:
        converted = _chatgpt_message(mapping[node_id], created)
        if converted is not None:
            messages.append(converted)
        elif isinstance((mapping[node_id] or {}).get("message"), dict):
            imported.skipped_messages += 1
    on_line = set(line)
    imported.dropped_branch_messages += sum(
        1
        for key, node in mapping.items()
        if key not in on_line and isinstance((node or {}).get("message"), dict)
    )
    title = item.get("title") if isinstance(item.get("title"), str) else None
    return _record(
        session_id,
        messages,
        created,
        _ms(item.get("update_time")),
        title=title,
        imported_from="chatgpt",
    )


def parse_chatgpt(document: Any, source: str) -> Imported:
    """One session per conversation of a ChatGPT ``conversations.json``."""
    items = document if isinstance(document, list) else [document]
    imported = Imported()
    seen: set[str] = set()
    for number, item in enumerate(items, start=1):
        record = _chatgpt_conversation(item, f"{source}: conversation #{number}", imported)
        if record.session_id in seen:
            raise UsageError(
                f"{source} holds conversation {record.session_id!r} twice; nothing imported",
                fix=_EXPORT_FIX,
            )
        seen.add(record.session_id)
        imported.records.append(record)
    return imported


# llm (https://llm.datasette.io): its SQLite logs.db

_LLM_FIX = "point at llm's logs.db (llm logs path)"


def _llm_time(text: Any) -> int:
    if not isinstance(text, str) or not text:
        return 0
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _llm_rows(path: Path, source: str) -> tuple[dict[str, tuple], list[dict[str, Any]]]:
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise UsageError(f"cannot open {source}: {exc}", fix=_LLM_FIX) from None
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if not {"conversations", "responses"} <= tables:
            raise UsageError(
                f"{source} is not an llm logs database (no conversations/responses tables)",
                fix=_LLM_FIX,
            )
        have = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
        wanted = ["id", "model", "prompt", "system", "response", "conversation_id"]
        wanted += ["datetime_utc", "duration_ms", "input_tokens", "output_tokens"]
        wanted += ["resolved_model"]
        columns = [c if c in have else f"NULL AS {c}" for c in wanted]
        db.row_factory = sqlite3.Row
        responses = [
            dict(row)
            for row in db.execute(
                f"SELECT {', '.join(columns)} FROM responses ORDER BY datetime_utc, id"
            )
        ]
        db.row_factory = None
        conversations = {
            row[0]: (row[1], row[2])
            for row in db.execute("SELECT id, name, model FROM conversations")
        }
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"cannot read {source}: {exc}", fix=_LLM_FIX) from None
    finally:
        db.close()
    return conversations, responses


def _llm_messages(row: dict[str, Any], last_system: str | None) -> list[dict[str, Any]]:
    at = _llm_time(row["datetime_utc"])
    messages = []
    system = row["system"]
    if isinstance(system, str) and system and system != last_system:
        messages.append({"role": "system", "content": system, "created_at": at})
    messages.append({"role": "user", "content": str(row["prompt"] or ""), "created_at": at})
    reply: dict[str, Any] = {
        "role": "assistant",
        "content": str(row["response"] or ""),
        "created_at": at + int(row["duration_ms"] or 0),
        "model": row["resolved_model"] or row["model"] or "unknown",
    }
    usage = {k: row[k] for k in ("input_tokens", "output_tokens") if isinstance(row[k], int)}
    if usage:
        reply["usage"] = usage
    if isinstance(row["duration_ms"], int):
        reply["duration_ms"] = row["duration_ms"]
    messages.append(reply)
    return messages


def parse_llm(path: Path, source: str) -> Imported:
    """One session per llm conversation, its prompts and responses in order."""
    conversations, responses = _llm_rows(path, source)
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in responses:
        grouped.setdefault(row["conversation_id"] or row["id"], []).append(row)
    imported = Imported()
    for conversation_id, rows in grouped.items():
        try:
            check_session_id(conversation_id)
        except UsageError:
            raise UsageError(
                f"{source}: conversation {conversation_id!r} cannot be a session id",
                fix=_LLM_FIX,
            ) from None
        messages: list[dict[str, Any]] = []
        system = None
        for row in rows:
            messages += _llm_messages(row, system)
            system = row["system"] or system
        name, model = conversations.get(conversation_id, (None, None))
        imported.records.append(
            _record(
                conversation_id,
                messages,
                messages[0]["created_at"],
                messages[-1]["created_at"],
                title=name if isinstance(name, str) else None,
                model=model if isinstance(model, str) else None,
                imported_from="llm",
            )
        )
    return imported
