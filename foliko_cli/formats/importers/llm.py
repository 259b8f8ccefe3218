"""llm (https://llm.datasette.io): its SQLite ``logs.db`` (``llm logs path``).

llm 0.36 keeps history as a content-addressed tree of ``messages`` (each
with its ``parts``: text, reasoning, tool calls, tool results, attachments),
``threads`` (a conversation: a name and the message it has reached) and
``turns`` (one model call: the messages it was given and those it added, its
model, tokens, duration and time). Earlier versions kept one ``responses``
row per call under a ``conversations`` row, with ``tool_calls``,
``tool_results`` and ``prompt_attachments`` beside it; a database upgraded to
0.36 holds both, and a conversation continued after the upgrade is a thread
with the conversation's id, whose messages include the old ones (their times
and models then come from the old rows).

A thread becomes a session named by its id. Turns of a thread that are not
on the line it reached are its branches; a thread llm forked from another
keeps its own id and records ``forked_from``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from foliko_cli.errors import UsageError
from foliko_cli.formats.importers.base import (
    LEFT_OUT_PART,
    Conversation,
    Imported,
    Source,
    Unreadable,
)
from foliko_cli.formats.importers.convert import (
    arguments,
    attachment,
    ms,
    usage,
)
from foliko_cli.formats.importers.tree import path_to

NAME = "llm"
LABEL = "llm's logs database (logs.db)"
FILES = ("*.db",)
SQLITE_HEADER = b"SQLite format 3\x00"
_FIX = "point at llm's logs.db (llm logs path)"
_NEW = {"threads", "turns", "messages", "parts"}
_OLD = {"conversations", "responses"}


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    return db


def sniff(source: Source) -> bool:
    if source.path is None or not source.head().startswith(SQLITE_HEADER):
        return False
    try:
        db = _open(source.path)
        try:
            tables = _tables(db)
        finally:
            db.close()
    except sqlite3.Error:
        return False
    return tables >= _NEW or tables >= _OLD


def read(source: Source, imported: Imported) -> None:
    if source.path is None:
        raise UsageError(f"{source.name} is not a file", fix=_FIX)
    if not source.head().startswith(SQLITE_HEADER):
        raise UsageError(f"cannot read {source.name}: it is not a SQLite database", fix=_FIX)
    try:
        db = _open(source.path)
    except sqlite3.Error as exc:
        raise UsageError(f"cannot open {source.name}: {exc}", fix=_FIX) from None
    try:
        tables = _tables(db)
        if not (tables >= _NEW or tables >= _OLD):
            raise UsageError(
                f"{source.name} is not an llm logs database "
                "(no threads/turns or conversations/responses tables)",
                fix=_FIX,
            )
        store = _Store(db, tables)
        legacy = _Legacy(store) if tables >= _OLD else None
        threads = store.threads() if tables >= _NEW else []
        reader = _Threads(store, legacy, imported) if threads else None
        for row in threads:
            assert reader is not None  # made when there are threads
            where = f"{source.name}: thread {row['id']}"
            with imported.reading(where):
                imported.add(reader.conversation(row), where)
        if legacy is not None:
            done = {row["id"] for row in threads}
            for conversation_id in legacy.conversations():
                if conversation_id not in done:
                    where = f"{source.name}: conversation {conversation_id}"
                    with imported.reading(where):
                        imported.add(legacy.conversation(conversation_id), where)
    except sqlite3.DatabaseError as exc:
        raise UsageError(f"cannot read {source.name}: {exc}", fix=_FIX) from None
    finally:
        db.close()


class _Store:
    """The rows of one database that conversations are built from."""

    def __init__(self, db: sqlite3.Connection, tables: set[str]):
        self.db = db
        self.tables = tables
        self._fragments: dict[int, str] = {}
        self._attachments: dict[str, dict[str, Any] | None] = {}

    def rows(self, sql: str, *args: Any) -> list[sqlite3.Row]:
        return self.db.execute(sql, args).fetchall()

    def columns(self, table: str) -> set[str]:
        return {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}

    def threads(self) -> list[sqlite3.Row]:
        return self.rows("SELECT * FROM threads ORDER BY rowid")

    def fragment(self, fragment_id: Any) -> str:
        if fragment_id not in self._fragments:
            found = self.rows("SELECT content FROM fragments WHERE id = ?", fragment_id)
            self._fragments[fragment_id] = str(found[0]["content"] or "") if found else ""
        return self._fragments[fragment_id]

    def attachment(self, attachment_id: Any) -> dict[str, Any] | None:
        """The attachment row as a foliko attachment part (None when it is gone)."""
        if attachment_id not in self._attachments:
            found = self.rows("SELECT * FROM attachments WHERE id = ?", attachment_id)
            self._attachments[attachment_id] = _attachment_part(found[0]) if found else None
        return self._attachments[attachment_id]


def _attachment_part(row: sqlite3.Row) -> dict[str, Any]:
    where = row["path"] or row["url"] or ""
    name = where.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0] or f"attachment-{row['id'][:12]}"
    content = row["content"]
    if content:
        return attachment(name, row["type"], data=bytes(content), url=row["url"])
    sha256 = row["id"] if row["path"] else None  # llm names a file by the hash of its bytes
    return attachment(name, row["type"], sha256=sha256, path=row["path"], url=row["url"])


# llm 0.36: threads, turns, messages, parts


class _Stamps:
    """What turns say about the messages they touched: when each was written
    (with, on the last message a turn wrote, its model, tokens and duration)
    and when each was first sent."""

    def __init__(self, tree: _Tree, turns: list[sqlite3.Row]):
        self.written: dict[str, dict[str, Any]] = {}
        self.sent: dict[str, int] = {}
        for turn in turns:
            with contextlib.suppress(Unreadable):  # its thread reports what is missing
                self._add(tree, turn)

    def _add(self, tree: _Tree, turn: sqlite3.Row) -> None:
        at = ms(turn["datetime_utc"])
        parent, tip = turn["parent_message_hash"], turn["tip_message_hash"]
        for hash_ in tree.up(parent, stop=lambda h: h in self.sent or h in self.written):
            self.sent[hash_] = at
        written = tree.up(tip, stop=lambda h: h == parent or h in self.written)
        duration = turn["duration_ms"] if isinstance(turn["duration_ms"], int) else None
        for hash_ in written:
            self.written[hash_] = {"created_at": at + (duration or 0)}
        if not written:
            return
        reply = self.written[written[0]]
        reply["model"] = turn["resolved_model"] or turn["model"] or "unknown"
        details = orjson.loads(turn["token_details"]) if turn["token_details"] else {}
        if turn["input_tokens"] is not None or turn["output_tokens"] is not None:
            reply["usage"] = usage(
                {
                    "input": turn["input_tokens"],
                    "output": turn["output_tokens"],
                    "cached": (details.get("input_tokens_details") or {}).get("cached_tokens"),
                    "reasoning": (details.get("output_tokens_details") or {}).get(
                        "reasoning_tokens"
                    ),
                },
                input_key="input",
                output_key="output",
                cached_key="cached",
                reasoning_key="reasoning",
            )
        if duration is not None:
            reply["duration_ms"] = duration

    def apply(self, message: dict[str, Any], hash_: str, *, written_only: bool = False) -> None:
        found = self.written.get(hash_)
        if found is not None:
            message.update(found if message["role"] == "assistant" else _when(found))
        elif not written_only and hash_ in self.sent:
            message["created_at"] = self.sent[hash_]


def _when(stamp: dict[str, Any]) -> dict[str, Any]:
    return {"created_at": stamp["created_at"]}


class _Threads:
    """The threads of a database, each read as a conversation."""

    def __init__(self, store: _Store, legacy: _Legacy | None, imported: Imported):
        self.store = store
        self.legacy = legacy
        self.imported = imported
        self.tree = _Tree(store)
        self._converted: dict[str, list[dict[str, Any]]] = {}
        everyone = store.rows("SELECT * FROM turns ORDER BY datetime_utc, id")
        self.everyone = _Stamps(self.tree, everyone)
        self.turns: dict[str, list[sqlite3.Row]] = {}
        for turn in everyone:
            self.turns.setdefault(turn["thread_id"], []).append(turn)

    def conversation(self, thread: sqlite3.Row) -> Conversation:
        turns = self.turns.get(thread["id"], [])
        own = _Stamps(self.tree, turns)
        main = self.tree.chain(thread["tip_message_hash"]) if thread["tip_message_hash"] else []
        on_main = set(main)
        tips = dict.fromkeys(t["tip_message_hash"] for t in turns if t["tip_message_hash"])
        chains = [self.tree.chain(tip) for tip in tips if tip not in on_main]
        inner = {h for chain in chains for h in chain[:-1]}
        old = self.legacy.messages(thread["id"], rebuilt=True) if self.legacy else []
        at = ms(thread["datetime_utc"])
        models = [turn["resolved_model"] or turn["model"] for turn in turns]
        return Conversation(
            thread["id"],
            self._messages(main, own, old, at),
            branches=[self._messages(c, own, old, at) for c in chains if c[-1] not in inner],
            title=thread["name"],
            model=next((m for m in reversed(models) if m), None),
            forked_from=thread["forked_from"],
        )

    def _messages(
        self, chain: list[str], own: _Stamps, old: list[dict[str, Any]], at: int
    ) -> list[dict[str, Any]]:
        """The chain's messages, dated by what its own turns wrote, then by the
        conversation llm kept before 0.36, then by what its own turns sent, then
        by any turn (a fork shares the messages of the thread it came from)."""
        placed: list[tuple[dict[str, Any], str]] = []
        for hash_ in chain:
            if hash_ not in self._converted:
                role = self.tree.role(hash_)
                self._converted[hash_] = _converted(self.store, hash_, role, self.imported)
            for converted in self._converted[hash_]:
                message = dict(converted)
                own.apply(message, hash_, written_only=True)
                placed.append((message, hash_))
        _date_from_legacy([message for message, _ in placed], old)
        for message, hash_ in placed:
            if "created_at" not in message:
                own.apply(message, hash_)
            if "created_at" not in message:
                self.everyone.apply(message, hash_)
            message.setdefault("created_at", at)
        return [message for message, _ in placed]


class _Tree:
    """The messages table, read as parent links."""

    def __init__(self, store: _Store):
        self.store = store
        self._parents: dict[str, Any] = {}
        self._roles: dict[str, str] = {}

    def _load(self, hash_: str) -> None:
        found = self.store.rows("SELECT parent_hash, role FROM messages WHERE hash = ?", hash_)
        if not found:
            raise Unreadable(f"message {hash_} is missing")
        self._parents[hash_] = found[0]["parent_hash"]
        self._roles[hash_] = found[0]["role"]

    def role(self, hash_: str) -> str:
        return self._roles[hash_]

    def chain(self, tip: str) -> list[str]:
        """The hashes from the root to ``tip``."""
        node: Any = tip
        while node is not None and node not in self._parents:
            self._load(node)
            node = self._parents[node]
        return path_to(self._parents, tip)

    def up(self, start: Any, stop: Callable[[Any], bool]) -> list[str]:
        """The hashes from ``start`` towards the root, until ``stop`` holds (a turn
        stops at the messages of the turns before it: the walk is short)."""
        found: list[str] = []
        node = start
        while node is not None and not stop(node):
            if node not in self._parents:
                self._load(node)
            if len(found) > len(self._parents):
                raise Unreadable("its message tree has a cycle")
            found.append(node)
            node = self._parents[node]
        return found


def _date_from_legacy(messages: list[dict[str, Any]], old: list[dict[str, Any]]) -> None:
    """Times, models and attachments for the messages a thread took over from the
    conversation llm kept before 0.36: llm rebuilt them from the old rows, in
    order, so they are matched in order."""
    found = iter(old)
    match = next(found, None)
    for message in messages:
        if match is None:
            return
        if "created_at" in message or (match["role"], match["content"]) != (
            message["role"],
            message["content"],
        ):
            continue
        for key in ("created_at", "model", "usage", "duration_ms", "attachments"):
            if key in match:
                message.setdefault(key, match[key])
        match = next(found, None)


def _parts(store: _Store, hash_: str) -> list[dict[str, Any]]:
    parts = []
    for row in store.rows(
        "SELECT type, text, payload FROM parts WHERE message_hash = ? ORDER BY position", hash_
    ):
        payload = orjson.loads(row["payload"]) if row["payload"] else {}
        payload["type"] = row["type"]
        if row["text"] is not None:
            payload["text"] = row["text"]
        elif "text_ref" in payload:
            payload["text"] = "".join(
                piece["literal"] if "literal" in piece else store.fragment(piece.get("fragment"))
                for piece in payload["text_ref"]
            )
        parts.append(payload)
    return parts


def _converted(store: _Store, hash_: str, role: str, imported: Imported) -> list[dict[str, Any]]:
    """One llm message as foliko messages (a message of tool results is one each)."""
    texts: list[str] = []
    calls, results, files = [], [], []
    for number, part in enumerate(_parts(store, hash_)):
        kind = part["type"]
        if kind == "text":
            texts.append(str(part.get("text") or ""))
        elif kind == "tool_call":
            call_id = part.get("tool_call_id") or f"{hash_}-{number}"
            name = str(part.get("name") or "")
            calls.append(
                {"id": call_id, "name": name, "arguments": arguments(part.get("arguments"))}
            )
        elif kind == "tool_result":
            result: dict[str, Any] = {
                "role": "tool",
                "content": str(part.get("output") or ""),
                "tool_call_id": part.get("tool_call_id") or "",
                "name": str(part.get("name") or ""),
            }
            if part.get("exception"):
                result["is_error"] = True
                result["content"] = result["content"] or str(part["exception"])
            shown = [store.attachment(a.get("id")) for a in part.get("attachments") or ()]
            if any(shown):
                result["attachments"] = [a for a in shown if a]
            results.append(result)
        elif kind == "attachment":
            shown_file = store.attachment((part.get("attachment") or {}).get("id"))
            if shown_file:
                files.append(shown_file)
        else:
            imported.leave_out(LEFT_OUT_PART)
    if results:
        return results
    message: dict[str, Any] = {
        "role": role if role in _ROLES else "user",
        "content": "".join(texts),
    }
    if calls and role == "assistant":
        message["tool_calls"] = calls
    if files:
        message["attachments"] = files
    return [message]


_ROLES = {"system", "user", "assistant"}


# before llm 0.36: conversations and responses


class _Legacy:
    def __init__(self, store: _Store):
        self.store = store
        have = store.columns("responses")
        wanted = ["id", "model", "prompt", "system", "response", "conversation_id"]
        wanted += ["datetime_utc", "duration_ms", "input_tokens", "output_tokens"]
        wanted += ["resolved_model"]
        self._columns = ", ".join(c if c in have else f"NULL AS {c}" for c in wanted)
        self._names = {
            row["id"]: (row["name"], row["model"])
            for row in store.rows("SELECT id, name, model FROM conversations")
        }
        self._grouped: dict[str, list[sqlite3.Row]] | None = None

    def conversations(self) -> dict[str, list[sqlite3.Row]]:
        if self._grouped is None:
            self._grouped = {}
            for row in self.store.rows(
                f"SELECT {self._columns} FROM responses ORDER BY datetime_utc, id"
            ):
                self._grouped.setdefault(row["conversation_id"] or row["id"], []).append(row)
        return self._grouped

    def messages(self, conversation_id: str, *, rebuilt: bool = False) -> list[dict[str, Any]]:
        """The conversation's messages, its system prompt where it changes (or,
        ``rebuilt``, before each prompt that had one, as llm 0.36 rebuilds an
        old conversation it continues)."""
        messages: list[dict[str, Any]] = []
        system = None
        for row in self.conversations().get(conversation_id, ()):
            messages += self._response(row, None if rebuilt else system)
            system = self._system(row) or system
        return messages

    def conversation(self, conversation_id: str) -> Conversation:
        name, model = self._names.get(conversation_id, (None, None))
        return Conversation(
            conversation_id, self.messages(conversation_id), title=name, model=model
        )

    def _fragments(self, table: str, response_id: str) -> list[str]:
        if table not in self.store.tables:
            return []
        return [
            str(row["content"] or "")
            for row in self.store.rows(
                f"SELECT f.content FROM {table} t JOIN fragments f ON f.id = t.fragment_id "
                f'WHERE t.response_id = ? ORDER BY t."order"',
                response_id,
            )
        ]

    def _system(self, row: sqlite3.Row) -> str:
        bits = [*self._fragments("system_fragments", row["id"]), row["system"] or ""]
        return "\n\n".join(bit.strip() for bit in bits if bit.strip())

    def _rows(self, table: str, response_id: str) -> list[sqlite3.Row]:
        if table not in self.store.tables:
            return []
        return self.store.rows(f"SELECT * FROM {table} WHERE response_id = ?", response_id)

    def _response(self, row: sqlite3.Row, last_system: str | None) -> list[dict[str, Any]]:
        at = ms(row["datetime_utc"])
        messages: list[dict[str, Any]] = []
        system = self._system(row)
        if system and system != last_system:
            messages.append({"role": "system", "content": system, "created_at": at})
        for result in self._rows("tool_results", row["id"]):
            message = {
                "role": "tool",
                "content": str(result["output"] or ""),
                "tool_call_id": result["tool_call_id"] or "",
                "name": str(result["name"] or ""),
                "created_at": at,
            }
            if "exception" in result.keys() and result["exception"]:  # noqa: SIM118 (a Row)
                message["is_error"] = True
            messages.append(message)
        prompt = "\n".join([*self._fragments("prompt_fragments", row["id"]), row["prompt"] or ""])
        files = [
            self.store.attachment(link["attachment_id"])
            for link in sorted(self._rows("prompt_attachments", row["id"]), key=_order)
        ]
        if prompt.strip() or any(files):
            asked: dict[str, Any] = {
                "role": "user",
                "content": prompt.strip("\n"),
                "created_at": at,
            }
            if any(files):
                asked["attachments"] = [f for f in files if f]
            messages.append(asked)
        reply: dict[str, Any] = {
            "role": "assistant",
            "content": str(row["response"] or ""),
            "created_at": at + int(row["duration_ms"] or 0),
            "model": row["resolved_model"] or row["model"] or "unknown",
        }
        calls = [
            {
                "id": call["tool_call_id"] or f"{row['id']}-{number}",
                "name": str(call["name"] or ""),
                "arguments": arguments(call["arguments"]),
            }
            for number, call in enumerate(self._rows("tool_calls", row["id"]))
        ]
        if calls:
            reply["tool_calls"] = calls
        counts = {k: row[k] for k in ("input_tokens", "output_tokens") if isinstance(row[k], int)}
        if counts:
            reply["usage"] = counts
        if isinstance(row["duration_ms"], int):
            reply["duration_ms"] = row["duration_ms"]
        messages.append(reply)
        return messages


def _order(row: sqlite3.Row) -> Any:
    return row["order"] if row["order"] is not None else 0
