"""Message trees: the line a tool showed, and its other branches.

Tools that let a prompt be edited or an answer regenerated keep each
conversation as a tree of messages linked to their parents. The line from the
root to the message shown last is the conversation; every other leaf ends a
branch. ``split`` gives each branch as its own messages and the point where it
leaves a line before it, in time and memory that grow with the tree's nodes,
never with a prefix repeated per branch (a 2,000-node line with a side branch
at every node is 4,000 messages, not two million).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from foliko_cli.formats.importers.base import Branch, Unreadable

Merge = Callable[[dict[str, Any], dict[str, Any]], bool]
"""Folds a message into the one before it on its line (True), or not (False)."""


def lines(
    parents: dict[str, Any], current: Any, *, strict: bool = True
) -> tuple[list[Any], list[tuple[Any, list[Any]]]]:
    """The path to ``current`` (the last leaf when it is unknown) and, for every
    other leaf in the order of ``parents`` (node id -> parent id or None), the
    node where its path joins one found before (None: a root of its own) and
    the nodes after it. A parent that is not a node is an error when
    ``strict``, else a root."""
    children: set[Any] = set()
    for node, parent in parents.items():
        if parent is not None and parent in parents:
            children.add(parent)
        elif parent is not None and strict:
            raise Unreadable(f"message {parent!r}, the parent of {node!r}, is missing")
    leaves = [node for node in parents if node not in children]
    if current not in parents:
        if not leaves:
            raise Unreadable("it has no message shown last and no last message")
        current = leaves[-1]
    main = path_to(parents, current)
    seen = set(main)
    others = []
    for leaf in leaves:
        if leaf == current:
            continue
        own: list[Any] = []
        mine: set[Any] = set()
        node = leaf
        while node is not None and node in parents and node not in seen:
            seen.add(node)
            mine.add(node)
            own.append(node)
            node = parents[node]
        if node in mine:
            raise Unreadable("its message tree has a cycle")
        joined = node if node is not None and node in parents else None
        others.append((joined, own[::-1]))
    return main, others


def path_to(parents: dict[str, Any], node: Any) -> list[str]:
    path, seen = [], set()
    while node is not None and node in parents:
        if node in seen:
            raise Unreadable("its message tree has a cycle")
        seen.add(node)
        path.append(node)
        node = parents[node]
    return path[::-1]


class _Line(NamedTuple):
    messages: list[dict[str, Any]]
    base: int  # messages before ``messages``, on the line it leaves
    users: list[int]  # user messages among the first base + i messages, for each i


def split(
    parents: dict[str, Any],
    current: Any,
    converted: dict[Any, list[dict[str, Any]]],
    *,
    strict: bool = True,
    merge: Merge | None = None,
) -> tuple[list[dict[str, Any]], list[Branch]]:
    """The messages of the line shown, and every other branch that holds a
    message of its own (a leaf hidden from view, or an answer regenerated
    alike, does not), as a ``Branch``. ``merge`` folds a node's message into
    the one before it on the same branch (the records of one streamed answer)."""
    main, others = lines(parents, current, strict=strict)
    where: dict[Any, tuple[int, int]] = {}  # node -> (line, messages up to it)
    found = [_extend(_Line([], 0, [0]), 0, main, converted, where, merge)]
    branches: list[Branch] = []
    for joined, path in others:
        parent, at = where[joined] if joined is not None else (0, 0)
        base = found[parent]
        users = base.users[at - base.base]
        line = _extend(_Line([], at, [users]), len(found), path, converted, where, merge)
        if not line.messages or _continues(base, line):
            for node in path:
                where[node] = (parent, at)
            continue
        found.append(line)
        branches.append(Branch(line.messages, parent, at, _turns(base, at, users)))
    return found[0].messages, branches


def _extend(
    line: _Line,
    number: int,
    path: Iterable[Any],
    converted: dict[Any, list[dict[str, Any]]],
    where: dict[Any, tuple[int, int]],
    merge: Merge | None,
) -> _Line:
    messages, users = line.messages, line.users
    for node in path:
        for message in converted.get(node, ()):
            if merge is None or not messages or not merge(messages[-1], message):
                messages.append(message)
                users.append(users[-1] + (message.get("role") == "user"))
        where[node] = (number, line.base + len(messages))
    return line


def _continues(parent: _Line, line: _Line) -> bool:
    """Whether ``line`` only repeats what ``parent`` holds after the fork."""
    start = line.base - parent.base
    if start < 0:
        return False
    ahead = parent.messages[start : start + len(line.messages)]
    return len(ahead) == len(line.messages) and all(
        all(one.get(key) == other.get(key) for key in ("role", "content", "tool_calls"))
        for one, other in zip(ahead, line.messages, strict=True)
    )


def _turns(parent: _Line, at: int, users: int) -> int:
    """The parent's turns a branch leaving it after ``at`` messages shares whole
    (``fork_origin``'s count): a turn ends where the next user message starts."""
    index = at - parent.base
    following = parent.messages[index] if 0 <= index < len(parent.messages) else None
    whole = following is None or following.get("role") == "user"
    return users if whole else max(users - 1, 0)


def last_descendant(start: Any, children: Callable[[Any], list[Any]]) -> Any:
    """Follow the last child from ``start`` down to a leaf (the branch a tool
    that shows the newest version at each fork would show)."""
    node, seen = start, set()
    while True:
        seen.add(node)
        below = [child for child in children(node) if child not in seen]
        if not below:
            return node
        node = below[-1]
