"""The contract every importer follows: the source it reads, the conversations it
finds, and what an import collected.

A format is a module of this package (conversions they share are in
convert.py, message trees in tree.py) with ``NAME`` (its ``--format`` name),
``LABEL`` (what its files are, for messages), ``FILES`` (the glob patterns of
its files in a directory), ``sniff(source) -> bool`` (does this file look like
the format: cheap, never raises) and ``read(source, imported)``. ``read``
hands each conversation it finds to ``imported.add`` inside
``imported.reading(where)``, so one conversation that cannot be read is
reported and the others are still imported; it raises a UsageError only when
the whole source is not in its format.

Everything is built from the source alone (no clock reads), so importing the
same file twice gives the same records, and the second import changes nothing.
The records carry no ``saved_at``: importing another tool's history is a use
of the session, which is saved at the import's time (foliko's own export,
foliko.py, keeps the time foliko last used it).
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from foliko_cli.errors import UsageError
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.record import SessionRecord, fork_origin, new_metadata
from foliko_cli.messages.stored import content_hash

HEAD_BYTES = 256 * 1024
SNIFFED = 8  # the items of a JSON export sniffing looks at
BRANCH_SUFFIX = ".branch-"
LEFT_OUT_BRANCH = "branch(es) and fork(s)"
LEFT_OUT_PART = "hidden, reasoning or unsupported item(s)"
LEFT_OUT_EMPTY = "empty conversation(s)"
LEFT_OUT_SUBAGENT = "subagent transcript(s)"


class Unreadable(Exception):
    """One conversation (or one file of a directory) that cannot be read."""


class Problem(NamedTuple):
    where: str
    reason: str


class Source:
    """One file (or stdin) to read: its bytes, its JSON document or its JSON lines,
    each read and parsed at most once."""

    def __init__(self, name: str, path: Path | None = None, data: bytes | None = None):
        self.name = name
        self.path = path
        self._data = data
        self._document: Any = None
        self._parsed = False
        self._lines: list[tuple[int, Any]] | None = None

    def data(self) -> bytes:
        if self._data is None:
            assert self.path is not None
            try:
                self._data = self.path.read_bytes()
            except OSError as exc:
                raise UsageError(
                    f"cannot read {self.name}: {exc.strerror or exc}", fix="check the path"
                ) from None
        return self._data

    def head(self) -> bytes:
        """The first bytes, for sniffing, without reading a large file whole."""
        if self._data is not None or self.path is None:
            return self.data()[:HEAD_BYTES]
        try:
            with open(self.path, "rb") as handle:
                return handle.read(HEAD_BYTES)
        except OSError:
            return b""

    def document(self) -> Any:
        """The file as one JSON value, or None when it is not one."""
        if not self._parsed:
            self._parsed = True
            try:
                self._document = orjson.loads(self.data())
            except orjson.JSONDecodeError:
                self._document = None
        return self._document

    def head_objects(self, limit: int = 8) -> list[dict[str, Any]]:
        """The first JSON-object lines that fit in the head (for sniffing JSONL)."""
        head = self.head()
        if b"\n" not in head and len(head) == HEAD_BYTES:
            head = self.data()  # a first line longer than the head: it is read whole anyway
        found = []
        for line in head.split(b"\n")[:-1]:
            if line.strip():
                try:
                    value = orjson.loads(line)
                except orjson.JSONDecodeError:
                    return []
                if not isinstance(value, dict):
                    return []
                found.append(value)
                if len(found) == limit:
                    break
        return found

    def lines(self) -> list[tuple[int, Any]]:
        """``(line number, value)`` for each non-blank line; a line that is not
        JSON comes with an Unreadable as its value."""
        if self._lines is None:
            self._lines = []
            for number, line in enumerate(self.data().split(b"\n"), start=1):
                if not line.strip():
                    continue
                try:
                    self._lines.append((number, orjson.loads(line)))
                except orjson.JSONDecodeError as exc:
                    self._lines.append((number, Unreadable(f"line {number} is not JSON ({exc})")))
        return self._lines


class Conversation:
    """One conversation as its tool kept it: the branch it showed (``messages``),
    the other branches (each a whole history, root to leaf), and what it knew
    about itself. ``forked_from`` is set when the tool itself forked it from
    another conversation, which it then keeps its own id beside."""

    def __init__(
        self,
        source_id: Any,
        messages: list[dict[str, Any]],
        *,
        branches: list[list[dict[str, Any]]] | None = None,
        title: Any = None,
        created: int = 0,
        updated: int = 0,
        model: Any = None,
        forked_from: str | None = None,
        extra: dict[str, Any] | None = None,
    ):
        self.source_id = source_id
        self.messages = messages
        self.branches = branches or []
        self.title = title if isinstance(title, str) and title.strip() else None
        self.created = created
        self.updated = updated
        self.model = model if isinstance(model, str) and model else None
        self.forked_from = forked_from
        self.extra = extra or {}


class Imported:
    """What one import read: the records, the conversations that could not be
    read, and counts of what was left out on purpose."""

    def __init__(self, fmt: str, *, main_only: bool = False):
        self.format = fmt
        self.main_only = main_only
        self.records: list[SessionRecord] = []
        self.unreadable: list[Problem] = []
        self.left_out: collections.Counter[str] = collections.Counter()
        self._by_id: dict[str, tuple[str, str]] = {}

    def leave_out(self, what: str, count: int = 1) -> None:
        if count:
            self.left_out[what] += count

    def problem(self, where: str, reason: str) -> None:
        self.unreadable.append(Problem(where, reason))

    @contextlib.contextmanager
    def reading(self, where: str) -> Iterator[None]:
        """Report a conversation that cannot be read, and go on with the next.

        Besides Unreadable, the errors malformed data raises while it is picked
        apart are reported too: a file from another version of a tool should
        name the conversation it could not read, never end in a traceback."""
        try:
            yield
        except Unreadable as exc:
            self.problem(where, str(exc))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            self.problem(where, f"unexpected data ({type(exc).__name__}: {exc})")

    def add(self, conversation: Conversation, where: str) -> None:
        """The conversation's session, and one per branch unless ``main_only``."""
        session_id = conversation.source_id
        try:
            check_session_id(session_id)
        except UsageError as exc:
            raise Unreadable(f"its id cannot name a session ({exc.problem})") from None
        if not conversation.messages:
            self.leave_out(LEFT_OUT_EMPTY)
            return
        if conversation.forked_from and self.main_only:
            self.leave_out(LEFT_OUT_BRANCH)
            return
        meta = {
            "title": conversation.title,
            "model": conversation.model,
            "imported_from": self.format,
            "forked_from": conversation.forked_from,
            **conversation.extra,
        }
        self._keep(
            where, _record(session_id, conversation.messages, conversation, meta), session_id
        )
        branches = _distinct_branches(conversation.messages, conversation.branches)
        if self.main_only:
            self.leave_out(LEFT_OUT_BRANCH, len(branches))
            return
        main = conversation.messages
        for number, messages in enumerate(branches, start=1):
            branch_id = f"{session_id}{BRANCH_SUFFIX}{number}"
            try:
                check_session_id(branch_id)
            except UsageError as exc:
                self.problem(f"{where}, branch {number}", exc.problem)
                continue
            branch = _record(branch_id, messages, conversation, meta)
            branch.metadata.update(fork_origin(session_id, main, _shared(main, messages)))
            self._keep(where, branch, branch_id)

    def link_forks(self) -> None:
        """Record where each conversation that its tool forked from another one
        of this import leaves that one's history (``fork_origin``)."""
        by_id = {record.session_id: record for record in self.records}
        for record in self.records:
            forked_from = record.metadata.get("forked_from")
            parent = by_id.get(forked_from) if isinstance(forked_from, str) else None
            if parent is not None and "forked_at_message" not in record.metadata:
                shared = _shared(parent.messages, record.messages)
                record.metadata.update(fork_origin(parent.session_id, parent.messages, shared))

    def _keep(self, where: str, record: SessionRecord, session_id: str) -> None:
        digest = content_hash(record)
        earlier = self._by_id.get(session_id)
        if earlier is None:
            self._by_id[session_id] = (where, digest)
            self.records.append(record)
        elif earlier[1] != digest:
            self.problem(
                where,
                f"its id {session_id!r} is also the id of {earlier[0]}, with other "
                "messages; only the first was imported",
            )


def _distinct_branches(
    main: list[dict[str, Any]], branches: list[list[dict[str, Any]]]
) -> list[list[dict[str, Any]]]:
    """The branches that hold something the main line and the earlier branches do
    not (a leaf hidden from view makes a "branch" that is only a prefix)."""
    kept: list[list[dict[str, Any]]] = []
    for branch in branches:
        if not branch or any(branch == line[: len(branch)] for line in (main, *kept)):
            continue
        kept.append(branch)
    return kept


def _shared(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> int:
    """How many messages two lines of one conversation begin with alike."""
    count = 0
    for one, other in zip(first, second, strict=False):
        if any(one.get(key) != other.get(key) for key in _SAME):
            break
        count += 1
    return count


_SAME = ("role", "content", "tool_calls", "tool_call_id")


def _record(
    session_id: str, messages: list[dict[str, Any]], source: Conversation, meta: dict[str, Any]
) -> SessionRecord:
    created = source.created or messages[0].get("created_at", 0)
    updated = max(source.updated, messages[-1].get("created_at", 0)) or created
    metadata = new_metadata(created)
    metadata.update({"last_active": updated, "message_count": len(messages)})
    metadata.update({key: value for key, value in meta.items() if value})
    return SessionRecord(session_id, messages=messages, metadata=metadata)  # saved: now
