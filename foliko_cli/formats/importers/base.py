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
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from foliko_cli.errors import UsageError
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.record import (
    MAX_MESSAGE_CHARS,
    SessionRecord,
    fork_origin,
    new_metadata,
)
from foliko_cli.messages.stored import content_hash

HEAD_BYTES = 256 * 1024
SNIFFED = 8  # the items of a JSON export sniffing looks at
BOM = b"\xef\xbb\xbf"
BRANCH_SUFFIX = ".branch-"
LEFT_OUT_BRANCH = "branch(es)"
LEFT_OUT_FORK = "fork(s)"
LEFT_OUT_PART = "hidden, reasoning or unsupported item(s)"
LEFT_OUT_EMPTY = "empty conversation(s)"
LEFT_OUT_SUBAGENT = "subagent transcript(s)"


class Unreadable(Exception):
    """One conversation (or one file of a directory) that cannot be read."""


class Problem(NamedTuple):
    where: str
    reason: str


class Source:
    """One file (or stdin) to read: its JSON document or its JSON lines, each
    parsed at most once. A UTF-8 byte order mark is skipped.

    Memory stays near twice the largest value: a file's bytes are let go once
    its document is parsed, and its lines are read one at a time."""

    def __init__(self, name: str, path: Path | None = None, data: bytes | None = None):
        self.name = name
        self.path = path
        self._data = data
        self._document: Any = None
        self._parsed = False
        self._lines: list[tuple[int, Any]] | None = None

    def _cannot_read(self, exc: OSError) -> UsageError:
        return UsageError(f"cannot read {self.name}: {exc.strerror or exc}", fix="check the path")

    def data(self) -> memoryview:
        """The bytes (without a byte order mark), read whole."""
        if self._data is None:
            assert self.path is not None
            try:
                self._data = self.path.read_bytes()
            except OSError as exc:
                raise self._cannot_read(exc) from None
        view = memoryview(self._data)
        return view[len(BOM) :] if self._data.startswith(BOM) else view

    def head(self) -> bytes:
        """The first bytes, for sniffing, without reading a large file whole."""
        if self._data is not None or self.path is None:
            return bytes(self.data()[:HEAD_BYTES])
        try:
            with open(self.path, "rb") as handle:
                return handle.read(HEAD_BYTES).removeprefix(BOM)
        except OSError:
            return b""

    def document(self) -> Any:
        """The file as one JSON value, or None when it is not one."""
        if not self._parsed:
            self._parsed = True
            data = _lean(self.data())
            if self.path is not None:
                self._data = None  # read again if need be, rather than held twice
            self._document = _parsed(data)
        return self._document

    def _raw_lines(self) -> Iterator[tuple[int, memoryview | bytes]]:
        """``(line number, bytes)`` of each line, one at a time from a file."""
        if self._data is None and self.path is not None:
            try:
                with open(self.path, "rb") as handle:
                    yield from _file_lines(handle)
            except OSError as exc:
                raise self._cannot_read(exc) from None
            return
        self.data()
        assert self._data is not None
        data, start = self._data, len(BOM) if self._data.startswith(BOM) else 0
        for number in itertools.count(1):
            end = data.find(b"\n", start)
            yield number, memoryview(data)[start : len(data) if end == -1 else end]
            if end == -1:
                return
            start = end + 1

    def head_objects(self, limit: int = 8) -> list[dict[str, Any]]:
        """The first JSON-object lines (for sniffing JSONL)."""
        if not self.head().lstrip().startswith(b"{"):
            return []  # not lines of objects: no line is read, however long
        found = []
        for _number, line in self._raw_lines():
            if _blank(line):
                continue
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
            for number, line in self._raw_lines():
                if _blank(line):
                    continue
                value = _parsed(_lean(line), number)
                self._lines.append((number, value))
        return self._lines


def _file_lines(handle: Any, chunk: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """``(number, bytes)`` of each line of an open file, each read in one piece
    once its end is found (a long line is never held twice while it is read)."""
    start = len(BOM) if handle.read(len(BOM)) == BOM else 0
    handle.seek(start)
    number, scanned = 1, start
    while True:
        block = handle.read(chunk)
        end = block.find(b"\n")
        while end != -1:
            yield number, _read_at(handle, start, scanned + end - start)
            number, start = number + 1, scanned + end + 1
            end = block.find(b"\n", end + 1)
        scanned += len(block)
        if len(block) < chunk:
            if scanned > start:
                yield number, _read_at(handle, start, scanned - start)
            return
        handle.seek(scanned)


def _read_at(handle: Any, offset: int, length: int) -> bytes:
    position = handle.tell()
    handle.seek(offset)
    data: bytes = handle.read(length)
    handle.seek(position)
    return data


LEAN_ABOVE = MAX_MESSAGE_CHARS
"""Past this many bytes, JSON is decoded to text first and its bytes let go,
then parsed by the standard library: a little slower, but never holding a
large value three times over as orjson does (the bytes, its copy, the text)."""


def _lean(data: memoryview | bytes) -> memoryview | bytes | str | UnicodeDecodeError:
    """``data`` as it is, or (a large one) decoded, so that its bytes can go."""
    if len(data) <= LEAN_ABOVE:
        return data
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError as exc:
        return exc


def _parsed(data: memoryview | bytes | str | UnicodeDecodeError, line: int = 0) -> Any:
    """The JSON value (a line's: an Unreadable when it is none; a document's:
    None)."""
    import json

    try:
        if isinstance(data, UnicodeDecodeError):
            raise ValueError(f"not valid UTF-8: {data.reason}")
        if isinstance(data, str):
            return json.loads(data, parse_constant=_no_constant)
        return orjson.loads(data)
    except (ValueError, RecursionError) as exc:
        return Unreadable(f"line {line} is not JSON ({exc})") if line else None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _blank(line: memoryview | bytes) -> bool:
    return len(line) < 256 and not bytes(line).strip()


class Branch(NamedTuple):
    """A branch of a conversation: its own ``messages``, after the first ``at``
    messages of the line it leaves (``parent``: 0 the conversation's own line,
    N its Nth branch), of which ``turns`` are whole turns."""

    messages: list[dict[str, Any]]
    parent: int
    at: int
    turns: int


class Conversation:
    """One conversation as its tool kept it: the branch it showed (``messages``),
    the other branches (``Branch``es, or whole histories, root to leaf, which
    ``Imported.add`` splits), and what it knew about itself. ``forked_from`` is
    set when the tool itself forked it from another conversation, which it then
    keeps its own id beside."""

    def __init__(
        self,
        source_id: Any,
        messages: list[dict[str, Any]],
        *,
        branches: list[Branch] | list[list[dict[str, Any]]] | None = None,
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
    read, and counts of what was left out on purpose.

    ``branches`` says what becomes of a conversation's other branches:
    ``current`` counts them, ``all`` imports each as a session holding only its
    own messages, forked from the line it leaves (so a tree costs what its
    messages do, never a copy of a prefix per branch). ``main_only`` leaves out
    the conversations a tool forked from another one as well."""

    def __init__(self, fmt: str, *, main_only: bool = False, branches: str = "current"):
        self.format = fmt
        self.main_only = main_only
        self.branches = "current" if main_only else branches
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
        """The conversation's session, and (``branches`` all) one per other branch.

        A message over the size limit makes the conversation unreadable (named,
        left out); in a branch, only that branch is left out."""
        session_id = conversation.source_id
        try:
            check_session_id(session_id)
        except UsageError as exc:
            raise Unreadable(f"its id cannot name a session ({exc.problem})") from None
        if not conversation.messages:
            self.leave_out(LEFT_OUT_EMPTY)
            return
        if conversation.forked_from and self.main_only:
            self.leave_out(LEFT_OUT_FORK)
            return
        oversized = too_large(conversation.messages)
        if oversized:
            raise Unreadable(oversized)
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
        branches = _as_branches(conversation.messages, conversation.branches)
        if self.branches != "all":
            self.leave_out(LEFT_OUT_BRANCH, len(branches))
            return
        for number, (own, parent, shared, turns) in enumerate(branches, start=1):
            branch_id = f"{session_id}{BRANCH_SUFFIX}{number}"
            try:
                check_session_id(branch_id)
            except UsageError as exc:
                self.problem(f"{where}, branch {number}", exc.problem)
                continue
            oversized = too_large(own)
            if oversized:
                self.problem(f"{where}, branch {number}", oversized)
                continue
            parent_id = f"{session_id}{BRANCH_SUFFIX}{parent}" if parent else session_id
            branch = _record(branch_id, own, conversation, meta)
            branch.metadata.update(
                forked_from=parent_id,
                forked_at_message=shared,
                forked_at_turn=turns,
                **{OWN_MESSAGES_ONLY: True},
            )
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


OWN_MESSAGES_ONLY = "own_messages_only"
"""In an imported branch's metadata: it holds only its own messages; the
``forked_at_message`` before them are its ``forked_from`` session's."""


def too_large(messages: list[dict[str, Any]]) -> str | None:
    """Why a message cannot be imported (its text, or an attachment's data, is
    over the size a message may have), or None."""
    for number, message in enumerate(messages, start=1):
        sizes = [len(message.get("content") or "")]
        sizes += [len(part.get("data") or "") for part in message.get("attachments") or ()]
        if max(sizes) > MAX_MESSAGE_CHARS:
            return (
                f"message {number} ({message.get('role')}) holds {max(sizes):,} characters, "
                f"over the {MAX_MESSAGE_CHARS:,} a message may hold"
            )
    return None


def _as_branches(
    main: list[dict[str, Any]], branches: list[Branch] | list[list[dict[str, Any]]]
) -> list[Branch]:
    """``branches`` as ``Branch``es: whole histories are split where each leaves
    the lines before it (those that add nothing are dropped)."""
    found = [branch for branch in branches if isinstance(branch, Branch)]
    histories = [history for history in branches if not isinstance(history, Branch)]
    if histories:
        lines = _Lines(main)
        for placed in filter(None, map(lines.add, histories)):
            parent, shared, own = placed
            turns = fork_origin("", lines.full[parent], shared)["forked_at_turn"]
            found.append(Branch(own, parent, shared, turns))
    return found


class _Lines:
    """The lines of one conversation already kept (the main line first), as a
    trie of their messages: a line is placed in the time its own messages
    take, not in that of the prefix it shares."""

    def __init__(self, main: list[dict[str, Any]]):
        self.full: list[list[dict[str, Any]]] = []
        self._root: dict[Any, Any] = {}
        self._keys: dict[int, Any] = {}
        self.add(main)

    def _key(self, message: dict[str, Any]) -> Any:
        key = self._keys.get(id(message))
        if key is None:
            key = tuple(_comparable(message.get(name)) for name in _SAME)
            self._keys[id(message)] = key
        return key

    def add(self, messages: list[dict[str, Any]]) -> tuple[int, int, list[dict[str, Any]]] | None:
        """``(line it leaves, messages shared with it, its own messages)``, or
        None when it holds nothing a line kept does not (a hidden leaf)."""
        node, owner, shared = self._root, 0, 0
        while shared < len(messages):
            child = node.get(self._key(messages[shared]))
            if child is None:
                break
            node, owner = child
            shared += 1
        if shared == len(messages) and self.full:
            return None
        number = len(self.full)
        self.full.append(messages)
        for message in messages[shared:]:
            child = ({}, number)
            node[self._key(message)] = child
            node = child[0]
        return owner, shared, messages[shared:]


def _comparable(value: Any) -> Any:
    return value if value is None or isinstance(value, str) else orjson.dumps(value)


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
