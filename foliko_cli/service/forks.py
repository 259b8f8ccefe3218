"""The fork tree: which session was forked from which, and where.

A fork records its origin in its metadata (``storage.record.fork_origin``):
the parent's id and where it left the parent's history. The tree is read
from every session's state (never their messages); a parent that is no
longer stored (deleted, renamed) leaves its forks as roots that still name
it, and a loop of origins (ids reused after a rename) is cut where it closes.
"""

from __future__ import annotations

from typing import Any

from foliko_cli.errors import CorruptSessionError, SessionNotFoundError
from foliko_cli.messages.ids import check_session_id, is_internal
from foliko_cli.service.base import ServiceBase
from foliko_cli.storage import capabilities


class ForksMixin(ServiceBase):
    """``session_tree``."""

    async def session_tree(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Every session (or only ``session_id``'s family: its oldest ancestor
        still stored and everything forked from that), depth first, each a row:
        ``session_id``, ``parent`` (the id it was forked from; None for an
        original), ``turn`` (how many of the parent's turns it shares whole) and
        ``message`` (where its own messages begin), ``depth`` (0 for a root),
        ``parent_missing`` (the parent is not stored), ``message_count``,
        ``created_at``; a damaged session is a root with ``error``."""
        if session_id is not None:
            check_session_id(session_id)
        nodes: dict[str, dict[str, Any]] = {}
        for sid in sorted(s for s in await self.storage.session_ids() if not is_internal(s)):
            try:
                state = await capabilities.load_state(self.storage, sid)
            except CorruptSessionError as exc:
                nodes[sid] = _node(sid, {}, 0, error=exc.reason)
                continue
            if state is not None:
                nodes[sid] = _node(sid, state.metadata, state.first_seq)
        if session_id is not None and session_id not in nodes:
            raise SessionNotFoundError(session_id)
        parents = _parents(nodes)
        children: dict[str | None, list[str]] = {}
        for sid in nodes:
            children.setdefault(parents[sid], []).append(sid)
        for ids in children.values():
            ids.sort(key=lambda s: (nodes[s]["created_at"], s))
        roots = children.get(None, [])
        if session_id is not None:
            root, parent = session_id, parents[session_id]
            while parent is not None:
                root, parent = parent, parents[parent]
            roots = [root]
        rows: list[dict[str, Any]] = []
        stack = [(root, 0) for root in reversed(roots)]
        while stack:
            sid, depth = stack.pop()
            rows.append({**nodes[sid], "depth": depth})
            stack.extend((child, depth + 1) for child in reversed(children.get(sid, [])))
        return rows


def _node(session_id: str, metadata: dict[str, Any], count: int, **extra: Any) -> dict[str, Any]:
    parent = metadata.get("forked_from")
    created = metadata.get("created_at")
    return {
        "session_id": session_id,
        "parent": parent if isinstance(parent, str) and parent else None,
        "turn": _count(metadata.get("forked_at_turn")),
        "message": _count(metadata.get("forked_at_message")),
        "parent_missing": False,
        "message_count": count,
        "created_at": created if type(created) is int else 0,
        **extra,
    }


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _parents(nodes: dict[str, dict[str, Any]]) -> dict[str, str | None]:
    """Each session's parent in the tree: the one it names when that is stored,
    else None (marking it ``parent_missing``). A loop is cut at the session
    whose origin closes it, found walking up from the first id of the loop."""
    parents: dict[str, str | None] = {}
    for sid, node in nodes.items():
        named = node["parent"]
        if named is not None and named not in nodes:
            node["parent_missing"] = True
        parents[sid] = named if named in nodes and named != sid else None
    for start in nodes:
        seen: list[str] = []
        current: str | None = start
        while current is not None and current not in seen:
            seen.append(current)
            current = parents[current]
        if current is not None:  # walked into a loop: cut it above where it closed
            parents[seen[-1]] = None
    return parents
