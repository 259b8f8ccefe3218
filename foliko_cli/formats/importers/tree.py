"""Message trees: the line a tool showed, and its other branches.

Tools that let a prompt be edited or an answer regenerated keep each
conversation as a tree of messages linked to their parents. The line from the
root to the message shown last is the conversation; every other leaf ends a
branch, which is imported whole (root to leaf) as a fork of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from foliko_cli.formats.importers.base import Unreadable


def lines(
    parents: dict[str, Any], current: Any, *, strict: bool = True
) -> tuple[list[str], list[list[str]]]:
    """The path to ``current`` (the last leaf when it is unknown) and the paths
    to every other leaf, in the order of ``parents`` (node id -> parent id or
    None). A parent that is not a node is an error when ``strict``, else a root."""
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
    return main, [path_to(parents, leaf) for leaf in leaves if leaf != current]


def path_to(parents: dict[str, Any], node: Any) -> list[str]:
    path, seen = [], set()
    while node is not None and node in parents:
        if node in seen:
            raise Unreadable("its message tree has a cycle")
        seen.add(node)
        path.append(node)
        node = parents[node]
    return path[::-1]


def messages_along(
    path: Iterable[str], converted: dict[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    return [message for node in path for message in converted.get(node, ())]


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
